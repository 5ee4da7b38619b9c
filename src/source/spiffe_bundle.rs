//! Fetches the SPIFFE bundles the mesh config's
//! `caCertificates[].spiffeBundleUrl` name, as istiod does under
//! `ISTIO_MULTIROOT_MESH` (`serve --multi-root-mesh`), so that their roots
//! join the trust bundle agents are sent over PCDS.
//!
//! Role in the data flow: a source like the others. It follows the
//! engine's published snapshots for the URLs their mesh config lists
//! (`TrustAnchors::bundle_urls`, none without the feature), and writes one
//! [`FetchedTrustBundle`] per URL into the store, so new roots reach the
//! agents as any config change does (a PCDS push; nothing Envoy holds
//! changes). A URL is fetched when first listed, then every
//! `--spiffe-bundle-refresh` (30 minutes, istiod's fixed period); a fetch
//! has 10 s; a failed one is retried after 1 s, doubling up to a minute.
//! A bundle is parsed by `config::mesh::spiffe_bundle::parse_bundle`.
//!
//! Failure policy: a failed fetch (no answer, not a bundle, a root that is
//! not a CA) keeps the roots of the last good one, logs why, and records it
//! on the object (`error`, on `/debug/configz`). istiod instead drops a
//! failing URL's roots until its next good fetch; keeping them means an
//! outage of the bundle's server does not make the other trust domain's
//! workloads untrusted for that long.
//!
//! Invariants: what every fetching source keeps (`source::fetch`: at most
//! 1 MiB read, no link-local or cloud metadata address), over https only;
//! the source writes only `FetchedTrustBundle`, deletes the ones of URLs no
//! longer listed, and writes nothing for a fetch that gets the roots the
//! store holds.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::fetch::{self, HttpClient};
use crate::config::mesh::spiffe_bundle::{FetchedTrustBundle, fetched_trust_bundle_name, parse_bundle};
use crate::config::{ConfigKey, ConfigKind, ConfigObject, ObjectMeta, SourceRef};
use crate::engine::PushEngine;
use crate::model::store::Write;
use crate::model::{ChangeSet, ConfigStore};
use crate::text;

/// How often a bundle is fetched again (istiod's fixed `RemoteDefaultPollPeriod`).
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(30 * 60);
/// How long one fetch may take (istiod's client timeout).
const TIMEOUT: Duration = Duration::from_secs(10);
/// The shortest refresh: a zero one would fetch in a loop.
const MIN_REFRESH: Duration = Duration::from_secs(1);
/// The source every fetched bundle is attributed to.
const SOURCE: &str = "spiffe-bundle-fetch";

/// Keeps a [`FetchedTrustBundle`] in the store for each bundle URL the
/// served mesh config lists.
pub struct SpiffeBundleFetcher {
    store: Arc<ConfigStore>,
    engine: Arc<PushEngine>,
    changes: mpsc::Sender<ChangeSet>,
    refresh: Duration,
    client: HttpClient,
    /// When each listed URL is due next, and how many fetches in a row failed.
    due: HashMap<Arc<str>, (Instant, u32)>,
}

impl std::fmt::Debug for SpiffeBundleFetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpiffeBundleFetcher").field("refresh", &self.refresh).field("listed", &self.due.len()).finish()
    }
}

impl SpiffeBundleFetcher {
    /// A source writing `store`, following `engine`'s snapshots, sending on
    /// `changes`, fetching every bundle again after `refresh` (at least 1 s).
    pub fn new(
        store: Arc<ConfigStore>,
        engine: Arc<PushEngine>,
        changes: mpsc::Sender<ChangeSet>,
        refresh: Duration,
    ) -> SpiffeBundleFetcher {
        let refresh = refresh.max(MIN_REFRESH);
        SpiffeBundleFetcher { store, engine, changes, refresh, client: fetch::client(), due: HashMap::new() }
    }

    /// Fetches what is due whenever a snapshot is published or a fetch
    /// falls due, until the channel closes.
    pub async fn run(self) {
        let (engine, changes) = (self.engine.clone(), self.changes.clone());
        super::refresh::follow(self, &engine, &changes).await;
    }

    /// Fetches the due URLs of `listed` and writes what changed; deletes
    /// the bundles of URLs no longer listed. Returns false when the changes
    /// channel is closed.
    async fn reconcile(&mut self, listed: &[Arc<str>], now: Instant) -> bool {
        self.due.retain(|url, _| listed.contains(url));
        let due: Vec<&Arc<str>> =
            listed.iter().filter(|url| self.due.get(*url).is_none_or(|(at, _)| *at <= now)).collect();
        let fetches = due.iter().map(|url| {
            let client = self.client.clone();
            async move {
                tokio::time::timeout(TIMEOUT, fetch_bundle(&client, url))
                    .await
                    .unwrap_or_else(|_| Err(format!("no answer within {TIMEOUT:?}")))
            }
        });
        let results = futures::future::join_all(fetches).await;

        let snapshot = self.store.snapshot();
        let mut writes = Vec::new();
        for (url, result) in due.iter().zip(results) {
            let name = fetched_trust_bundle_name(url);
            let previous = match snapshot.get(&ConfigKey::new(ConfigKind::FetchedTrustBundle, "", &name)) {
                Some(stored) => match &*stored.object {
                    ConfigObject::FetchedTrustBundle(f) => Some(f.as_ref().clone()),
                    _ => None,
                },
                None => None,
            };
            let last = previous.clone().unwrap_or_else(|| FetchedTrustBundle {
                metadata: ObjectMeta { name, ..Default::default() },
                url: url.to_string(),
                ..Default::default()
            });
            let failures = self.due.get(*url).map_or(0, |(_, n)| *n);
            let shown = text::shown(url);
            let (object, next, failures) = match result {
                Ok(roots) => {
                    let fetched = if roots == last.roots {
                        last.fetched.clone()
                    } else {
                        tracing::info!("fetched the SPIFFE bundle {shown}: {} root(s)", roots.len());
                        Some(super::gateway_status::now_rfc3339())
                    };
                    (FetchedTrustBundle { roots, fetched, error: None, ..last }, now + self.refresh, 0)
                }
                Err(why) => {
                    if last.error.as_deref() != Some(why.as_str()) {
                        let kept = if last.roots.is_empty() {
                            "no root of it is trusted until a fetch succeeds".to_string()
                        } else {
                            format!("its {} root(s) of the last good fetch stay trusted", last.roots.len())
                        };
                        tracing::warn!("fetching the SPIFFE bundle {shown}: {why}; {kept}");
                    }
                    let retry = now + fetch::retry_after(failures);
                    (FetchedTrustBundle { error: Some(why), ..last }, retry, failures + 1)
                }
            };
            self.due.insert(Arc::clone(url), (next, failures));
            if previous.as_ref() != Some(&object) {
                writes.push(Write::put(
                    ConfigObject::FetchedTrustBundle(Box::new(object)),
                    SourceRef { file: SOURCE.into(), doc: 0 },
                ));
            }
        }
        for stored in snapshot.kind(ConfigKind::FetchedTrustBundle).values() {
            if let ConfigObject::FetchedTrustBundle(f) = &*stored.object
                && !listed.iter().any(|url| **url == *f.url)
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

impl super::refresh::Refreshing for SpiffeBundleFetcher {
    type Named = Vec<Arc<str>>;

    fn named(&self, ctx: &crate::push::PushContext) -> Self::Named {
        ctx.mesh.trust_anchors.bundle_urls.to_vec()
    }

    fn reconcile(&mut self, named: &Self::Named, now: Instant) -> impl std::future::Future<Output = bool> + Send {
        SpiffeBundleFetcher::reconcile(self, named, now)
    }

    fn next_due(&self) -> Option<Instant> {
        self.due.values().map(|(at, _)| *at).min()
    }
}

/// Fetches one bundle: its X.509 roots, PEM.
async fn fetch_bundle(client: &HttpClient, url: &str) -> Result<Vec<String>, String> {
    if !url.get(..8).is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://")) {
        return Err("not an https URL: SPIFFE bundles are fetched over https only".into());
    }
    let body = fetch::get(client, url).await?;
    let text = std::str::from_utf8(&body).map_err(|_| "the bundle is not UTF-8".to_string())?;
    parse_bundle(text).map_err(|e| format!("not a SPIFFE bundle: {e}"))
}

#[cfg(test)]
mod test;
