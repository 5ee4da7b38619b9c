//! meshpush's `/debug/config_dump` held against a real Envoy's own
//! `/config_dump`: for each cluster, listener, route configuration,
//! secret and extension config the Envoy holds, the JSON meshpush prints must be the JSON Envoy
//! prints, value for value (Envoy's `last_updated`, which only Envoy can
//! know, aside). This is the check that meshpush's dump is Envoy's exact
//! JSON, run in the scenarios that bring up a real Envoy.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::envoy::Envoy;
use super::meshpush::Meshpush;
use super::process::wait_until_report;

/// Where a section's resources are, and the field naming each.
struct Section {
    kind: &'static str,
    list: &'static str,
    /// The path from a list item to the resource.
    resource: &'static [&'static str],
}

const SECTIONS: [Section; 5] = [
    Section { kind: "ClustersConfigDump", list: "dynamic_active_clusters", resource: &["cluster"] },
    Section { kind: "ListenersConfigDump", list: "dynamic_listeners", resource: &["active_state", "listener"] },
    Section { kind: "RoutesConfigDump", list: "dynamic_route_configs", resource: &["route_config"] },
    Section { kind: "SecretsConfigDump", list: "dynamic_active_secrets", resource: &["secret"] },
    Section { kind: "EcdsConfigDump", list: "ecds_filters", resource: &["ecds_filter"] },
];

/// The resources of `section` in `dump`, by name.
fn resources(dump: &Value, section: &Section) -> Vec<(String, Value)> {
    let Some(config) = dump["configs"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["@type"].as_str().is_some_and(|t| t.rsplit('.').next() == Some(section.kind)))
    else {
        return Vec::new();
    };
    let mut out: Vec<(String, Value)> = config[section.list]
        .as_array()
        .into_iter()
        .flatten()
        .map(|item| {
            let resource = section.resource.iter().fold(item, |v, key| &v[*key]).clone();
            let name = resource["name"].as_str().unwrap_or_default().to_string();
            (name, resource)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The first path where `ours` and `envoys` differ.
fn first_difference(path: &str, ours: &Value, envoys: &Value) -> Option<String> {
    match (ours, envoys) {
        (Value::Object(a), Value::Object(b)) => {
            for key in a.keys().chain(b.keys()) {
                let (x, y) = (a.get(key).unwrap_or(&Value::Null), b.get(key).unwrap_or(&Value::Null));
                if let Some(d) = first_difference(&format!("{path}.{key}"), x, y) {
                    return Some(d);
                }
            }
            None
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            a.iter().zip(b).enumerate().find_map(|(i, (x, y))| first_difference(&format!("{path}[{i}]"), x, y))
        }
        _ if ours == envoys => None,
        _ => Some(format!("{path}: meshpush {ours} / Envoy {envoys}")),
    }
}

/// `Ok` when every resource `envoy` holds is printed by meshpush exactly as
/// Envoy prints it, and meshpush shows no other.
pub fn compare(ours: &Value, envoys: &Value) -> Result<(), String> {
    for section in &SECTIONS {
        let (a, b) = (resources(ours, section), resources(envoys, section));
        let names = |r: &[(String, Value)]| r.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        if names(&a) != names(&b) {
            return Err(format!("{}: meshpush shows {:?}, Envoy holds {:?}", section.kind, names(&a), names(&b)));
        }
        for ((name, x), (_, y)) in a.iter().zip(&b) {
            if let Some(d) = first_difference(name, x, y) {
                return Err(format!("{}: {d}", section.kind));
            }
        }
    }
    Ok(())
}

/// Waits (10 s) until meshpush's dump of `node` and `envoy`'s own agree,
/// resource for resource; fails naming the first difference.
pub fn assert_dump_matches_envoy(mesh: &Meshpush, envoy: &Envoy, node: &str) {
    let path = format!("/debug/config_dump?proxyID={node}");
    let last = std::cell::RefCell::new(String::new());
    wait_until_report(
        Instant::now() + Duration::from_secs(10),
        "meshpush's config_dump to print what Envoy holds exactly as Envoy prints it",
        || last.borrow().clone(),
        || {
            let ours: Value = serde_json::from_str(&mesh.admin(&path).body).map_err(|e| e.to_string())?;
            let envoys = envoy.config_dump();
            let verdict = compare(&ours, &envoys);
            if let Err(e) = &verdict {
                *last.borrow_mut() = e.clone();
            }
            verdict
        },
    );
}
