//! The bootstrap of a proxyless gRPC application: the JSON file gRPC reads
//! from `GRPC_XDS_BOOTSTRAP`, as Istio's pilot-agent writes it.
//!
//! It names the xDS server (the agent's `XDS` socket, or meshpush itself,
//! as Istio's `grpc-simple` template does), the node (the same one an Envoy
//! of the workload would send, with `GENERATOR: grpc`, which makes meshpush
//! serve it as a gRPC client), the template of the names gRPC servers ask
//! their listeners by, and, when the workload's certificate files are
//! written (`meshpush agent --output-certs`), the `file_watcher`
//! certificate provider `default` that mTLS clusters and listeners name.
//!
//! Invariant: as [`render`](super::render), the node is checked with the
//! server's own parser, and the JSON is built as a value, never spliced.

use std::path::Path;

use serde_json::json;

use super::{BootstrapError, BootstrapOptions, node, proxy};
use crate::model::proxy::{GENERATOR_METADATA, GRPC_GENERATOR, SDS_METADATA};

/// The names gRPC servers ask their listener by (`%s`: the address they
/// listen on), as Istio's bootstrap sets it.
pub const SERVER_LISTENER_TEMPLATE: &str = "xds.istio.io/grpc/lds/inbound/%s";

/// The certificate files the provider watches, in the certificates
/// directory (Istio's names).
pub const CERTIFICATE_CHAIN_FILE: &str = "cert-chain.pem";
/// The private key's file.
pub const PRIVATE_KEY_FILE: &str = "key.pem";
/// The mesh roots' file.
pub const ROOT_CERTIFICATE_FILE: &str = "root-cert.pem";

/// How often gRPC re-reads the certificate files at most (Istio's value).
const REFRESH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(900);

/// Where the workload's certificate files are, and how long a certificate
/// lives: gRPC re-reads the files every [`REFRESH_INTERVAL`], or a quarter
/// of a certificate's life when that is shorter, so that a renewal (at
/// half the life) is read well before the old certificate expires.
#[derive(Debug, Clone, Copy)]
pub struct CertificateFiles<'a> {
    /// The directory.
    pub dir: &'a Path,
    /// The life of a certificate.
    pub ttl: std::time::Duration,
}

/// Renders the gRPC bootstrap for `opts`: its xDS servers are
/// `opts.xds_addrs` in order (the first, then fallbacks), each
/// `HOST:PORT`, `unix:PATH` or `unix-abstract:NAME` (the agent's, see
/// `agent::proxyless`: gRPC's C-core clients cannot dial a Rust HTTP/2
/// server on a Unix socket file); `certificates` are the workload's
/// certificate files, if any are kept.
pub fn render(opts: &BootstrapOptions, certificates: Option<CertificateFiles<'_>>) -> Result<String, BootstrapError> {
    let proxy = proxy(opts)?;
    if opts.xds_addrs.is_empty() {
        return Err(BootstrapError::XdsAddrs("at least one address is needed"));
    }
    let (mut node, _) = node(opts, &proxy)?;
    let metadata = node["metadata"].as_object_mut().expect("node() builds an object");
    metadata.remove(SDS_METADATA);
    metadata.insert(GENERATOR_METADATA.into(), json!(GRPC_GENERATOR));
    let servers = opts
        .xds_addrs
        .iter()
        .map(|addr| {
            let uri = match addr.strip_prefix("unix:").or_else(|| addr.strip_prefix("unix-abstract:")) {
                Some("") => return Err(BootstrapError::XdsAddr(addr.clone())),
                Some(_) => addr.clone(),
                None => {
                    super::split_host_port(addr)?;
                    addr.clone()
                }
            };
            Ok(json!({
                "server_uri": uri,
                "channel_creds": [{ "type": "insecure" }],
                "server_features": ["xds_v3"],
            }))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut bootstrap = json!({
        "xds_servers": servers,
        "node": node,
        "server_listener_resource_name_template": SERVER_LISTENER_TEMPLATE,
    });
    if let Some(CertificateFiles { dir, ttl }) = certificates {
        let file = |name: &str| dir.join(name).display().to_string();
        let refresh = REFRESH_INTERVAL.min(ttl / 4).max(std::time::Duration::from_secs(1));
        bootstrap["certificate_providers"] = json!({
            "default": {
                "plugin_name": "file_watcher",
                "config": {
                    "certificate_file": file(CERTIFICATE_CHAIN_FILE),
                    "private_key_file": file(PRIVATE_KEY_FILE),
                    "ca_certificate_file": file(ROOT_CERTIFICATE_FILE),
                    "refresh_interval": format!("{}s", refresh.as_secs()),
                },
            },
        });
    }
    serde_json::to_string_pretty(&bootstrap).map_err(BootstrapError::Json)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(xds: &str) -> BootstrapOptions {
        let mut opts = BootstrapOptions::new("sidecar~10.0.0.5~echo-1.app~app.svc.cluster.local", xds);
        opts.labels.insert("app".into(), "echo".into());
        opts.interception = "NONE".into();
        opts
    }

    #[test]
    fn the_bootstrap_names_the_server_the_node_and_the_server_listener_template() {
        let text = render(&options("127.0.0.1:15010"), None).unwrap();
        let b: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(b["xds_servers"][0]["server_uri"], "127.0.0.1:15010");
        assert_eq!(b["xds_servers"][0]["server_features"][0], "xds_v3");
        assert_eq!(b["node"]["id"], "sidecar~10.0.0.5~echo-1.app~app.svc.cluster.local");
        assert_eq!(b["node"]["metadata"]["GENERATOR"], "grpc");
        assert_eq!(b["node"]["metadata"]["LABELS"]["app"], "echo");
        assert!(b["node"]["metadata"].get("SDS").is_none());
        assert_eq!(b["server_listener_resource_name_template"], "xds.istio.io/grpc/lds/inbound/%s");
        assert!(b.get("certificate_providers").is_none(), "no certificate files, no provider");
        // What the server reads of it is a gRPC client.
        let node: envoy_types::pb::envoy::config::core::v3::Node = {
            let json = &b["node"];
            let metadata = json["metadata"].as_object().unwrap();
            let value = |v: &serde_json::Value| envoy_types::pb::google::protobuf::Value {
                kind: Some(envoy_types::pb::google::protobuf::value::Kind::StringValue(
                    v.as_str().map_or_else(|| v.to_string(), str::to_string),
                )),
            };
            envoy_types::pb::envoy::config::core::v3::Node {
                id: json["id"].as_str().unwrap().into(),
                metadata: Some(envoy_types::pb::google::protobuf::Struct {
                    fields: metadata.iter().map(|(k, v)| (k.clone(), value(v))).collect(),
                }),
                ..Default::default()
            }
        };
        let proxy = crate::model::Proxy::from_node(&node).unwrap();
        assert_eq!(proxy.client, crate::model::XdsClient::Grpc);
    }

    #[test]
    fn certificate_files_make_the_default_provider() {
        let day = std::time::Duration::from_secs(86_400);
        let files = CertificateFiles { dir: Path::new("/var/lib/istio/data"), ttl: day };
        let text = render(&options("unix:/var/run/agent/XDS"), Some(files)).unwrap();
        let b: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(b["xds_servers"][0]["server_uri"], "unix:/var/run/agent/XDS");
        let provider = &b["certificate_providers"]["default"];
        assert_eq!(provider["plugin_name"], "file_watcher");
        assert_eq!(provider["config"]["certificate_file"], "/var/lib/istio/data/cert-chain.pem");
        assert_eq!(provider["config"]["private_key_file"], "/var/lib/istio/data/key.pem");
        assert_eq!(provider["config"]["ca_certificate_file"], "/var/lib/istio/data/root-cert.pem");
        assert_eq!(provider["config"]["refresh_interval"], "900s", "Istio's, for a day's certificates");
        let short = CertificateFiles { dir: Path::new("/certs"), ttl: std::time::Duration::from_secs(600) };
        let text = render(&options("127.0.0.1:15010"), Some(short)).unwrap();
        let b: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(b["certificate_providers"]["default"]["config"]["refresh_interval"], "150s", "a quarter of 10 min");
    }

    #[test]
    fn bad_addresses_are_refused_naming_the_flag() {
        for bad in ["unix:", "no-port", "[::1:15010"] {
            let err = render(&options(bad), None).unwrap_err();
            assert!(err.to_string().starts_with("--xds-addr"), "{bad}: {err}");
        }
    }
}
