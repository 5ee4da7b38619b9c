//! Kubernetes Services as Istio converts them: headless (passthrough, with
//! or without a selector), `ExternalName` (an alias of the service it
//! names), and Services without a selector (endpoints only from slices).

use super::*;

/// A `shop` namespace: `ledger` (a Service with a VIP), `ledger-alias` and
/// `books` (ExternalName Services naming it, `books` through the other),
/// `elsewhere` (an ExternalName of a host no service defines), `loop-a`
/// and `loop-b` (naming each other), `db` (headless TCP with two Pods),
/// `web` (headless HTTP), `manual` (no selector, a hand-written slice).
pub(super) const SHAPES: &str = "\
apiVersion: v1
kind: Service
metadata: {name: ledger, namespace: shop}
spec: {clusterIP: 10.96.0.10, selector: {app: ledger}, ports: [{name: http, port: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: ledger-alias, namespace: shop}
spec: {type: ExternalName, externalName: ledger.shop.svc.cluster.local}
---
apiVersion: v1
kind: Service
metadata: {name: books, namespace: shop}
spec: {type: ExternalName, externalName: ledger-alias.shop.svc.cluster.local, ports: [{name: http, port: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: elsewhere, namespace: shop}
spec: {type: ExternalName, externalName: example.com}
---
apiVersion: v1
kind: Service
metadata: {name: loop-a, namespace: shop}
spec: {type: ExternalName, externalName: loop-b.shop.svc.cluster.local}
---
apiVersion: v1
kind: Service
metadata: {name: loop-b, namespace: shop}
spec: {type: ExternalName, externalName: loop-a.shop.svc.cluster.local}
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: shop}
spec: {clusterIP: None, selector: {app: db}, ports: [{name: tcp-pg, port: 5432}]}
---
apiVersion: v1
kind: Pod
metadata: {name: db-0, namespace: shop, labels: {app: db}}
status: {podIP: 10.1.0.1}
---
apiVersion: v1
kind: Pod
metadata: {name: db-1, namespace: shop, labels: {app: db}}
status: {podIP: 10.1.0.2}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {clusterIP: None, selector: {app: web}, ports: [{name: http, port: 8081}]}
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: shop, labels: {app: web}}
status: {podIP: 10.1.1.1}
---
apiVersion: v1
kind: Service
metadata: {name: manual, namespace: shop}
spec: {clusterIP: 10.96.0.20, ports: [{name: http, port: 8082}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: manual-1, namespace: shop, labels: {kubernetes.io/service-name: manual}}
addressType: IPv4
ports: [{name: http, port: 9999}]
endpoints: [{addresses: [192.168.7.7]}]
";

const LEDGER: &str = "ledger.shop.svc.cluster.local";

pub(super) fn client(ctx: &PushContext) -> Arc<Scope> {
    ctx.scope_for(&proxy("sidecar~10.9.0.1~client.shop~shop.svc.cluster.local", "REDIRECT", &[("app", "client")]))
}

pub(super) fn router(ctx: &PushContext) -> Arc<Scope> {
    ctx.scope_for(&proxy("router~10.9.0.2~gw.shop~shop.svc.cluster.local", "REDIRECT", &[("istio", "gw")]))
}

fn domains_of<'a>(configs: &'a [RouteConfiguration], port: &str, host: &str) -> &'a [String] {
    &vhost(config(configs, port), &format!("{host}:{}", port)).domains
}

#[test]
fn an_external_name_is_an_alias_with_no_cluster_or_listener_of_its_own() {
    let ctx = context(mesh_with(SHAPES));
    let scope = client(&ctx);
    let clusters = cds::clusters(&ctx, &scope);
    let names: Vec<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
    for alias in ["ledger-alias", "books", "elsewhere", "loop-a", "loop-b"] {
        assert!(!names.iter().any(|n| n.ends_with(&format!("|{alias}.shop.svc.cluster.local"))), "{alias}: {names:?}");
    }
    assert!(eds::load_assignment(&ctx, "outbound|8080||books.shop.svc.cluster.local", None).is_none());

    // The aliased service's virtual host answers to every alias that ends
    // at it (books through ledger-alias), in every form a Kubernetes name has.
    let configs = rds::route_configs(&ctx, &scope);
    let domains = domains_of(&configs, "8080", LEDGER);
    for name in ["ledger-alias", "ledger-alias.shop", "ledger-alias.shop.svc.cluster.local", "books.shop.svc"] {
        assert!(domains.iter().any(|d| d == name), "{name} missing from {domains:?}");
    }
    assert!(
        !config(&configs, "8080").virtual_hosts.iter().any(|v| v.name.starts_with("books.")),
        "an alias without a VirtualService has no virtual host of its own"
    );
    // Nothing answers to an alias of a host no service defines, or to a loop.
    let every: Vec<&String> = configs.iter().flat_map(|c| &c.virtual_hosts).flat_map(|v| &v.domains).collect();
    assert!(!every.iter().any(|d| d.starts_with("elsewhere") || d.starts_with("loop-")), "{every:?}");
    assert_eq!(ctx.services.concrete("loop-a.shop.svc.cluster.local"), "loop-a.shop.svc.cluster.local");
    assert_eq!(ctx.services.concrete("books.shop.svc.cluster.local"), LEDGER);
}

#[test]
fn a_route_to_an_alias_goes_to_the_service_it_names_and_an_alias_may_have_its_own_rules() {
    let rules = "\
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: to-books, namespace: shop}
spec:
  hosts: [manual]
  http: [{route: [{destination: {host: books}}]}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: books, namespace: shop}
spec:
  hosts: [books]
  http: [{match: [{uri: {prefix: /b}}], route: [{destination: {host: ledger}}]}]
";
    let ctx = context(mesh_with(&format!("{SHAPES}---\n{rules}")));
    let configs = rds::route_configs(&ctx, &client(&ctx));
    let manual = vhost(config(&configs, "8082"), "manual.shop.svc.cluster.local:8082");
    assert_eq!(single_cluster(&manual.routes[0]), format!("outbound|8080||{LEDGER}"), "to the aliased cluster");
    // books has a VirtualService: its names are its own virtual host's, not ledger's.
    let books = vhost(config(&configs, "8080"), "books.shop.svc.cluster.local:8080");
    assert!(books.domains.iter().any(|d| d == "books.shop"), "{:?}", books.domains);
    assert_eq!(single_cluster(&books.routes[0]), format!("outbound|8080||{LEDGER}"));
    let ledger = domains_of(&configs, "8080", LEDGER);
    assert!(!ledger.iter().any(|d| d.starts_with("books")), "{ledger:?}");
    assert!(ledger.iter().any(|d| d == "ledger-alias.shop"), "{ledger:?}");
}

#[test]
fn a_headless_service_is_passthrough_for_sidecars_and_eds_for_routers() {
    let ctx = context(mesh_with(SHAPES));
    let db = "outbound|5432||db.shop.svc.cluster.local";
    let sidecar = cds::clusters(&ctx, &client(&ctx));
    assert_eq!(discovery_type(cluster(&sidecar, db)), DiscoveryType::OriginalDst, "with a selector too");
    let gateway = cds::clusters(&ctx, &router(&ctx));
    assert_eq!(discovery_type(cluster(&gateway, db)), DiscoveryType::Eds, "a router has no original destination");
    let cla = eds::load_assignment(&ctx, db, None).unwrap();
    let mut addresses: Vec<String> = cla
        .endpoints
        .iter()
        .flat_map(|g| &g.lb_endpoints)
        .filter_map(|e| match &e.host_identifier {
            Some(HostIdentifier::Endpoint(ep)) => match ep.address.as_ref()?.address.as_ref()? {
                address::Address::SocketAddress(sa) => Some(sa.address.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    addresses.sort();
    assert_eq!(addresses, ["10.1.0.1", "10.1.0.2"]);

    // TCP: one chain matching the Pods' own addresses; HTTP: names with any prefix.
    let listeners = lds::listeners(&ctx, &client(&ctx));
    let chain = listener(&listeners, "0.0.0.0_5432")
        .filter_chains
        .iter()
        .find(|c| c.name == db)
        .expect("a chain for the headless service");
    let ranges: Vec<(String, u32)> = chain
        .filter_chain_match
        .as_ref()
        .unwrap()
        .prefix_ranges
        .iter()
        .map(|r| (r.address_prefix.clone(), r.prefix_len.unwrap().value))
        .collect();
    assert_eq!(ranges, [("10.1.0.1".to_string(), 32), ("10.1.0.2".to_string(), 32)]);
    let configs = rds::route_configs(&ctx, &client(&ctx));
    let web = domains_of(&configs, "8081", "web.shop.svc.cluster.local");
    assert!(web.iter().any(|d| d == "*.web.shop.svc.cluster.local"), "{web:?}");
    assert!(web.iter().any(|d| d == "*.web.shop"), "{web:?}");
}

#[test]
fn a_headless_service_s_pods_moving_regenerates_listeners() {
    let store = ConfigStore::new();
    store.apply(mesh_with(SHAPES));
    let prev = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    let scope = client(&prev);
    let changes = store.apply(crate::testing::bookinfo::puts(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: db-2, namespace: shop, labels: {app: db}}\nstatus: {podIP: 10.1.0.3}\n",
    ));
    let (next, pushed) = PushContext::next(&prev, changes.snapshot.clone(), &crate::push::PushRequest::new(changes));
    assert!(pushed.types.contains(crate::resource::TypeUrl::Listener), "{:?}", pushed.types);
    assert!(pushed.touched.contains(&scope.id), "the scope that sees db regenerates");
    let chain_ranges = |ctx: &PushContext| {
        let listeners = lds::listeners(ctx, &client(ctx));
        let chain =
            listener(&listeners, "0.0.0.0_5432").filter_chains.iter().find(|c| c.name.contains("|db.")).cloned();
        chain.unwrap().filter_chain_match.unwrap().prefix_ranges.len()
    };
    assert_eq!((chain_ranges(&prev), chain_ranges(&next)), (2, 3));

    // An endpoint of a service with a VIP stays in the endpoint lane (the
    // second: the first brings the service its first service account,
    // which its clusters' mesh mTLS checks).
    let ledger = |name: &str, ip: &str| {
        crate::testing::bookinfo::puts(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: shop, labels: {{app: ledger}}}}\nstatus: {{podIP: {ip}}}\n"
        ))
    };
    let changes = store.apply(ledger("ledger-1", "10.2.0.1"));
    let (next, pushed) = PushContext::next(&next, changes.snapshot.clone(), &crate::push::PushRequest::new(changes));
    assert!(!pushed.types.contains(crate::resource::TypeUrl::Listener));
    let changes = store.apply(ledger("ledger-2", "10.2.0.2"));
    let (_, pushed) = PushContext::next(&next, changes.snapshot.clone(), &crate::push::PushRequest::new(changes));
    assert!(pushed.endpoint_only && !pushed.types.contains(crate::resource::TypeUrl::Listener));
}

#[test]
fn a_service_without_a_selector_takes_its_endpoints_from_its_slices() {
    let ctx = context(mesh_with(SHAPES));
    let cla = eds::load_assignment(&ctx, "outbound|8082||manual.shop.svc.cluster.local", None).unwrap();
    let Some(HostIdentifier::Endpoint(ep)) = &cla.endpoints[0].lb_endpoints[0].host_identifier else { panic!() };
    let Some(address::Address::SocketAddress(sa)) = ep.address.as_ref().unwrap().address.as_ref() else { panic!() };
    assert_eq!((sa.address.as_str(), sa.port_specifier.clone()), ("192.168.7.7", Some(PortSpecifier::PortValue(9999))));
}
