//! Everything generated, checked by a real Envoy (`--mode validate`).

use super::*;

/// Runs `envoy --mode validate` on a bootstrap holding everything generated
/// for each scope: listeners and clusters as static resources, every route
/// config inline in a listener of its own (so Envoy also checks that routed
/// clusters exist), and every EDS assignment as a static cluster's
/// endpoints. Installs Envoy through `scripts/install-envoy.sh` when missing.
#[test]
fn envoy_accepts_everything_generated() {
    use envoy_types::pb::envoy::config::bootstrap::v3::{
        Bootstrap,
        bootstrap::{DynamicResources, StaticResources},
    };
    use envoy_types::pb::envoy::config::core::v3::{
        ApiConfigSource, ApiVersion, GrpcService, Node,
        api_config_source::ApiType,
        grpc_service::{EnvoyGrpc, TargetSpecifier},
    };
    use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{HttpFilter, http_filter};

    // The one recipe for getting Envoy: scripts/install-envoy.sh prints its path.
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-envoy.sh");
    let out = std::process::Command::new("bash").arg(&script).output().expect("running install-envoy.sh");
    assert!(out.status.success(), "install-envoy.sh failed: {}", String::from_utf8_lossy(&out.stderr));
    let envoy = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string());
    let ctx = context(bookinfo());
    let dir = tempfile::tempdir().unwrap();
    // The ADS cluster the `ads: {}` config sources point at.
    let mut xds = cds::clusters(&ctx, &productpage(&ctx, "REDIRECT"))
        .into_iter()
        .find(|c| c.name.starts_with("outbound|7070|"))
        .expect("the gRPC cluster carries HTTP/2 options");
    xds.name = "xds".into();
    xds.cluster_discovery_type = Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32));
    xds.eds_cluster_config = None;
    xds.load_assignment = Some(envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment {
        cluster_name: "xds".into(),
        ..Default::default()
    });
    for (label, scope, inbound) in [
        ("redirect", productpage(&ctx, "REDIRECT"), Some(productpage_inbound(&ctx, "REDIRECT"))),
        ("none", productpage(&ctx, "NONE"), Some(productpage_inbound(&ctx, "NONE"))),
        ("gateway", ingress(&ctx), None),
        ("scoped", scoped(&ctx), None),
    ] {
        let mut clusters = cds::clusters(&ctx, &scope);
        clusters.extend(inbound.iter().flat_map(cds::inbound_clusters));
        // EDS clusters only: DNS clusters carry their (host name) endpoints inline.
        let assignments: Vec<_> = clusters
            .iter()
            .filter(|c| c.eds_cluster_config.is_some())
            .filter_map(|c| eds::load_assignment(&ctx, &c.name))
            .collect();
        for (i, mut cla) in assignments.into_iter().enumerate() {
            let name = format!("eds-check-{i}");
            cla.cluster_name = name.clone();
            clusters.push(Cluster {
                name,
                connect_timeout: Some(envoy_types::pb::google::protobuf::Duration { seconds: 1, nanos: 0 }),
                cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32)),
                load_assignment: Some(cla),
                ..Default::default()
            });
        }
        clusters.push(xds.clone());

        let mut listeners = lds::listeners(&ctx, &scope);
        listeners.extend(inbound.iter().flat_map(lds::inbound_listeners));
        for (i, rc) in rds::route_configs(&ctx, &scope).into_iter().enumerate() {
            let mut manager = HttpConnectionManager {
                stat_prefix: format!("rds_check_{i}"),
                route_specifier: Some(RouteSpecifier::RouteConfig(rc)),
                ..Default::default()
            };
            manager.http_filters = vec![HttpFilter {
                name: "envoy.filters.http.router".into(),
                config_type: Some(http_filter::ConfigType::TypedConfig(
                    crate::generate::proto::any(&Router::default()),
                )),
                ..Default::default()
            }];
            listeners.push(Listener {
                name: format!("rds-check-{i}"),
                address: Some(crate::generate::proto::socket_address("127.0.0.2", 20000 + i as u32)),
                filter_chains: vec![envoy_types::pb::envoy::config::listener::v3::FilterChain {
                    filters: vec![Filter {
                        name: "envoy.filters.network.http_connection_manager".into(),
                        config_type: Some(filter::ConfigType::TypedConfig(crate::generate::proto::any(&manager))),
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            });
        }

        let bootstrap = Bootstrap {
            node: Some(Node { id: format!("{label}~check"), cluster: "check".into(), ..Default::default() }),
            static_resources: Some(StaticResources { listeners, clusters, ..Default::default() }),
            dynamic_resources: Some(DynamicResources {
                ads_config: Some(ApiConfigSource {
                    api_type: ApiType::Grpc as i32,
                    transport_api_version: ApiVersion::V3 as i32,
                    grpc_services: vec![GrpcService {
                        target_specifier: Some(TargetSpecifier::EnvoyGrpc(EnvoyGrpc {
                            cluster_name: "xds".into(),
                            ..Default::default()
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let path = dir.path().join(format!("{label}.pb"));
        std::fs::write(&path, bootstrap.encode_to_vec()).unwrap();
        let out = std::process::Command::new(&envoy)
            .args(["--mode", "validate", "--log-level", "warn", "-c"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{label}: Envoy refused the configuration:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
