//! Istio's config API as it travels over MCP-over-xDS: the envelope
//! (`istio.mcp.v1alpha1.Resource`) as Rust types, and every body it
//! carries (a VirtualService, an AuthorizationPolicy, …) through a
//! descriptor pool, both compiled from the `.proto` files vendored
//! unchanged from istio/api under `proto/istio-api/` (its README says from
//! which commit).
//!
//! A body is read into proto3 JSON with the protos' JSON names, which are
//! the field names of Istio's YAML, so the config layer types it with the
//! same code as a file ([`body_to_spec`]); and JSON of a spec is written
//! back into a body the same way ([`spec_to_body`]), refusing a field the
//! message does not have. The pool is decoded at first use: a mesh that
//! neither reads nor serves MCP never pays for it.
//!
//! [`KINDS`] is the table of what travels: each kind's API group, its
//! canonical version (the one istiod serves and subscribes to), the older
//! versions servers of earlier releases name it by, and its body's message.
//! A type URL is `GROUP/VERSION/KIND`, as istiod spells a kind.

use std::sync::LazyLock;

use prost::Message;
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, SerializeOptions};
use serde_json::Value;

/// `istio.mcp.v1alpha1`: the envelope of every resource.
#[allow(missing_docs, clippy::all)] // generated code; the .proto files document each field.
pub mod mcp {
    tonic::include_proto!("istio.mcp.v1alpha1");
}

/// The type URL of the envelope, as an `Any` names it.
pub const RESOURCE_TYPE_URL: &str = "type.googleapis.com/istio.mcp.v1alpha1.Resource";

/// One kind of Istio config as it travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IstioKind {
    /// The API group (`networking.istio.io`).
    pub group: &'static str,
    /// The kind (`VirtualService`).
    pub kind: &'static str,
    /// The version istiod serves it by (`v1`).
    pub version: &'static str,
    /// Versions earlier releases served it by (`v1alpha3`, `v1beta1`).
    pub older: &'static [&'static str],
    /// Its body's message (`istio.networking.v1alpha3.VirtualService`).
    pub message: &'static str,
}

impl IstioKind {
    /// The type URL of one of its versions: `GROUP/VERSION/KIND`.
    pub fn type_url(&self, version: &str) -> String {
        format!("{}/{}/{}", self.group, version, self.kind)
    }

    /// Its type URLs: the canonical version's first, then the older ones.
    pub fn type_urls(&self) -> impl Iterator<Item = String> + '_ {
        std::iter::once(self.version).chain(self.older.iter().copied()).map(|v| self.type_url(v))
    }

    /// `apiVersion` of an object of this kind, at `version`.
    pub fn api_version(&self, version: &str) -> String {
        format!("{}/{}", self.group, version)
    }
}

const NETWORKING: &str = "networking.istio.io";
const SECURITY: &str = "security.istio.io";
const TELEMETRY: &str = "telemetry.istio.io";
const V1ALPHA3_V1BETA1: &[&str] = &["v1alpha3", "v1beta1"];

/// Every kind meshpush reads and serves over MCP-over-xDS: the config
/// kinds of istiod's `collections.Pilot` that meshpush has. (`WasmPlugin`
/// and `TrafficExtension`, which meshpush does not apply, are neither
/// subscribed to nor served.)
pub const KINDS: [IstioKind; 13] = [
    IstioKind {
        group: NETWORKING,
        kind: "VirtualService",
        version: "v1",
        older: V1ALPHA3_V1BETA1,
        message: "istio.networking.v1alpha3.VirtualService",
    },
    IstioKind {
        group: NETWORKING,
        kind: "DestinationRule",
        version: "v1",
        older: V1ALPHA3_V1BETA1,
        message: "istio.networking.v1alpha3.DestinationRule",
    },
    IstioKind {
        group: NETWORKING,
        kind: "Gateway",
        version: "v1",
        older: V1ALPHA3_V1BETA1,
        message: "istio.networking.v1alpha3.Gateway",
    },
    IstioKind {
        group: NETWORKING,
        kind: "ServiceEntry",
        version: "v1",
        older: V1ALPHA3_V1BETA1,
        message: "istio.networking.v1alpha3.ServiceEntry",
    },
    IstioKind {
        group: NETWORKING,
        kind: "Sidecar",
        version: "v1",
        older: V1ALPHA3_V1BETA1,
        message: "istio.networking.v1alpha3.Sidecar",
    },
    IstioKind {
        group: NETWORKING,
        kind: "WorkloadEntry",
        version: "v1",
        older: V1ALPHA3_V1BETA1,
        message: "istio.networking.v1alpha3.WorkloadEntry",
    },
    IstioKind {
        group: NETWORKING,
        kind: "WorkloadGroup",
        version: "v1",
        older: V1ALPHA3_V1BETA1,
        message: "istio.networking.v1alpha3.WorkloadGroup",
    },
    IstioKind {
        group: NETWORKING,
        kind: "EnvoyFilter",
        version: "v1alpha3",
        older: &[],
        message: "istio.networking.v1alpha3.EnvoyFilter",
    },
    IstioKind {
        group: NETWORKING,
        kind: "ProxyConfig",
        version: "v1beta1",
        older: &[],
        message: "istio.networking.v1beta1.ProxyConfig",
    },
    IstioKind {
        group: SECURITY,
        kind: "AuthorizationPolicy",
        version: "v1",
        older: &["v1beta1"],
        message: "istio.security.v1beta1.AuthorizationPolicy",
    },
    IstioKind {
        group: SECURITY,
        kind: "PeerAuthentication",
        version: "v1",
        older: &["v1beta1"],
        message: "istio.security.v1beta1.PeerAuthentication",
    },
    IstioKind {
        group: SECURITY,
        kind: "RequestAuthentication",
        version: "v1",
        older: &["v1beta1"],
        message: "istio.security.v1beta1.RequestAuthentication",
    },
    IstioKind {
        group: TELEMETRY,
        kind: "Telemetry",
        version: "v1",
        older: &["v1alpha1"],
        message: "istio.telemetry.v1alpha1.Telemetry",
    },
];

/// The kind a type URL names, and the version it names it by; `None` for
/// anything that is not `GROUP/VERSION/KIND` of a kind of [`KINDS`].
pub fn kind_of_type_url(type_url: &str) -> Option<(&'static IstioKind, &'static str)> {
    let mut parts = type_url.splitn(3, '/');
    let (group, version, kind) = (parts.next()?, parts.next()?, parts.next()?);
    let found = KINDS.iter().find(|k| k.group == group && k.kind == kind)?;
    let version = std::iter::once(&found.version).chain(found.older).find(|v| **v == version)?;
    Some((found, version))
}

/// The kind named `kind` (`VirtualService`).
pub fn kind_named(kind: &str) -> Option<&'static IstioKind> {
    KINDS.iter().find(|k| k.kind == kind)
}

/// The encoded `FileDescriptorSet` `build.rs` compiled.
static ENCODED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/istio_api.bin"));

static POOL: LazyLock<DescriptorPool> =
    LazyLock::new(|| DescriptorPool::decode(ENCODED).expect("build.rs compiled a valid descriptor set"));

/// The pool of Istio's config messages, decoded at first use.
pub fn pool() -> &'static DescriptorPool {
    &POOL
}

/// Why a body could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// The body is not the kind's message.
    #[error("the body is a {found}, not a {expected}")]
    WrongType {
        /// The message the kind carries.
        expected: String,
        /// What the body's type URL names (cut to a safe length).
        found: String,
    },
    /// The bytes do not decode as the message.
    #[error("the body does not decode as {message}: {reason}")]
    Decode {
        /// The message.
        message: String,
        /// What the decoder said.
        reason: String,
    },
    /// The JSON is not the message; `path` is where it went wrong.
    #[error("spec.{path}: {reason}")]
    Field {
        /// The JSON path of the offending value (`.` for the top).
        path: String,
        /// What was wrong there.
        reason: String,
    },
}

/// The body of a resource of `kind` as the JSON of its `spec`, with
/// Istio's YAML field names (the protos' JSON names), enums by name and
/// default values left out, as a file would spell it.
pub fn body_to_spec(kind: &IstioKind, body: &prost_types::Any) -> Result<Value, BodyError> {
    let name = body.type_url.rsplit_once('/').map_or(body.type_url.as_str(), |(_, name)| name);
    if name != kind.message {
        return Err(BodyError::WrongType {
            expected: kind.message.to_string(),
            found: name.chars().take(120).collect(),
        });
    }
    let descriptor = message(kind);
    let decoded = DynamicMessage::decode(descriptor, body.value.as_slice())
        .map_err(|e| BodyError::Decode { message: kind.message.to_string(), reason: e.to_string() })?;
    let options = SerializeOptions::new().skip_default_fields(true).stringify_64_bit_integers(false);
    let mut spec = decoded
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map_err(|e| BodyError::Field { path: ".".into(), reason: e.to_string() })?;
    whole_numbers(&mut spec);
    Ok(spec)
}

/// Every whole floating-point number of `value` written as an integer, as
/// protobuf's JSON printer writes them: a `Struct` holds only doubles, and
/// an EnvoyFilter's `port_value: 8081` must not come back as `8081.0`.
fn whole_numbers(value: &mut Value) {
    match value {
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|f| n.is_f64() && f.fract() == 0.0 && f.abs() < 9.0e15) {
                *n = serde_json::Number::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_numbers),
        Value::Object(map) => map.values_mut().for_each(whole_numbers),
        _ => {}
    }
}

/// The descriptor of a kind's body.
pub fn message_descriptor(kind: &IstioKind) -> prost_reflect::MessageDescriptor {
    message(kind)
}

/// The JSON of a `spec` of `kind` as its body: an `Any` of the kind's
/// message. A field the message does not have is an error naming its path
/// when `strict`, else left out.
pub fn spec_to_body(kind: &IstioKind, spec: &Value, strict: bool) -> Result<prost_types::Any, BodyError> {
    let mut track = serde_path_to_error::Track::new();
    let deserializer = serde_path_to_error::Deserializer::new(spec, &mut track);
    let message = DynamicMessage::deserialize_with_options(
        message(kind),
        deserializer,
        &DeserializeOptions::new().deny_unknown_fields(strict),
    )
    .map_err(|e| BodyError::Field { path: track.path().to_string(), reason: e.to_string() })?;
    Ok(prost_types::Any { type_url: format!("type.googleapis.com/{}", kind.message), value: message.encode_to_vec() })
}

fn message(kind: &IstioKind) -> prost_reflect::MessageDescriptor {
    pool().get_message_by_name(kind.message).expect("every kind's message is compiled into the pool")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_kind_has_its_message_in_the_pool_and_type_urls_round_trip() {
        for kind in &KINDS {
            assert!(pool().get_message_by_name(kind.message).is_some(), "{} missing", kind.message);
            for url in kind.type_urls() {
                let (found, version) = kind_of_type_url(&url).unwrap();
                assert_eq!((found, url.as_str()), (kind, kind.type_url(version).as_str()));
            }
        }
        assert_eq!(
            kind_of_type_url("networking.istio.io/v1alpha3/VirtualService").map(|(k, v)| (k.kind, v)),
            Some(("VirtualService", "v1alpha3"))
        );
        assert!(kind_of_type_url("networking.istio.io/v2/VirtualService").is_none());
        assert!(kind_of_type_url("type.googleapis.com/envoy.config.cluster.v3.Cluster").is_none());
        assert!(kind_of_type_url("extensions.istio.io/v1alpha1/WasmPlugin").is_none());
    }

    #[test]
    fn a_spec_goes_to_a_body_and_back_with_istios_field_names() {
        let vs = kind_named("VirtualService").unwrap();
        let spec = json!({
            "hosts": ["reviews"],
            "http": [{
                "match": [{"headers": {"end-user": {"exact": "jason"}}}],
                "route": [{"destination": {"host": "reviews", "subset": "v2"}, "weight": 75}],
                "timeout": "1.500s",
                "retries": {"attempts": 3, "perTryTimeout": "2s"},
            }],
        });
        let body = spec_to_body(vs, &spec, true).unwrap();
        assert_eq!(body.type_url, "type.googleapis.com/istio.networking.v1alpha3.VirtualService");
        assert_eq!(body_to_spec(vs, &body).unwrap(), spec);
    }

    #[test]
    fn a_wrong_body_or_an_unknown_field_is_named() {
        let vs = kind_named("VirtualService").unwrap();
        let dr = kind_named("DestinationRule").unwrap();
        let body = spec_to_body(dr, &json!({"host": "reviews"}), true).unwrap();
        assert!(matches!(body_to_spec(vs, &body), Err(BodyError::WrongType { .. })));
        let err = spec_to_body(vs, &json!({"hosts": ["a"], "http": [{"rout": []}]}), true).unwrap_err();
        assert!(matches!(&err, BodyError::Field { path, .. } if path.starts_with("http[0]")), "{err}");
        let garbage = prost_types::Any {
            type_url: body.type_url.replace("DestinationRule", "VirtualService"),
            value: vec![0xff, 0xff],
        };
        assert!(matches!(body_to_spec(vs, &garbage), Err(BodyError::Decode { .. })));
    }
}
