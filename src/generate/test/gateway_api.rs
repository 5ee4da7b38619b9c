//! Gateway API Gateways and HTTPRoutes, as a router labelled with the
//! Gateway's name receives them: listeners on the Gateway's address when
//! the router holds it, the Gateway API's path and backend semantics.

use super::*;

const GATEWAY_API: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge, namespace: default}
spec:
  gatewayClassName: istio
  addresses: [{type: IPAddress, value: 10.0.9.1}]
  listeners:
  - {name: http, port: 8080, protocol: HTTP, hostname: "*.example.com"}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: shop, namespace: default}
spec:
  parentRefs: [{name: edge}]
  hostnames: [shop.example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /cart/}}]
    filters:
    - type: URLRewrite
      urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /}}
    backendRefs: [{name: reviews, port: 9080}]
  - matches: [{path: {type: Exact, value: /gone}}]
    backendRefs: [{name: missing, port: 9080}]
"#;

fn edge_router(ip: &str, labels: &[(&str, &str)]) -> Proxy {
    proxy(&format!("router~{ip}~edge-istio-0.default~default.svc.cluster.local"), "REDIRECT", labels)
}

#[test]
fn a_router_labelled_with_the_gateway_name_serves_its_listeners() {
    let ctx = context(mesh_with(GATEWAY_API));
    let served = ctx.scope_for(&edge_router("10.0.9.7", &[("gateway.networking.k8s.io/gateway-name", "edge")]));
    let listeners = lds::listeners(&ctx, &served);
    assert_eq!(listeners.iter().map(socket).collect::<Vec<_>>(), [("0.0.0.0".to_string(), 8080)]);
    // The older label works too; a router of another namespace or without
    // the label serves nothing of it.
    let older = ctx.scope_for(&edge_router("10.0.9.8", &[("istio.io/gateway-name", "edge")]));
    assert_eq!(lds::listeners(&ctx, &older).len(), 1);
    let elsewhere = ctx.scope_for(&proxy(
        "router~10.0.9.9~edge-istio-0.other~other.svc.cluster.local",
        "REDIRECT",
        &[("gateway.networking.k8s.io/gateway-name", "edge")],
    ));
    assert!(lds::listeners(&ctx, &elsewhere).is_empty());
    assert!(lds::listeners(&ctx, &ctx.scope_for(&edge_router("10.0.9.10", &[]))).is_empty());
}

#[test]
fn a_router_holding_the_gateway_address_binds_it() {
    let ctx = context(mesh_with(GATEWAY_API));
    let scope = ctx.scope_for(&edge_router("10.0.9.1", &[("gateway.networking.k8s.io/gateway-name", "edge")]));
    let listeners = lds::listeners(&ctx, &scope);
    assert_eq!(listeners.iter().map(socket).collect::<Vec<_>>(), [("10.0.9.1".to_string(), 8080)]);
}

#[test]
fn routes_keep_the_gateway_api_semantics() {
    let ctx = context(mesh_with(GATEWAY_API));
    let scope = ctx.scope_for(&edge_router("10.0.9.7", &[("gateway.networking.k8s.io/gateway-name", "edge")]));
    let configs = rds::route_configs(&ctx, &scope);
    let rc = config(&configs, "http.8080");
    let host = vhost(rc, "shop.example.com:8080");
    assert_eq!(host.domains, ["shop.example.com"]);
    let exact = &host.routes[0];
    assert_eq!(exact.r#match.as_ref().unwrap().path_specifier, Some(PathSpecifier::Path("/gone".into())));
    // A backend that does not resolve answers 500, not 503.
    assert_eq!(
        route_action(exact).cluster_not_found_response_code,
        envoy_types::pb::envoy::config::route::v3::route_action::ClusterNotFoundResponseCode::InternalServerError
            as i32
    );
    let cart = &host.routes[1];
    // A prefix matches whole segments, without its trailing `/`.
    assert_eq!(cart.r#match.as_ref().unwrap().path_specifier, Some(PathSpecifier::PathSeparatedPrefix("/cart".into())));
    // Replacing the prefix by `/` removes it, keeping one `/`.
    let rewrite = route_action(cart).regex_rewrite.as_ref().expect("a regex rewrite");
    assert_eq!(rewrite.substitution, r"/\2");
    assert_eq!(rewrite.pattern.as_ref().unwrap().regex, "^/cart(/?)(.*)");
    assert_eq!(single_cluster(cart), "outbound|9080||reviews.default.svc.cluster.local");
}

#[test]
fn istio_rules_keep_istio_semantics() {
    // The same prefix in an Istio VirtualService stays a plain prefix.
    let ctx = context(mesh());
    let scope = ingress(&ctx);
    for rc in rds::route_configs(&ctx, &scope) {
        for host in &rc.virtual_hosts {
            for r in &host.routes {
                let spec = r.r#match.as_ref().and_then(|m| m.path_specifier.as_ref());
                assert!(!matches!(spec, Some(PathSpecifier::PathSeparatedPrefix(_))), "{}: {spec:?}", rc.name);
            }
        }
    }
}

/// Mesh routing (GAMMA): reviews' owner sends everything to v1; the
/// `other` namespace's own route sends its clients to v3.
const MESH_ROUTES: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: reviews-v1, namespace: default}
spec: {selector: {app: reviews, version: v1}, ports: [{name: http, port: 9080}]}
---
apiVersion: v1
kind: Service
metadata: {name: reviews-v3, namespace: default}
spec: {selector: {app: reviews, version: v3}, ports: [{name: http, port: 9080}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: reviews, namespace: default}
spec:
  parentRefs: [{group: "", kind: Service, name: reviews, port: 9080}]
  rules: [{backendRefs: [{name: reviews-v1, port: 9080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: reviews-for-other, namespace: other}
spec:
  parentRefs: [{group: "", kind: Service, name: reviews, namespace: default}]
  rules: [{backendRefs: [{name: reviews-v3, namespace: default, port: 9080}]}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: other-to-default, namespace: default}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: other}]
  to: [{group: "", kind: Service}]
"#;

/// The cluster the sidecar of `scope` sends `reviews` requests to.
fn reviews_cluster(ctx: &PushContext, scope: &Scope) -> String {
    let configs = rds::route_configs(ctx, scope);
    let rc = config(&configs, "9080");
    let host = rc
        .virtual_hosts
        .iter()
        .find(|v| v.domains.iter().any(|d| d == REVIEWS))
        .unwrap_or_else(|| panic!("no virtual host for {REVIEWS}"));
    single_cluster(&host.routes[0]).to_string()
}

#[test]
fn a_mesh_route_routes_the_callers_of_its_service_and_a_consumer_route_its_own_namespace() {
    let ctx = context(mesh_with(MESH_ROUTES));
    let productpage = productpage(&ctx, "NONE");
    assert_eq!(reviews_cluster(&ctx, &productpage), "outbound|9080||reviews-v1.default.svc.cluster.local");
    let other = ctx.scope_for(&proxy("sidecar~10.0.7.1~client.other~other.svc.cluster.local", "NONE", &[]));
    assert_eq!(reviews_cluster(&ctx, &other), "outbound|9080||reviews-v3.default.svc.cluster.local");
}
