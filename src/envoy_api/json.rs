//! Proto3 JSON of Envoy's messages, both ways, through the pool.
//!
//! **Out** ([`to_json`], [`any_to_json`]): as Envoy's admin prints a
//! message — proto field names (`snake_case`), enums by name, 64-bit
//! integers as strings, durations as `"5s"`/`"0.100s"`, default scalars
//! left out, an `Any` inlined under its `@type` (a well-known type under
//! `"value"`), and a floating-point number that is whole printed without a
//! fraction (`100`, not `100.0`), as protobuf's printer does.
//!
//! **In** ([`from_json`]): a JSON value read as a named message, accepting
//! what protobuf's parser accepts (either field name spelling, enums by name
//! or number) and refusing an unknown field or `@type`; a failure names the
//! JSON path it happened at.

use prost::Message;
use prost_reflect::{DeserializeOptions, DynamicMessage, ReflectMessage, SerializeOptions};
use serde_json::Value;
use serde_json::ser::{CompactFormatter, Formatter};

use envoy_types::pb::google::protobuf::Any;

/// Why a message could not be turned into JSON or back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// The pool has no message of that name.
    #[error("unknown type {0}")]
    UnknownType(String),
    /// The bytes do not decode as that message.
    #[error("{type_name} does not decode: {reason}")]
    Decode {
        /// The message's full name.
        type_name: String,
        /// What protobuf's decoder said.
        reason: String,
    },
    /// The JSON is not that message; `path` is where it went wrong
    /// (`.` for the top).
    #[error("at {path}: {reason}")]
    Field {
        /// The JSON path of the offending value (`typed_config.inline_code`).
        path: String,
        /// What was wrong there.
        reason: String,
    },
}

/// The printing options of Envoy's admin.
fn envoy_print() -> SerializeOptions {
    SerializeOptions::new().use_proto_field_name(true).skip_default_fields(true).stringify_64_bit_integers(true)
}

/// `message` as Envoy's admin prints it.
pub fn to_json<M: Message + prost::Name>(message: &M) -> Result<Value, JsonError> {
    encoded_to_json(&M::full_name(), &message.encode_to_vec())
}

/// An `Any` as Envoy prints it: `{"@type": URL, ...fields}`.
pub fn any_to_json(any: &Any) -> Result<Value, JsonError> {
    let mut value = encoded_to_json(type_name(&any.type_url), &any.value)?;
    let mut out = serde_json::Map::new();
    out.insert("@type".into(), Value::String(any.type_url.clone()));
    if crate::envoy_api::message(&any.type_url).is_some_and(|m| m.full_name().starts_with("google.protobuf.")) {
        out.insert("value".into(), value);
    } else if let Value::Object(fields) = &mut value {
        out.append(fields);
    }
    Ok(Value::Object(out))
}

/// The message's name in a type URL (`type.googleapis.com/NAME`).
pub fn type_name(type_url: &str) -> &str {
    type_url.rsplit_once('/').map_or(type_url, |(_, name)| name)
}

/// The encoded message `bytes` of type `name`, as Envoy prints it.
pub fn encoded_to_json(name: &str, bytes: &[u8]) -> Result<Value, JsonError> {
    let desc = crate::envoy_api::message(name).ok_or_else(|| JsonError::UnknownType(name.to_string()))?;
    let message = DynamicMessage::decode(desc, bytes)
        .map_err(|e| JsonError::Decode { type_name: name.to_string(), reason: e.to_string() })?;
    dynamic_to_json(&message)
}

/// A decoded message as Envoy prints it.
pub fn dynamic_to_json(message: &DynamicMessage) -> Result<Value, JsonError> {
    let mut text = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut text, ProtoNumbers);
    message.serialize_with_options(&mut serializer, &envoy_print()).map_err(|e| JsonError::Field {
        path: ".".into(),
        // An `Any` whose type the pool lacks fails here.
        reason: e.to_string(),
    })?;
    Ok(serde_json::from_slice(&text).expect("serde_json reads what it wrote"))
}

/// `value` read as the message `name`. An `Any` inside it is resolved by
/// its `@type`; an unknown field or type is an error naming its path.
pub fn from_json(name: &str, value: &Value) -> Result<DynamicMessage, JsonError> {
    let desc = crate::envoy_api::message(name).ok_or_else(|| JsonError::UnknownType(name.to_string()))?;
    let mut track = serde_path_to_error::Track::new();
    let deserializer = serde_path_to_error::Deserializer::new(value, &mut track);
    DynamicMessage::deserialize_with_options(desc, deserializer, &DeserializeOptions::new().deny_unknown_fields(true))
        .map_err(|e| JsonError::Field { path: track.path().to_string(), reason: e.to_string() })
}

/// `message` as an `Any` of its own type.
pub fn to_any(message: &DynamicMessage) -> Any {
    Any {
        type_url: format!("type.googleapis.com/{}", message.descriptor().full_name()),
        value: message.encode_to_vec(),
    }
}

/// serde_json's compact output, but with whole floating-point numbers
/// printed as integers, as protobuf's JSON printer prints them.
struct ProtoNumbers;

impl Formatter for ProtoNumbers {
    fn write_f32<W: ?Sized + std::io::Write>(&mut self, writer: &mut W, value: f32) -> std::io::Result<()> {
        if value.fract() == 0.0 && value.abs() < 1e9 {
            write!(writer, "{}", value as i64)
        } else {
            CompactFormatter.write_f32(writer, value)
        }
    }

    fn write_f64<W: ?Sized + std::io::Write>(&mut self, writer: &mut W, value: f64) -> std::io::Result<()> {
        if value.fract() == 0.0 && value.abs() < 1e15 {
            write!(writer, "{}", value as i64)
        } else {
            CompactFormatter.write_f64(writer, value)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
    use envoy_types::pb::envoy::r#type::v3::Percent;
    use envoy_types::pb::google::protobuf::{Duration, UInt32Value};
    use serde_json::json;

    #[test]
    fn a_message_prints_as_envoys_admin_prints_it() {
        let cluster = Cluster {
            name: "outbound|9080||reviews.default.svc.cluster.local".into(),
            connect_timeout: Some(Duration { seconds: 0, nanos: 100_000_000 }),
            cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
            per_connection_buffer_limit_bytes: Some(UInt32Value { value: 32768 }),
            ..Default::default()
        };
        assert_eq!(
            to_json(&cluster).unwrap(),
            json!({
                "name": "outbound|9080||reviews.default.svc.cluster.local",
                "type": "EDS",
                "connect_timeout": "0.100s",
                "per_connection_buffer_limit_bytes": 32768,
            })
        );
        assert_eq!(to_json(&Percent { value: 100.0 }).unwrap().to_string(), r#"{"value":100}"#);
        assert_eq!(to_json(&Percent { value: 12.5 }).unwrap().to_string(), r#"{"value":12.5}"#);
    }

    #[test]
    fn an_any_is_inlined_under_its_type_and_json_reads_back() {
        let value = json!({
            "name": "envoy.filters.http.lua",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
                "defaultSourceCode": {"inlineString": "function envoy_on_request(h) end"},
            },
        });
        let filter =
            from_json("envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter", &value).unwrap();
        let printed = any_to_json(&to_any(&filter)).unwrap();
        assert_eq!(
            printed,
            json!({
                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter",
                "name": "envoy.filters.http.lua",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
                    "default_source_code": {"inline_string": "function envoy_on_request(h) end"},
                },
            })
        );
    }

    #[test]
    fn a_bad_field_or_type_is_named_by_its_path() {
        let unknown_field = json!({"name": "x", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua", "inline_cod": "x"}});
        let err = from_json("envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter", &unknown_field)
            .unwrap_err();
        assert!(
            matches!(&err, JsonError::Field { path, reason } if path.starts_with("typed_config") && reason.contains("inline_cod")),
            "{err}"
        );

        let unknown_type = json!({"name": "x", "typed_config": {"@type": "type.googleapis.com/nope.Nope"}});
        let err = from_json("envoy.config.listener.v3.Filter", &unknown_type).unwrap_err();
        assert!(err.to_string().contains("nope.Nope"), "{err}");

        let wrong_kind = json!({"name": "x", "connect_timeout": 5});
        let err = from_json("envoy.config.cluster.v3.Cluster", &wrong_kind).unwrap_err();
        assert!(matches!(&err, JsonError::Field { path, .. } if path == "connect_timeout"), "{err}");

        assert_eq!(from_json("no.Such", &json!({})).unwrap_err(), JsonError::UnknownType("no.Such".into()));
    }
}
