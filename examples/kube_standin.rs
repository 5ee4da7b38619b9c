//! The tests' stand-in Kubernetes API server (`tests/support/kube_api.rs`)
//! as a process, loaded with a mesh, to size the Kubernetes source: what
//! `meshpush serve --kubeconfig` takes to list it and keep it.
//!
//! ```text
//! cargo run --release -p loadtest -- s2 --write-mesh /tmp/s2      # the s2 mesh as YAML
//! cargo run --release --example kube_standin -- --mesh /tmp/s2 --pods --kubeconfig /tmp/s2.kubeconfig
//! target/release/meshpush serve --kubeconfig /tmp/s2.kubeconfig   # in another shell
//! ```
//!
//! `--pods` adds a Pod for each EndpointSlice endpoint, shaped as a real
//! cluster's (labels, owner reference, a container with ports, probes and
//! resources, conditions, IPs): Pods are most of what a cluster holds, and
//! the source must keep only what it needs of them. `--write-pods DIR`
//! also writes those Pods as YAML files into DIR (a file source of the same
//! objects, for comparison). `--two-clusters` spreads the mesh over two
//! stand-ins, as one mesh over two clusters: the Services, EndpointSlices
//! and Pods of about half the namespaces (by their name's bytes) go to a
//! second API server, which a remote secret in the first names (cluster
//! `remote`); the Istio objects stay in the first, the config cluster, and
//! both hold every Namespace. Runs until Ctrl-C.

#[path = "../tests/support/kube_api.rs"]
#[allow(dead_code)]
mod kube_api;

use std::path::PathBuf;

use serde::Deserialize as _;
use serde_json::{Value, json};

fn main() -> Result<(), String> {
    let mut mesh = None;
    let mut kubeconfig = None;
    let mut pods = false;
    let mut write = None;
    let mut two_clusters = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--mesh" => mesh = args.next().map(PathBuf::from),
            "--kubeconfig" => kubeconfig = args.next().map(PathBuf::from),
            "--pods" => pods = true,
            "--write-pods" => write = args.next().map(PathBuf::from),
            "--two-clusters" => two_clusters = true,
            other => return Err(format!("unknown argument {other:?}: --mesh DIR [--pods] --kubeconfig FILE")),
        }
    }
    let (Some(mesh), Some(kubeconfig)) = (mesh, kubeconfig) else {
        return Err("usage: kube_standin --mesh DIR [--pods] --kubeconfig FILE".into());
    };
    let api = kube_api::KubeApi::start();
    let remote = two_clusters.then(kube_api::KubeApi::start);
    // Where a registry object of `namespace` goes.
    let cluster_of = |namespace: &str| match &remote {
        Some(remote) if namespace.bytes().map(u32::from).sum::<u32>() % 2 == 1 => remote,
        _ => &api,
    };
    let mut files = Vec::new();
    yaml_files(&mesh, &mut files)?;
    files.sort();
    let (mut objects, mut pod_count) = (0usize, 0usize);
    let mut namespaces = std::collections::BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let object = Value::deserialize(document).map_err(|e| format!("{}: {e}", file.display()))?;
            if object.is_null() {
                continue;
            }
            if let Some(ns) = object["metadata"]["namespace"].as_str() {
                namespaces.insert(ns.to_string());
            }
            if pods && object["kind"] == "EndpointSlice" {
                let mut text = String::new();
                for endpoint in object["endpoints"].as_array().into_iter().flatten() {
                    let pod = pod_of(&object, endpoint);
                    if write.is_some() {
                        text.push_str("---\n");
                        text.push_str(&serde_yaml_ng::to_string(&pod).map_err(|e| e.to_string())?);
                    }
                    cluster_of(object["metadata"]["namespace"].as_str().unwrap_or("")).put_value(pod);
                    pod_count += 1;
                }
                if let Some(dir) = &write {
                    let name = object["metadata"]["name"].as_str().unwrap_or("slice");
                    let ns = object["metadata"]["namespace"].as_str().unwrap_or("default");
                    let file = dir.join(format!("pods-{ns}-{name}.yaml"));
                    std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))?;
                }
            }
            let registry = matches!(object["kind"].as_str(), Some("Service" | "EndpointSlice" | "Pod"));
            let namespace = object["metadata"]["namespace"].as_str().unwrap_or("").to_string();
            if registry { cluster_of(&namespace) } else { &api }.put_value(object);
            objects += 1;
        }
    }
    for ns in &namespaces {
        for api in std::iter::once(&api).chain(&remote) {
            api.put_value(json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": ns } }));
        }
    }
    if let Some(remote) = &remote {
        api.put(&kube_api::remote_secret("istio-remote-secret-remote", &[("remote", &remote.kubeconfig())]));
        remote.compact();
    }
    // The load's events need not be replayed to anyone: drop them.
    api.compact();
    std::fs::write(&kubeconfig, api.kubeconfig()).map_err(|e| format!("{}: {e}", kubeconfig.display()))?;
    eprintln!(
        "kube_standin: {} serving {objects} objects of {} files, {pod_count} Pods, {} Namespaces; kubeconfig {}",
        api.url(),
        files.len(),
        namespaces.len(),
        kubeconfig.display()
    );
    // Until interrupted.
    loop {
        std::thread::park();
    }
}

/// The Pod behind one endpoint of `slice`, as a Deployment's Pod looks.
fn pod_of(slice: &Value, endpoint: &Value) -> Value {
    let namespace = slice["metadata"]["namespace"].as_str().unwrap_or("default");
    let service = slice["metadata"]["labels"]["kubernetes.io/service-name"].as_str().unwrap_or("app");
    let name = endpoint["targetRef"]["name"].as_str().unwrap_or("pod");
    let ip = endpoint["addresses"][0].as_str().unwrap_or("10.0.0.1");
    let port = slice["ports"][0]["port"].as_u64().unwrap_or(8080);
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "generateName": format!("{service}-7d9f8b6c5d-"),
            "labels": { "app": service, "version": "v1", "pod-template-hash": "7d9f8b6c5d",
                "security.istio.io/tlsMode": "istio", "service.istio.io/canonical-name": service,
                "service.istio.io/canonical-revision": "v1" },
            "annotations": { "kubectl.kubernetes.io/default-container": "app",
                "prometheus.io/path": "/stats/prometheus", "prometheus.io/port": "15020", "prometheus.io/scrape": "true" },
            "ownerReferences": [{ "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{service}-7d9f8b6c5d"),
                "uid": "6f1c2b8e-0000-4000-8000-000000000000", "controller": true, "blockOwnerDeletion": true }],
            "creationTimestamp": "2026-11-30T12:00:00Z",
        },
        "spec": {
            "serviceAccountName": service,
            "nodeName": "node-1",
            "containers": [{
                "name": "app",
                "image": format!("registry.example.com/{service}:1.0.0"),
                "ports": [{ "name": "http", "containerPort": port, "protocol": "TCP" }],
                "env": [{ "name": "LOG_LEVEL", "value": "info" }, { "name": "POD_NAME",
                    "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } }],
                "resources": { "requests": { "cpu": "100m", "memory": "128Mi" }, "limits": { "memory": "256Mi" } },
                "readinessProbe": { "httpGet": { "path": "/healthz", "port": port }, "periodSeconds": 5 },
                "livenessProbe": { "httpGet": { "path": "/healthz", "port": port }, "periodSeconds": 10 },
                "volumeMounts": [{ "name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true }],
            }],
            "volumes": [{ "name": "kube-api-access", "projected": { "sources": [{ "serviceAccountToken": { "path": "token", "expirationSeconds": 3607 } }] } }],
            "tolerations": [{ "key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300 }],
        },
        "status": {
            "phase": "Running",
            "podIP": ip,
            "podIPs": [{ "ip": ip }],
            "hostIP": "192.168.0.10",
            "qosClass": "Burstable",
            "startTime": "2026-11-30T12:00:01Z",
            "conditions": [
                { "type": "Initialized", "status": "True" }, { "type": "Ready", "status": "True" },
                { "type": "ContainersReady", "status": "True" }, { "type": "PodScheduled", "status": "True" }
            ],
            "containerStatuses": [{ "name": "app", "ready": true, "restartCount": 0, "started": true,
                "image": format!("registry.example.com/{service}:1.0.0"), "imageID": "sha256:0000",
                "containerID": "containerd://0000", "state": { "running": { "startedAt": "2026-11-30T12:00:02Z" } } }],
        },
    })
}

/// The `*.yaml` files under `dir`, its subdirectories included (the
/// loadtest writes a directory per namespace).
fn yaml_files(dir: &std::path::Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        if path.is_dir() {
            yaml_files(&path, out)?;
        } else if path.extension().is_some_and(|x| x == "yaml") {
            out.push(path);
        }
    }
    Ok(())
}
