//! The gRPC generators against the protos gRPC reads: what a gRPC client
//! or server of a small mesh (`echo` in `app`, two versions, a
//! DestinationRule and a VirtualService with every routing feature the
//! issue names) is sent.

use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3::{
    Cluster,
    cluster::{ClusterDiscoveryType, DiscoveryType, LbConfig, LbPolicy},
};
use envoy_types::pb::envoy::config::listener::v3::{Listener, filter};
use envoy_types::pb::envoy::config::route::v3::{
    RouteConfiguration, route::Action, route_action::ClusterSpecifier, route_match::PathSpecifier,
};
use envoy_types::pb::envoy::extensions::filters::http::fault::v3::{HttpFault, fault_abort::ErrorType};
use envoy_types::pb::envoy::extensions::filters::http::rbac::v3::Rbac as HttpRbac;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, http_connection_manager::RouteSpecifier, http_filter,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    DownstreamTlsContext, UpstreamTlsContext, common_tls_context::ValidationContextType,
};
use envoy_types::pb::google::protobuf::Any;
use prost::Message;

use super::{cds, lds, rds, unsupported};
use crate::config::istio::MtlsMode;
use crate::model::store::Write;
use crate::model::{ConfigStore, Proxy, XdsClient};
use crate::push::{InboundKey, PushContext, Scope, ScopeInterner};

const ECHO: &str = "echo.app.svc.cluster.local";

const MESH: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: app}
spec:
  clusterIP: 10.96.0.10
  selector: {app: echo}
  ports: [{name: grpc, port: 7070, targetPort: 17070}, {name: tcp-raw, port: 9000}]
---
apiVersion: v1
kind: Pod
metadata: {name: echo-v1, namespace: app, labels: {app: echo, version: v1}}
spec: {serviceAccountName: echo}
status: {podIP: 10.0.0.1, phase: Running, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: echo-v2, namespace: app, labels: {app: echo, version: v2}}
spec: {serviceAccountName: echo}
status: {podIP: 10.0.0.2, phase: Running, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: v1
kind: Service
metadata: {name: other, namespace: elsewhere}
spec:
  clusterIP: 10.96.0.20
  selector: {app: other}
  ports: [{name: grpc, port: 7070}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: app}
spec:
  host: echo
  trafficPolicy:
    loadBalancer: {simple: LEAST_REQUEST}
    connectionPool: {http: {http2MaxRequests: 50, maxRetries: 3}}
    outlierDetection: {consecutive5xxErrors: 3}
    tls: {mode: ISTIO_MUTUAL}
  subsets:
  - name: v1
    labels: {version: v1}
  - name: v2
    labels: {version: v2}
    trafficPolicy:
      loadBalancer: {consistentHash: {httpHeaderName: x-user}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: app}
spec:
  hosts: [echo]
  http:
  - match: [{headers: {x-canary: {exact: "yes"}}}]
    route: [{destination: {host: echo, subset: v2}}]
  - match: [{uri: {prefix: /echo.Echo/Fail}}]
    fault: {abort: {grpcStatus: UNAVAILABLE, percentage: {value: 100}}}
    route: [{destination: {host: echo, subset: v1}}]
  - timeout: 3s
    mirror: {host: echo, subset: v2}
    corsPolicy: {allowOrigins: [{exact: "https://example.com"}]}
    headers: {request: {set: {x-from: mesh}}}
    route:
    - {destination: {host: echo, subset: v1}, weight: 80}
    - {destination: {host: echo, subset: v2}, weight: 20}
"#;

fn context(extra: &str) -> PushContext {
    let store = ConfigStore::new();
    let mut writes: Vec<Write> = crate::testing::bookinfo::puts(MESH);
    writes.extend(crate::testing::bookinfo::puts(extra));
    store.apply(writes);
    PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()))
}

fn client(id: &str) -> Proxy {
    Proxy::from_node(&crate::testing::memory::grpc_node(id, &[("app", "client")])).expect("a valid node")
}

fn server(labels: &[(&str, &str)]) -> Proxy {
    let id = "sidecar~10.0.0.1~echo-v1.app~app.svc.cluster.local";
    Proxy::from_node(&crate::testing::memory::grpc_node(id, labels)).expect("a valid node")
}

fn scope(ctx: &PushContext) -> Arc<Scope> {
    ctx.scope_for(&client("sidecar~10.0.0.9~client-1.app~app.svc.cluster.local"))
}

fn decode<M: Message + Default>(any: &Any) -> M {
    M::decode(any.value.as_slice()).expect("decodes")
}

fn manager(listener: &Listener) -> HttpConnectionManager {
    decode(listener.api_listener.as_ref().and_then(|a| a.api_listener.as_ref()).expect("an api_listener"))
}

fn cluster<'a>(clusters: &'a [Cluster], name: &str) -> &'a Cluster {
    clusters.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no cluster {name}"))
}

#[test]
fn a_client_has_a_listener_per_name_it_may_dial_pointing_at_the_routes_of_the_service_port() {
    let ctx = context("");
    let scope = scope(&ctx);
    assert_eq!(scope.key.client, XdsClient::Grpc);
    let listeners = lds::listeners(&ctx, &scope);
    let names: Vec<&str> = listeners.iter().map(|l| l.name.as_str()).collect();
    for name in ["echo:7070", "echo.app:7070", "echo.app.svc:7070", "echo.app.svc.cluster.local:7070", "echo:9000"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    assert!(names.contains(&"other.elsewhere.svc.cluster.local:7070"));
    assert!(
        !names.iter().any(|n| n.starts_with("other:") || n.starts_with("other.elsewhere:")),
        "short names of another namespace are not expanded, as Istio's tryFindFQDN: {names:?}"
    );
    let short = listeners.iter().find(|l| l.name == "echo:7070").expect("listed");
    let hcm = manager(short);
    let Some(RouteSpecifier::Rds(rds)) = &hcm.route_specifier else { panic!("RDS") };
    assert_eq!(rds.route_config_name, format!("outbound|7070||{ECHO}"));
    let filters: Vec<&str> = hcm.http_filters.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(filters, ["envoy.filters.http.fault", "envoy.filters.http.router"]);
    let Some(envoy_types::pb::envoy::config::core::v3::address::Address::SocketAddress(address)) =
        short.address.as_ref().and_then(|a| a.address.as_ref())
    else {
        panic!("a socket address")
    };
    assert_eq!(address.address, "10.96.0.10", "the service's virtual IP");
}

#[test]
fn short_names_expand_as_istio_expands_them() {
    let fqdn = "foo.ns.svc.cluster.local";
    assert_eq!(
        lds::host_spellings(fqdn, "ns", "ns.svc.cluster.local"),
        [fqdn, "foo", "foo.ns", "foo.ns.svc"],
        "the node's own namespace and domain"
    );
    assert_eq!(lds::host_spellings(fqdn, "other", "other.svc.cluster.local"), [fqdn], "another namespace");
    assert_eq!(
        lds::host_spellings(fqdn, "ns", "cluster.local"),
        [fqdn],
        "a bare cluster domain (Istio's grpc-simple template) expands nothing"
    );
    assert_eq!(lds::host_spellings("api.example.com", "ns", "ns.svc.cluster.local"), ["api.example.com"]);
    assert_eq!(lds::host_spellings(fqdn, "ns", ""), [fqdn], "no domain, no short names");
}

#[test]
fn a_route_config_carries_the_virtual_service_as_grpc_applies_it() {
    let ctx = context("");
    let configs = rds::route_configs(&ctx, &scope(&ctx));
    let config: &RouteConfiguration =
        configs.iter().find(|c| c.name == format!("outbound|7070||{ECHO}")).expect("the port's route config");
    assert_eq!(config.virtual_hosts.len(), 1, "only the service's own virtual host");
    let vhost = &config.virtual_hosts[0];
    for domain in ["echo", "echo:7070", "echo.app:7070", &format!("{ECHO}:7070"), "10.96.0.10:7070"] {
        assert!(vhost.domains.iter().any(|d| d == domain), "{domain} in {:?}", vhost.domains);
    }
    assert!(!config.ignore_port_in_host_matching, "gRPC matches the port it dialled");
    let [canary, fail, split] = &vhost.routes[..] else { panic!("three routes: {:?}", vhost.routes) };
    let Some(Action::Route(action)) = &canary.action else { panic!("a route") };
    assert_eq!(action.cluster_specifier, Some(ClusterSpecifier::Cluster(format!("outbound|7070|v2|{ECHO}"))));
    let header = &canary.r#match.as_ref().expect("a match").headers[0];
    assert_eq!(header.name, "x-canary");
    let Some(PathSpecifier::Prefix(prefix)) = fail.r#match.as_ref().and_then(|m| m.path_specifier.clone()) else {
        panic!("a prefix")
    };
    assert_eq!(prefix, "/echo.Echo/Fail");
    let fault: HttpFault = decode(&fail.typed_per_filter_config["envoy.filters.http.fault"]);
    assert_eq!(fault.abort.and_then(|a| a.error_type), Some(ErrorType::GrpcStatus(14)));
    let Some(Action::Route(action)) = &split.action else { panic!("a route") };
    let Some(ClusterSpecifier::WeightedClusters(weighted)) = &action.cluster_specifier else { panic!("weighted") };
    let weights: Vec<(String, u32)> =
        weighted.clusters.iter().map(|c| (c.name.clone(), c.weight.as_ref().map_or(0, |w| w.value))).collect();
    assert_eq!(weights, [(format!("outbound|7070|v1|{ECHO}"), 80), (format!("outbound|7070|v2|{ECHO}"), 20)]);
    let duration = action.max_stream_duration.as_ref().and_then(|d| d.max_stream_duration.as_ref());
    assert_eq!(duration.map(|d| d.seconds), Some(3), "the timeout, where gRPC reads it");
    assert!(action.request_mirror_policies.is_empty(), "gRPC does not mirror");
    assert!(split.request_headers_to_add.is_empty(), "gRPC does not rewrite headers");
    assert!(!split.typed_per_filter_config.contains_key("envoy.filters.http.cors"), "gRPC has no CORS filter");
    let tcp = configs.iter().find(|c| c.name == format!("outbound|9000||{ECHO}")).expect("a TCP port's config");
    assert!(tcp.virtual_hosts.is_empty(), "no HTTP on a TCP port");
}

#[test]
fn clusters_carry_what_grpc_applies_of_the_destination_rule() {
    let ctx = context("");
    let clusters = cds::clusters(&ctx, &scope(&ctx));
    let v1 = cluster(&clusters, &format!("outbound|7070|v1|{ECHO}"));
    assert_eq!(v1.cluster_discovery_type, Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)));
    assert_eq!(v1.eds_cluster_config.as_ref().map(|e| e.service_name.as_str()), Some(v1.name.as_str()));
    assert_eq!(v1.lb_policy, LbPolicy::RoundRobin as i32, "C-core refuses LEAST_REQUEST there");
    let outer = &v1.load_balancing_policy.as_ref().expect("a policy list").policies[0];
    let wrr = outer.typed_extension_config.as_ref().expect("a policy");
    assert_eq!(wrr.name, "envoy.load_balancing_policies.wrr_locality");
    let wrr: envoy_types::pb::envoy::extensions::load_balancing_policies::wrr_locality::v3::WrrLocality =
        decode(wrr.typed_config.as_ref().expect("typed"));
    let picking: Vec<String> = wrr
        .endpoint_picking_policy
        .expect("a picking policy")
        .policies
        .iter()
        .map(|p| p.typed_extension_config.as_ref().expect("a policy").name.clone())
        .collect();
    assert_eq!(
        picking,
        ["envoy.load_balancing_policies.least_request", "envoy.load_balancing_policies.round_robin"],
        "least request first, round robin for the libraries without it"
    );
    let thresholds = &v1.circuit_breakers.as_ref().expect("circuit breakers").thresholds;
    assert_eq!(thresholds.len(), 1);
    assert_eq!(thresholds[0].max_requests.as_ref().map(|v| v.value), Some(50));
    assert_eq!(thresholds[0].max_retries, None, "gRPC reads max_requests only");
    assert!(v1.outlier_detection.is_none(), "Istio's detectors are not gRPC's (reported)");
    let v2 = cluster(&clusters, &format!("outbound|7070|v2|{ECHO}"));
    assert_eq!(v2.lb_policy, LbPolicy::RingHash as i32);
    let Some(LbConfig::RingHashLbConfig(ring)) = &v2.lb_config else { panic!("a ring") };
    assert_eq!(ring.minimum_ring_size.as_ref().map(|v| v.value), Some(1024));
    let socket = v1.transport_socket.as_ref().expect("ISTIO_MUTUAL");
    assert_eq!(socket.name, "envoy.transport_sockets.tls");
    let Some(envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType::TypedConfig(any)) =
        &socket.config_type
    else {
        panic!("typed")
    };
    let context: UpstreamTlsContext = decode(any);
    let common = context.common_tls_context.expect("common");
    let identity = common.tls_certificate_provider_instance.expect("the workload certificate");
    assert_eq!((identity.instance_name.as_str(), identity.certificate_name.as_str()), ("default", "default"));
    let Some(ValidationContextType::CombinedValidationContext(combined)) = common.validation_context_type else {
        panic!("combined validation")
    };
    let checks = combined.default_validation_context.expect("checks");
    assert_eq!(checks.ca_certificate_provider_instance.map(|c| c.certificate_name), Some("ROOTCA".to_string()));
    #[allow(deprecated)] // the field gRPC reads
    let sans: Vec<String> = checks
        .match_subject_alt_names
        .iter()
        .filter_map(|m| match &m.match_pattern {
            Some(envoy_types::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern::Exact(e)) => {
                Some(e.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(sans, ["spiffe://cluster.local/ns/app/sa/echo"]);
    let other = cluster(&clusters, "outbound|7070||other.elsewhere.svc.cluster.local");
    assert!(other.transport_socket.is_none(), "no auto mTLS for gRPC: only where a rule says ISTIO_MUTUAL");
    assert_eq!(other.lb_policy, LbPolicy::RoundRobin as i32, "gRPC's default");
    assert!(clusters.iter().all(|c| !c.name.contains("PassthroughCluster") && !c.name.starts_with("inbound")));
}

#[test]
fn every_group_of_endpoints_has_a_locality() {
    let ctx = context("");
    for name in [format!("outbound|7070||{ECHO}"), format!("outbound|7070|v2|{ECHO}")] {
        let cla = crate::generate::eds::load_assignment(&ctx, &name, None).expect("an assignment");
        assert!(!cla.endpoints.is_empty());
        assert!(cla.endpoints.iter().all(|g| g.locality.is_some()), "gRPC refuses a group without a locality");
    }
}

fn inbound(ctx: &PushContext, proxy: &Proxy) -> InboundKey {
    (*ctx.inbound_for(proxy).1).clone()
}

fn chain_of(listener: &Listener) -> (&str, HttpConnectionManager, Option<DownstreamTlsContext>) {
    let [chain] = &listener.filter_chains[..] else { panic!("one chain") };
    let Some(filter::ConfigType::TypedConfig(any)) = &chain.filters[0].config_type else { panic!("typed") };
    let tls = chain.transport_socket.as_ref().map(|s| match &s.config_type {
        Some(envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType::TypedConfig(any)) => decode(any),
        None => panic!("typed"),
    });
    (chain.name.as_str(), decode(any), tls)
}

#[test]
fn a_server_listener_is_named_by_its_address_and_takes_mtls_as_peer_authentication_says() {
    let permissive = context("");
    let key = inbound(&permissive, &server(&[("app", "echo"), ("version", "v1")]));
    let port = key.ports.iter().find(|p| p.port == 17070).expect("the target port");
    assert_eq!((key.client, port.mtls), (XdsClient::Grpc, MtlsMode::Permissive));
    let name = "xds.istio.io/grpc/lds/inbound/[::]:17070";
    let listener = lds::server_listener(&key, name).expect("a listener of its target port");
    assert_eq!(listener.name, name);
    assert!(listener.listener_filters.is_empty() && listener.use_original_dst.is_none(), "gRPC refuses them");
    let (chain, hcm, tls) = chain_of(&listener);
    assert_eq!(chain, "inbound-plaintext", "PERMISSIVE is plain text: gRPC cannot serve both on one port");
    assert!(tls.is_none());
    let Some(RouteSpecifier::RouteConfig(routes)) = hcm.route_specifier else { panic!("inline routes") };
    assert!(matches!(routes.virtual_hosts[0].routes[0].action, Some(Action::NonForwardingAction(_))));
    assert_eq!(hcm.http_filters.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["envoy.filters.http.router"]);

    let labelled = inbound(&permissive, &server(&[("app", "echo"), ("security.istio.io/tlsMode", "istio")]));
    assert_eq!(chain_of(&lds::server_listener(&labelled, name).unwrap()).0, "inbound-mtls");

    let strict = context(
        "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: default, namespace: app}\nspec: {mtls: {mode: STRICT}}\n",
    );
    let key = inbound(&strict, &server(&[("app", "echo")]));
    let listener = lds::server_listener(&key, "xds.istio.io/grpc/lds/inbound/0.0.0.0:17070").unwrap();
    let (chain, _, tls) = chain_of(&listener);
    assert_eq!(chain, "inbound-mtls");
    let tls = tls.expect("TLS");
    assert_eq!(tls.require_client_certificate.map(|b| b.value), Some(true));

    for bad in [
        "xds.istio.io/grpc/lds/inbound/0.0.0.0:9999",
        "xds.istio.io/grpc/lds/inbound/0.0.0.0",
        "xds.istio.io/grpc/lds/inbound/localhost:17070",
        "xds.istio.io/grpc/lds/inbound/::1:17070",
        "echo:7070",
    ] {
        assert!(lds::server_listener(&key, bad).is_none(), "{bad}");
    }
}

fn rbac(hcm: &HttpConnectionManager, name: &str) -> HttpRbac {
    let filter = hcm.http_filters.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("no filter {name}"));
    let Some(http_filter::ConfigType::TypedConfig(any)) = &filter.config_type else { panic!("typed") };
    decode(any)
}

#[test]
fn a_server_enforces_deny_then_allow_with_only_what_grpc_can_check() {
    let ctx = context(
        r#"
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-fail, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  action: DENY
  rules:
  - to: [{operation: {paths: [/echo.Echo/Forbidden]}}]
  - from: [{source: {requestPrincipals: ["*"]}}]
    to: [{operation: {paths: [/echo.Echo/Jwt]}}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: callers, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  rules:
  - from: [{source: {namespaces: [app]}}]
  - when: [{key: "request.auth.claims[group]", values: [admins]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: audit, namespace: app}
spec:
  selector: {matchLabels: {app: echo}}
  action: AUDIT
  rules: [{}]
"#,
    );
    let key = inbound(&ctx, &server(&[("app", "echo")]));
    let listener = lds::server_listener(&key, "xds.istio.io/grpc/lds/inbound/0.0.0.0:17070").unwrap();
    let (_, hcm, _) = chain_of(&listener);
    let names: Vec<&str> = hcm.http_filters.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        ["envoy.filters.http.rbac.DENY", "envoy.filters.http.rbac", "envoy.filters.http.router"],
        "gRPC takes ALLOW and DENY only, each filter named once, DENY first"
    );
    let deny = rbac(&hcm, "envoy.filters.http.rbac.DENY").rules.expect("rules");
    assert_eq!(deny.action, 1);
    assert_eq!(deny.policies.len(), 2, "the JWT rule is kept without its JWT part: it denies more");
    let allow = rbac(&hcm, "envoy.filters.http.rbac").rules.expect("rules");
    assert_eq!(allow.action, 0);
    assert_eq!(allow.policies.len(), 1, "the rule needing a JWT claim allows nothing: left out");
    let encoded = format!("{allow:?}{deny:?}");
    assert!(!encoded.contains("SourcedMetadata") && !encoded.contains("Metadata("), "no matcher gRPC lacks");
}

#[test]
fn what_grpc_does_not_apply_is_reported_with_its_field_path() {
    let ctx = context(
        r#"
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: ext, namespace: app}
spec:
  action: CUSTOM
  provider: {name: authz}
  rules: [{to: [{operation: {paths: ["/a/{*}"]}}]}]
"#,
    );
    let notes = |kind: crate::config::ConfigKind, name: &str| {
        let stored = ctx.store.get(&crate::config::ConfigKey::new(kind, "app", name)).expect("stored");
        unsupported::notes(&stored.object)
    };
    let vs = notes(crate::config::ConfigKind::VirtualService, "echo");
    for expected in ["spec.http[2].mirror", "spec.http[2].corsPolicy", "spec.http[2].headers"] {
        assert!(vs.iter().any(|n| n.starts_with(expected)), "{expected} in {vs:?}");
    }
    assert!(!vs.iter().any(|n| n.starts_with("spec.http[0]")), "a header match is applied: {vs:?}");
    let dr = notes(crate::config::ConfigKind::DestinationRule, "echo");
    assert!(dr.iter().any(|n| n.starts_with("spec.trafficPolicy.outlierDetection")), "{dr:?}");
    assert!(dr.iter().any(|n| n.starts_with("spec.trafficPolicy.connectionPool")), "maxRetries: {dr:?}");
    let ap = notes(crate::config::ConfigKind::AuthorizationPolicy, "ext");
    assert!(ap.iter().any(|n| n.starts_with("spec.action")), "{ap:?}");
    assert!(ap.iter().any(|n| n.starts_with("spec.rules[0].to[0].operation.paths")), "{ap:?}");
}

#[test]
fn grpc_and_envoy_sidecars_of_one_namespace_never_share_a_scope() {
    let ctx = context("");
    let grpc = scope(&ctx);
    let envoy = ctx.scope_for(&crate::testing::bookinfo::proxy(
        "sidecar~10.0.0.8~client-2.app~app.svc.cluster.local",
        "REDIRECT",
        &[("app", "client")],
    ));
    assert_ne!(grpc.id, envoy.id);
    let other_grpc = ctx.scope_for(&client("sidecar~10.0.0.7~client-3.app~app.svc.cluster.local"));
    assert_eq!(grpc.id, other_grpc.id, "gRPC clients of one namespace share theirs");
}
