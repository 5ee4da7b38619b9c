//! Cross-object checks: does what a VirtualService names exist?
//!
//! These run on a whole store snapshot, after every object has been accepted
//! on its own. Istio accepts dangling references (the route fails at run
//! time with a 503, or a rule is ignored), so they never keep an object out
//! of the store; they are reported so that `meshpush validate` and the debug
//! endpoint can point at them.

mod ext_authz;
mod telemetry;

pub use ext_authz::check_ext_authz;
pub use telemetry::check_telemetry;

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::host::{self, Hostname};
use super::{StoreSnapshot, StoredObject};
use crate::config::istio::{Destination, MESH_GATEWAY};
use crate::config::{ConfigKey, ConfigKind, ConfigObject, Problem, Severity};

/// Dangling references in `snapshot`: VirtualService destinations whose host
/// matches no Service or ServiceEntry, subsets no DestinationRule defines,
/// gateways that do not exist; and Sidecars that collide on one namespace.
///
/// Each problem is located at the referring object's file and document.
/// Sidecar collisions are Errors (Istio's choice between them is arbitrary),
/// the rest Warnings; none of them blocks an object from the store.
pub fn check_references(snapshot: &StoreSnapshot) -> Vec<Problem> {
    let registry = Registry::new(snapshot);
    // A delegate that names no exportTo is exported where the mesh config says.
    let mesh = snapshot.mesh_config().unwrap_or_default();
    let default_export = &mesh.export_to.virtual_services;
    let mut problems = Vec::new();
    for stored in snapshot.kind(ConfigKind::VirtualService).values() {
        let ConfigObject::VirtualService(vs) = &*stored.object else {
            continue;
        };
        let namespace = vs.metadata.namespace();
        let mut report = |path: String, message: String| {
            problems.push(problem(stored, Severity::Warning, path, message));
        };
        let mut gateways: Vec<(String, &str)> =
            vs.spec.gateways.iter().enumerate().map(|(i, g)| (format!("spec.gateways[{i}]"), g.as_str())).collect();
        for (r, route) in vs.spec.http.iter().enumerate() {
            for (m, condition) in route.matches.iter().enumerate() {
                for (g, gateway) in condition.gateways.iter().enumerate() {
                    gateways.push((format!("spec.http[{r}].match[{m}].gateways[{g}]"), gateway));
                }
            }
            for (d, dest) in route.route.iter().enumerate() {
                let path = format!("spec.http[{r}].route[{d}].destination");
                registry.destination(&mut report, path, &dest.destination, namespace);
            }
            if let Some(mirror) = &route.mirror {
                registry.destination(&mut report, format!("spec.http[{r}].mirror"), mirror, namespace);
            }
            if let Some(delegate) = &route.delegate {
                let ns = delegate.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(namespace);
                let found = snapshot.get(&ConfigKey::new(ConfigKind::VirtualService, ns, &delegate.name));
                let why = match found.map(|s| &*s.object) {
                    None => Some(format!("VirtualService {ns}/{} does not exist", delegate.name)),
                    Some(ConfigObject::VirtualService(d)) if !d.spec.hosts.is_empty() => {
                        Some(format!("VirtualService {ns}/{} has hosts, so it is not a delegate", delegate.name))
                    }
                    Some(ConfigObject::VirtualService(d))
                        if !super::service::ExportTo::or_default(&d.spec.export_to, default_export, ns)
                            .visible_to(namespace) =>
                    {
                        Some(format!("VirtualService {ns}/{} is not exported to namespace {namespace}", delegate.name))
                    }
                    _ => None,
                };
                if let Some(why) = why {
                    report(
                        format!("spec.http[{r}].delegate"),
                        format!("{why}: requests matching this route are not routed by it (as in Istio)"),
                    );
                }
            }
            for (i, mirror) in route.mirrors.iter().enumerate() {
                let path = format!("spec.http[{r}].mirrors[{i}].destination");
                registry.destination(&mut report, path, &mirror.destination, namespace);
            }
        }
        for (r, route) in vs.spec.tls.iter().enumerate() {
            for (m, condition) in route.matches.iter().enumerate() {
                for (g, gateway) in condition.gateways.iter().enumerate() {
                    gateways.push((format!("spec.tls[{r}].match[{m}].gateways[{g}]"), gateway));
                }
            }
            for (d, dest) in route.route.iter().enumerate() {
                let path = format!("spec.tls[{r}].route[{d}].destination");
                registry.destination(&mut report, path, &dest.destination, namespace);
            }
        }
        for (r, route) in vs.spec.tcp.iter().enumerate() {
            for (m, condition) in route.matches.iter().enumerate() {
                for (g, gateway) in condition.gateways.iter().enumerate() {
                    gateways.push((format!("spec.tcp[{r}].match[{m}].gateways[{g}]"), gateway));
                }
            }
            for (d, dest) in route.route.iter().enumerate() {
                let path = format!("spec.tcp[{r}].route[{d}].destination");
                registry.destination(&mut report, path, &dest.destination, namespace);
            }
        }
        for (path, gateway) in gateways {
            if gateway == MESH_GATEWAY {
                continue;
            }
            let (gw_namespace, name) = gateway.split_once('/').unwrap_or((namespace, gateway));
            if snapshot.get(&ConfigKey::new(ConfigKind::Gateway, gw_namespace, name)).is_none() {
                report(path, format!("gateway {gw_namespace}/{name} does not exist: the rule does not apply to it"));
            }
        }
    }
    for stored in snapshot.kind(ConfigKind::Sidecar).values() {
        let ConfigObject::Sidecar(sidecar) = &*stored.object else {
            continue;
        };
        if let Some(proxy) = sidecar.spec.outbound_traffic_policy.as_ref().and_then(|p| p.egress_proxy.as_ref()) {
            let mut report = |path: String, message: String| {
                problems.push(problem(stored, Severity::Warning, path, message));
            };
            let path = "spec.outboundTrafficPolicy.egressProxy".to_string();
            registry.destination(&mut report, path, proxy, sidecar.metadata.namespace());
        }
    }
    gateway_credentials(snapshot, &mut problems);
    gateway_port_conflicts(snapshot, &mut problems);
    sidecar_collisions(snapshot, &mut problems);
    problems
}

/// Servers of Gateways that select the same routers (the same selector) and
/// cannot share a port with a server of an earlier Gateway (key order, as a
/// router takes them): the router leaves them out. Conflicts inside one
/// Gateway are validation's.
fn gateway_port_conflicts(snapshot: &StoreSnapshot, problems: &mut Vec<Problem>) {
    use crate::config::istio::{Server, port_conflicts};
    let mut groups: BTreeMap<&BTreeMap<String, String>, Vec<&Arc<StoredObject>>> = BTreeMap::new();
    for stored in snapshot.kind(ConfigKind::Gateway).values() {
        if let ConfigObject::Gateway(gw) = &*stored.object {
            groups.entry(&gw.spec.selector).or_default().push(stored);
        }
    }
    for members in groups.values().filter(|m| m.len() > 1) {
        let mut servers: Vec<(String, &Server, usize, usize)> = Vec::new();
        for (g, stored) in members.iter().enumerate() {
            let ConfigObject::Gateway(gw) = &*stored.object else { continue };
            for (i, s) in gw.spec.servers.iter().enumerate() {
                servers.push((format!("{} spec.servers[{i}]", stored.object.key()), s, g, i));
            }
        }
        let own = |g: usize, i: usize| {
            let ConfigObject::Gateway(gw) = &*members[g].object else { return false };
            let labelled = gw.spec.servers.iter().enumerate().map(|(i, s)| (i.to_string(), s));
            port_conflicts(labelled).iter().any(|(j, _)| *j == i)
        };
        let labelled = servers.iter().map(|(label, s, _, _)| (label.clone(), *s));
        for (k, reason) in port_conflicts(labelled) {
            let (_, _, g, i) = &servers[k];
            if !own(*g, *i) {
                problems.push(problem(
                    members[*g],
                    Severity::Warning,
                    format!("spec.servers[{i}]"),
                    format!("{reason}: routers this Gateway selects do not serve this server"),
                ));
            }
        }
    }
}

/// Gateway servers that terminate TLS with a `credentialName` the Gateway's
/// namespace has no usable Secret for. A gateway reads the Secrets of its
/// own namespace: with the Gateway in the namespace of its gateway
/// deployment (the usual layout) a server reported here is not served.
fn gateway_credentials(snapshot: &StoreSnapshot, problems: &mut Vec<Problem>) {
    use crate::config::secret::TlsMaterial;
    for stored in snapshot.kind(ConfigKind::Gateway).values() {
        let ConfigObject::Gateway(gw) = &*stored.object else { continue };
        let namespace = gw.metadata.namespace();
        let material = |name: &str| -> Option<TlsMaterial> {
            let name = name.strip_prefix("kubernetes://").unwrap_or(name);
            let (ns, name) = name.split_once('/').unwrap_or((namespace, name));
            match &*snapshot.get(&ConfigKey::new(ConfigKind::Secret, ns, name))?.object {
                ConfigObject::Secret(s) => Some(s.material()),
                _ => None,
            }
        };
        for (i, server) in gw.spec.servers.iter().enumerate() {
            let (Some(mode), Some(tls)) = (server.tls_mode(), &server.tls) else { continue };
            if !mode.terminates() || server.unservable().is_some() {
                continue;
            }
            let names: Vec<(String, &str)> = match tls.credential_name.as_deref().filter(|n| !n.is_empty()) {
                Some(name) => vec![(format!("spec.servers[{i}].tls.credentialName"), name)],
                None => tls
                    .credential_names
                    .iter()
                    .enumerate()
                    .map(|(c, n)| (format!("spec.servers[{i}].tls.credentialNames[{c}]"), n.as_str()))
                    .collect(),
            };
            let mut report = |path: String, message: String| {
                problems.push(problem(stored, Severity::Warning, path, message));
            };
            for (path, name) in &names {
                if material(name).and_then(|m| m.identity).is_none() {
                    report(
                        path.clone(),
                        format!(
                            "no Secret {name:?} with a certificate and key (tls.crt and tls.key, or cert and key) in namespace {namespace}: this server is not served until there is one"
                        ),
                    );
                }
            }
            if !mode.verifies_clients() || names.is_empty() {
                continue;
            }
            let (path, ca) = match tls.ca_cert_credential_name.as_deref().filter(|n| !n.is_empty()) {
                Some(ca) => (format!("spec.servers[{i}].tls.caCertCredentialName"), ca.to_string()),
                None => (names[0].0.clone(), names[0].1.to_string()),
            };
            let own = format!("{ca}-cacert");
            let found = match material(&own) {
                Some(m) => m.ca.is_some(),
                None => material(&ca).is_some_and(|m| m.ca.is_some()),
            };
            if !found {
                report(
                    path,
                    format!(
                        "no client CA for {ca:?} in namespace {namespace} (a ca.crt or cacert key in Secret {ca:?}, or a Secret {own:?}): this server is not served until there is one"
                    ),
                );
            }
        }
    }
}

/// Hosts and subsets the store defines.
struct Registry {
    /// Every Service and ServiceEntry host, fully qualified (ServiceEntry
    /// hosts may be wildcards).
    hosts: BTreeSet<Hostname>,
    /// DestinationRules by resolved host: (rule, its subset names).
    rules: BTreeMap<Hostname, Vec<(ConfigKey, BTreeSet<String>)>>,
}

impl Registry {
    fn new(snapshot: &StoreSnapshot) -> Registry {
        let mut hosts = BTreeSet::new();
        for stored in snapshot.kind(ConfigKind::Service).values() {
            let meta = stored.object.meta();
            hosts.insert(host::service_fqdn(&meta.name, meta.namespace()));
        }
        for stored in snapshot.kind(ConfigKind::ServiceEntry).values() {
            let ConfigObject::ServiceEntry(se) = &*stored.object else {
                continue;
            };
            for h in &se.spec.hosts {
                hosts.insert(host::resolve(h, se.metadata.namespace()));
            }
        }
        let mut rules: BTreeMap<Hostname, Vec<_>> = BTreeMap::new();
        for (key, stored) in snapshot.kind(ConfigKind::DestinationRule).iter() {
            let ConfigObject::DestinationRule(dr) = &*stored.object else {
                continue;
            };
            let subsets = dr.spec.subsets.iter().map(|s| s.name.clone()).collect();
            rules
                .entry(host::resolve(&dr.spec.host, dr.metadata.namespace()))
                .or_default()
                .push((key.clone(), subsets));
        }
        Registry { hosts, rules }
    }

    fn destination(&self, report: &mut impl FnMut(String, String), path: String, dest: &Destination, namespace: &str) {
        let resolved = host::resolve(&dest.host, namespace);
        let shown = if *resolved == *dest.host { dest.host.clone() } else { format!("{} ({resolved})", dest.host) };
        if !self.hosts.iter().any(|known| host::matches(known, &resolved)) {
            report(
                format!("{path}.host"),
                format!("{shown} matches no Service or ServiceEntry: requests routed there will fail with 503"),
            );
        }
        let Some(subset) = &dest.subset else { return };
        let rules: Vec<&(ConfigKey, BTreeSet<String>)> = self
            .rules
            .iter()
            .filter(|(pattern, _)| host::matches(pattern, &resolved))
            .flat_map(|(_, rules)| rules)
            .collect();
        if rules.iter().any(|(_, subsets)| subsets.contains(subset)) {
            return;
        }
        let message = if rules.is_empty() {
            format!(
                "subset {subset:?} of {shown}: no DestinationRule for this host defines subsets; requests routed there will fail with 503"
            )
        } else {
            let defined: Vec<String> = rules
                .iter()
                .map(|(key, subsets)| {
                    let names: Vec<&str> = subsets.iter().map(String::as_str).collect();
                    format!("{}/{} defines [{}]", key.namespace, key.name, names.join(", "))
                })
                .collect();
            format!(
                "subset {subset:?} of {shown} is not defined by any DestinationRule ({}); requests routed there will fail with 503",
                defined.join("; ")
            )
        };
        report(format!("{path}.subset"), message);
    }
}

/// What a Sidecar applies to: its namespace and its selector labels (`None`: the whole namespace).
type SidecarScope<'a> = (Arc<str>, Option<Vec<(&'a str, &'a str)>>);

/// Sidecars that apply to the same workloads: two without a selector in one
/// namespace (an Error: Istio picks one arbitrarily), or two with the same selector.
fn sidecar_collisions(snapshot: &StoreSnapshot, problems: &mut Vec<Problem>) {
    let mut seen: BTreeMap<SidecarScope<'_>, &ConfigKey> = BTreeMap::new();
    for (key, stored) in snapshot.kind(ConfigKind::Sidecar).iter() {
        let ConfigObject::Sidecar(sidecar) = &*stored.object else {
            continue;
        };
        let selector = sidecar
            .spec
            .workload_selector
            .as_ref()
            .map(|s| s.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<Vec<_>>());
        let without_selector = selector.is_none();
        // The first Sidecar (in key order) is the one later ones are reported against.
        let first = match seen.entry((key.namespace.clone(), selector)) {
            Entry::Vacant(slot) => {
                slot.insert(key);
                continue;
            }
            Entry::Occupied(slot) => *slot.get(),
        };
        if without_selector {
            problems.push(problem(
                stored,
                Severity::Error,
                String::new(),
                format!(
                    "Sidecar {}/{} also has no workloadSelector: only one Sidecar per namespace may omit it, and Istio would pick one arbitrarily",
                    first.namespace, first.name
                ),
            ));
        } else {
            problems.push(problem(
                stored,
                Severity::Warning,
                "spec.workloadSelector".to_string(),
                format!(
                    "Sidecar {}/{} has the same workloadSelector: Istio applies only one of them to each workload",
                    first.namespace, first.name
                ),
            ));
        }
    }
}

fn problem(stored: &StoredObject, severity: Severity, path: String, message: String) -> Problem {
    Problem { severity, source: stored.source.clone(), object: Some(stored.object.key()), path, message }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse::parse_documents;
    use crate::model::ConfigStore;
    use crate::model::store::Write;

    /// Loads `yaml` into a fresh store, as a source would, and checks references.
    fn reference_problems(yaml: &str) -> Vec<Problem> {
        let parsed = parse_documents("refs.yaml", yaml);
        assert!(!parsed.has_errors(), "{:#?}", parsed.problems);
        let store = ConfigStore::new();
        store.apply(parsed.objects.into_iter().map(|(o, s)| Write::put(o, s)));
        check_references(&store.snapshot())
    }

    const REFERENCED: &str = r#"apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: prod}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext}
spec: {hosts: ["*.example.com"], ports: [{number: 80, name: http}]}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: prod}
spec: {host: reviews, subsets: [{name: v1}]}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: ingress, namespace: edge}
spec: {servers: [{port: {number: 80, name: http, protocol: HTTP}, hosts: ["*"]}]}
---
"#;

    #[test]
    fn references_that_resolve_give_no_problems() {
        let yaml = format!(
            "{REFERENCED}apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: r, namespace: prod}}\nspec:\n  hosts: [reviews]\n  gateways: [mesh, edge/ingress]\n  http:\n  - route: [{{destination: {{host: reviews, subset: v1}}}}]\n  - route: [{{destination: {{host: api.example.com}}}}]\n"
        );
        assert_eq!(reference_problems(&yaml), vec![]);
    }

    #[test]
    fn dangling_hosts_subsets_and_gateways_are_warnings_located_in_the_file() {
        let yaml = format!(
            "{REFERENCED}apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: r, namespace: prod}}\nspec:\n  hosts: [reviews]\n  gateways: [ingress]\n  http:\n  - route:\n    - {{destination: {{host: reviews, subset: v2}}, weight: 50}}\n    - {{destination: {{host: ratings}}, weight: 50}}\n"
        );
        let problems = reference_problems(&yaml);
        let found: Vec<(Severity, &str, usize)> =
            problems.iter().map(|p| (p.severity, p.path.as_str(), p.source.doc)).collect();
        assert_eq!(
            found,
            vec![
                (Severity::Warning, "spec.http[0].route[0].destination.subset", 4),
                (Severity::Warning, "spec.http[0].route[1].destination.host", 4),
                (Severity::Warning, "spec.gateways[0]", 4),
            ],
            "{problems:#?}"
        );
        assert!(problems[0].message.contains("prod/reviews defines [v1]"), "{}", problems[0].message);
        assert!(problems[1].message.contains("ratings.prod.svc.cluster.local"), "{}", problems[1].message);
        assert!(problems[2].message.contains("prod/ingress"), "{}", problems[2].message);
    }

    #[test]
    fn a_delegate_without_export_to_is_exported_where_the_stored_mesh_config_says() {
        let yaml = format!(
            "{REFERENCED}apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: root, namespace: edge}}\nspec:\n  hosts: [reviews.prod.svc.cluster.local]\n  http: [{{delegate: {{name: d, namespace: prod}}}}]\n---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: d, namespace: prod}}\nspec:\n  http: [{{route: [{{destination: {{host: reviews}}}}]}}]\n"
        );
        let parsed = parse_documents("refs.yaml", &yaml);
        let store = ConfigStore::new();
        store.apply(parsed.objects.into_iter().map(|(o, s)| Write::put(o, s)));
        assert_eq!(check_references(&store.snapshot()), vec![], "Istio's default: exported everywhere");

        let mut mesh = crate::config::mesh::MeshConfig::default();
        mesh.export_to.virtual_services = vec![".".into()];
        let object = ConfigObject::MeshConfig(Box::new(crate::config::mesh::MeshConfigObject::new(mesh)));
        store.apply([Write::put(object, crate::config::SourceRef { file: "mesh.yaml".into(), doc: 0 })]);
        let problems = check_references(&store.snapshot());
        assert_eq!(problems.iter().map(|p| p.path.as_str()).collect::<Vec<_>>(), ["spec.http[0].delegate"]);
        assert!(problems[0].message.contains("not exported to namespace edge"), "{}", problems[0].message);
    }

    #[test]
    fn two_sidecars_without_selector_in_one_namespace_collide() {
        let sidecar = |name: &str| {
            format!(
                "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {{name: {name}, namespace: prod}}\nspec: {{egress: [{{hosts: [./*]}}]}}\n"
            )
        };
        let problems = reference_problems(&format!("{}---\n{}", sidecar("a"), sidecar("b")));
        assert_eq!(problems.len(), 1, "{problems:#?}");
        assert_eq!(problems[0].severity, Severity::Error);
        assert_eq!(problems[0].object.as_ref().map(|k| &*k.name), Some("b"));
        assert!(problems[0].message.contains("prod/a"), "{}", problems[0].message);
    }

    #[test]
    fn gateway_servers_that_cannot_be_served_are_reported_on_their_gateway() {
        let gateway = |name: &str, servers: &str| {
            format!(
                "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: istio-system}}\nspec:\n  selector: {{istio: ingressgateway}}\n  servers: {servers}\n"
            )
        };
        let yaml = [
            gateway("a", "[{port: {number: 443, name: https, protocol: HTTPS}, hosts: [shop.example.test], tls: {mode: SIMPLE, credentialName: missing}}]"),
            gateway("b", "[{port: {number: 443, name: tcp, protocol: TCP}, hosts: ['*']}, {port: {number: 8443, name: https, protocol: HTTPS}, hosts: [shop.example.test], tls: {mode: PASSTHROUGH}}]"),
        ]
        .join("---\n");
        let found: Vec<(String, String, String)> = reference_problems(&yaml)
            .into_iter()
            .map(|p| (p.object.map(|k| k.name.to_string()).unwrap_or_default(), p.path, p.message))
            .collect();
        let at =
            |name: &str, path: &str| found.iter().find(|(n, p, _)| n == name && p == path).map(|(_, _, m)| m.as_str());
        assert!(at("a", "spec.servers[0].tls.credentialName").is_some_and(|m| m.contains("not served")), "{found:#?}");
        assert!(
            at("b", "spec.servers[0]")
                .is_some_and(|m| m.contains("cannot share it") && m.contains("Gateway istio-system/a")),
            "{found:#?}"
        );
        assert!(at("b", "spec.servers[1]").is_none(), "another port is no conflict: {found:#?}");
    }
}
