//! What the sources that fetch from the network share: the HTTP client,
//! the guard on where it may connect, the cap on what it reads, and the
//! retry schedule after a failure.
//!
//! Role: `source::jwks` (RequestAuthentications' key sets) and
//! `source::spiffe_bundle` (the mesh config's SPIFFE bundles) fetch URLs an
//! operator or a policy author wrote, from inside the control plane. One
//! [`HttpClient`] serves both; servers are checked against the system's
//! roots (so `SSL_CERT_FILE` can name others), as istiod does.
//!
//! Invariants: a response is read up to [`MAX_BODY`]; a URL whose host is,
//! or resolves only to, a link-local or cloud metadata address is never
//! fetched (such addresses serve instance credentials, not keys or roots).

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::{GaiResolver, Name};
use hyper_util::rt::TokioExecutor;

/// The most a fetch reads.
pub const MAX_BODY: usize = 1 << 20;
/// The first retry after a failure, and the longest.
pub const RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between retries.
pub const RETRY_MAX: Duration = Duration::from_secs(60);

/// The client sources fetch with: `http://` and `https://`, HTTP/1.1.
pub type HttpClient = Client<HttpsConnector<HttpConnector<GuardedResolver>>, Empty<Bytes>>;

/// A client that checks servers against the system's root certificates.
pub fn client() -> HttpClient {
    let builder = match hyper_rustls::HttpsConnectorBuilder::new().with_native_roots() {
        Ok(builder) => builder,
        Err(e) => {
            tracing::warn!("no system root certificates ({e}): nothing can be fetched over https");
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(
                rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
            )
        }
    };
    build(builder)
}

/// A client that trusts `roots` only (tests serve HTTPS with a CA of their own).
#[cfg(test)]
pub fn client_trusting(roots: rustls::RootCertStore) -> HttpClient {
    build(
        hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth()),
    )
}

fn build(tls: hyper_rustls::HttpsConnectorBuilder<hyper_rustls::builderstates::WantsSchemes>) -> HttpClient {
    let mut http = HttpConnector::new_with_resolver(GuardedResolver(GaiResolver::new()));
    http.enforce_http(false);
    let https = tls.https_or_http().enable_http1().wrap_connector(http);
    Client::builder(TokioExecutor::new()).build(https)
}

/// How long to wait before the next try after `failures` failures in a
/// row (the first retry after [`RETRY_FIRST`], doubling up to [`RETRY_MAX`]).
pub fn retry_after(failures: u32) -> Duration {
    RETRY_FIRST.saturating_mul(1 << failures.min(6)).min(RETRY_MAX)
}

/// GETs `uri`: its body when the answer is 200.
pub async fn get(client: &HttpClient, uri: &str) -> Result<Bytes, String> {
    let parsed: http::Uri = uri.parse().map_err(|e| format!("not a URI ({e})"))?;
    if !matches!(parsed.scheme_str(), Some("http" | "https")) {
        return Err("neither an http nor an https URI".into());
    }
    let host = parsed.host().unwrap_or_default().trim_matches(['[', ']']);
    if let Ok(ip) = host.parse::<IpAddr>()
        && is_blocked(ip)
    {
        return Err(format!("{ip} is a link-local or cloud metadata address: not fetched"));
    }
    let response = client.get(parsed).await.map_err(|e| crate::text::error_chain(&e))?;
    if response.status() != http::StatusCode::OK {
        return Err(format!("answered {}", response.status()));
    }
    let body = Limited::new(response.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| format!("reading the answer: {e} (at most {MAX_BODY} bytes are read)"))?;
    Ok(body.to_bytes())
}

/// Addresses nothing is fetched from: link-local ones (cloud instance
/// metadata among them) and the known metadata addresses outside that
/// range.
fn is_blocked(ip: IpAddr) -> bool {
    const ALIBABA_METADATA: Ipv4Addr = Ipv4Addr::new(100, 100, 100, 200);
    const AWS_METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);
    match ip {
        IpAddr::V4(v4) => v4.is_link_local() || v4 == ALIBABA_METADATA,
        IpAddr::V6(v6) => {
            v6.is_unicast_link_local()
                || v6 == AWS_METADATA_V6
                || v6.to_ipv4_mapped().is_some_and(|v4| is_blocked(IpAddr::V4(v4)))
        }
    }
}

/// The system resolver, without blocked addresses: a name that resolves
/// only to them fails to connect.
#[derive(Clone)]
pub struct GuardedResolver(GaiResolver);

impl tower_service::Service<Name> for GuardedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let resolving = self.0.call(name);
        Box::pin(async move {
            let allowed: Vec<SocketAddr> = resolving.await?.filter(|a| !is_blocked(a.ip())).collect();
            if allowed.is_empty() {
                return Err(std::io::Error::other("the name resolves only to link-local or cloud metadata addresses"));
            }
            Ok(allowed.into_iter())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_and_link_local_addresses_are_blocked_and_others_are_not() {
        for blocked in ["169.254.169.254", "100.100.100.200", "fe80::1", "fd00:ec2::254", "::ffff:169.254.169.254"] {
            assert!(is_blocked(blocked.parse().unwrap()), "{blocked}");
        }
        for allowed in ["127.0.0.1", "10.0.0.1", "::1", "93.184.216.34"] {
            assert!(!is_blocked(allowed.parse().unwrap()), "{allowed}");
        }
    }

    #[test]
    fn retries_back_off_from_a_second_doubling_up_to_a_minute() {
        assert_eq!(retry_after(0), RETRY_FIRST);
        assert_eq!(retry_after(1), 2 * RETRY_FIRST);
        assert_eq!(retry_after(30), RETRY_MAX);
    }
}
