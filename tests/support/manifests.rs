//! Kubernetes and Istio manifests for scenario meshes, as YAML text.
//!
//! Each function renders one object the way a user writes it; [`docs`] joins
//! objects into one multi-document file. Services select workloads by the
//! `app` label and name their port `http` (so meshpush treats it as HTTP),
//! targeting the same port number on the workload.

/// Joins YAML documents into one file.
pub fn docs(parts: &[String]) -> String {
    parts.join("---\n")
}

fn labels_yaml(labels: &[(&str, &str)], indent: &str) -> String {
    labels.iter().map(|(k, v)| format!("{indent}{k}: {v}\n")).collect()
}

/// A Service `name` in `namespace` selecting `app: NAME`, HTTP on `port`.
pub fn service(namespace: &str, name: &str, port: u16) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  selector:\n    app: {name}\n  ports:\n  - name: http\n    port: {port}\n    targetPort: {port}\n"
    )
}

/// A running Pod `name` at `ip` with `labels`, listening on `port`.
pub fn pod(namespace: &str, name: &str, ip: &str, labels: &[(&str, &str)], port: u16) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\n  labels:\n{}spec:\n  containers:\n  - name: app\n    ports:\n    - name: http\n      containerPort: {port}\nstatus:\n  phase: Running\n  podIP: {ip}\n",
        labels_yaml(labels, "    ")
    )
}

/// A WorkloadEntry `name` (a VM, say) at `ip` with `labels`.
pub fn workload_entry(namespace: &str, name: &str, ip: &str, labels: &[(&str, &str)]) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  address: {ip}\n  labels:\n{}",
        labels_yaml(labels, "    ")
    )
}

/// A DestinationRule for `host` with one subset per `version` label value.
pub fn subsets(namespace: &str, host: &str, versions: &[&str]) -> String {
    let subsets: String =
        versions.iter().map(|v| format!("  - name: {v}\n    labels:\n      version: {v}\n")).collect();
    format!(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: {host}\n  namespace: {namespace}\nspec:\n  host: {host}\n  trafficPolicy:\n    loadBalancer:\n      simple: ROUND_ROBIN\n  subsets:\n{subsets}"
    )
}

/// A VirtualService `name` for `host` splitting traffic over subsets by weight.
pub fn weighted(namespace: &str, name: &str, host: &str, weights: &[(&str, i64)]) -> String {
    let route: String = weights
        .iter()
        .map(|(subset, w)| {
            format!("    - destination:\n        host: {host}\n        subset: {subset}\n      weight: {w}\n")
        })
        .collect();
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  hosts:\n  - {host}\n  http:\n  - route:\n{route}"
    )
}

/// A Sidecar for the workloads labelled `app: APP` (every workload of the
/// namespace when `None`) whose one egress listener sees `hosts` and binds
/// `bind` when given.
pub fn sidecar(namespace: &str, name: &str, app: Option<&str>, hosts: &[&str], bind: Option<&str>) -> String {
    let selector = app.map(|a| format!("  workloadSelector:\n    labels:\n      app: {a}\n")).unwrap_or_default();
    let bind = bind.map(|b| format!("    bind: {b}\n")).unwrap_or_default();
    let hosts: String = hosts.iter().map(|h| format!("    - \"{h}\"\n")).collect();
    format!(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n{selector}  egress:\n  - hosts:\n{hosts}{bind}"
    )
}

/// A Gateway `name` for routers labelled `istio: ISTIO` serving `hosts` over
/// HTTP on `port`, bound to 127.0.0.1 (tests listen on loopback only).
pub fn gateway(namespace: &str, name: &str, istio: &str, port: u16, hosts: &[&str]) -> String {
    let hosts: String = hosts.iter().map(|h| format!("    - \"{h}\"\n")).collect();
    format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  selector:\n    istio: {istio}\n  servers:\n  - port:\n      number: {port}\n      name: http\n      protocol: HTTP\n    bind: 127.0.0.1\n    hosts:\n{hosts}"
    )
}

/// A VirtualService `name` bound to `gateway` (`namespace/name`) sending
/// everything for `host` to `destination` on `port`.
pub fn gateway_route(namespace: &str, name: &str, gateway: &str, host: &str, destination: &str, port: u16) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  hosts:\n  - {host}\n  gateways:\n  - {gateway}\n  http:\n  - route:\n    - destination:\n        host: {destination}\n        port:\n          number: {port}\n"
    )
}

/// The Istio node id of a sidecar for pod `pod` at `ip` in `namespace`.
pub fn sidecar_node(ip: &str, pod: &str, namespace: &str) -> String {
    format!("sidecar~{ip}~{pod}.{namespace}~{namespace}.svc.cluster.local")
}

/// The Istio node id of a gateway (router) pod `pod` in `namespace`.
pub fn router_node(ip: &str, pod: &str, namespace: &str) -> String {
    format!("router~{ip}~{pod}.{namespace}~{namespace}.svc.cluster.local")
}
