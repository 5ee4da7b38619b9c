//! Resolves the host names of network gateways, as istiod does under
//! `RESOLVE_HOSTNAME_GATEWAYS` (its default): a `meshNetworks` gateway
//! `address` that is a host name, and the `hostname` a cloud load balancer
//! gives an east-west gateway Service instead of an IP.
//!
//! Role in the data flow: a source like the others. It follows the
//! engine's published snapshots for the host names their network index
//! lists (`NetworkIndex::gateway_hosts`), and writes one
//! [`ResolvedGatewayHost`] per name into the store; the network index
//! takes its addresses as the gateway's, and a change of them is pushed as
//! any network change is. A name is resolved (A and AAAA, through the
//! system's resolver) when first listed, then every 30 s (the shortest
//! TTL istiod honours; the system resolver does not tell the record's
//! TTL); a failed lookup is retried after 1 s, doubling up to a minute.
//!
//! Failure policy: a failed lookup keeps the addresses of the last good
//! one, as istiod keeps them, logs why (once per new reason) and records
//! it on the object (`error`, on `/debug/configz`).
//!
//! Invariants: the source writes only `ResolvedGatewayHost`, deletes the
//! ones of names no longer listed, and writes nothing for a lookup that
//! gets the addresses the store holds.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::fetch;
use crate::config::mesh::networks::{ResolvedGatewayHost, resolved_gateway_host_name};
use crate::config::{ConfigKey, ConfigKind, ConfigObject, ObjectMeta, SourceRef};
use crate::engine::PushEngine;
use crate::model::store::Write;
use crate::model::{ChangeSet, ConfigStore};
use crate::text;

/// How often a name is resolved again (the shortest TTL istiod honours).
pub const REFRESH: Duration = Duration::from_secs(30);
/// How long one lookup may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The source every resolved name is attributed to.
const SOURCE: &str = "gateway-dns";

/// Keeps a [`ResolvedGatewayHost`] in the store for each gateway host name
/// the served snapshot lists.
pub struct GatewayResolver {
    store: Arc<ConfigStore>,
    engine: Arc<PushEngine>,
    changes: mpsc::Sender<ChangeSet>,
    refresh: Duration,
    /// When each listed name is due next, and how many lookups in a row failed.
    due: HashMap<Arc<str>, (Instant, u32)>,
}

impl std::fmt::Debug for GatewayResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayResolver").field("refresh", &self.refresh).field("listed", &self.due.len()).finish()
    }
}

impl GatewayResolver {
    /// A source writing `store`, following `engine`'s snapshots, sending
    /// on `changes`, resolving every name again after `refresh`.
    pub fn new(
        store: Arc<ConfigStore>,
        engine: Arc<PushEngine>,
        changes: mpsc::Sender<ChangeSet>,
        refresh: Duration,
    ) -> GatewayResolver {
        GatewayResolver { store, engine, changes, refresh: refresh.max(Duration::from_secs(1)), due: HashMap::new() }
    }

    /// Resolves what is due whenever a snapshot is published or a lookup
    /// falls due, until the channel closes.
    pub async fn run(self) {
        let (engine, changes) = (self.engine.clone(), self.changes.clone());
        super::refresh::follow(self, &engine, &changes).await;
    }

    /// Resolves the due names of `listed` with `resolve` and writes what
    /// changed; deletes the objects of names no longer listed. Returns
    /// false when the changes channel is closed.
    async fn reconcile_with<F, Fut>(&mut self, listed: &[Arc<str>], now: Instant, resolve: F) -> bool
    where
        F: Fn(Arc<str>) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<IpAddr>, String>>,
    {
        self.due.retain(|host, _| listed.contains(host));
        let due: Vec<&Arc<str>> =
            listed.iter().filter(|host| self.due.get(*host).is_none_or(|(at, _)| *at <= now)).collect();
        let lookups = due.iter().map(|host| {
            let lookup = resolve(Arc::clone(host));
            async move {
                tokio::time::timeout(TIMEOUT, lookup)
                    .await
                    .unwrap_or_else(|_| Err(format!("no answer within {TIMEOUT:?}")))
            }
        });
        let results = futures::future::join_all(lookups).await;

        let snapshot = self.store.snapshot();
        let mut writes = Vec::new();
        for (host, result) in due.iter().zip(results) {
            let name = resolved_gateway_host_name(host);
            let previous = match snapshot.get(&ConfigKey::new(ConfigKind::ResolvedGatewayHost, "", &name)) {
                Some(stored) => match &*stored.object {
                    ConfigObject::ResolvedGatewayHost(r) => Some(r.as_ref().clone()),
                    _ => None,
                },
                None => None,
            };
            let last = previous.clone().unwrap_or_else(|| ResolvedGatewayHost {
                metadata: ObjectMeta { name, ..Default::default() },
                host: host.to_string(),
                ..Default::default()
            });
            let failures = self.due.get(*host).map_or(0, |(_, n)| *n);
            let shown = text::shown(host);
            let (object, next, failures) = match result
                .and_then(|ips| if ips.is_empty() { Err("no A or AAAA record".to_string()) } else { Ok(ips) })
            {
                Ok(ips) => {
                    let mut addresses: Vec<String> = ips.iter().map(ToString::to_string).collect();
                    addresses.sort();
                    addresses.dedup();
                    if addresses != last.addresses {
                        tracing::info!("network gateway {shown} resolves to {}", addresses.join(", "));
                    }
                    (ResolvedGatewayHost { addresses, error: None, ..last }, now + self.refresh, 0)
                }
                Err(why) => {
                    if last.error.as_deref() != Some(why.as_str()) {
                        let kept = if last.addresses.is_empty() {
                            "it is no gateway until a lookup succeeds".to_string()
                        } else {
                            format!("its {} address(es) of the last good lookup stay", last.addresses.len())
                        };
                        tracing::warn!("resolving the network gateway {shown}: {why}; {kept}");
                    }
                    (ResolvedGatewayHost { error: Some(why), ..last }, now + fetch::retry_after(failures), failures + 1)
                }
            };
            self.due.insert(Arc::clone(host), (next, failures));
            if previous.as_ref() != Some(&object) {
                writes.push(Write::put(
                    ConfigObject::ResolvedGatewayHost(Box::new(object)),
                    SourceRef { file: SOURCE.into(), doc: 0 },
                ));
            }
        }
        for stored in snapshot.kind(ConfigKind::ResolvedGatewayHost).values() {
            if let ConfigObject::ResolvedGatewayHost(r) = &*stored.object
                && !listed.iter().any(|host| **host == *r.host)
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

impl super::refresh::Refreshing for GatewayResolver {
    type Named = Vec<Arc<str>>;

    fn named(&self, ctx: &crate::push::PushContext) -> Self::Named {
        ctx.networks.gateway_hosts().cloned().collect()
    }

    fn reconcile(&mut self, named: &Self::Named, now: Instant) -> impl std::future::Future<Output = bool> + Send {
        self.reconcile_with(named, now, lookup)
    }

    fn next_due(&self) -> Option<Instant> {
        self.due.values().map(|(at, _)| *at).min()
    }
}

/// The system resolver's addresses for `host` (A and AAAA).
async fn lookup(host: Arc<str>) -> Result<Vec<IpAddr>, String> {
    let found = tokio::net::lookup_host((&*host, 0)).await.map_err(|e| e.to_string())?;
    Ok(found.map(|addr| addr.ip()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolver() -> (GatewayResolver, mpsc::Receiver<ChangeSet>) {
        let (tx, rx) = mpsc::channel(8);
        let store = Arc::new(ConfigStore::new());
        (GatewayResolver::new(store, PushEngine::new(), tx, REFRESH), rx)
    }

    fn held(r: &GatewayResolver) -> Vec<(String, Vec<String>, Option<String>)> {
        let snapshot = r.store.snapshot();
        snapshot
            .kind(ConfigKind::ResolvedGatewayHost)
            .values()
            .filter_map(|s| match &*s.object {
                ConfigObject::ResolvedGatewayHost(h) => Some((h.host.clone(), h.addresses.clone(), h.error.clone())),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn names_are_resolved_kept_through_failures_and_forgotten_when_no_longer_listed() {
        let (mut r, mut rx) = resolver();
        let host: Arc<str> = "eastwest.example.com".into();
        let answer = |ips: &'static [&'static str]| {
            move |_: Arc<str>| async move { Ok(ips.iter().map(|ip| ip.parse().unwrap()).collect::<Vec<IpAddr>>()) }
        };
        let t0 = Instant::now();
        assert!(r.reconcile_with(std::slice::from_ref(&host), t0, answer(&["192.0.2.2", "192.0.2.1"])).await);
        assert_eq!(held(&r), [(host.to_string(), vec!["192.0.2.1".into(), "192.0.2.2".into()], None)]);
        assert!(rx.try_recv().is_ok(), "the change was sent");
        // Not due yet: nothing is looked up, nothing written.
        let never = |_: Arc<str>| async { Err::<Vec<IpAddr>, String>("must not be called".into()) };
        assert!(r.reconcile_with(std::slice::from_ref(&host), t0, never).await);
        assert!(rx.try_recv().is_err());
        // Due, and the same answer: nothing written.
        let later = t0 + REFRESH;
        assert!(r.reconcile_with(std::slice::from_ref(&host), later, answer(&["192.0.2.1", "192.0.2.2"])).await);
        assert!(rx.try_recv().is_err(), "the same addresses write nothing");
        // A failure keeps the addresses and says why.
        let failing = |_: Arc<str>| async { Err::<Vec<IpAddr>, String>("no such host".into()) };
        assert!(r.reconcile_with(std::slice::from_ref(&host), later + REFRESH, failing).await);
        let kept = held(&r);
        assert_eq!(kept[0].1, ["192.0.2.1", "192.0.2.2"]);
        assert_eq!(kept[0].2.as_deref(), Some("no such host"));
        // No longer listed: deleted.
        assert!(r.reconcile_with(&[], later + REFRESH * 2, never).await);
        assert!(held(&r).is_empty());
    }

    #[tokio::test]
    async fn the_system_resolver_answers_for_localhost() {
        let ips = lookup("localhost".into()).await.expect("localhost resolves");
        assert!(ips.iter().any(IpAddr::is_loopback), "{ips:?}");
    }
}
