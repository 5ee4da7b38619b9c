//! Merging one Envoy message into another as Istio merges an EnvoyFilter
//! patch (`pkg/proto/merge`, and `MergeAnyWithAny` for a filter's typed
//! config), on messages read through the pool.
//!
//! The rules, field by field of the patch:
//! - only a field the patch *has* counts: a proto3 scalar left at its
//!   default is invisible, so a merge can never set a field back to 0,
//!   `false`, `""` or the first enum value;
//! - a scalar, string, bytes or enum overwrites;
//! - a list is appended to, or, with [`Lists::Replace`]
//!   (`MERGE_AND_REPLACE_LIST`), replaces the target's list — at any depth;
//! - a map entry replaces the target's entry of that key whole;
//! - a message is merged field by field, except `google.protobuf.Duration`,
//!   which replaces the target's whole (Istio works around Go's merge of
//!   its two fields), and an `Any`, whose type URL and bytes overwrite and
//!   so replace it;
//! - setting one member of a oneof clears the others.
//!
//! Both messages must be of the same type; [`merge_any`] refuses two
//! `Any`s of different types instead of failing half-way (where Istio
//! panics and keeps what was patched before).

use prost::Message;
use prost_reflect::{DynamicMessage, ReflectMessage, Value};

use envoy_types::pb::google::protobuf::Any;

/// What a list in the patch does to the target's list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lists {
    /// `MERGE`: the patch's items are appended.
    Append,
    /// `MERGE_AND_REPLACE_LIST`: the patch's list replaces the target's.
    Replace,
}

/// Why a merge was not made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// The two are of different types.
    #[error("cannot merge a {patch} into a {target}")]
    TypeMismatch {
        /// The target's type.
        target: String,
        /// The patch's type.
        patch: String,
    },
    /// A typed config could not be read through the pool.
    #[error("{0}")]
    Unreadable(String),
}

/// Merges `patch` into `target` (both of one type).
pub fn merge(target: &mut DynamicMessage, patch: &DynamicMessage, lists: Lists) -> Result<(), MergeError> {
    let (t, p) = (target.descriptor(), patch.descriptor());
    if t.full_name() != p.full_name() {
        return Err(MergeError::TypeMismatch { target: t.full_name().into(), patch: p.full_name().into() });
    }
    merge_fields(target, patch, lists);
    Ok(())
}

fn merge_fields(target: &mut DynamicMessage, patch: &DynamicMessage, lists: Lists) {
    for (field, value) in patch.fields() {
        match value {
            Value::List(items) => match lists {
                Lists::Replace => target.set_field(&field, Value::List(items.clone())),
                Lists::Append => {
                    if let Value::List(existing) = target.get_field_mut(&field) {
                        existing.extend(items.iter().cloned());
                    }
                }
            },
            Value::Map(entries) => {
                if let Value::Map(existing) = target.get_field_mut(&field) {
                    for (key, entry) in entries {
                        existing.insert(key.clone(), entry.clone());
                    }
                }
            }
            Value::Message(message) if replaces_whole(message) || !target.has_field(&field) => {
                target.set_field(&field, value.clone());
            }
            Value::Message(message) => {
                if let Value::Message(existing) = target.get_field_mut(&field) {
                    merge_fields(existing, message, lists);
                }
            }
            scalar => target.set_field(&field, scalar.clone()),
        }
    }
}

/// Messages a merge replaces rather than merges into.
fn replaces_whole(message: &DynamicMessage) -> bool {
    matches!(message.descriptor().full_name(), "google.protobuf.Duration" | "google.protobuf.Any")
}

/// Merges the typed config `patch` into `target` as Istio's
/// `MergeAnyWithAny` does: both are read as their type, merged (always
/// with [`Lists::Append`]), and `target` is written back; two different
/// types are refused.
pub fn merge_any(target: &mut Any, patch: &Any) -> Result<(), MergeError> {
    if target.type_url != patch.type_url {
        return Err(MergeError::TypeMismatch {
            target: super::json::type_name(&target.type_url).into(),
            patch: super::json::type_name(&patch.type_url).into(),
        });
    }
    let read = |any: &Any| {
        let desc = super::message(&any.type_url)
            .ok_or_else(|| MergeError::Unreadable(format!("unknown type {}", any.type_url)))?;
        DynamicMessage::decode(desc, any.value.as_slice()).map_err(|e| MergeError::Unreadable(e.to_string()))
    };
    let mut merged = read(target)?;
    merge_fields(&mut merged, &read(patch)?, Lists::Append);
    target.value = merged.encode_to_vec();
    Ok(())
}

/// `message` (a generated type) as a message of the pool, to merge into.
pub fn dynamic<M: Message + prost::Name>(message: &M) -> DynamicMessage {
    let desc = super::message(&M::full_name()).expect("every Envoy type is in the pool");
    DynamicMessage::decode(desc, message.encode_to_vec().as_slice()).expect("a message decodes as its own type")
}

/// `message` back as the generated type `M`.
pub fn typed<M: Message + Default>(message: &DynamicMessage) -> M {
    M::decode(message.encode_to_vec().as_slice()).expect("the pool's message is the generated type's")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envoy_api::json::{from_json, to_any, to_json};
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use serde_json::json;

    fn cluster(value: serde_json::Value) -> DynamicMessage {
        from_json("envoy.config.cluster.v3.Cluster", &value).unwrap()
    }

    fn merged(target: serde_json::Value, patch: serde_json::Value, lists: Lists) -> serde_json::Value {
        let mut t = cluster(target);
        merge(&mut t, &cluster(patch), lists).unwrap();
        to_json(&typed::<Cluster>(&t)).unwrap()
    }

    #[test]
    fn scalars_overwrite_and_defaults_are_invisible() {
        let out = merged(
            json!({"name": "c", "per_connection_buffer_limit_bytes": 1024, "respect_dns_ttl": true}),
            json!({"name": "d", "respect_dns_ttl": false, "per_connection_buffer_limit_bytes": 0}),
            Lists::Append,
        );
        // `false` is proto3's default, and a wrapper holding 0 has no field
        // set inside it: neither is seen, as in Istio.
        assert_eq!(out, json!({"name": "d", "per_connection_buffer_limit_bytes": 1024, "respect_dns_ttl": true}));
    }

    #[test]
    fn a_duration_replaces_and_a_message_merges() {
        let out = merged(
            json!({"name": "c", "connect_timeout": "10.500s", "circuit_breakers": {"thresholds": [{"max_connections": 1}]},
                   "outlier_detection": {"consecutive_5xx": 5, "interval": "10s"}}),
            json!({"connect_timeout": "1s", "outlier_detection": {"base_ejection_time": "30s"}}),
            Lists::Append,
        );
        assert_eq!(out["connect_timeout"], "1s", "not 1.500s: the duration is replaced whole");
        assert_eq!(
            out["outlier_detection"],
            json!({"consecutive_5xx": 5, "interval": "10s", "base_ejection_time": "30s"})
        );
        assert_eq!(out["circuit_breakers"]["thresholds"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn lists_append_or_are_replaced_at_any_depth() {
        let target = json!({"name": "c", "circuit_breakers": {"thresholds": [{"max_connections": 1}]}});
        let patch = json!({"circuit_breakers": {"thresholds": [{"max_connections": 2}]}});
        let appended = merged(target.clone(), patch.clone(), Lists::Append);
        assert_eq!(appended["circuit_breakers"]["thresholds"], json!([{"max_connections": 1}, {"max_connections": 2}]));
        let replaced = merged(target, patch, Lists::Replace);
        assert_eq!(replaced["circuit_breakers"]["thresholds"], json!([{"max_connections": 2}]));
    }

    #[test]
    fn a_map_entry_is_replaced_whole_and_a_oneof_member_clears_the_others() {
        let any = |max: u32| {
            json!({"@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                   "common_http_protocol_options": {"max_requests_per_connection": max}})
        };
        let out = merged(
            json!({"name": "c", "type": "EDS", "typed_extension_protocol_options": {"a": any(1), "b": any(2)}}),
            json!({"cluster_type": {"name": "envoy.clusters.dynamic_forward_proxy"},
                   "typed_extension_protocol_options": {"b": any(3)}}),
            Lists::Append,
        );
        assert_eq!(out["typed_extension_protocol_options"]["a"], any(1));
        assert_eq!(out["typed_extension_protocol_options"]["b"], any(3));
        assert!(out.get("type").is_none(), "cluster_type cleared the oneof's type: {out}");
    }

    #[test]
    fn typed_configs_merge_when_their_types_agree() {
        let hcm = |v: serde_json::Value| {
            to_any(
                &from_json("envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager", &v)
                    .unwrap(),
            )
        };
        let mut target = hcm(json!({"stat_prefix": "in", "http_filters": [{"name": "envoy.filters.http.router"}]}));
        merge_any(&mut target, &hcm(json!({"server_name": "x", "http_filters": [{"name": "extra"}]}))).unwrap();
        let out = crate::envoy_api::json::any_to_json(&target).unwrap();
        assert_eq!(out["server_name"], "x");
        assert_eq!(out["http_filters"].as_array().unwrap().len(), 2, "lists inside a typed config append: {out}");
        let other = to_any(&from_json("envoy.extensions.filters.http.lua.v3.Lua", &json!({})).unwrap());
        assert!(matches!(merge_any(&mut target, &other), Err(MergeError::TypeMismatch { .. })));
    }
}
