//! A workload's canonical service, as Istio reads it from its labels
//! (`pkg/kube/labels`): the name and revision telemetry, ztunnel and the
//! injector give it, and the app name a proxy's `node.cluster` is made of.
//!
//! A label that is present counts, even with an empty value, as in Istio.

use std::collections::BTreeMap;

/// The label that names a workload's canonical service.
pub const NAME_LABEL: &str = "service.istio.io/canonical-name";
/// The label that names its canonical revision.
pub const REVISION_LABEL: &str = "service.istio.io/canonical-revision";

/// Where the canonical name is read, first to last.
const NAME_LABELS: [&str; 3] = [NAME_LABEL, "app.kubernetes.io/name", "app"];
/// Where the canonical revision is read, first to last.
const REVISION_LABELS: [&str; 3] = [REVISION_LABEL, "app.kubernetes.io/version", "version"];
/// Where the app of `node.cluster` is read: Istio keeps `app` first there,
/// for the proxies that had both it and `app.kubernetes.io/name`.
const APP_LABELS: [&str; 3] = ["app", "app.kubernetes.io/name", NAME_LABEL];

fn first<'a>(labels: &'a BTreeMap<String, String>, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| labels.get(*k)).map(String::as_str)
}

/// The canonical service name: the first of its labels present, else the
/// workload's name.
pub fn name<'a>(labels: &'a BTreeMap<String, String>, workload_name: &'a str) -> &'a str {
    first(labels, &NAME_LABELS).unwrap_or(workload_name)
}

/// The canonical revision: the first of its labels present, else `latest`.
pub fn revision(labels: &BTreeMap<String, String>) -> &str {
    first(labels, &REVISION_LABELS).unwrap_or("latest")
}

/// The app of a proxy's `node.cluster` (`APP.NAMESPACE`), if a label names it.
pub fn app(labels: &BTreeMap<String, String>) -> Option<&str> {
    first(labels, &APP_LABELS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn labels_are_read_in_istio_s_order_and_a_present_one_counts_even_empty() {
        let both = labels(&[("app", "web"), ("app.kubernetes.io/name", "storefront"), ("version", "v2")]);
        assert_eq!((name(&both, "web-7d9"), revision(&both)), ("storefront", "v2"));
        assert_eq!(app(&both), Some("web"), "node.cluster keeps app first");
        let none = labels(&[]);
        assert_eq!((name(&none, "web-7d9"), revision(&none), app(&none)), ("web-7d9", "latest", None));
        let empty = labels(&[(NAME_LABEL, ""), ("app", "web")]);
        assert_eq!(name(&empty, "web-7d9"), "", "present, so it is the name");
    }
}
