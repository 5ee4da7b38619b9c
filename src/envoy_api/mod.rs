//! Envoy's API as protobuf descriptors: every message envoy-types ships,
//! in one [`DescriptorPool`], so that any Envoy type can be read from and
//! written as proto3 JSON by its name alone.
//!
//! The pool is compiled at build time (`build.rs`, from the `.proto` files
//! of the envoy-types crate plus the two `TypedStruct` files it leaves out;
//! 0.6 MB encoded) and decoded from the binary at first use, once per
//! process (8.5 ms, `envoy_api/decode_pool` in perf.md): paid only by the
//! paths that need it (config dumps, EnvoyFilter patch values), never by
//! the push path of a mesh that uses neither.
//!
//! [`json`] holds the two directions: a message to JSON exactly as Envoy's
//! admin prints it, and JSON (with `@type`s resolved through the pool) to a
//! message, with the path of the field that failed. [`merge`] merges one
//! message into another as Istio merges an EnvoyFilter patch. [`validate`]
//! checks a message against Envoy's own field constraints (protoc-gen-validate's
//! rules in the same `.proto` files), as Envoy checks what it is sent.

pub mod json;
pub mod merge;
pub mod validate;

use std::sync::LazyLock;

use prost_reflect::{DescriptorPool, MessageDescriptor};

/// The encoded `FileDescriptorSet` `build.rs` compiled.
static ENCODED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/envoy_api.bin"));

static POOL: LazyLock<DescriptorPool> = LazyLock::new(decode_pool);

/// A fresh pool from the compiled descriptors ([`pool`] keeps the one a
/// process uses; this is what it costs, for the benches).
pub fn decode_pool() -> DescriptorPool {
    DescriptorPool::decode(ENCODED).expect("build.rs compiled a valid descriptor set")
}

/// The pool of Envoy's API, decoded at first use.
pub fn pool() -> &'static DescriptorPool {
    &POOL
}

/// The message an `Any`'s type URL (`type.googleapis.com/NAME`) or a bare
/// full name stands for, if the pool has it.
pub fn message(type_url: &str) -> Option<MessageDescriptor> {
    let name = type_url.rsplit_once('/').map_or(type_url, |(_, name)| name);
    pool().get_message_by_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_holds_envoy_types_and_both_typed_structs() {
        for name in [
            "envoy.config.cluster.v3.Cluster",
            "envoy.extensions.filters.http.lua.v3.Lua",
            "envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
            "envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
            "envoy.admin.v3.ConfigDump",
            "udpa.type.v1.TypedStruct",
            "xds.type.v3.TypedStruct",
        ] {
            assert!(message(name).is_some(), "{name} missing from the pool");
        }
        assert!(message("type.googleapis.com/envoy.config.route.v3.RouteConfiguration").is_some());
        assert!(message("type.googleapis.com/envoy.config.route.v3.NoSuchThing").is_none());
    }
}
