//! A workload's own side of its configuration: [`InboundKey`], what
//! decides its inbound clusters and listeners (its ports, where each is
//! handed to the application and the mTLS mode its PeerAuthentications
//! give it, the policies that select it, the mesh config's defaults they
//! take), computed by [`inbound_key`] and interned as [`InboundId`].
//!
//! Kept apart from the outbound [`ScopeKey`](super::ScopeKey), so that
//! proxies of different services in one namespace still share every
//! outbound resource.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::config::istio::{self, ConnectionPoolSettings, MtlsMode};
use crate::config::mesh::InboundTrafficMode;
use crate::model::{Hostname, InterceptionMode, Protocol, Proxy, ProxyKind, XdsClient};
use crate::push::PushContext;
use crate::push::index::envoy_filter::InboundPatches;
use crate::push::index::{AppliedPolicy, AppliedTelemetry, ResolvedJwtRule};

/// One inbound port of a workload: where traffic arrives, and where the
/// sidecar hands it to the application.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct InboundPort {
    /// The port traffic arrives on (a Service's target port, or a Sidecar
    /// ingress listener's port).
    pub port: u32,
    /// Protocol, from the service port that targets it or the ingress listener.
    pub protocol: Protocol,
    /// Where the application listens.
    pub endpoint: InboundEndpoint,
    /// The address a listener of its own binds, for traffic that is not
    /// redirected (a Sidecar ingress listener with `captureMode: NONE`, or a
    /// NONE-mode proxy); `None`: a chain of `virtualInbound`.
    pub bind: Option<Arc<str>>,
    /// Connection pool of the inbound cluster (from the Sidecar).
    pub pool: Option<ConnectionPoolSettings>,
    /// The mutual TLS mode the PeerAuthentications give the port.
    pub mtls: MtlsMode,
}

/// Where a sidecar forwards inbound traffic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum InboundEndpoint {
    /// The address the client connected to (the mesh's inbound traffic
    /// mode PASSTHROUGH, Istio's default): the application must listen on
    /// the workload's address, not only on loopback.
    OriginalDestination,
    /// An IP address and port (127.0.0.1 under the LOCALHOST inbound mode,
    /// or where a Sidecar ingress listener's `defaultEndpoint` says).
    Socket {
        /// The address.
        ip: Arc<str>,
        /// The port.
        port: u32,
    },
    /// A Unix domain socket path.
    Unix(Arc<str>),
}

impl InboundPort {
    /// A port of a service that selects the workload, handed to the
    /// application as the mesh's inbound traffic mode says: where the
    /// client connected (PASSTHROUGH), or 127.0.0.1 at the same port
    /// (LOCALHOST), as Istio builds its inbound clusters.
    pub fn of_service(port: u32, protocol: Protocol, mode: InboundTrafficMode) -> InboundPort {
        let endpoint = match mode {
            InboundTrafficMode::Passthrough => InboundEndpoint::OriginalDestination,
            InboundTrafficMode::Localhost => InboundEndpoint::Socket { ip: Arc::from(LOCALHOST), port },
        };
        InboundPort { port, protocol, endpoint, bind: None, pool: None, mtls: MtlsMode::Permissive }
    }
}

/// Where inbound traffic goes when nothing else is said.
const LOCALHOST: &str = "127.0.0.1";

/// Interned [`InboundKey`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct InboundId(pub u32);

/// What decides a proxy's inbound configuration: its own ports.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct InboundKey {
    /// Sidecar or router (routers have no inbound configuration).
    pub kind: ProxyKind,
    /// Envoy, or a proxyless gRPC server (its inbound listeners are gRPC's).
    pub client: XdsClient,
    /// For a gRPC server: whether its pod is labelled
    /// `security.istio.io/tlsMode: istio`, which makes a PERMISSIVE port
    /// take mTLS only, as istiod decides (gRPC cannot tell plaintext from
    /// TLS on one port).
    pub tls_mode_istio: bool,
    /// Interception mode (NONE has no `virtualInbound`).
    pub interception: InterceptionMode,
    /// The workload's ports, sorted.
    pub ports: Vec<InboundPort>,
    /// Whether the proxy holds a workload certificate (over SDS): only
    /// then do its ports terminate mesh mTLS.
    pub mesh_certificates: bool,
    /// The AuthorizationPolicies that apply to the workload, by namespace
    /// then name (their RBAC filters guard every inbound port).
    pub authorization: Vec<Arc<AppliedPolicy>>,
    /// The JWT rules that apply to the workload, with their keys, by issuer
    /// (the JWT filter of every inbound HTTP port).
    pub jwt_rules: Vec<Arc<ResolvedJwtRule>>,
    /// The workload's own mTLS mode: what a port it does not declare takes.
    pub mtls: MtlsMode,
    /// What its server side logs (sidecars; routers have no inbound side).
    pub telemetry: Arc<AppliedTelemetry>,
    /// The mesh config's defaults its inbound clusters and listeners take.
    pub defaults: InboundDefaults,
    /// The EnvoyFilter patches of its inbound side (`None`: no patch applies).
    pub envoy_filters: Option<Arc<InboundPatches>>,
}

/// What of the mesh config a workload's inbound configuration reads: its
/// clusters' connect timeout and TCP keepalive (a Sidecar's inbound
/// connection pool overrides them), how long its listeners wait for
/// their listener filters (the inbound traffic mode is in its ports'
/// endpoints), and the trust domains its mTLS accepts. Only these, so that a mesh config edit of anything else
/// keeps every workload shape.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct InboundDefaults {
    /// `connectTimeout`.
    pub connect_timeout: crate::config::Duration,
    /// `tcpKeepalive`.
    pub tcp_keepalive: Option<istio::TcpKeepalive>,
    /// `protocolDetectionTimeout` (zero: no limit).
    pub protocol_detection_timeout: crate::config::Duration,
    /// The trust domains its mTLS ports accept peers in (none: any).
    pub trust_domains: Vec<Arc<str>>,
}

impl InboundDefaults {
    /// The inbound defaults of `mesh`.
    pub fn of(mesh: &crate::config::mesh::MeshConfig) -> InboundDefaults {
        InboundDefaults {
            connect_timeout: mesh.traffic.connect_timeout,
            tcp_keepalive: mesh.traffic.tcp_keepalive.clone(),
            protocol_detection_timeout: mesh.traffic.protocol_detection_timeout,
            trust_domains: mesh.trust_domains_for_validation(),
        }
    }
}

/// Computes the inbound key of a proxy: the ingress listeners of the
/// Sidecar that applies to it when it has any (they replace the rest, as in
/// Istio), else the target ports of the services of its namespace whose
/// selector matches its labels.
pub fn inbound_key(ctx: &PushContext, proxy: &Proxy) -> InboundKey {
    let mut ports: Vec<InboundPort> = Vec::new();
    let mut mtls = MtlsMode::default();
    if proxy.kind == ProxyKind::Sidecar {
        let sidecar = ctx.sidecars.for_workload(&proxy.namespace, &proxy.labels).map(|(_, s)| &s.spec);
        let sidecar_pool = sidecar.and_then(|s| s.inbound_connection_pool.clone());
        match sidecar.filter(|s| !s.ingress.is_empty()) {
            Some(spec) => {
                for listener in &spec.ingress {
                    if ports.iter().any(|i| i.port == listener.port.number) {
                        continue;
                    }
                    ports.push(ingress_port(proxy, listener, sidecar_pool.clone()));
                }
            }
            None => {
                for svc in ctx.services.selecting(&proxy.namespace, &proxy.labels) {
                    for p in &svc.ports {
                        let port = p.target_port.unwrap_or(p.port);
                        if !ports.iter().any(|i| i.port == port) {
                            ports.push(InboundPort {
                                pool: sidecar_pool.clone(),
                                ..InboundPort::of_service(port, p.protocol, ctx.mesh.traffic.inbound)
                            });
                        }
                    }
                }
            }
        }
        let modes = ctx.peer_authentications.workload(&proxy.namespace, &proxy.labels);
        for port in &mut ports {
            port.mtls = modes.port(port.port);
        }
        mtls = modes.mode;
        ports.sort();
    }
    // Routers have no inbound configuration: they share one key.
    let sidecar = proxy.kind == ProxyKind::Sidecar;
    if sidecar && proxy.client == XdsClient::Grpc {
        // A gRPC server: its listeners take its ports' mTLS modes and the
        // AuthorizationPolicies that select it, nothing else (no JWT, no
        // telemetry, no EnvoyFilter, as istiod's gRPC generator).
        return InboundKey {
            kind: proxy.kind,
            client: XdsClient::Grpc,
            tls_mode_istio: proxy.labels.get(crate::model::endpoint::TLS_MODE_LABEL).is_some_and(|v| v == "istio"),
            interception: InterceptionMode::None,
            ports,
            mesh_certificates: false,
            authorization: ctx.authorization.for_workload(&proxy.namespace, &proxy.labels),
            jwt_rules: Vec::new(),
            mtls,
            telemetry: Arc::default(),
            defaults: InboundDefaults::default(),
            envoy_filters: None,
        };
    }
    let mesh_certificates = proxy.mesh_certificates && sidecar;
    let (authorization, jwt_rules, telemetry) = if sidecar {
        (
            ctx.authorization.for_workload(&proxy.namespace, &proxy.labels),
            ctx.request_authentication.for_workload(&proxy.namespace, &proxy.labels),
            ctx.telemetry.server(proxy),
        )
    } else {
        (Vec::new(), Vec::new(), Arc::default())
    };
    InboundKey {
        kind: proxy.kind,
        client: XdsClient::Envoy,
        tls_mode_istio: false,
        interception: proxy.interception,
        ports,
        mesh_certificates,
        authorization,
        jwt_rules,
        mtls,
        telemetry,
        defaults: InboundDefaults::of(&ctx.mesh),
        envoy_filters: inbound_patches(ctx, proxy),
    }
}

/// The EnvoyFilter patches of a sidecar's inbound side, with the services
/// that select it per target port (what an inbound cluster match compares).
fn inbound_patches(ctx: &PushContext, proxy: &Proxy) -> Option<Arc<InboundPatches>> {
    let patches = ctx.envoy_filters.inbound(proxy);
    if patches.is_empty() {
        return None;
    }
    let mut hosts: BTreeMap<u32, Vec<Hostname>> = BTreeMap::new();
    for svc in ctx.services.selecting(&proxy.namespace, &proxy.labels) {
        for p in &svc.ports {
            let on_port = hosts.entry(p.target_port.unwrap_or(p.port)).or_default();
            if !on_port.contains(&svc.hostname) {
                on_port.push(svc.hostname.clone());
            }
        }
    }
    hosts.values_mut().for_each(|h| h.sort());
    Some(Arc::new(InboundPatches { patches, hosts }))
}

/// One Sidecar ingress listener as an inbound port of `proxy`.
fn ingress_port(
    proxy: &Proxy,
    listener: &istio::IstioIngressListener,
    sidecar_pool: Option<ConnectionPoolSettings>,
) -> InboundPort {
    let number = listener.port.number;
    let protocol = match (listener.port.protocol.as_deref(), listener.port.name.as_deref()) {
        (Some(p), _) => Protocol::from_name(p),
        (None, name) => Protocol::of_kubernetes_port(number, name, None),
    };
    let endpoint = match listener.default_endpoint.as_deref().filter(|e| !e.is_empty()) {
        None => InboundEndpoint::Socket { ip: Arc::from(LOCALHOST), port: number },
        Some(e) => match e.strip_prefix("unix://") {
            Some(path) => InboundEndpoint::Unix(Arc::from(path)),
            None => {
                let (ip, port) = e.rsplit_once(':').unwrap_or((e, ""));
                let ip = ip.trim_start_matches('[').trim_end_matches(']');
                let port = port.parse().unwrap_or(number);
                // `0.0.0.0` and `::` stand for the instance IP.
                let ip: Arc<str> = if ip == "0.0.0.0" || ip == "::" { proxy.ip.clone() } else { Arc::from(ip) };
                InboundEndpoint::Socket { ip, port }
            }
        },
    };
    let capture_none = listener.capture_mode.as_deref() == Some("NONE") || proxy.interception == InterceptionMode::None;
    let bind = capture_none.then(|| listener.bind.as_deref().map(Arc::from).unwrap_or_else(|| proxy.ip.clone()));
    InboundPort {
        port: number,
        protocol,
        endpoint,
        bind,
        pool: listener.connection_pool.clone().or(sidecar_pool),
        mtls: MtlsMode::Permissive,
    }
}
