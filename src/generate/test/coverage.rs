//! Every field of Istio's API is either visible in the generated Envoy
//! configuration or reported — the rule "accepted means applied", checked
//! field by field.
//!
//! `tests/data/api-coverage/<kind>.yaml` holds variants of one kind that
//! together set every field the API table (`config/istio/api_fields.txt`,
//! from istio/api) lists for it. Each variant is applied alone on top of
//! `base.yaml` (and a support file where its references need it), with the
//! mesh config the kind needs (Telemetry: providers to name), and the
//! configuration of four proxies is generated: sidecars `client-v1` and
//! `client-v2` of namespace `cov` (in two localities), `client-other` of
//! namespace `other`, and the router of Gateway `cov-gateway`. Then, for
//! every leaf the variant sets, the variant is applied again without that
//! leaf: the leaf is *applied* when the generated configuration (or what
//! validation says about the object) changes,
//! *reported* when a problem names it (or a field around it as ignored, or
//! refuses the whole object), and otherwise silently dropped — which fails
//! the test. A short list,
//! [`NO_EFFECT`], names the fields that change nothing in Istio's
//! configuration either, with the reason.
//!
//! Istio's mesh config is a kind here too (`MeshConfig`, its paths from
//! the top as the table writes them): a variant's `spec` is read as
//! `serve --mesh-config` reads a file without Kubernetes, the objects are
//! served with it, and its reader's problems are the variant's own. Some of
//! its `defaultConfig` only `meshpush agent` applies, so for a mesh config
//! what the agent runs for a sidecar ([`agent_run`]) is compared too.

use std::collections::BTreeSet;
use std::path::Path;

use serde_yaml_ng::{Mapping, Value};

use super::*;
use crate::config::istio::api;
use crate::config::mesh::{MeshConfig, MeshSettings};
use crate::config::parse::parse_documents;
use crate::config::{Problem, Severity, SourceRef};
use crate::generate::sds;
use crate::model::{Locality, check_references};
use crate::push::scope::endpoint_view;

/// Fields that change no Envoy configuration in Istio either, for the
/// proxies meshpush serves today: `(kind, table path, why)`.
const NO_EFFECT: &[(&str, &str, &str)] = &[
    (
        "RequestAuthentication",
        "spec.jwtRules[].timeout",
        "how long the control plane's own fetch of the key set may take: no Envoy configuration carries it (in Istio's default fetch mode either)",
    ),
    ("Gateway", "spec.servers[].name", "Istio uses a server's name only as the stat prefix of HTTPS servers"),
    ("Gateway", "spec.servers[].port.name", "Istio uses a plain HTTP or TCP server port's name for nothing"),
    ("Sidecar", "spec.egress[].captureMode", "DEFAULT and IPTABLES are what a redirected proxy does anyway"),
    ("Sidecar", "spec.ingress[].captureMode", "DEFAULT and IPTABLES are what a redirected proxy does anyway"),
    ("Sidecar", "spec.ingress[].port.name", "Istio takes the protocol from port.protocol when it is set"),
    ("Sidecar", "spec.egress[].port.name", "Istio takes the protocol from port.protocol when it is set"),
    // As in Istio, a ProxyConfig reaches a proxy when its pod is injected,
    // never through served configuration: `model::proxy_config` tests how
    // the objects layer, `tests/inject.rs` what the injected pod gets.
    ("ProxyConfig", "spec.selector.matchLabels.*", "applied at injection"),
    ("ProxyConfig", "spec.concurrency", "applied at injection"),
    ("ProxyConfig", "spec.environmentVariables.*", "applied at injection"),
    // The coverage mesh is one cluster; `networks::a_cluster_local_host_is_served_with_the_proxys_own_clusters_endpoints`
    // tests what these do among several.
    (
        "MeshConfig",
        "serviceSettings[].settings.clusterLocal",
        "with one cluster every endpoint is the proxy's own cluster's",
    ),
    ("MeshConfig", "serviceSettings[].hosts[]", "with one cluster every endpoint is the proxy's own cluster's"),
    // These secure the connection to an MCP config source, not what proxies
    // are sent: `source::mcp`'s tests check each (roots, names, identities).
    ("MeshConfig", "configSources[].tlsSettings.caCertificates", "secures the connection to the MCP server"),
    ("MeshConfig", "configSources[].tlsSettings.credentialName", "secures the connection to the MCP server"),
    ("MeshConfig", "configSources[].tlsSettings.subjectAltNames[]", "secures the connection to the MCP server"),
    ("MeshConfig", "configSources[].tlsSettings.sni", "secures the connection to the MCP server"),
    ("MeshConfig", "configSources[].tlsSettings.insecureSkipVerify", "secures the connection to the MCP server"),
    ("MeshConfig", "configSources[].tlsSettings.caCrl", "secures the connection to the MCP server"),
];

/// The Secrets the Gateway variants name (`web-cert`, `web-cert-2`,
/// `web-ca` in `cov`), made once per test run: certificates cannot be
/// written into the data files without a private key in the repository.
fn secrets() -> &'static str {
    static SECRETS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SECRETS.get_or_init(|| {
        let (ca, issuer) = crate::testing::certs::ca("coverage CA");
        let (cert, key) = crate::testing::certs::leaf(&issuer, &["web.example"]);
        let (cert2, key2) = crate::testing::certs::leaf(&issuer, &["web.example"]);
        [
            crate::testing::certs::tls_secret("cov", "web-cert", &cert, &key, None),
            crate::testing::certs::tls_secret("cov", "web-cert-2", &cert2, &key2, None),
            format!(
                "apiVersion: v1\nkind: Secret\nmetadata: {{name: web-ca, namespace: cov}}\nstringData:\n  ca.crt: |\n{}",
                ca.lines().map(|l| format!("    {l}\n")).collect::<String>()
            ),
        ]
        .join("---\n")
    })
}

/// The mesh config a kind's variants are served with: Telemetry's name
/// providers (their collector is `web` of `cov`), AuthorizationPolicy's
/// CUSTOM ones external authorizers (at `web` too); the rest Istio's
/// defaults.
fn mesh_for(kind: &str) -> MeshConfig {
    match kind {
        "AuthorizationPolicy" => MeshSettings::parse(
            "coverage mesh",
            "extensionProviders:\n\
             - {name: opa, envoyExtAuthzHttp: {service: web.cov.svc.cluster.local, port: 8080}}\n\
             - {name: opa-grpc, envoyExtAuthzGrpc: {service: cov/web.cov.svc.cluster.local, port: 8080}}\n",
        )
        .expect("the coverage mesh config parses")
        .mesh_config(),
        "Telemetry" => MeshSettings::parse(
            "coverage mesh",
            "extensionProviders:\n\
             - {name: zipkin, zipkin: {service: web.cov.svc.cluster.local, port: 8080}}\n\
             - {name: als, envoyHttpAls: {service: web.cov.svc.cluster.local, port: 8080}}\n\
             - {name: json, envoyFileAccessLog: {path: /tmp/json.log, logFormat: {labels: {code: '%RESPONSE_CODE%'}}}}\n",
        )
        .expect("the coverage mesh config parses")
        .mesh_config(),
        _ => Default::default(),
    }
}

/// Which support files a kind's variants are applied with.
fn support_for(kind: &str) -> &'static [&'static str] {
    match kind {
        "VirtualService" | "Sidecar" => &["support.yaml"],
        "MeshConfig" => &["mesh-support.yaml"],
        "EnvoyFilter" => &["envoy-filter-support.yaml"],
        _ => &[],
    }
}

/// The file name a MeshConfig variant is read as.
const MESH_FILE: &str = "coverage mesh";

/// What a variant is served with: the mesh config, what reading it said,
/// and whether what the agent runs by it is compared.
struct Served {
    mesh: MeshConfig,
    /// The mesh config reader's problems (`object: None`: a MeshConfig
    /// variant's own).
    problems: Vec<Problem>,
    /// Whether [`agent_run`] is part of what is compared.
    agent: bool,
}

impl Served {
    /// The fixed mesh config of a kind's variants.
    fn for_kind(kind: &str) -> Served {
        Served { mesh: mesh_for(kind), problems: Vec::new(), agent: false }
    }

    /// A MeshConfig variant's `spec`, read as `serve` reads its mesh config
    /// file without Kubernetes. A refused file is served as Istio's
    /// defaults, and its error reports every field it sets.
    fn read(spec: &Value) -> Served {
        let text = serde_yaml_ng::to_string(spec).expect("a YAML value serializes");
        match MeshSettings::parse(MESH_FILE, &text).and_then(|s| s.finish(MESH_FILE)) {
            Ok(settings) => {
                let settings = settings.without_kubernetes(MESH_FILE);
                Served { mesh: settings.mesh_config(), problems: settings.problems, agent: true }
            }
            Err(message) => {
                let refused = Problem {
                    severity: Severity::Error,
                    source: SourceRef { file: MESH_FILE.into(), doc: 0 },
                    object: None,
                    path: String::new(),
                    message,
                };
                Served { mesh: MeshConfig::default(), problems: vec![refused], agent: true }
            }
        }
    }
}

/// What `meshpush agent`, its flags left at their defaults, runs for the
/// sidecar `client-v1` by the mesh's `defaultConfig`: the bootstrap it
/// writes, how it runs and stops Envoy, the upstream it dials and its
/// status port; and the pod the injector makes of `client-v1`. The
/// bootstrap's `PROXY_CONFIG` metadata is left out: it repeats every field
/// the ProxyConfig models, applied or not, so it would prove nothing.
fn agent_run(mesh: &MeshConfig) -> Vec<u8> {
    use crate::agent::envoy::EnvoyCommand;
    let config = (*mesh.default_proxy_config).clone();
    let mut opts = crate::bootstrap::BootstrapOptions::new(CLIENT_V1, "unix:./etc/istio/proxy/XDS");
    opts.sds_socket = Some("./etc/istio/proxy/SDS".into());
    opts.interception = config.interception_mode().to_string();
    opts.proxy_config = Some(config.clone());
    let bootstrap = match crate::bootstrap::render(&opts) {
        Ok(text) => {
            let mut doc: Value = serde_yaml_ng::from_str(&text).expect("the bootstrap is YAML");
            let metadata = doc["node"]["metadata"].as_mapping_mut().expect("the node has metadata");
            metadata.remove(crate::config::mesh::proxy_config::PROXY_CONFIG_METADATA).expect("it is sent");
            yaml(&[doc])
        }
        Err(e) => e.to_string(),
    };
    let command = EnvoyCommand::new(
        "envoy".into(),
        "envoy-bootstrap.yaml".into(),
        15000,
        &config,
        crate::model::ProxyKind::Sidecar,
        Vec::new(),
    );
    let upstream = crate::agent::upstream::DiscoveryAddress::of(&config).map(|a| a.to_string());
    let status_port = config.status_port();
    // What the injector gives a new pod by the same config.
    let injector = crate::inject::Injector { mesh: mesh.clone(), ..Default::default() };
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: client-v1, namespace: cov}\n\
               spec: {containers: [{name: app, image: app, readinessProbe: {httpGet: {port: 8080}}}]}\n";
    let injected = crate::inject::workload::inject_manifest(&injector, pod).map(|i| i.text);
    format!("{bootstrap}\n{command:?}\n{:?}\n{upstream:?}\n{status_port}\n{injected:?}\n", command.args()).into_bytes()
}

/// The node id of the sidecar `client-v1`.
const CLIENT_V1: &str = "sidecar~10.50.0.1~client-v1.cov~cov.svc.cluster.local";

fn dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/api-coverage")
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).expect("coverage documents are valid YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

fn yaml(docs: &[Value]) -> String {
    docs.iter().map(|d| serde_yaml_ng::to_string(d).unwrap()).collect::<Vec<_>>().join("---\n")
}

fn kind_of(doc: &Value) -> &str {
    doc.get("kind").and_then(Value::as_str).unwrap_or("")
}

/// The proxies whose configuration is compared, with a VM's proxy that
/// registers into WorkloadGroup `group` when one is given.
fn proxies(group: Option<&str>) -> Vec<crate::model::Proxy> {
    let mut v1 = proxy(CLIENT_V1, "REDIRECT", &[("app", "client"), ("version", "v1")]);
    v1.locality = Locality::parse("us-east/zone-a");
    // Holds a workload certificate (its bootstrap has `sds-grpc`): mesh mTLS
    // reaches its configuration; the other sidecars stay plain text.
    v1.mesh_certificates = true;
    // What EnvoyFilter proxy matches read: the two sidecars of `cov`
    // differ in version and team.
    v1.metadata.insert("ISTIO_VERSION", "1.24.0");

    let mut v2 = proxy(
        "sidecar~10.50.0.2~client-v2.cov~cov.svc.cluster.local",
        "REDIRECT",
        &[("app", "client"), ("version", "v2")],
    );
    v2.locality = Locality::parse("eu-west/zone-b");
    v2.metadata.insert("ISTIO_VERSION", "2.0.0");
    v2.metadata.insert("TEAM", "cov");
    let other = proxy(
        "sidecar~10.50.0.3~client.other~other.svc.cluster.local",
        "REDIRECT",
        &[("app", "client"), ("version", "v1")],
    );
    let mut router =
        proxy("router~10.50.0.4~gateway.cov~cov.svc.cluster.local", "REDIRECT", &[("istio", "cov-gateway")]);
    router.mesh_certificates = true;
    let mut all = vec![v1, v2, other, router];
    if let Some(group) = group {
        let mut vm = proxy("sidecar~10.50.0.5~vm-1.cov~cov.svc.cluster.local", "REDIRECT", &[]);
        vm.metadata.insert(crate::source::autoregistration::GROUP_METADATA, group);
        all.push(vm);
    }
    all
}

/// Everything generated for the proxies from `text` served with `served`,
/// encoded, then what the agent runs (where compared) and what validation
/// said (a removed field that changes any of it was read); and the problems.
fn generate(text: &str, group: Option<&str>, served: &Served) -> (Vec<u8>, Vec<Problem>) {
    let mesh = &served.mesh;
    let text = format!("{text}\n---\n{}", secrets());
    let parsed = parse_documents("coverage.yaml", &text);
    let store = ConfigStore::new();
    store.apply(parsed.objects.into_iter().map(|(o, s)| Write::put(o, s)).collect::<Vec<_>>());
    // A member of the group registers, as the server's auto-registration would make it.
    let registered: Vec<Write> = proxies(group)
        .iter()
        .filter_map(|p| crate::source::autoregistration::entry_for(&store.snapshot(), p))
        .map(|e| {
            Write::put(
                crate::config::ConfigObject::WorkloadEntry(e),
                crate::config::SourceRef { file: "registered".into(), doc: 0 },
            )
        })
        .collect();
    store.apply(registered);
    let mut problems = parsed.problems;
    problems.extend(served.problems.iter().cloned());
    problems.extend(check_references(&store.snapshot()));
    problems.extend(crate::model::check_telemetry(&store.snapshot(), mesh));
    problems.extend(crate::model::check_ext_authz(&store.snapshot(), mesh));
    let ctx = PushContext::build_with(store.snapshot(), 1, Arc::new(ScopeInterner::default()), Arc::new(mesh.clone()));
    let mut out = Vec::new();
    for p in proxies(group) {
        let scope = ctx.scope_for(&p);
        let (_, inbound) = ctx.inbound_for(&p);
        let view = endpoint_view(&ctx, &p);
        // As served: EnvoyFilter patches applied.
        let mut record = crate::generate::envoy_filter::Record::default();
        let mut clusters = crate::generate::envoy_filter::clusters(&ctx, &scope, &mut record);
        clusters.extend(crate::generate::envoy_filter::inbound_clusters(&inbound, &mut record));
        for c in &clusters {
            out.extend(c.encode_to_vec());
            if let Some(cla) = eds::load_assignment(&ctx, &c.name, view.as_deref()) {
                out.extend(cla.encode_to_vec());
            }
        }
        let listeners = crate::generate::envoy_filter::listeners(&ctx, &scope, &mut record);
        for l in listeners.iter().chain(&crate::generate::envoy_filter::inbound_listeners(&inbound, &mut record)) {
            out.extend(l.encode_to_vec());
        }
        for r in crate::generate::envoy_filter::route_configs(&ctx, &scope, &mut record) {
            out.extend(r.encode_to_vec());
        }
        for c in crate::generate::envoy_filter::extension_configs(&scope, &mut record) {
            out.extend(c.encode_to_vec());
        }
        for name in sds::secret_names(&ctx, &scope) {
            if let Some(s) = sds::secret(&ctx, &scope.key.namespace, sds::reader(&scope), &name) {
                out.extend(s.encode_to_vec());
            }
        }
    }
    if served.agent {
        out.extend(agent_run(mesh));
    }
    let mut said: Vec<String> = problems.iter().map(ToString::to_string).collect();
    said.sort();
    out.extend(said.join("\n").into_bytes());
    (out, problems)
}

/// One leaf the document sets: its concrete path (`spec.http[0].name`),
/// its table path (`spec.http[].name`), and how to reach it.
#[derive(Debug, Clone)]
struct Leaf {
    concrete: String,
    table: String,
    steps: Vec<Step>,
}

#[derive(Debug, Clone)]
enum Step {
    Key(Value),
    Index(usize),
}

/// Every leaf of `value` below `prefix`, naming map entries `*` where the
/// table says the field is a map. A field whose value is an empty mapping
/// is a leaf: a message without fields (`prometheus: {}`) is set by being
/// there. (An empty item of a list is an entry of the list, not a field.)
fn leaves(fields: &BTreeSet<String>, value: &Value, leaf: Leaf, out: &mut Vec<Leaf>) {
    match value {
        Value::Mapping(map)
            if map.is_empty() && leaf.steps.len() > 1 && matches!(leaf.steps.last(), Some(Step::Key(_))) =>
        {
            out.push(leaf)
        }
        Value::Mapping(map) => {
            for (k, v) in map {
                // A map may be keyed by numbers (`portLevelMtls`).
                let key = match k {
                    Value::Number(n) => n.to_string(),
                    _ => k.as_str().unwrap_or_default().to_string(),
                };
                let is_map = fields.contains(&format!("{}.*", leaf.table));
                let table = if leaf.table.is_empty() {
                    key.to_string()
                } else if is_map {
                    format!("{}.*", leaf.table)
                } else {
                    format!("{}.{key}", leaf.table)
                };
                let concrete =
                    if leaf.concrete.is_empty() { key.to_string() } else { format!("{}.{key}", leaf.concrete) };
                let mut steps = leaf.steps.clone();
                steps.push(Step::Key(k.clone()));
                leaves(fields, v, Leaf { concrete, table, steps }, out);
            }
        }
        Value::Sequence(items) => {
            for (i, item) in items.iter().enumerate() {
                let mut steps = leaf.steps.clone();
                steps.push(Step::Index(i));
                let next =
                    Leaf { concrete: format!("{}[{i}]", leaf.concrete), table: format!("{}[]", leaf.table), steps };
                leaves(fields, item, next, out);
            }
        }
        _ => out.push(leaf),
    }
}

/// `doc` without the leaf (an emptied list or map is left in place).
fn without(doc: &Value, steps: &[Step]) -> Value {
    let mut doc = doc.clone();
    let mut node = &mut doc;
    for step in &steps[..steps.len() - 1] {
        node = match step {
            Step::Key(k) => node.get_mut(k).expect("the path exists"),
            Step::Index(i) => node.get_mut(*i).expect("the path exists"),
        };
    }
    match (steps.last().expect("a leaf has a step"), node) {
        (Step::Key(k), Value::Mapping(map)) => {
            map.remove(k);
        }
        (Step::Index(i), Value::Sequence(items)) => {
            items.remove(*i);
        }
        _ => unreachable!("steps follow the document"),
    }
    doc
}

/// Whether a problem reports the leaf: one naming it, one saying a field
/// around it (or the whole document) is ignored, or an error refusing the
/// whole object.
fn reported(problems: &[Problem], name: &str, leaf: &Leaf) -> bool {
    problems.iter().any(|p| {
        let mine = p.object.as_ref().is_none_or(|k| &*k.name == name);
        if mine && p.is_error() {
            return true;
        }
        let drops = ["ignored", "not supported", "skipped", "not used", "not routed", "not applied", "no effect"]
            .iter()
            .any(|w| p.message.contains(w));
        mine && (p.path == leaf.concrete
            || (drops
                && (p.path.is_empty()
                    || leaf.concrete.starts_with(&format!("{}.", p.path))
                    || leaf.concrete.starts_with(&format!("{}[", p.path)))))
    })
}

#[test]
fn every_field_of_istio_s_api_is_applied_or_reported() {
    let base = std::fs::read_to_string(dir().join("base.yaml")).unwrap();
    let mut failures = Vec::new();
    for (kind, file) in [
        ("VirtualService", "virtual-service.yaml"),
        ("DestinationRule", "destination-rule.yaml"),
        ("Gateway", "gateway.yaml"),
        ("ServiceEntry", "service-entry.yaml"),
        ("WorkloadEntry", "service-entry.yaml"),
        ("WorkloadGroup", "workload-group.yaml"),
        ("Sidecar", "sidecar.yaml"),
        ("PeerAuthentication", "peer-authentication.yaml"),
        ("AuthorizationPolicy", "authorization-policy.yaml"),
        ("RequestAuthentication", "request-authentication.yaml"),
        ("Telemetry", "telemetry.yaml"),
        ("ProxyConfig", "proxy-config.yaml"),
        ("EnvoyFilter", "envoy-filter.yaml"),
        ("MeshConfig", "mesh-config.yaml"),
    ] {
        // A mesh config is not an object of the store: its paths start at
        // the top, and each variant is served as the mesh config.
        let mesh_config = kind == "MeshConfig";
        let fields: BTreeSet<String> = api::fields(kind).into_iter().collect();
        let docs = documents(&std::fs::read_to_string(dir().join(file)).unwrap());
        let support: String = support_for(kind)
            .iter()
            .map(|f| std::fs::read_to_string(dir().join(f)).unwrap())
            .collect::<Vec<_>>()
            .join("---\n");
        let (variants, helpers): (Vec<&Value>, Vec<&Value>) = docs.iter().partition(|d| kind_of(d) == kind);
        assert!(!variants.is_empty(), "{file} has no {kind}");
        let fixed = (!mesh_config).then(|| Served::for_kind(kind));
        let mut seen: BTreeSet<String> = BTreeSet::new();
        for variant in variants {
            let name = variant["metadata"]["name"].as_str().unwrap_or_default().to_string();
            let helpers: Vec<Value> = helpers.iter().map(|h| (*h).clone()).collect();
            let group = (kind == "WorkloadGroup").then_some(name.as_str());
            let generate_for = |doc: &Value| {
                let mut all = helpers.clone();
                let own;
                let served = match &fixed {
                    Some(fixed) => {
                        all.push(doc.clone());
                        fixed
                    }
                    None => {
                        own = Served::read(&doc["spec"]);
                        &own
                    }
                };
                generate(&format!("{base}\n---\n{support}\n---\n{}", yaml(&all)), group, served)
            };
            let (baseline, problems) = generate_for(variant);
            let spec = variant.get("spec").cloned().unwrap_or(Value::Mapping(Mapping::new()));
            let mut found = Vec::new();
            let top = if mesh_config { "" } else { "spec" };
            let root = Leaf { concrete: top.into(), table: top.into(), steps: vec![Step::Key("spec".into())] };
            leaves(&fields, &spec, root, &mut found);
            for leaf in found {
                let mut table = leaf.table.clone();
                seen.insert(table.clone());
                // Every enclosing field counts as set too.
                while let Some(cut) = table.rfind(['.', '[']) {
                    table.truncate(cut);
                    let parent =
                        if fields.contains(&format!("{table}[]")) { format!("{table}[]") } else { table.clone() };
                    seen.insert(parent);
                }
                if reported(&problems, &name, &leaf) {
                    continue;
                }
                if NO_EFFECT.iter().any(|(k, p, _)| *k == kind && *p == leaf.table) {
                    continue;
                }
                let (changed, _) = generate_for(&without(variant, &leaf.steps));
                if changed == baseline {
                    failures.push(format!("{kind} {name}: {} is neither applied nor reported", leaf.concrete));
                }
            }
        }
        let missing: Vec<&String> = fields.iter().filter(|f| !seen.contains(*f)).collect();
        if !missing.is_empty() {
            failures.push(format!("{file} sets no value for these {kind} fields: {missing:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A CUSTOM policy's `provider.name` is applied, not reported: its
/// authorizer is the coverage mesh's, and without the name the policy's
/// filters go.
#[test]
fn a_custom_policy_s_provider_is_applied() {
    let base = std::fs::read_to_string(dir().join("base.yaml")).unwrap();
    let docs = documents(&std::fs::read_to_string(dir().join("authorization-policy.yaml")).unwrap());
    let mesh = Served::for_kind("AuthorizationPolicy");
    let (custom, helpers): (Vec<&Value>, Vec<&Value>) =
        docs.iter().partition(|d| d["spec"]["action"].as_str() == Some("CUSTOM"));
    let helpers: Vec<Value> = helpers.into_iter().filter(|d| kind_of(d) != "AuthorizationPolicy").cloned().collect();
    assert_eq!(custom.len(), 2, "an HTTP and a gRPC authorizer");
    for variant in custom {
        let text = |doc: &Value| format!("{base}\n---\n{}", yaml(&[helpers.clone(), vec![doc.clone()]].concat()));
        let (with, problems) = generate(&text(variant), None, &mesh);
        let about: Vec<&Problem> = problems.iter().filter(|p| p.path.starts_with("spec.provider")).collect();
        assert!(about.is_empty(), "{about:#?}");
        let mut unnamed = variant.clone();
        unnamed["spec"]["provider"]["name"] = Value::String(String::new());
        assert_ne!(generate(&text(&unnamed), None, &mesh).0, with, "the provider's filters go with its name");
    }
}

#[test]
fn the_walk_names_fields_as_the_table_does() {
    let fields: BTreeSet<String> = api::fields("VirtualService").into_iter().collect();
    let doc = documents("spec: {http: [{match: [{headers: {x-a: {exact: b}}}]}]}\n").remove(0);
    let mut found = Vec::new();
    let root = Leaf { concrete: "spec".into(), table: "spec".into(), steps: vec![Step::Key("spec".into())] };
    leaves(&fields, &doc["spec"], root, &mut found);
    let paths: Vec<(&str, &str)> = found.iter().map(|l| (l.concrete.as_str(), l.table.as_str())).collect();
    assert_eq!(paths, [("spec.http[0].match[0].headers.x-a.exact", "spec.http[].match[].headers.*.exact")]);
    assert_eq!(api::normalize_indexes("spec.http[3].route[0]"), "spec.http[].route[]");
    let removed = without(&doc, &found[0].steps);
    assert!(removed["spec"]["http"][0]["match"][0]["headers"]["x-a"].as_mapping().is_some_and(|m| m.is_empty()));
}
