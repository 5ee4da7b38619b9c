//! WorkloadGroup auto-registration, as istiod does it: a proxy that
//! connects with node metadata `AUTO_REGISTER_GROUP=NAME` (pilot-agent sets
//! it on a VM) gets a WorkloadEntry made from WorkloadGroup `NAME` of its
//! namespace — named `NAME-IP`, the proxy's IP as address, the template's
//! ports and weight, the proxy's locality (else the template's), its
//! network (metadata `NETWORK`, else the template's), and the
//! template's labels with the group's metadata labels and the proxy's own
//! labels over them. When its last
//! stream goes away, the entry is deleted after a grace period (Istio's
//! `PILOT_WORKLOAD_ENTRY_GRACE_PERIOD`, 10 s), unless it reconnects.
//!
//! Role in the data flow: a source like the others — it writes the store
//! in batches and sends each change set down the sources' channel, so
//! registered workloads reach EDS as any WorkloadEntry does. It watches
//! the push queue's membership and re-renders entries when their group
//! changes.
//!
//! Invariant: the source writes and deletes only entries it made (recorded
//! by key, and marked with the `istio.io/autoRegistrationGroup`
//! annotation); an entry of a file or the registry API with the same name
//! is never touched.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::config::istio::{WorkloadEntry, WorkloadEntrySpec};
use crate::config::validate::validate;
use crate::config::{ConfigKey, ConfigKind, ConfigObject, ObjectMeta, Severity, SourceRef};
use crate::engine::PushEngine;
use crate::model::store::Write;
use crate::model::{ChangeSet, ConfigStore, Proxy};

/// Node metadata naming the WorkloadGroup a proxy registers into.
pub const GROUP_METADATA: &str = "AUTO_REGISTER_GROUP";
/// Annotation marking an entry this source made.
pub const GROUP_ANNOTATION: &str = "istio.io/autoRegistrationGroup";
/// Istio's default grace period before a disconnected workload's entry goes.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);
/// The source every registered entry is attributed to.
const SOURCE: &str = "auto-registration";

/// Keeps auto-registered WorkloadEntries in line with the connected proxies.
#[derive(Debug)]
pub struct AutoRegistration {
    store: Arc<ConfigStore>,
    engine: Arc<PushEngine>,
    changes: mpsc::Sender<ChangeSet>,
    grace: Duration,
    /// Entries this source made → when their proxy went away (None: connected).
    owned: HashMap<ConfigKey, Option<Instant>>,
}

impl AutoRegistration {
    /// A source writing `store`, following `engine`'s connections, sending on `changes`.
    pub fn new(
        store: Arc<ConfigStore>,
        engine: Arc<PushEngine>,
        changes: mpsc::Sender<ChangeSet>,
        grace: Duration,
    ) -> AutoRegistration {
        AutoRegistration { store, engine, changes, grace, owned: HashMap::new() }
    }

    /// Reconciles on every connection change and every second (for grace
    /// periods and group edits), until the channel closes.
    pub async fn run(mut self) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = self.engine.queue().membership_changed() => {}
                _ = tick.tick() => {}
                () = self.changes.closed() => return,
            }
            if !self.reconcile(Instant::now()).await {
                return;
            }
        }
    }

    /// One pass: puts the entries connected proxies need, deletes those
    /// whose grace period ran out. `false` when the channel is closed.
    pub async fn reconcile(&mut self, now: Instant) -> bool {
        let snapshot = self.store.snapshot();
        let mut wanted: BTreeMap<ConfigKey, WorkloadEntry> = BTreeMap::new();
        for handle in self.engine.queue().connections() {
            if let Some(entry) = entry_for(&snapshot, &handle.proxy) {
                let key = ConfigObject::WorkloadEntry(entry.clone()).key();
                // An entry someone else wrote keeps its own content.
                let foreign = snapshot.get(&key).is_some() && !self.owned.contains_key(&key);
                if !foreign {
                    wanted.insert(key, entry);
                }
            }
        }
        let mut writes = Vec::new();
        for (key, entry) in &wanted {
            self.owned.insert(key.clone(), None);
            let object = ConfigObject::WorkloadEntry(entry.clone());
            let current = snapshot.get(key).map(|s| &*s.object);
            if current != Some(&object) {
                writes.push(Write::put(object, SourceRef { file: SOURCE.into(), doc: 0 }));
            }
        }
        let mut gone = Vec::new();
        for (key, since) in &mut self.owned {
            if wanted.contains_key(key) {
                continue;
            }
            let since = *since.get_or_insert(now);
            if now.duration_since(since) >= self.grace {
                gone.push(key.clone());
            }
        }
        for key in gone {
            self.owned.remove(&key);
            if snapshot.get(&key).is_some() {
                writes.push(Write::Delete(key));
            }
        }
        if writes.is_empty() {
            return true;
        }
        let Ok(permit) = self.changes.clone().reserve_owned().await else { return false };
        let changes = self.store.apply_then(writes, move |changes| {
            permit.send(changes);
        });
        tracing::info!(changed = changes.keys.len(), revision = changes.revision, "auto-registered workloads updated");
        true
    }
}

/// The WorkloadEntry a connected proxy registers, or `None` when it names
/// no group, or a group its namespace does not have.
pub fn entry_for(snapshot: &crate::model::StoreSnapshot, proxy: &Proxy) -> Option<WorkloadEntry> {
    let group_name = proxy.metadata.get(GROUP_METADATA).filter(|g| !g.is_empty())?;
    let key = ConfigKey::new(ConfigKind::WorkloadGroup, &proxy.namespace, group_name);
    let ConfigObject::WorkloadGroup(group) = &*snapshot.get(&key)?.object else { return None };
    let template = &group.spec.template;
    let mut labels = template.labels.clone();
    labels.extend(group.spec.metadata.labels.clone());
    labels.extend(proxy.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut annotations = BTreeMap::from([(GROUP_ANNOTATION.to_string(), group_name.to_string())]);
    annotations.extend(group.spec.metadata.annotations.clone());
    // The proxy's own locality, when its node has one, over the template's.
    let locality = if proxy.locality.is_empty() {
        template.locality.clone()
    } else {
        let l = &proxy.locality;
        Some([l.region.as_str(), l.zone.as_str(), l.subzone.as_str()].join("/").trim_end_matches('/').to_string())
    };
    let entry = WorkloadEntry {
        metadata: ObjectMeta {
            name: format!("{group_name}-{}", proxy.ip.replace(':', "-")),
            namespace: proxy.namespace.to_string(),
            labels: labels.clone(),
            annotations,
            creation_timestamp: None,
            ..ObjectMeta::default()
        },
        spec: WorkloadEntrySpec {
            address: proxy.ip.to_string(),
            labels,
            locality,
            network: Some(proxy.network()).filter(|n| !n.is_empty()).map(str::to_string).or(template.network.clone()),
            ..template.clone()
        },
    };
    // What a file could not hold, registration does not write either.
    let refused = validate(&ConfigObject::WorkloadEntry(entry.clone())).iter().any(|p| p.severity == Severity::Error);
    (!refused).then_some(entry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::bookinfo;

    const GROUP: &str = "apiVersion: networking.istio.io/v1\nkind: WorkloadGroup\nmetadata: {name: ratings-vm, namespace: default}\n\
                         spec:\n  metadata: {labels: {app: ratings, version: vm}}\n  template: {ports: {http: 9080}, labels: {tier: db}}\n";

    fn vm(ip: &str, group: &str) -> Proxy {
        let mut p = bookinfo::proxy(
            &format!("sidecar~{ip}~ratings-vm.default~default.svc.cluster.local"),
            "REDIRECT",
            &[("os", "linux")],
        );
        p.metadata.insert(GROUP_METADATA, group);
        p
    }

    #[tokio::test]
    async fn a_connected_proxy_registers_and_its_entry_goes_after_the_grace_period() {
        let store = Arc::new(ConfigStore::new());
        store.apply(bookinfo::writes());
        store.apply(bookinfo::puts(GROUP));
        let engine = PushEngine::new();
        let (tx, mut rx) = mpsc::channel(16);
        let mut source = AutoRegistration::new(store.clone(), engine.clone(), tx, Duration::from_secs(10));
        let handle = engine.queue().register(Arc::new(vm("10.9.0.7", "ratings-vm")));
        let stranger = engine.queue().register(Arc::new(vm("10.9.0.8", "no-such-group")));
        let start = Instant::now();
        assert!(source.reconcile(start).await);
        let key = ConfigKey::new(ConfigKind::WorkloadEntry, "default", "ratings-vm-10.9.0.7");
        let Some(ConfigObject::WorkloadEntry(entry)) = store.snapshot().get(&key).map(|s| (*s.object).clone()) else {
            panic!("the entry is registered")
        };
        assert_eq!(entry.spec.address, "10.9.0.7");
        assert_eq!(entry.spec.ports.get("http"), Some(&9080));
        let labels: Vec<(&str, &str)> = entry.spec.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(labels, [("app", "ratings"), ("os", "linux"), ("tier", "db"), ("version", "vm")]);
        assert_eq!(entry.metadata.annotations.get(GROUP_ANNOTATION).map(String::as_str), Some("ratings-vm"));
        assert!(rx.try_recv().is_ok_and(|c| c.keys.contains(&key)), "the change goes down the sources' channel");
        assert_eq!(store.snapshot().kind(ConfigKind::WorkloadEntry).len(), 1, "no group, no entry");

        // Gone, but within the grace period: kept; after it: deleted.
        engine.queue().unregister(handle.id);
        engine.queue().unregister(stranger.id);
        assert!(source.reconcile(start + Duration::from_secs(1)).await);
        assert!(store.snapshot().get(&key).is_some(), "kept during the grace period");
        assert!(source.reconcile(start + Duration::from_secs(12)).await);
        assert!(store.snapshot().get(&key).is_none(), "deleted after the grace period");
    }

    #[tokio::test]
    async fn an_entry_of_another_source_is_never_touched() {
        let store = Arc::new(ConfigStore::new());
        store.apply(bookinfo::puts(GROUP));
        store.apply(bookinfo::puts(
            "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: ratings-vm-10.9.0.7, namespace: default}\n\
             spec: {address: 10.1.1.1}\n",
        ));
        let engine = PushEngine::new();
        let (tx, _rx) = mpsc::channel(16);
        let mut source = AutoRegistration::new(store.clone(), engine.clone(), tx, Duration::ZERO);
        let handle = engine.queue().register(Arc::new(vm("10.9.0.7", "ratings-vm")));
        let now = Instant::now();
        assert!(source.reconcile(now).await);
        engine.queue().unregister(handle.id);
        assert!(source.reconcile(now + Duration::from_secs(1)).await);
        let key = ConfigKey::new(ConfigKind::WorkloadEntry, "default", "ratings-vm-10.9.0.7");
        let Some(ConfigObject::WorkloadEntry(entry)) = store.snapshot().get(&key).map(|s| (*s.object).clone()) else {
            panic!()
        };
        assert_eq!(entry.spec.address, "10.1.1.1", "the file's entry stays as written");
    }
}
