//! The stand-in ztunnel (`support::ztunnel`: a delta ADS client that
//! behaves on the wire as ztunnel does) against the in-process server. It
//! checks the exact `Address` and `Authorization` resources meshpush serves
//! for a mesh of Pods, Services, a ServiceEntry, a WorkloadEntry and
//! policies, and how changes reach it. The secure port (token and CA) is
//! checked in `tests/e2e/ztunnel.rs`, where the real ztunnel also runs
//! when a binary is present.

use crate::support;

use std::collections::BTreeMap;

use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryResponse;
use meshpush::config::mesh::{AmbientSettings, MeshConfig, MeshConfigObject};
use meshpush::config::parse::parse_documents;
use meshpush::config::{ConfigKey, ConfigKind, ConfigObject};
use meshpush::resource::TypeUrl;
use meshpush::workload_api::security::{Action, Authorization, Clause, Match, Rule, Scope, StringMatch, string_match};
use meshpush::workload_api::workload::{
    Address, AppProtocol, Locality, NetworkAddress, Port, PortList, Service, TunnelProtocol, Workload, WorkloadStatus,
    WorkloadType, address,
};
use support::ztunnel::{Open, Ztunnel, decoded, versions};

/// The mesh: an ambient namespace with a client and a server Pod (the
/// server behind a Service with a named target port), a VM as a
/// WorkloadEntry behind the same Service, an external API as a
/// ServiceEntry with one endpoint, a selector and a namespace
/// AuthorizationPolicy, and STRICT mTLS mesh-wide.
const MESH: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: demo, labels: {istio.io/dataplane-mode: ambient}}
---
apiVersion: v1
kind: Node
metadata: {name: node-a, labels: {topology.kubernetes.io/region: eu, topology.kubernetes.io/zone: eu-1}}
---
apiVersion: v1
kind: Pod
metadata:
  name: client-6f7d9-x2x8q
  namespace: demo
  generateName: client-6f7d9-
  labels: {app: client, pod-template-hash: 6f7d9}
  annotations: {ambient.istio.io/redirection: enabled}
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: client-6f7d9, controller: true, uid: u1}]
spec: {serviceAccountName: client, nodeName: node-a, containers: [{name: app}]}
status: {phase: Running, podIP: 10.1.0.5, podIPs: [{ip: 10.1.0.5}], conditions: [{type: Ready, status: "True"}]}
---
apiVersion: v1
kind: Pod
metadata:
  name: server-0
  namespace: demo
  labels: {app: server, version: v2}
  annotations: {ambient.istio.io/redirection: enabled}
spec:
  serviceAccountName: server
  nodeName: node-a
  containers: [{name: app, ports: [{name: http-web, containerPort: 8080}]}]
status: {phase: Running, podIP: 10.1.0.6, conditions: [{type: Ready, status: "False"}]}
---
apiVersion: v1
kind: Service
metadata: {name: server, namespace: demo}
spec:
  clusterIP: 10.96.0.20
  selector: {app: server}
  ports: [{name: http, port: 80, targetPort: http-web}, {name: tcp-admin, port: 9000, targetPort: 9000}]
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-1, namespace: demo}
spec: {address: 10.2.0.9, labels: {app: server}, serviceAccount: server, ports: {http-web: 8081}, locality: us/us-2}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: payments, namespace: demo}
spec:
  hosts: [api.payments.example]
  addresses: [240.0.0.10]
  ports: [{number: 443, name: tls, protocol: TLS}]
  resolution: STATIC
  endpoints: [{address: 203.0.113.7}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: server-from-client, namespace: demo}
spec:
  selector: {matchLabels: {app: server}}
  action: ALLOW
  rules: [{from: [{source: {principals: [cluster.local/ns/demo/sa/client]}}], to: [{operation: {ports: ["8080"]}}]}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: deny-blocked, namespace: demo}
spec:
  action: DENY
  rules: [{from: [{source: {namespaces: [blocked]}}]}]
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: istio-system}
spec: {mtls: {mode: STRICT}}
"#;

fn objects(yaml: &str, ambient: bool) -> Vec<ConfigObject> {
    let parsed = parse_documents("mesh.yaml", yaml);
    assert!(!parsed.has_errors(), "{:?}", parsed.problems);
    let mesh =
        MeshConfig { ambient: AmbientSettings { enabled: ambient, dry_run_policies: false }, ..Default::default() };
    let mut objects: Vec<ConfigObject> = parsed.objects.into_iter().map(|(o, _)| o).collect();
    objects.push(ConfigObject::MeshConfig(Box::new(MeshConfigObject::new(mesh))));
    objects
}

fn workload(w: Workload) -> Address {
    Address { r#type: Some(address::Type::Workload(w)) }
}

fn service(s: Service) -> Address {
    Address { r#type: Some(address::Type::Service(s)) }
}

fn ports(pairs: &[(u32, u32)]) -> PortList {
    PortList {
        ports: pairs
            .iter()
            .map(|&(service_port, target_port)| Port { service_port, target_port, app_protocol: 0 })
            .collect(),
    }
}

/// What istiod sends ztunnel for [`MESH`], resource by resource.
fn expected_addresses() -> BTreeMap<String, Address> {
    let server_ports = ports(&[(80, 8080), (9000, 9000)]);
    let strict = "istio-system/istio_converted_static_strict".to_string();
    let eu = Some(Locality { region: "eu".into(), zone: "eu-1".into(), subzone: String::new() });
    let vip = |ip: [u8; 4]| NetworkAddress { network: String::new(), address: ip.to_vec(), length: None };
    [
        (
            "Kubernetes//Pod/demo/client-6f7d9-x2x8q",
            workload(Workload {
                uid: "Kubernetes//Pod/demo/client-6f7d9-x2x8q".into(),
                name: "client-6f7d9-x2x8q".into(),
                namespace: "demo".into(),
                addresses: vec![vec![10, 1, 0, 5]],
                tunnel_protocol: TunnelProtocol::Hbone as i32,
                service_account: "client".into(),
                node: "node-a".into(),
                canonical_name: "client".into(),
                canonical_revision: "latest".into(),
                workload_type: WorkloadType::Pod as i32,
                workload_name: "client".into(),
                authorization_policies: vec![strict.clone()],
                status: WorkloadStatus::Healthy as i32,
                cluster_id: "Kubernetes".into(),
                locality: eu.clone(),
                ..Default::default()
            }),
        ),
        (
            "Kubernetes//Pod/demo/server-0",
            workload(Workload {
                uid: "Kubernetes//Pod/demo/server-0".into(),
                name: "server-0".into(),
                namespace: "demo".into(),
                addresses: vec![vec![10, 1, 0, 6]],
                tunnel_protocol: TunnelProtocol::Hbone as i32,
                service_account: "server".into(),
                node: "node-a".into(),
                canonical_name: "server".into(),
                canonical_revision: "v2".into(),
                workload_type: WorkloadType::Pod as i32,
                workload_name: "server-0".into(),
                services: [("demo/server.demo.svc.cluster.local".to_string(), server_ports)].into(),
                authorization_policies: vec!["demo/server-from-client".into(), strict.clone()],
                // Not Ready: ztunnel sends it nothing while others are.
                status: WorkloadStatus::Unhealthy as i32,
                cluster_id: "Kubernetes".into(),
                locality: eu,
                ..Default::default()
            }),
        ),
        (
            "Kubernetes/networking.istio.io/WorkloadEntry/demo/vm-1",
            workload(Workload {
                uid: "Kubernetes/networking.istio.io/WorkloadEntry/demo/vm-1".into(),
                name: "vm-1".into(),
                namespace: "demo".into(),
                addresses: vec![vec![10, 2, 0, 9]],
                service_account: "server".into(),
                canonical_name: "server".into(),
                canonical_revision: "latest".into(),
                workload_type: WorkloadType::Pod as i32,
                workload_name: "vm-1".into(),
                // The Service's named target port, by the entry's port of that name.
                services: [("demo/server.demo.svc.cluster.local".to_string(), ports(&[(80, 8081), (9000, 9000)]))]
                    .into(),
                authorization_policies: vec!["demo/server-from-client".into(), strict.clone()],
                status: WorkloadStatus::Healthy as i32,
                cluster_id: "Kubernetes".into(),
                locality: Some(Locality { region: "us".into(), zone: "us-2".into(), subzone: String::new() }),
                ..Default::default()
            }),
        ),
        (
            "Kubernetes/networking.istio.io/ServiceEntry/demo/payments/203.0.113.7",
            workload(Workload {
                uid: "Kubernetes/networking.istio.io/ServiceEntry/demo/payments/203.0.113.7".into(),
                name: "payments".into(),
                namespace: "demo".into(),
                addresses: vec![vec![203, 0, 113, 7]],
                canonical_name: "payments".into(),
                canonical_revision: "latest".into(),
                workload_type: WorkloadType::Pod as i32,
                workload_name: "payments".into(),
                services: [("demo/api.payments.example".to_string(), ports(&[(443, 443)]))].into(),
                authorization_policies: vec![strict],
                status: WorkloadStatus::Healthy as i32,
                cluster_id: "Kubernetes".into(),
                ..Default::default()
            }),
        ),
        (
            "demo/server.demo.svc.cluster.local",
            service(Service {
                name: "server".into(),
                namespace: "demo".into(),
                hostname: "server.demo.svc.cluster.local".into(),
                addresses: vec![vip([10, 96, 0, 20])],
                ports: vec![
                    Port { service_port: 80, target_port: 0, app_protocol: AppProtocol::Http11 as i32 },
                    Port { service_port: 9000, target_port: 9000, app_protocol: AppProtocol::Tcp as i32 },
                ],
                canonical: true,
                ..Default::default()
            }),
        ),
        (
            "demo/api.payments.example",
            service(Service {
                name: "payments".into(),
                namespace: "demo".into(),
                hostname: "api.payments.example".into(),
                addresses: vec![vip([240, 0, 0, 10])],
                ports: vec![Port { service_port: 443, target_port: 443, app_protocol: AppProtocol::Tls as i32 }],
                // The only service of its hostname.
                canonical: true,
                ..Default::default()
            }),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn expected_authorizations() -> BTreeMap<String, Authorization> {
    let exact = |s: &str| StringMatch { match_type: Some(string_match::MatchType::Exact(s.into())) };
    [
        Authorization {
            name: "server-from-client".into(),
            namespace: "demo".into(),
            scope: Scope::WorkloadSelector as i32,
            action: Action::Allow as i32,
            rules: vec![Rule {
                clauses: vec![
                    Clause { matches: vec![Match { destination_ports: vec![8080], ..Default::default() }] },
                    Clause {
                        matches: vec![Match {
                            principals: vec![exact("cluster.local/ns/demo/sa/client")],
                            ..Default::default()
                        }],
                    },
                ],
            }],
            ..Default::default()
        },
        Authorization {
            name: "deny-blocked".into(),
            namespace: "demo".into(),
            scope: Scope::Namespace as i32,
            action: Action::Deny as i32,
            rules: vec![Rule {
                clauses: vec![Clause {
                    matches: vec![Match { namespaces: vec![exact("blocked")], ..Default::default() }],
                }],
            }],
            ..Default::default()
        },
        Authorization {
            name: "istio_converted_static_strict".into(),
            namespace: "istio-system".into(),
            scope: Scope::WorkloadSelector as i32,
            action: Action::Deny as i32,
            rules: vec![Rule {
                clauses: vec![Clause {
                    matches: vec![Match {
                        not_principals: vec![StringMatch { match_type: Some(string_match::MatchType::Presence(())) }],
                        ..Default::default()
                    }],
                }],
            }],
            ..Default::default()
        },
    ]
    .into_iter()
    .map(|a| (format!("{}/{}", a.namespace, a.name), a))
    .collect()
}

#[tokio::test]
async fn a_ztunnel_is_sent_every_workload_service_and_policy_exactly_as_istiod_builds_them() {
    let server = support::ads_server::AdsServer::with_objects(objects(MESH, true)).await;
    let mut z = Ztunnel::connect(server.addr, &Default::default()).await.expect("ztunnel is served");
    let (addresses, authorizations) = z.initial().await;
    assert!(addresses.removed_resources.is_empty() && authorizations.removed_resources.is_empty());
    assert_eq!(decoded::<Address>(&addresses), expected_addresses());
    assert_eq!(decoded::<Authorization>(&authorizations), expected_authorizations());
    for r in addresses.resources.iter().chain(&authorizations.resources) {
        assert!(r.version.len() == 16 && r.version.chars().all(|c| c.is_ascii_hexdigit()), "{}", r.version);
    }
}

#[tokio::test]
async fn changes_reach_a_ztunnel_as_deltas_and_a_reconnect_resends_only_what_moved() {
    let server = support::ads_server::AdsServer::with_objects(objects(MESH, true)).await;
    let mut z = Ztunnel::connect(server.addr, &Default::default()).await.unwrap();
    let (addresses, authorizations) = z.initial().await;
    let held = [versions(&addresses), versions(&authorizations)];

    // The server Pod turns Ready: that workload alone is sent.
    server.apply(&MESH.split("---").nth(3).unwrap().replace(r#"status: "False""#, r#"status: "True""#)).await;
    let r = z.recv().await;
    assert_eq!(r.type_url, TypeUrl::Address.as_str());
    let sent = decoded::<Address>(&r);
    assert_eq!(sent.keys().collect::<Vec<_>>(), ["Kubernetes//Pod/demo/server-0"], "only what changed");
    let Some(address::Type::Workload(w)) = &sent["Kubernetes//Pod/demo/server-0"].r#type else { panic!() };
    assert_eq!(w.status, WorkloadStatus::Healthy as i32);
    z.answer(&r, None).await;

    // A NACK is not answered; the next change still comes.
    server.delete(vec![ConfigKey::new(ConfigKind::WorkloadEntry, "demo", "vm-1")]).await;
    let r = z.recv().await;
    assert_eq!(r.removed_resources, ["Kubernetes/networking.istio.io/WorkloadEntry/demo/vm-1"]);
    assert!(r.resources.is_empty(), "{:?}", r.resources);
    z.answer(&r, Some("Kubernetes/networking.istio.io/WorkloadEntry/demo/vm-1: rejected for the test")).await;
    server.delete(vec![ConfigKey::new(ConfigKind::AuthorizationPolicy, "demo", "deny-blocked")]).await;
    let r = z.recv().await;
    assert_eq!(r.type_url, TypeUrl::Authorization.as_str(), "{r:?}");
    assert_eq!(r.removed_resources, ["demo/deny-blocked"]);
    z.answer(&r, None).await;
    drop(z);

    // Reconnecting with what it held before those changes: only the
    // moved workload is resent, and what is gone is removed; nothing
    // unchanged comes again.
    let mut z = Ztunnel::connect(server.addr, &held).await.unwrap();
    let (addresses, authorizations) = z.initial().await;
    assert_eq!(decoded::<Address>(&addresses).keys().collect::<Vec<_>>(), ["Kubernetes//Pod/demo/server-0"]);
    assert_eq!(addresses.removed_resources, ["Kubernetes/networking.istio.io/WorkloadEntry/demo/vm-1"]);
    assert!(authorizations.resources.is_empty(), "{:?}", authorizations.resources);
    assert_eq!(authorizations.removed_resources, ["demo/deny-blocked"]);
}

#[tokio::test]
async fn a_ztunnel_is_refused_where_ambient_mode_is_off() {
    let server = support::ads_server::AdsServer::with_objects(objects(MESH, false)).await;
    let refused = Ztunnel::refusal(Ztunnel::connect(server.addr, &Default::default()).await).await;
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
    assert!(refused.message().contains("PILOT_ENABLE_AMBIENT"), "{}", refused.message());
}

/// A Pod of the server's Service on another node, and one on no Service there.
const FAR: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: far-0, namespace: demo, labels: {app: server}, annotations: {ambient.istio.io/redirection: enabled}}
spec: {serviceAccountName: server, nodeName: node-b}
status: {phase: Running, podIP: 10.1.1.7, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: lone-0, namespace: demo, annotations: {ambient.istio.io/redirection: enabled}}
spec: {serviceAccountName: lone, nodeName: node-b}
status: {phase: Running, podIP: 10.1.1.8, conditions: [{type: Ready, status: "True"}]}
"#;

fn names(r: &DeltaDiscoveryResponse) -> Vec<&str> {
    r.resources.iter().map(|x| x.name.as_str()).collect()
}

/// Subscribes to `key`, as ztunnel's lookup does on a miss; the answer, ACKed.
async fn ask(z: &mut Ztunnel, key: &str) -> DeltaDiscoveryResponse {
    z.subscribe(TypeUrl::Address, &[key]).await;
    let r = z.recv().await;
    z.answer(&r, None).await;
    r
}

/// ztunnel's `XDS_ON_DEMAND`: it starts with its node's workloads, then
/// asks for a uid, an address or a service name as a connection needs one.
/// Each answer names the key itself (as the resource, or in
/// `removed_resources` for an address key, which ztunnel ignores there but
/// wakes on), so the lookup waiting on it resumes.
#[tokio::test]
async fn an_on_demand_ztunnel_gets_its_node_then_each_key_it_asks_for_and_changes_to_what_it_holds() {
    let server = support::ads_server::AdsServer::with_objects(objects(&format!("{MESH}---{FAR}"), true)).await;
    let channel = || async {
        tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr)).unwrap().connect().await.unwrap()
    };
    let mut z = Ztunnel::open(channel().await, Open { on_demand: true, ..Open::default() }).await.unwrap();
    let (addresses, authorizations) = z.initial().await;
    assert_eq!(names(&addresses), ["Kubernetes//Pod/demo/client-6f7d9-x2x8q", "Kubernetes//Pod/demo/server-0"]);
    assert_eq!(authorizations.resources.len(), expected_authorizations().len(), "policies are a wildcard still");

    let far = "Kubernetes//Pod/demo/far-0";
    let r = ask(&mut z, far).await;
    assert_eq!((names(&r), r.removed_resources.is_empty()), (vec![far], true));
    // The VIP: the Service and what backs it that ztunnel lacks (the VM);
    // the Pods it holds are not sent again. The key itself is "removed".
    let r = ask(&mut z, "/10.96.0.20").await;
    let service = "demo/server.demo.svc.cluster.local";
    assert_eq!(names(&r), ["Kubernetes/networking.istio.io/WorkloadEntry/demo/vm-1", service]);
    assert_eq!(r.removed_resources, ["/10.96.0.20"]);
    assert_eq!(decoded::<Address>(&r)[service], expected_addresses()[service], "the very resource a wildcard gets");
    let r = ask(&mut z, "/10.9.9.9").await;
    assert!(r.resources.is_empty());
    assert_eq!(r.removed_resources, ["/10.9.9.9"], "nothing there: said at once");
    // Asked again (its lookup missed): answered again.
    let r = ask(&mut z, service).await;
    assert_eq!(names(&r), [service]);

    // Pushes: a change to what it holds reaches it; one to what it never
    // asked for does not (the next change it is sent is its own node's).
    server.apply(&FAR.split("---").next().unwrap().replace(r#"status: "True""#, r#"status: "False""#)).await;
    let r = z.recv().await;
    assert_eq!(names(&r), [far]);
    z.answer(&r, None).await;
    server.apply(&FAR.split("---").nth(1).unwrap().replace("lone-0", "lone-1").replace("10.1.1.8", "10.1.1.9")).await;
    server.apply(&MESH.split("---").nth(3).unwrap().replace(r#"status: "False""#, r#"status: "True""#)).await;
    let r = z.recv().await;
    assert_eq!(names(&r), ["Kubernetes//Pod/demo/server-0"], "lone-1 is nobody's business here");
    z.answer(&r, None).await;
    drop(z);

    // A reconnect names what it holds (here only server-0, and an address
    // key it still waits on): what it holds unchanged is not resent; the
    // address key is answered and named in `removed_resources`.
    let mut held = versions(&r);
    held.insert("/10.96.0.20".into(), String::new());
    let open = Open { on_demand: true, held: [held, Default::default()], ..Open::default() };
    let mut z = Ztunnel::open(channel().await, open).await.unwrap();
    let (addresses, _) = z.initial().await;
    let sent = names(&addresses);
    assert!(!sent.contains(&"Kubernetes//Pod/demo/server-0"), "unchanged, not resent: {sent:?}");
    assert!(sent.contains(&service) && sent.contains(&far), "what the address key answers: {sent:?}");
    assert_eq!(addresses.removed_resources, ["/10.96.0.20"]);
}
