//! `PushContext` built and moved on: scopes, incremental indexes, and
//! what `next` reports as changed.

use super::*;
use crate::testing::bookinfo;
use crate::testing::bookinfo::productpage;

#[test]
fn a_scope_is_computed_once_per_snapshot() {
    let ctx = PushContext::build(bookinfo::store().snapshot(), 1, Arc::new(ScopeInterner::default()));
    let a = ctx.scope_for(&productpage());
    let b = ctx.scope_for(&productpage());
    assert!(Arc::ptr_eq(&a, &b), "the memo hands out the one scope");
    assert_eq!(ctx.scopes().len(), 1);
}

#[test]
fn a_delegate_edit_dirties_the_hosts_of_its_roots() {
    let store = crate::model::ConfigStore::new();
    store.apply(bookinfo::with_cases());
    let prev = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    let changes = store.apply(bookinfo::puts(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: cart-routes, namespace: other}\n\
         spec:\n  http:\n  - route: [{destination: {host: billing, port: {number: 9080}}, weight: 100}]\n",
    ));
    let (_, pushed) = PushContext::next(&prev, changes.snapshot.clone(), &PushRequest::new(changes));
    assert!(
        pushed.dirty_hosts.contains("storefront.default.svc.cluster.local"),
        "the root's host: {:?}",
        pushed.dirty_hosts
    );
}

#[test]
fn a_routing_change_shares_every_other_index_and_keeps_every_scope_object() {
    let store = bookinfo::store();
    let prev = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    let scope = prev.scope_for(&productpage());
    let changes = store.apply(bookinfo::puts(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: reviews, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - route: [{destination: {host: reviews, subset: v1}}]\n",
    ));
    let (next, pushed) = PushContext::next(&prev, changes.snapshot.clone(), &PushRequest::new(changes));
    assert_eq!(next.version, prev.version + 1);
    assert!(!Arc::ptr_eq(&prev.virtual_services, &next.virtual_services), "the changed index is rebuilt");
    assert!(Arc::ptr_eq(&prev.services, &next.services), "the rest is shared");
    assert!(Arc::ptr_eq(&prev.endpoints, &next.endpoints));
    assert!(Arc::ptr_eq(&prev.destination_rules, &next.destination_rules));
    assert_eq!(pushed.types, TypeSet::of(&[TypeUrl::Listener, TypeUrl::Route]), "routes change, clusters do not");
    assert!(pushed.touched.contains(&scope.id), "the scope that sees reviews regenerates its routes");
    assert!(!pushed.rescope && !pushed.full);
    let carried = next.scope(scope.id).expect("the scope object is carried over");
    assert!(Arc::ptr_eq(&scope, &carried), "what a scope sees did not change: the same object");
    assert!(Arc::ptr_eq(&prev.interner, &next.interner), "scope ids keep their meaning");
}

#[test]
fn a_workload_of_a_new_service_account_regenerates_clusters_and_one_of_a_known_account_only_endpoints() {
    let store = bookinfo::store();
    let prev = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    let pod = |name: &str, ip: &str, account: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default, labels: {{app: ratings, version: v1}}}}\nspec: {{serviceAccountName: {account}}}\nstatus: {{podIP: {ip}, phase: Running}}\n"
        )
    };
    let changes = store.apply(bookinfo::puts(&pod("ratings-v1-b", "10.0.9.1", "bookinfo-ratings")));
    let (next, pushed) = PushContext::next(&prev, changes.snapshot.clone(), &PushRequest::new(changes));
    assert!(pushed.endpoint_only, "the same account: endpoints only");
    assert_eq!(pushed.types, TypeSet::of(&[TypeUrl::Endpoint, TypeUrl::Address, TypeUrl::Authorization]));

    let changes = store.apply(bookinfo::puts(&pod("ratings-v1-c", "10.0.9.2", "intruder")));
    let (_, pushed) = PushContext::next(&next, changes.snapshot.clone(), &PushRequest::new(changes));
    assert!(!pushed.endpoint_only, "mTLS clients must learn the new identity");
    assert!(pushed.types.contains(TypeUrl::Cluster), "{:?}", pushed.types);
}

#[test]
fn a_peer_authentication_regenerates_and_rescopes_everything() {
    let store = bookinfo::store();
    let prev = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    let changes = store.apply(bookinfo::puts(
        "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: default, namespace: istio-system}\nspec: {mtls: {mode: STRICT}}\n",
    ));
    let (next, pushed) = PushContext::next(&prev, changes.snapshot.clone(), &PushRequest::new(changes));
    assert!(pushed.full && pushed.rescope);
    let key = next.inbound_for(&bookinfo::productpage_in("REDIRECT")).1;
    assert!(!key.ports.is_empty());
    assert!(key.ports.iter().all(|p| p.mtls == crate::config::istio::MtlsMode::Strict), "{key:?}");
}

#[test]
fn a_fetched_trust_bundle_regenerates_only_the_pcds_of_every_scope() {
    use crate::config::mesh::spiffe_bundle::FetchedTrustBundle;
    let store = bookinfo::store();
    let prev = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    let scopes = [prev.scope_for(&productpage()), prev.scope_for(&bookinfo::ingress())];
    let bundle = FetchedTrustBundle {
        metadata: crate::config::ObjectMeta { name: "spiffe-bundle-1".into(), ..Default::default() },
        url: "https://bundle.example".into(),
        roots: vec!["root".into()],
        ..Default::default()
    };
    let changes = store.apply(vec![crate::model::store::Write::put(
        ConfigObject::FetchedTrustBundle(Box::new(bundle)),
        crate::config::SourceRef { file: "test".into(), doc: 0 },
    )]);
    let (next, pushed) = PushContext::next(&prev, changes.snapshot.clone(), &PushRequest::new(changes));
    assert_eq!(pushed.types, TypeSet::of(&[TypeUrl::ProxyConfig]), "nothing Envoy holds");
    assert!(!pushed.full && !pushed.rescope && pushed.dirty_hosts.is_empty());
    for scope in &scopes {
        assert!(pushed.touched.contains(&scope.id), "one bundle for all: every scope's PCDS is stale");
        let carried = next.scope(scope.id).expect("carried over");
        assert!(Arc::ptr_eq(scope, &carried), "what a scope sees did not change");
    }
    assert!(Arc::ptr_eq(&prev.services, &next.services) && Arc::ptr_eq(&prev.virtual_services, &next.virtual_services));
}

#[test]
fn a_new_service_regenerates_every_scope_and_rescopes() {
    let store = bookinfo::store();
    let prev = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    let scope = prev.scope_for(&productpage());
    let changes = store.apply(bookinfo::puts(
        "apiVersion: v1\nkind: Service\nmetadata: {name: payments, namespace: default}\nspec:\n  selector: {app: payments}\n  ports: [{name: http, port: 9080}]\n",
    ));
    let (next, pushed) = PushContext::next(&prev, changes.snapshot.clone(), &PushRequest::new(changes));
    assert!(pushed.full && pushed.rescope && pushed.types == TypeSet::ALL);
    assert!(next.scope(scope.id).is_none(), "what scopes see changed: none is carried over");
    assert_eq!(next.scope_for(&productpage()).id, scope.id, "the same key keeps its id");
}

#[test]
fn a_node_relabelled_moves_the_locality_of_exactly_its_pods() {
    let store = crate::model::ConfigStore::new();
    store.apply(bookinfo::puts(
        "apiVersion: v1\nkind: Service\nmetadata: {name: ledger, namespace: shop}\n\
         spec: {selector: {app: ledger}, ports: [{name: http, port: 9080}]}\n---\n\
         apiVersion: v1\nkind: Node\nmetadata: {name: worker-1, labels: {topology.kubernetes.io/region: us-east, \
         topology.kubernetes.io/zone: us-east-1a}}\n---\n\
         apiVersion: v1\nkind: Node\nmetadata: {name: worker-2, labels: {failure-domain.beta.kubernetes.io/region: eu, \
         failure-domain.beta.kubernetes.io/zone: eu-1, topology.istio.io/subzone: rack-9}}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: shop, labels: {app: ledger}}\n\
         spec: {nodeName: worker-1}\nstatus: {podIP: 10.0.0.1}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: b, namespace: shop, labels: {app: ledger}}\n\
         spec: {nodeName: worker-2}\nstatus: {podIP: 10.0.0.2}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: c, namespace: shop, labels: {app: ledger, istio-locality: ap.ap-1}}\n\
         spec: {nodeName: worker-1}\nstatus: {podIP: 10.0.0.3}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: d, namespace: shop, labels: {app: ledger}}\n\
         spec: {nodeName: gone}\nstatus: {podIP: 10.0.0.4}\n",
    ));
    let localities = |ctx: &PushContext| -> Vec<(String, String)> {
        let endpoints = ctx.endpoints.get("ledger.shop.svc.cluster.local").expect("ledger has endpoints");
        endpoints.endpoints.iter().map(|e| (e.address.to_string(), e.locality.to_string())).collect()
    };
    let prev = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    let pairs = |list: &[(&str, &str)]| list.iter().map(|(a, l)| (a.to_string(), l.to_string())).collect::<Vec<_>>();
    assert_eq!(
        localities(&prev),
        pairs(&[
            ("10.0.0.1", "us-east/us-east-1a/"),
            ("10.0.0.2", "eu/eu-1/rack-9"),
            ("10.0.0.3", "ap/ap-1"),
            ("10.0.0.4", ""),
        ]),
        "the Node's labels (current, then beta), the Pod's own label first, nothing for an unknown Node"
    );

    let changes = store.apply(bookinfo::puts(
        "apiVersion: v1\nkind: Node\nmetadata: {name: worker-1, labels: {topology.kubernetes.io/region: us-west, \
         topology.kubernetes.io/zone: us-west-2b}}\n",
    ));
    let request = PushRequest::new(changes);
    assert!(request.is_endpoint_only(), "a Node change takes the endpoint lane");
    let (next, pushed) = PushContext::next(&prev, store.snapshot(), &request);
    assert_eq!(
        localities(&next),
        pairs(&[
            ("10.0.0.1", "us-west/us-west-2b/"),
            ("10.0.0.2", "eu/eu-1/rack-9"),
            ("10.0.0.3", "ap/ap-1"),
            ("10.0.0.4", ""),
        ])
    );
    assert!(pushed.endpoint_hosts.contains("ledger.shop.svc.cluster.local"));
    // ztunnel's addresses carry a Pod's locality too.
    assert_eq!(pushed.types, TypeSet::of(&[TypeUrl::Endpoint, TypeUrl::Address, TypeUrl::Authorization]));
    let rebuilt = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    assert_eq!(localities(&next), localities(&rebuilt), "the incremental index agrees with a fresh build");
}

#[test]
fn a_mesh_config_change_rebuilds_on_the_stored_mesh_config_and_regenerates_everything() {
    let store = bookinfo::store();
    let prev = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    prev.scope_for(&productpage());
    let mesh = MeshConfig { root_namespace: "mesh-root".into(), ..MeshConfig::default() };
    let object = crate::config::ConfigObject::MeshConfig(Box::new(crate::config::mesh::MeshConfigObject::new(mesh)));
    let changes = store
        .apply([crate::model::store::Write::put(object, crate::config::SourceRef { file: "mesh".into(), doc: 0 })]);
    let (next, pushed) = PushContext::next(&prev, changes.snapshot.clone(), &PushRequest::new(changes));
    assert_eq!(&*next.mesh.root_namespace, "mesh-root", "the snapshot serves the stored mesh config");
    assert!(pushed.full && pushed.rescope && pushed.types == TypeSet::ALL, "{pushed:?}");
    assert_eq!(next.version, prev.version + 1);
    // A later change keeps it.
    let changes = store.apply(bookinfo::puts(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: reviews, namespace: default}\nspec:\n  hosts: [reviews]\n  http:\n  - route: [{destination: {host: reviews, subset: v1}}]\n",
    ));
    let (after, _) = PushContext::next(&next, changes.snapshot.clone(), &PushRequest::new(changes));
    assert_eq!(&*after.mesh.root_namespace, "mesh-root");
}

/// The authorizer of a CUSTOM policy on productpage, as its inbound key carries it.
fn productpage_authorizer(ctx: &PushContext) -> Option<Result<Arc<crate::model::authorizers::Authorizer>, Arc<str>>> {
    let key = ctx.inbound_for(&bookinfo::productpage_in("REDIRECT")).1;
    key.authorization.iter().find(|p| p.is_custom()).and_then(|p| p.authorizer.clone())
}

#[test]
fn a_custom_policy_s_authorizer_follows_the_mesh_config_and_the_service_it_names() {
    let store = bookinfo::store();
    store.apply(bookinfo::puts(
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: ext, namespace: default}\n\
         spec:\n  action: CUSTOM\n  provider: {name: ext}\n  rules: [{to: [{operation: {paths: [/admin]}}]}]\n",
    ));
    let prev = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    assert!(productpage_authorizer(&prev).unwrap().is_err(), "Istio's default mesh config has no authorizer");

    // The mesh config names one: everything is pushed and the key carries it (its service not yet there).
    let mesh = crate::config::mesh::MeshSettings::parse(
        "mesh",
        "extensionProviders:\n- {name: ext, envoyExtAuthzHttp: {service: authz.default.svc.cluster.local, port: 80}}\n",
    )
    .unwrap()
    .mesh_config();
    let object = crate::config::ConfigObject::MeshConfig(Box::new(crate::config::mesh::MeshConfigObject::new(mesh)));
    let changes = store
        .apply([crate::model::store::Write::put(object, crate::config::SourceRef { file: "mesh".into(), doc: 0 })]);
    let (next, pushed) = PushContext::next(&prev, changes.snapshot.clone(), &PushRequest::new(changes));
    assert!(pushed.full && pushed.rescope);
    let why = productpage_authorizer(&next).unwrap().unwrap_err();
    assert!(why.contains("is not a service of the mesh"), "{why}");

    // Its service arrives: the authorizer resolves, and every workload's key is computed again.
    let changes = store.apply(bookinfo::puts(
        "apiVersion: v1\nkind: Service\nmetadata: {name: authz, namespace: default}\nspec: {ports: [{name: http, port: 80}]}\n",
    ));
    let (after, pushed) = PushContext::next(&next, changes.snapshot.clone(), &PushRequest::new(changes));
    assert!(pushed.full && pushed.rescope);
    let authorizer = productpage_authorizer(&after).unwrap().expect("resolved");
    assert_eq!(&*authorizer.host, "authz.default.svc.cluster.local");
}

#[test]
fn an_envoy_filter_reaches_its_namespace_or_from_the_root_every_proxy() {
    let filter = |namespace: &str| {
        format!(
            "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {{name: f, namespace: {namespace}}}\nspec:\n  configPatches:\n  - applyTo: CLUSTER\n    match: {{cluster: {{name: BlackHoleCluster}}}}\n    patch: {{operation: REMOVE}}\n"
        )
    };
    let store = bookinfo::store();
    let prev = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    let before = prev.scope_for(&productpage());
    assert!(before.key.envoy_filters.is_empty());
    // Another namespace's filter: only its scopes are touched; keys are recomputed.
    let changes = store.apply(bookinfo::puts(&filter("elsewhere")));
    let (next, pushed) = PushContext::next(&prev, changes.snapshot.clone(), &PushRequest::new(changes));
    assert!(!pushed.full && pushed.rescope && pushed.namespaces.contains("elsewhere"));
    assert!(!pushed.touches_scope(&before), "a default-namespace scope is not touched");
    assert!(pushed.types.contains(TypeUrl::Cluster) && pushed.types.contains(TypeUrl::ExtensionConfig));
    assert!(next.scope_for(&productpage()).key.envoy_filters.is_empty());
    // The proxy's own namespace: its scope key holds the patch.
    let changes = store.apply(bookinfo::puts(&filter("default")));
    let (next, pushed) = PushContext::next(&next, changes.snapshot.clone(), &PushRequest::new(changes));
    assert!(pushed.touches_scope(&before));
    let after = next.scope_for(&productpage());
    assert_eq!(after.key.envoy_filters.len(), 1);
    assert_ne!(after.id, before.id, "a new scope: its clusters are generated anew");
    // The root namespace: every proxy.
    let changes = store.apply(bookinfo::puts(&filter("istio-system")));
    let (_, pushed) = PushContext::next(&next, changes.snapshot.clone(), &PushRequest::new(changes));
    assert!(pushed.full && pushed.rescope);
}

#[test]
fn a_pod_binding_to_a_waypoint_regenerates_the_waypoint_s_listeners_even_when_only_endpoints_moved() {
    let store = bookinfo::store();
    let waypoint = "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: waypoint, namespace: default}\n\
        spec: {gatewayClassName: istio-waypoint, listeners: [{name: mesh, port: 15008, protocol: HBONE}]}\n---\n\
        apiVersion: v1\nkind: Service\nmetadata: {name: waypoint, namespace: default}\nspec: {ports: [{name: mesh, port: 15008}]}\n";
    store.apply(bookinfo::puts(waypoint));
    let prev = PushContext::build(store.snapshot(), 1, Arc::new(ScopeInterner::default()));
    let mut proxy = productpage();
    proxy.kind = crate::model::ProxyKind::Waypoint;
    proxy.labels = Arc::new([("gateway.networking.k8s.io/gateway-name".to_string(), "waypoint".to_string())].into());
    let scope = prev.scope_for(&proxy);
    let sidecar = prev.scope_for(&productpage());
    // A Pod of a known account takes the waypoint for its traffic: for
    // sidecars only its endpoint moved.
    let changes = store.apply(bookinfo::puts(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: ratings-v1-b, namespace: default, labels: {app: ratings, version: v1, \
         istio.io/use-waypoint: waypoint}}\nspec: {serviceAccountName: bookinfo-ratings}\nstatus: {podIP: 10.0.9.1, phase: Running}\n",
    ));
    let (_, pushed) = PushContext::next(&prev, changes.snapshot.clone(), &PushRequest::new(changes));
    assert!(pushed.endpoint_only);
    assert!(pushed.types.contains(TypeUrl::Listener) && pushed.types.contains(TypeUrl::Cluster), "{:?}", pushed.types);
    assert!(pushed.touches_scope(&scope), "the waypoint's chains follow its bound workloads");
    assert!(!pushed.touches_scope(&sidecar), "a sidecar regenerates nothing for it");
}

#[test]
fn proxies_of_one_scope_and_shape_share_one_copy_of_each_key() {
    // Every stream keeps its keys: at 10,000 streams, a copy each of the
    // inbound key alone was 12 MB.
    let ctx = PushContext::build(bookinfo::store().snapshot(), 1, Arc::new(ScopeInterner::default()));
    let (one, other) = (bookinfo::productpage_in("REDIRECT"), bookinfo::productpage_in("REDIRECT"));
    let (scope, scope_again) = (ctx.scope_key_for(&one), ctx.scope_key_for(&other));
    assert_eq!(scope.0, scope_again.0);
    assert!(Arc::ptr_eq(&scope.1, &scope_again.1));
    let (inbound, inbound_again) = (ctx.inbound_for(&one), ctx.inbound_for(&other));
    assert_eq!(inbound.0, inbound_again.0);
    assert!(Arc::ptr_eq(&inbound.1, &inbound_again.1));
    let gateway = ctx.inbound_for(&bookinfo::ingress());
    assert_ne!(gateway.0, inbound.0, "another shape has a key of its own");
    assert!(!Arc::ptr_eq(&gateway.1, &inbound.1));
}
