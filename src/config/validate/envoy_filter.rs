//! Checks for `networking.istio.io` EnvoyFilter, following Istio's
//! `pkg/config/validation/envoyfilter` (errors refuse the object, warnings
//! are returned beside it) and its CRD's rules; each patch value is read
//! as the Envoy message its `applyTo` names, through Envoy's descriptors
//! (`envoy_api`), so a wrong field or type is named by its path.

use prost_reflect::{DynamicMessage, ReflectMessage, Value};

use super::Checker;
use crate::config::istio::envoy_filter::{ApplyTo, ConfigPatch, EnvoyFilter, Operation, PatchContext};
use crate::envoy_api::json::{self, JsonError};

/// The network filter whose HTTP filters a `subFilter` names.
pub const HTTP_CONNECTION_MANAGER: &str = "envoy.filters.network.http_connection_manager";

/// Filter names Envoy dropped, and the names Istio generates instead: a
/// match on the old name matches nothing.
const DEPRECATED_NAMES: [(&str, &str); 27] = [
    ("envoy.buffer", "envoy.filters.http.buffer"),
    ("envoy.cors", "envoy.filters.http.cors"),
    ("envoy.csrf", "envoy.filters.http.csrf"),
    ("envoy.http_dynamo_filter", "envoy.filters.http.dynamo"),
    ("envoy.ext_authz", "envoy.filters.http.ext_authz or envoy.filters.network.ext_authz"),
    ("envoy.fault", "envoy.filters.http.fault"),
    ("envoy.grpc_http1_bridge", "envoy.filters.http.grpc_http1_bridge"),
    ("envoy.grpc_json_transcoder", "envoy.filters.http.grpc_json_transcoder"),
    ("envoy.grpc_web", "envoy.filters.http.grpc_web"),
    ("envoy.gzip", "envoy.filters.http.gzip"),
    ("envoy.health_check", "envoy.filters.http.health_check"),
    ("envoy.ip_tagging", "envoy.filters.http.ip_tagging"),
    ("envoy.lua", "envoy.filters.http.lua"),
    ("envoy.rate_limit", "envoy.filters.http.ratelimit"),
    ("envoy.router", "envoy.filters.http.router"),
    ("envoy.squash", "envoy.filters.http.squash"),
    ("envoy.listener.http_inspector", "envoy.filters.listener.http_inspector"),
    ("envoy.listener.original_dst", "envoy.filters.listener.original_dst"),
    ("envoy.listener.original_src", "envoy.filters.listener.original_src"),
    ("envoy.listener.proxy_protocol", "envoy.filters.listener.proxy_protocol"),
    ("envoy.listener.tls_inspector", "envoy.filters.listener.tls_inspector"),
    ("envoy.client_ssl_auth", "envoy.filters.network.client_ssl_auth"),
    ("envoy.http_connection_manager", HTTP_CONNECTION_MANAGER),
    ("envoy.mongo_proxy", "envoy.filters.network.mongo_proxy"),
    ("envoy.ratelimit", "envoy.filters.network.ratelimit"),
    ("envoy.redis_proxy", "envoy.filters.network.redis_proxy"),
    ("envoy.tcp_proxy", "envoy.filters.network.tcp_proxy"),
];

/// The longest `proxyVersion` pattern Istio compiles; a longer one matches nothing.
pub const MAX_PROXY_VERSION_LEN: usize = 1024;

/// The name Istio generates instead of a deprecated one.
pub fn canonical_name(name: &str) -> Option<&'static str> {
    DEPRECATED_NAMES.iter().find(|(old, _)| *old == name).map(|(_, new)| *new)
}

/// What every EnvoyFilter is told, as istiod tells it.
const INTERNALS: &str = "EnvoyFilter exposes internal implementation details that may change at any time; \
check it against every upgrade of Istio or meshpush";

pub(super) fn envoy_filter(check: &mut Checker, object: &EnvoyFilter) {
    let spec = &object.spec;
    check.warning("", INTERNALS);
    if spec.workload_selector.is_some() && !spec.target_refs.is_empty() {
        check.error("spec", "only one of targetRefs or workloadSelector can be set");
    }
    if let Some(selector) = &spec.workload_selector {
        if selector.labels.is_empty() {
            check.warning(
                "spec.workloadSelector",
                "a workload selector without labels selects every workload of the namespace",
            );
        }
        for (key, value) in &selector.labels {
            if key.is_empty() {
                check.error("spec.workloadSelector.labels", "a label key must not be empty");
            } else if key.contains('*') || value.contains('*') {
                check.error(format!("spec.workloadSelector.labels.{key}"), "wildcards are not allowed in a selector");
            }
        }
    }
    if spec.target_refs.len() > 16 {
        check.error("spec.targetRefs", format!("{} references: at most 16", spec.target_refs.len()));
    }
    for (i, target) in spec.target_refs.iter().enumerate() {
        let path = format!("spec.targetRefs[{i}]");
        if target.namespace.as_deref().is_some_and(|ns| !ns.is_empty()) {
            check.error(format!("{path}.namespace"), "cross namespace referencing is not supported");
        }
        if target.kind.is_empty() || target.name.is_empty() {
            check.error(&path, "kind and name are required");
        }
    }
    for (i, patch) in spec.config_patches.iter().enumerate() {
        config_patch(check, &format!("spec.configPatches[{i}]"), patch);
    }
}

fn config_patch(check: &mut Checker, path: &str, patch: &ConfigPatch) {
    let context = patch.match_.as_ref().map(|m| m.context).unwrap_or_default();
    if let Some(m) = &patch.match_
        && m.waypoint.is_some()
        && context != PatchContext::Waypoint
    {
        check.error(format!("{path}.match.waypoint"), "a waypoint match needs context WAYPOINT");
    }
    if context == PatchContext::Waypoint {
        // Istio skips the rest of its checks for these, and generates nothing they apply to.
        check.warning(
            format!("{path}.match.context"),
            "istiod builds no configuration in context WAYPOINT (waypoints are patched as SIDECAR_INBOUND and \
             SIDECAR_OUTBOUND), so this patch applies nowhere",
        );
        return;
    }
    if patch.apply_to == ApplyTo::Invalid {
        check.error(format!("{path}.applyTo"), "missing applyTo");
        return;
    }
    let Some(body) = &patch.patch else {
        check.error(format!("{path}.patch"), "missing patch");
        return;
    };
    if body.operation == Operation::Invalid {
        check.error(format!("{path}.patch.operation"), "missing patch operation");
        return;
    }
    if body.filter_class.is_some() {
        check.warning(
            format!("{path}.patch.filterClass"),
            "ignored, as istiod ignores it: the filter goes where the operation puts it",
        );
    }
    if body.operation != Operation::Remove && body.value.is_none() {
        check.error(format!("{path}.patch.value"), "missing patch value for non-remove operation");
        return;
    }
    if let Some(proxy) = patch.match_.as_ref().and_then(|m| m.proxy.as_ref())
        && !proxy.proxy_version.is_empty()
    {
        if proxy.proxy_version.len() > MAX_PROXY_VERSION_LEN {
            check.warning(
                format!("{path}.match.proxy.proxyVersion"),
                format!("longer than {MAX_PROXY_VERSION_LEN} characters: it matches no proxy"),
            );
        } else if let Err(e) = regex::Regex::new(&proxy.proxy_version) {
            check.error(format!("{path}.match.proxy.proxyVersion"), format!("invalid regex for proxy version: {e}"));
        }
    }
    object_match(check, path, patch);
    if let Some(why) = does_nothing(patch, body.operation) {
        check.warning(format!("{path}.patch.operation"), why);
    }
    if let Some(value) = &body.value {
        patch_value(check, &format!("{path}.patch.value"), patch.apply_to, body.operation, value);
    }
}

/// The match object must fit the kind patched.
fn object_match(check: &mut Checker, path: &str, patch: &ConfigPatch) {
    let Some(m) = &patch.match_ else { return };
    let has_other = |listener: bool, route: bool, cluster: bool| {
        (!listener && m.listener.is_some())
            || (!route && m.route_configuration.is_some())
            || (!cluster && m.cluster.is_some())
            || m.waypoint.is_some()
    };
    match patch.apply_to {
        ApplyTo::Listener | ApplyTo::FilterChain | ApplyTo::NetworkFilter | ApplyTo::HttpFilter => {
            if has_other(true, false, false) {
                check.error(
                    format!("{path}.match"),
                    "applyTo for listener class objects cannot have non listener match",
                );
                return;
            }
            let Some(listener) = &m.listener else { return };
            if !listener.port_name.is_empty() {
                check.warning(
                    format!("{path}.match.listener.portName"),
                    "not implemented by Istio: it is not matched (use portNumber)",
                );
            }
            let Some(filter) = listener.filter_chain.as_ref().and_then(|c| c.filter.as_ref()) else { return };
            let filter_path = format!("{path}.match.listener.filterChain.filter");
            if matches!(patch.apply_to, ApplyTo::Listener | ApplyTo::FilterChain) {
                check.warning(&filter_path, "filter match has no effect on a listener or filter chain patch");
            }
            if filter.name.is_empty() {
                check.error(format!("{filter_path}.name"), "filter match has no name");
            }
            if let Some(sub) = &filter.sub_filter {
                if patch.apply_to != ApplyTo::HttpFilter {
                    check.error(
                        format!("{filter_path}.subFilter"),
                        "subfilter match can be used with applyTo HTTP_FILTER only",
                    );
                }
                if filter.name != HTTP_CONNECTION_MANAGER && filter.name != "envoy.http_connection_manager" {
                    check.error(
                        format!("{filter_path}.name"),
                        format!("subfilter match requires filter match with {HTTP_CONNECTION_MANAGER}"),
                    );
                }
                if sub.name.is_empty() {
                    check.error(format!("{filter_path}.subFilter.name"), "subfilter match has no name");
                }
                deprecated_name(check, &format!("{filter_path}.subFilter.name"), &sub.name);
            }
            deprecated_name(check, &format!("{filter_path}.name"), &filter.name);
        }
        ApplyTo::RouteConfiguration | ApplyTo::VirtualHost | ApplyTo::HttpRoute => {
            if has_other(false, true, false) {
                check.error(
                    format!("{path}.match"),
                    "applyTo for http route class objects cannot have non route configuration match",
                );
            }
        }
        ApplyTo::Cluster => {
            if has_other(false, false, true) {
                check.error(format!("{path}.match"), "applyTo for cluster class objects cannot have non cluster match");
            }
        }
        ApplyTo::ListenerFilter | ApplyTo::ExtensionConfig | ApplyTo::Bootstrap | ApplyTo::Invalid => {}
    }
}

/// Why a patch does nothing, as istiod applies it (`docs/envoyfilter.md`
/// §3.12), when it does nothing.
fn does_nothing(patch: &ConfigPatch, operation: Operation) -> Option<String> {
    use Operation::{Add, InsertAfter, InsertBefore, InsertFirst, MergeAndReplaceList, Remove, Replace};
    let listener = patch.match_.as_ref().and_then(|m| m.listener.as_ref());
    let filter = listener.and_then(|l| l.filter_chain.as_ref()).and_then(|c| c.filter.as_ref());
    let named = match patch.apply_to {
        ApplyTo::ListenerFilter => listener.is_some_and(|l| !l.listener_filter.is_empty()),
        ApplyTo::NetworkFilter => filter.is_some_and(|f| !f.name.is_empty()),
        ApplyTo::HttpFilter => filter.and_then(|f| f.sub_filter.as_ref()).is_some_and(|s| !s.name.is_empty()),
        _ => true,
    };
    let kind = patch.apply_to.as_str();
    let op = serde_json::to_value(operation).ok()?.as_str()?.to_string();
    match (patch.apply_to, operation) {
        (ApplyTo::Bootstrap, _) => Some(
            "BOOTSTRAP patches are not applied: istiod stopped delivering the bootstrap (Istio 1.21) and neither \
             istiod nor meshpush's agent applies them; set bootstrap options through ProxyConfig or the proxy's annotations"
                .to_string(),
        ),
        (ApplyTo::ExtensionConfig, Add | InsertBefore | InsertAfter | InsertFirst) => None,
        (ApplyTo::ExtensionConfig, _) => {
            Some(format!("{op} of an EXTENSION_CONFIG does nothing, as in istiod: only ADD serves a configuration"))
        }
        (ApplyTo::Listener | ApplyTo::FilterChain | ApplyTo::HttpRoute | ApplyTo::Cluster, Replace)
        | (ApplyTo::RouteConfiguration, Add | Remove | InsertBefore | InsertAfter | InsertFirst | Replace)
        | (ApplyTo::ListenerFilter | ApplyTo::NetworkFilter | ApplyTo::HttpFilter, MergeAndReplaceList) => {
            Some(format!("{op} does nothing on a {kind}, as in istiod"))
        }
        (ApplyTo::ListenerFilter | ApplyTo::NetworkFilter | ApplyTo::HttpFilter, Remove | Replace) if !named => {
            Some(format!("{op} of a {kind} needs the filter's name in the match; without it the patch does nothing"))
        }
        (ApplyTo::ListenerFilter, Operation::Merge) if !named => {
            Some("MERGE of a LISTENER_FILTER needs listenerFilter in the match; without it the patch does nothing".into())
        }
        _ => None,
    }
}

fn deprecated_name(check: &mut Checker, path: &str, name: &str) {
    if let Some(canonical) = canonical_name(name) {
        check.warning(
            path,
            format!("using deprecated filter name {name}; use {canonical} instead: it matches nothing Istio generates"),
        );
    }
}

/// Why a patch value cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueProblem {
    /// The object is refused, as istiod's validation refuses it (a value
    /// that does not read as its type, a type no one knows).
    Refused {
        /// The path inside the value (`""`: the value itself).
        path: String,
        /// Why.
        message: String,
    },
    /// The patch is skipped and the object's other patches applied: istiod
    /// would drop an unknown field and apply the rest, or Envoy would
    /// refuse what the patch puts in (its own field constraints, a
    /// TypedStruct's value not its type), so meshpush applies neither.
    Skipped {
        /// The path inside the value.
        path: String,
        /// Why.
        message: String,
    },
}

/// `value` read as the message `apply_to` names, checked as far as Envoy
/// would check it: a whole object a patch puts in (ADD, INSERT_*, REPLACE)
/// against Envoy's field constraints, a MERGE's value for what it sets
/// (its lists' items whole), a TypedStruct's value as the type it names. One function for validation and for the index, so
/// what is reported is what is skipped.
pub fn read_value(
    apply_to: ApplyTo,
    operation: Operation,
    value: &serde_json::Value,
) -> Result<DynamicMessage, ValueProblem> {
    let Some(type_name) = apply_to.value_type() else {
        return Err(ValueProblem::Refused { path: String::new(), message: "no applyTo".into() });
    };
    let message = match json::from_json(type_name, value) {
        Ok(m) => m,
        Err(JsonError::Field { path, reason }) if reason.contains("unrecognized field name") => {
            let path = if path == "." { String::new() } else { path };
            let message = format!(
                "not a field of {type_name}: {reason}; the patch is skipped (istiod would apply it without the field)"
            );
            return Err(ValueProblem::Skipped { path, message });
        }
        Err(JsonError::Field { path, reason }) => {
            let path = if path == "." { String::new() } else { path };
            return Err(ValueProblem::Refused { path, message: format!("not a valid {type_name}: {reason}") });
        }
        Err(e) => {
            return Err(ValueProblem::Refused {
                path: String::new(),
                message: format!("not a valid {type_name}: {e}"),
            });
        }
    };
    let (mut frozen, mut untyped, mut typed_structs) = (Vec::new(), Vec::new(), Vec::new());
    walk(&message, &mut Found { frozen: &mut frozen, untyped: &mut untyped, typed_structs: &mut typed_structs });
    // Istio hands a TypedStruct to Envoy as it is; Envoy reads its value as
    // the type it names, and refuses the resource when that fails.
    for (type_url, inner) in typed_structs {
        if let Err(e) = json::from_json(json::type_name(&type_url), &inner) {
            let message = format!(
                "a TypedStruct's value is not a valid {type_url}: {e}; Envoy would refuse it, the patch is skipped"
            );
            return Err(ValueProblem::Skipped { path: String::new(), message });
        }
    }
    let checked = match operation {
        Operation::Remove => Ok(()),
        Operation::Merge | Operation::MergeAndReplaceList => crate::envoy_api::validate::check_partial(&message),
        _ => crate::envoy_api::validate::check(&message),
    };
    if let Err(v) = checked {
        let path = if v.path == "." { String::new() } else { v.path };
        let message = format!("{}: Envoy would refuse it, the patch is skipped", v.rule);
        return Err(ValueProblem::Skipped { path, message });
    }
    Ok(message)
}

/// The value, read as the message its `applyTo` names.
fn patch_value(check: &mut Checker, path: &str, apply_to: ApplyTo, operation: Operation, value: &serde_json::Value) {
    let at = |inner: &str| if inner.is_empty() { path.to_string() } else { format!("{path}.{inner}") };
    let message = match read_value(apply_to, operation, value) {
        Ok(m) => m,
        Err(ValueProblem::Refused { path: inner, message }) => return check.error(at(&inner), message),
        Err(ValueProblem::Skipped { path: inner, message }) => return check.warning(at(&inner), message),
    };
    let (mut frozen, mut untyped, mut typed_structs) = (Vec::new(), Vec::new(), Vec::new());
    walk(&message, &mut Found { frozen: &mut frozen, untyped: &mut untyped, typed_structs: &mut typed_structs });
    if !frozen.is_empty() {
        frozen.sort();
        frozen.dedup();
        check.warning(path, format!("using deprecated type_url(s); {}", frozen.join(", ")));
    }
    if !untyped.is_empty() {
        check.warning(path, format!("using deprecated types by name without typed_config; {}", untyped.join(", ")));
    }
}

/// What [`walk`] collects.
struct Found<'a> {
    /// The frozen (deprecated) message types of the `Any`s.
    frozen: &'a mut Vec<String>,
    /// The names of objects that could hold a `typed_config` and hold
    /// none (nor a `config_discovery`).
    untyped: &'a mut Vec<String>,
    /// Each TypedStruct's type URL and value (as JSON).
    typed_structs: &'a mut Vec<(String, serde_json::Value)>,
}

const TYPED_STRUCTS: [&str; 2] = ["udpa.type.v1.TypedStruct", "xds.type.v3.TypedStruct"];

/// Walks `message` and every `Any` inside it, collecting into `found`.
fn walk(message: &DynamicMessage, found: &mut Found<'_>) {
    let desc = message.descriptor();
    if desc.full_name() == "google.protobuf.Any" {
        let Ok(any) = message.transcode_to::<prost_types::Any>() else { return };
        let Some(payload_desc) = crate::envoy_api::message(&any.type_url) else { return };
        if is_frozen(&payload_desc) {
            found.frozen.push(payload_desc.full_name().to_string());
        }
        let Ok(payload) = DynamicMessage::decode(payload_desc.clone(), any.value.as_slice()) else { return };
        if TYPED_STRUCTS.contains(&payload_desc.full_name())
            && let Ok(printed) = json::dynamic_to_json(&payload)
        {
            let type_url = printed["type_url"].as_str().unwrap_or_default().to_string();
            found
                .typed_structs
                .push((type_url, printed.get("value").cloned().unwrap_or_else(|| serde_json::json!({}))));
        }
        walk(&payload, found);
        return;
    }
    if let Some(typed) = desc.get_field_by_name("typed_config") {
        let discovered = desc.get_field_by_name("config_discovery").is_some_and(|f| message.has_field(&f));
        if !message.has_field(&typed) && !discovered {
            let name = desc.get_field_by_name("name").map(|f| message.get_field(&f).into_owned());
            if let Some(Value::String(name)) = name {
                found.untyped.push(name);
            }
        }
    }
    for (_, value) in message.fields() {
        visit(value, found);
    }
}

fn visit(value: &Value, found: &mut Found<'_>) {
    match value {
        Value::Message(m) => walk(m, found),
        Value::List(items) => items.iter().for_each(|v| visit(v, found)),
        Value::Map(entries) => entries.values().for_each(|v| visit(v, found)),
        _ => {}
    }
}

/// Whether the message's file says its package version is FROZEN
/// (`udpa.annotations.file_status`), as Envoy marks the API versions it
/// keeps only for old clients.
fn is_frozen(desc: &prost_reflect::MessageDescriptor) -> bool {
    let Some(status) = crate::envoy_api::pool().get_extension_by_name("udpa.annotations.file_status") else {
        return false;
    };
    let options = desc.parent_file().options();
    if !options.has_extension(&status) {
        return false;
    }
    match options.get_extension(&status).as_ref() {
        Value::Message(m) => {
            m.get_field_by_name("package_version_status").is_some_and(|v| v.as_enum_number() == Some(1))
        }
        _ => false,
    }
}

#[cfg(test)]
#[path = "envoy_filter_test.rs"]
mod test;
