//! Fetches the key sets RequestAuthentications name, as istiod does in its
//! default fetch mode: meshpush, not each Envoy, fetches `jwksUri` (or,
//! for a rule that names only its issuer, the `jwks_uri` of the issuer's
//! OpenID discovery document, `ISSUER/.well-known/openid-configuration`),
//! and the JWT filter inlines the keys.
//!
//! Role in the data flow: a source like the others. It follows the
//! engine's published snapshots for the `(issuer, jwksUri)` pairs their
//! rules need (`RequestAuthenticationIndex::remote_key_sets`), and writes
//! one [`FetchedJwks`] per pair into the store, so new keys reach Envoy as
//! any config change does. A set is fetched when first named, then every
//! refresh interval (Istio's default: 20 minutes); a failed fetch is
//! retried after 1 s, doubling up to a minute. A failure keeps the keys of
//! the last good fetch; with none yet, the rule verifies against a key set
//! nobody can sign for (`FAIL_CLOSED_JWKS`), so requests with a token are
//! refused rather than let through.
//!
//! Invariants: only public key members are stored; what every fetching
//! source keeps (`source::fetch`: at most 1 MiB read, no link-local or
//! cloud metadata address); the source writes only `FetchedJwks`, and
//! deletes the ones no rule names any more.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::fetch::{self, HttpClient, get};
use crate::config::istio::{FetchedJwks, fetched_jwks_name, parse_jwks};
use crate::config::{ConfigKind, ConfigObject, ObjectMeta, SourceRef};
use crate::engine::PushEngine;
use crate::model::store::Write;
use crate::model::{ChangeSet, ConfigStore};
use crate::text;

/// How often a key set is fetched again (Istio's `PILOT_JWT_PUB_KEY_REFRESH_INTERVAL`).
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(20 * 60);
/// The source every fetched key set is attributed to.
const SOURCE: &str = "jwks-fetch";

/// Keeps a [`FetchedJwks`] in the store for each key set the served rules name.
pub struct JwksFetcher {
    store: Arc<ConfigStore>,
    engine: Arc<PushEngine>,
    changes: mpsc::Sender<ChangeSet>,
    refresh: Duration,
    client: HttpClient,
    /// When each wanted set is due next, and how many fetches in a row failed.
    due: HashMap<(String, String), (Instant, u32)>,
}

impl std::fmt::Debug for JwksFetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwksFetcher").field("refresh", &self.refresh).field("wanted", &self.due.len()).finish()
    }
}

impl JwksFetcher {
    /// A source writing `store`, following `engine`'s snapshots, sending on
    /// `changes`, fetching every set again after `refresh`.
    pub fn new(
        store: Arc<ConfigStore>,
        engine: Arc<PushEngine>,
        changes: mpsc::Sender<ChangeSet>,
        refresh: Duration,
    ) -> JwksFetcher {
        JwksFetcher { store, engine, changes, refresh, client: fetch::client(), due: HashMap::new() }
    }

    /// Fetches what is due whenever a snapshot is published or a fetch
    /// falls due, until the channel closes.
    pub async fn run(self) {
        let (engine, changes) = (self.engine.clone(), self.changes.clone());
        super::refresh::follow(self, &engine, &changes).await;
    }

    /// Fetches the due sets of `wanted` and writes what changed; drops what
    /// no rule names. Returns false when the changes channel is closed.
    async fn reconcile(&mut self, wanted: &BTreeMap<(String, String), Duration>, now: Instant) -> bool {
        self.due.retain(|key, _| wanted.contains_key(key));
        let due: Vec<(&(String, String), &Duration)> =
            wanted.iter().filter(|(key, _)| self.due.get(*key).is_none_or(|(at, _)| *at <= now)).collect();
        let fetches = due.iter().map(|((issuer, uri), timeout)| {
            let client = self.client.clone();
            async move {
                tokio::time::timeout(**timeout, fetch(&client, issuer, uri))
                    .await
                    .unwrap_or_else(|_| Err(format!("no answer within {timeout:?}")))
            }
        });
        let results = futures::future::join_all(fetches).await;

        let snapshot = self.store.snapshot();
        let mut writes = Vec::new();
        for (((issuer, uri), _), result) in due.iter().zip(results) {
            let name = fetched_jwks_name(issuer, uri);
            let key = crate::config::ConfigKey::new(ConfigKind::FetchedJwks, "", &name);
            let previous = match snapshot.get(&key).map(|s| &*s.object) {
                Some(ConfigObject::FetchedJwks(f)) => Some(f.as_ref().clone()),
                _ => None,
            };
            let failures = self.due.get(&(issuer.clone(), uri.clone())).map_or(0, |(_, n)| *n);
            let (keys, error, next, failures) = match result {
                Ok(keys) => (Some(keys), None, now + self.refresh, 0),
                Err(why) => {
                    let shown = format!("{}: {why}", text::shown(if uri.is_empty() { issuer } else { uri }));
                    if previous.as_ref().and_then(|p| p.error.as_deref()) != Some(shown.as_str()) {
                        tracing::warn!("fetching the JWKS of issuer {}: {shown}", text::shown(issuer));
                    }
                    let retry = fetch::retry_after(failures);
                    (previous.as_ref().and_then(|p| p.keys.clone()), Some(shown), now + retry, failures + 1)
                }
            };
            self.due.insert((issuer.clone(), uri.clone()), (next, failures));
            let object = FetchedJwks {
                metadata: ObjectMeta { name, ..Default::default() },
                issuer: issuer.clone(),
                jwks_uri: uri.clone(),
                keys,
                error,
            };
            if previous.as_ref() != Some(&object) {
                if object.error.is_none() {
                    tracing::info!("fetched the JWKS of issuer {}", text::shown(issuer));
                }
                writes.push(Write::put(
                    ConfigObject::FetchedJwks(Box::new(object)),
                    SourceRef { file: SOURCE.into(), doc: 0 },
                ));
            }
        }
        for stored in snapshot.kind(ConfigKind::FetchedJwks).values() {
            if let ConfigObject::FetchedJwks(f) = &*stored.object
                && !wanted.contains_key(&(f.issuer.clone(), f.jwks_uri.clone()))
            {
                writes.push(Write::Delete(stored.object.key()));
            }
        }
        if writes.is_empty() {
            return true;
        }
        let changes = self.store.apply(writes);
        changes.is_empty() || self.changes.send(changes).await.is_ok()
    }
}

impl super::refresh::Refreshing for JwksFetcher {
    type Named = BTreeMap<(String, String), Duration>;

    fn named(&self, ctx: &crate::push::PushContext) -> Self::Named {
        ctx.request_authentication.remote_key_sets().clone()
    }

    fn reconcile(&mut self, named: &Self::Named, now: Instant) -> impl std::future::Future<Output = bool> + Send {
        JwksFetcher::reconcile(self, named, now)
    }

    fn next_due(&self) -> Option<Instant> {
        self.due.values().map(|(at, _)| *at).min()
    }
}

/// Fetches one key set; the public members of its keys, as JSON.
async fn fetch(client: &HttpClient, issuer: &str, uri: &str) -> Result<String, String> {
    let uri = if uri.is_empty() {
        let discovery = format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/'));
        let document = get(client, &discovery).await.map_err(|e| format!("OpenID discovery: {e}"))?;
        let document: serde_json::Value =
            serde_json::from_slice(&document).map_err(|e| format!("OpenID discovery: not JSON ({e})"))?;
        document
            .get("jwks_uri")
            .and_then(serde_json::Value::as_str)
            .ok_or("OpenID discovery: the document names no jwks_uri")?
            .to_string()
    } else {
        uri.to_string()
    };
    let body = get(client, &uri).await?;
    let text = std::str::from_utf8(&body).map_err(|_| "the key set is not UTF-8".to_string())?;
    Ok(parse_jwks(text).map_err(|e| format!("not a JWKS: {e}"))?.public)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    const KEYS: &str = r#"{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB","d":"PRIVATE"}]}"#;

    /// An issuer on loopback: its discovery document and key set, which
    /// fails with 500 while `broken` is set.
    async fn issuer(broken: Arc<AtomicBool>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let jwks_uri = format!("{base}/keys");
        let app = axum::Router::new()
            .route(
                "/.well-known/openid-configuration",
                axum::routing::get(move || async move { axum::Json(serde_json::json!({ "jwks_uri": jwks_uri })) }),
            )
            .route(
                "/keys",
                axum::routing::get(move || async move {
                    if broken.load(Ordering::SeqCst) {
                        (http::StatusCode::INTERNAL_SERVER_ERROR, String::new())
                    } else {
                        (http::StatusCode::OK, KEYS.to_string())
                    }
                }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
        base
    }

    fn fetched(store: &ConfigStore) -> Vec<FetchedJwks> {
        let snapshot = store.snapshot();
        let mut out: Vec<FetchedJwks> = snapshot
            .kind(ConfigKind::FetchedJwks)
            .values()
            .filter_map(|s| match &*s.object {
                ConfigObject::FetchedJwks(f) => Some(f.as_ref().clone()),
                _ => None,
            })
            .collect();
        out.sort_by(|a, b| a.jwks_uri.cmp(&b.jwks_uri));
        out
    }

    #[tokio::test]
    async fn key_sets_are_fetched_by_uri_and_by_discovery_kept_on_failure_and_dropped_when_unnamed() {
        let broken = Arc::new(AtomicBool::new(false));
        let base = issuer(broken.clone()).await;
        let store = Arc::new(ConfigStore::new());
        let (tx, mut rx) = mpsc::channel(8);
        let mut fetcher = JwksFetcher::new(store.clone(), PushEngine::new(), tx, DEFAULT_REFRESH);
        let timeout = Duration::from_secs(5);
        let wanted: BTreeMap<(String, String), Duration> =
            [((base.clone(), format!("{base}/keys")), timeout), ((base.clone(), String::new()), timeout)].into();
        let start = Instant::now();
        assert!(fetcher.reconcile(&wanted, start).await);
        assert!(rx.try_recv().is_ok(), "the new key sets are a change");
        let sets = fetched(&store);
        assert_eq!(sets.len(), 2, "by URI and through discovery: {sets:?}");
        for set in &sets {
            let keys = set.keys.as_deref().expect("fetched");
            assert!(keys.contains("AQAB") && !keys.contains("PRIVATE"), "public members only: {keys}");
            assert_eq!(set.error, None);
        }

        // Not due yet: nothing is fetched, nothing changes.
        assert!(fetcher.reconcile(&wanted, start + Duration::from_secs(1)).await);
        assert!(rx.try_recv().is_err());

        // Due, and failing: the keys stay, the error is recorded, a retry is soon.
        broken.store(true, Ordering::SeqCst);
        let later = start + DEFAULT_REFRESH;
        assert!(fetcher.reconcile(&wanted, later).await);
        for set in fetched(&store) {
            assert!(set.keys.is_some(), "the last good keys are kept");
            assert!(set.error.as_deref().is_some_and(|e| e.contains("500")), "{:?}", set.error);
        }
        let retry = fetcher.due.values().map(|(at, _)| *at).max().unwrap();
        assert!(retry <= later + fetch::RETRY_FIRST, "a failed fetch is retried after {:?}", fetch::RETRY_FIRST);

        // No rule names them any more: they go.
        assert!(fetcher.reconcile(&BTreeMap::new(), later).await);
        assert!(fetched(&store).is_empty());
    }

    #[tokio::test]
    async fn a_metadata_address_is_never_fetched() {
        let store = Arc::new(ConfigStore::new());
        let (tx, _rx) = mpsc::channel(8);
        let mut fetcher = JwksFetcher::new(store.clone(), PushEngine::new(), tx, DEFAULT_REFRESH);
        let uri = "http://169.254.169.254/latest/meta-data/keys".to_string();
        let wanted = [(("i".to_string(), uri), Duration::from_secs(5))].into();
        assert!(fetcher.reconcile(&wanted, Instant::now()).await);
        let set = fetched(&store).remove(0);
        assert_eq!(set.keys, None);
        assert!(set.error.unwrap().contains("metadata address"));
    }
}
