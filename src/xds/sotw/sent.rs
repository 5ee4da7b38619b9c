//! `Sent`: what one SotW stream sent of one type, so that it sends only
//! what changed and can tell an ACK from a new subscription.
//!
//! For CDS and LDS that is the whole set last sent, shared with the streams
//! sent the same. For EDS and RDS it is the hash of each watched name's
//! resource as the client holds it, and the stream usually holds exactly
//! what every stream watching its list holds: the list's resolution in
//! some snapshot ([`Resolved`], shared by those streams). So the stream
//! keeps that resolution as its base, and only the positions where it
//! differs (an endpoint push sends a few assignments; a new list carries
//! over what the old one had) as sorted changes on top. A synced stream's
//! EDS state is then one pointer however many clusters it watches, where a
//! hash per name was 8 bytes × names for every stream.
//!
//! Invariants: `changes` is sorted by position, unique, and never repeats
//! what the base holds at that position; `sum` is the sum of [`mix`] over
//! every position held (base or change). A base keeps its snapshot's
//! resources of this list alive until the stream moves on: a stream moves
//! to a newer resolution whenever it is sent one, and after an endpoint
//! push once its changes pass [`REBASE_AFTER`] and it holds the current
//! resolution, so only streams behind the current snapshot hold older ones.

use std::sync::Arc;

use crate::resource::ResourceSet;
use crate::xds::watch::name_list::{NameList, Resolved};

/// The mark, in `changes`, of a position the client does not hold.
const NOT_SENT: u64 = 0;

/// Changes an endpoint push may pile up on a base before the stream checks
/// whether it holds the current resolution and can take it as its base.
pub const REBASE_AFTER: usize = 16;

/// One resource's share of an EDS or RDS version (`key` is the hash of its
/// name): versions are order-free sums, so they can be updated for a few
/// resources at a time.
pub fn mix(key: u64, hash: u64) -> u64 {
    key.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ hash
}

/// The version text of a sum of [`mix`]es.
pub fn sum_version(sum: u64) -> Arc<str> {
    format!("{sum:016x}").into()
}

/// What a SotW stream sent of one type beyond the shared `Watch`.
#[derive(Debug, Default)]
pub struct Sent {
    /// The client has named resources explicitly at least once (CDS, LDS:
    /// an empty list then means none, not all).
    pub explicit_ever: bool,
    /// Hash of the last request's name list (cheap ACK detection).
    pub names_hash: u64,
    /// EDS and RDS: the resolution the client holds, but for `changes`
    /// (`None`: nothing but `changes`).
    base: Option<Arc<Resolved>>,
    /// EDS and RDS: `(position, hash)` where the client's copy differs from
    /// `base` ([`NOT_SENT`]: it holds none), sorted by position.
    changes: Vec<(u32, u64)>,
    /// EDS and RDS: the sum of `mix` over what is held, so a change of a few
    /// resources updates the version without visiting every name.
    pub sum: u64,
    /// CDS and LDS: the set sent last, shared with the streams that were
    /// sent the same (clusters are kept from it to delay their removal).
    pub resources: Arc<ResourceSet>,
}

impl Sent {
    /// CDS and LDS: the hash of `name` as last sent.
    pub fn resource_hash(&self, name: &str) -> Option<u64> {
        self.resources.get(name).map(|r| r.hash)
    }

    /// EDS and RDS: the hash of `name` of `names` as the client holds it.
    pub fn hash(&self, names: &NameList, name: &str) -> Option<u64> {
        names.position(name).and_then(|i| self.sent_hash(i))
    }

    /// EDS and RDS: whether the client holds anything.
    pub fn holds_any(&self) -> bool {
        self.base.as_ref().is_some_and(|b| !b.resources.is_empty()) || self.changes.iter().any(|&(_, h)| h != NOT_SENT)
    }

    /// EDS and RDS: the hash of the resource at position `i` as the client holds it.
    pub fn sent_hash(&self, i: usize) -> Option<u64> {
        match self.changes.binary_search_by_key(&(i as u32), |&(p, _)| p) {
            Ok(k) => Some(self.changes[k].1),
            Err(_) => self.base_hash(i),
        }
        .filter(|&h| h != NOT_SENT)
    }

    /// The hash at position `i` of the base.
    fn base_hash(&self, i: usize) -> Option<u64> {
        let base = self.base.as_ref()?;
        base.positions.binary_search(&(i as u32)).ok().map(|k| base.resources[k].hash)
    }

    /// EDS and RDS: records that the resource at position `i` of `names`
    /// was sent with `hash` (`None`: it is gone), moving `sum` by the difference.
    pub fn record(&mut self, names: &NameList, i: usize, hash: Option<u64>) {
        let key = names.key(i);
        let at = self.changes.binary_search_by_key(&(i as u32), |&(p, _)| p);
        let base = self.base_hash(i).unwrap_or(NOT_SENT);
        let old = at.map_or(base, |k| self.changes[k].1);
        if old != NOT_SENT {
            self.sum = self.sum.wrapping_sub(mix(key, old));
        }
        let new = hash.unwrap_or(NOT_SENT);
        if new != NOT_SENT {
            self.sum = self.sum.wrapping_add(mix(key, new));
        }
        match (at, base == new) {
            (Ok(k), true) => {
                self.changes.remove(k);
            }
            (Ok(k), false) => self.changes[k].1 = new,
            (Err(_), true) => {}
            (Err(k), false) => self.changes.insert(k, (i as u32, new)),
        }
    }

    /// EDS and RDS: the client now holds `resolved` (it was sent what it
    /// lacked of it). What it held of names `resolved` does not have is
    /// forgotten: should one come back it is sent again, which is harmless.
    pub fn rebase(&mut self, resolved: Arc<Resolved>) {
        self.sum = resolved.sum;
        self.changes = Vec::new();
        self.base = Some(resolved);
    }

    /// EDS and RDS: whether the client holds exactly `resolved`, this
    /// very one (a pointer comparison).
    pub fn is_based_on(&self, resolved: &Arc<Resolved>) -> bool {
        self.changes.is_empty() && self.base.as_ref().is_some_and(|b| Arc::ptr_eq(b, resolved))
    }

    /// EDS and RDS: whether the client holds every resource of `resolved`
    /// as it is there.
    pub fn holds(&self, resolved: &Arc<Resolved>) -> bool {
        if self.is_based_on(resolved) {
            return true;
        }
        resolved.resources.iter().zip(&resolved.positions).all(|(r, &i)| self.sent_hash(i as usize) == Some(r.hash))
    }

    /// EDS and RDS: the resolution the client holds but for its changes.
    pub fn base(&self) -> Option<&Arc<Resolved>> {
        self.base.as_ref()
    }

    /// EDS and RDS: how many positions differ from the base.
    pub fn changes(&self) -> usize {
        self.changes.len()
    }

    /// EDS and RDS: carries over what the client holds of the names of
    /// `old` that `new` still watches (a newly named resource is sent even
    /// if the client may have it; names dropped are no longer its concern),
    /// and recomputes `sum`.
    pub fn rewatch(&mut self, old: &NameList, new: &NameList) {
        let (before, after) = (old.names(), new.names());
        let mut changes = Vec::new();
        let (mut i, mut j) = (0, 0);
        while i < before.len() && j < after.len() {
            match before[i].cmp(&after[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    if let Some(h) = self.sent_hash(i) {
                        changes.push((j as u32, h));
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        self.sum = changes.iter().map(|&(j, h)| mix(new.key(j as usize), h)).fold(0u64, u64::wrapping_add);
        self.changes = changes;
        self.base = None;
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::resource::EncodedResource;
    use crate::xds::watch::name_list::{intern, names_hash};

    fn list(names: &[&str]) -> Arc<NameList> {
        let bytes = names.iter().map(|n| n.as_bytes());
        intern(names_hash(bytes.clone()), bytes)
    }

    /// The resolution of `names` to the resources `found` gives (name, hash).
    fn resolution(names: &NameList, found: &[(&str, u64)]) -> Arc<Resolved> {
        let (mut resources, mut positions, mut sum) = (Vec::new(), Vec::new(), 0u64);
        for &(name, hash) in found {
            let i = names.position(name).expect("a watched name");
            resources.push(Arc::new(EncodedResource { name: name.into(), bytes: Bytes::new(), hash }));
            positions.push(i as u32);
            sum = sum.wrapping_add(mix(names.key(i), hash));
        }
        Arc::new(Resolved { resources, positions, version: sum_version(sum), sum })
    }

    /// A stream that holds the resolution of `names` to `found`.
    fn based_on(names: &NameList, found: &[(&str, u64)]) -> (Sent, Arc<Resolved>) {
        let resolved = resolution(names, found);
        let mut sent = Sent::default();
        sent.rebase(resolved.clone());
        (sent, resolved)
    }

    /// The sum over what `sent` holds, computed name by name.
    fn recomputed_sum(sent: &Sent, names: &NameList) -> u64 {
        (0..names.len()).filter_map(|i| sent.sent_hash(i).map(|h| mix(names.key(i), h))).fold(0, u64::wrapping_add)
    }

    #[test]
    fn a_synced_stream_holds_the_shared_resolution_and_nothing_of_its_own() {
        let names = list(&["sent-a", "sent-b", "sent-c"]);
        let (sent, shared) = based_on(&names, &[("sent-a", 11), ("sent-c", 33)]);
        assert!(sent.is_based_on(&shared));
        assert_eq!(sent.changes(), 0, "nothing is copied per stream");
        assert_eq!(
            (sent.hash(&names, "sent-a"), sent.hash(&names, "sent-b"), sent.hash(&names, "sent-c")),
            (Some(11), None, Some(33))
        );
        assert!(sent.holds_any());
        assert_eq!(sent.sum, recomputed_sum(&sent, &names));
    }

    #[test]
    fn changes_on_a_base_move_the_sum_and_vanish_when_they_match_it_again() {
        let names = list(&["chg-a", "chg-b", "chg-c"]);
        let (mut sent, base) = based_on(&names, &[("chg-a", 11), ("chg-b", 22)]);
        sent.record(&names, names.position("chg-b").unwrap(), Some(23));
        sent.record(&names, names.position("chg-c").unwrap(), Some(33));
        sent.record(&names, names.position("chg-a").unwrap(), None);
        assert_eq!(sent.changes(), 3);
        assert_eq!(
            (sent.hash(&names, "chg-a"), sent.hash(&names, "chg-b"), sent.hash(&names, "chg-c")),
            (None, Some(23), Some(33))
        );
        assert_eq!(sent.sum, recomputed_sum(&sent, &names));
        assert!(!sent.holds(&base), "it no longer holds the base's chg-a and chg-b");

        // Back to what the base has: those changes go.
        sent.record(&names, names.position("chg-b").unwrap(), Some(22));
        sent.record(&names, names.position("chg-a").unwrap(), Some(11));
        assert_eq!(sent.changes(), 1, "only chg-c differs from the base");
        assert_eq!(sent.sum, recomputed_sum(&sent, &names));
        assert!(sent.holds(&base), "it holds every resource of the base, and chg-c besides");
        assert!(!sent.is_based_on(&base));

        let newer = resolution(&names, &[("chg-a", 11), ("chg-b", 22), ("chg-c", 33)]);
        assert!(sent.holds(&newer));
        sent.rebase(newer.clone());
        assert_eq!((sent.changes(), sent.sum), (0, newer.sum));
        assert_eq!(sent.sum, recomputed_sum(&sent, &names));
    }

    #[test]
    fn a_new_list_carries_over_what_the_client_holds_of_names_it_keeps() {
        let old = list(&["rw-a", "rw-b", "rw-c"]);
        let (mut sent, _) = based_on(&old, &[("rw-a", 11), ("rw-b", 22), ("rw-c", 33)]);
        sent.record(&old, old.position("rw-c").unwrap(), Some(34));
        let new = list(&["rw-0", "rw-b", "rw-c", "rw-d"]);
        sent.rewatch(&old, &new);
        assert_eq!(
            ["rw-0", "rw-b", "rw-c", "rw-d"].map(|n| sent.hash(&new, n)),
            [None, Some(22), Some(34), None],
            "rw-a is dropped, rw-0 and rw-d are new, rw-b and rw-c keep their hashes at their new positions"
        );
        assert_eq!(sent.sum, recomputed_sum(&sent, &new));
        assert!(!sent.holds(&resolution(&new, &[("rw-b", 22), ("rw-c", 33)])), "rw-c is held at another hash");
        assert!(sent.holds(&resolution(&new, &[("rw-b", 22), ("rw-c", 34)])));
    }
}
