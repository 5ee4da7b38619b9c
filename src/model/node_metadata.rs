//! `NodeMetadata`: a proxy's node metadata, flattened to strings, in two
//! allocations.
//!
//! A proxy's metadata is kept for as long as it is connected: EnvoyFilter
//! matches, telemetry labels, its network and cluster, and the admin
//! endpoints read it. An Istio sidecar sends twenty to thirty keys. As a
//! `BTreeMap<String, String>` that was two heap strings a key and the
//! tree's nodes, about 3.3 KB a proxy, 330 MB at 100,000 proxies. Here the
//! keys and values are one text, and the entries are where each ends in
//! it, sorted by key.
//!
//! Invariant: `ends` is sorted by key and its keys are unique; entry `i`'s
//! key is `text[start..key_end]` and its value `text[key_end..value_end]`,
//! `start` being entry `i - 1`'s `value_end` (0 for the first).

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use serde::{Serialize, Serializer};

/// String keys to string values, read-only once built.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct NodeMetadata {
    text: Box<str>,
    /// Per entry, in key order: where its key ends and where its value ends.
    ends: Box<[(usize, usize)]>,
}

impl NodeMetadata {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        let (mut lo, mut hi) = (0, self.ends.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (k, v) = self.entry(mid);
            match k.cmp(key) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Some(v),
            }
        }
        None
    }

    /// Every key and value, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        (0..self.ends.len()).map(|i| self.entry(i))
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there is no key.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Sets `key` to `value`. It lays the whole text out again: for building
    /// a proxy by hand (tests, tools), not for a path taken per request.
    pub fn insert(&mut self, key: &str, value: &str) {
        *self = self.iter().filter(|(k, _)| *k != key).chain(std::iter::once((key, value))).collect();
    }

    /// Entry `i`'s key and value.
    fn entry(&self, i: usize) -> (&str, &str) {
        let start = if i == 0 { 0 } else { self.ends[i - 1].1 };
        let (key_end, value_end) = self.ends[i];
        (&self.text[start..key_end], &self.text[key_end..value_end])
    }
}

/// A later value of a key replaces an earlier one, as in a map.
impl<K: Into<String>, V: AsRef<str>> FromIterator<(K, V)> for NodeMetadata {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> Self {
        let sorted: BTreeMap<String, V> = entries.into_iter().map(|(k, v)| (k.into(), v)).collect();
        let mut text = String::with_capacity(sorted.iter().map(|(k, v)| k.len() + v.as_ref().len()).sum());
        let mut ends = Vec::with_capacity(sorted.len());
        for (k, v) in &sorted {
            text.push_str(k);
            let key_end = text.len();
            text.push_str(v.as_ref());
            ends.push((key_end, text.len()));
        }
        NodeMetadata { text: text.into_boxed_str(), ends: ends.into_boxed_slice() }
    }
}

impl fmt::Debug for NodeMetadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// As a JSON object, as the map it stands for.
impl Serialize for NodeMetadata {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_reads_back_its_value_and_no_other_key_reads() {
        let m: NodeMetadata =
            [("NAMESPACE", "default"), ("A", ""), ("", "empty key"), ("ISTIO_VERSION", "1.28"), ("A", "again")]
                .into_iter()
                .collect();
        assert_eq!(m.len(), 4, "a repeated key is kept once");
        assert_eq!(m.get("A"), Some("again"), "the later value wins");
        assert_eq!(m.get(""), Some("empty key"));
        assert_eq!(m.get("NAMESPACE"), Some("default"));
        assert_eq!(m.get("ISTIO_VERSION"), Some("1.28"));
        for absent in ["B", "NAMESPACEdefault", "ISTIO", "Z", "a"] {
            assert_eq!(m.get(absent), None, "{absent}");
        }
        let keys: Vec<&str> = m.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["", "A", "ISTIO_VERSION", "NAMESPACE"]);
        assert_eq!(serde_json::to_value(&m).unwrap()["NAMESPACE"], "default");
        assert_eq!(
            format!("{m:?}"),
            r#"{"": "empty key", "A": "again", "ISTIO_VERSION": "1.28", "NAMESPACE": "default"}"#
        );
    }

    #[test]
    fn keys_whose_text_runs_into_their_values_stay_apart() {
        // "AB" + "C" and "A" + "BC" lay out the same text: only the ends tell them apart.
        let m: NodeMetadata = [("A", "BC"), ("AB", "C"), ("ABC", "")].into_iter().collect();
        assert_eq!((m.get("A"), m.get("AB"), m.get("ABC")), (Some("BC"), Some("C"), Some("")));
        assert!(NodeMetadata::default().get("").is_none() && NodeMetadata::default().is_empty());
        let mut m = m;
        m.insert("AB", "changed");
        m.insert("0", "first");
        assert_eq!(m.iter().collect::<Vec<_>>(), [("0", "first"), ("A", "BC"), ("AB", "changed"), ("ABC", "")]);
    }
}
