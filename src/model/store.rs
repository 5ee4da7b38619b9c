//! `ConfigStore`: every config object by key, with its source and revision.
//!
//! Writers (sources) apply batches; each batch yields a [`ChangeSet`] naming
//! exactly the keys whose content changed — an unchanged re-apply yields
//! nothing. Readers take a [`StoreSnapshot`]: one persistent map per kind
//! (`imbl::OrdMap`), so taking a snapshot is O(kinds) and a write copies only
//! the O(log n) path to the changed entry, however many snapshots still hold
//! the old version — one Pod update among 100,000 costs microseconds.
//!
//! Invariant: a snapshot never changes after it is taken.

use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

use crate::config::{ConfigKey, ConfigKind, ConfigObject, SourceRef};

/// One object in the store.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredObject {
    /// The object, shared with the source that read it (a file source
    /// keeps each file's objects to re-put them; sharing keeps one copy).
    pub object: Arc<ConfigObject>,
    /// Where it came from.
    pub source: SourceRef,
    /// Store revision at which this version was written.
    pub revision: u64,
}

/// Objects of one kind, ordered by key.
pub type KindMap = imbl::OrdMap<ConfigKey, Arc<StoredObject>>;

/// An immutable view of the whole store.
#[derive(Debug, Clone, Default)]
pub struct StoreSnapshot {
    kinds: [KindMap; ConfigKind::ALL.len()],
    revision: u64,
}

impl StoreSnapshot {
    /// Objects of one kind, ordered by key.
    pub fn kind(&self, kind: ConfigKind) -> &KindMap {
        &self.kinds[kind as usize]
    }

    /// One object.
    pub fn get(&self, key: &ConfigKey) -> Option<&Arc<StoredObject>> {
        self.kinds[key.kind as usize].get(key)
    }

    /// The revision of the last write included.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Number of objects of all kinds.
    pub fn len(&self) -> usize {
        self.kinds.iter().map(|k| k.len()).sum()
    }

    /// Whether the store holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// All objects, kind by kind.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<StoredObject>> {
        self.kinds.iter().flat_map(|k| k.values())
    }

    /// The mesh config the store holds (its one `MeshConfig` object, which
    /// the mesh config source writes), if any.
    pub fn mesh_config(&self) -> Option<Arc<crate::config::mesh::MeshConfig>> {
        let key = ConfigKey::new(ConfigKind::MeshConfig, "", crate::config::mesh::MESH_CONFIG_NAME);
        match &*self.get(&key)?.object {
            ConfigObject::MeshConfig(o) => Some(o.mesh.clone()),
            _ => None,
        }
    }
}

/// One write of a batch.
#[derive(Debug, Clone)]
pub enum Write {
    /// Insert or replace an object.
    Put(Arc<ConfigObject>, SourceRef),
    /// Remove an object (absent keys are ignored).
    Delete(ConfigKey),
    /// Remove an object if it is still the version `source` wrote (the
    /// `file` of its [`SourceRef`]): a source that shares keys with others
    /// withdraws its own objects and never one another source wrote since.
    Withdraw(ConfigKey, Arc<str>),
}

impl Write {
    /// A [`Write::Put`] of `object`, owned or already shared.
    pub fn put(object: impl Into<Arc<ConfigObject>>, source: SourceRef) -> Write {
        Write::Put(object.into(), source)
    }
}

/// The keys a batch changed, and the store as it was right after the batch.
///
/// Carrying the snapshot lets the push engine build from exactly the state
/// the merged keys describe, never from a newer one whose changes it has not
/// been told about yet.
#[derive(Debug, Clone, Default)]
pub struct ChangeSet {
    /// Changed keys, each once.
    pub keys: Vec<ConfigKey>,
    /// The store revision after the batch.
    pub revision: u64,
    /// The store right after the batch.
    pub snapshot: StoreSnapshot,
}

impl ChangeSet {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// The config store. Cheap to share (`Arc<ConfigStore>`); writes are serialized.
#[derive(Debug, Default)]
pub struct ConfigStore {
    current: Mutex<StoreSnapshot>,
    /// Held across a write and its delivery ([`ConfigStore::apply_then`]).
    delivery: Mutex<()>,
}

impl ConfigStore {
    /// An empty store.
    pub fn new() -> ConfigStore {
        ConfigStore::default()
    }

    /// The current contents.
    pub fn snapshot(&self) -> StoreSnapshot {
        self.current.lock().clone()
    }

    /// Applies a batch like [`apply`](Self::apply) and, before any other
    /// `apply_then` can write, hands a non-empty change set to `deliver`.
    ///
    /// Sources that share one channel to the debouncer write through this
    /// with a slot reserved beforehand (`deliver` sends without waiting), so
    /// change sets arrive in revision order: a push is never built from a
    /// snapshot older than one already pushed.
    pub fn apply_then(&self, writes: impl IntoIterator<Item = Write>, deliver: impl FnOnce(ChangeSet)) -> ChangeSet {
        let _order = self.delivery.lock();
        let changes = self.apply(writes);
        if !changes.is_empty() {
            deliver(changes.clone());
        }
        changes
    }

    /// Applies a batch atomically: readers see all of it or none of it.
    /// Returns the keys whose content changed (a `Put` of an identical object,
    /// even from another source position, changes nothing).
    pub fn apply(&self, writes: impl IntoIterator<Item = Write>) -> ChangeSet {
        let mut current = self.current.lock();
        let revision = current.revision + 1;
        let mut keys = Vec::new();
        for write in writes {
            match write {
                Write::Put(object, source) => {
                    let key = object.key();
                    let map = &mut current.kinds[key.kind as usize];
                    match map.get(&key) {
                        Some(old) if old.object == object => {
                            if old.source != source {
                                let kept = StoredObject { object, source, revision: old.revision };
                                map.insert(key, Arc::new(kept));
                            }
                        }
                        _ => {
                            map.insert(key.clone(), Arc::new(StoredObject { object, source, revision }));
                            keys.push(key);
                        }
                    }
                }
                Write::Delete(key) => {
                    let map = &mut current.kinds[key.kind as usize];
                    if map.remove(&key).is_some() {
                        keys.push(key);
                    }
                }
                Write::Withdraw(key, source) => {
                    let map = &mut current.kinds[key.kind as usize];
                    if map.get(&key).is_some_and(|old| old.source.file == source) {
                        map.remove(&key);
                        keys.push(key);
                    }
                }
            }
        }
        keys.sort();
        keys.dedup();
        if !keys.is_empty() {
            current.revision = revision;
        }
        ChangeSet { keys, revision: current.revision, snapshot: current.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ObjectMeta, istio};

    fn vs(name: &str, host: &str) -> ConfigObject {
        ConfigObject::VirtualService(istio::VirtualService {
            metadata: ObjectMeta { name: name.into(), namespace: "default".into(), ..Default::default() },
            spec: istio::VirtualServiceSpec { hosts: vec![host.into()], ..Default::default() },
        })
    }

    fn src() -> SourceRef {
        SourceRef { file: "a.yaml".into(), doc: 0 }
    }

    #[test]
    fn identical_put_changes_nothing() {
        let store = ConfigStore::new();
        let first = store.apply([Write::put(vs("r", "reviews"), src())]);
        assert_eq!(first.keys.len(), 1);
        let again = store.apply([Write::put(vs("r", "reviews"), src())]);
        assert!(again.is_empty());
        assert_eq!(again.revision, first.revision);
    }

    #[test]
    fn a_withdrawal_removes_only_what_its_source_still_holds() {
        let store = ConfigStore::new();
        let mcp = SourceRef { file: "mcp:xds://a:1/VirtualService/default/r".into(), doc: 0 };
        store.apply([Write::put(vs("r", "reviews"), mcp.clone())]);
        // Another source writes the key since: the withdrawal leaves it.
        store.apply([Write::put(vs("r", "ratings"), src())]);
        assert!(store.apply([Write::Withdraw(vs("r", "").key(), mcp.file.clone())]).is_empty());
        assert!(store.snapshot().get(&vs("r", "").key()).is_some());
        store.apply([Write::put(vs("r", "reviews"), mcp.clone())]);
        let gone = store.apply([Write::Withdraw(vs("r", "").key(), mcp.file)]);
        assert_eq!(gone.keys, vec![vs("r", "").key()]);
        assert!(store.snapshot().get(&vs("r", "").key()).is_none());
    }

    #[test]
    fn snapshots_do_not_see_later_writes() {
        let store = ConfigStore::new();
        store.apply([Write::put(vs("r", "reviews"), src())]);
        let before = store.snapshot();
        let changes = store.apply([Write::put(vs("r", "ratings"), src()), Write::Delete(vs("x", "y").key())]);
        assert_eq!(changes.keys, vec![vs("r", "").key()]);
        let ConfigObject::VirtualService(old) = &*before.get(&vs("r", "").key()).unwrap().object else {
            panic!("wrong kind")
        };
        assert_eq!(old.spec.hosts, vec!["reviews".to_string()]);
        assert_eq!(store.snapshot().len(), 1);
    }
}
