//! Checks for `telemetry.istio.io` Telemetry, following Istio's validation
//! (`ValidateTelemetry`): what its webhook refuses is an Error here; what
//! meshpush cannot serve is reported with what happens instead.

use super::Checker;
use crate::config::istio::{METRICS, Telemetry, WORKLOAD_MODES};
use crate::config::mesh::providers::METRICS_INSTEAD;

pub(super) fn telemetry(check: &mut Checker, telemetry: &Telemetry) {
    let spec = &telemetry.spec;
    let targets = spec.target_ref.is_some() || !spec.target_refs.is_empty();
    if targets && spec.selector.is_some() {
        check.error("spec.selector", "cannot be set with targetRef or targetRefs (Istio refuses this too)");
    }
    if spec.target_refs.len() > 16 {
        check.error("spec.targetRefs", "has more than 16 entries (Istio refuses this too)");
    }
    let refs = spec.target_ref.iter().map(|r| ("spec.targetRef".to_string(), r));
    let refs = refs.chain(spec.target_refs.iter().enumerate().map(|(i, r)| (format!("spec.targetRefs[{i}]"), r)));
    for (path, target) in refs {
        if target.kind != "Gateway" || target.group.as_deref() != Some(crate::config::gateway_api::GROUP) {
            check.unsupported(
                &path,
                Some(&format!(
                    "a {} target selects waypoints, which meshpush does not run: the policy applies to no workload",
                    target.kind
                )),
            );
        }
    }
    for (i, tracing) in spec.tracing.iter().enumerate() {
        let path = format!("spec.tracing[{i}]");
        mode(check, &format!("{path}.match.mode"), tracing.match_.as_ref().and_then(|m| m.mode.as_deref()));
        providers(check, &path, tracing.providers.iter().map(|p| p.name.as_str()));
        if tracing.providers.len() > 1 {
            check.warning(format!("{path}.providers"), "names several tracers: only the first is used, as in Istio");
        }
        if let Some(p) = tracing.random_sampling_percentage
            && !(0.0..=100.0).contains(&p)
        {
            check.error(format!("{path}.randomSamplingPercentage"), format!("{p} is not between 0 and 100"));
        }
        for (name, tag) in &tracing.custom_tags {
            let tag_path = format!("{path}.customTags.{name}");
            if name.is_empty() {
                check.error(&tag_path, "has no name");
            }
            let kinds =
                [tag.literal.is_some(), tag.environment.is_some(), tag.header.is_some(), tag.formatter.is_some()];
            match kinds.iter().filter(|k| **k).count() {
                1 => {}
                0 => check.error(&tag_path, "sets no value: literal, environment, header or formatter"),
                _ => check.error(&tag_path, "sets more than one of literal, environment, header and formatter"),
            }
            let empty = tag.literal.as_ref().is_some_and(|l| l.value.is_empty())
                || tag.formatter.as_ref().is_some_and(|f| f.value.is_empty())
                || tag.environment.as_ref().is_some_and(|e| e.name.is_empty())
                || tag.header.as_ref().is_some_and(|h| h.name.is_empty());
            if empty {
                check.error(&tag_path, "has an empty value or name");
            }
        }
    }
    if spec.tracing.len() > 1 {
        check.warning("spec.tracing", "has several entries: each later one overrides the earlier, as in Istio");
    }
    for (i, logging) in spec.access_logging.iter().enumerate() {
        let path = format!("spec.accessLogging[{i}]");
        mode(check, &format!("{path}.match.mode"), logging.match_.as_ref().and_then(|m| m.mode.as_deref()));
        providers(check, &path, logging.providers.iter().map(|p| p.name.as_str()));
        if let Some(filter) = &logging.filter {
            if let Err(e) = cel_parser::parse(&filter.expression) {
                let first = e.to_string();
                let first = first.lines().next().unwrap_or_default().to_string();
                check.error(format!("{path}.filter.expression"), format!("is not a CEL expression: {first}"));
            }
            if logging.providers.is_empty() {
                check.warning(
                    format!("{path}.filter"),
                    "is on an entry that names no providers: Istio never applies such a filter, and nor does meshpush",
                );
            }
        }
    }
    for (i, metrics) in spec.metrics.iter().enumerate() {
        let path = format!("spec.metrics[{i}]");
        providers(check, &path, metrics.providers.iter().map(|p| p.name.as_str()));
        for (j, o) in metrics.overrides.iter().enumerate() {
            let path = format!("{path}.overrides[{j}]");
            if let Some(m) = &o.match_ {
                if let Some(metric) = m.metric.as_deref() {
                    check.one_of(format!("{path}.match.metric"), metric, &METRICS);
                }
                if m.custom_metric.as_deref() == Some("") {
                    check.error(format!("{path}.match.customMetric"), "is empty");
                }
                mode(check, &format!("{path}.match.mode"), m.mode.as_deref());
            }
            for (tag, change) in &o.tag_overrides {
                let tag_path = format!("{path}.tagOverrides.{tag}");
                match (change.operation.as_deref().unwrap_or("UPSERT"), change.value.as_deref()) {
                    ("UPSERT", None | Some("")) => check.error(&tag_path, "is UPSERT without a value"),
                    ("REMOVE", Some(_)) => check.error(&tag_path, "is REMOVE with a value"),
                    ("UPSERT" | "REMOVE", _) => {}
                    (other, _) => check.one_of(format!("{tag_path}.operation"), other, &["UPSERT", "REMOVE"]),
                }
            }
        }
        check.unsupported(&path, Some(METRICS_INSTEAD));
    }
}

fn mode(check: &mut Checker, path: &str, mode: Option<&str>) {
    if let Some(mode) = mode {
        check.one_of(path, mode, &WORKLOAD_MODES);
    }
}

fn providers<'a>(check: &mut Checker, path: &str, names: impl Iterator<Item = &'a str>) {
    for (i, name) in names.enumerate() {
        if name.is_empty() {
            check.error(format!("{path}.providers[{i}].name"), "is empty");
        }
    }
}
