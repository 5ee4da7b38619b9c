//! `Gateway`: ports and hosts a router proxy (ingress/egress gateway) serves.
//!
//! A server is served or left out on its own: [`Server::unservable`] says
//! why one cannot be served (a TLS mode meshpush cannot apply, a protocol
//! that needs TLS settings it lacks). Validation reports that reason with
//! the server's field path, and the gateway index leaves that server out
//! while serving the Gateway's others; both ask this one function.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::ObjectMeta;

/// Istio Gateway.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Gateway {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: GatewaySpec,
}

/// `Gateway.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewaySpec {
    /// Labels of the router proxies this gateway applies to (any namespace).
    pub selector: BTreeMap<String, String>,
    /// Servers.
    pub servers: Vec<Server>,
}

/// One server (port + hosts) of a gateway.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Server {
    /// The port.
    pub port: GatewayPort,
    /// Hosts in `namespace/host` form (`*/` or no namespace means any namespace).
    pub hosts: Vec<String>,
    /// Server name (for display, and the stat prefix of an HTTPS server's chain).
    pub name: Option<String>,
    /// The IP address the router's listener for this server binds
    /// (default `0.0.0.0`), e.g. `127.0.0.1` to serve only the router's own host.
    pub bind: Option<String>,
    /// TLS: how the server terminates or passes through TLS, or
    /// `httpsRedirect` on a plain HTTP server.
    pub tls: Option<ServerTls>,
}

/// Gateway server port.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewayPort {
    /// Port number the gateway listens on.
    pub number: u32,
    /// `HTTP`, `HTTPS`, `HTTP2`, `GRPC`, `TCP` or `TLS`.
    pub protocol: String,
    /// Port name.
    pub name: String,
    /// Port on the gateway workload, when different.
    pub target_port: Option<u32>,
}

/// `Server.tls` (Istio's `ServerTLSSettings`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServerTls {
    /// On a plain HTTP server: answer every request with a 301 to `https://`.
    pub https_redirect: bool,
    /// `PASSTHROUGH` (Istio's default), `SIMPLE`, `MUTUAL`,
    /// `OPTIONAL_MUTUAL`, `AUTO_PASSTHROUGH` or `ISTIO_MUTUAL`.
    pub mode: Option<String>,
    /// A file on the router: the server certificate chain (PEM).
    pub server_certificate: Option<String>,
    /// A file on the router: the server's private key (PEM).
    pub private_key: Option<String>,
    /// A file on the router: the CA bundle client certificates are checked against.
    pub ca_certificates: Option<String>,
    /// A file on the router: the certificate revocation list.
    pub ca_crl: Option<String>,
    /// A Secret in the router's namespace holding the certificate and key
    /// (and, for MUTUAL, the CA: its `ca.crt`/`cacert`, or a `NAME-cacert` Secret).
    pub credential_name: Option<String>,
    /// Several such Secrets (e.g. an RSA and an ECDSA certificate).
    pub credential_names: Vec<String>,
    /// A Secret holding the client CA, instead of the credential's own.
    pub ca_cert_credential_name: Option<String>,
    /// Several file-path certificate and key pairs.
    pub tls_certificates: Vec<TlsCertificateFiles>,
    /// Client certificate SANs accepted (MUTUAL).
    pub subject_alt_names: Vec<String>,
    /// Client certificate SPKI pins (base64 SHA-256) accepted.
    pub verify_certificate_spki: Vec<String>,
    /// Client certificate hashes (hex SHA-256) accepted.
    pub verify_certificate_hash: Vec<String>,
    /// `TLS_AUTO`, `TLSV1_0` … `TLSV1_3`.
    pub min_protocol_version: Option<String>,
    /// `TLS_AUTO`, `TLSV1_0` … `TLSV1_3`.
    pub max_protocol_version: Option<String>,
    /// Cipher suites offered (OpenSSL names), in order.
    pub cipher_suites: Vec<String>,
    /// Accept client certificates that do not chain to the CA.
    pub insecure_skip_verify: Option<bool>,
}

/// One `tlsCertificates` entry: file paths on the router.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TlsCertificateFiles {
    /// Certificate chain file.
    pub server_certificate: String,
    /// Private key file.
    pub private_key: String,
    /// CA bundle file.
    pub ca_certificates: Option<String>,
}

/// What a server does with TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum TlsMode {
    /// No TLS: plain HTTP or TCP (possibly with `httpsRedirect`).
    Plain,
    /// Routes on SNI without terminating.
    Passthrough,
    /// Terminates TLS with the server's certificate.
    Simple,
    /// Terminates TLS and requires a client certificate.
    Mutual,
    /// Terminates TLS and checks a client certificate when one is sent.
    OptionalMutual,
    /// Routes on SNI to the cluster the SNI names (`outbound_.PORT_.SUBSET_.HOST`).
    AutoPassthrough,
    /// Terminates mesh mTLS on the router's own workload certificate and
    /// requires a client certificate of the mesh.
    IstioMutual,
}

impl TlsMode {
    /// Whether the router terminates TLS.
    pub fn terminates(self) -> bool {
        matches!(self, TlsMode::Simple | TlsMode::Mutual | TlsMode::OptionalMutual | TlsMode::IstioMutual)
    }

    /// Whether the router checks client certificates against a CA the
    /// server names (MUTUAL, OPTIONAL_MUTUAL; ISTIO_MUTUAL checks them
    /// against the mesh root).
    pub fn verifies_clients(self) -> bool {
        matches!(self, TlsMode::Mutual | TlsMode::OptionalMutual)
    }
}

/// The TLS modes meshpush serves, as Istio spells them.
pub const SERVED_TLS_MODES: &[&str] =
    &["SIMPLE", "MUTUAL", "OPTIONAL_MUTUAL", "PASSTHROUGH", "AUTO_PASSTHROUGH", "ISTIO_MUTUAL"];

impl Server {
    /// The protocol, upper case (Istio compares it case-insensitively).
    pub fn protocol(&self) -> String {
        self.port.protocol.to_ascii_uppercase()
    }

    /// Whether the port's protocol carries TLS (`HTTPS`, `TLS`).
    pub fn is_tls_protocol(&self) -> bool {
        matches!(self.protocol().as_str(), "HTTPS" | "TLS")
    }

    /// The server's TLS mode, when it can be served.
    pub fn tls_mode(&self) -> Option<TlsMode> {
        if !self.is_tls_protocol() {
            return Some(TlsMode::Plain);
        }
        let mode = self.tls.as_ref()?.mode.as_deref().unwrap_or("PASSTHROUGH").to_ascii_uppercase();
        match mode.as_str() {
            "PASSTHROUGH" => Some(TlsMode::Passthrough),
            "SIMPLE" => Some(TlsMode::Simple),
            "MUTUAL" => Some(TlsMode::Mutual),
            "OPTIONAL_MUTUAL" => Some(TlsMode::OptionalMutual),
            "AUTO_PASSTHROUGH" => Some(TlsMode::AutoPassthrough),
            "ISTIO_MUTUAL" => Some(TlsMode::IstioMutual),
            _ => None,
        }
    }

    /// Whether a plain HTTP server answers with a redirect to HTTPS.
    pub fn https_redirect(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.https_redirect)
    }

    /// Why this server cannot be served, as `(field path under the server,
    /// reason)`; `None` when it can. The rest of its Gateway is served
    /// either way.
    pub fn unservable(&self) -> Option<(&'static str, String)> {
        let Some(tls) = &self.tls else {
            if self.is_tls_protocol() {
                let reason =
                    format!("is missing: a {} server needs TLS settings (Istio requires them too)", self.protocol());
                return Some(("tls", reason));
            }
            return None;
        };
        if !self.is_tls_protocol() {
            let http = matches!(self.protocol().as_str(), "HTTP" | "HTTP2" | "GRPC" | "GRPC-WEB");
            let passthrough = matches!(
                tls.mode.as_deref().map(str::to_ascii_uppercase).as_deref(),
                None | Some("PASSTHROUGH") | Some("AUTO_PASSTHROUGH")
            );
            let files = [&tls.server_certificate, &tls.private_key, &tls.ca_certificates].iter().any(|f| f.is_some());
            if !http {
                let reason = format!(
                    "is set on a {} server: only HTTPS and TLS servers take TLS settings (Istio refuses this too)",
                    self.protocol()
                );
                return Some(("tls", reason));
            }
            if !passthrough || files {
                let reason = "terminates TLS on a plain HTTP server: use protocol HTTPS (only httpsRedirect belongs on an HTTP server; Istio refuses this too)";
                return Some(("tls", reason.to_string()));
            }
            return None;
        }
        let Some(mode) = self.tls_mode() else {
            let reason = format!(
                "{:?} is not a TLS mode: use one of {}",
                tls.mode.as_deref().unwrap_or(""),
                SERVED_TLS_MODES.join(", ")
            );
            return Some(("tls.mode", reason));
        };
        if mode == TlsMode::AutoPassthrough && self.protocol() != "TLS" {
            return Some(("tls.mode", "AUTO_PASSTHROUGH is served on TLS ports only (as in Istio)".to_string()));
        }
        if !mode.terminates() {
            return None;
        }
        if mode == TlsMode::IstioMutual {
            let named = [
                ("credentialName", tls.credential_name.is_some()),
                ("credentialNames", !tls.credential_names.is_empty()),
                ("serverCertificate", tls.server_certificate.is_some()),
                ("privateKey", tls.private_key.is_some()),
                ("caCertificates", tls.ca_certificates.is_some()),
                ("tlsCertificates", !tls.tls_certificates.is_empty()),
            ];
            return named.iter().find(|(_, set)| *set).map(|(field, _)| {
                let reason = format!(
                    "sets {field}, which ISTIO_MUTUAL cannot have: it serves the gateway's own workload certificate and checks clients against the mesh root (Istio refuses this too)"
                );
                ("tls", reason)
            });
        }
        let sources = [
            tls.credential_name.as_deref().is_some_and(|n| !n.is_empty()),
            !tls.credential_names.is_empty(),
            tls.server_certificate.is_some() || tls.private_key.is_some(),
            !tls.tls_certificates.is_empty(),
        ];
        match sources.iter().filter(|s| **s).count() {
            0 => {
                let reason = "has no certificate: set credentialName, credentialNames, serverCertificate and privateKey, or tlsCertificates";
                return Some(("tls", reason.to_string()));
            }
            1 => {}
            _ => {
                let reason = "sets more than one certificate source: use one of credentialName, credentialNames, serverCertificate/privateKey, tlsCertificates";
                return Some(("tls", reason.to_string()));
            }
        }
        if sources[2]
            && (tls.server_certificate.as_deref().unwrap_or("").is_empty()
                || tls.private_key.as_deref().unwrap_or("").is_empty())
        {
            return Some(("tls", "needs both serverCertificate and privateKey".to_string()));
        }
        let from_files = sources[2] || sources[3];
        if mode.verifies_clients() && from_files && tls.ca_certificates.as_deref().unwrap_or("").is_empty() {
            return Some((
                "tls.caCertificates",
                "is missing: MUTUAL TLS with certificate files needs the client CA bundle".to_string(),
            ));
        }
        None
    }
}

/// The cipher suites a server may name (`cipherSuites`), in BoringSSL's
/// spelling; Istio accepts the same list.
pub const CIPHER_SUITES: &[&str] = &[
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-CHACHA20-POLY1305",
    "ECDHE-ECDSA-AES128-SHA",
    "ECDHE-RSA-AES128-SHA",
    "ECDHE-ECDSA-AES256-SHA",
    "ECDHE-RSA-AES256-SHA",
    "AES128-GCM-SHA256",
    "AES256-GCM-SHA384",
    "AES128-SHA",
    "AES256-SHA",
    "DES-CBC3-SHA",
];

/// Whether Envoy takes `suite` in `cipher_suites`: a known name, `ALL`, or
/// an expression (`-`, `+`, `!`, `[` …) passed on as written, as Istio does.
pub fn is_cipher_suite(suite: &str) -> bool {
    suite == "ALL" || suite.chars().next().is_some_and(|c| !c.is_ascii_alphanumeric()) || CIPHER_SUITES.contains(&suite)
}

/// The suites of `suites` Envoy takes, each once, in order (an unknown one
/// would make Envoy refuse the whole listener; validation reports those).
pub fn usable_cipher_suites(suites: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in suites {
        if !s.is_empty() && is_cipher_suite(s) && !out.contains(s) {
            out.push(s.clone());
        }
    }
    out
}

/// How a server's port handles connections (the generator's plan sorts
/// servers into ports by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortKind {
    /// Plain HTTP, through one HTTP connection manager.
    Http,
    /// Plain TCP.
    Tcp,
    /// TLS: a chain per server, by SNI.
    Tls,
}

impl PortKind {
    fn name(self) -> &'static str {
        match self {
            PortKind::Http => "plain HTTP",
            PortKind::Tcp => "plain TCP",
            PortKind::Tls => "TLS (HTTPS or TLS)",
        }
    }
}

impl Server {
    /// The kind of port the server needs; `None` when it cannot be served.
    pub fn port_kind(&self) -> Option<PortKind> {
        if self.unservable().is_some() {
            return None;
        }
        Some(match self.tls_mode()? {
            TlsMode::Plain if matches!(self.protocol().as_str(), "HTTP" | "HTTP2" | "GRPC" | "GRPC-WEB") => {
                PortKind::Http
            }
            TlsMode::Plain => PortKind::Tcp,
            _ => PortKind::Tls,
        })
    }

    /// The port the router binds for it: `targetPort` when set, else `number`.
    pub fn bind_port(&self) -> u32 {
        self.port.target_port.filter(|p| *p != 0).unwrap_or(self.port.number)
    }
}

/// The servers (in the order given, as a router takes them) that cannot
/// share their port with an earlier one, each with why: a port is plain
/// HTTP, plain TCP or TLS as its first server makes it, binds the first
/// server's address, and its TLS servers' hosts must differ (Envoy refuses
/// two filter chains with one match). The generator leaves these out.
/// `servers` are `(how a message names it, the server)`.
pub fn port_conflicts<'a>(servers: impl IntoIterator<Item = (String, &'a Server)>) -> Vec<(usize, String)> {
    let mut ports: BTreeMap<u32, (PortKind, &str, String, Vec<&str>)> = BTreeMap::new();
    let mut out = Vec::new();
    for (i, (label, server)) in servers.into_iter().enumerate() {
        let Some(kind) = server.port_kind() else { continue };
        let port = server.bind_port();
        let bind = server.bind.as_deref().filter(|b| !b.is_empty()).unwrap_or("0.0.0.0");
        let hosts: Vec<&str> = server.hosts.iter().map(|h| h.split_once('/').map_or(h.as_str(), |(_, h)| h)).collect();
        match ports.get_mut(&port) {
            None => {
                ports.insert(port, (kind, bind, label, hosts));
            }
            Some((first_kind, _, first, _)) if *first_kind != kind => {
                let (was, is) = (first_kind.name(), kind.name());
                out.push((i, format!("port {port} is {was} ({first} came first): a {is} server cannot share it")));
            }
            Some((_, first_bind, first, _)) if *first_bind != bind => {
                out.push((i, format!("port {port} binds {first_bind} ({first} came first), not {bind}")));
            }
            Some((PortKind::Tls, _, _, claimed)) => {
                if let Some(h) = hosts.iter().find(|h| claimed.contains(h)) {
                    out.push((
                        i,
                        format!("host {h} is already served by a TLS server on port {port}: two chains would match it"),
                    ));
                } else {
                    claimed.extend(hosts);
                }
            }
            Some(_) => {}
        }
    }
    out
}
