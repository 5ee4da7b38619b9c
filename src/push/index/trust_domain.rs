//! The mesh's trust domains: its `trustDomain` and `trustDomainAliases`,
//! which Istio treats as one (`pilot/pkg/security/trustdomain`).
//!
//! Role: an AuthorizationPolicy's source principals name a trust domain;
//! istiod rewrites each principal whose trust domain is one of the mesh's,
//! or `cluster.local` (which stands for the mesh's own whatever it is), into
//! one principal per trust domain of the mesh, and expands a `trustDomains`
//! value that is one of them into all of them. [`TrustDomains::migrate`]
//! does the same to a policy's rules before they are generated, so a
//! policy written for `cluster.local` holds in a mesh of another trust
//! domain, and a workload whose certificate still carries an alias is
//! matched during a trust domain migration. The SPIFFE names a client
//! checks on a mesh service's certificates are expanded the same way
//! ([`TrustDomains::expand_identity`]).
//!
//! Invariant: with the trust domain `cluster.local` and no alias, nothing
//! changes: a policy is generated from its own words.

use std::sync::Arc;

use crate::config::istio::{AuthorizationPolicySpec, Condition};
use crate::config::mesh::{DEFAULT_TRUST_DOMAIN, MeshConfig};

/// The mesh's trust domain first, then its aliases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustDomains(Vec<Arc<str>>);

impl TrustDomains {
    /// The trust domains of `mesh`.
    pub fn of(mesh: &MeshConfig) -> TrustDomains {
        let mut all = vec![mesh.trust_domain.clone()];
        for alias in mesh.trust_domain_aliases.iter() {
            if !all.contains(alias) {
                all.push(alias.clone());
            }
        }
        TrustDomains(all)
    }

    /// Whether rewriting would change nothing: `cluster.local` alone.
    pub fn is_identity(&self) -> bool {
        self.0.len() == 1 && &*self.0[0] == DEFAULT_TRUST_DOMAIN
    }

    /// `spec` with its source principals and trust domains rewritten for
    /// the mesh's trust domains, in `from` sources and `when` conditions.
    pub fn migrate(&self, spec: &AuthorizationPolicySpec) -> AuthorizationPolicySpec {
        let mut spec = spec.clone();
        if self.is_identity() {
            return spec;
        }
        for rule in &mut spec.rules {
            for source in rule.from.iter_mut().filter_map(|f| f.source.as_mut()) {
                source.principals = self.principals(&source.principals);
                source.not_principals = self.principals(&source.not_principals);
                source.trust_domains = self.expand(&source.trust_domains);
                source.not_trust_domains = self.expand(&source.not_trust_domains);
            }
            for condition in &mut rule.when {
                self.migrate_condition(condition);
            }
        }
        spec
    }

    fn migrate_condition(&self, condition: &mut Condition) {
        match condition.key.as_str() {
            "source.principal" => {
                condition.values = self.principals(&condition.values);
                condition.not_values = self.principals(&condition.not_values);
            }
            "source.trustDomain" => {
                condition.values = self.expand(&condition.values);
                condition.not_values = self.expand(&condition.not_values);
            }
            _ => {}
        }
    }

    /// Each principal `TD/ns/NS/sa/SA` whose trust domain is the mesh's
    /// (or `cluster.local`) as one per trust domain of the mesh; others,
    /// and principals whose trust domain is `*`, as they are.
    fn principals(&self, principals: &[String]) -> Vec<String> {
        let mut out: Vec<String> = Vec::with_capacity(principals.len());
        for principal in principals {
            let parts: Vec<&str> = principal.split('/').collect();
            let from = parts[0];
            if parts.len() != 5 || from == "*" || !(self.matches(from) || from == DEFAULT_TRUST_DOMAIN) {
                push_new(&mut out, principal.clone());
                continue;
            }
            for td in &self.0 {
                // A wildcard trust domain covering this one stays as written.
                let rewritten =
                    if suffix_match(td, from) { principal.clone() } else { format!("{td}/{}", parts[1..].join("/")) };
                push_new(&mut out, rewritten);
            }
        }
        out
    }

    /// Each value that is one of the mesh's trust domains as all of them.
    fn expand(&self, values: &[String]) -> Vec<String> {
        let mut out = Vec::with_capacity(values.len());
        for value in values {
            if self.0.iter().any(|td| **td == **value) {
                for td in &self.0 {
                    push_new(&mut out, td.to_string());
                }
            } else {
                push_new(&mut out, value.clone());
            }
        }
        out
    }

    /// `spiffe://TD/…` of the mesh's trust domain as the same under each
    /// trust domain of the mesh (the names a client accepts on a mesh
    /// service's certificate); another identity as it is.
    pub fn expand_identity(&self, identity: &str) -> Vec<String> {
        let own = format!("spiffe://{}/", self.0[0]);
        match identity.strip_prefix(&own) {
            Some(rest) if self.0.len() > 1 => self.0.iter().map(|td| format!("spiffe://{td}/{rest}")).collect(),
            _ => vec![identity.to_string()],
        }
    }

    /// Whether `td` is one of the mesh's, Istio's wildcards either side.
    fn matches(&self, td: &str) -> bool {
        self.0.iter().any(|s| {
            td == &**s
                || &**s == "*"
                || prefix_match(td, s)
                || prefix_match(s, td)
                || suffix_match(td, s)
                || suffix_match(s, td)
        })
    }
}

fn push_new(out: &mut Vec<String>, value: String) {
    if !out.contains(&value) {
        out.push(value);
    }
}

/// Whether `pattern` ends in `*` and `a` starts with the rest.
fn prefix_match(a: &str, pattern: &str) -> bool {
    pattern.strip_suffix('*').is_some_and(|head| a.starts_with(head))
}

/// Whether `pattern` starts with `*` and `a` ends with the rest.
fn suffix_match(a: &str, pattern: &str) -> bool {
    pattern.strip_prefix('*').is_some_and(|tail| a.ends_with(tail))
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::config::mesh::MeshSettings;

    fn domains(mesh: &str) -> TrustDomains {
        TrustDomains::of(&MeshSettings::parse("mesh", mesh).unwrap().mesh_config())
    }

    fn strings(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| v.to_string()).collect()
    }

    #[test]
    fn principals_of_the_mesh_or_cluster_local_become_one_per_trust_domain() {
        let tds = domains("trustDomain: td2\ntrustDomainAliases: [td1, old-td]\n");
        assert_eq!(
            tds.principals(&strings(&["cluster.local/ns/foo/sa/bar"])),
            ["td2/ns/foo/sa/bar", "td1/ns/foo/sa/bar", "old-td/ns/foo/sa/bar"]
        );
        assert_eq!(tds.principals(&strings(&["td1/ns/foo/sa/bar"])).len(), 3, "an alias stands for all");
        let kept = ["other.org/ns/foo/sa/bar", "*/ns/foo/sa/bar", "sa/bar", "*"];
        assert_eq!(tds.principals(&strings(&kept)), kept, "foreign, any-domain and malformed principals stay");
        // A wildcard trust domain that covers the mesh's stays as written beside the others.
        assert_eq!(
            tds.principals(&strings(&["*-td/ns/foo/sa/bar"])),
            ["td2/ns/foo/sa/bar", "td1/ns/foo/sa/bar", "*-td/ns/foo/sa/bar"]
        );
        assert_eq!(tds.expand(&strings(&["td1", "other"])), ["td2", "td1", "old-td", "other"]);
    }

    #[test]
    fn a_policy_is_migrated_in_its_sources_and_conditions_and_untouched_in_a_plain_mesh() {
        let spec: AuthorizationPolicySpec = serde_yaml_ng::from_str(
            "rules:\n- from: [{source: {principals: [cluster.local/ns/a/sa/b], notTrustDomains: [cluster.local]}}]\n  \
             when: [{key: source.principal, values: [cluster.local/ns/a/sa/c]}, {key: source.ip, values: [10.0.0.1]}]\n",
        )
        .unwrap();
        assert_eq!(domains("").migrate(&spec), spec, "cluster.local alone changes nothing");
        let migrated = domains("trustDomain: example.org\n").migrate(&spec);
        let source = migrated.rules[0].from[0].source.as_ref().unwrap();
        assert_eq!(source.principals, ["example.org/ns/a/sa/b"]);
        assert_eq!(source.not_trust_domains, ["cluster.local"], "not the mesh's: kept");
        assert_eq!(migrated.rules[0].when[0].values, ["example.org/ns/a/sa/c"]);
        assert_eq!(migrated.rules[0].when[1].values, ["10.0.0.1"]);
    }

    #[test]
    fn a_mesh_identity_is_accepted_under_every_alias() {
        let tds = domains("trustDomain: td2\ntrustDomainAliases: [td1]\n");
        assert_eq!(tds.expand_identity("spiffe://td2/ns/a/sa/b"), ["spiffe://td2/ns/a/sa/b", "spiffe://td1/ns/a/sa/b"]);
        assert_eq!(tds.expand_identity("spiffe://other/ns/a/sa/b"), ["spiffe://other/ns/a/sa/b"]);
        assert_eq!(domains("").expand_identity("spiffe://cluster.local/ns/a/sa/b").len(), 1);
    }
}
