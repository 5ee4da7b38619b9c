//! MeshConfig `configSources`: the MCP-over-xDS servers meshpush reads
//! Istio config from, as istiod reads an `xds://HOST:PORT` source.
//!
//! Role: [`super::file`] reads the entries ([`ConfigSourceEntry`]) and
//! [`resolve`] turns each into a [`McpServer`] (`source::mcp` connects to
//! each) or into a problem with its path. An entry that cannot be used is
//! never connected and never refuses the rest of the mesh config.
//!
//! What is read as istiod reads it, and what meshpush does beyond it:
//! - `address`: `xds://HOST:PORT`. istiod's other schemes are reported:
//!   `fs://` (meshpush reads a directory through `--config-dir`) and
//!   `k8s://` (meshpush reads Kubernetes when `--kubeconfig` or
//!   `--in-cluster` says so, whether or not the list names it).
//! - `tlsSettings`: `SIMPLE` as istiod (`caCertificates` as inline PEM or,
//!   as in a DestinationRule, a file; `credentialName`, a Secret of
//!   meshpush's own namespace; `subjectAltNames`, `sni`, `caCrl`,
//!   `insecureSkipVerify`). istiod connects `MUTUAL` and `ISTIO_MUTUAL`
//!   sources in plaintext; meshpush does what they say: a client
//!   certificate from files or the Secret, or its own mesh certificate.
//! - `subscribedResources`, which istiod never reads, is reported.
//!
//! Invariant: a [`McpServer`] names a host and a port, and its TLS mode's
//! required parts are present.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::istio::ClientTls;

/// One `configSources` entry as the mesh config spells it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConfigSourceEntry {
    /// `xds://HOST:PORT`, `fs://PATH` or `k8s://`.
    pub address: String,
    /// How the connection is secured.
    #[serde(alias = "tls_settings")]
    pub tls_settings: Option<ClientTls>,
    /// The kinds to read (istiod ignores it).
    #[serde(alias = "subscribed_resources")]
    pub subscribed_resources: Vec<serde_yaml_ng::Value>,
}

/// An MCP-over-xDS server meshpush reads config from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct McpServer {
    /// The address as written (`xds://mcp.example:15010`): it names the
    /// server's objects (`mcp:ADDRESS/KIND/NS/NAME`).
    pub address: Arc<str>,
    /// `HOST:PORT`, dialled.
    pub authority: Arc<str>,
    /// The host, the name verified when nothing else is given.
    pub host: Arc<str>,
    /// How the connection is secured.
    pub tls: McpTls,
}

/// The TLS of a connection to an MCP server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct McpTls {
    /// The mode.
    pub mode: McpTlsMode,
    /// PEM text or a file: the roots the server is checked against
    /// (SIMPLE, MUTUAL; none: the system's roots).
    pub ca_certificates: Option<String>,
    /// PEM text or a file: revoked certificates.
    pub ca_crl: Option<String>,
    /// A file: the client certificate (MUTUAL).
    pub client_certificate: Option<String>,
    /// A file: its private key (MUTUAL). Only the path is ever shown.
    pub private_key: Option<String>,
    /// A Secret of meshpush's own namespace with the roots (and, for
    /// MUTUAL, the client certificate and key).
    pub credential_name: Option<String>,
    /// Names the server certificate must carry (any one).
    pub subject_alt_names: Vec<String>,
    /// The name sent and, without `subjectAltNames`, verified.
    pub sni: Option<String>,
    /// Accept any server certificate.
    pub insecure_skip_verify: bool,
}

/// `tlsSettings.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum McpTlsMode {
    /// No TLS (no `tlsSettings`, or `DISABLE`).
    #[default]
    Disable,
    /// TLS, the server verified.
    Simple,
    /// TLS with a client certificate of the settings' own.
    Mutual,
    /// TLS with meshpush's own mesh certificate, the server verified
    /// against the mesh roots.
    IstioMutual,
}

/// The servers `entries` name, and a `(path, message)` for each entry or
/// field that is not used as written.
pub fn resolve(entries: &[ConfigSourceEntry]) -> (Vec<McpServer>, Vec<(String, String)>) {
    let mut servers: Vec<McpServer> = Vec::new();
    let mut problems = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let path = format!("configSources[{i}]");
        if !entry.subscribed_resources.is_empty() {
            problems.push((
                format!("{path}.subscribedResources"),
                "has no effect: every kind meshpush applies is read, as istiod reads every kind".into(),
            ));
        }
        match server(entry) {
            Ok(server) if servers.iter().any(|s| s.address == server.address) => {
                problems.push((format!("{path}.address"), "is listed twice: read once".into()));
            }
            Ok(server) => {
                if server.tls.mode == McpTlsMode::Simple {
                    let unused = [
                        ("clientCertificate", server.tls.client_certificate.is_some()),
                        ("privateKey", server.tls.private_key.is_some()),
                    ];
                    for (field, _) in unused.iter().filter(|(_, set)| *set) {
                        problems.push((
                            format!("{path}.tlsSettings.{field}"),
                            "is used with MUTUAL only: SIMPLE presents no client certificate".into(),
                        ));
                    }
                }
                servers.push(server);
            }
            Err((field, message)) => {
                let at = if field.is_empty() { path.clone() } else { format!("{path}.{field}") };
                problems.push((at, message));
            }
        }
    }
    (servers, problems)
}

fn server(entry: &ConfigSourceEntry) -> Result<McpServer, (String, String)> {
    let bad_address = |why: &str| ("address".to_string(), why.to_string());
    let address = entry.address.trim();
    let (scheme, rest) =
        address.split_once("://").ok_or_else(|| bad_address("is not a URL: expected xds://HOST:PORT"))?;
    match scheme {
        "xds" => {}
        "fs" => {
            return Err(bad_address(
                "is not read: meshpush reads a directory of config through --config-dir, not configSources",
            ));
        }
        "k8s" => {
            return Err(bad_address(
                "is not needed: meshpush reads Istio config from Kubernetes whenever --kubeconfig or --in-cluster \
                 is given, whether or not configSources lists k8s://",
            ));
        }
        _ => return Err(bad_address("has a scheme meshpush does not read: only xds://HOST:PORT is")),
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let (host, port) = authority.rsplit_once(':').ok_or_else(|| bad_address("names no port: xds://HOST:PORT"))?;
    if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(bad_address("is not xds://HOST:PORT with a port from 1 to 65535"));
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok(McpServer {
        address: address.into(),
        authority: authority.into(),
        host: host.into(),
        tls: tls(entry.tls_settings.as_ref())?,
    })
}

fn tls(settings: Option<&ClientTls>) -> Result<McpTls, (String, String)> {
    let Some(s) = settings else { return Ok(McpTls::default()) };
    let field = |name: &str| format!("tlsSettings.{name}");
    let mode = match s.mode.as_deref().unwrap_or("DISABLE") {
        "DISABLE" => McpTlsMode::Disable,
        "SIMPLE" => McpTlsMode::Simple,
        "MUTUAL" => McpTlsMode::Mutual,
        "ISTIO_MUTUAL" => McpTlsMode::IstioMutual,
        other => {
            let shown = crate::text::shown(other);
            return Err((field("mode"), format!("{shown:?} is not DISABLE, SIMPLE, MUTUAL or ISTIO_MUTUAL")));
        }
    };
    let set = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
    let out = McpTls {
        mode,
        ca_certificates: set(&s.ca_certificates),
        ca_crl: set(&s.ca_crl),
        client_certificate: set(&s.client_certificate),
        private_key: set(&s.private_key),
        credential_name: set(&s.credential_name),
        subject_alt_names: s.subject_alt_names.clone(),
        sni: set(&s.sni),
        insecure_skip_verify: s.insecure_skip_verify.unwrap_or(false),
    };
    match mode {
        McpTlsMode::Mutual
            if out.credential_name.is_none() && (out.client_certificate.is_none() || out.private_key.is_none()) =>
        {
            Err((field("mode"), "MUTUAL needs clientCertificate and privateKey, or credentialName".into()))
        }
        McpTlsMode::IstioMutual => {
            let own = [
                ("clientCertificate", &out.client_certificate),
                ("privateKey", &out.private_key),
                ("caCertificates", &out.ca_certificates),
                ("credentialName", &out.credential_name),
            ];
            match own.iter().find(|(_, v)| v.is_some()) {
                Some((name, _)) => Err((
                    field(name),
                    "must not be set with ISTIO_MUTUAL, which uses meshpush's own certificate and the mesh roots"
                        .into(),
                )),
                None => Ok(out),
            }
        }
        McpTlsMode::Disable => {
            let unused = out.ca_certificates.is_some()
                || out.client_certificate.is_some()
                || out.credential_name.is_some()
                || out.sni.is_some()
                || !out.subject_alt_names.is_empty();
            if unused {
                Err((field("mode"), "is DISABLE (or unset) while other TLS settings are given: set the mode".into()))
            } else {
                Ok(out)
            }
        }
        _ => Ok(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(yaml: &str) -> Vec<ConfigSourceEntry> {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    #[test]
    fn xds_addresses_resolve_and_other_schemes_are_reported() {
        let (servers, problems) = resolve(&entries(
            "- address: xds://mcp.example:15010\n\
             - address: xds://127.0.0.1:9901\n  tlsSettings: {mode: ISTIO_MUTUAL}\n\
             - address: fs:///etc/istio/config\n\
             - address: k8s://\n\
             - address: xds://mcp.example\n\
             - address: xds://mcp.example:15010\n\
             - address: xds://[::1]:15010\n  subscribedResources: [SERVICE_REGISTRY]\n",
        ));
        let listed: Vec<_> = servers.iter().map(|s| (&*s.authority, &*s.host, s.tls.mode)).collect();
        assert_eq!(
            listed,
            [
                ("mcp.example:15010", "mcp.example", McpTlsMode::Disable),
                ("127.0.0.1:9901", "127.0.0.1", McpTlsMode::IstioMutual),
                ("[::1]:15010", "::1", McpTlsMode::Disable),
            ]
        );
        let paths: Vec<_> = problems.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "configSources[2].address",
                "configSources[3].address",
                "configSources[4].address",
                "configSources[5].address",
                "configSources[6].subscribedResources",
            ]
        );
        assert!(problems[0].1.contains("--config-dir"), "{}", problems[0].1);
    }

    #[test]
    fn tls_modes_need_their_parts() {
        let one = |yaml: &str| resolve(&entries(yaml));
        let (_, problems) = one("- address: xds://a:1\n  tlsSettings: {mode: MUTUAL, clientCertificate: /c.pem}\n");
        assert_eq!(problems[0].0, "configSources[0].tlsSettings.mode");
        let (_, problems) = one("- address: xds://a:1\n  tlsSettings: {mode: ISTIO_MUTUAL, caCertificates: /r.pem}\n");
        assert_eq!(problems[0].0, "configSources[0].tlsSettings.caCertificates");
        let (_, problems) = one("- address: xds://a:1\n  tlsSettings: {mode: STRICT}\n");
        assert!(problems[0].1.contains("STRICT"));
        let (_, problems) = one("- address: xds://a:1\n  tlsSettings: {sni: a.example}\n");
        assert_eq!(problems[0].0, "configSources[0].tlsSettings.mode");
        let (servers, problems) = one(
            "- address: xds://a:1\n  tlsSettings: {mode: SIMPLE, caCertificates: /r.pem, subjectAltNames: [mcp.a]}\n",
        );
        assert!(problems.is_empty());
        assert_eq!(servers[0].tls.subject_alt_names, ["mcp.a"]);
        assert_eq!(servers[0].tls.ca_certificates.as_deref(), Some("/r.pem"));
    }
}
