//! The VirtualServices of the Gateway API: the last step of route
//! translation, after attachment, merging the converted rules of every route
//! bound to one (listener, host), or for mesh routing to one (route
//! namespace, Service port, Service host), into one VirtualService.
//!
//! It owns the names and bindings of those VirtualServices (a listener's
//! Istio Gateway, or `mesh` exported to the route's namespace unless the
//! route is the Service's own), the match each TLS route takes from its
//! host, and the port a mesh route is limited to. Invariant: the rules of a
//! VirtualService are ordered by the routes' age (then namespace/name),
//! then stably by precedence, and the VirtualServices by name, so that the
//! output depends on nothing but the store.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::istio;
use crate::config::{ConfigObject, ObjectMeta, SourceRef};
use crate::model::StoredObject;

use super::precedence::sort_by_precedence;
use super::routes::{RouteRules, Rules};
use super::{GATEWAY_SEMANTICS, ROUTE_SEMANTICS_ANNOTATION};

/// What a group of rules binds to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Binding {
    /// A listener's Istio Gateway (`namespace/name`).
    Gateway(String),
    /// Mesh routing (GAMMA): the sidecars calling a Service, from routes of
    /// `namespace` (the Service's own: `producer`), on `port` or every port.
    Mesh { namespace: String, port: Option<u32>, producer: bool },
}

/// The converted rules of the routes bound to each (binding, host).
pub(super) type RulesByHost = BTreeMap<(Binding, String), Vec<RouteRules>>;

/// One VirtualService per (binding, host), in name order.
pub(super) fn virtual_services(per_host: RulesByHost) -> Vec<Arc<StoredObject>> {
    let mut out = Vec::new();
    for ((binding, h), mut routes) in per_host {
        routes.sort_by(|a, b| a.order.cmp(&b.order));
        let namespace = routes[0].namespace.clone();
        let (gateway, name, export_to) = match &binding {
            Binding::Gateway(g) => (g.clone(), format!("{}~{h}", g.replace('/', "~")), Vec::new()),
            Binding::Mesh { namespace: route_ns, port, producer } => {
                let port = port.map(|p| format!("~{p}")).unwrap_or_default();
                // A route of the Service's own namespace applies to
                // every client; another namespace's to its own clients.
                let export_to = if *producer { Vec::new() } else { vec![istio::EXPORT_SAME_NAMESPACE.to_string()] };
                (istio::MESH_GATEWAY.to_string(), format!("mesh~{route_ns}{port}~{h}"), export_to)
            }
        };
        let revision = routes.iter().map(|r| r.revision).max().unwrap_or(0);
        let parents: Vec<String> = routes.iter().map(|r| format!("{}/{}.{}", r.kind, r.name, r.namespace)).collect();
        let (mut http, mut tcp, mut tls) = (Vec::new(), Vec::new(), Vec::new());
        for r in routes {
            match r.rules {
                Rules::Http(routes) => http.extend(routes),
                Rules::Tcp(routes) => tcp.extend(routes),
                Rules::Tls(routes) => tls.extend(routes),
            }
        }
        let port = match &binding {
            Binding::Mesh { port, .. } => *port,
            Binding::Gateway(_) => None,
        };
        if let Some(port) = port {
            for m in http.iter_mut().flat_map(|r| r.matches.iter_mut()) {
                m.port = Some(port);
            }
            for r in &mut tcp {
                r.matches = vec![istio::L4MatchAttributes { port: Some(port), ..Default::default() }];
            }
        }
        // A TLS route takes the names of its host here: on a listener,
        // the route's hostname narrowed to the listener's; for a Service,
        // the Service's host.
        for r in &mut tls {
            r.matches = vec![istio::TlsMatchAttributes { sni_hosts: vec![h.clone()], port, ..Default::default() }];
        }
        sort_by_precedence(&mut http);
        let vs = istio::VirtualService {
            metadata: ObjectMeta {
                name: name.clone(),
                namespace: namespace.clone(),
                annotations: BTreeMap::from([
                    (ROUTE_SEMANTICS_ANNOTATION.to_string(), GATEWAY_SEMANTICS.to_string()),
                    ("internal.istio.io/parents".to_string(), parents.join(",")),
                ]),
                ..Default::default()
            },
            spec: istio::VirtualServiceSpec { hosts: vec![h], gateways: vec![gateway], http, tcp, tls, export_to },
        };
        out.push(Arc::new(StoredObject {
            object: ConfigObject::VirtualService(vs).into(),
            source: SourceRef { file: Arc::from(format!("gateway-api:{}", parents.join(","))), doc: 0 },
            revision,
        }));
    }
    out.sort_by_key(|s| s.object.key());
    out
}
