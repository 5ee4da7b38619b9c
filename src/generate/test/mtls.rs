//! Mesh mTLS in generated config: what a proxy holding a workload
//! certificate originates (auto mTLS, ISTIO_MUTUAL) and what its inbound
//! ports take under each PeerAuthentication mode; and that a proxy without
//! one is sent none of it.

use envoy_types::pb::envoy::config::cluster::v3::cluster::TransportSocketMatch;
use envoy_types::pb::envoy::config::core::v3::{TransportSocket, transport_socket};
use envoy_types::pb::envoy::config::listener::v3::FilterChain;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    CommonTlsContext, DownstreamTlsContext, UpstreamTlsContext, common_tls_context::ValidationContextType,
};
use envoy_types::pb::google::protobuf::value::Kind;

use super::*;

/// `vault` (namespace `secure`): one Pod with a sidecar (tlsMode istio,
/// service account `vault`), one without; a TCP port and an HTTP port.
const VAULT: &str = "\
apiVersion: v1
kind: Service
metadata: {name: vault, namespace: secure}
spec:
  clusterIP: 10.40.0.1
  selector: {app: vault}
  ports: [{name: http, port: 8200}, {name: tcp-raft, port: 8201}]
---
apiVersion: v1
kind: Pod
metadata:
  name: vault-0
  namespace: secure
  labels: {app: vault, security.istio.io/tlsMode: istio}
spec: {serviceAccountName: vault}
status: {podIP: 10.41.0.1, phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: vault-legacy, namespace: secure, labels: {app: vault}}
spec: {}
status: {podIP: 10.41.0.2, phase: Running}
";

const VAULT_HTTP: &str = "outbound|8200||vault.secure.svc.cluster.local";
const VAULT_TCP: &str = "outbound|8201||vault.secure.svc.cluster.local";

/// A sidecar of namespace `secure`, with or without a workload certificate.
fn client(certificates: bool) -> Proxy {
    let mut proxy = proxy("sidecar~10.41.0.9~client.secure~secure.svc.cluster.local", "REDIRECT", &[("app", "client")]);
    proxy.mesh_certificates = certificates;
    proxy
}

/// A vault Pod's sidecar, with or without a workload certificate.
fn vault(certificates: bool) -> Proxy {
    let mut proxy = proxy("sidecar~10.41.0.1~vault-0.secure~secure.svc.cluster.local", "REDIRECT", &[("app", "vault")]);
    proxy.mesh_certificates = certificates;
    proxy
}

fn clusters_of(ctx: &PushContext, proxy: &Proxy) -> Vec<Cluster> {
    cds::clusters(ctx, &ctx.scope_for(proxy))
}

fn upstream(socket: &TransportSocket) -> UpstreamTlsContext {
    assert_eq!(socket.name, "envoy.transport_sockets.tls");
    match &socket.config_type {
        Some(transport_socket::ConfigType::TypedConfig(any)) => {
            UpstreamTlsContext::decode(any.value.as_slice()).unwrap()
        }
        None => panic!("no TLS context"),
    }
}

/// `(SDS certificate names, SDS validation name, exact SANs)` of a context.
fn identity_checks(common: &CommonTlsContext) -> (Vec<String>, String, Vec<String>) {
    let certs = common.tls_certificate_sds_secret_configs.iter().map(|s| s.name.clone()).collect();
    let Some(ValidationContextType::CombinedValidationContext(combined)) = &common.validation_context_type else {
        panic!("no combined validation context")
    };
    let root = combined.validation_context_sds_secret_config.as_ref().unwrap();
    // The mesh secrets come from the agent, not over ADS.
    let source = format!("{:?}", root.sds_config);
    assert!(source.contains("sds-grpc"), "{source}");
    #[allow(deprecated)]
    let sans = combined
        .default_validation_context
        .as_ref()
        .unwrap()
        .match_subject_alt_names
        .iter()
        .map(|m| match &m.match_pattern {
            Some(MatchPattern::Exact(s)) => s.clone(),
            Some(MatchPattern::Prefix(s)) => format!("{s}*"),
            other => panic!("neither exact nor a prefix: {other:?}"),
        })
        .collect();
    (certs, root.name.clone(), sans)
}

fn matches_of(c: &Cluster) -> Vec<(&str, Option<&str>)> {
    let tls_mode = |m: &TransportSocketMatch| {
        m.r#match.as_ref().and_then(|s| s.fields.get("tlsMode")).and_then(|v| match &v.kind {
            Some(Kind::StringValue(s)) => Some(s.clone()),
            _ => None,
        })
    };
    c.transport_socket_matches
        .iter()
        .map(|m| (m.name.as_str(), tls_mode(m).map(|s| if s == "istio" { "istio" } else { "other" })))
        .collect()
}

#[test]
fn auto_mtls_sends_tls_to_endpoints_with_sidecars_and_checks_their_service_accounts() {
    let ctx = context(mesh_with(VAULT));
    let clusters = clusters_of(&ctx, &client(true));
    for (name, http) in [(VAULT_HTTP, true), (VAULT_TCP, false)] {
        let c = cluster(&clusters, name);
        assert!(c.transport_socket.is_none(), "{name}: TLS per endpoint, not for all");
        assert_eq!(matches_of(c), [("tlsMode-istio", Some("istio")), ("tlsMode-disabled", None)], "{name}");
        let tls = upstream(c.transport_socket_matches[0].transport_socket.as_ref().unwrap());
        let port = if http { 8200 } else { 8201 };
        assert_eq!(tls.sni, format!("outbound_.{port}_._.vault.secure.svc.cluster.local"));
        let common = tls.common_tls_context.unwrap();
        assert_eq!(common.alpn_protocols, ["istio-peer-exchange", "istio"]);
        // The Pod without a service account runs as the namespace's `default`.
        assert_eq!(
            identity_checks(&common),
            (
                vec!["default".to_string()],
                "ROOTCA".to_string(),
                vec![
                    "spiffe://cluster.local/ns/secure/sa/default".to_string(),
                    "spiffe://cluster.local/ns/secure/sa/vault".to_string()
                ]
            )
        );
        assert_eq!(
            c.transport_socket_matches[1].transport_socket.as_ref().unwrap().name,
            "envoy.transport_sockets.raw_buffer"
        );
    }
    // EDS marks the endpoint whose sidecar terminates mTLS, and only it.
    let cla = eds::load_assignment(&ctx, VAULT_HTTP, None).unwrap();
    let marked: Vec<(String, bool)> = cla.endpoints[0]
        .lb_endpoints
        .iter()
        .map(|e| {
            let Some(HostIdentifier::Endpoint(ep)) = &e.host_identifier else { panic!("no endpoint") };
            let Some(address::Address::SocketAddress(sa)) = ep.address.as_ref().and_then(|a| a.address.as_ref()) else {
                panic!("no address")
            };
            let marked = e.metadata.as_ref().is_some_and(|m| {
                format!("{:?}", m.filter_metadata.get("envoy.transport_socket_match")).contains("istio")
            });
            (sa.address.clone(), marked)
        })
        .collect();
    assert_eq!(marked, [("10.41.0.1".to_string(), true), ("10.41.0.2".to_string(), false)]);
}

#[test]
fn a_proxy_without_a_workload_certificate_gets_no_mesh_tls() {
    let yaml = format!(
        "{VAULT}---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: vault, namespace: secure}}\nspec:\n  host: vault\n  trafficPolicy: {{tls: {{mode: ISTIO_MUTUAL}}}}\n"
    );
    let ctx = context(mesh_with(&yaml));
    let clusters = clusters_of(&ctx, &client(false));
    let c = cluster(&clusters, VAULT_HTTP);
    assert!(c.transport_socket.is_none() && c.transport_socket_matches.is_empty(), "{c:?}");
    assert_ne!(ctx.scope_for(&client(false)).id, ctx.scope_for(&client(true)).id, "they cannot share clusters");
}

#[test]
fn istio_mutual_applies_to_every_endpoint_with_the_rule_s_names_when_it_has_them() {
    let yaml = format!(
        "{VAULT}---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {{name: vault, namespace: secure}}
spec:
  host: vault
  trafficPolicy:
    tls: {{mode: ISTIO_MUTUAL}}
    portLevelSettings:
    - port: {{number: 8201}}
      tls: {{mode: ISTIO_MUTUAL, sni: raft.vault, subjectAltNames: [spiffe://cluster.local/ns/secure/sa/raft]}}
  subsets: [{{name: primary, labels: {{app: vault}}}}]
"
    );
    let ctx = context(mesh_with(&yaml));
    let clusters = clusters_of(&ctx, &client(true));
    let subset = cluster(&clusters, "outbound|8200|primary|vault.secure.svc.cluster.local");
    assert!(subset.transport_socket_matches.is_empty(), "ISTIO_MUTUAL is for every endpoint");
    let tls = upstream(subset.transport_socket.as_ref().expect("a TLS socket"));
    assert_eq!(tls.sni, "outbound_.8200_.primary_.vault.secure.svc.cluster.local");
    let (_, _, sans) = identity_checks(tls.common_tls_context.as_ref().unwrap());
    assert_eq!(sans.len(), 2, "the service's accounts: {sans:?}");
    let raft = upstream(cluster(&clusters, VAULT_TCP).transport_socket.as_ref().unwrap());
    assert_eq!(raft.sni, "raft.vault");
    let (_, _, sans) = identity_checks(raft.common_tls_context.as_ref().unwrap());
    assert_eq!(sans, ["spiffe://cluster.local/ns/secure/sa/raft"]);
}

#[test]
fn auto_mtls_stays_off_outside_the_mesh_and_where_the_namespace_disables_it() {
    let external = "\
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: partner, namespace: secure}
spec:
  hosts: [api.partner.test]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 443, name: tls, protocol: TLS}]
";
    let disabled = "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: off, namespace: secure}\nspec: {mtls: {mode: DISABLE}}\n";
    let ctx = context(mesh_with(&format!("{VAULT}---\n{external}---\n{disabled}")));
    let clusters = clusters_of(&ctx, &client(true));
    for name in ["outbound|443||api.partner.test", VAULT_HTTP] {
        let c = cluster(&clusters, name);
        assert!(c.transport_socket.is_none() && c.transport_socket_matches.is_empty(), "{name}");
    }
    // Another namespace's services keep auto mTLS.
    assert!(!cluster(&clusters, &format!("outbound|9080||{REVIEWS}")).transport_socket_matches.is_empty());
}

// ---------------------------------------------------------------- inbound

fn inbound_of(ctx: &PushContext, proxy: &Proxy) -> Vec<Listener> {
    lds::inbound_listeners(&ctx.inbound_for(proxy).1)
}

/// `(name, transport, ALPNs, terminates TLS)` of the chains of `port`.
fn port_chains(l: &Listener, port: u32) -> Vec<(String, String, usize, bool)> {
    l.filter_chains
        .iter()
        .filter(|c| c.filter_chain_match.as_ref().and_then(|m| m.destination_port).is_some_and(|p| p.value == port))
        .map(|c| {
            let m = c.filter_chain_match.as_ref().unwrap();
            (c.name.clone(), m.transport_protocol.clone(), m.application_protocols.len(), c.transport_socket.is_some())
        })
        .collect()
}

fn downstream(chain: &FilterChain) -> DownstreamTlsContext {
    match &chain.transport_socket.as_ref().unwrap().config_type {
        Some(transport_socket::ConfigType::TypedConfig(any)) => {
            DownstreamTlsContext::decode(any.value.as_slice()).unwrap()
        }
        None => panic!("no TLS context"),
    }
}

fn has_tls_inspector(l: &Listener) -> bool {
    l.listener_filters.iter().any(|f| f.name == "envoy.filters.listener.tls_inspector")
}

#[test]
fn permissive_ports_take_mesh_mtls_and_plain_text_on_one_port() {
    let ctx = context(mesh_with(VAULT));
    let listeners = inbound_of(&ctx, &vault(true));
    let inbound = listener(&listeners, "virtualInbound");
    assert!(has_tls_inspector(inbound));
    assert_eq!(
        port_chains(inbound, 8200),
        [
            ("inbound|8200||".to_string(), "tls".to_string(), 5, true),
            ("inbound|8200||-plaintext".to_string(), "raw_buffer".to_string(), 0, false),
        ]
    );
    assert_eq!(
        port_chains(inbound, 8201),
        [
            ("inbound|8201||".to_string(), "tls".to_string(), 5, true),
            ("inbound|8201||-tls".to_string(), "tls".to_string(), 0, false),
            ("inbound|8201||-plaintext".to_string(), "raw_buffer".to_string(), 0, false),
        ],
        "a TCP port passes a client's own TLS through"
    );
    let mtls_chain = inbound.filter_chains.iter().find(|c| c.name == "inbound|8200||").unwrap();
    let tls = downstream(mtls_chain);
    assert_eq!(tls.require_client_certificate.map(|b| b.value), Some(true));
    let common = tls.common_tls_context.as_ref().unwrap();
    assert_eq!(common.alpn_protocols, ["h2", "http/1.1"]);
    // A peer of the mesh's trust domain only, as Istio's sidecars check.
    let own_trust_domain = vec!["spiffe://cluster.local/*".to_string()];
    assert_eq!(identity_checks(common), (vec!["default".to_string()], "ROOTCA".to_string(), own_trust_domain));
    // The workload learns the client's identity.
    let manager = hcm(&mtls_chain.filters[0]);
    assert_eq!(manager.forward_client_cert_details, 2, "APPEND_FORWARD");
    assert!(manager.set_current_client_cert_details.as_ref().is_some_and(|d| d.uri));
}

#[test]
fn strict_refuses_plain_text_and_disable_takes_only_plain_text() {
    let policies = "\
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: vault, namespace: secure}
spec:
  selector: {matchLabels: {app: vault}}
  mtls: {mode: STRICT}
  portLevelMtls: {8201: {mode: DISABLE}}
";
    let ctx = context(mesh_with(&format!("{VAULT}---\n{policies}")));
    let listeners = inbound_of(&ctx, &vault(true));
    let inbound = listener(&listeners, "virtualInbound");
    assert_eq!(port_chains(inbound, 8200), [("inbound|8200||".to_string(), "tls".to_string(), 0, true)]);
    assert_eq!(port_chains(inbound, 8201), [("inbound|8201||".to_string(), String::new(), 0, false)]);

    // Without a certificate, the STRICT port refuses everything rather
    // than serve plain text; DISABLE is unchanged.
    let listeners = inbound_of(&ctx, &vault(false));
    let inbound = listener(&listeners, "virtualInbound");
    let refusing = inbound.filter_chains.iter().find(|c| c.name == "inbound|8200||").unwrap();
    assert_eq!(tcp_clusters(&tcp(&refusing.filters[0])), ["BlackHoleCluster"]);
    assert!(refusing.transport_socket.is_none());
    assert_eq!(port_chains(inbound, 8201), [("inbound|8201||".to_string(), String::new(), 0, false)]);
    assert!(!has_tls_inspector(inbound), "no chain matches on TLS");
}

#[test]
fn a_bound_ingress_listener_gets_the_port_s_chains_and_the_inspector() {
    let sidecar = "\
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: vault, namespace: secure}
spec:
  workloadSelector: {labels: {app: vault}}
  ingress:
  - port: {number: 8200, protocol: HTTP, name: http}
    defaultEndpoint: 127.0.0.1:18200
";
    let ctx = context(mesh_with(&format!("{VAULT}---\n{sidecar}")));
    let mut proxy = vault(true);
    proxy.interception = crate::model::InterceptionMode::None;
    let listeners = inbound_of(&ctx, &proxy);
    let bound = listener(&listeners, "10.41.0.1_8200");
    assert!(has_tls_inspector(bound));
    assert_eq!(port_chains(bound, 8200).len(), 2, "PERMISSIVE: mTLS and plain text");
}

#[test]
fn a_port_the_workload_does_not_declare_takes_the_workload_s_mode() {
    let catchall = |l: &Listener| -> Vec<(String, String, bool, Vec<String>)> {
        l.filter_chains
            .iter()
            .filter(|c| c.name.starts_with("virtualInbound-catchall-tcp"))
            .map(|c| {
                let transport = c.filter_chain_match.as_ref().map(|m| m.transport_protocol.clone()).unwrap_or_default();
                (c.name.clone(), transport, c.transport_socket.is_some(), tcp_clusters(&tcp(c.filters.last().unwrap())))
            })
            .collect()
    };
    let strict = "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: default, namespace: istio-system}\nspec: {mtls: {mode: STRICT}}\n";
    let ctx = context(mesh_with(&format!("{VAULT}---\n{strict}")));
    let listeners = inbound_of(&ctx, &vault(true));
    assert_eq!(
        catchall(listener(&listeners, "virtualInbound")),
        [(
            "virtualInbound-catchall-tcp".to_string(),
            "tls".to_string(),
            true,
            vec!["InboundPassthroughCluster".to_string()]
        )],
        "mesh-wide STRICT: an undeclared port takes mTLS only"
    );
    let listeners = inbound_of(&ctx, &vault(false));
    assert_eq!(
        catchall(listener(&listeners, "virtualInbound"))[0].3,
        ["BlackHoleCluster"],
        "without a certificate: refused"
    );

    let ctx = context(mesh_with(VAULT));
    let listeners = inbound_of(&ctx, &vault(true));
    let names: Vec<String> = catchall(listener(&listeners, "virtualInbound")).into_iter().map(|c| c.0).collect();
    assert_eq!(
        names,
        ["virtualInbound-catchall-tcp", "virtualInbound-catchall-tcp-tls", "virtualInbound-catchall-tcp-plaintext"]
    );
}

#[test]
fn an_istio_mutual_gateway_server_terminates_mesh_mtls_on_the_router_s_own_certificate() {
    use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::DownstreamTlsContext;
    let yaml = "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: mesh-edge, namespace: default}\nspec:\n  selector: {istio: ingressgateway}\n  servers:\n  - port: {number: 15443, name: https-mesh, protocol: HTTPS}\n    hosts: [\"*\"]\n    tls: {mode: ISTIO_MUTUAL, subjectAltNames: [spiffe://cluster.local/ns/default/sa/sleep]}\n---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: mesh-edge, namespace: default}\nspec:\n  hosts: [\"*\"]\n  gateways: [mesh-edge]\n  http: [{route: [{destination: {host: productpage, port: {number: 9080}}}]}]\n";
    let ctx = context(mesh_with(yaml));
    let mut router = crate::testing::bookinfo::ingress();
    router.mesh_certificates = true;
    let listeners = lds::listeners(&ctx, &ctx.scope_for(&router));
    let l = listener(&listeners, "0.0.0.0_15443");
    let chain = &l.filter_chains[0];
    let socket = chain.transport_socket.as_ref().expect("TLS terminated");
    let Some(envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType::TypedConfig(any)) =
        &socket.config_type
    else {
        panic!("typed config")
    };
    let context = DownstreamTlsContext::decode(any.value.as_slice()).unwrap();
    assert_eq!(context.require_client_certificate.map(|b| b.value), Some(true));
    let common = context.common_tls_context.unwrap();
    assert_eq!(common.tls_certificate_sds_secret_configs[0].name, "default", "the router's own certificate");
    assert_eq!(common.alpn_protocols, ["h2", "http/1.1"]);
    let text = format!("{:?}", common.validation_context_type);
    assert!(text.contains("ROOTCA") && text.contains("sds-grpc"), "clients checked against the mesh root: {text}");
    assert!(text.contains("spiffe://cluster.local/ns/default/sa/sleep"), "and the server's SANs");
    assert_eq!(chain.filters[0].name, "envoy.filters.network.http_connection_manager");

    // A router without a workload certificate cannot serve it.
    let plain = lds::listeners(&ctx, &ctx.scope_for(&crate::testing::bookinfo::ingress()));
    assert!(plain.iter().all(|l| l.name != "0.0.0.0_15443"), "no chain, so no listener");
}
