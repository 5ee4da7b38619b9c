//! Envoy's own field constraints (protoc-gen-validate's `validate.rules`,
//! carried by the `.proto` files of the pool), checked on a message: what
//! Envoy checks when it takes a resource, before it refuses it.
//!
//! The rules checked are those Envoy's API uses on the resources
//! EnvoyFilters patch: a required message, oneof or `Any`; a string's or
//! bytes' length; a number's bounds; an enum value that must be defined; a
//! list's or map's size, and rules on each item; a duration's bounds.
//! Scalars are checked whether set or not (a proto3 default is a value, as
//! in protoc-gen-validate); messages only when set. The check walks every
//! set message, and every `Any` whose type the pool knows. A MERGE's value
//! is checked partially ([`check_partial`]): only what it sets.
//!
//! Invariant: the rules of a message type are read from its descriptor
//! once per process and kept.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;
use prost_reflect::{
    DynamicMessage, ExtensionDescriptor, FieldDescriptor, Kind, MessageDescriptor, OneofDescriptor, ReflectMessage,
    Value,
};

/// The first constraint a message breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {rule}")]
pub struct Violation {
    /// Where, as a field path from the message checked (`.` for itself).
    pub path: String,
    /// What the rule asks.
    pub rule: String,
}

/// How deep the walk goes (Envoy's messages nest far less).
const MAX_DEPTH: usize = 64;

/// The rules of one message type.
struct TypeRules {
    fields: Vec<(FieldDescriptor, Option<DynamicMessage>)>,
    required_oneofs: Vec<OneofDescriptor>,
}

fn extension(name: &str) -> Option<ExtensionDescriptor> {
    super::pool().get_extension_by_name(name)
}

fn rules_of(desc: &MessageDescriptor) -> Arc<TypeRules> {
    static CACHE: OnceLock<RwLock<HashMap<String, Arc<TypeRules>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(rules) = cache.read().get(desc.full_name()) {
        return rules.clone();
    }
    let field_ext = extension("validate.rules");
    let oneof_ext = extension("validate.required");
    let fields = desc
        .fields()
        .map(|f| {
            let rules = field_ext.as_ref().and_then(|ext| {
                let options = f.options();
                options.has_extension(ext).then(|| options.get_extension(ext).as_message().cloned()).flatten()
            });
            (f, rules)
        })
        .collect();
    let required_oneofs = desc
        .oneofs()
        .filter(|o| !o.is_synthetic())
        .filter(|o| {
            oneof_ext.as_ref().is_some_and(|ext| {
                let options = o.options();
                options.has_extension(ext) && options.get_extension(ext).as_bool() == Some(true)
            })
        })
        .collect();
    let rules = Arc::new(TypeRules { fields, required_oneofs });
    cache.write().insert(desc.full_name().to_string(), rules.clone());
    rules
}

/// Checks `message` and everything set in it against Envoy's constraints.
pub fn check(message: &DynamicMessage) -> Result<(), Violation> {
    walk(message, ".", 0, false)
}

/// Checks what a MERGE puts into an object: the fields `message` sets
/// (an unset field stays the target's), and whole what lists and maps in it
/// add (their items are added as they are).
pub fn check_partial(message: &DynamicMessage) -> Result<(), Violation> {
    walk(message, ".", 0, true)
}

fn join(path: &str, name: &str) -> String {
    if path == "." { name.to_string() } else { format!("{path}.{name}") }
}

/// `partial`: only the fields set are checked (a MERGE's value).
fn walk(message: &DynamicMessage, path: &str, depth: usize, partial: bool) -> Result<(), Violation> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    let desc = message.descriptor();
    if desc.full_name() == "google.protobuf.Any" {
        return walk_any(message, path, depth, partial);
    }
    let rules = rules_of(&desc);
    for oneof in rules.required_oneofs.iter().filter(|_| !partial) {
        if !oneof.fields().any(|f| message.has_field(&f)) {
            let names: Vec<String> = oneof.fields().map(|f| f.name().to_string()).collect();
            return Err(Violation { path: path.to_string(), rule: format!("one of {} is required", names.join(", ")) });
        }
    }
    for (field, rule) in &rules.fields {
        let here = join(path, field.name());
        let set = message.has_field(field);
        // A oneof member's rules hold only when it is the one set.
        let other_member = field.containing_oneof().is_some_and(|o| !o.is_synthetic());
        if (partial || other_member) && !set {
            continue;
        }
        if let Some(rule) = rule {
            field_rules(field, rule, &message.get_field(field), set, &here)?;
        }
        if set {
            match &*message.get_field(field) {
                Value::Message(child) => walk(child, &here, depth + 1, partial)?,
                Value::List(items) => {
                    for (i, item) in items.iter().enumerate() {
                        if let Value::Message(child) = item {
                            walk(child, &format!("{here}[{i}]"), depth + 1, false)?;
                        }
                    }
                }
                Value::Map(entries) => {
                    for (key, item) in entries {
                        if let Value::Message(child) = item {
                            walk(child, &format!("{here}[{key:?}]"), depth + 1, false)?;
                        }
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// An `Any`'s payload, when the pool knows its type.
fn walk_any(any: &DynamicMessage, path: &str, depth: usize, partial: bool) -> Result<(), Violation> {
    let url = any.get_field_by_name("type_url").and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
    let Some(desc) = super::message(&url) else { return Ok(()) };
    let bytes = any.get_field_by_name("value").and_then(|v| v.as_bytes().cloned()).unwrap_or_default();
    match DynamicMessage::decode(desc, bytes) {
        Ok(payload) => walk(&payload, path, depth + 1, partial),
        Err(e) => Err(Violation { path: path.to_string(), rule: format!("not a valid {url}: {e}") }),
    }
}

fn violation(path: &str, rule: impl Into<String>) -> Result<(), Violation> {
    Err(Violation { path: path.to_string(), rule: rule.into() })
}

/// A sub-rule of a rule message, when set.
fn sub<'a>(rule: &'a DynamicMessage, name: &str) -> Option<std::borrow::Cow<'a, Value>> {
    let field = rule.descriptor().get_field_by_name(name)?;
    rule.has_field(&field).then(|| rule.get_field(&field))
}

fn field_rules(
    field: &FieldDescriptor,
    rule: &DynamicMessage,
    value: &Value,
    set: bool,
    path: &str,
) -> Result<(), Violation> {
    if let Some(message) = sub(rule, "message").and_then(|m| m.as_message().cloned())
        && sub(&message, "required").and_then(|r| r.as_bool()) == Some(true)
        && !set
    {
        return violation(path, "is required");
    }
    if field.is_list() {
        let items = value.as_list().unwrap_or_default();
        if let Some(repeated) = sub(rule, "repeated").and_then(|r| r.as_message().cloned()) {
            if let Some(min) = sub(&repeated, "min_items").and_then(|v| v.as_u64())
                && (items.len() as u64) < min
            {
                return violation(path, format!("needs at least {min} item(s)"));
            }
            if let Some(max) = sub(&repeated, "max_items").and_then(|v| v.as_u64())
                && (items.len() as u64) > max
            {
                return violation(path, format!("takes at most {max} item(s)"));
            }
            if let Some(each) = sub(&repeated, "items").and_then(|v| v.as_message().cloned()) {
                for (i, item) in items.iter().enumerate() {
                    single(field, &each, item, true, &format!("{path}[{i}]"))?;
                }
            }
        }
        return Ok(());
    }
    if field.is_map() {
        let pairs = value.as_map().map_or(0, |m| m.len()) as u64;
        if let Some(map) = sub(rule, "map").and_then(|r| r.as_message().cloned())
            && let Some(min) = sub(&map, "min_pairs").and_then(|v| v.as_u64())
            && pairs < min
        {
            return violation(path, format!("needs at least {min} entr(ies)"));
        }
        return Ok(());
    }
    single(field, rule, value, set, path)
}

/// The rules of one value (a singular field, or an item of a list).
fn single(
    field: &FieldDescriptor,
    rule: &DynamicMessage,
    value: &Value,
    set: bool,
    path: &str,
) -> Result<(), Violation> {
    let kind = field.kind();
    // A message's rules (a wrapper's, a duration's, an Any's) hold when it
    // is set; `required` is the only one an unset message breaks.
    if matches!(kind, Kind::Message(_)) && !set {
        let required = |name: &str| {
            sub(rule, name)
                .and_then(|r| r.as_message().cloned())
                .and_then(|r| sub(&r, "required").and_then(|v| v.as_bool()))
                == Some(true)
        };
        return if required("duration") || required("any") { violation(path, "is required") } else { Ok(()) };
    }
    // A wrapper's rules are its value's, when it is set.
    let (value, set) = match (&kind, value) {
        (Kind::Message(m), Value::Message(wrapper))
            if m.full_name().starts_with("google.protobuf.") && m.full_name().ends_with("Value") =>
        {
            match wrapper.get_field_by_name("value") {
                Some(inner) => (inner.into_owned(), set),
                None => return Ok(()),
            }
        }
        _ => (value.clone(), set),
    };
    if let Some(strings) = sub(rule, "string").and_then(|r| r.as_message().cloned()) {
        let text = value.as_str().unwrap_or_default();
        let chars = text.chars().count() as u64;
        let bytes = text.len() as u64;
        for (name, n, at_least) in [
            ("min_len", chars, true),
            ("max_len", chars, false),
            ("min_bytes", bytes, true),
            ("max_bytes", bytes, false),
        ] {
            if let Some(limit) = sub(&strings, name).and_then(|v| v.as_u64()) {
                if at_least && n < limit {
                    return violation(path, format!("must be at least {limit} long"));
                }
                if !at_least && n > limit {
                    return violation(path, format!("must be at most {limit} long"));
                }
            }
        }
    }
    if let Some(bytes) = sub(rule, "bytes").and_then(|r| r.as_message().cloned()) {
        let n = value.as_bytes().map_or(0, |b| b.len()) as u64;
        if let Some(min) = sub(&bytes, "min_len").and_then(|v| v.as_u64())
            && n < min
        {
            return violation(path, format!("must be at least {min} bytes"));
        }
    }
    if let Some(rules) = sub(rule, "enum").and_then(|r| r.as_message().cloned())
        && sub(&rules, "defined_only").and_then(|v| v.as_bool()) == Some(true)
        && let (Kind::Enum(e), Some(n)) = (&kind, value.as_enum_number())
        && e.get_value(n).is_none()
    {
        return violation(path, format!("{n} is not a value of {}", e.full_name()));
    }
    for numeric in ["uint32", "uint64", "int32", "int64", "double", "float", "fixed32", "fixed64", "sint32", "sint64"] {
        let Some(bounds) = sub(rule, numeric).and_then(|r| r.as_message().cloned()) else { continue };
        let Some(v) = as_f64(&value) else { continue };
        bounded(&bounds, v, path, as_f64)?;
    }
    if let Some(any) = sub(rule, "any").and_then(|r| r.as_message().cloned())
        && sub(&any, "required").and_then(|v| v.as_bool()) == Some(true)
        && !set
    {
        return violation(path, "is required");
    }
    if let Some(duration) = sub(rule, "duration").and_then(|r| r.as_message().cloned()) {
        if sub(&duration, "required").and_then(|v| v.as_bool()) == Some(true) && !set {
            return violation(path, "is required");
        }
        if set && let Some(seconds) = value.as_message().map(seconds_of) {
            bounded(&duration, seconds, path, |b| b.as_message().map(seconds_of))?;
        }
    }
    Ok(())
}

fn seconds_of(duration: &DynamicMessage) -> f64 {
    let s = duration.get_field_by_name("seconds").and_then(|v| v.as_i64()).unwrap_or_default();
    let n = duration.get_field_by_name("nanos").and_then(|v| v.as_i32()).unwrap_or_default();
    s as f64 + f64::from(n) / 1e9
}

fn as_f64(value: &Value) -> Option<f64> {
    Some(match value {
        Value::U32(v) => f64::from(*v),
        Value::U64(v) => *v as f64,
        Value::I32(v) => f64::from(*v),
        Value::I64(v) => *v as f64,
        Value::F32(v) => f64::from(*v),
        Value::F64(v) => *v,
        _ => return None,
    })
}

/// `lt`, `lte`, `gt`, `gte` of a rule on `v` (a `gt` above an `lt` is
/// protoc-gen-validate's exclusive range: outside the two).
fn bounded(rule: &DynamicMessage, v: f64, path: &str, read: impl Fn(&Value) -> Option<f64>) -> Result<(), Violation> {
    let get = |name: &str| sub(rule, name).and_then(|b| read(&b));
    let (lt, lte, gt, gte) = (get("lt"), get("lte"), get("gt"), get("gte"));
    let below = lt.map(|b| v < b).or(lte.map(|b| v <= b));
    let above = gt.map(|b| v > b).or(gte.map(|b| v >= b));
    let upper = lt.or(lte);
    let lower = gt.or(gte);
    let ok = match (below, above, upper, lower) {
        (Some(b), Some(a), Some(u), Some(l)) if l > u => b || a,
        (b, a, _, _) => b.unwrap_or(true) && a.unwrap_or(true),
    };
    if ok {
        return Ok(());
    }
    let mut limits = Vec::new();
    for (name, bound) in [("<", lt), ("<=", lte), (">", gt), (">=", gte)] {
        if let Some(b) = bound {
            limits.push(format!("{name} {b}"));
        }
    }
    violation(path, format!("{v} is out of range ({})", limits.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envoy_api::json::from_json;
    use serde_json::json;

    fn checked(name: &str, value: serde_json::Value) -> Result<(), Violation> {
        check(&from_json(name, &value).expect("readable"))
    }

    #[test]
    fn envoy_s_own_constraints_are_checked_where_envoy_checks_them() {
        let cluster = "envoy.config.cluster.v3.Cluster";
        assert_eq!(checked(cluster, json!({"name": "c", "connect_timeout": "1s"})), Ok(()));
        // Envoy refuses a cluster without a name, and a connect timeout of zero.
        assert!(checked(cluster, json!({"connect_timeout": "1s"})).unwrap_err().path.contains("name"));
        let zero = checked(cluster, json!({"name": "c", "connect_timeout": "0s"})).unwrap_err();
        assert_eq!(zero.path, "connect_timeout", "{zero}");
        // A route without its action (a required oneof), and a header with an empty name.
        let route = "envoy.config.route.v3.Route";
        let no_action = checked(route, json!({"match": {"prefix": "/"}})).unwrap_err();
        assert!(no_action.rule.contains("one of"), "{no_action}");
        let header = checked(
            "envoy.config.route.v3.VirtualHost",
            json!({"name": "v", "domains": ["*"], "request_headers_to_add": [{"header": {"key": "", "value": "x"}}]}),
        )
        .unwrap_err();
        assert!(header.path.starts_with("request_headers_to_add[0].header.key"), "{header}");
        // Inside an Any: a Lua filter's typed config is checked as a Lua config.
        let filter = "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter";
        let lua = json!({"name": "lua", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit"}});
        assert!(checked(filter, lua.clone()).unwrap_err().path.starts_with("typed_config"));
        // A MERGE's value: what it sets is checked, what it leaves is the target's.
        let partial = |name: &str, value| check_partial(&from_json(name, &value).expect("readable"));
        assert_eq!(partial(cluster, json!({"circuit_breakers": {}})), Ok(()), "no name needed to merge");
        assert_eq!(partial(cluster, json!({"connect_timeout": "0s"})).unwrap_err().path, "connect_timeout");
        assert!(partial(filter, lua).is_ok(), "a merged typed config keeps the target's stat prefix");
        let added = json!({"virtual_hosts": [{"name": "v", "domains": []}]});
        let whole = partial("envoy.config.route.v3.RouteConfiguration", added).unwrap_err();
        assert_eq!(whole.path, "virtual_hosts[0].domains", "an appended host is checked whole: {whole}");
    }
}
