//! What holds for every generator: references resolve, nothing is
//! duplicated, output is deterministic.

use super::*;

#[test]
fn every_reference_resolves_and_nothing_is_duplicated() {
    let ctx = context(mesh());
    holds_for(&ctx, [productpage(&ctx, "REDIRECT"), productpage(&ctx, "NONE"), ingress(&ctx), scoped(&ctx)]);
    // Headless, ExternalName and selector-less Services too.
    let ctx = context(mesh_with(super::service_shapes::SHAPES));
    holds_for(&ctx, [super::service_shapes::client(&ctx), super::service_shapes::router(&ctx)]);
}

fn holds_for(ctx: &PushContext, scopes: impl IntoIterator<Item = Arc<Scope>>) {
    for scope in scopes {
        let clusters: HashSet<String> = cds::clusters(ctx, &scope).into_iter().map(|c| c.name).collect();
        let configs = rds::route_configs(ctx, &scope);
        let config_names: HashSet<&str> = configs.iter().map(|c| c.name.as_str()).collect();
        let listeners = lds::listeners(ctx, &scope);

        let mut addresses = HashSet::new();
        for l in &listeners {
            assert!(addresses.insert(socket(l)), "{}: address used twice", l.name);
            let mut matches = HashSet::new();
            for chain in &l.filter_chains {
                let key = chain.filter_chain_match.as_ref().map(|m| m.encode_to_vec()).unwrap_or_default();
                assert!(matches.insert(key), "{}: two filter chains with the same match", l.name);
                for f in &chain.filters {
                    if f.name.ends_with("http_connection_manager") {
                        if let Some(RouteSpecifier::Rds(r)) = hcm(f).route_specifier {
                            assert!(
                                config_names.contains(r.route_config_name.as_str()),
                                "{}: no route config {}",
                                l.name,
                                r.route_config_name
                            );
                        }
                    } else {
                        for c in tcp_clusters(&tcp(f)) {
                            // Weighted TCP routes may name subsets no rule defines (Envoy then refuses
                            // those connections, as in Istio); everything else must exist.
                            assert!(clusters.contains(&c) || c.contains("|v"), "{}: no cluster {c}", l.name);
                        }
                    }
                }
            }
        }
        for rc in &configs {
            let mut domains = HashSet::new();
            let mut vhost_names = HashSet::new();
            for v in &rc.virtual_hosts {
                assert!(vhost_names.insert(&v.name), "{}: virtual host {} twice", rc.name, v.name);
                assert!(!v.domains.is_empty(), "{}: {} has no domains", rc.name, v.name);
                for d in &v.domains {
                    assert!(domains.insert(d), "{}: domain {d} twice", rc.name);
                }
                for c in v.routes.iter().flat_map(route_clusters) {
                    assert!(clusters.contains(&c), "{}/{}: no cluster {c}", rc.name, v.name);
                }
            }
        }
    }
}

#[test]
fn output_is_deterministic_across_builds_and_input_order() {
    let encode_all = |writes: Vec<Write>| {
        let ctx = context(writes);
        let mut bytes: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for (label, scope) in
            [("redirect", productpage(&ctx, "REDIRECT")), ("none", productpage(&ctx, "NONE")), ("gw", ingress(&ctx))]
        {
            for c in cds::clusters(&ctx, &scope) {
                if let Some(cla) = eds::load_assignment(&ctx, &c.name, None) {
                    bytes.insert(format!("eds {}", c.name), cla.encode_to_vec());
                }
                bytes.insert(format!("{label} cds {}", c.name), c.encode_to_vec());
            }
            for l in lds::listeners(&ctx, &scope) {
                bytes.insert(format!("{label} lds {}", l.name), l.encode_to_vec());
            }
            for r in rds::route_configs(&ctx, &scope) {
                bytes.insert(format!("{label} rds {}", r.name), r.encode_to_vec());
            }
        }
        bytes
    };
    let first = encode_all(mesh());
    let second = encode_all(mesh());
    let mut reversed = mesh();
    reversed.reverse();
    let third = encode_all(reversed);
    assert!(first.len() > 40, "fixture produces a real configuration");
    assert_eq!(first, second, "two builds encode identically");
    assert_eq!(first, third, "input order does not leak into the output");
}
