//! `AuthorizationPolicy` (`security.istio.io`): which requests a
//! workload's inbound ports let through.
//!
//! The policies that select a workload (by the same three levels as
//! PeerAuthentication: the root namespace's without a selector, the
//! workload namespace's without one, and those whose selector matches)
//! are all applied: CUSTOM first (the mesh config's external authorizer
//! decides the requests its rules match), then DENY before ALLOW; AUDIT
//! only marks requests. The translation into Envoy's RBAC and ext_authz
//! filters lives in `generate::authz`; this module is the object as written. The types are `Eq + Hash + Ord` so that
//! the policies of a workload can be part of its inbound key.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::ObjectMeta;

/// Istio AuthorizationPolicy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AuthorizationPolicy {
    /// Metadata (the annotation `istio.io/dry-run: "true"` makes its
    /// rules shadow rules: evaluated and counted, never enforced).
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: AuthorizationPolicySpec,
}

/// `AuthorizationPolicy.spec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AuthorizationPolicySpec {
    /// The workloads of the policy's namespace it applies to; absent (or no
    /// labels): the whole namespace, or the mesh in the root namespace.
    pub selector: Option<WorkloadLabels>,
    /// A Gateway API resource or Service it applies to instead (waypoints
    /// and Gateway API gateways, which meshpush does not serve).
    pub target_ref: Option<TargetRef>,
    /// The same, several.
    pub target_refs: Vec<TargetRef>,
    /// The rules: a request matches the policy when it matches any rule.
    pub rules: Vec<AuthorizationRule>,
    /// `ALLOW` (the default), `DENY`, `AUDIT` or `CUSTOM`.
    pub action: Option<String>,
    /// The external authorizer of a CUSTOM policy.
    pub provider: Option<Provider>,
}

/// A label selector (`matchLabels`), hashable.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WorkloadLabels {
    /// Labels that must all match.
    pub match_labels: BTreeMap<String, String>,
}

/// `istio.type.v1beta1.PolicyTargetReference`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TargetRef {
    /// API group.
    pub group: Option<String>,
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: Option<String>,
}

/// `AuthorizationPolicy.ExtensionProvider`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Provider {
    /// The mesh config's extension provider.
    pub name: String,
}

/// One rule: it matches a request that matches any `from`, any `to` and
/// every `when` (an absent list matches everything).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AuthorizationRule {
    /// Who sends the request.
    pub from: Vec<RuleFrom>,
    /// What it asks for.
    pub to: Vec<RuleTo>,
    /// Further conditions.
    pub when: Vec<Condition>,
}

/// `Rule.From`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RuleFrom {
    /// The source.
    pub source: Option<Source>,
}

/// `Rule.To`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RuleTo {
    /// The operation.
    pub operation: Option<Operation>,
}

/// Who sends a request: each field set must match (values of one field: any).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
#[allow(missing_docs)] // Istio's field names, each with its `not` twin.
pub struct Source {
    pub principals: Vec<String>,
    pub not_principals: Vec<String>,
    pub request_principals: Vec<String>,
    pub not_request_principals: Vec<String>,
    pub namespaces: Vec<String>,
    pub not_namespaces: Vec<String>,
    pub service_accounts: Vec<String>,
    pub not_service_accounts: Vec<String>,
    pub ip_blocks: Vec<String>,
    pub not_ip_blocks: Vec<String>,
    pub remote_ip_blocks: Vec<String>,
    pub not_remote_ip_blocks: Vec<String>,
    pub trust_domains: Vec<String>,
    pub not_trust_domains: Vec<String>,
}

impl Source {
    /// Each field with its values, named as Istio names it.
    pub fn fields(&self) -> [(&'static str, &[String]); 14] {
        [
            ("principals", &self.principals),
            ("notPrincipals", &self.not_principals),
            ("requestPrincipals", &self.request_principals),
            ("notRequestPrincipals", &self.not_request_principals),
            ("namespaces", &self.namespaces),
            ("notNamespaces", &self.not_namespaces),
            ("serviceAccounts", &self.service_accounts),
            ("notServiceAccounts", &self.not_service_accounts),
            ("ipBlocks", &self.ip_blocks),
            ("notIpBlocks", &self.not_ip_blocks),
            ("remoteIpBlocks", &self.remote_ip_blocks),
            ("notRemoteIpBlocks", &self.not_remote_ip_blocks),
            ("trustDomains", &self.trust_domains),
            ("notTrustDomains", &self.not_trust_domains),
        ]
    }

    /// The fields that name the peer by who it is (its certificate's
    /// identity, its request's JWT) rather than by its address: every field
    /// but the IP blocks.
    pub fn identity_fields(&self) -> impl Iterator<Item = (&'static str, &[String])> {
        self.fields().into_iter().filter(|(field, _)| !Source::is_ip_block_field(field))
    }

    /// Whether a field of [`Source::fields`] lists addresses (`ipBlocks`,
    /// `remoteIpBlocks` and their `not` twins).
    pub fn is_ip_block_field(field: &str) -> bool {
        matches!(field, "ipBlocks" | "notIpBlocks" | "remoteIpBlocks" | "notRemoteIpBlocks")
    }
}

/// What a request asks for: each field set must match (values of one field: any).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
#[allow(missing_docs)] // Istio's field names, each with its `not` twin.
pub struct Operation {
    pub hosts: Vec<String>,
    pub not_hosts: Vec<String>,
    pub ports: Vec<String>,
    pub not_ports: Vec<String>,
    pub methods: Vec<String>,
    pub not_methods: Vec<String>,
    pub paths: Vec<String>,
    pub not_paths: Vec<String>,
}

/// A `when` condition on an attribute of the request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Condition {
    /// The attribute (`request.headers[NAME]`, `source.ip`, …).
    pub key: String,
    /// It matches one of these.
    pub values: Vec<String>,
    /// It matches none of these.
    pub not_values: Vec<String>,
}

/// The actions meshpush enforces, as Istio spells them.
pub const AUTHORIZATION_ACTIONS: [&str; 4] = ["ALLOW", "DENY", "AUDIT", "CUSTOM"];

/// The annotation that makes a policy a dry run.
pub const DRY_RUN_ANNOTATION: &str = "istio.io/dry-run";

/// The `when` keys Istio knows: exact ones, and prefixes of keyed ones
/// (`request.headers[NAME]`).
pub const CONDITION_KEYS: [&str; 11] = [
    "source.ip",
    "remote.ip",
    "source.namespace",
    "source.principal",
    "source.serviceAccount",
    "source.trustDomain",
    "request.auth.principal",
    "request.auth.audiences",
    "request.auth.presenter",
    "destination.ip",
    "destination.port",
];

/// Whether `key` is a `when` key Istio knows (`connection.sni` included).
pub fn is_condition_key(key: &str) -> bool {
    CONDITION_KEYS.contains(&key)
        || key == "connection.sni"
        || (key.starts_with("request.headers[") && key.ends_with(']') && key.len() > "request.headers[]".len())
        || (key.starts_with("request.auth.claims[") && key.ends_with(']'))
        || key.starts_with("experimental.envoy.filters.")
}

/// Istio's path template for one path segment.
pub const ONE_SEGMENT: &str = "{*}";
/// Istio's path template for every segment left (last only).
pub const ANY_SEGMENTS: &str = "{**}";

/// Why `path` is not a path template Istio (and Envoy's URI template
/// matcher) takes, or `None` when it is one, or has no template at all:
/// `{*}` and `{**}` stand for whole segments, nothing follows `{**}`, and
/// the other segments of a template are plain path characters.
pub fn path_template_problem(path: &str) -> Option<String> {
    let templated = path.contains(ONE_SEGMENT) || path.contains(ANY_SEGMENTS);
    let mut rest_matched = false;
    for segment in path.trim_matches('/').split('/') {
        if segment == ONE_SEGMENT || segment == ANY_SEGMENTS {
            if rest_matched {
                return Some(format!("{path:?}: nothing may follow {ANY_SEGMENTS}"));
            }
            rest_matched = segment == ANY_SEGMENTS;
            continue;
        }
        if segment.contains(['{', '}']) {
            return Some(format!("{path:?}: {{ and }} appear only as whole segments {ONE_SEGMENT} and {ANY_SEGMENTS}"));
        }
        let literal = |c: char| c.is_ascii_alphanumeric() || "-._~%!$&'()+,;:@=".contains(c);
        if templated && !segment.chars().all(literal) {
            return Some(format!(
                "{path:?}: segment {segment:?} of a template holds a character a path template cannot"
            ));
        }
    }
    None
}
