//! `RequestAuthenticationIndex`: the JWT rules that apply to each workload,
//! with the key set each verifies against.
//!
//! Selection is Istio's (`GetJwtPoliciesForWorkload`), the same as for
//! AuthorizationPolicies: the root namespace's and the workload
//! namespace's policies whose selector is absent or matches. The rules of
//! every selected policy are merged and sorted by issuer, as Istio sorts
//! them, so the provider names (`origins-0`, …) do not depend on policy
//! names.
//!
//! Each rule's key set is resolved here, once per snapshot: the inline
//! `jwks`; else the set `source::jwks` fetched for its `(issuer,
//! jwksUri)` (a [`FetchedJwks`] in the store); else — not fetched yet, or
//! never fetched successfully — [`FAIL_CLOSED_JWKS`], which no token
//! verifies against, so a request with a token is refused until the keys
//! arrive, as Istio does when its fetch fails. Private members of
//! asymmetric keys never reach Envoy.
//!
//! What applies to a workload is part of its inbound key (and a router's
//! scope key), keys and all, so an edited policy or a rotated key set is a
//! new key.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::authorization::select_for_workload;
use crate::config::istio::{FetchedJwks, JwtRule, WorkloadLabels, parse_jwks};
use crate::config::mesh::MeshConfig;
use crate::config::{ConfigKind, ConfigObject};
use crate::model::StoreSnapshot;

/// A JWKS whose one RSA key's private half was discarded when it was made:
/// no token verifies against it.
pub const FAIL_CLOSED_JWKS: &str = concat!(
    r#"{"keys":[{"kty":"RSA","e":"AQAB","alg":"RS256","n":""#,
    "pO5gtpRkPddq9dQd1IeU7I6xuhh4ruuHAggRudQXe9jBel24jx4uwOnDItSw7L86BUqI2IItlgMInNLUbDha3P_tut6Vq94Ckm2ViFoF61Z-",
    "2mFeAiq5_3d_f0VonIV7C9qa0X36DhYFWIVfJkXrEf00RQu5hjuKbQoxwZpm5QiP1LhoR2HvutlrQnb7D0acd7K_pH8XKGATOWk_jDYgDeiY",
    "jbw9b_-TXqkzzBSSFkf7B_KGol47zwxV-rZX5mIjiG-94FC1ZZUchEtReUHbf6kQnME8qJ851zuWHXQmdJfU3YyQ_K81VQ1oCiC1MUAfPOV5",
    "zy2me0hVkwVeUVgngw",
    r#""}]}"#
);

/// How long fetching a key set may take when the rule does not say (Istio's default).
pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// One JWT rule as a workload's configuration reads it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ResolvedJwtRule {
    /// The rule as written.
    #[serde(skip)]
    pub rule: JwtRule,
    /// The key set Envoy verifies against (public members only).
    #[serde(skip)]
    pub jwks: Arc<str>,
    /// Where the keys came from: `inline`, `fetched`, or `none yet`.
    pub keys_from: &'static str,
}

/// A RequestAuthentication of the index.
#[derive(Debug)]
struct Policy {
    selector: Option<WorkloadLabels>,
    rules: Vec<Arc<ResolvedJwtRule>>,
}

/// The RequestAuthentications of a snapshot, by namespace.
#[derive(Debug, Default)]
pub struct RequestAuthenticationIndex {
    root_namespace: Arc<str>,
    /// Policies without targets, by namespace, in name order.
    by_namespace: HashMap<Arc<str>, Vec<Arc<Policy>>>,
    /// Every `(issuer, jwksUri)` a rule without inline keys names, with
    /// the longest fetch timeout its rules give.
    remote: BTreeMap<(String, String), Duration>,
}

impl RequestAuthenticationIndex {
    /// Indexes the RequestAuthentications of `store`, with the key sets it holds.
    pub fn build(store: &StoreSnapshot, mesh: &MeshConfig) -> RequestAuthenticationIndex {
        let mut fetched: HashMap<(&str, &str), &FetchedJwks> = HashMap::new();
        for stored in store.kind(ConfigKind::FetchedJwks).values() {
            if let ConfigObject::FetchedJwks(f) = &*stored.object {
                fetched.insert((&f.issuer, &f.jwks_uri), f);
            }
        }
        let mut index =
            RequestAuthenticationIndex { root_namespace: mesh.root_namespace.clone(), ..Default::default() };
        // Rules of one content share one resolution (a key set is parsed once).
        let mut resolved: HashMap<&JwtRule, Arc<ResolvedJwtRule>> = HashMap::new();
        let mut policies: BTreeMap<(Arc<str>, &str), Policy> = BTreeMap::new();
        for stored in store.kind(ConfigKind::RequestAuthentication).values() {
            let ConfigObject::RequestAuthentication(policy) = &*stored.object else { continue };
            let spec = &policy.spec;
            if spec.target_ref.is_some() || !spec.target_refs.is_empty() {
                continue;
            }
            let mut rules = Vec::with_capacity(spec.jwt_rules.len());
            for rule in &spec.jwt_rules {
                if rule.inline_jwks().is_none() {
                    let timeout = rule.timeout.map_or(DEFAULT_FETCH_TIMEOUT, |t| t.0);
                    let key = (rule.issuer.clone(), rule.jwks_uri().unwrap_or_default().to_string());
                    let entry = index.remote.entry(key).or_insert(timeout);
                    *entry = (*entry).max(timeout);
                }
                let entry = resolved.entry(rule).or_insert_with(|| Arc::new(resolve(rule, &fetched)));
                rules.push(entry.clone());
            }
            let namespace: Arc<str> = policy.metadata.namespace().into();
            policies.insert((namespace, &policy.metadata.name), Policy { selector: spec.selector.clone(), rules });
        }
        for ((namespace, _), policy) in policies {
            index.by_namespace.entry(namespace).or_default().push(Arc::new(policy));
        }
        index
    }

    /// The rules that apply to a workload of `namespace` with `labels`,
    /// sorted by issuer (then by content: the order is a function of the set).
    pub fn for_workload(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Vec<Arc<ResolvedJwtRule>> {
        let policies =
            select_for_workload(&self.by_namespace, &self.root_namespace, namespace, labels, |p| p.selector.as_ref());
        let mut rules: Vec<Arc<ResolvedJwtRule>> = policies.iter().flat_map(|p| p.rules.iter().cloned()).collect();
        rules.sort_by(|a, b| a.rule.issuer.cmp(&b.rule.issuer).then_with(|| a.cmp(b)));
        rules
    }

    /// Every `(issuer, jwksUri)` whose key set meshpush must fetch (an
    /// empty URI: through the issuer's OpenID discovery document), with how
    /// long a fetch may take.
    pub fn remote_key_sets(&self) -> &BTreeMap<(String, String), Duration> {
        &self.remote
    }
}

/// A rule's key set, as the module docs say.
fn resolve(rule: &JwtRule, fetched: &HashMap<(&str, &str), &FetchedJwks>) -> ResolvedJwtRule {
    let (text, keys_from) = match rule.inline_jwks() {
        Some(inline) => (Some(inline), "inline"),
        None => {
            let uri = rule.jwks_uri().unwrap_or_default();
            let keys = fetched.get(&(rule.issuer.as_str(), uri)).and_then(|f| f.keys.as_deref());
            (keys, if keys.is_some() { "fetched" } else { "none yet" })
        }
    };
    match text.map(parse_jwks) {
        Some(Ok(jwks)) => ResolvedJwtRule { rule: rule.clone(), jwks: jwks.public.into(), keys_from },
        _ => ResolvedJwtRule { rule: rule.clone(), jwks: FAIL_CLOSED_JWKS.into(), keys_from: "none yet" },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ObjectMeta;
    use crate::model::ConfigStore;
    use crate::model::store::Write;

    const JWKS: &str = r#"{"keys":[{"kty":"EC","crv":"P-256","x":"AAAA","y":"BBBB","d":"SECRET"}]}"#;

    fn store(yaml: &str, fetched: &[FetchedJwks]) -> StoreSnapshot {
        let store = ConfigStore::new();
        let parsed = crate::config::parse::parse_documents("ra.yaml", yaml);
        assert!(parsed.problems.iter().all(|p| p.severity != crate::config::Severity::Error), "{:?}", parsed.problems);
        let mut writes: Vec<Write> = parsed.objects.into_iter().map(|(o, s)| Write::put(o, s)).collect();
        for f in fetched {
            let source = crate::config::SourceRef { file: "jwks".into(), doc: 0 };
            writes.push(Write::put(ConfigObject::FetchedJwks(Box::new(f.clone())), source));
        }
        store.apply(writes);
        store.snapshot()
    }

    fn policy(namespace: &str, name: &str, rest: &str) -> String {
        format!(
            "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n{rest}\n---\n"
        )
    }

    #[test]
    fn rules_of_every_selecting_policy_merge_sorted_by_issuer() {
        let yaml = [
            policy("istio-system", "mesh", "  jwtRules: [{issuer: zeta, jwks: '{\"keys\":[{\"kty\":\"oct\",\"k\":\"a\"}]}'}]"),
            policy("shop", "web", "  selector: {matchLabels: {app: web}}\n  jwtRules: [{issuer: alpha, jwksUri: 'https://a.example/keys'}]"),
            policy("shop", "db", "  selector: {matchLabels: {app: db}}\n  jwtRules: [{issuer: beta}]"),
        ]
        .concat();
        let index = RequestAuthenticationIndex::build(&store(&yaml, &[]), &MeshConfig::default());
        let issuers = |app: &str| -> Vec<String> {
            let labels = [("app".to_string(), app.to_string())].into();
            index.for_workload("shop", &labels).iter().map(|r| r.rule.issuer.clone()).collect()
        };
        assert_eq!(issuers("web"), ["alpha", "zeta"]);
        assert_eq!(issuers("db"), ["beta", "zeta"]);
        let remote: Vec<(String, String)> = index.remote_key_sets().keys().cloned().collect();
        assert_eq!(
            remote,
            [("alpha".to_string(), "https://a.example/keys".to_string()), ("beta".to_string(), String::new())],
            "rules without inline keys are fetched; an issuer alone goes through discovery"
        );
    }

    #[test]
    fn keys_come_inline_then_fetched_else_fail_closed_and_never_with_private_members() {
        let yaml = [
            policy("shop", "inline", &format!("  jwtRules: [{{issuer: a, jwks: '{JWKS}'}}]")),
            policy("other", "remote", "  jwtRules: [{issuer: b, jwksUri: 'https://b.example/keys'}]"),
            policy("third", "missing", "  jwtRules: [{issuer: c, jwksUri: 'https://c.example/keys'}]"),
        ]
        .concat();
        let fetched = FetchedJwks {
            metadata: ObjectMeta { name: "jwks-b".into(), ..Default::default() },
            issuer: "b".into(),
            jwks_uri: "https://b.example/keys".into(),
            keys: Some(JWKS.into()),
            error: None,
        };
        let index = RequestAuthenticationIndex::build(&store(&yaml, &[fetched]), &MeshConfig::default());
        let rule = |ns: &str| index.for_workload(ns, &BTreeMap::new()).remove(0);
        for ns in ["shop", "other"] {
            let r = rule(ns);
            assert!(r.jwks.contains("\"x\":\"AAAA\""), "{ns}: {}", r.jwks);
            assert!(!r.jwks.contains("SECRET"), "{ns}: a private member reached the key set");
        }
        assert_eq!(rule("shop").keys_from, "inline");
        assert_eq!(rule("other").keys_from, "fetched");
        assert_eq!(&*rule("third").jwks, FAIL_CLOSED_JWKS);
        assert_eq!(rule("third").keys_from, "none yet");
        assert!(parse_jwks(FAIL_CLOSED_JWKS).is_ok(), "the fail-closed set is a valid key set");
    }
}
