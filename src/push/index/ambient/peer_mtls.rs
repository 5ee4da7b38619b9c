//! PeerAuthentication as ztunnel enforces it: DENY policies on plain text,
//! as istiod's ambient index derives them (`convertPeerAuthentication`,
//! `convertedSelectorPeerAuthentications`).
//!
//! ztunnel has no mTLS mode; it denies connections without a peer
//! identity. So:
//!
//! - once any PeerAuthentication exists, one static policy
//!   ([`STATIC_STRICT`], in the root namespace) denies every connection
//!   without an identity, and a workload whose effective mode is STRICT
//!   names it in its `authorization_policies`;
//! - a selector policy outside the root namespace with `portLevelMtls`
//!   whose ports differ from its effective mode becomes a policy of its
//!   own, `converted_peer_authentication_<name>`: STRICT with exempt
//!   ports (the static policy's strictness merged in, since a DENY cannot
//!   be lifted by another policy), or plain text with STRICT ports;
//! - everything else (PERMISSIVE, DISABLE, UNSET with no STRICT above)
//!   denies nothing.
//!
//! Where several policies compete at one level istiod takes the oldest;
//! objects read from files have no creation time, so their names decide.

use crate::config::istio::{MtlsMode, PeerAuthentication, PeerMtls};
use crate::workload_api::security::{Action, Authorization, Clause, Match, Rule, Scope, StringMatch, string_match};

/// The name of the static policy that denies connections without a peer identity.
pub const STATIC_STRICT: &str = "istio_converted_static_strict";

/// The prefix of a converted selector policy's name.
pub const CONVERTED_PREFIX: &str = "converted_peer_authentication_";

/// A match of connections that have no peer identity.
fn no_identity() -> Match {
    Match {
        not_principals: vec![StringMatch { match_type: Some(string_match::MatchType::Presence(())) }],
        ..Match::default()
    }
}

/// The static STRICT policy of a mesh whose root namespace is `root_namespace`.
pub fn static_strict(root_namespace: &str) -> Authorization {
    Authorization {
        name: STATIC_STRICT.to_string(),
        namespace: root_namespace.to_string(),
        scope: Scope::WorkloadSelector as i32,
        action: Action::Deny as i32,
        rules: vec![Rule { clauses: vec![Clause { matches: vec![no_identity()] }] }],
        dry_run: false,
        extensions: Vec::new(),
    }
}

/// The mode a policy's `mtls` sets (`None`: UNSET or absent).
fn mode(mtls: Option<&PeerMtls>) -> Option<MtlsMode> {
    MtlsMode::of(mtls)
}

fn is_strict(policy: Option<&PeerAuthentication>) -> bool {
    policy.is_some_and(|p| mode(p.spec.mtls.as_ref()) == Some(MtlsMode::Strict))
}

fn is_unset(policy: &PeerAuthentication) -> bool {
    mode(policy.spec.mtls.as_ref()).is_none()
}

/// `policy` converted for ztunnel, given the namespace's and the mesh's
/// selector-less policies (the oldest of each); `None` when it is not a
/// selector policy with port modes outside the root namespace, or when
/// its ports add nothing to what the static policy enforces.
pub fn translate(
    policy: &PeerAuthentication,
    namespace_policy: Option<&PeerAuthentication>,
    mesh_policy: Option<&PeerAuthentication>,
    root_namespace: &str,
) -> Option<Authorization> {
    let spec = &policy.spec;
    if policy.metadata.namespace == root_namespace || spec.selector.is_none() || spec.port_level_mtls.is_empty() {
        return None;
    }
    let top = mode(spec.mtls.as_ref());
    let mut clauses = Vec::new();
    let mut rules = Vec::new();
    if top == Some(MtlsMode::Strict) {
        clauses.push(Clause { matches: vec![no_identity()] });
    }
    // A STRICT port adds nothing when the policy, or the level above an
    // UNSET one, is STRICT. (istiod's test reads the mesh's STRICT as
    // enough whatever the policy's own mode, under a namespace with none
    // or UNSET; meshpush reads it the same.)
    let strict_above = top == Some(MtlsMode::Strict)
        || (top.is_none() && is_strict(namespace_policy))
        || (namespace_policy.is_none_or(is_unset) && is_strict(mesh_policy));
    let mut exempt_port = false;
    for (port, port_mtls) in &spec.port_level_mtls {
        match mode(Some(port_mtls)) {
            Some(MtlsMode::Strict) => {
                if strict_above {
                    continue;
                }
                let mut m = no_identity();
                m.destination_ports = vec![*port];
                rules.push(Rule { clauses: vec![Clause { matches: vec![m] }] });
            }
            Some(MtlsMode::Permissive | MtlsMode::Disable) => {
                if matches!(top, Some(MtlsMode::Permissive | MtlsMode::Disable)) {
                    continue;
                }
                let above_not_strict = match (namespace_policy, mesh_policy) {
                    (Some(ns), _) => !is_strict(Some(ns)),
                    (None, Some(mesh)) => !is_strict(Some(mesh)),
                    (None, None) => true,
                };
                if top.is_none() && above_not_strict {
                    continue;
                }
                exempt_port = true;
                clauses
                    .push(Clause { matches: vec![Match { not_destination_ports: vec![*port], ..Match::default() }] });
            }
            None => {}
        }
    }
    if top == Some(MtlsMode::Strict) && !exempt_port {
        return None; // STRICT on every port: the static policy says it
    }
    if clauses.is_empty() && rules.is_empty() {
        return None;
    }
    let merge_strict = (is_strict(mesh_policy)
        && namespace_policy.is_none_or(|ns| is_unset(ns) || is_strict(Some(ns))))
        || is_strict(namespace_policy);
    if merge_strict && exempt_port {
        clauses.push(Clause { matches: vec![no_identity()] });
    }
    if !clauses.is_empty() {
        rules.push(Rule { clauses });
    }
    Some(Authorization {
        name: format!("{CONVERTED_PREFIX}{}", policy.metadata.name),
        namespace: policy.metadata.namespace.clone(),
        scope: Scope::WorkloadSelector as i32,
        action: Action::Deny as i32,
        rules,
        dry_run: false,
        extensions: Vec::new(),
    })
}

/// Whether `a` is older than `b`: by creation time, then (objects of files
/// have none) by name.
pub fn older(a: &PeerAuthentication, b: &PeerAuthentication) -> bool {
    let key = |p: &PeerAuthentication| {
        (p.metadata.creation_timestamp.is_none(), p.metadata.creation_timestamp.clone(), p.metadata.name.clone())
    };
    key(a) < key(b)
}

/// The oldest of `policies`.
pub fn oldest<'a>(policies: impl IntoIterator<Item = &'a PeerAuthentication>) -> Option<&'a PeerAuthentication> {
    policies.into_iter().fold(None, |best, p| match best {
        Some(b) if !older(p, b) => Some(b),
        _ => Some(p),
    })
}

/// The derived policies a workload names in its `authorization_policies`
/// (`ns/name`, sorted), from the PeerAuthentications that apply to it:
/// the mesh's and its namespace's selector-less ones and those of its
/// namespace whose selector matches it.
pub fn workload_keys(policies: &[&PeerAuthentication], root_namespace: &str) -> Vec<String> {
    let (mut mesh, mut namespace, mut workload): (Option<&PeerAuthentication>, Option<&PeerAuthentication>, _) =
        (None, None, None::<&PeerAuthentication>);
    for p in policies {
        let selects = p.spec.selector.as_ref().is_some_and(|s| !s.match_labels.is_empty());
        let slot = if !selects {
            if p.metadata.namespace == root_namespace { &mut mesh } else { &mut namespace }
        } else if p.metadata.namespace != root_namespace {
            &mut workload
        } else {
            continue;
        };
        if slot.is_none_or(|held| older(p, held)) {
            *slot = Some(p);
        }
    }
    let mut strict = mesh.is_some_and(|m| is_strict(Some(m)));
    if let Some(ns) = namespace.filter(|ns| !is_unset(ns)) {
        strict = is_strict(Some(ns));
    }
    let mut converted = None;
    if let Some(w) = workload {
        let top = mode(w.spec.mtls.as_ref());
        match top {
            Some(MtlsMode::Strict) => strict = true,
            Some(_) => strict = false,
            None => {}
        }
        let ports = || w.spec.port_level_mtls.values().map(|m| mode(Some(m)));
        let key = || format!("{}/{CONVERTED_PREFIX}{}", w.metadata.namespace, w.metadata.name);
        if !w.spec.port_level_mtls.is_empty() {
            match top {
                Some(MtlsMode::Strict) => {
                    if ports().any(|m| matches!(m, Some(MtlsMode::Permissive | MtlsMode::Disable))) {
                        converted = Some(key());
                        strict = false; // the converted policy carries the strictness
                    }
                }
                Some(_) => {
                    if ports().any(|m| m == Some(MtlsMode::Strict)) {
                        converted = Some(key());
                    }
                }
                None if strict => {
                    if ports().any(|m| m == Some(MtlsMode::Permissive)) {
                        converted = Some(key());
                        strict = false;
                    }
                }
                None => {
                    if ports().any(|m| m == Some(MtlsMode::Strict)) {
                        converted = Some(key());
                    }
                }
            }
        }
    }
    let mut keys = Vec::new();
    if strict {
        keys.push(format!("{root_namespace}/{STATIC_STRICT}"));
    }
    keys.extend(converted);
    keys.sort();
    keys
}
