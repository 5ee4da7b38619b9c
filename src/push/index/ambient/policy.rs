//! An AuthorizationPolicy as ztunnel enforces it: istiod's ambient
//! translation (`convertAuthorizationPolicy`), to an `istio.security.Authorization`.
//!
//! ztunnel sees connections, not requests, so only a policy's L4 parts
//! carry over: ports, source and destination addresses, namespaces,
//! service accounts and principals (`from`, `to.operation.ports` and the
//! `when` keys `source.ip`, `source.namespace`, `source.principal`,
//! `destination.ip`, `destination.port`). What does not carry over is
//! reported in [`Translated::notes`], and changes what is enforced exactly
//! as in istiod:
//!
//! - in an ALLOW policy, a rule that names an HTTP attribute is left out
//!   whole (ztunnel could never see it match), so less is allowed;
//! - in a DENY policy, such a rule keeps its L4 parts, so more is denied;
//!   a part left with nothing is an empty match, which ztunnel skips;
//! - a policy with `targetRef(s)` is for waypoints, not ztunnel: none;
//! - AUDIT and CUSTOM have no ztunnel form: none;
//! - a dry-run policy is sent as one only when
//!   `AMBIENT_ENABLE_DRY_RUN_AUTHORIZATION_POLICY` is on; otherwise none
//!   (an older ztunnel would enforce it).
//!
//! Rules are OR'd, the clauses of a rule AND'd, the matches of a clause
//! OR'd. A rule is up to three kinds of clause: one for all its `to`s, one
//! for all its `from`s, one per `when`.

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::config::istio::{AuthorizationPolicy, AuthorizationRule, DRY_RUN_ANNOTATION, Operation, Source};
use crate::workload_api::security::{
    Action, Address, Authorization, Clause, Match, Rule, Scope, ServiceAccountMatch, StringMatch, string_match,
};

/// A policy translated for ztunnel.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Translated {
    /// What ztunnel is sent; `None` when the policy is not for ztunnel
    /// (a waypoint's) or has no ztunnel form (then `notes` says why).
    pub authorization: Option<Authorization>,
    /// What of the policy ztunnel does not enforce, and what happens instead.
    pub notes: Vec<String>,
}

/// The `when` keys ztunnel enforces.
const L4_CONDITION_KEYS: [&str; 5] =
    ["source.ip", "source.namespace", "source.principal", "destination.ip", "destination.port"];

/// Translates `policy` for ztunnel; `root_namespace` makes a selector-less
/// policy mesh-wide, and `dry_run_enabled` is the
/// `AMBIENT_ENABLE_DRY_RUN_AUTHORIZATION_POLICY` switch.
pub fn translate(policy: &AuthorizationPolicy, root_namespace: &str, dry_run_enabled: bool) -> Translated {
    let meta = &policy.metadata;
    let spec = &policy.spec;
    let dry_run = match meta.annotations.get(DRY_RUN_ANNOTATION).map(String::as_str) {
        None | Some("") => false,
        Some(value) => crate::os::parse_switch(value).unwrap_or(false),
    };
    if dry_run && !dry_run_enabled {
        return Translated {
            authorization: None,
            notes: vec![format!(
                "a dry-run policy is not sent to ztunnel unless AMBIENT_ENABLE_DRY_RUN_AUTHORIZATION_POLICY is on \
                 ({DRY_RUN_ANNOTATION}); ztunnel enforces nothing of it"
            )],
        };
    }
    if spec.target_ref.is_some() || !spec.target_refs.is_empty() {
        return Translated::default();
    }
    let action = match spec.action.as_deref() {
        None | Some("ALLOW") => Action::Allow,
        Some("DENY") => Action::Deny,
        Some(other) => {
            return Translated {
                authorization: None,
                notes: vec![format!("ztunnel has no {other} action; ztunnel enforces nothing of this policy")],
            };
        }
    };
    let scope = match &spec.selector {
        Some(_) => Scope::WorkloadSelector,
        None if meta.namespace == root_namespace => Scope::Global,
        None => Scope::Namespace,
    };
    let mut http = BTreeSet::new();
    let mut trust_domains = false;
    let mut rules = Vec::new();
    for rule in &spec.rules {
        trust_domains |= rule.from.iter().filter_map(|f| f.source.as_ref()).any(has_trust_domains);
        if let Some(clauses) = clauses(action, rule, &meta.namespace, &mut http) {
            rules.push(Rule { clauses });
        }
    }
    let mut notes = Vec::new();
    if !http.is_empty() {
        let found = http.into_iter().collect::<Vec<_>>().join(", ");
        let effect = match action {
            Action::Deny if !rules.iter().any(can_match) => {
                "what is left of this DENY policy can never match: ztunnel denies nothing by it \
                 (a waypoint, with the policy's targetRefs, enforces it)"
            }
            Action::Deny => "this DENY policy is enforced without them, so it denies more than it says",
            Action::Allow => {
                "the rules of this ALLOW policy that name them are left out, so it allows less than it says"
            }
        };
        notes.push(format!(
            "ztunnel does not see HTTP attributes ({found}); a waypoint proxy enforces them in ambient mode; {effect}"
        ));
    }
    if trust_domains {
        notes.push(
            "ztunnel has no trust domain match: source trustDomains and notTrustDomains are not enforced by it, \
             the rest of each source is"
                .to_string(),
        );
    }
    let authorization = Authorization {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        scope: scope as i32,
        action: action as i32,
        rules,
        dry_run,
        extensions: Vec::new(),
    };
    Translated { authorization: Some(authorization), notes }
}

/// The clauses of one rule, or `None` when an ALLOW rule names an HTTP
/// attribute (collected into `http`). An empty rule gives no clauses:
/// ztunnel matches it always.
fn clauses(
    action: Action,
    rule: &AuthorizationRule,
    namespace: &str,
    http: &mut BTreeSet<String>,
) -> Option<Vec<Clause>> {
    let (no_operation, no_source) = (Operation::default(), Source::default());
    let mut has_http = false;
    let mut clauses = Vec::new();
    let to: Vec<Match> = rule
        .to
        .iter()
        .map(|to| {
            let op = to.operation.as_ref().unwrap_or(&no_operation);
            has_http |= http_operation_fields(op, http);
            Match {
                destination_ports: ports(&op.ports),
                not_destination_ports: ports(&op.not_ports),
                ..Match::default()
            }
        })
        .collect();
    if !to.is_empty() {
        clauses.push(Clause { matches: to });
    }
    let from: Vec<Match> = rule
        .from
        .iter()
        .map(|from| {
            let source = from.source.as_ref().unwrap_or(&no_source);
            has_http |= http_source_fields(source, http);
            Match {
                source_ips: addresses(&source.ip_blocks),
                not_source_ips: addresses(&source.not_ip_blocks),
                namespaces: string_matches(&source.namespaces),
                not_namespaces: string_matches(&source.not_namespaces),
                service_accounts: service_accounts(&source.service_accounts, namespace),
                not_service_accounts: service_accounts(&source.not_service_accounts, namespace),
                principals: string_matches(&source.principals),
                not_principals: string_matches(&source.not_principals),
                ..Match::default()
            }
        })
        .collect();
    if !from.is_empty() {
        clauses.push(Clause { matches: from });
    }
    for when in &rule.when {
        if !L4_CONDITION_KEYS.contains(&when.key.as_str()) {
            has_http = true;
            http.insert(when.key.clone());
        }
        let (values, not) = (&when.values, &when.not_values);
        let mut m = Match::default();
        match when.key.as_str() {
            "source.namespace" => (m.namespaces, m.not_namespaces) = (string_matches(values), string_matches(not)),
            "source.principal" => (m.principals, m.not_principals) = (string_matches(values), string_matches(not)),
            "source.ip" => (m.source_ips, m.not_source_ips) = (addresses(values), addresses(not)),
            "destination.ip" => (m.destination_ips, m.not_destination_ips) = (addresses(values), addresses(not)),
            "destination.port" => (m.destination_ports, m.not_destination_ports) = (ports(values), ports(not)),
            _ => {}
        }
        clauses.push(Clause { matches: vec![m] });
    }
    if action == Action::Allow && has_http {
        return None;
    }
    Some(clauses)
}

/// Whether `source` names trust domains (which ztunnel cannot match).
fn has_trust_domains(source: &Source) -> bool {
    !source.trust_domains.is_empty() || !source.not_trust_domains.is_empty()
}

/// Records the HTTP fields `op` sets; whether it sets any.
fn http_operation_fields(op: &Operation, http: &mut BTreeSet<String>) -> bool {
    let fields = [
        ("hosts", &op.hosts),
        ("notHosts", &op.not_hosts),
        ("methods", &op.methods),
        ("notMethods", &op.not_methods),
        ("paths", &op.paths),
        ("notPaths", &op.not_paths),
    ];
    record_set(&fields, http)
}

/// Records the fields of `source` only a request has; whether it sets any.
fn http_source_fields(source: &Source, http: &mut BTreeSet<String>) -> bool {
    let fields = [
        ("remoteIpBlocks", &source.remote_ip_blocks),
        ("notRemoteIpBlocks", &source.not_remote_ip_blocks),
        ("requestPrincipals", &source.request_principals),
        ("notRequestPrincipals", &source.not_request_principals),
    ];
    record_set(&fields, http)
}

fn record_set(fields: &[(&str, &Vec<String>)], http: &mut BTreeSet<String>) -> bool {
    let mut any = false;
    for (name, values) in fields {
        if !values.is_empty() {
            http.insert((*name).to_string());
            any = true;
        }
    }
    any
}

/// Whether ztunnel can ever see `rule` match: a rule with no clauses
/// always does; otherwise each clause needs a match that is not empty
/// (ztunnel skips empty matches).
fn can_match(rule: &Rule) -> bool {
    rule.clauses.iter().all(|c| c.matches.iter().any(|m| *m != Match::default()))
}

/// Istio's string patterns: `*` any value, `*x` a suffix, `x*` a prefix,
/// anything else exact.
pub(super) fn string_matches(values: &[String]) -> Vec<StringMatch> {
    values
        .iter()
        .map(|v| {
            let kind = if v == "*" {
                string_match::MatchType::Presence(())
            } else if let Some(suffix) = v.strip_prefix('*') {
                string_match::MatchType::Suffix(suffix.to_string())
            } else if let Some(prefix) = v.strip_suffix('*') {
                string_match::MatchType::Prefix(prefix.to_string())
            } else {
                string_match::MatchType::Exact(v.clone())
            };
            StringMatch { match_type: Some(kind) }
        })
        .collect()
}

/// `ns/sa`, or a bare `sa` of the policy's namespace.
fn service_accounts(values: &[String], namespace: &str) -> Vec<ServiceAccountMatch> {
    values
        .iter()
        .map(|v| match v.split_once('/') {
            Some((ns, sa)) => ServiceAccountMatch { namespace: ns.to_string(), service_account: sa.to_string() },
            None => ServiceAccountMatch { namespace: namespace.to_string(), service_account: v.clone() },
        })
        .collect()
}

/// Port numbers; what is not one (a name, past 65535) is left out, as
/// istiod leaves it out (validation reports it).
fn ports(values: &[String]) -> Vec<u32> {
    values.iter().filter_map(|v| v.parse::<u32>().ok()).filter(|p| *p <= 65535).collect()
}

/// Addresses and CIDR ranges as ztunnel matches them (a bare address is a
/// full-length prefix); what does not parse is left out, as istiod leaves
/// it out (validation reports it).
fn addresses(values: &[String]) -> Vec<Address> {
    values
        .iter()
        .filter_map(|v| {
            let (ip, len) = match v.split_once('/') {
                Some((ip, len)) => {
                    let ip: IpAddr = ip.parse().ok()?;
                    let len: u32 = len.parse().ok()?;
                    (ip, len)
                }
                None => {
                    let ip: IpAddr = v.parse().ok()?;
                    (ip, if ip.is_ipv4() { 32 } else { 128 })
                }
            };
            let max = if ip.is_ipv4() { 32 } else { 128 };
            if len > max {
                return None;
            }
            let address = match ip {
                IpAddr::V4(v4) => v4.octets().to_vec(),
                IpAddr::V6(v6) => v6.octets().to_vec(),
            };
            Some(Address { address, length: len })
        })
        .collect()
}
