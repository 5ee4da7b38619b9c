//! The outbound ports of a sidecar scope: which port gets a listener, which
//! egress listener owns it, and which services it carries.
//!
//! LDS (listeners `0.0.0.0_PORT`) and RDS (route configs `PORT`) both read
//! this one plan, so a listener never names a route config that RDS does not
//! serve, and the two agree on which services share a port.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::naming;
use crate::model::Service;
use crate::push::Scope;
use crate::push::scope::EgressListener;

/// One outbound port of a sidecar.
#[derive(Debug)]
pub struct OutboundPort<'a> {
    /// The service port.
    pub port: u32,
    /// The egress listener that owns the port (a port-specific one wins over
    /// the catch-all, as in Istio).
    pub egress: &'a EgressListener,
    /// Services whose port speaks HTTP (HTTP, HTTP/2, gRPC), sorted by host;
    /// aliases among them only get a virtual host of their own when a
    /// VirtualService routes them.
    pub http: Vec<&'a Arc<Service>>,
    /// The other services on the port (TCP, TLS, undeclared), sorted by
    /// host; never an alias.
    pub tcp: Vec<&'a Arc<Service>>,
}

impl OutboundPort<'_> {
    /// Whether the port goes through an HTTP connection manager (and has a
    /// route config named after it).
    pub fn is_http(&self) -> bool {
        !self.http.is_empty()
    }
}

/// Every outbound port of a sidecar scope, sorted by port.
///
/// Ports Istio reserves for redirected traffic (15001, 15006) are left out
/// when they would take redirected traffic: Envoy refuses two listeners on
/// one address.
pub fn outbound_ports(scope: &Scope) -> Vec<OutboundPort<'_>> {
    let mut ports = BTreeSet::new();
    for egress in &scope.egress {
        // An alias opens no port: its names ride on the service it names.
        for svc in egress.services.iter().filter(|s| !s.is_alias()) {
            ports.extend(
                svc.ports.iter().map(|p| p.port).filter(|p| *p != 0 && egress.port.is_none_or(|only| only == *p)),
            );
        }
    }
    ports
        .into_iter()
        .filter_map(|port| {
            let egress = scope.egress_for(port)?;
            if !egress.capture_none && (port == naming::VIRTUAL_OUTBOUND_PORT || port == naming::VIRTUAL_INBOUND_PORT) {
                tracing::debug!(port, "service port collides with a virtual listener; no outbound listener for it");
                return None;
            }
            let (mut http, mut tcp) = (Vec::new(), Vec::new());
            for svc in &egress.services {
                match svc.port(port) {
                    Some(p) if p.protocol.is_http() => http.push(svc),
                    Some(_) if !svc.is_alias() => tcp.push(svc),
                    _ => {}
                }
            }
            // An alias's own VirtualService routes its names on an HTTP port
            // that a service it does not alias made HTTP; it makes no port HTTP.
            if http.iter().all(|s| s.is_alias()) {
                http.clear();
            }
            (!http.is_empty() || !tcp.is_empty()).then_some(OutboundPort { port, egress, http, tcp })
        })
        .collect()
}
