//! `BodyCache`: framed response bodies, assembled once and shared by every
//! stream that sends the same thing.
//!
//! A thousand sidecars of one scope are sent the same CDS response but for
//! its nonce. The shared part — the gRPC frame header and every field but
//! the per-stream tail (`sotw::codec`, `delta::codec` assemble it) — is
//! assembled by the first stream that needs it and kept here, keyed by
//! what it holds: the type, the version of the content, and for partial
//! responses which resources are in it.
//!
//! Invariants: a key names one body's bytes whatever the snapshot (SotW
//! versions are content hashes; delta keys carry the snapshot version), so
//! a body is never stale, only unused. The map is emptied when a newer
//! snapshot is first seen and whenever it reaches [`MAX_BODIES`], which
//! bounds its memory.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::RwLock;

use crate::resource::TypeUrl;

/// Bodies kept at most; past this the map starts over (it is emptied at
/// every snapshot anyway, so this only bounds pathological churn).
pub const MAX_BODIES: usize = 16_384;

/// What a body holds: its type, the version of the content it belongs to,
/// and which of the content's resources are in it (0: all of them).
pub type Key = (TypeUrl, Arc<str>, u64);

#[derive(Debug, Default)]
struct Bodies {
    /// The newest snapshot version a body was asked for.
    snapshot: u64,
    map: HashMap<Key, Bytes>,
}

/// The body cache. One per server, shared by every stream.
#[derive(Debug, Default)]
pub struct BodyCache {
    bodies: RwLock<Bodies>,
    assembled: AtomicU64,
    shared: AtomicU64,
}

impl BodyCache {
    /// An empty cache.
    pub fn new() -> BodyCache {
        BodyCache::default()
    }

    /// The body `key` names, for a stream serving snapshot `snapshot`:
    /// the one already assembled, or `build`'s, kept for the next stream.
    /// `key` is the type, the version of the content, and which of its
    /// resources are in the body (0: all of them); a protocol's keys must
    /// never collide with another's.
    pub fn get_or_assemble(&self, snapshot: u64, key: Key, build: impl FnOnce() -> Bytes) -> Bytes {
        {
            let bodies = self.bodies.read();
            if let Some(body) = bodies.map.get(&key) {
                self.shared.fetch_add(1, Ordering::Relaxed);
                return body.clone();
            }
        }
        let body = build();
        self.assembled.fetch_add(1, Ordering::Relaxed);
        let mut bodies = self.bodies.write();
        if snapshot > bodies.snapshot {
            // The bodies of older snapshots are mostly done with.
            bodies.map.clear();
            bodies.snapshot = snapshot;
        }
        if bodies.map.len() >= MAX_BODIES {
            bodies.map.clear();
        }
        bodies.map.entry(key).or_insert(body).clone()
    }

    /// Bodies assembled, and responses that reused one.
    pub fn counts(&self) -> (u64, u64) {
        (self.assembled.load(Ordering::Relaxed), self.shared.load(Ordering::Relaxed))
    }

    /// Bodies held now.
    pub fn len(&self) -> usize {
        self.bodies.read().map.len()
    }

    /// Whether no body is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(version: &str, which: u64) -> Key {
        (TypeUrl::Cluster, Arc::from(version), which)
    }

    #[test]
    fn streams_sending_the_same_content_share_one_body() {
        let bodies = BodyCache::new();
        let first = bodies.get_or_assemble(1, key("v1", 0), || Bytes::from_static(b"all of v1"));
        let second = bodies.get_or_assemble(1, key("v1", 0), || unreachable!("assembled once"));
        assert_eq!(first.as_ptr(), second.as_ptr(), "the same bytes, not a copy");
        assert_eq!(bodies.counts(), (1, 1));
        // A subset under the same version is another body.
        let part = bodies.get_or_assemble(1, key("v1", 7), || Bytes::from_static(b"part of v1"));
        assert_ne!(part, first);
        assert_eq!(bodies.counts(), (2, 1));
    }

    #[test]
    fn a_newer_snapshot_empties_the_cache_and_an_older_one_does_not() {
        let bodies = BodyCache::new();
        let body = || Bytes::from_static(b"body");
        bodies.get_or_assemble(5, key("a", 0), body);
        bodies.get_or_assemble(4, key("b", 0), body);
        assert_eq!(bodies.len(), 2, "a stream still on an older snapshot does not empty the cache");
        bodies.get_or_assemble(6, key("c", 0), body);
        assert_eq!(bodies.len(), 1, "the first body of a newer snapshot starts the cache over");
    }
}
