//! Sidecar injection on Istio's own injection inputs
//! (`tests/data/istio/pkg/kube/inject/testdata/inject/`, Apache-2.0, see
//! the README beside them): every input is injected where Istio injects
//! and nowhere else, refused where Istio refuses it, valid against the
//! Kubernetes schemas afterwards, unchanged by a second injection, and
//! every annotation the issue names is honoured.

use std::path::{Path, PathBuf};

use meshpush::inject::Injector;
use meshpush::inject::workload::inject_manifest;
use serde_yaml_ng::Value;

const INPUTS: &str = "tests/data/istio/pkg/kube/inject/testdata/inject";

/// Inputs Istio refuses to inject, each with the annotation its error names.
const REFUSED: [(&str, &str); 5] = [
    ("traffic-annotations-bad-includeipranges.yaml", "includeOutboundIPRanges"),
    ("traffic-annotations-bad-excludeipranges.yaml", "excludeOutboundIPRanges"),
    ("traffic-annotations-bad-includeinboundports.yaml", "includeInboundPorts"),
    ("traffic-annotations-bad-excludeinboundports.yaml", "excludeInboundPorts"),
    ("traffic-annotations-bad-excludeoutboundports.yaml", "excludeOutboundPorts"),
];

/// Inputs whose pods Istio leaves without a sidecar.
const SKIPPED: [&str; 3] = ["hello-host-network.yaml", "hello-host-network-with-ns.yaml", "hello-ignore.yaml"];

fn inputs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(INPUTS);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("the vendored inputs")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 100, "Istio's 100 injection inputs are vendored");
    files
}

fn name(path: &Path) -> &str {
    path.file_name().unwrap().to_str().unwrap()
}

fn inject(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).unwrap();
    inject_manifest(&Injector::default(), &text).map(|i| i.text)
}

/// The injected output of one input.
fn injected(file: &str) -> String {
    inject(&Path::new(env!("CARGO_MANIFEST_DIR")).join(INPUTS).join(file)).unwrap()
}

/// The pod templates (or Pods) of a document: (metadata, spec).
fn pods(doc: &Value) -> Vec<(Value, Value)> {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
    let at = |path: &[&str]| path.iter().try_fold(doc, |v, k| v.get(*k)).cloned();
    match kind {
        "List" => doc.get("items").and_then(Value::as_sequence).into_iter().flatten().flat_map(pods).collect(),
        "Pod" => vec![(at(&["metadata"]).unwrap_or_default(), at(&["spec"]).unwrap())],
        "CronJob" => {
            let template = at(&["spec", "jobTemplate", "spec", "template"]).unwrap();
            vec![(template.get("metadata").cloned().unwrap_or_default(), template["spec"].clone())]
        }
        "Deployment"
        | "DaemonSet"
        | "ReplicaSet"
        | "StatefulSet"
        | "Job"
        | "ReplicationController"
        | "DeploymentConfig" => {
            let template = at(&["spec", "template"]).unwrap();
            vec![(template.get("metadata").cloned().unwrap_or_default(), template["spec"].clone())]
        }
        _ => Vec::new(),
    }
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

use serde::Deserialize as _;

fn container<'a>(spec: &'a Value, list: &str, name: &str) -> Option<&'a Value> {
    spec.get(list)?.as_sequence()?.iter().find(|c| c["name"].as_str() == Some(name))
}

fn names(spec: &Value, list: &str) -> Vec<String> {
    spec.get(list)
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

fn args(c: &Value) -> Vec<String> {
    c["args"].as_sequence().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect()
}

/// The value after `flag` in istio-init's arguments.
fn flag(spec: &Value, flag: &str) -> Option<String> {
    let args = args(container(spec, "initContainers", "istio-init")?);
    let at = args.iter().position(|a| a == flag)?;
    args.get(at + 1).cloned()
}

fn env<'a>(c: &'a Value, name: &str) -> Option<&'a str> {
    c["env"].as_sequence()?.iter().find(|e| e["name"].as_str() == Some(name))?["value"].as_str()
}

/// The first pod of an injected input.
fn first_pod(file: &str) -> (Value, Value) {
    documents(&injected(file)).iter().flat_map(pods).next().unwrap()
}

#[test]
fn every_istio_input_gets_a_sidecar_exactly_where_istio_injects_one() {
    let mut injected_pods = 0;
    for path in inputs() {
        let file = name(&path);
        let result = inject(&path);
        if let Some((_, annotation)) = REFUSED.iter().find(|(f, _)| *f == file) {
            let err = result.expect_err(file);
            assert!(err.contains(annotation) && err.contains("invalid value"), "{file}: {err}");
            continue;
        }
        let out = result.unwrap_or_else(|e| panic!("{file}: {e}"));
        let input = std::fs::read_to_string(&path).unwrap();
        let (before, after) = (documents(&input), documents(&out));
        assert_eq!(before.len(), after.len(), "{file}: every document is kept");
        for (old, new) in before.iter().zip(&after) {
            let pods = pods(new);
            if pods.is_empty() {
                assert_eq!(old, new, "{file}: a document without a pod is printed back as it was");
            }
            for (meta, spec) in pods {
                let proxies = names(&spec, "containers")
                    .into_iter()
                    .chain(names(&spec, "initContainers"))
                    .filter(|n| n == "istio-proxy")
                    .count();
                let skipped = SKIPPED.contains(&file);
                assert_eq!(proxies, usize::from(!skipped), "{file}: one proxy, unless Istio skips the pod");
                if skipped {
                    assert_eq!(old, new, "{file}: a skipped pod is left as it was");
                    continue;
                }
                injected_pods += 1;
                let status = meta["annotations"]["sidecar.istio.io/status"].as_str().expect(file);
                let status: serde_json::Value = serde_json::from_str(status).unwrap();
                assert_eq!(status["revision"], "default", "{file}");
            }
        }
    }
    assert_eq!(injected_pods, 93, "the pods of the 92 inputs Istio injects");
}

#[test]
fn injecting_an_injected_manifest_changes_nothing() {
    for path in inputs().iter().filter(|p| !REFUSED.iter().any(|(f, _)| *f == name(p))) {
        let once = inject(path).unwrap();
        let twice = inject_manifest(&Injector::default(), &once).unwrap().text;
        assert_eq!(once, twice, "{}", name(path));
    }
}

#[test]
fn every_injected_manifest_is_valid_against_the_kubernetes_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for path in inputs().iter().filter(|p| !REFUSED.iter().any(|(f, _)| *f == name(p))) {
        let out = dir.path().join(name(path));
        std::fs::write(&out, inject(path).unwrap()).unwrap();
        files.push(out);
    }
    // A deliberately broken pod proves the check can fail.
    let broken = dir.path().join("broken.yaml");
    std::fs::write(
        &broken,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: a, imagee: b}]}\n",
    )
    .unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let check = |files: &[PathBuf]| {
        std::process::Command::new(root.join("scripts/validate-manifests.sh")).args(files).output().unwrap()
    };
    let out = check(&[broken]);
    assert!(!out.status.success(), "the broken pod must be reported: {}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("imagee"), "{}", String::from_utf8_lossy(&out.stdout));
    let out = check(&files);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("documents, ok"), "{stdout}");
}

#[test]
fn resource_annotations_set_the_proxy_resources_and_nothing_else() {
    let (_, spec) = first_pod("resource_annotations.yaml");
    for c in [
        container(&spec, "containers", "istio-proxy").unwrap(),
        container(&spec, "initContainers", "istio-init").unwrap(),
    ] {
        let r = &c["resources"];
        assert_eq!((r["requests"]["cpu"].as_str(), r["requests"]["memory"].as_str()), (Some("100m"), Some("1Gi")));
        assert_eq!((r["limits"]["cpu"].as_str(), r["limits"]["memory"].as_str()), (Some("1000m"), Some("2Gi")));
    }
    let (_, spec) = first_pod("traffic-annotations.yaml");
    let r = &container(&spec, "containers", "istio-proxy").unwrap()["resources"];
    assert_eq!(r["requests"]["cpu"].as_str(), Some("4000m"));
    assert!(r["requests"].get("memory").is_none() && r.get("limits").is_none(), "only what the annotations set: {r:?}");
}

#[test]
fn traffic_annotations_become_the_capture_flags() {
    let (_, spec) = first_pod("traffic-annotations.yaml");
    assert_eq!(flag(&spec, "-i").as_deref(), Some("127.0.0.1/24,10.96.0.1/24"));
    assert_eq!(flag(&spec, "-x").as_deref(), Some("10.96.0.2/24,10.96.0.3/24"));
    assert_eq!(flag(&spec, "-b").as_deref(), Some("1,2,3"));
    assert_eq!(flag(&spec, "-d").as_deref(), Some("15090,15021,4,5,6,15020"));
    assert_eq!(flag(&spec, "-o").as_deref(), Some("7,8,9"));
    assert_eq!(flag(&spec, "-q"), None, "not asked for");
    // proxy.istio.io/config reaches the agent as PROXY_CONFIG, and its metadata as environment.
    let proxy = container(&spec, "containers", "istio-proxy").unwrap();
    let config: serde_json::Value = serde_json::from_str(env(proxy, "PROXY_CONFIG").unwrap()).unwrap();
    assert_eq!(config["discoveryAddress"], "foo:123");
    assert_eq!(config["proxyMetadata"]["FOO"], "bar");
    assert_eq!(env(proxy, "FOO"), Some("bar"));
    let (_, spec) = first_pod("traffic-annotations-empty-includes.yaml");
    assert_eq!((flag(&spec, "-i").as_deref(), flag(&spec, "-b").as_deref()), (Some(""), Some("")));
    let (_, spec) = first_pod("hello.yaml");
    assert_eq!(flag(&spec, "-d").as_deref(), Some("15090,15021,15020"));
    assert_eq!((flag(&spec, "-i").as_deref(), flag(&spec, "-m").as_deref()), (Some("*"), Some("REDIRECT")));
}

#[test]
fn the_status_port_and_readiness_annotations_are_honoured() {
    let (_, spec) = first_pod("status_annotations.yaml");
    assert_eq!(flag(&spec, "-d").as_deref(), Some("15090,15021,123"));
    let proxy = container(&spec, "containers", "istio-proxy").unwrap();
    let probe = &proxy["readinessProbe"];
    assert_eq!(
        (probe["initialDelaySeconds"].as_i64(), probe["periodSeconds"].as_i64(), probe["failureThreshold"].as_i64()),
        (Some(100), Some(200), Some(300))
    );
    let (_, spec) = first_pod("status_annotations_zeroport.yaml");
    let proxy = container(&spec, "containers", "istio-proxy").unwrap();
    assert!(proxy.get("readinessProbe").is_none() && proxy.get("startupProbe").is_none(), "port 0: no probe");
    assert_eq!(flag(&spec, "-d").as_deref(), Some("15090,15021"));
}

#[test]
fn the_interception_mode_decides_the_capture_container_and_the_proxy_user() {
    let (_, spec) = first_pod("init-no-intercept-no-native-sidecar.yaml");
    assert!(container(&spec, "initContainers", "istio-init").is_none(), "NONE: no capture");
    assert!(args(container(&spec, "containers", "istio-proxy").unwrap()).contains(&"--interception=NONE".into()));
    let (_, spec) = first_pod("hello-openshift-tproxy.yaml");
    assert_eq!(flag(&spec, "-m").as_deref(), Some("TPROXY"));
    assert_eq!(flag(&spec, "-u").as_deref(), Some("1337"));
    let context = &container(&spec, "containers", "istio-proxy").unwrap()["securityContext"];
    assert_eq!(context["runAsUser"].as_i64(), Some(0));
    assert_eq!(context["capabilities"]["add"][0].as_str(), Some("NET_ADMIN"));
    let (_, spec) = first_pod("proxy-override-runas.yaml");
    assert_eq!((flag(&spec, "-u").as_deref(), flag(&spec, "-g").as_deref()), (Some("1234"), Some("4321")));
}

#[test]
fn application_probes_go_through_the_agent_unless_the_pod_says_not_to() {
    let (_, spec) = first_pod("hello-probes.yaml");
    let hello = container(&spec, "containers", "hello").unwrap();
    assert_eq!(hello["livenessProbe"]["httpGet"]["path"].as_str(), Some("/app-health/hello/livez"));
    assert_eq!(hello["livenessProbe"]["httpGet"]["port"].as_i64(), Some(15020));
    assert_eq!(hello["lifecycle"]["postStart"]["httpGet"]["path"].as_str(), Some("/app-lifecycle/hello/poststartz"));
    assert!(hello["lifecycle"]["postStart"].get("tcpSocket").is_none());
    let proxy = container(&spec, "containers", "istio-proxy").unwrap();
    assert_eq!(
        env(proxy, "ISTIO_KUBE_APP_PROBERS"),
        Some(
            "{\"/app-health/hello/livez\":{\"httpGet\":{\"port\":80}},\"/app-health/hello/readyz\":{\"httpGet\":{\"port\":3333}},\
             \"/app-health/world/livez\":{\"httpGet\":{\"port\":90}},\"/app-lifecycle/hello/poststartz\":{\"tcpSocket\":{\"port\":93}},\
             \"/app-lifecycle/hello/prestopz\":{\"httpGet\":{\"port\":91}}}"
        )
    );
    let (_, spec) = first_pod("https-probes.yaml");
    let proxy = container(&spec, "containers", "istio-proxy").unwrap();
    assert!(env(proxy, "ISTIO_KUBE_APP_PROBERS").unwrap().contains("\"port\":3333,\"scheme\":\"HTTPS\""));
    let (_, spec) = first_pod("hello-probes-with-flag-unset-in-annotation.yaml");
    let hello = container(&spec, "containers", "hello").unwrap();
    assert_ne!(hello["livenessProbe"]["httpGet"]["port"].as_i64(), Some(15020), "rewriteAppHTTPProbers: false");
    assert!(env(container(&spec, "containers", "istio-proxy").unwrap(), "ISTIO_KUBE_APP_PROBERS").is_none());
}

#[test]
fn hold_native_sidecars_image_and_gateway_templates_are_honoured() {
    let (_, spec) = first_pod("hello-probes-proxyHoldApplication-ProxyConfig.yaml");
    assert_eq!(names(&spec, "containers")[0], "istio-proxy", "held: the proxy starts first");
    let proxy = container(&spec, "containers", "istio-proxy").unwrap();
    let wait = &proxy["lifecycle"]["postStart"]["exec"]["command"];
    assert_eq!(wait.as_sequence().unwrap().len(), 2, "{wait:?}");
    assert_eq!(wait[1].as_str(), Some("wait"));
    let (_, spec) = first_pod("native-sidecar-opt-in.yaml");
    assert_eq!(names(&spec, "initContainers")[..2], ["istio-init".to_string(), "istio-proxy".into()]);
    let native = container(&spec, "initContainers", "istio-proxy").unwrap();
    assert_eq!(native["restartPolicy"].as_str(), Some("Always"));
    let drain = &native["lifecycle"]["preStop"]["exec"]["command"];
    assert_eq!((drain[1].as_str(), drain[2].as_str()), (Some("drain"), Some("--url=http://localhost:15020/drain")));
    assert!(!names(&spec, "containers").contains(&"istio-proxy".into()));
    let (_, spec) = first_pod("native-sidecar-opt-out.yaml");
    assert!(names(&spec, "containers").contains(&"istio-proxy".into()));
    let (_, spec) = first_pod("hello-proxy-override.yaml");
    let proxy = container(&spec, "containers", "istio-proxy").unwrap();
    assert_eq!(proxy["image"].as_str(), Some("registry.istio.io/release/proxy2_debug:unittest"));
    let (meta, spec) = first_pod("gateway.yaml");
    assert!(container(&spec, "initContainers", "istio-init").is_none(), "a gateway captures nothing");
    let proxy = container(&spec, "containers", "istio-proxy").unwrap();
    assert!(args(proxy)[1].starts_with("--node-id=router~"), "{:?}", args(proxy));
    assert_eq!(proxy["imagePullPolicy"].as_str(), Some("IfNotPresent"), "the pod's own settings stay");
    assert_ne!(proxy["image"].as_str(), Some("auto"));
    assert!(meta["labels"].get("security.istio.io/tlsMode").is_none());
}

#[test]
fn the_webhook_gives_every_istio_input_pod_what_meshpush_inject_gives_it() {
    use meshpush::admission::{inject, review};
    let mut compared = 0;
    for path in inputs().iter().filter(|p| !REFUSED.iter().any(|(f, _)| *f == name(p))) {
        let text = std::fs::read_to_string(path).unwrap();
        for (meta, spec) in documents(&text).iter().flat_map(pods) {
            // The pod as the API server would send it: in a namespace.
            let mut meta = meta.clone();
            if meta.get("namespace").is_none() {
                meta["namespace"] = Value::from("default");
            }
            let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec});
            let yaml = serde_yaml_ng::to_string(&pod).unwrap();
            let printed = inject_manifest(&Injector::default(), &yaml).unwrap().text;
            let printed: serde_json::Value =
                serde_yaml_ng::from_str(printed.trim_end().trim_end_matches("---")).unwrap();
            let body = serde_json::json!({
                "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
                "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                            "resource": {"group": "", "version": "v1", "resource": "pods"},
                            "namespace": pod["metadata"]["namespace"].clone(), "name": "", "operation": "CREATE",
                            "userInfo": {}, "object": pod.clone(), "dryRun": false}
            });
            let mut headers = axum::http::HeaderMap::new();
            headers.insert("content-type", "application/json".parse().unwrap());
            let request = review::read(&headers, &body.to_string().into()).map_err(|r| r.status()).unwrap();
            let response = inject::review(&Injector::default(), None, &request);
            let mut injected = serde_json::to_value(&pod).unwrap();
            if let Some(patch) = &response.patch {
                let patch: json_patch::Patch = serde_json::from_slice(patch).unwrap();
                json_patch::patch(&mut injected, &patch).unwrap();
            }
            // `creationTimestamp: null` and the like: absent and null are
            // one to Kubernetes; kube-inject prints typed objects.
            assert_eq!(without_nulls(injected), without_nulls(printed), "{}", name(path));
            compared += 1;
        }
    }
    assert!(compared >= 95, "{compared} pods compared");
}

fn without_nulls(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            map.into_iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k, without_nulls(v))).collect()
        }
        serde_json::Value::Array(items) => items.into_iter().map(without_nulls).collect(),
        other => other,
    }
}
