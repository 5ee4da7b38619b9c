//! `WeakTable`: one shared copy of each distinct value, for as long as
//! anything holds it.
//!
//! Many holders build equal values: a thousand Envoys of one scope send the
//! same watched list, the replicas of a Deployment the same labels. A table
//! hands out one `Arc` per distinct value, so each is held once however
//! many hold it.
//!
//! Invariants: a bucket holds values whose hash is its key; a lookup
//! compares content and never trusts the hash alone; the table holds weak
//! references only, so a value lives exactly while a holder does; dead
//! entries are swept once the table could have doubled in them (so its
//! size stays proportional to the live values, amortized).

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

/// Live values by content hash.
pub struct WeakTable<T> {
    inner: Mutex<Buckets<T>>,
}

struct Buckets<T> {
    /// A bucket, since hashes may collide.
    by_hash: HashMap<u64, Vec<Weak<T>>>,
    inserts_since_sweep: usize,
    /// Buckets the last sweep left.
    after_sweep: usize,
}

impl<T> Default for WeakTable<T> {
    fn default() -> WeakTable<T> {
        WeakTable { inner: Mutex::new(Buckets { by_hash: HashMap::new(), inserts_since_sweep: 0, after_sweep: 0 }) }
    }
}

impl<T> WeakTable<T> {
    /// The live value of hash `hash` that `is` accepts, else a new one that
    /// `build` makes (then shared with later callers).
    pub fn intern_with(&self, hash: u64, is: impl Fn(&T) -> bool, build: impl FnOnce() -> T) -> Arc<T> {
        let mut buckets = self.inner.lock();
        if let Some(found) = buckets.find(hash, is) {
            return found;
        }
        let value = Arc::new(build());
        buckets.insert(hash, &value);
        value
    }

    /// The live value equal to `value` (whose hash is `hash`), else `value`,
    /// shared from now on.
    pub fn intern(&self, hash: u64, value: T) -> Arc<T>
    where
        T: PartialEq,
    {
        let mut buckets = self.inner.lock();
        if let Some(found) = buckets.find(hash, |v| *v == value) {
            return found;
        }
        let value = Arc::new(value);
        buckets.insert(hash, &value);
        value
    }
}

impl<T> Buckets<T> {
    fn find(&self, hash: u64, is: impl Fn(&T) -> bool) -> Option<Arc<T>> {
        self.by_hash.get(&hash)?.iter().filter_map(Weak::upgrade).find(|v| is(v))
    }

    fn insert(&mut self, hash: u64, value: &Arc<T>) {
        let bucket = self.by_hash.entry(hash).or_default();
        bucket.retain(|w| w.strong_count() > 0);
        bucket.push(Arc::downgrade(value));
        self.inserts_since_sweep += 1;
        // Against what the last sweep left, not the table's size now: that
        // grows with every insert of a new hash, and would never be reached.
        if self.inserts_since_sweep >= self.after_sweep.max(64) {
            self.by_hash.retain(|_, bucket| {
                bucket.retain(|w| w.strong_count() > 0);
                !bucket.is_empty()
            });
            self.inserts_since_sweep = 0;
            self.after_sweep = self.by_hash.len();
        }
    }

    #[cfg(test)]
    fn entries(&self) -> usize {
        self.by_hash.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_share_one_copy_while_held_and_colliding_hashes_stay_apart() {
        let table = WeakTable::default();
        let a = table.intern(7, "alpha".to_string());
        let again = table.intern(7, "alpha".to_string());
        assert!(Arc::ptr_eq(&a, &again));
        let other = table.intern(7, "beta".to_string());
        assert_eq!(*other, "beta", "a colliding hash is compared, not trusted");
        assert!(!Arc::ptr_eq(&a, &other));
        let built = table.intern_with(7, |v| v == "alpha", || unreachable!("alpha is live"));
        assert!(Arc::ptr_eq(&a, &built));
        drop((a, again, built));
        let fresh = table.intern_with(7, |v| v == "alpha", || "alpha".to_string());
        assert_eq!(Arc::strong_count(&fresh), 1, "a value nobody held was not kept");
    }

    #[test]
    fn dead_entries_are_swept() {
        let table = WeakTable::default();
        for i in 0..1_000u64 {
            drop(table.intern(i, i));
        }
        let live: Vec<Arc<u64>> = (0..10u64).map(|i| table.intern(10_000 + i, i)).collect();
        assert!(table.inner.lock().entries() <= 2 * 64 + live.len(), "{} entries", table.inner.lock().entries());
    }
}
