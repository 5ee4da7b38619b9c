//! `Gateway`: ports and hosts a router proxy (ingress/egress gateway) serves.

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
    /// Server name (for display).
    pub name: Option<String>,
    /// The IP address the router's listener for this server binds
    /// (default `0.0.0.0`), e.g. `127.0.0.1` to serve only the router's own host.
    pub bind: Option<String>,
}

/// Gateway server port.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GatewayPort {
    /// Port number the gateway listens on.
    pub number: u32,
    /// `HTTP`, `HTTP2`, `GRPC` or `TCP` (`HTTPS`/`TLS` are refused: no certificates yet).
    pub protocol: String,
    /// Port name.
    pub name: String,
    /// Port on the gateway workload, when different.
    pub target_port: Option<u32>,
}
