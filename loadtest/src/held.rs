//! What a simulated Envoy holds of each type: every resource's name, the
//! version the server gave it (delta) and, when a run measures resends,
//! a hash of its content. This is what a reconnecting Envoy tells the new
//! server it has (delta: `initial_resource_versions`), and what a run
//! compares a resent resource with to tell whether it changed.
//!
//! A [`Held`] is interned like the name lists ([`crate::track::NameSets`]):
//! sidecars of one scope hold the same resources, so ten thousand streams
//! share about a hundred records per type. The table keeps only weak
//! references, so a record no stream holds any more (superseded by churn)
//! is freed.
//!
//! Invariants: a record's entries are sorted by name, with one entry per
//! name; its encoded `initial_resource_versions` is built at most once.

use std::collections::HashMap;
use std::hash::{BuildHasher as _, Hash};
use std::sync::{Arc, OnceLock, Weak};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::track::{NameSet, XdsType};
use crate::wire;

/// One held resource.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Entry {
    name: Box<str>,
    /// The server's version of it (delta), empty on SotW.
    version: Box<str>,
    /// xxh3 of its encoding, 0 when the run does not measure resends.
    content: u64,
}

/// Every resource of one type a stream holds.
#[derive(Debug)]
pub(crate) struct Held {
    entries: Vec<Entry>,
    encoded_versions: OnceLock<Bytes>,
}

impl Held {
    /// The content hash of `name`, if held.
    pub(crate) fn content(&self, name: &str) -> Option<u64> {
        self.entries.binary_search_by(|e| (*e.name).cmp(name)).ok().map(|i| self.entries[i].content)
    }

    /// How many resources.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// `initial_resource_versions` for these resources, encoded once.
    pub(crate) fn encoded_versions(&self) -> &Bytes {
        self.encoded_versions
            .get_or_init(|| wire::encode_initial_versions(self.entries.iter().map(|e| (&*e.name, &*e.version))))
    }
}

/// A received resource, borrowed from its response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Incoming<'a> {
    pub(crate) name: &'a str,
    pub(crate) version: &'a str,
    pub(crate) content: u64,
}

/// Interns [`Held`] records per type.
#[derive(Debug, Default)]
pub(crate) struct HeldTable {
    maps: [Mutex<Interned>; 4],
}

/// One type's records by hash, and how many were made since the last sweep.
#[derive(Debug, Default)]
struct Interned {
    by_hash: HashMap<u64, Vec<Weak<Held>>>,
    made: usize,
}

/// Records made between two sweeps of the dead ones.
const SWEEP_EVERY: usize = 4096;

/// What a response does to what a stream holds of its type.
pub(crate) enum Update<'r, 'a> {
    /// A SotW response of a wildcard type (CDS, LDS): the whole set.
    Replace(&'r [Incoming<'a>]),
    /// A SotW response of EDS or RDS: these resources, of which the stream
    /// keeps the names it watches.
    Merge(&'r [Incoming<'a>], Option<&'r NameSet>),
    /// A delta response: resources added or changed, names removed.
    Delta(&'r [Incoming<'a>], &'r [&'a str]),
    /// An unsubscription: these names are dropped.
    Drop(&'r [&'a str]),
}

impl HeldTable {
    /// `old` (none: nothing held yet) of type `t` with `update` applied.
    pub(crate) fn apply(&self, t: XdsType, old: Option<&Held>, update: Update<'_, '_>) -> Arc<Held> {
        let kept = |e: &&Entry| -> bool {
            match &update {
                Update::Replace(_) => false,
                Update::Merge(received, watched) => {
                    watched.is_none_or(|w| w.position(&e.name).is_some())
                        && received.binary_search_by(|r| r.name.cmp(&e.name)).is_err()
                }
                Update::Delta(received, removed) => {
                    received.binary_search_by(|r| r.name.cmp(&e.name)).is_err() && !removed.contains(&&*e.name)
                }
                Update::Drop(names) => !names.contains(&&*e.name),
            }
        };
        let mut entries: Vec<Incoming<'_>> = old
            .map(|old| &old.entries)
            .into_iter()
            .flatten()
            .filter(kept)
            .map(|e| Incoming { name: &e.name, version: &e.version, content: e.content })
            .collect();
        match update {
            Update::Replace(received) | Update::Delta(received, _) => entries.extend_from_slice(received),
            Update::Merge(received, watched) => {
                entries.extend(received.iter().filter(|r| watched.is_none_or(|w| w.position(r.name).is_some())))
            }
            Update::Drop(_) => {}
        }
        entries.sort_unstable_by(|a, b| a.name.cmp(b.name));
        entries.dedup_by(|a, b| a.name == b.name);
        self.intern(t, &entries)
    }

    fn intern(&self, t: XdsType, entries: &[Incoming<'_>]) -> Arc<Held> {
        let hash = foldhash::fast::FixedState::default().hash_one(entries);
        let mut interned = self.maps[t as usize].lock();
        interned.made += 1;
        if interned.made >= SWEEP_EVERY {
            interned.made = 0;
            interned.by_hash.retain(|_, bucket| {
                bucket.retain(|w| w.strong_count() > 0);
                !bucket.is_empty()
            });
        }
        let bucket = interned.by_hash.entry(hash).or_default();
        bucket.retain(|w| w.strong_count() > 0);
        let same = |held: &Arc<Held>| {
            held.entries.len() == entries.len()
                && held
                    .entries
                    .iter()
                    .zip(entries)
                    .all(|(e, r)| *e.name == *r.name && *e.version == *r.version && e.content == r.content)
        };
        if let Some(found) = bucket.iter().filter_map(Weak::upgrade).find(same) {
            return found;
        }
        let held = Arc::new(Held {
            entries: entries
                .iter()
                .map(|r| Entry { name: r.name.into(), version: r.version.into(), content: r.content })
                .collect(),
            encoded_versions: OnceLock::new(),
        });
        bucket.push(Arc::downgrade(&held));
        held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn received<'a>(list: &[(&'a str, &'a str, u64)]) -> Vec<Incoming<'a>> {
        let mut v: Vec<Incoming<'a>> =
            list.iter().map(|&(name, version, content)| Incoming { name, version, content }).collect();
        v.sort();
        v
    }

    #[test]
    fn delta_updates_replace_add_and_remove_and_streams_share_records() {
        let table = HeldTable::default();
        let first = received(&[("a", "1", 10), ("b", "1", 20)]);
        let held = table.apply(XdsType::Cluster, None, Update::Delta(&first, &[]));
        assert_eq!(held.len(), 2);
        let again = table.apply(XdsType::Cluster, None, Update::Delta(&first, &[]));
        assert!(Arc::ptr_eq(&held, &again), "the same content is one record");

        let next = received(&[("b", "2", 21), ("c", "1", 30)]);
        let held = table.apply(XdsType::Cluster, Some(&held), Update::Delta(&next, &["a"]));
        assert_eq!((held.content("a"), held.content("b"), held.content("c")), (None, Some(21), Some(30)));

        let held = table.apply(XdsType::Cluster, Some(&held), Update::Drop(&["c"]));
        assert_eq!((held.len(), held.content("c")), (1, None));
    }

    #[test]
    fn sotw_wildcard_responses_replace_and_eds_responses_merge_within_the_watched_names() {
        let table = HeldTable::default();
        let held = table.apply(XdsType::Cluster, None, Update::Replace(&received(&[("a", "", 1), ("b", "", 2)])));
        let held = table.apply(XdsType::Cluster, Some(&held), Update::Replace(&received(&[("c", "", 3)])));
        assert_eq!((held.len(), held.content("a"), held.content("c")), (1, None, Some(3)));

        let names = crate::track::NameSets::default();
        let watched = names.intern(XdsType::Endpoint, &["x", "y"]);
        let eds = table.apply(XdsType::Endpoint, None, Update::Merge(&received(&[("x", "", 1), ("y", "", 2)]), None));
        let eds = table.apply(
            XdsType::Endpoint,
            Some(&eds),
            Update::Merge(&received(&[("y", "", 5), ("z", "", 6)]), Some(&watched)),
        );
        assert_eq!((eds.content("x"), eds.content("y"), eds.content("z")), (Some(1), Some(5), None));
    }

    #[test]
    fn a_record_no_stream_holds_is_freed() {
        let table = HeldTable::default();
        let held = table.apply(XdsType::Route, None, Update::Delta(&received(&[("r", "1", 1)]), &[]));
        let weak = Arc::downgrade(&held);
        drop(held);
        assert!(weak.upgrade().is_none());
        let _other = table.apply(XdsType::Route, None, Update::Delta(&received(&[("r", "1", 1)]), &[]));
        let live: usize = table.maps[XdsType::Route as usize].lock().by_hash.values().map(Vec::len).sum();
        assert_eq!(live, 1, "the dead record's slot was pruned when its bucket was next used");
    }
}
