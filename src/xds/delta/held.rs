//! `Held`: what a delta client holds of one type, name → content hash.
//!
//! Every delta stream keeps one per type, so at 10,000 streams × ~400 names
//! the layout is most of what delta costs beyond SotW. A sorted vector of
//! `(name, hash)` takes 24 bytes a name (the name itself is shared with the
//! cache and the watch lists) where a hash map took 50–70 with its spare
//! capacity, and a response finds what changed by walking it beside the
//! sorted current resources instead of hashing every name.
//!
//! Invariants: names are sorted and unique. A hash of [`UNKNOWN`] stands
//! for a version meshpush did not write (a reconnecting client's
//! `initial_resource_versions` that are not content hashes): it differs from
//! every current one. A resource whose real content hash is that value (one
//! in 2^64) is taken for unknown too, and only sent again when pushed.

use std::sync::Arc;

use crate::resource::EncodedResource;

/// The stored hash of a held version meshpush did not write.
pub const UNKNOWN: u64 = 0;

/// What a delta client holds of one type.
#[derive(Debug, Default)]
pub struct Held {
    entries: Vec<(Arc<str>, u64)>,
}

impl Held {
    /// From a reconnecting client's `initial_resource_versions` (`None`: not
    /// a version meshpush wrote).
    pub fn from_versions(versions: impl IntoIterator<Item = (Arc<str>, Option<u64>)>) -> Held {
        let mut entries: Vec<(Arc<str>, u64)> = versions.into_iter().map(|(n, v)| (n, v.unwrap_or(UNKNOWN))).collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        entries.dedup_by(|a, b| a.0 == b.0);
        entries.shrink_to_fit();
        Held { entries }
    }

    fn find(&self, name: &str) -> Result<usize, usize> {
        self.entries.binary_search_by(|(n, _)| (**n).cmp(name))
    }

    /// The client holds `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.find(name).is_ok()
    }

    /// The client holds nothing of this type.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Held names and versions (`None`: unknown), in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, Option<u64>)> {
        self.entries.iter().map(|(n, h)| (n, (*h != UNKNOWN).then_some(*h)))
    }

    /// Held names, in name order.
    pub fn names(&self) -> impl Iterator<Item = &Arc<str>> {
        self.entries.iter().map(|(n, _)| n)
    }

    /// The resources of `current` (sorted by name, unique) that the client
    /// does not hold at their hash: one walk over both lists.
    pub fn differing(&self, current: &[Arc<EncodedResource>]) -> Vec<Arc<EncodedResource>> {
        let mut held = self.entries.iter().peekable();
        let mut out = Vec::new();
        for r in current {
            while held.next_if(|(n, _)| **n < *r.name).is_some() {}
            match held.peek() {
                Some((n, h)) if **n == *r.name && *h == r.hash && *h != UNKNOWN => {}
                _ => out.push(r.clone()),
            }
        }
        out
    }

    /// Forgets `name` (the client dropped it, or asks for it anew).
    pub fn remove(&mut self, name: &str) {
        if let Ok(i) = self.find(name) {
            self.entries.remove(i);
        }
    }

    /// Keeps only the names `keep` says.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.entries.retain(|(n, _)| keep(n));
    }

    /// Records a response: the client now holds each of `sent` (sorted by
    /// name, unique) at its hash, and none of `removed` (sorted; never one
    /// of `sent`, which exist).
    pub fn record(&mut self, sent: &[Arc<EncodedResource>], removed: &[Arc<str>]) {
        if sent.is_empty() && removed.is_empty() {
            return;
        }
        let mut out: Vec<(Arc<str>, u64)> = Vec::with_capacity(self.entries.len() + sent.len());
        let mut old = std::mem::take(&mut self.entries).into_iter().peekable();
        let mut removed = removed.iter().peekable();
        let mut keep = |entry: (Arc<str>, u64), out: &mut Vec<(Arc<str>, u64)>| {
            while removed.next_if(|n| ***n < *entry.0).is_some() {}
            if removed.peek().is_none_or(|n| ***n != *entry.0) {
                out.push(entry);
            }
        };
        for r in sent {
            while let Some(entry) = old.next_if(|(n, _)| **n < *r.name) {
                keep(entry, &mut out);
            }
            old.next_if(|(n, _)| **n == *r.name);
            out.push((r.name.clone(), r.hash));
        }
        for entry in old {
            keep(entry, &mut out);
        }
        if out.capacity() > out.len() + out.len() / 8 {
            out.shrink_to_fit();
        }
        self.entries = out;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(name: &str, hash: u64) -> Arc<EncodedResource> {
        Arc::new(EncodedResource { name: Arc::from(name), bytes: bytes::Bytes::new(), hash })
    }

    fn held(entries: &[(&str, Option<u64>)]) -> Held {
        Held::from_versions(entries.iter().map(|(n, h)| (Arc::from(*n), *h)))
    }

    fn listed(h: &Held) -> Vec<(String, Option<u64>)> {
        h.iter().map(|(n, v)| (n.to_string(), v)).collect()
    }

    #[test]
    fn versions_from_a_reconnect_are_sorted_and_unique() {
        let h = held(&[("b", Some(2)), ("a", None), ("b", Some(2)), ("c", Some(3))]);
        assert_eq!(listed(&h), vec![("a".into(), None), ("b".into(), Some(2)), ("c".into(), Some(3))]);
        assert!(h.contains("b") && !h.contains("d"));
    }

    #[test]
    fn differing_lists_what_is_missing_changed_or_unknown() {
        let h = held(&[("a", Some(1)), ("b", None), ("c", Some(3)), ("z", Some(9))]);
        let current = [resource("a", 1), resource("b", 2), resource("c", 4), resource("d", 5)];
        let names: Vec<String> = h.differing(&current).iter().map(|r| r.name.to_string()).collect();
        assert_eq!(names, ["b", "c", "d"]);
        assert!(Held::default().differing(&current).len() == 4);
    }

    #[test]
    fn record_merges_sent_and_drops_removed() {
        let mut h = held(&[("a", Some(1)), ("c", Some(3)), ("e", Some(5)), ("g", Some(7))]);
        h.record(&[resource("b", 20), resource("c", 30), resource("h", 80)], &[Arc::from("a"), Arc::from("g")]);
        assert_eq!(
            listed(&h),
            vec![("b".into(), Some(20)), ("c".into(), Some(30)), ("e".into(), Some(5)), ("h".into(), Some(80))]
        );
        h.remove("b");
        h.retain(|n| n != "h");
        assert_eq!(h.names().map(|n| n.to_string()).collect::<Vec<_>>(), ["c", "e"]);
    }
}
