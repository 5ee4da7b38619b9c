//! Serving across clusters and networks: per-cluster virtual IPs; EDS
//! with split horizon and Istio's weights (the case of istiod's
//! `TestSplitHorizonEds`), mTLS-only crossing, gateways from labelled
//! Services, an east-west gateway's own view, and cluster-local hosts.

use super::*;
use crate::config::mesh::networks::MeshNetworks;
use crate::config::mesh::{MeshConfig, MeshConfigObject};
use crate::config::{ClusterId, ConfigObject, SourceRef};
use crate::push::scope::endpoint_view;
use std::sync::Arc;

/// Documents of `yaml`, read from cluster `cluster` (`None`: the local one).
fn in_cluster(cluster: Option<&str>, yaml: &str) -> Vec<Write> {
    let mut writes = crate::testing::bookinfo::puts(yaml);
    for w in &mut writes {
        if let (Write::Put(object, _), Some(id)) = (w, cluster) {
            Arc::make_mut(object).meta_mut().cluster = ClusterId::remote(id);
        }
    }
    writes
}

fn mesh_config(cluster_id: &str, networks: &str) -> Write {
    let (networks, problems) = MeshNetworks::parse("meshNetworks", networks).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    let mesh = MeshConfig { cluster_id: cluster_id.into(), networks: Arc::new(networks), ..MeshConfig::default() };
    Write::put(
        ConfigObject::MeshConfig(Box::new(MeshConfigObject::new(mesh))),
        SourceRef { file: "mesh".into(), doc: 0 },
    )
}

/// A Service `name` of `default` on `port` (target `target`) and `pods`
/// Pods `name-K` at `PREFIX.K` with a sidecar (`tlsMode: istio`).
fn service_with_pods(name: &str, port: u32, target: u32, prefix: &str, pods: usize, labels: &str) -> String {
    let mut yaml = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\n\
         spec: {{selector: {{app: {name}}}, ports: [{{name: http, port: {port}, targetPort: {target}}}]}}\n"
    );
    for k in 1..=pods {
        yaml.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}-{prefix}-{k}, namespace: default, \
             labels: {{app: {name}, security.istio.io/tlsMode: istio{labels}}}}}\n\
             status: {{podIP: {prefix}.{k}, phase: Running}}\n"
        ));
    }
    yaml
}

fn sidecar_in(network: &str, cluster: Option<&str>) -> Proxy {
    let mut p = proxy("sidecar~10.99.0.1~client.default~default.svc.cluster.local", "REDIRECT", &[]);
    p.metadata.insert("NETWORK", network);
    if let Some(cluster) = cluster {
        p.metadata.insert("CLUSTER_ID", cluster);
    }
    p
}

/// `(address, port, weight, tlsMode istio)` of every endpoint, in order.
fn sent(ctx: &PushContext, cluster: &str, proxy: &Proxy) -> Vec<(String, u32, u32, bool)> {
    let view = endpoint_view(ctx, proxy);
    let cla = eds::load_assignment(ctx, cluster, view.as_deref()).expect("an assignment");
    cla.endpoints
        .iter()
        .flat_map(|g| &g.lb_endpoints)
        .map(|e| {
            let (address, port) = socket_of(e);
            (address, port, e.load_balancing_weight.unwrap().value, e.metadata.is_some())
        })
        .collect()
}

fn owned(list: &[(&str, u32, u32)]) -> Vec<(String, u32, u32, bool)> {
    list.iter().map(|(a, p, w)| (a.to_string(), *p, *w, true)).collect()
}

/// istiod's `TestSplitHorizonEds`: four clusters, network N with N
/// endpoints; gateways (meshNetworks addresses, port 80) for networks 1
/// and 2, two for network 3, none for network 4. Every weight is scaled
/// by 2 (the groups have 1, 1 and 2 gateways).
fn split_horizon_mesh() -> PushContext {
    let networks = "networks: {\
      network1: {endpoints: [{fromRegistry: cluster1}], gateways: [{address: 159.122.219.1, port: 80}]},\
      network2: {endpoints: [{fromRegistry: cluster2}], gateways: [{address: 159.122.219.2, port: 80}]},\
      network3: {endpoints: [{fromRegistry: cluster3}], gateways: [{address: 159.122.219.3, port: 80}, {address: 179.114.119.3, port: 80}]},\
      network4: {endpoints: [{fromRegistry: cluster4}]}}";
    let mut writes = vec![mesh_config("cluster1", networks)];
    for i in 1..=4usize {
        let cluster = (i > 1).then(|| format!("cluster{i}"));
        writes.extend(in_cluster(
            cluster.as_deref(),
            &service_with_pods("service5", 1080, 2080, &format!("10.{i}.0"), i, ""),
        ));
    }
    context(writes)
}

const SERVICE5: &str = "outbound|1080||service5.default.svc.cluster.local";

#[test]
fn split_horizon_sends_other_networks_through_their_gateways_with_istios_weights() {
    let ctx = split_horizon_mesh();
    let network4 = [("10.4.0.1", 2080, 2), ("10.4.0.2", 2080, 2), ("10.4.0.3", 2080, 2), ("10.4.0.4", 2080, 2)];
    let from = |n: &str| sent(&ctx, SERVICE5, &sidecar_in(n, None));
    let mut want = vec![("10.1.0.1", 2080, 2)];
    want.extend(network4);
    want.extend([("159.122.219.2", 80, 4), ("159.122.219.3", 80, 3), ("179.114.119.3", 80, 3)]);
    assert_eq!(from("network1"), owned(&want), "from network 1");
    let mut want = vec![("10.2.0.1", 2080, 2), ("10.2.0.2", 2080, 2)];
    want.extend(network4);
    want.extend([("159.122.219.1", 80, 2), ("159.122.219.3", 80, 3), ("179.114.119.3", 80, 3)]);
    assert_eq!(from("network2"), owned(&want), "from network 2");
    let mut want = vec![("10.3.0.1", 2080, 2), ("10.3.0.2", 2080, 2), ("10.3.0.3", 2080, 2)];
    want.extend(network4);
    want.extend([("159.122.219.1", 80, 2), ("159.122.219.2", 80, 4)]);
    assert_eq!(from("network3"), owned(&want), "from network 3");
    let mut want = network4.to_vec();
    want.extend([
        ("159.122.219.1", 80, 2),
        ("159.122.219.2", 80, 4),
        ("159.122.219.3", 80, 3),
        ("179.114.119.3", 80, 3),
    ]);
    assert_eq!(from("network4"), owned(&want), "from network 4");
    // A proxy on no network reaches every network a gateway fronts through it.
    assert_eq!(from(""), owned(&want), "from the default network");
    // The view decides the cache key: per network, shared within one.
    let key = |n: &str| eds::view_key(&ctx, SERVICE5, &endpoint_view(&ctx, &sidecar_in(n, None)).unwrap());
    assert_eq!(key("network1"), key("network1"));
    assert_ne!(key("network1"), key("network2"));
}

#[test]
fn only_mesh_mtls_crosses_a_gateway_and_a_rule_decides_over_peer_authentication() {
    let disable = "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: off, namespace: default}\n\
                   spec: {mtls: {mode: DISABLE}}\n";
    let mut writes = vec![mesh_config(
        "cluster1",
        "networks: {n2: {endpoints: [{fromRegistry: cluster2}], gateways: [{address: 192.0.2.2, port: 15443}]}}",
    )];
    writes.extend(in_cluster(None, &service_with_pods("ledger", 80, 8080, "10.1.0", 1, "")));
    writes.extend(in_cluster(Some("cluster2"), &service_with_pods("ledger", 80, 8080, "10.2.0", 2, "")));
    let cluster = "outbound|80||ledger.default.svc.cluster.local";
    let from_n1 = |ctx: &PushContext| sent(ctx, cluster, &sidecar_in("n1", None));
    let ctx = context(writes.clone());
    assert_eq!(from_n1(&ctx), owned(&[("10.1.0.1", 8080, 1), ("192.0.2.2", 15443, 2)]));
    // PeerAuthentication DISABLE: nothing crosses; the local endpoint stays.
    writes.extend(crate::testing::bookinfo::puts(disable));
    let ctx = context(writes.clone());
    assert_eq!(from_n1(&ctx), vec![("10.1.0.1".to_string(), 8080, 1, true)]);
    // A rule's ISTIO_MUTUAL decides over the policy, as in istiod.
    writes.extend(crate::testing::bookinfo::puts(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: ledger, namespace: default}\n\
         spec: {host: ledger.default.svc.cluster.local, trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}}\n",
    ));
    let ctx = context(writes);
    assert_eq!(from_n1(&ctx), owned(&[("10.1.0.1", 8080, 1), ("192.0.2.2", 15443, 2)]));
}

/// An east-west gateway Service, labelled with its network, in `cluster`.
fn eastwest(cluster: Option<&str>, network: &str, ip: &str, extra_labels: &str, ports: &str) -> Vec<Write> {
    in_cluster(
        cluster,
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: istio-eastwestgateway, namespace: istio-system, \
             labels: {{topology.istio.io/network: {network}{extra_labels}}}}}\n\
             spec: {{type: LoadBalancer, selector: {{istio: eastwestgateway}}, ports: [{ports}]}}\n\
             status: {{loadBalancer: {{ingress: [{{ip: {ip}}}]}}}}\n"
        ),
    )
}

fn system_namespace(cluster: Option<&str>, network: &str) -> Vec<Write> {
    in_cluster(
        cluster,
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: istio-system, labels: {{topology.istio.io/network: {network}}}}}\n"
        ),
    )
}

#[test]
fn gateways_and_networks_come_from_labelled_services_and_namespaces() {
    let mut writes = vec![mesh_config("east", "")];
    writes.extend(system_namespace(None, "net-east"));
    writes.extend(system_namespace(Some("west"), "net-west"));
    writes.extend(eastwest(Some("west"), "net-west", "203.0.113.9", "", "{name: tls, port: 15443}"));
    // A labelled Service without the port is no gateway (and says so).
    writes.extend(eastwest(
        None,
        "net-east",
        "203.0.113.1",
        ", networking.istio.io/gatewayPort: '443'",
        "{name: tls, port: 15443}",
    ));
    writes.extend(in_cluster(None, &service_with_pods("books", 80, 8080, "10.1.0", 1, "")));
    writes.extend(in_cluster(Some("west"), &service_with_pods("books", 80, 8080, "10.2.0", 1, "")));
    // A Pod's own label names its network over its cluster's.
    writes.extend(in_cluster(
        Some("west"),
        &service_with_pods("books", 80, 8080, "10.3.0", 1, ", topology.istio.io/network: net-east"),
    ));
    // A Gateway API Gateway labelled for a network: reported, not read.
    writes.extend(in_cluster(
        None,
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
         metadata: {name: cross-network, namespace: istio-system, labels: {topology.istio.io/network: net-east}}\n\
         spec: {gatewayClassName: istio, listeners: [{name: tls, port: 15443, protocol: TLS, hostname: '*.local', tls: {mode: Passthrough}}]}\n",
    ));
    let ctx = context(writes);
    let gateways: Vec<(&str, u32, &str, &str)> =
        ctx.networks.gateways().iter().map(|g| (&*g.address, g.port, &*g.network, &*g.cluster)).collect();
    assert_eq!(gateways, [("203.0.113.9", 15443, "net-west", "west")]);
    let problems: Vec<String> =
        ctx.networks.problems().iter().map(|p| format!("{}: {}", p.source, p.message)).collect();
    assert!(
        problems.iter().any(|p| p.contains("istio-eastwestgateway") && p.contains("without port 443")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("cross-network") && p.contains("not read as a network gateway")),
        "{problems:?}"
    );
    let books = "outbound|80||books.default.svc.cluster.local";
    assert_eq!(
        sent(&ctx, books, &sidecar_in("net-east", None)),
        owned(&[("10.1.0.1", 8080, 1), ("10.3.0.1", 8080, 1), ("203.0.113.9", 15443, 1)]),
        "west's own Pod through west's gateway; the Pod labelled net-east directly"
    );
    assert_eq!(
        sent(&ctx, books, &sidecar_in("net-west", Some("west"))),
        owned(&[("10.1.0.1", 8080, 1), ("10.2.0.1", 8080, 1), ("10.3.0.1", 8080, 1)]),
        "net-east has no gateway: reached directly, as istiod does"
    );
}

#[test]
fn an_east_west_gateway_sees_its_own_network_and_only_what_mesh_mtls_reaches() {
    let mut writes = vec![mesh_config("east", "")];
    writes.extend(system_namespace(None, "net-east"));
    writes.extend(system_namespace(Some("west"), "net-west"));
    writes.extend(eastwest(Some("west"), "net-west", "203.0.113.9", "", "{name: tls, port: 15443}"));
    writes.extend(in_cluster(None, &service_with_pods("books", 80, 8080, "10.1.0", 1, "")));
    writes.extend(in_cluster(Some("west"), &service_with_pods("books", 80, 8080, "10.2.0", 1, "")));
    // A Pod without a sidecar: plain text, which no gateway passes.
    writes.extend(in_cluster(
        Some("west"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: books-plain, namespace: default, labels: {app: books}}\n\
         status: {podIP: 10.2.0.9, phase: Running}\n",
    ));
    let ctx = context(writes);
    let mut gateway = proxy("router~10.2.0.100~eastwest.istio-system~istio-system.svc.cluster.local", "REDIRECT", &[]);
    gateway.metadata.insert("NETWORK", "net-west");
    gateway.metadata.insert("CLUSTER_ID", "west");
    gateway.metadata.insert("REQUESTED_NETWORK_VIEW", "net-west");
    let sni = "outbound_.80_._.books.default.svc.cluster.local";
    assert_eq!(sent(&ctx, sni, &gateway), owned(&[("10.2.0.1", 8080, 1)]));
    // The sidecar's own cluster of west's Pods still holds the plain one.
    let plain = sent(&ctx, "outbound|80||books.default.svc.cluster.local", &sidecar_in("net-west", Some("west")));
    assert!(plain.contains(&("10.2.0.9".to_string(), 8080, 1, false)), "{plain:?}");
}

#[test]
fn a_cluster_local_host_is_served_with_the_proxys_own_clusters_endpoints() {
    let dns = |prefix: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: kube-dns, namespace: kube-system}}\n\
             spec: {{selector: {{k8s-app: kube-dns}}, ports: [{{name: dns, port: 53, protocol: UDP}}, {{name: dns-tcp, port: 53}}]}}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {{name: coredns, namespace: kube-system, labels: {{k8s-app: kube-dns}}}}\n\
             status: {{podIP: {prefix}.53, phase: Running}}\n"
        )
    };
    let mut writes = vec![mesh_config("east", "")];
    writes.extend(in_cluster(None, &dns("10.1.0")));
    writes.extend(in_cluster(Some("west"), &dns("10.2.0")));
    writes.extend(in_cluster(None, &service_with_pods("books", 80, 8080, "10.1.0", 1, "")));
    writes.extend(in_cluster(Some("west"), &service_with_pods("books", 80, 8080, "10.2.0", 1, "")));
    let ctx = context(writes);
    let dns_cluster = "outbound|53||kube-dns.kube-system.svc.cluster.local";
    let addresses = |proxy: &Proxy, cluster: &str| -> Vec<String> {
        sent(&ctx, cluster, proxy).into_iter().map(|(a, ..)| a).collect()
    };
    assert_eq!(addresses(&sidecar_in("", None), dns_cluster), ["10.1.0.53"]);
    assert_eq!(addresses(&sidecar_in("", Some("west")), dns_cluster), ["10.2.0.53"]);
    assert_eq!(addresses(&sidecar_in("", Some("east")), dns_cluster), ["10.1.0.53"], "the local cluster by its id");
    let books = "outbound|80||books.default.svc.cluster.local";
    assert_eq!(
        addresses(&sidecar_in("", Some("west")), books),
        ["10.1.0.1", "10.2.0.1"],
        "other hosts: every cluster's"
    );
    let key = |cluster: Option<&str>, name: &str| {
        eds::view_key(&ctx, name, &endpoint_view(&ctx, &sidecar_in("", cluster)).unwrap())
    };
    assert_ne!(key(None, dns_cluster), key(Some("west"), dns_cluster));
    assert_eq!(key(None, books), None, "shared by every proxy");
}

#[test]
fn a_proxy_is_served_its_own_clusters_virtual_ips() {
    let service = |vip: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: ledger, namespace: default}}\n\
             spec: {{clusterIP: {vip}, selector: {{app: ledger}}, ports: [{{name: tcp-db, port: 5432}}, {{name: http, port: 8080}}]}}\n"
        )
    };
    let mut writes = vec![mesh_config("east", "")];
    writes.extend(in_cluster(None, &service("10.96.0.10")));
    writes.extend(in_cluster(Some("west"), &service("10.200.0.10")));
    writes.extend(in_cluster(Some("north"), &service("10.96.0.10")));
    let ctx = context(writes);
    // (the TCP chain's range, whether the HTTP route domains hold the VIP)
    let seen = |cluster: Option<&str>| {
        let scope = ctx.scope_for(&sidecar_in("", cluster));
        let listeners = lds::listeners(&ctx, &scope);
        let tcp = listener(&listeners, "0.0.0.0_5432");
        let ranges: Vec<String> = tcp
            .filter_chains
            .iter()
            .filter_map(|c| c.filter_chain_match.as_ref())
            .flat_map(|m| &m.prefix_ranges)
            .map(|r| r.address_prefix.clone())
            .collect();
        let routes = rds::route_config(&ctx, &scope, "8080").expect("the port's routes");
        let domains: Vec<String> = routes.virtual_hosts.iter().flat_map(|v| v.domains.clone()).collect();
        (ranges, domains.iter().any(|d| d.starts_with("10.200.0.10")), scope.id)
    };
    let (east, west, north) = (seen(None), seen(Some("west")), seen(Some("north")));
    assert_eq!(east.0, ["10.96.0.10"]);
    assert!(!east.1);
    assert_eq!(west.0, ["10.200.0.10"], "west's own virtual IP");
    assert!(west.1, "west's route domains name its VIP");
    assert_eq!(north.0, ["10.96.0.10"]);
    assert_eq!(north.2, east.2, "a cluster with the same VIPs shares the scope");
    assert_ne!(west.2, east.2);
}

#[test]
fn a_gateway_known_by_host_name_takes_the_addresses_resolved_for_it() {
    use crate::config::mesh::networks::{ResolvedGatewayHost, resolved_gateway_host_name};
    let mut writes = vec![mesh_config(
        "east",
        "networks: {net-west: {endpoints: [{fromRegistry: west}], gateways: [{address: ew.west.example, port: 15443}]}}",
    )];
    writes.extend(in_cluster(None, &service_with_pods("books", 80, 8080, "10.1.0", 1, "")));
    writes.extend(in_cluster(Some("west"), &service_with_pods("books", 80, 8080, "10.2.0", 1, "")));
    // West's load balancer is known by name only, as a cloud's often is.
    writes.extend(in_cluster(
        Some("west"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: eastwest, namespace: istio-system, labels: {topology.istio.io/network: net-west}}\n\
         spec: {type: LoadBalancer, ports: [{name: tls, port: 15443}]}\n\
         status: {loadBalancer: {ingress: [{hostname: lb-1.elb.example}]}}\n",
    ));
    let ctx = context(writes.clone());
    let hosts: Vec<&str> = ctx.networks.gateway_hosts().map(|h| &**h).collect();
    assert_eq!(hosts, ["ew.west.example", "lb-1.elb.example"], "the names the resolver is asked for");
    assert!(ctx.networks.gateways().is_empty());
    let problems: Vec<&str> = ctx.networks.problems().iter().map(|p| p.message.as_str()).collect();
    assert!(problems.iter().all(|p| p.contains("not resolved yet")) && problems.len() == 2, "{problems:?}");
    let books = "outbound|80||books.default.svc.cluster.local";
    // No gateway: net-west is reached directly, as istiod does.
    assert_eq!(sent(&ctx, books, &sidecar_in("net-east", None)).len(), 2);
    let resolved = |host: &str, addresses: &[&str]| {
        let object = ResolvedGatewayHost {
            metadata: crate::config::ObjectMeta { name: resolved_gateway_host_name(host), ..Default::default() },
            host: host.into(),
            addresses: addresses.iter().map(|a| a.to_string()).collect(),
            error: None,
        };
        Write::put(ConfigObject::ResolvedGatewayHost(Box::new(object)), SourceRef { file: "dns".into(), doc: 0 })
    };
    writes.push(resolved("ew.west.example", &["198.51.100.7"]));
    writes.push(resolved("lb-1.elb.example", &["203.0.113.5", "203.0.113.6"]));
    let ctx = context(writes);
    // West's endpoint: through its cluster's two load balancer addresses
    // (the meshNetworks gateway fronts the network, not the cluster). The
    // groups hold 3 (the network), 1 and 2 (by cluster) gateways: every
    // weight is scaled by 6, and west's 6 split in two.
    assert_eq!(
        sent(&ctx, books, &sidecar_in("net-east", None)),
        owned(&[("10.1.0.1", 8080, 6), ("203.0.113.5", 15443, 3), ("203.0.113.6", 15443, 3)])
    );
}
