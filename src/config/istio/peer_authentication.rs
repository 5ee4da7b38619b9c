//! `PeerAuthentication` (`security.istio.io`): whether a workload's inbound
//! ports take mutual TLS from other sidecars, plain text, or both.
//!
//! Istio resolves one mode per workload port from three levels — a policy
//! with no selector in the root namespace (mesh-wide), one with no selector
//! in the workload's namespace, and one whose selector matches the
//! workload — each overriding the one before unless its mode is `UNSET`;
//! `portLevelMtls` of the workload policy overrides per port. The
//! resolution lives in the push layer (`push::index::peer_authentication`);
//! this module is the object as written.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::LabelSelector;
use crate::config::ObjectMeta;

/// Istio PeerAuthentication.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PeerAuthentication {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: PeerAuthenticationSpec,
}

/// `PeerAuthentication.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PeerAuthenticationSpec {
    /// The workloads of the policy's namespace it applies to; absent (or no
    /// labels): the whole namespace, or the mesh in the root namespace.
    pub selector: Option<LabelSelector>,
    /// The mode of every port.
    pub mtls: Option<PeerMtls>,
    /// Modes of single ports (the workload's own port numbers); Istio
    /// applies them only with a selector. A port is a YAML number or, as
    /// JSON (and MCP-over-xDS) writes map keys, a string of one.
    #[serde(deserialize_with = "port_keys")]
    pub port_level_mtls: BTreeMap<u32, PeerMtls>,
}

/// A map keyed by port, its keys numbers or strings of numbers.
fn port_keys<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<BTreeMap<u32, PeerMtls>, D::Error> {
    #[derive(Deserialize, PartialEq, Eq, PartialOrd, Ord)]
    #[serde(untagged)]
    enum Port {
        Number(u32),
        Text(String),
    }
    let raw = <BTreeMap<Port, PeerMtls> as Deserialize>::deserialize(deserializer)?;
    raw.into_iter()
        .map(|(port, mode)| match port {
            Port::Number(n) => Ok((n, mode)),
            Port::Text(text) => text
                .parse::<u32>()
                .map(|n| (n, mode))
                .map_err(|_| serde::de::Error::custom(format!("port {:?} is not a number", crate::text::shown(&text)))),
        })
        .collect()
}

impl PeerAuthenticationSpec {
    /// Whether the policy selects workloads (else it covers a namespace or the mesh).
    pub fn has_selector(&self) -> bool {
        self.selector.as_ref().is_some_and(|s| !s.match_labels.is_empty())
    }
}

/// `PeerAuthentication.MutualTLS`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PeerMtls {
    /// `UNSET`, `DISABLE`, `PERMISSIVE` or `STRICT`.
    pub mode: Option<String>,
}

/// The modes `PeerMtls.mode` may take, as Istio spells them.
pub const PEER_MTLS_MODES: [&str; 4] = ["UNSET", "DISABLE", "PERMISSIVE", "STRICT"];

/// A resolved mutual TLS mode of an inbound port (`UNSET` resolves to the
/// level above; with no policy at all, Istio's default is PERMISSIVE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Default)]
pub enum MtlsMode {
    /// Plain text only.
    Disable,
    /// Mutual TLS from sidecars and plain text from anyone, on one port.
    #[default]
    Permissive,
    /// Mutual TLS only.
    Strict,
}

impl MtlsMode {
    /// The mode a policy's `mode` sets; `None` for `UNSET` or none (inherit).
    pub fn of(mtls: Option<&PeerMtls>) -> Option<MtlsMode> {
        match mtls?.mode.as_deref()? {
            "DISABLE" => Some(MtlsMode::Disable),
            "PERMISSIVE" => Some(MtlsMode::Permissive),
            "STRICT" => Some(MtlsMode::Strict),
            _ => None,
        }
    }

    /// Istio's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            MtlsMode::Disable => "DISABLE",
            MtlsMode::Permissive => "PERMISSIVE",
            MtlsMode::Strict => "STRICT",
        }
    }
}
