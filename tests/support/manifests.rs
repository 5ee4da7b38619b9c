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

/// The waypoint `waypoint` of namespace `demo` as istiod would deploy it:
/// its Gateway (class `istio-waypoint`, the HBONE listener istioctl
/// writes), the Service of its name (VIP `vip`), and its Pod at `ip` on
/// `node`, labelled as Istio's waypoint template labels it.
pub fn demo_waypoint(vip: &str, ip: &str, node: &str) -> String {
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: waypoint, namespace: demo}}
spec:
  gatewayClassName: istio-waypoint
  listeners: [{{name: mesh, port: 15008, protocol: HBONE}}]
---
apiVersion: v1
kind: Service
metadata: {{name: waypoint, namespace: demo, labels: {{gateway.istio.io/managed: istio.io-mesh-controller}}}}
spec:
  clusterIP: {vip}
  selector: {{gateway.networking.k8s.io/gateway-name: waypoint}}
  ports: [{{name: mesh, port: 15008}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: waypoint-0
  namespace: demo
  labels: {{gateway.networking.k8s.io/gateway-name: waypoint, gateway.istio.io/managed: istio.io-mesh-controller}}
spec: {{serviceAccountName: waypoint, nodeName: {node}}}
status: {{phase: Running, podIP: {ip}, conditions: [{{type: Ready, status: "True"}}]}}
"#
    )
}

/// What a waypoint applies for the Service `server` of `demo`: an
/// HTTPRoute (the Service as its parent) that adds `x-through: waypoint`,
/// and an AuthorizationPolicy (its `targetRefs` the Service) that denies
/// paths under `/admin`.
pub const DEMO_WAYPOINT_RULES: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: server, namespace: demo}
spec:
  parentRefs: [{group: "", kind: Service, name: server, port: 80}]
  rules:
  - filters: [{type: RequestHeaderModifier, requestHeaderModifier: {add: [{name: x-through, value: waypoint}]}}]
    backendRefs: [{name: server, port: 80}]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: no-admin, namespace: demo}
spec:
  targetRefs: [{kind: Service, group: "", name: server}]
  action: DENY
  rules: [{to: [{operation: {paths: ["/admin*"]}}]}]
"#;

/// The node id of the waypoint Pod `waypoint-0` of `demo` at `ip`.
pub fn demo_waypoint_node(ip: &str) -> String {
    format!("waypoint~{ip}~waypoint-0.demo~demo.svc.cluster.local")
}

/// The labels Istio's waypoint template gives the pods of waypoint
/// `waypoint`, as `meshpush agent --label` flags.
pub fn waypoint_label_flags() -> Vec<String> {
    ["gateway.networking.k8s.io/gateway-name=waypoint", "gateway.istio.io/managed=istio.io-mesh-controller"]
        .iter()
        .flat_map(|l| ["--label".to_string(), l.to_string()])
        .collect()
}
