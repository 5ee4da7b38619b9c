//! `Protocol`: the application protocol of a port, as Istio infers it.
//!
//! A ServiceEntry port names its protocol; a Kubernetes Service port gets
//! it as Istio's `ConvertProtocol` does: `appProtocol` when set (with the
//! Kubernetes names `kubernetes.io/h2c`, `kubernetes.io/ws` and
//! `kubernetes.io/wss`), else the port name's prefix before the first `-`
//! (`http-web`, `grpc-api`, `grpc-web`), compared without case; a port
//! without either on a well-known TCP port (SMTP 25, DNS 53, MySQL 3306,
//! MongoDB 27017) is TCP. Anything else is [`Protocol::Unknown`]: Istio
//! sniffs such ports; meshpush serves them as TCP, and validation says so.

use serde::Serialize;

/// Application protocol of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Protocol {
    /// HTTP/1.1.
    Http,
    /// HTTP/2 (cleartext).
    Http2,
    /// gRPC (HTTP/2).
    Grpc,
    /// Opaque TCP (also Mongo, Redis, MySQL: meshpush has no filters for them).
    Tcp,
    /// TLS (passed through by SNI; treated as TCP).
    Tls,
    /// Not declared (see the module docs).
    Unknown,
}

/// Ports Istio treats as TCP when nothing declares their protocol.
const WELL_KNOWN_TCP_PORTS: [u32; 4] = [25, 53, 3306, 27017];

impl Protocol {
    /// Parses an Istio protocol name (`HTTP`, `grpc-web`, `Mongo`), or `None`
    /// for a name Istio does not know.
    pub fn parse(name: &str) -> Option<Protocol> {
        Some(match name.to_ascii_lowercase().as_str() {
            "http" | "http_proxy" => Protocol::Http,
            "http2" => Protocol::Http2,
            "grpc" | "grpc-web" => Protocol::Grpc,
            "tcp" | "mongo" | "redis" | "mysql" => Protocol::Tcp,
            "tls" | "https" => Protocol::Tls,
            _ => return None,
        })
    }

    /// The protocol of a ServiceEntry, Gateway or Sidecar port, which names it.
    pub fn from_name(name: &str) -> Protocol {
        Protocol::parse(name).unwrap_or(Protocol::Unknown)
    }

    /// The protocol of a Kubernetes Service port (see the module docs).
    pub fn of_kubernetes_port(number: u32, name: Option<&str>, app_protocol: Option<&str>) -> Protocol {
        let declared = match app_protocol {
            Some("kubernetes.io/h2c") => return Protocol::Http2,
            Some("kubernetes.io/ws") => return Protocol::Http,
            Some("kubernetes.io/wss") => return Protocol::Tls,
            Some(app) => app,
            None => name.unwrap_or(""),
        };
        let parsed = if declared.len() >= 8 && declared[..8].eq_ignore_ascii_case("grpc-web") {
            Some(Protocol::Grpc)
        } else {
            Protocol::parse(declared.split('-').next().unwrap_or(""))
        };
        match parsed {
            Some(p) => p,
            None if WELL_KNOWN_TCP_PORTS.contains(&number) => Protocol::Tcp,
            None => Protocol::Unknown,
        }
    }

    /// Whether traffic on this port goes through an HTTP connection manager.
    pub fn is_http(self) -> bool {
        matches!(self, Protocol::Http | Protocol::Http2 | Protocol::Grpc)
    }

    /// Whether the upstream speaks HTTP/2.
    pub fn is_http2(self) -> bool {
        matches!(self, Protocol::Http2 | Protocol::Grpc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_ports_get_their_protocol_as_in_istio() {
        let of = |number, name: Option<&str>, app: Option<&str>| Protocol::of_kubernetes_port(number, name, app);
        assert_eq!(of(80, Some("http-web"), None), Protocol::Http);
        assert_eq!(of(80, Some("HTTP2"), None), Protocol::Http2);
        assert_eq!(of(80, Some("grpc-web-api"), None), Protocol::Grpc);
        assert_eq!(of(80, Some("tcp-db"), None), Protocol::Tcp);
        assert_eq!(of(80, Some("http_web"), None), Protocol::Unknown, "only '-' ends the prefix");
        assert_eq!(of(80, Some("web"), None), Protocol::Unknown);
        assert_eq!(of(80, None, None), Protocol::Unknown);
        assert_eq!(of(3306, Some("db"), None), Protocol::Tcp, "a well-known port");
        assert_eq!(of(80, Some("tcp-x"), Some("http")), Protocol::Http, "appProtocol wins over the name");
        assert_eq!(of(80, Some("http"), Some("custom")), Protocol::Unknown, "appProtocol replaces the name");
        assert_eq!(of(80, None, Some("kubernetes.io/h2c")), Protocol::Http2);
        assert_eq!(of(80, None, Some("kubernetes.io/ws")), Protocol::Http);
        assert_eq!(Protocol::from_name("Mongo"), Protocol::Tcp);
    }
}
