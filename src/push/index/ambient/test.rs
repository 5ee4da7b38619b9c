//! Istio's own golden translations (`tests/data/istio/pilot/pkg/serviceregistry/ambient/testdata`,
//! copied from istio/istio): each `*-in.yaml` policy, translated, equals
//! the `Authorization` istiod gives for it, field for field.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_yaml_ng::Value;

use super::{AmbientIndex, peer_mtls, policy};
use crate::config::istio::{AuthorizationPolicy, PeerAuthentication};
use crate::config::{ConfigKey, ConfigKind, ConfigObject};
use crate::workload_api::security::{
    Action, Address, Authorization, Clause, Match, Rule, Scope, ServiceAccountMatch, StringMatch, string_match,
};

/// The root namespace of Istio's test.
const ROOT: &str = "istio-system";

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/istio/pilot/pkg/serviceregistry/ambient/testdata")
}

fn objects(path: &Path) -> Vec<ConfigObject> {
    let text = std::fs::read_to_string(path).unwrap();
    let parsed = crate::config::parse::parse_documents(&path.display().to_string(), &text);
    assert!(!parsed.has_errors(), "{}: {:?}", path.display(), parsed.problems);
    parsed.objects.into_iter().map(|(o, _)| o).collect()
}

/// The translation of one `*-in.yaml`, as Istio's test makes it.
fn translate(objects: &[ConfigObject]) -> Option<Authorization> {
    match &objects[0] {
        ConfigObject::AuthorizationPolicy(p) => policy::translate(p, ROOT, false).authorization,
        ConfigObject::PeerAuthentication(_) => {
            let pas: Vec<&PeerAuthentication> = objects
                .iter()
                .map(|o| match o {
                    ConfigObject::PeerAuthentication(p) => p,
                    other => panic!("a file of PeerAuthentications holds {other:?}"),
                })
                .collect();
            if let [only] = pas[..] {
                return peer_mtls::translate(only, None, None, ROOT);
            }
            let root = peer_mtls::oldest(pas.iter().copied().filter(|p| p.metadata.namespace == ROOT));
            let mut workload = pas.iter().copied().find(|p| p.metadata.namespace != ROOT && p.spec.selector.is_some());
            let mut namespace = peer_mtls::oldest(
                pas.iter().copied().filter(|p| p.metadata.namespace != ROOT && p.spec.selector.is_none()),
            );
            if workload.is_none() {
                workload = namespace.take();
            }
            peer_mtls::translate(workload?, namespace, root, ROOT)
        }
        other => panic!("unexpected input {other:?}"),
    }
}

/// An `Authorization` as Istio's golden files print it (protojson YAML,
/// Istio's names: `groups` of `rules`).
fn golden(text: &str) -> Option<Authorization> {
    if text.trim().is_empty() {
        return None;
    }
    let v: Value = serde_yaml_ng::from_str(text).unwrap();
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    let list = |v: &Value, k: &str| v.get(k).and_then(Value::as_sequence).cloned().unwrap_or_default();
    let strings = |m: &Value, k: &str| -> Vec<StringMatch> {
        list(m, k)
            .iter()
            .map(|sm| {
                let kind = if let Some(e) = sm.get("exact") {
                    string_match::MatchType::Exact(e.as_str().unwrap().into())
                } else if let Some(p) = sm.get("prefix") {
                    string_match::MatchType::Prefix(p.as_str().unwrap().into())
                } else if let Some(x) = sm.get("suffix") {
                    string_match::MatchType::Suffix(x.as_str().unwrap().into())
                } else {
                    assert!(sm.get("presence").is_some(), "{sm:?}");
                    string_match::MatchType::Presence(())
                };
                StringMatch { match_type: Some(kind) }
            })
            .collect()
    };
    let accounts = |m: &Value, k: &str| -> Vec<ServiceAccountMatch> {
        list(m, k)
            .iter()
            .map(|a| ServiceAccountMatch { namespace: s(a, "namespace"), service_account: s(a, "serviceAccount") })
            .collect()
    };
    let ips = |m: &Value, k: &str| -> Vec<Address> {
        list(m, k)
            .iter()
            .map(|a| Address {
                address: base64::engine::general_purpose::STANDARD.decode(s(a, "address")).unwrap(),
                length: a.get("length").and_then(Value::as_u64).unwrap_or_default() as u32,
            })
            .collect()
    };
    let ports = |m: &Value, k: &str| -> Vec<u32> { list(m, k).iter().map(|p| p.as_u64().unwrap() as u32).collect() };
    let rules = list(&v, "groups")
        .iter()
        .map(|group| Rule {
            clauses: list(group, "rules")
                .iter()
                .map(|clause| Clause {
                    matches: list(clause, "matches")
                        .iter()
                        .map(|m| Match {
                            namespaces: strings(m, "namespaces"),
                            not_namespaces: strings(m, "notNamespaces"),
                            service_accounts: accounts(m, "serviceAccounts"),
                            not_service_accounts: accounts(m, "notServiceAccounts"),
                            principals: strings(m, "principals"),
                            not_principals: strings(m, "notPrincipals"),
                            source_ips: ips(m, "sourceIps"),
                            not_source_ips: ips(m, "notSourceIps"),
                            destination_ips: ips(m, "destinationIps"),
                            not_destination_ips: ips(m, "notDestinationIps"),
                            destination_ports: ports(m, "destinationPorts"),
                            not_destination_ports: ports(m, "notDestinationPorts"),
                            extensions: Vec::new(),
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect();
    let scope = match s(&v, "scope").as_str() {
        "" | "GLOBAL" => Scope::Global,
        "NAMESPACE" => Scope::Namespace,
        "WORKLOAD_SELECTOR" => Scope::WorkloadSelector,
        other => panic!("scope {other}"),
    };
    let action = match s(&v, "action").as_str() {
        "" | "ALLOW" => Action::Allow,
        "DENY" => Action::Deny,
        other => panic!("action {other}"),
    };
    Some(Authorization {
        name: s(&v, "name"),
        namespace: s(&v, "namespace"),
        scope: scope as i32,
        action: action as i32,
        rules,
        dry_run: v.get("dryRun").and_then(Value::as_bool).unwrap_or(false),
        extensions: Vec::new(),
    })
}

#[test]
fn every_golden_translation_of_istio_is_matched() {
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(testdata())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with("-in.yaml"))
        .collect();
    inputs.sort();
    assert!(inputs.len() >= 20, "Istio's testdata has 22 inputs, found {}", inputs.len());
    let mut wrong = Vec::new();
    for input in &inputs {
        let expected_path = input.to_string_lossy().replace("-in.yaml", ".yaml");
        let expected = golden(&std::fs::read_to_string(&expected_path).unwrap());
        let got = translate(&objects(input));
        if got != expected {
            wrong.push(format!("{}:\n  got      {got:?}\n  expected {expected:?}", input.display()));
        }
    }
    assert!(wrong.is_empty(), "{} of {} differ:\n{}", wrong.len(), inputs.len(), wrong.join("\n"));
}

fn ap(yaml: &str) -> AuthorizationPolicy {
    let parsed = crate::config::parse::parse_documents("test.yaml", yaml);
    match parsed.objects.into_iter().next().map(|(o, _)| o) {
        Some(ConfigObject::AuthorizationPolicy(p)) => *p,
        other => panic!("{other:?} {:?}", parsed.problems),
    }
}

#[test]
fn what_ztunnel_does_not_enforce_is_said_with_its_effect() {
    let full = objects(&testdata().join("allow-full-in.yaml"));
    let ConfigObject::AuthorizationPolicy(p) = &full[0] else { panic!() };
    let notes = policy::translate(p, ROOT, false).notes;
    assert_eq!(notes.len(), 1, "{notes:?}");
    for field in ["hosts", "methods", "paths", "remoteIpBlocks", "requestPrincipals", "request.headers[X-header]"] {
        assert!(notes[0].contains(field), "{field}: {}", notes[0]);
    }
    assert!(notes[0].contains("allows less"), "{}", notes[0]);

    let header: &str =
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: d, namespace: ns}\n";
    let only_http =
        ap(&format!("{header}spec:\n  action: DENY\n  rules:\n  - to:\n    - operation: {{methods: [GET]}}\n"));
    let t = policy::translate(&only_http, ROOT, false);
    assert!(t.notes[0].contains("can never match"), "{:?}", t.notes);
    let mixed = ap(&format!(
        "{header}spec:\n  action: DENY\n  rules:\n  - to:\n    - operation: {{methods: [GET], ports: ['80']}}\n"
    ));
    let t = policy::translate(&mixed, ROOT, false);
    assert!(t.notes[0].contains("denies more"), "{:?}", t.notes);
    assert_eq!(t.authorization.unwrap().rules[0].clauses[0].matches[0].destination_ports, [80]);

    let audit = ap(&format!("{header}spec:\n  action: AUDIT\n  rules: [{{}}]\n"));
    let t = policy::translate(&audit, ROOT, false);
    assert!(t.authorization.is_none() && t.notes[0].contains("AUDIT"), "{t:?}");

    let dry = ap(&format!(
        "{}  annotations: {{istio.io/dry-run: 'true'}}\nspec: {{}}\n",
        header.replace("metadata: {name: d, namespace: ns}\n", "metadata:\n  name: d\n  namespace: ns\n")
    ));
    assert!(policy::translate(&dry, ROOT, false).authorization.is_none());
    assert!(policy::translate(&dry, ROOT, true).authorization.is_some_and(|a| a.dry_run));

    let waypoint =
        ap(&format!("{header}spec:\n  targetRefs: [{{kind: Gateway, group: gateway.networking.k8s.io, name: w}}]\n"));
    assert_eq!(policy::translate(&waypoint, ROOT, false), policy::Translated::default());

    let everything = ap(&format!("{header}spec:\n  rules: [{{}}]\n"));
    let a = policy::translate(&everything, ROOT, false).authorization.unwrap();
    assert_eq!((a.scope, a.rules.len(), a.rules[0].clauses.len()), (Scope::Namespace as i32, 1, 0));
    let mesh_wide = ap(&header.replace("namespace: ns", "namespace: istio-system"));
    assert_eq!(policy::translate(&mesh_wide, ROOT, false).authorization.unwrap().scope, Scope::Global as i32);
}

fn pa(namespace: &str, name: &str, body: &str) -> PeerAuthentication {
    let yaml = format!(
        "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec: {body}\n"
    );
    let parsed = crate::config::parse::parse_documents("test.yaml", &yaml);
    match parsed.objects.into_iter().next().map(|(o, _)| o) {
        Some(ConfigObject::PeerAuthentication(p)) => p,
        other => panic!("{other:?} {:?}", parsed.problems),
    }
}

#[test]
fn a_workload_names_the_static_strict_policy_or_its_converted_one() {
    let strict_mesh = pa(ROOT, "mesh", "{mtls: {mode: STRICT}}");
    let permissive_ns = pa("foo", "ns", "{mtls: {mode: PERMISSIVE}}");
    let exempt = pa("foo", "w", "{selector: {matchLabels: {app: a}}, portLevelMtls: {8080: {mode: PERMISSIVE}}}");
    let strict_port = pa("foo", "w", "{selector: {matchLabels: {app: a}}, portLevelMtls: {9090: {mode: STRICT}}}");
    let static_key = "istio-system/istio_converted_static_strict";

    assert_eq!(peer_mtls::workload_keys(&[], ROOT), Vec::<String>::new());
    assert_eq!(peer_mtls::workload_keys(&[&strict_mesh], ROOT), [static_key]);
    assert_eq!(peer_mtls::workload_keys(&[&strict_mesh, &permissive_ns], ROOT), Vec::<String>::new());
    // STRICT from the mesh with a PERMISSIVE port: the converted policy
    // carries the strictness, so the static one is not named.
    assert_eq!(peer_mtls::workload_keys(&[&strict_mesh, &exempt], ROOT), ["foo/converted_peer_authentication_w"]);
    assert_eq!(
        peer_mtls::workload_keys(&[&permissive_ns, &strict_port], ROOT),
        ["foo/converted_peer_authentication_w"]
    );
    let converted = peer_mtls::translate(&exempt, None, Some(&strict_mesh), ROOT).unwrap();
    assert_eq!(converted.rules[0].clauses.len(), 2, "the exempt port, and the mesh's strictness merged in");
    let s = peer_mtls::static_strict(ROOT);
    assert_eq!(
        (s.name.as_str(), s.namespace.as_str(), s.action),
        (peer_mtls::STATIC_STRICT, ROOT, Action::Deny as i32)
    );
}

/// The addresses of `yaml`'s objects, by name.
fn addresses_of(yaml: &str) -> std::collections::BTreeMap<String, crate::workload_api::workload::Address> {
    let store = crate::model::ConfigStore::new();
    let parsed = crate::config::parse::parse_documents("test.yaml", yaml);
    assert!(!parsed.has_errors(), "{:?}", parsed.problems);
    let changes = store.apply(parsed.objects.into_iter().map(|(o, s)| crate::model::store::Write::put(o, s)));
    addresses_in(&changes.snapshot, &crate::config::mesh::MeshConfig::default())
}

/// The addresses of a store's objects under `mesh`, by name.
fn addresses_in(
    snapshot: &crate::model::StoreSnapshot,
    mesh: &crate::config::mesh::MeshConfig,
) -> std::collections::BTreeMap<String, crate::workload_api::workload::Address> {
    let waypoints = super::waypoint::Waypoints::build(snapshot, "");
    let inputs =
        super::address::Inputs { mesh, selector_policies: &[], peer_authentications: &[], waypoints: &waypoints };
    super::address::addresses(snapshot, &inputs).into_iter().collect()
}

#[test]
fn a_dns_service_entry_without_endpoints_has_one_implicit_workload_per_host_reached_by_name() {
    use crate::workload_api::workload::address::Type;
    let found = addresses_of(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: ext, namespace: ns, labels: {app: ext}}\n\
         spec: {hosts: [a.example, b.example], ports: [{number: 80, name: http, protocol: HTTP}], resolution: DNS}\n",
    );
    let names: Vec<&str> = found.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "Kubernetes/networking.istio.io/ServiceEntry/ns/ext/a.example",
            "Kubernetes/networking.istio.io/ServiceEntry/ns/ext/b.example",
            "ns/a.example",
            "ns/b.example",
        ]
    );
    let Some(Type::Workload(w)) = &found["Kubernetes/networking.istio.io/ServiceEntry/ns/ext/a.example"].r#type else {
        panic!()
    };
    assert!(w.addresses.is_empty() && w.hostname == "a.example", "{w:?}");
    assert_eq!(w.services.keys().collect::<Vec<_>>(), ["ns/a.example"], "each backs its own host only");
    assert_eq!(w.canonical_name, "ext", "the entry's labels name it");
}

#[test]
fn a_pod_of_a_cron_job_is_a_workload_of_the_cron_job() {
    let pod: crate::config::k8s::Pod = serde_yaml_ng::from_str(
        "metadata: {name: backup-29012345-x7k2p, generateName: backup-29012345-, \
         ownerReferences: [{kind: Job, name: backup-29012345, controller: true}]}",
    )
    .unwrap();
    assert_eq!(super::address::workload_name(&pod), "backup");
    let bare: crate::config::k8s::Pod = serde_yaml_ng::from_str("metadata: {name: lone}").unwrap();
    assert_eq!(super::address::workload_name(&bare), "lone");
}

#[test]
fn the_addresses_of_a_selectorless_service_that_are_no_pods_are_workloads_sharing_their_address() {
    use crate::workload_api::workload::{NetworkMode, WorkloadStatus, address::Type};
    let found = addresses_of(
        "apiVersion: v1\nkind: Service\nmetadata: {name: db, namespace: ns}\n\
         spec: {clusterIP: 10.96.0.9, ports: [{name: sql, port: 5432}]}\n---\n\
         apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {name: db-1, namespace: ns, labels: {kubernetes.io/service-name: db}}\naddressType: IPv4\n\
         ports: [{name: sql, port: 6432, protocol: TCP}]\n\
         endpoints:\n- addresses: [192.168.0.7]\n  conditions: {ready: false}\n\
         - addresses: [10.1.0.3]\n  targetRef: {kind: Pod, name: db-0, namespace: ns}\n",
    );
    let names: Vec<&str> = found.keys().map(String::as_str).collect();
    assert_eq!(names, ["Kubernetes/discovery.k8s.io/EndpointSlice/ns/db-1/192.168.0.7", "ns/db.ns.svc.cluster.local"]);
    let Some(Type::Workload(w)) = &found[names[0]].r#type else { panic!() };
    assert_eq!(w.addresses, [vec![192, 168, 0, 7]]);
    assert_eq!((w.network_mode, w.status), (NetworkMode::HostNetwork as i32, WorkloadStatus::Unhealthy as i32));
    let ports = &w.services["ns/db.ns.svc.cluster.local"].ports;
    assert_eq!((ports[0].service_port, ports[0].target_port), (5432, 6432));
}

#[test]
fn a_pod_an_endpoint_slice_names_backs_its_selectorless_service() {
    use crate::workload_api::workload::address::Type;
    let found = addresses_of(
        "apiVersion: v1\nkind: Service\nmetadata: {name: db, namespace: ns}\n\
         spec: {clusterIP: 10.96.0.9, ports: [{name: sql, port: 5432, targetPort: 6432}]}\n---\n\
         apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {name: db-1, namespace: ns, labels: {kubernetes.io/service-name: db}}\naddressType: IPv4\n\
         ports: [{name: sql, port: 6432}]\n\
         endpoints:\n- addresses: [10.1.0.3]\n  targetRef: {kind: Pod, name: db-0, namespace: ns}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: db-0, namespace: ns}\nstatus: {podIP: 10.1.0.3}\n",
    );
    let Some(Type::Workload(w)) = &found["Kubernetes//Pod/ns/db-0"].r#type else { panic!("{found:?}") };
    let ports = &w.services["ns/db.ns.svc.cluster.local"].ports;
    assert_eq!((ports[0].service_port, ports[0].target_port), (5432, 6432));
}

/// A waypoint as istiod would deploy it in `demo` (its Gateway, the Service
/// of its name), a namespace that uses it, and objects that bind or not.
const WAYPOINTS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: demo, labels: {istio.io/use-waypoint: waypoint}}
---
apiVersion: v1
kind: Namespace
metadata: {name: other}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: waypoint, namespace: demo}
spec:
  gatewayClassName: istio-waypoint
  listeners: [{name: mesh, port: 15008, protocol: HBONE}]
---
apiVersion: v1
kind: Service
metadata: {name: waypoint, namespace: demo, labels: {gateway.istio.io/managed: istio.io-mesh-controller}}
spec: {clusterIP: 10.96.0.15, ports: [{name: mesh, port: 15008}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: pending, namespace: demo, labels: {istio.io/waypoint-for: all}}
spec:
  gatewayClassName: istio-waypoint
  listeners: [{name: mesh, port: 15008, protocol: HBONE}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: demo}
spec: {clusterIP: 10.96.0.20, selector: {app: web}, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: direct, namespace: demo, labels: {istio.io/use-waypoint: none}}
spec: {clusterIP: 10.96.0.21, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: cross, namespace: other, labels: {istio.io/use-waypoint: waypoint, istio.io/use-waypoint-namespace: demo}}
spec: {clusterIP: 10.96.0.22, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: demo, labels: {app: web}}
spec: {serviceAccountName: web, nodeName: n1}
status: {phase: Running, podIP: 10.1.0.5}
---
apiVersion: v1
kind: Pod
metadata: {name: pinned-0, namespace: demo, labels: {istio.io/use-waypoint: waypoint}}
spec: {serviceAccountName: web, nodeName: n1}
status: {phase: Running, podIP: 10.1.0.6}
---
apiVersion: v1
kind: Pod
metadata: {name: early-0, namespace: demo, labels: {istio.io/use-waypoint: pending}}
spec: {serviceAccountName: web, nodeName: n1}
status: {phase: Running, podIP: 10.1.0.7}
"#;

#[test]
fn services_and_workloads_bind_to_a_ready_waypoint_as_istiod_binds_them() {
    use crate::workload_api::workload::address::Type;
    use crate::workload_api::workload::gateway_address::Destination;
    let found = addresses_of(WAYPOINTS);
    let waypoint_of = |name: &str| match &found[name].r#type {
        Some(Type::Service(s)) => s.waypoint.clone(),
        Some(Type::Workload(w)) => w.waypoint.clone(),
        None => None,
    };
    let web = waypoint_of("demo/web.demo.svc.cluster.local").expect("the namespace's waypoint takes service traffic");
    assert_eq!(web.hbone_mtls_port, 15008);
    let Some(Destination::Hostname(h)) = &web.destination else { panic!("{web:?}") };
    assert_eq!((h.namespace.as_str(), h.hostname.as_str()), ("demo", "waypoint.demo.svc.cluster.local"));
    assert_eq!(waypoint_of("demo/direct.demo.svc.cluster.local"), None, "use-waypoint: none opts out");
    assert_eq!(waypoint_of("demo/waypoint.demo.svc.cluster.local"), None, "a waypoint's own Service never binds");
    assert_eq!(waypoint_of("other/cross.other.svc.cluster.local"), None, "its listener allows its own namespace only");
    assert_eq!(
        waypoint_of("Kubernetes//Pod/demo/web-0"),
        None,
        "a service waypoint: the namespace's binding is for services"
    );
    assert_eq!(waypoint_of("Kubernetes//Pod/demo/early-0"), None, "not ready: no Service of its name");

    // What cannot hold is said, for the object that asked.
    let store = crate::model::ConfigStore::new();
    let parsed = crate::config::parse::parse_documents("test.yaml", WAYPOINTS);
    let changes = store.apply(parsed.objects.into_iter().map(|(o, s)| crate::model::store::Write::put(o, s)));
    let index = AmbientIndex::build(&changes.snapshot, &crate::config::mesh::MeshConfig::default());
    let said = |kind: ConfigKind, ns: &str, name: &str| index.bindings.get(&ConfigKey::new(kind, ns, name)).cloned();
    assert!(said(ConfigKind::Service, "other", "cross").unwrap().contains("does not allow namespace other"));
    assert!(said(ConfigKind::Pod, "demo", "pinned-0").unwrap().contains("does not take workload traffic"));
    assert!(said(ConfigKind::Pod, "demo", "early-0").unwrap().contains("not ready"));
    assert!(said(ConfigKind::KubernetesGateway, "demo", "pending").unwrap().contains("no Service demo/pending"));
    assert_eq!(said(ConfigKind::Pod, "demo", "web-0"), None, "a namespace's binding of the other kind is no error");
    let bound = &index.bound[&("demo".to_string(), "waypoint".to_string())];
    assert_eq!(bound.hosts, ["web.demo.svc.cluster.local"]);
    assert!(bound.workload_ips.is_empty());
}

#[test]
fn pods_of_two_clusters_with_one_name_are_two_workloads_each_of_its_cluster() {
    use crate::workload_api::workload::address::Type;
    let yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: web-0, namespace: demo}\nspec: {nodeName: n1}\n\
                status: {podIP: 10.0.0.1, phase: Running}\n";
    let store = crate::model::ConfigStore::new();
    let parsed = crate::config::parse::parse_documents("test.yaml", yaml);
    let (local, source) = parsed.objects.into_iter().next().unwrap();
    let mut remote = local.clone();
    remote.meta_mut().cluster = crate::config::ClusterId::remote("east");
    if let crate::config::ConfigObject::Pod(pod) = &mut remote {
        pod.status.pod_ip = Some("10.1.0.1".into());
    }
    use crate::model::store::Write;
    let changes = store.apply([Write::put(local, source.clone()), Write::put(remote, source)]);
    let mesh = crate::config::mesh::MeshConfig { cluster_id: "west".into(), ..Default::default() };
    let found = addresses_in(&changes.snapshot, &mesh);
    let names: Vec<&str> = found.keys().map(String::as_str).collect();
    assert_eq!(names, ["east//Pod/demo/web-0", "west//Pod/demo/web-0"], "uids name each Pod's cluster");
    let Some(Type::Workload(w)) = &found["east//Pod/demo/web-0"].r#type else { panic!("a workload") };
    assert_eq!(w.cluster_id, "east");
}
