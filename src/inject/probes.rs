//! Application probes through the agent, as Istio's injector rewrites them
//! (`pkg/kube/inject/app_probe.go`): with mTLS the kubelet cannot reach the
//! application's own port, so each HTTP, TCP and gRPC probe (readiness,
//! liveness, startup) and each HTTP or TCP lifecycle hook of every
//! container but the proxy becomes an HTTP GET of the agent's status port,
//! `/app-health/CONTAINER/readyz|livez|startupz` or
//! `/app-lifecycle/CONTAINER/poststartz|prestopz`. The originals go to the
//! agent as `ISTIO_KUBE_APP_PROBERS`, a JSON object from each path to its
//! action (`httpGet`, `tcpSocket` or `grpc`, the port a number) and its
//! `timeoutSeconds`; the agent probes them in the pod for the kubelet.
//!
//! Invariants: a probe already on the status port is not rewritten again,
//! and the probers an earlier injection recorded win over this one's (they
//! are the application's originals), so re-injection keeps them. A probe
//! whose named port the container does not declare is left as it is, with
//! a warning.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, LifecycleHandler, PodSpec, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use super::InjectError;
use super::sidecar::Plan;

/// The agent's environment variable holding the original probes.
pub const APP_PROBERS_ENV: &str = "ISTIO_KUBE_APP_PROBERS";

/// Rewrites the pod's probes for `plan`, and returns the agent's
/// `ISTIO_KUBE_APP_PROBERS` (none when no probe was rewritten).
pub fn rewrite(
    spec: &mut PodSpec,
    plan: &Plan,
    previous: Option<&str>,
    warnings: &mut Vec<String>,
) -> Result<Option<String>, InjectError> {
    let mut probers: BTreeMap<String, Value> = BTreeMap::new();
    if plan.rewrite_probes {
        let containers = spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten());
        for container in containers.filter(|c| c.name != super::PROXY_CONTAINER) {
            rewrite_container(container, plan.status_port, &mut probers, warnings);
        }
    }
    if let Some(text) = previous {
        let earlier: BTreeMap<String, Value> = serde_json::from_str(text).map_err(|e| {
            InjectError::Pod(format!("the injected proxy's {APP_PROBERS_ENV} is not a JSON object of probes: {e}"))
        })?;
        probers.extend(earlier);
    }
    Ok((!probers.is_empty()).then(|| serde_json::to_string(&probers).expect("probers serialize")))
}

fn rewrite_container(
    container: &mut Container,
    status_port: u16,
    probers: &mut BTreeMap<String, Value>,
    warnings: &mut Vec<String>,
) {
    let ports: BTreeMap<String, i32> =
        container.ports.iter().flatten().filter_map(|p| Some((p.name.clone()?, p.container_port))).collect();
    let name = container.name.clone();
    let slots = [
        (&mut container.readiness_probe, "readyz"),
        (&mut container.liveness_probe, "livez"),
        (&mut container.startup_probe, "startupz"),
    ];
    for (slot, suffix) in slots {
        let Some(probe) = slot.as_mut() else { continue };
        let path = format!("/app-health/{name}/{suffix}");
        let timeout = probe.timeout_seconds.filter(|t| *t > 0);
        match original(probe_action(probe), &ports, status_port) {
            Ok(Some(action)) => {
                probers.insert(path.clone(), with_timeout(action, timeout));
                redirect_probe(probe, path, status_port);
            }
            Ok(None) => {}
            Err(port) => warnings.push(unresolved(&name, suffix, &port)),
        }
    }
    let Some(lifecycle) = container.lifecycle.as_mut() else { return };
    for (slot, suffix) in [(&mut lifecycle.post_start, "poststartz"), (&mut lifecycle.pre_stop, "prestopz")] {
        let Some(handler) = slot.as_mut() else { continue };
        let path = format!("/app-lifecycle/{name}/{suffix}");
        let action =
            Action { http: handler.http_get.as_ref(), tcp: handler.tcp_socket.as_ref().map(|t| &t.port), grpc: None };
        match original(action, &ports, status_port) {
            Ok(Some(action)) => {
                probers.insert(path.clone(), action);
                redirect_handler(handler, path, status_port);
            }
            Ok(None) => {}
            Err(port) => warnings.push(unresolved(&name, suffix, &port)),
        }
    }
}

fn unresolved(container: &str, what: &str, port: &str) -> String {
    format!("container {container}: its {what} probe names port {port:?}, which it does not declare: left as it is")
}

/// A probe's or hook's action, by kind.
struct Action<'a> {
    http: Option<&'a HTTPGetAction>,
    tcp: Option<&'a IntOrString>,
    grpc: Option<(i32, Option<&'a String>)>,
}

fn probe_action(probe: &Probe) -> Action<'_> {
    Action {
        http: probe.http_get.as_ref(),
        tcp: probe.tcp_socket.as_ref().map(|t| &t.port),
        grpc: probe.grpc.as_ref().map(|g| (g.port, g.service.as_ref())),
    }
}

/// The action as the agent is told it (its port a number); `None` when
/// there is nothing to rewrite (an `exec` probe, or one already on the
/// status port); the port's name when the container does not declare it.
fn original(action: Action<'_>, ports: &BTreeMap<String, i32>, status_port: u16) -> Result<Option<Value>, String> {
    let resolve = |port: &IntOrString| match port {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(name) => match ports.get(name) {
            Some(n) => Ok(*n),
            None => name.parse::<i32>().map_err(|_| name.clone()),
        },
    };
    if let Some(http) = action.http {
        let port = resolve(&http.port)?;
        if port == i32::from(status_port) {
            return Ok(None);
        }
        let mut http = http.clone();
        http.port = IntOrString::Int(port);
        return Ok(Some(json!({ "httpGet": http })));
    }
    if let Some(port) = action.tcp {
        let port = resolve(port)?;
        return Ok((port != i32::from(status_port)).then(|| json!({ "tcpSocket": { "port": port } })));
    }
    if let Some((port, service)) = action.grpc {
        let mut grpc = json!({ "port": port });
        if let Some(service) = service {
            grpc["service"] = json!(service);
        }
        return Ok(Some(json!({ "grpc": grpc })));
    }
    Ok(None)
}

fn with_timeout(mut action: Value, timeout: Option<i32>) -> Value {
    if let Some(t) = timeout {
        action["timeoutSeconds"] = json!(t);
    }
    action
}

/// The agent's endpoint for a probe, keeping the kubelet's headers and
/// host (the agent passes them on); TLS is the agent's to speak.
fn agent_get(path: String, status_port: u16, from: Option<&HTTPGetAction>) -> HTTPGetAction {
    HTTPGetAction {
        path: Some(path),
        port: IntOrString::Int(i32::from(status_port)),
        scheme: from.and_then(|h| h.scheme.as_ref()).map(|_| "HTTP".to_string()),
        host: from.and_then(|h| h.host.clone()),
        http_headers: from.and_then(|h| h.http_headers.clone()),
    }
}

fn redirect_probe(probe: &mut Probe, path: String, status_port: u16) {
    probe.http_get = Some(agent_get(path, status_port, probe.http_get.as_ref()));
    probe.tcp_socket = None;
    probe.grpc = None;
}

fn redirect_handler(handler: &mut LifecycleHandler, path: String, status_port: u16) {
    handler.http_get = Some(agent_get(path, status_port, handler.http_get.as_ref()));
    handler.tcp_socket = None;
}
