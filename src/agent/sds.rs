//! SDS for Envoy over the agent's Unix socket: the workload certificate
//! and key as `default`, the mesh roots as `ROOTCA` (Istio's names, which
//! meshpush's mTLS clusters and listeners refer to).
//!
//! A stream is answered when it first asks, when it asks for other names,
//! whenever the certificate is renewed, and whenever PCDS brings other
//! roots ([`TrustBundle`]); an ACK or a stale nonce is not answered. The
//! version is the leaf's serial (with the bundle's digest when it adds
//! roots), so Envoy's `/certs` and SDS stats show which certificate it
//! runs with. Only the agent's own pod can reach the socket; the key is
//! never logged.
//!
//! Invariant: every response holds the `default` and `ROOTCA` of one
//! certificate (one [`WorkloadCert`]) and one bundle, never a mix of two
//! renewals.

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::{DataSource, data_source};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    CertificateValidationContext, Secret, TlsCertificate, secret,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::envoy::service::secret::v3::secret_discovery_service_server::{
    SecretDiscoveryService, SecretDiscoveryServiceServer,
};
use envoy_types::pb::google::protobuf::Any;
use prost::Message as _;
use tokio::sync::{mpsc, watch};
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::ResponseStream;
use super::certificate::WorkloadCert;
use super::trust_bundle::TrustBundle;
use crate::text::Shown;

/// The workload certificate's SDS name, and the mesh roots': the names
/// the server's mesh mTLS settings ask Envoy to fetch.
pub use crate::generate::mtls::{ROOT_SECRET, WORKLOAD_SECRET};

/// Envoy's `Secret` type URL.
const SECRET_TYPE: &str = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";

/// The certificate the agent holds, as it changes (`None` until the first).
pub type CurrentCert = watch::Receiver<Option<Arc<WorkloadCert>>>;

/// The roots PCDS brought, as they change (empty: none).
pub type CurrentBundle = watch::Receiver<Arc<TrustBundle>>;

/// The SDS service.
#[derive(Debug, Clone)]
pub struct SdsServer {
    current: CurrentCert,
    bundle: CurrentBundle,
}

impl SdsServer {
    /// Serves `current`'s secrets, with `bundle`'s roots in `ROOTCA`.
    pub fn new(current: CurrentCert, bundle: CurrentBundle) -> SdsServer {
        SdsServer { current, bundle }
    }

    /// The tonic service.
    pub fn into_server(self) -> SecretDiscoveryServiceServer<SdsServer> {
        SecretDiscoveryServiceServer::new(self)
    }
}

#[tonic::async_trait]
impl SecretDiscoveryService for SdsServer {
    type DeltaSecretsStream = ResponseStream<DeltaDiscoveryResponse>;
    type StreamSecretsStream = ResponseStream<DiscoveryResponse>;

    async fn delta_secrets(
        &self,
        _: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaSecretsStream>, Status> {
        Err(Status::unimplemented(
            "the agent serves SDS as State of the World (api_type GRPC), as the bootstrap it writes asks",
        ))
    }

    async fn stream_secrets(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamSecretsStream>, Status> {
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(serve_stream(request.into_inner(), self.current.clone(), self.bundle.clone(), tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn fetch_secrets(&self, request: Request<DiscoveryRequest>) -> Result<Response<DiscoveryResponse>, Status> {
        let request = request.into_inner();
        let cert = self.current.borrow().clone();
        let cert = cert.ok_or_else(|| Status::unavailable("the agent has no workload certificate yet"))?;
        let bundle = self.bundle.borrow().clone();
        Ok(Response::new(response(&cert, &bundle, &request.resource_names, "fetch".into())))
    }
}

/// One SDS stream: answers as the module docs say, until Envoy goes.
async fn serve_stream(
    mut from_envoy: Streaming<DiscoveryRequest>,
    mut current: CurrentCert,
    mut bundle: CurrentBundle,
    to_envoy: mpsc::Sender<Result<DiscoveryResponse, Status>>,
) {
    let mut names: Vec<String> = Vec::new();
    let mut asked = false;
    // The nonce of the last response, and whether the current certificate
    // has been sent for the current names.
    let mut nonce = 0u64;
    let mut sent = false;
    let mut warned_unknown = false;
    loop {
        tokio::select! {
            request = from_envoy.next() => {
                let Some(Ok(request)) = request else { return };
                if !request.response_nonce.is_empty() && request.response_nonce != nonce.to_string() {
                    continue;
                }
                if let Some(error) = &request.error_detail {
                    tracing::warn!("Envoy refused the SDS secrets it was sent: {}", Shown(&error.message));
                }
                if !asked || request.resource_names != names {
                    names = request.resource_names;
                    asked = true;
                    sent = false;
                    if !warned_unknown && let Some(unknown) = names.iter().find(|n| !is_served(n)) {
                        warned_unknown = true;
                        tracing::warn!(
                            "Envoy asked the agent's SDS for secret {}, which it does not serve (it serves {WORKLOAD_SECRET} and {ROOT_SECRET})",
                            Shown(unknown)
                        );
                    }
                }
            }
            changed = current.changed() => {
                if changed.is_err() {
                    return;
                }
                sent = false;
            }
            changed = bundle.changed() => {
                if changed.is_err() {
                    return;
                }
                sent = false;
            }
        }
        if asked && !sent {
            let cert = current.borrow_and_update().clone();
            let roots = bundle.borrow_and_update().clone();
            if let Some(cert) = cert {
                nonce += 1;
                if to_envoy.send(Ok(response(&cert, &roots, &names, nonce.to_string()))).await.is_err() {
                    return;
                }
                sent = true;
            }
        }
    }
}

fn is_served(name: &str) -> bool {
    name == WORKLOAD_SECRET || name == ROOT_SECRET
}

/// The secrets of `names` that the agent serves, from `cert` and `bundle`.
fn response(cert: &WorkloadCert, bundle: &TrustBundle, names: &[String], nonce: String) -> DiscoveryResponse {
    let inline = |text: &str| DataSource {
        specifier: Some(data_source::Specifier::InlineBytes(text.as_bytes().to_vec())),
        ..Default::default()
    };
    let resources = names
        .iter()
        .filter_map(|name| {
            let kind = match name.as_str() {
                WORKLOAD_SECRET => secret::Type::TlsCertificate(TlsCertificate {
                    certificate_chain: Some(inline(cert.chain_pem())),
                    private_key: Some(inline(cert.key_pem())),
                    ..Default::default()
                }),
                ROOT_SECRET => secret::Type::ValidationContext(CertificateValidationContext {
                    trusted_ca: Some(inline(&bundle.with_roots(cert.roots_pem()))),
                    ..Default::default()
                }),
                _ => return None,
            };
            let secret = Secret { name: name.clone(), r#type: Some(kind) };
            Some(Any { type_url: SECRET_TYPE.into(), value: secret.encode_to_vec() })
        })
        .collect();
    DiscoveryResponse {
        version_info: if bundle.is_empty() {
            cert.serial().to_string()
        } else {
            format!("{}-{:016x}", cert.serial(), bundle.digest())
        },
        resources,
        type_url: SECRET_TYPE.into(),
        nonce,
        ..Default::default()
    }
}
