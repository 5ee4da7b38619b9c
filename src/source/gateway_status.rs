//! `GatewayStatusWriter`: writes the status meshpush computes for the
//! Kubernetes routing APIs into the objects' `status` in Kubernetes, as
//! istiod's status controllers do: the Gateway API's conditions, and the
//! addresses of each Ingress it serves (`status.loadBalancer`).
//!
//! Role in the data flow: it follows the engine's published snapshots (as
//! the JWKS fetcher does) and, for each GatewayClass, Gateway, route and
//! Ingress whose computed status differs from what is on the object,
//! patches the object's `status` subresource. It only runs when meshpush
//! reads a Kubernetes cluster.
//!
//! Rules:
//! * A GatewayClass's and a Gateway's status is meshpush's alone (it serves
//!   their class). A route's `status.parents` is shared with other
//!   controllers: only the entries whose `controllerName` is Istio's are
//!   replaced, the others are kept.
//! * A condition keeps its `lastTransitionTime` while its status does not
//!   change; `observedGeneration` is the object's generation when read.
//! * Nothing is written when the object already says what meshpush would
//!   write (times aside): replicas computing the same status from the same
//!   objects do not fight, and need no leader.
//! * The patch carries the resource version read, so a write that raced
//!   another is refused by the API server and retried on the next round.
//!
//! Invariant: what is written is a function of the published snapshot and
//! of the object as read; a failed write is retried (after 5 s) until the
//! object says it or the snapshot no longer computes it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::config::k8s::LoadBalancerIngress;
use crate::config::{ConfigKey, ConfigKind, gateway_api};
use crate::engine::PushEngine;
use crate::push::index::gateway_api::ObjectStatus;
use crate::text::Shown;

/// How long a failed write waits before the next attempt.
const RETRY: Duration = Duration::from_secs(5);

/// Writes the Gateway API status of each published snapshot.
pub struct GatewayStatusWriter {
    engine: Arc<PushEngine>,
    client: kube::Client,
    resources: BTreeMap<ConfigKind, ApiResource>,
    /// What was last written (or found already written), by object, with
    /// the store revision of the object it was written for: an object read
    /// again (a spec edit moves its generation) is checked again even when
    /// its status did not change, so `observedGeneration` follows.
    written: BTreeMap<ConfigKey, (ObjectStatus, u64)>,
    /// The same for Ingresses: the addresses last written.
    written_ingress: BTreeMap<ConfigKey, Vec<LoadBalancerIngress>>,
}

impl GatewayStatusWriter {
    /// A writer for the kinds of `resources` the API server serves.
    pub fn new(engine: Arc<PushEngine>, client: kube::Client, resources: &[(ConfigKind, ApiResource)]) -> Self {
        let resources = resources
            .iter()
            .filter(|(k, _)| {
                matches!(k, ConfigKind::GatewayClass | ConfigKind::KubernetesGateway | ConfigKind::Ingress)
                    || k.is_gateway_api_route()
            })
            .cloned()
            .collect();
        GatewayStatusWriter { engine, client, resources, written: BTreeMap::new(), written_ingress: BTreeMap::new() }
    }

    /// Writes what each snapshot computes, until the engine goes away.
    pub async fn run(mut self) {
        let mut versions = self.engine.versions();
        loop {
            let complete = self.reconcile().await;
            let retry =
                async { if complete { std::future::pending::<()>().await } else { tokio::time::sleep(RETRY).await } };
            tokio::select! {
                changed = versions.changed() => if changed.is_err() { return },
                () = retry => {}
            }
        }
    }

    /// Writes every status that differs from the last written; true when
    /// every write succeeded.
    async fn reconcile(&mut self) -> bool {
        let ctx = self.engine.snapshot();
        let wanted = &ctx.gateway_api.status;
        let mut complete = true;
        // A route that no longer has a parent meshpush serves loses its entries.
        let gone: Vec<ConfigKey> = self
            .written
            .keys()
            .filter(|k| k.kind.is_gateway_api_route() && !wanted.contains_key(*k))
            .filter(|k| ctx.store.get(k).is_some())
            .cloned()
            .collect();
        for key in gone {
            let empty = ObjectStatus::Route { parents: Vec::new() };
            match self.write(&key, &empty).await {
                Ok(()) => {
                    self.written.remove(&key);
                }
                Err(e) => {
                    complete = false;
                    tracing::warn!(object = %key, "writing the Gateway API status: {}", Shown(&e));
                }
            }
        }
        self.written.retain(|k, _| wanted.contains_key(k));
        for (key, status) in wanted {
            let revision = ctx.store.get(key).map_or(0, |s| s.revision);
            let done = self.written.get(key).is_some_and(|(s, r)| s == status && *r == revision);
            if done || !self.resources.contains_key(&key.kind) {
                continue;
            }
            match self.write(key, status).await {
                Ok(()) => {
                    self.written.insert(key.clone(), (status.clone(), revision));
                }
                Err(e) => {
                    complete = false;
                    tracing::warn!(object = %key, "writing the Gateway API status: {}", Shown(&e));
                }
            }
        }
        self.written_ingress.retain(|k, _| ctx.ingress.status.contains_key(k));
        if self.resources.contains_key(&ConfigKind::Ingress) {
            for (key, addresses) in &ctx.ingress.status {
                if self.written_ingress.get(key) == Some(addresses) {
                    continue;
                }
                match self.patch(key, |current, _, _| ingress_status(addresses, current)).await {
                    Ok(()) => {
                        self.written_ingress.insert(key.clone(), addresses.clone());
                    }
                    Err(e) => {
                        complete = false;
                        tracing::warn!(object = %key, "writing the Ingress status: {}", Shown(&e));
                    }
                }
            }
        }
        complete
    }

    /// Reads the object and patches its status to say `status`, unless it does.
    async fn write(&self, key: &ConfigKey, status: &ObjectStatus) -> Result<(), String> {
        self.patch(key, |current, generation, now| render(status, current, generation, now)).await
    }

    /// Reads the object and patches its status to what `desired` makes of
    /// the current status (and the object's generation, and the time now),
    /// unless it says that already.
    async fn patch(&self, key: &ConfigKey, desired: impl Fn(&Value, i64, &str) -> Value) -> Result<(), String> {
        let resource = self.resources.get(&key.kind).ok_or("the API server does not serve the kind")?;
        let api: Api<DynamicObject> = if key.namespace.is_empty() {
            Api::all_with(self.client.clone(), resource)
        } else {
            Api::namespaced_with(self.client.clone(), &key.namespace, resource)
        };
        let Some(object) = api.get_opt(&key.name).await.map_err(|e| e.to_string())? else {
            // Deleted meanwhile: the next snapshot drops it.
            return Ok(());
        };
        let current = object.data.get("status").cloned().unwrap_or(Value::Null);
        let generation = object.metadata.generation.unwrap_or(0);
        let now = now_rfc3339();
        let desired = desired(&current, generation, &now);
        if without_times(&desired) == without_times(&current) {
            return Ok(());
        }
        let patch = json!({
            "metadata": { "resourceVersion": object.metadata.resource_version },
            "status": desired,
        });
        api.patch_status(&key.name, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(|e| e.to_string())?;
        tracing::debug!(object = %key, "wrote the status");
        Ok(())
    }
}

/// An Ingress's `status` saying `addresses` as its load balancer's (the
/// rest of `current` kept).
fn ingress_status(addresses: &[LoadBalancerIngress], current: &Value) -> Value {
    let mut out = if current.is_object() { current.clone() } else { json!({}) };
    out["loadBalancer"] = if addresses.is_empty() { json!({}) } else { json!({ "ingress": addresses }) };
    out
}

/// The `status` to write: `status` rendered as the API writes it, each
/// condition stamped with `generation` and a transition time (kept from
/// `current` while the condition's status is unchanged); a route's parents
/// of other controllers kept from `current`.
pub fn render(status: &ObjectStatus, current: &Value, generation: i64, now: &str) -> Value {
    let conditions = |ours: &[crate::push::index::gateway_api::Condition], theirs: &Value| -> Value {
        Value::Array(
            ours.iter()
                .map(|c| {
                    let previous = theirs.as_array().into_iter().flatten().find(|p| p["type"] == c.kind);
                    let since = previous
                        .filter(|p| p["status"] == c.status)
                        .and_then(|p| p["lastTransitionTime"].as_str())
                        .unwrap_or(now);
                    json!({
                        "type": c.kind,
                        "status": c.status,
                        "reason": c.reason,
                        "message": c.message,
                        "observedGeneration": generation,
                        "lastTransitionTime": since,
                    })
                })
                .collect(),
        )
    };
    match status {
        ObjectStatus::GatewayClass { conditions: ours } => {
            json!({ "conditions": conditions(ours, &current["conditions"]) })
        }
        ObjectStatus::Gateway { addresses, conditions: ours, listeners } => {
            let listeners: Vec<Value> = listeners
                .iter()
                .map(|l| {
                    let previous = current["listeners"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find(|p| p["name"] == l.name.as_str())
                        .map(|p| p["conditions"].clone())
                        .unwrap_or(Value::Null);
                    json!({
                        "name": l.name,
                        "attachedRoutes": l.attached_routes,
                        "supportedKinds": l.supported_kinds,
                        "conditions": conditions(&l.conditions, &previous),
                    })
                })
                .collect();
            let addresses: Vec<Value> = addresses
                .iter()
                .map(|a| json!({ "type": a.kind.as_deref().unwrap_or("IPAddress"), "value": a.value }))
                .collect();
            json!({
                "addresses": addresses,
                "conditions": conditions(ours, &current["conditions"]),
                "listeners": listeners,
            })
        }
        ObjectStatus::Route { parents } => {
            let current_parents = current["parents"].as_array().cloned().unwrap_or_default();
            let mut out: Vec<Value> = current_parents
                .iter()
                .filter(|p| p["controllerName"] != gateway_api::ISTIO_CONTROLLER)
                .cloned()
                .collect();
            for p in parents {
                let reference = serde_json::to_value(&p.parent_ref).unwrap_or(Value::Null);
                let previous = current_parents
                    .iter()
                    .find(|c| {
                        c["controllerName"] == gateway_api::ISTIO_CONTROLLER && same_ref(&c["parentRef"], &reference)
                    })
                    .map(|c| c["conditions"].clone())
                    .unwrap_or(Value::Null);
                out.push(json!({
                    "parentRef": strip_nulls(reference),
                    "controllerName": p.controller_name,
                    "conditions": conditions(&p.conditions, &previous),
                }));
            }
            json!({ "parents": out })
        }
    }
}

/// Whether two parent references name the same parent (absent fields and
/// nulls alike).
fn same_ref(a: &Value, b: &Value) -> bool {
    strip_nulls(a.clone()) == strip_nulls(b.clone())
}

/// `value` without null members (the API server drops them).
fn strip_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.into_iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k, strip_nulls(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(strip_nulls).collect()),
        other => other,
    }
}

/// `status` without transition times, to compare what it says.
fn without_times(status: &Value) -> Value {
    match status {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| *k != "lastTransitionTime")
                .map(|(k, v)| (k.clone(), without_times(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_times).collect()),
        other => other.clone(),
    }
}

/// The current time as Kubernetes writes it (`2026-12-03T08:00:00Z`).
pub(super) fn now_rfc3339() -> String {
    let t = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::gateway_api::ParentReference;
    use crate::push::index::gateway_api::{Condition, RouteParentStatus};

    fn accepted(ok: bool) -> Condition {
        Condition {
            kind: "Accepted",
            status: if ok { "True" } else { "False" },
            reason: if ok { "Accepted" } else { "NotAllowedByListeners" },
            message: "m".into(),
        }
    }

    fn route(ok: bool) -> ObjectStatus {
        ObjectStatus::Route {
            parents: vec![RouteParentStatus {
                parent_ref: ParentReference { name: "edge".into(), ..Default::default() },
                controller_name: gateway_api::ISTIO_CONTROLLER,
                conditions: vec![accepted(ok)],
            }],
        }
    }

    #[test]
    fn a_route_keeps_other_controllers_parents_and_unchanged_transition_times() {
        let current = json!({"parents": [
            {"parentRef": {"name": "theirs"}, "controllerName": "example.com/other", "conditions": []},
            {"parentRef": {"name": "edge"}, "controllerName": gateway_api::ISTIO_CONTROLLER, "conditions": [
                {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "m",
                 "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        ]});
        let same = render(&route(true), &current, 1, "2026-12-03T00:00:00Z");
        assert_eq!(without_times(&same), without_times(&current));
        assert_eq!(same["parents"][1]["conditions"][0]["lastTransitionTime"], "2026-01-01T00:00:00Z");
        let changed = render(&route(false), &current, 2, "2026-12-03T00:00:00Z");
        assert_eq!(changed["parents"][0]["controllerName"], "example.com/other");
        let ours = &changed["parents"][1]["conditions"][0];
        assert_eq!(
            (ours["status"].as_str(), ours["lastTransitionTime"].as_str()),
            (Some("False"), Some("2026-12-03T00:00:00Z"))
        );
        assert_eq!(ours["observedGeneration"], 2);
    }

    #[test]
    fn the_time_is_written_as_kubernetes_writes_it() {
        let now = now_rfc3339();
        assert_eq!(now.len(), 20, "{now}");
        assert!(now.ends_with('Z') && now.as_bytes()[10] == b'T', "{now}");
    }
}
