//! TLS in generated config: a sidecar's TLS ports told apart by SNI or
//! address, VirtualService `tls:` routes, DestinationRule TLS origination,
//! and a gateway's chain per server.

use envoy_types::pb::envoy::config::core::v3::{data_source::Specifier, transport_socket};
use envoy_types::pb::envoy::config::listener::v3::FilterChain;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    DownstreamTlsContext, UpstreamTlsContext, common_tls_context::ValidationContextType,
};

use super::*;
use crate::testing::certs;

const EGRESS: &str = "\
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: external-api, namespace: default}
spec:
  hosts: [api.external.test]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 443, name: https, protocol: HTTPS}, {number: 80, name: http, protocol: HTTP}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: other-api, namespace: default}
spec:
  hosts: [other.external.test]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 443, name: https, protocol: HTTPS}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vip-api, namespace: default}
spec:
  hosts: [vip.external.test]
  addresses: [240.0.0.7]
  location: MESH_EXTERNAL
  resolution: DNS
  ports: [{number: 443, name: tls, protocol: TLS}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: other-api, namespace: default}
spec:
  hosts: [other.external.test, '*.other.external.test']
  tls:
  - match: [{sniHosts: [other.external.test, a.other.external.test]}]
    route: [{destination: {host: api.external.test}}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: external-api, namespace: default}
spec:
  host: api.external.test
  trafficPolicy:
    portLevelSettings:
    - port: {number: 443}
      tls: {mode: SIMPLE, caCertificates: /etc/certs/api-ca.pem}
";

fn chain_by_sni<'a>(l: &'a Listener, sni: &[&str]) -> &'a FilterChain {
    l.filter_chains
        .iter()
        .find(|c| c.filter_chain_match.as_ref().is_some_and(|m| m.server_names == sni))
        .unwrap_or_else(|| panic!("{}: no chain for SNI {sni:?}", l.name))
}

#[test]
fn a_sidecar_tells_a_tls_port_s_services_apart_by_sni_or_address_and_routes_tls_routes() {
    let ctx = context(mesh_with(EGRESS));
    for mode in ["REDIRECT", "NONE"] {
        let scope = productpage(&ctx, mode);
        let listeners = lds::listeners(&ctx, &scope);
        let l = listeners.iter().find(|l| l.name == "0.0.0.0_443").expect("a 443 listener");
        assert_eq!(l.listener_filters[0].name, "envoy.filters.listener.tls_inspector", "{mode}");
        let api = chain_by_sni(l, &["api.external.test"]);
        assert_eq!(tcp_clusters(&tcp(&api.filters[0])), ["outbound|443||api.external.test"], "{mode}");
        let routed = chain_by_sni(l, &["a.other.external.test", "other.external.test"]);
        assert_eq!(
            tcp_clusters(&tcp(&routed.filters[0])),
            ["outbound|443||api.external.test"],
            "{mode}: the tls route"
        );
        let by_vip = l.filter_chains.iter().find(|c| {
            c.filter_chain_match
                .as_ref()
                .is_some_and(|m| m.prefix_ranges.iter().any(|r| r.address_prefix == "240.0.0.7"))
        });
        let by_name = l
            .filter_chains
            .iter()
            .find(|c| c.filter_chain_match.as_ref().is_some_and(|m| m.server_names == ["vip.external.test"]));
        if mode == "REDIRECT" {
            assert!(by_vip.is_some() && by_name.is_none(), "redirected: a service with a virtual IP is matched by it");
        } else {
            assert!(by_vip.is_none() && by_name.is_some(), "bound: no original destination, so by SNI");
        }
        let last = l.filter_chains.last().unwrap();
        assert!(last.filter_chain_match.is_none(), "{mode}: a catch-all for SNI no chain takes");
        assert_eq!(tcp_clusters(&tcp(&last.filters[0])), ["PassthroughCluster"], "{mode}: ALLOW_ANY passes it through");
    }
}

fn upstream(c: &Cluster) -> UpstreamTlsContext {
    let socket = c.transport_socket.as_ref().unwrap_or_else(|| panic!("{}: no TLS", c.name));
    let Some(transport_socket::ConfigType::TypedConfig(any)) = &socket.config_type else { panic!("typed") };
    UpstreamTlsContext::decode(any.value.as_slice()).unwrap()
}

#[test]
fn a_simple_destination_rule_originates_tls_checked_against_its_ca_with_the_host_as_sni() {
    let ctx = context(mesh_with(EGRESS));
    let clusters = cds::clusters(&ctx, &productpage(&ctx, "REDIRECT"));
    let tls = upstream(cluster(&clusters, "outbound|443||api.external.test"));
    assert_eq!(tls.sni, "", "no sni: the request's host is the SNI");
    let common = tls.common_tls_context.unwrap();
    let Some(ValidationContextType::ValidationContext(v)) = common.validation_context_type else { panic!("a CA") };
    assert_eq!(v.trusted_ca.and_then(|d| d.specifier), Some(Specifier::Filename("/etc/certs/api-ca.pem".into())));
    let options = protocol_options(cluster(&clusters, "outbound|443||api.external.test")).expect("HTTP options");
    let auto = options.upstream_http_protocol_options.expect("auto SNI");
    assert!(auto.auto_sni && auto.auto_san_validation);
    assert!(cluster(&clusters, "outbound|80||api.external.test").transport_socket.is_none(), "only its port");
}

#[test]
fn a_gateway_server_with_a_secret_gets_a_chain_of_its_own_and_one_without_is_left_out() {
    let (_, issuer) = certs::ca("test CA");
    let (cert, key) = certs::leaf(&issuer, &["shop.example.test"]);
    let yaml = format!(
        "{}---\n{}",
        certs::tls_secret("default", "shop-cert", &cert, &key, None),
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: tls, namespace: default}\nspec:\n  selector: {istio: ingressgateway}\n  servers:\n  - port: {number: 443, name: https-shop, protocol: HTTPS}\n    hosts: [shop.example.test]\n    tls: {mode: SIMPLE, credentialName: shop-cert}\n  - port: {number: 443, name: https-bank, protocol: HTTPS}\n    hosts: [bank.example.test]\n    tls: {mode: SIMPLE, credentialName: bank-cert}\n"
    );
    let ctx = context(mesh_with(&yaml));
    let scope = ingress(&ctx);
    let listeners = lds::listeners(&ctx, &scope);
    let l = listener(&listeners, "0.0.0.0_443");
    assert_eq!(l.filter_chains.len(), 1, "bank-cert does not exist: its server is left out");
    let shop = chain_by_sni(l, &["shop.example.test"]);
    let Some(transport_socket::ConfigType::TypedConfig(any)) = &shop.transport_socket.as_ref().unwrap().config_type
    else {
        panic!("typed")
    };
    let context = DownstreamTlsContext::decode(any.value.as_slice()).unwrap();
    let common = context.common_tls_context.unwrap();
    assert_eq!(common.tls_certificate_sds_secret_configs[0].name, "kubernetes://shop-cert");
    assert_eq!(common.alpn_protocols, ["h2", "http/1.1"]);
    assert_eq!(rds_name(&hcm(&shop.filters[0])), "https.443.https-shop.tls.default");
    let configs = rds::route_configs(&ctx, &scope);
    assert!(configs.iter().any(|c| c.name == "https.443.https-shop.tls.default"), "its own route config");
    let names = crate::generate::sds::secret_names(&ctx, &scope);
    assert!(names.contains("kubernetes://shop-cert"));
    let secret =
        crate::generate::sds::secret(&ctx, "default", crate::generate::sds::reader(&scope), "kubernetes://shop-cert");
    assert!(secret.is_some(), "the router reads the Secret of its namespace");
    let sidecar = productpage(&ctx, "REDIRECT");
    let denied =
        crate::generate::sds::secret(&ctx, "default", crate::generate::sds::reader(&sidecar), "kubernetes://shop-cert");
    assert!(denied.is_none(), "a sidecar does not read a Secret's key");
}
