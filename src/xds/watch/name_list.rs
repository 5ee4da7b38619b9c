//! `NameList`: a watched list of resource names, built once and shared by
//! every stream that watches the same names.
//!
//! Envoys in one scope watch the same names: a thousand sidecars send the
//! same 1,000-name EDS list, and send it again with every ACK. Each distinct
//! list is built once — sorted, deduplicated, `*` taken out, each name's
//! hash computed, EDS names indexed by host on first use — and a stream's
//! subscription is one pointer to it. A request whose list was seen before
//! costs a hash and a comparison, and allocates nothing.
//!
//! Invariants: `names` is sorted and unique and never holds `*`; a list
//! never changes once built; [`intern`] hands out the one live list for a
//! given request (it compares the names, never trusts the hash alone); the
//! table holds weak references, so a list lives while a stream watches it.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, OnceLock};

use parking_lot::Mutex;
use serde::Serialize;

use crate::model::weak_table::WeakTable;
use crate::resource::EncodedResource;

/// One watched list of names.
#[derive(Debug, Default)]
pub struct NameList {
    /// The names as the client sent them (order kept, `*` included): what a
    /// request is compared against when it is looked up.
    requested: Box<[Arc<str>]>,
    /// Sorted, unique, without `*`.
    names: Box<[Arc<str>]>,
    /// `name_key(names[i])`, for order-free version sums.
    keys: Box<[u64]>,
    /// The client named `*`.
    star: bool,
    /// EDS: positions in `names` by service host, built on first use.
    by_host: OnceLock<HashMap<Box<str>, Box<[u32]>, foldhash::fast::RandomState>>,
    /// EDS: the assignments of these names in the snapshot of the given
    /// [`PushContext::id`](crate::push::PushContext::id), per endpoint view
    /// (empty key: no view), resolved by the first stream that needed them.
    endpoints: Mutex<Option<(u64, ByView)>>,
}

/// Resolutions of one snapshot, by endpoint view key.
type ByView = Vec<(Arc<str>, Arc<Resolved>)>;

/// The resources of a list's names in one snapshot.
#[derive(Debug, Default)]
pub struct Resolved {
    /// The resources that exist, in name order.
    pub resources: Vec<Arc<EncodedResource>>,
    /// Each one's position in [`NameList::names`].
    pub positions: Vec<u32>,
    /// The version of the whole list in this snapshot (the protocol's sum
    /// over the resources), computed once with them.
    pub version: Arc<str>,
    /// The sum `version` is the text of.
    pub sum: u64,
}

impl NameList {
    /// The list of no names, shared: a stream starts with one per type, and
    /// lists the clients send are shared likewise ([`intern`]).
    pub fn none() -> Arc<NameList> {
        static NONE: LazyLock<Arc<NameList>> = LazyLock::new(Default::default);
        NONE.clone()
    }

    /// Sorted, unique names, without `*`.
    pub fn names(&self) -> &[Arc<str>] {
        &self.names
    }

    /// The hash of `names()[i]` (see [`name_key`]).
    pub fn key(&self, i: usize) -> u64 {
        self.keys[i]
    }

    /// How many names (without `*`).
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// No names (a `*` alone counts as none).
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Whether the client named `*`.
    pub fn has_star(&self) -> bool {
        self.star
    }

    /// The position of `name` in [`names`](Self::names).
    pub fn position(&self, name: &str) -> Option<usize> {
        self.names.binary_search_by(|n| (**n).cmp(name)).ok()
    }

    /// Whether `name` is watched.
    pub fn contains(&self, name: &str) -> bool {
        self.position(name).is_some()
    }

    /// Positions of the watched EDS names whose cluster is of service `host`.
    pub fn positions_of_host(&self, host: &str) -> &[u32] {
        let by_host = self.by_host.get_or_init(|| {
            // Looked up once per changed host for every stream pushed: a
            // fast hasher (the keys are the mesh's own hostnames).
            let mut by_host: HashMap<Box<str>, Vec<u32>, foldhash::fast::RandomState> = HashMap::default();
            for (i, n) in self.names.iter().enumerate() {
                if let Some(h) = crate::generate::eds::host_of(n) {
                    by_host.entry(h.into()).or_default().push(i as u32);
                }
            }
            by_host.into_iter().map(|(h, v)| (h, v.into_boxed_slice())).collect()
        });
        by_host.get(host).map_or(&[], |v| v)
    }

    /// The assignments of this list's names in snapshot `ctx_id` for the
    /// endpoint view `view` (its key; empty without one): resolved once per
    /// snapshot and view, by the first stream that asks (the others wait for
    /// it rather than repeat the lookups), then shared.
    pub fn endpoints(&self, ctx_id: u64, view: &str, resolve: impl FnOnce(&NameList) -> Resolved) -> Arc<Resolved> {
        let mut memo = self.endpoints.lock();
        match &mut *memo {
            Some((id, views)) if *id == ctx_id => {
                if let Some((_, resolved)) = views.iter().find(|(v, _)| &**v == view) {
                    return resolved.clone();
                }
                let resolved = Arc::new(resolve(self));
                views.push((Arc::from(view), resolved.clone()));
                resolved
            }
            _ => {
                let resolved = Arc::new(resolve(self));
                *memo = Some((ctx_id, vec![(Arc::from(view), resolved.clone())]));
                resolved
            }
        }
    }

    /// The watched names (with their positions) of services `hosts`.
    pub fn of_hosts<'a, H: AsRef<str> + 'a>(
        &'a self,
        hosts: impl IntoIterator<Item = &'a H>,
    ) -> impl Iterator<Item = (usize, &'a Arc<str>)> {
        hosts
            .into_iter()
            .flat_map(|h| self.positions_of_host(h.as_ref()))
            .map(|&i| (i as usize, &self.names[i as usize]))
    }

    /// This list with `subscribe` added and `unsubscribe` taken out (delta
    /// subscriptions), interned like a requested list. `*` in either is left
    /// to the caller.
    pub fn edit(&self, subscribe: &[&str], unsubscribe: &[&str]) -> Arc<NameList> {
        let unsubscribe: std::collections::HashSet<&str> = unsubscribe.iter().copied().collect();
        let mut names: Vec<&str> = self.names.iter().map(|n| &**n).filter(|n| !unsubscribe.contains(n)).collect();
        names.extend(subscribe.iter().filter(|n| **n != "*" && !unsubscribe.contains(*n)));
        names.sort_unstable();
        names.dedup();
        let bytes = names.iter().map(|n| n.as_bytes());
        intern(names_hash(bytes.clone()), bytes)
    }

    fn build<'a>(requested: impl Iterator<Item = &'a [u8]>) -> NameList {
        // Envoy writes UTF-8 (its names are proto3 strings); a name that is
        // not cannot match any resource, and is kept as the lossy text only
        // to be shown.
        let requested: Box<[Arc<str>]> = requested.map(|n| Arc::from(String::from_utf8_lossy(n).as_ref())).collect();
        let mut names: Vec<Arc<str>> = requested.iter().filter(|n| &***n != "*").cloned().collect();
        names.sort_unstable();
        names.dedup();
        let keys = names.iter().map(|n| name_key(n)).collect();
        let star = requested.iter().any(|n| &**n == "*");
        NameList { requested, names: names.into(), keys, star, by_host: OnceLock::new(), endpoints: Mutex::new(None) }
    }

    fn is_request<'a>(&self, mut requested: impl ExactSizeIterator<Item = &'a [u8]>) -> bool {
        self.requested.len() == requested.len() && self.requested.iter().all(|a| requested.next() == Some(a.as_bytes()))
    }
}

impl Serialize for NameList {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.names.iter().map(|n| &**n))
    }
}

/// The hash of one name, the base of order-free version sums.
pub fn name_key(name: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(name.as_bytes())
}

/// Hash of a requested name list, order kept (Envoy repeats the same
/// order; a reordered list is only interned once more): xxh3 of the names
/// as a request encodes them (field 3: key, length, bytes), so a request
/// reader can hash the encoded entries in one pass.
pub fn names_hash<'a>(names: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut prefix = [0u8; 11];
    for n in names {
        prefix[0] = 3 << 3 | 2;
        let mut len = n.len() as u64;
        let mut at = 1;
        while len >= 0x80 {
            prefix[at] = (len as u8) | 0x80;
            len >>= 7;
            at += 1;
        }
        prefix[at] = len as u8;
        h.update(&prefix[..=at]);
        h.update(n);
    }
    h.digest()
}

/// The live lists by request hash.
static TABLE: LazyLock<WeakTable<NameList>> = LazyLock::new(Default::default);

/// The shared list for a request's names; `hash` is [`names_hash`] of them.
/// Content-addressed, so one table serves every engine in the process.
pub fn intern<'a, I>(hash: u64, requested: I) -> Arc<NameList>
where
    I: IntoIterator<Item = &'a [u8]>,
    I::IntoIter: ExactSizeIterator + Clone,
{
    let requested = requested.into_iter();
    TABLE.intern_with(hash, |list| list.is_request(requested.clone()), || NameList::build(requested.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(names: &[&str]) -> Arc<NameList> {
        let bytes = names.iter().map(|n| n.as_bytes());
        intern(names_hash(bytes.clone()), bytes)
    }

    #[test]
    fn equal_requests_share_one_list_and_different_ones_do_not() {
        let a = req(&["b", "a", "*"]);
        let b = req(&["b", "a", "*"]);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.names().iter().map(|n| &**n).collect::<Vec<_>>(), ["a", "b"]);
        assert!(a.has_star());
        let c = req(&["a", "b"]);
        assert!(!Arc::ptr_eq(&a, &c));
        assert!(!c.has_star());
        assert_eq!(c.position("b"), Some(1));
        assert_eq!(c.position("c"), None);
    }

    #[test]
    fn a_list_nobody_holds_is_freed_and_built_again() {
        let list = req(&["only-here-1", "only-here-2"]);
        let weak = Arc::downgrade(&list);
        drop(list);
        assert!(weak.upgrade().is_none(), "the table keeps no list alive");
        let again = req(&["only-here-1", "only-here-2"]);
        assert_eq!(again.len(), 2);
        assert!(again.contains("only-here-2"));
    }

    #[test]
    fn colliding_hashes_never_share_a_list() {
        // Force a collision: two different requests under one hash.
        let a = intern(7, [&b"x"[..]]);
        let b = intern(7, [&b"y"[..]]);
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(&*b.names()[0], "y");
        assert!(Arc::ptr_eq(&intern(7, [&b"x"[..]]), &a));
    }

    #[test]
    fn hosts_index_eds_names_and_edit_keeps_lists_shared() {
        let list = req(&[
            "outbound|9080||reviews.default.svc.cluster.local",
            "outbound|9080|v1|reviews.default.svc.cluster.local",
            "outbound|9080||ratings.default.svc.cluster.local",
        ]);
        let reviews = list.positions_of_host("reviews.default.svc.cluster.local");
        assert_eq!(reviews.len(), 2);
        assert!(reviews.iter().all(|&i| list.names()[i as usize].contains("reviews")));
        assert!(list.positions_of_host("details.default.svc.cluster.local").is_empty());

        let edited = list.edit(
            &["outbound|9080||details.default.svc.cluster.local"],
            &["outbound|9080|v1|reviews.default.svc.cluster.local"],
        );
        assert_eq!(edited.len(), 3);
        assert!(edited.contains("outbound|9080||details.default.svc.cluster.local"));
        assert!(!edited.contains("outbound|9080|v1|reviews.default.svc.cluster.local"));
        let same = list.edit(
            &["outbound|9080||details.default.svc.cluster.local"],
            &["outbound|9080|v1|reviews.default.svc.cluster.local"],
        );
        assert!(Arc::ptr_eq(&edited, &same));
    }

    #[test]
    fn endpoints_resolve_once_per_snapshot() {
        let list = req(&["memo-a", "memo-b"]);
        let mut calls = 0;
        let mut resolve = |id: u64| {
            list.endpoints(id, "", |l| {
                calls += 1;
                Resolved {
                    resources: Vec::new(),
                    positions: (0..l.len() as u32).collect(),
                    version: "v".into(),
                    sum: 0,
                }
            })
        };
        let first = resolve(41);
        let again = resolve(41);
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(first.positions, [0, 1]);
        let next = resolve(42);
        assert!(!Arc::ptr_eq(&first, &next));
        assert_eq!(calls, 2, "one resolution per snapshot");
    }
}
