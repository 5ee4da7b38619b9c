//! Istio config objects as MCP-over-xDS carries them: each an
//! `istio.mcp.v1alpha1.Resource`, its metadata (`namespace/name`, labels,
//! annotations, creation time, version) beside a body that is the kind's
//! proto (`istio_api`).
//!
//! Role: the MCP client (`source::mcp`) turns each received resource into
//! the document a file would hold ([`document`]) and parses it with the
//! file parser (`parse::parse_json`), so an MCP object is typed and
//! validated exactly as the same object in a file; the MCP server
//! (`xds`) turns each stored object back into a resource ([`resource`]).
//!
//! Invariant: [`document`] yields `{apiVersion, kind, metadata, spec}` with
//! a non-empty namespace and name, or says which part is missing.

use serde_json::{Map, Value, json};

use super::{ConfigKind, ConfigObject};
use crate::istio_api::{self, IstioKind, mcp};

/// The store kind of a kind that travels over MCP.
pub fn config_kind(kind: &IstioKind) -> ConfigKind {
    match kind.kind {
        "VirtualService" => ConfigKind::VirtualService,
        "DestinationRule" => ConfigKind::DestinationRule,
        "Gateway" => ConfigKind::Gateway,
        "ServiceEntry" => ConfigKind::ServiceEntry,
        "Sidecar" => ConfigKind::Sidecar,
        "WorkloadEntry" => ConfigKind::WorkloadEntry,
        "WorkloadGroup" => ConfigKind::WorkloadGroup,
        "EnvoyFilter" => ConfigKind::EnvoyFilter,
        "ProxyConfig" => ConfigKind::ProxyConfig,
        "AuthorizationPolicy" => ConfigKind::AuthorizationPolicy,
        "PeerAuthentication" => ConfigKind::PeerAuthentication,
        "RequestAuthentication" => ConfigKind::RequestAuthentication,
        "Telemetry" => ConfigKind::Telemetry,
        other => unreachable!("istio_api::KINDS lists {other}, which has no store kind"),
    }
}

/// How a store kind travels over MCP, if it does.
pub fn istio_kind(kind: ConfigKind) -> Option<&'static IstioKind> {
    istio_api::KINDS.iter().find(|k| config_kind(k) == kind)
}

/// Why a resource is not an object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    /// No metadata.
    #[error("the resource has no metadata")]
    NoMetadata,
    /// The name is not `namespace/name`.
    #[error("metadata.name {0:?} is not NAMESPACE/NAME")]
    BadName(String),
    /// No body.
    #[error("the resource has no body")]
    NoBody,
    /// The body is not the kind's message.
    #[error("{0}")]
    Body(#[from] istio_api::BodyError),
    /// The stored object does not fit the kind's message (server side).
    #[error("the stored object does not serialize: {0}")]
    Serialize(String),
}

/// The namespace and name a resource's metadata names (`ns/name`).
pub fn resource_name(resource: &mcp::Resource) -> Result<(String, String), ResourceError> {
    let meta = resource.metadata.as_ref().ok_or(ResourceError::NoMetadata)?;
    match meta.name.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_string(), name.to_string()))
        }
        _ => Err(ResourceError::BadName(crate::text::shown(&meta.name).into_owned())),
    }
}

/// The document of `resource`, received as `kind` at `version`: what a
/// file holding the same object would hold.
pub fn document(kind: &IstioKind, version: &str, resource: &mcp::Resource) -> Result<Value, ResourceError> {
    let (namespace, name) = resource_name(resource)?;
    let meta = resource.metadata.as_ref().ok_or(ResourceError::NoMetadata)?;
    let body = resource.body.as_ref().ok_or(ResourceError::NoBody)?;
    let spec = istio_api::body_to_spec(kind, body)?;
    let mut metadata = Map::new();
    metadata.insert("name".into(), name.into());
    metadata.insert("namespace".into(), namespace.into());
    if !meta.labels.is_empty() {
        metadata.insert("labels".into(), json!(meta.labels));
    }
    if !meta.annotations.is_empty() {
        metadata.insert("annotations".into(), json!(meta.annotations));
    }
    if let Some(created) = meta.create_time.as_ref().and_then(rfc3339) {
        metadata.insert("creationTimestamp".into(), created.into());
    }
    Ok(json!({
        "apiVersion": kind.api_version(version),
        "kind": kind.kind,
        "metadata": metadata,
        "spec": spec,
    }))
}

/// `object` as a resource of its kind, `version` its version string.
pub fn resource(object: &ConfigObject, version: &str) -> Result<mcp::Resource, ResourceError> {
    let kind = istio_kind(object.kind()).ok_or_else(|| ResourceError::Serialize("not an Istio kind".into()))?;
    let meta = object.meta();
    let body = match &meta.written_spec {
        // As its source wrote it; a field the message lacks was reported
        // when it was read, and is left out here.
        Some(written) => {
            let mut spec = (*written.0).clone();
            proto_durations(&mut spec, &istio_api::message_descriptor(kind));
            istio_api::spec_to_body(kind, &spec, false)?
        }
        // Made by meshpush itself (an auto-registered WorkloadEntry): as
        // its type prints it.
        None => {
            let value = serde_json::to_value(object).map_err(|e| ResourceError::Serialize(e.to_string()))?;
            let spec = without_empty(value.get("spec").cloned().unwrap_or(Value::Null));
            let spec = if spec.is_null() { Value::Object(Map::new()) } else { spec };
            istio_api::spec_to_body(kind, &spec, true)?
        }
    };
    Ok(mcp::Resource {
        metadata: Some(mcp::Metadata {
            name: format!("{}/{}", meta.namespace(), meta.name),
            create_time: meta.creation_timestamp.as_deref().and_then(parse_rfc3339),
            version: version.to_string(),
            labels: meta.labels.clone().into_iter().collect(),
            annotations: meta.annotations.clone().into_iter().collect(),
        }),
        body: Some(body),
    })
}

/// Every `google.protobuf.Duration` of `value` (a JSON `message`) written
/// as proto3 JSON writes it (`180s`): Istio's YAML also takes Go's forms
/// (`3m`, `1h30m`, `500ms`), which proto3 JSON does not.
fn proto_durations(value: &mut Value, message: &prost_reflect::MessageDescriptor) {
    use prost_reflect::Kind;
    let Value::Object(map) = value else { return };
    for (key, item) in map.iter_mut() {
        let field = message.get_field_by_json_name(key).or_else(|| message.get_field_by_name(key));
        let Some(Kind::Message(inner)) = field.as_ref().map(|f| f.kind()) else { continue };
        let map_field = field.as_ref().is_some_and(|f| f.is_map());
        let each = |v: &mut Value| {
            if inner.full_name() == "google.protobuf.Duration" {
                if let Value::String(text) = v
                    && let Ok(duration) = text.parse::<super::Duration>()
                {
                    let d = duration.0;
                    *text = if d.subsec_nanos() == 0 {
                        format!("{}s", d.as_secs())
                    } else {
                        format!("{}.{:09}s", d.as_secs(), d.subsec_nanos())
                    };
                }
            } else {
                proto_durations(v, &inner);
            }
        };
        match item {
            // A map's entries are messages of key and value: walk the values.
            Value::Object(entries) if map_field => {
                let value_kind = inner.get_field_by_name("value").map(|f| f.kind());
                if let Some(Kind::Message(value_message)) = value_kind {
                    entries.values_mut().for_each(|v| proto_durations(v, &value_message));
                }
            }
            Value::Array(items) => items.iter_mut().for_each(each),
            other => each(other),
        }
    }
}

/// `value` without its nulls, empty lists and empty maps: how meshpush's
/// types print what is unset, which proto3 JSON reads as unset too, but
/// which a typed field of another shape would refuse.
fn without_empty(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, without_empty(v))).filter(|(_, v)| !is_empty(v)).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(without_empty).collect()),
        other => other,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

/// A protobuf timestamp as Kubernetes writes times (`2026-12-03T08:00:00Z`).
fn rfc3339(t: &prost_types::Timestamp) -> Option<String> {
    let at = time::OffsetDateTime::from_unix_timestamp(t.seconds).ok()?;
    Some(format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    ))
}

/// `2026-12-03T08:00:00Z` (Kubernetes' form; a fraction or an offset is
/// not read) as a protobuf timestamp.
fn parse_rfc3339(text: &str) -> Option<prost_types::Timestamp> {
    let b = text.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' || b[19] != b'Z'
    {
        return None;
    }
    let n = |r: std::ops::Range<usize>| text.get(r)?.parse::<u32>().ok();
    let month = time::Month::try_from(u8::try_from(n(5..7)?).ok()?).ok()?;
    let date =
        time::Date::from_calendar_date(i32::try_from(n(0..4)?).ok()?, month, u8::try_from(n(8..10)?).ok()?).ok()?;
    let clock = time::Time::from_hms(n(11..13)? as u8, n(14..16)? as u8, n(17..19)? as u8).ok()?;
    let seconds = time::PrimitiveDateTime::new(date, clock).assume_utc().unix_timestamp();
    Some(prost_types::Timestamp { seconds, nanos: 0 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse::parse_json;

    fn vs_resource(name: &str, spec: Value) -> mcp::Resource {
        let kind = istio_api::kind_named("VirtualService").unwrap();
        mcp::Resource {
            metadata: Some(mcp::Metadata {
                name: name.into(),
                create_time: Some(prost_types::Timestamp { seconds: 1_764_748_800, nanos: 0 }),
                version: "7".into(),
                labels: [("app".to_string(), "reviews".to_string())].into(),
                annotations: Default::default(),
            }),
            body: Some(istio_api::spec_to_body(kind, &spec, true).unwrap()),
        }
    }

    #[test]
    fn every_kind_has_a_store_kind_and_back() {
        for kind in &istio_api::KINDS {
            assert_eq!(istio_kind(config_kind(kind)), Some(kind));
        }
        assert_eq!(istio_kind(ConfigKind::Pod), None);
    }

    #[test]
    fn a_resource_parses_as_the_same_object_in_a_file_would() {
        let kind = istio_api::kind_named("VirtualService").unwrap();
        let spec =
            json!({"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": "reviews", "subset": "v2"}}]}]});
        let doc = document(kind, "v1", &vs_resource("bookinfo/reviews", spec)).unwrap();
        assert_eq!(doc["apiVersion"], "networking.istio.io/v1");
        assert_eq!(doc["metadata"]["creationTimestamp"], "2025-12-03T08:00:00Z");
        let parsed = parse_json("mcp:xds://a:1/VirtualService/bookinfo/reviews", &doc);
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        let (object, _) = &parsed.objects[0];
        assert_eq!(object.meta().namespace, "bookinfo");
        assert_eq!(object.meta().labels["app"], "reviews");

        let back = resource(object, "3").unwrap();
        assert_eq!(back.metadata.as_ref().unwrap().name, "bookinfo/reviews");
        assert_eq!(back.metadata.as_ref().unwrap().create_time.as_ref().unwrap().seconds, 1_764_748_800);
        let again = document(kind, "v1", &back).unwrap();
        assert_eq!(parse_json("again", &again).objects[0].0, *object);
    }

    #[test]
    fn names_and_bodies_are_checked() {
        let kind = istio_api::kind_named("VirtualService").unwrap();
        for bad in ["reviews", "/reviews", "ns/", "a/b/c"] {
            let err = document(kind, "v1", &vs_resource(bad, json!({}))).unwrap_err();
            assert!(matches!(err, ResourceError::BadName(_)), "{bad}: {err}");
        }
        let mut no_body = vs_resource("a/b", json!({}));
        no_body.body = None;
        assert_eq!(document(kind, "v1", &no_body), Err(ResourceError::NoBody));
        let dr = istio_api::kind_named("DestinationRule").unwrap();
        assert!(matches!(document(dr, "v1", &vs_resource("a/b", json!({}))), Err(ResourceError::Body(_))));
    }
}

#[cfg(test)]
mod corpus {
    use super::*;
    use crate::config::parse::{parse_documents, parse_json};

    fn yaml_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                yaml_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                out.push(path);
            }
        }
    }

    /// Where two values differ, and how; an enum written at its zero value
    /// (`ALLOW`, `MESH_EXTERNAL`) that comes back unset is no difference:
    /// proto3 cannot tell the two apart, and neither does Istio.
    fn differences(got: &Value, want: &Value, at: String, out: &mut Vec<String>) {
        match (got, want) {
            (Value::Object(g), Value::Object(w)) => {
                for key in w.keys().chain(g.keys().filter(|k| !w.contains_key(*k))) {
                    let (gv, wv) = (g.get(key).unwrap_or(&Value::Null), w.get(key).unwrap_or(&Value::Null));
                    differences(gv, wv, format!("{at}.{key}"), out);
                }
            }
            (Value::Array(g), Value::Array(w)) if g.len() == w.len() => {
                for (i, (a, b)) in g.iter().zip(w).enumerate() {
                    differences(a, b, format!("{at}[{i}]"), out);
                }
            }
            (Value::Null, Value::String(w)) if w.chars().all(|c| c.is_ascii_uppercase() || c == '_') => {}
            _ if got == want => {}
            _ => out.push(format!("{at}: {got} instead of {want}")),
        }
    }

    /// Every Istio object of Istio's own manifests, meshpush's examples and
    /// its test meshes goes out as a resource and comes back as itself:
    /// what meshpush serves over MCP is what it holds.
    #[test]
    fn every_istio_object_of_the_corpus_round_trips_through_a_resource() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        for dir in ["tests/data/istio", "tests/data/proxyless", "examples"] {
            yaml_files(&root.join(dir), &mut files);
        }
        files.push(root.join("tests/data/mesh-cases.yaml"));
        let (mut checked, mut failures) = (0, Vec::new());
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            for (object, _) in parse_documents("corpus", &text).objects {
                let Some(kind) = istio_kind(object.kind()) else { continue };
                checked += 1;
                let back = resource(&object, "1")
                    .and_then(|r| document(kind, kind.version, &r))
                    .map(|doc| parse_json("again", &doc));
                let plain = |o: &ConfigObject| {
                    let mut o = o.clone();
                    let meta = o.meta_mut();
                    meta.written_spec = None;
                    // A file's object without a namespace is in `default`.
                    meta.namespace = meta.namespace().to_string();
                    o
                };
                match back {
                    Ok(parsed) => {
                        let mut found = Vec::new();
                        match parsed.objects.first() {
                            Some((back, _)) => differences(
                                &serde_json::to_value(plain(back)).unwrap(),
                                &serde_json::to_value(plain(&object)).unwrap(),
                                String::new(),
                                &mut found,
                            ),
                            None => found.push("nothing".into()),
                        }
                        if !found.is_empty() {
                            let problems: Vec<String> = parsed.problems.iter().map(ToString::to_string).collect();
                            failures.push(format!("{}: {}: {found:?} {problems:?}", file.display(), object.key()));
                        }
                    }
                    Err(e) => failures.push(format!("{}: {}: {e}", file.display(), object.key())),
                }
            }
        }
        assert!(checked > 100, "only {checked} objects found");
        assert!(failures.is_empty(), "{} of {checked} failed:\n{}", failures.len(), failures.join("\n"));
    }
}
