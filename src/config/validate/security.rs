//! Checks for the `security.istio.io` kinds, following Istio's validation
//! (`pkg/config/validation`): what its webhook refuses is an Error here.

use super::{Checker, is_ip_or_cidr};
use crate::config::istio::{
    AUTHORIZATION_ACTIONS, AuthorizationPolicy, Condition, DRY_RUN_ANNOTATION, Operation, PEER_MTLS_MODES,
    PeerAuthentication, RequestAuthentication, Source, is_condition_key, jwks_uri_authority, parse_jwks,
    path_template_problem,
};

pub(super) fn peer_authentication(check: &mut Checker, policy: &PeerAuthentication) {
    let spec = &policy.spec;
    if let Some(mode) = spec.mtls.as_ref().and_then(|m| m.mode.as_deref()) {
        check.one_of("spec.mtls.mode", mode, &PEER_MTLS_MODES);
    }
    if !spec.port_level_mtls.is_empty() && !spec.has_selector() {
        check.error(
            "spec.portLevelMtls",
            "needs spec.selector: a mesh-wide or namespace-wide PeerAuthentication cannot set modes per port \
             (the ports are each workload's own)",
        );
    }
    for (port, mtls) in &spec.port_level_mtls {
        let path = format!("spec.portLevelMtls.{port}");
        check.port(&path, *port);
        if let Some(mode) = mtls.mode.as_deref() {
            check.one_of(format!("{path}.mode"), mode, &PEER_MTLS_MODES);
        }
    }
}

pub(super) fn authorization_policy(check: &mut Checker, policy: &AuthorizationPolicy) {
    let spec = &policy.spec;
    let action = spec.action.as_deref().unwrap_or("ALLOW");
    check.one_of("spec.action", action, &AUTHORIZATION_ACTIONS);
    match (action, &spec.provider) {
        ("CUSTOM", None) => check.error("spec.provider", "is missing: a CUSTOM policy names its external authorizer"),
        ("CUSTOM", Some(provider)) if provider.name.is_empty() => check.error(
            "spec.provider.name",
            "is empty: a CUSTOM policy names its external authorizer (Istio refuses this too)",
        ),
        ("CUSTOM", Some(_)) => {}
        (_, Some(_)) => {
            check.error("spec.provider", "is set on a policy whose action is not CUSTOM (Istio refuses this too)")
        }
        _ => {}
    }
    if action == "CUSTOM" {
        custom_checks(check, policy);
    }
    authorization_targets(check, policy);
    if let Some(value) = policy.metadata.annotations.get(DRY_RUN_ANNOTATION)
        && value != "true"
        && value != "false"
    {
        check.error(
            format!("metadata.annotations.{DRY_RUN_ANNOTATION}"),
            format!("{value:?} is neither \"true\" nor \"false\""),
        );
    }
    for (i, rule) in spec.rules.iter().enumerate() {
        let path = format!("spec.rules[{i}]");
        for (j, from) in rule.from.iter().enumerate() {
            let path = format!("{path}.from[{j}].source");
            match &from.source {
                None => check.error(&path, "is missing: a from entry names a source"),
                Some(source) => source_checks(check, &path, source),
            }
        }
        for (j, to) in rule.to.iter().enumerate() {
            let path = format!("{path}.to[{j}].operation");
            match &to.operation {
                None => check.error(&path, "is missing: a to entry names an operation"),
                Some(operation) => operation_checks(check, &path, operation),
            }
        }
        for (j, condition) in rule.when.iter().enumerate() {
            let path = format!("{path}.when[{j}]");
            condition_checks(check, &path, condition);
        }
    }
}

/// What Istio's validation refuses of a CUSTOM policy: no rules (it
/// would never ask its authorizer), and the rule parts its RBAC filter
/// cannot match where it runs — ahead of the JWT filter, on identities
/// Istio does not support there; and a dry run, which istiod enforces.
fn custom_checks(check: &mut Checker, policy: &AuthorizationPolicy) {
    let spec = &policy.spec;
    if spec.rules.is_empty() {
        check.error(
            "spec.rules",
            "is empty: a CUSTOM policy without rules never asks its authorizer (Istio refuses it; an empty rule {} \
             asks it for every request)",
        );
    }
    let refused = "is not supported with action CUSTOM (Istio refuses it too)";
    for (i, rule) in spec.rules.iter().enumerate() {
        for (j, source) in rule.from.iter().enumerate().filter_map(|(j, f)| Some((j, f.source.as_ref()?))) {
            for (field, _) in source.identity_fields().filter(|(_, values)| !values.is_empty()) {
                check.error(format!("spec.rules[{i}].from[{j}].source.{field}"), refused);
            }
        }
        for (j, condition) in rule.when.iter().enumerate() {
            let key = condition.key.as_str();
            let identity = ["source.namespace", "source.serviceAccount", "source.trustDomain", "source.principal"];
            if identity.contains(&key) || key.starts_with("request.auth.") {
                check.error(format!("spec.rules[{i}].when[{j}].key"), format!("{key:?} {refused}"));
            }
        }
    }
    if policy.metadata.annotations.get(DRY_RUN_ANNOTATION).is_some_and(|v| v == "true") {
        check.warning(
            format!("metadata.annotations.{DRY_RUN_ANNOTATION}"),
            "does not make a CUSTOM policy a dry run: istiod puts its rules in the enforced DENY rules of the \
             policy's RBAC filter, so the requests they match are denied without asking the authorizer; meshpush \
             generates the same",
        );
    }
}

pub(super) fn request_authentication(check: &mut Checker, policy: &RequestAuthentication) {
    let spec = &policy.spec;
    policy_targets(check, spec.selector.is_some(), spec.target_ref.is_some(), !spec.target_refs.is_empty());
    for (i, rule) in spec.jwt_rules.iter().enumerate() {
        let path = format!("spec.jwtRules[{i}]");
        strings(check, &format!("{path}.audiences"), &rule.audiences);
        if rule.issuer.is_empty() && rule.jwks_uri().is_none() {
            check.error(format!("{path}.issuer"), "is empty, and so is jwksUri: a rule names at least one");
        }
        if let Some(uri) = rule.jwks_uri()
            && let Err(why) = jwks_uri_authority(uri)
        {
            check.error(format!("{path}.jwksUri"), why);
        }
        if let Some(jwks) = rule.inline_jwks() {
            match parse_jwks(jwks) {
                Err(why) => check.error(format!("{path}.jwks"), format!("is not a JWKS: {why}")),
                Ok(set) if set.has_private_members => check.warning(
                    format!("{path}.jwks"),
                    "holds private key material: meshpush sends Envoy only the public members of asymmetric keys \
                     (a symmetric key is the secret itself, and is sent as it is)",
                ),
                Ok(_) => {}
            }
        }
        for (j, header) in rule.from_headers.iter().enumerate() {
            if header.name.is_empty() {
                check.error(format!("{path}.fromHeaders[{j}].name"), "is empty");
            }
        }
        strings(check, &format!("{path}.fromParams"), &rule.from_params);
        strings(check, &format!("{path}.fromCookies"), &rule.from_cookies);
        for (j, output) in rule.output_claim_to_headers.iter().enumerate() {
            let path = format!("{path}.outputClaimToHeaders[{j}]");
            if output.header.is_empty() || output.claim.is_empty() {
                check.error(&path, "needs both header and claim");
            } else if !is_header_name(&output.header) {
                check.error(format!("{path}.header"), format!("{:?} is not an HTTP header name", output.header));
            }
        }
        if let Some(header) = rule.output_payload_to_header.as_deref().filter(|h| !h.is_empty())
            && !is_header_name(header)
        {
            check.error(format!("{path}.outputPayloadToHeader"), format!("{header:?} is not an HTTP header name"));
        }
        if rule.timeout.is_some_and(|t| t.0.is_zero()) {
            check.error(format!("{path}.timeout"), "is zero: a key set fetch needs time");
        }
    }
}

/// An AuthorizationPolicy's selector and targets: one or the other, and
/// each target as Istio takes it: a name, no namespace (no reference
/// crosses namespaces), and a Service, ServiceEntry, Gateway or
/// GatewayClass. A waypoint applies those that name a Service or
/// ServiceEntry bound to it, its Gateway, or (from the root namespace) the
/// GatewayClass `istio-waypoint`; a Gateway API gateway's are not applied,
/// and that is said.
fn authorization_targets(check: &mut Checker, policy: &crate::config::istio::AuthorizationPolicy) {
    let spec = &policy.spec;
    let targets = spec.target_ref.is_some() || !spec.target_refs.is_empty();
    if targets && spec.selector.is_some() {
        check.error("spec.selector", "cannot be set with targetRef or targetRefs (Istio refuses this too)");
        return;
    }
    let refs = spec.target_ref.iter().map(|t| ("spec.targetRef".to_string(), t));
    let refs = refs.chain(spec.target_refs.iter().enumerate().map(|(i, t)| (format!("spec.targetRefs[{i}]"), t)));
    for (path, target) in refs {
        if target.name.is_empty() {
            check.error(format!("{path}.name"), "is required");
        }
        if target.namespace.as_deref().is_some_and(|n| !n.is_empty()) {
            check.error(
                format!("{path}.namespace"),
                "must not be set: a target is in the policy's namespace (Istio refuses cross-namespace targets)",
            );
        }
        let group = target.group.as_deref().filter(|g| !g.is_empty()).unwrap_or("core");
        match (group, target.kind.as_str()) {
            ("core", "Service") | ("networking.istio.io", "ServiceEntry") => {}
            ("gateway.networking.k8s.io", "GatewayClass") => {}
            ("gateway.networking.k8s.io", "Gateway") => check.warning(
                path,
                "applied only when the Gateway is a waypoint's: a Gateway API gateway's policies by targetRef are \
                 not applied by meshpush (select its pods with a selector)",
            ),
            (group, kind) => check.error(
                format!("{path}.kind"),
                format!(
                    "{}/{}: a target is a Service, a networking.istio.io ServiceEntry, or a gateway.networking.k8s.io \
                     Gateway or GatewayClass",
                    crate::text::shown(group),
                    crate::text::shown(kind)
                ),
            ),
        }
    }
}

/// A workload policy's selector and targets: one or the other; targets
/// name Gateway API gateways or waypoints, which meshpush does not serve.
fn policy_targets(check: &mut Checker, selector: bool, target_ref: bool, target_refs: bool) {
    if (target_ref || target_refs) && selector {
        check.error("spec.selector", "cannot be set with targetRef or targetRefs (Istio refuses this too)");
    } else if target_ref || target_refs {
        let path = if target_ref { "spec.targetRef" } else { "spec.targetRefs" };
        check.unsupported(
            path,
            Some("it selects Gateway API gateways or waypoints, which meshpush does not serve: the policy applies to no workload"),
        );
    }
}

/// An HTTP header name (RFC 9110 token characters).
fn is_header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn source_checks(check: &mut Checker, path: &str, source: &Source) {
    let lists = source.fields();
    if lists.iter().all(|(_, values)| values.is_empty()) {
        check.error(path, "sets nothing: a source needs at least one field (Istio refuses an empty one)");
    }
    for (field, values) in lists {
        strings(check, &format!("{path}.{field}"), values);
        if Source::is_ip_block_field(field) {
            for (i, value) in values.iter().enumerate() {
                if !is_ip_or_cidr(value) {
                    check.error(
                        format!("{path}.{field}[{i}]"),
                        format!("{value:?} is neither an IP address nor a CIDR range"),
                    );
                }
            }
        }
    }
}

fn operation_checks(check: &mut Checker, path: &str, operation: &Operation) {
    let lists: [(&str, &Vec<String>); 8] = [
        ("hosts", &operation.hosts),
        ("notHosts", &operation.not_hosts),
        ("ports", &operation.ports),
        ("notPorts", &operation.not_ports),
        ("methods", &operation.methods),
        ("notMethods", &operation.not_methods),
        ("paths", &operation.paths),
        ("notPaths", &operation.not_paths),
    ];
    if lists.iter().all(|(_, values)| values.is_empty()) {
        check.error(path, "sets nothing: an operation needs at least one field (Istio refuses an empty one)");
    }
    for (field, values) in lists {
        strings(check, &format!("{path}.{field}"), values);
        if field.to_ascii_lowercase().ends_with("paths") {
            for (i, value) in values.iter().enumerate() {
                if let Some(why) = path_template_problem(value) {
                    check.error(format!("{path}.{field}[{i}]"), format!("is not a valid path template: {why}"));
                }
            }
        }
        if field.to_ascii_lowercase().ends_with("ports") {
            for (i, value) in values.iter().enumerate() {
                if value.parse::<u16>().is_err() {
                    check.error(format!("{path}.{field}[{i}]"), format!("{value:?} is not a port number (0 to 65535)"));
                }
            }
        }
    }
}

fn condition_checks(check: &mut Checker, path: &str, condition: &Condition) {
    let key = condition.key.as_str();
    if !is_condition_key(key) {
        check.error(
            format!("{path}.key"),
            format!("{key:?} is not an attribute Istio knows (source.ip, request.headers[NAME], destination.port, …)"),
        );
        return;
    }
    if condition.values.is_empty() && condition.not_values.is_empty() {
        check.error(path, "has neither values nor notValues");
    }
    strings(check, &format!("{path}.values"), &condition.values);
    strings(check, &format!("{path}.notValues"), &condition.not_values);
    let cidrs = matches!(key, "source.ip" | "remote.ip" | "destination.ip");
    let ports = key == "destination.port";
    for (field, values) in [("values", &condition.values), ("notValues", &condition.not_values)] {
        for (i, value) in values.iter().enumerate() {
            if cidrs && !is_ip_or_cidr(value) {
                check.error(
                    format!("{path}.{field}[{i}]"),
                    format!("{value:?} is neither an IP address nor a CIDR range"),
                );
            }
            if ports && value.parse::<u16>().is_err() {
                check.error(format!("{path}.{field}[{i}]"), format!("{value:?} is not a port number (0 to 65535)"));
            }
        }
    }
    if let Some(rest) = key.strip_prefix("experimental.envoy.filters.")
        && !rest
            .split_once('[')
            .is_some_and(|(name, field)| !name.is_empty() && field.len() > 1 && field.ends_with(']'))
    {
        check
            .error(format!("{path}.key"), format!("{key:?} is not of the form experimental.envoy.filters.NAME[FIELD]"));
    }
}

/// Values of a list: none empty.
fn strings(check: &mut Checker, path: &str, values: &[String]) {
    for (i, value) in values.iter().enumerate() {
        if value.is_empty() {
            check.error(format!("{path}[{i}]"), "is empty");
        }
    }
}
