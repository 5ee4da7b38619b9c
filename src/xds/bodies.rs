//! `BodyCache`: framed response bodies, assembled once and shared by every
//! stream that sends the same thing.
//!
//! A thousand sidecars of one scope are sent the same CDS response but for
//! its nonce. The shared part — the gRPC frame header and every field but
//! the nonce (SotW: [`ResponseBody`]; delta: [`delta_codec::assemble`]) —
//! is assembled by the first stream that needs it and kept here, keyed by
//! what it holds: the type, the version of the content, and for partial
//! responses which resources are in it.
//!
//! Invariants: a key names one body's bytes whatever the snapshot (SotW
//! versions are content hashes; delta keys carry the snapshot version), so
//! a body is never stale, only unused. The map is emptied when a newer
//! snapshot is first seen and whenever it reaches [`MAX_BODIES`], which
//! bounds its memory.
//!
//! [`delta_codec::assemble`]: super::delta_codec::assemble

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::RwLock;

use super::codec::ResponseBody;
use crate::resource::{EncodedResource, TypeUrl, version_of};

/// Bodies kept at most; past this the map starts over (it is emptied at
/// every snapshot anyway, so this only bounds pathological churn).
pub const MAX_BODIES: usize = 16_384;

/// What a body holds: its type, the version of the content it belongs to,
/// and which of the content's resources are in it (0: all of them).
type Key = (TypeUrl, Arc<str>, u64);

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

    /// The SotW response body for `resources` at `version`, for a stream
    /// serving snapshot `snapshot`. `partial` says the resources are a
    /// subset of what `version` describes (EDS and RDS send only what
    /// changed), so the subset itself becomes part of the key.
    pub fn sotw(
        &self,
        snapshot: u64,
        type_url: TypeUrl,
        version: &Arc<str>,
        resources: &[Arc<EncodedResource>],
        partial: bool,
    ) -> Bytes {
        let which = if partial {
            xxhash_rust::xxh3::xxh3_64(version_of(resources.iter().map(|r| (&*r.name, r.hash))).as_bytes())
        } else {
            0
        };
        self.get_or_assemble(snapshot, (type_url, version.clone(), which), || {
            ResponseBody::assemble(type_url, version, resources.iter().map(|r| &**r)).bytes
        })
    }

    /// A delta response body, assembled by `build` once: `key` names the
    /// content and must never look like a SotW version (those are 16 hex
    /// digits), `which` tells apart what is sent under it.
    pub fn delta(
        &self,
        snapshot: u64,
        type_url: TypeUrl,
        key: Arc<str>,
        which: u64,
        build: impl FnOnce() -> Bytes,
    ) -> Bytes {
        self.get_or_assemble(snapshot, (type_url, key, which), build)
    }

    fn get_or_assemble(&self, snapshot: u64, key: Key, build: impl FnOnce() -> Bytes) -> Bytes {
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
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;

    use super::*;

    fn cluster(name: &str) -> Arc<EncodedResource> {
        Arc::new(EncodedResource::encode(
            TypeUrl::Cluster,
            Arc::from(name),
            &Cluster { name: name.into(), ..Default::default() },
        ))
    }

    #[test]
    fn streams_sending_the_same_content_share_one_body() {
        let bodies = BodyCache::new();
        let set = [cluster("a"), cluster("b")];
        let version: Arc<str> = Arc::from("v1");
        let first = bodies.sotw(1, TypeUrl::Cluster, &version, &set, false);
        let second = bodies.sotw(1, TypeUrl::Cluster, &version, &set, false);
        assert_eq!(first.as_ptr(), second.as_ptr(), "the same bytes, not a copy");
        assert_eq!(bodies.counts(), (1, 1));
        // A subset under the same version is another body.
        let part = bodies.sotw(1, TypeUrl::Cluster, &version, &set[..1], true);
        assert_ne!(part, first);
        assert_eq!(bodies.counts(), (2, 1));
    }

    #[test]
    fn a_newer_snapshot_empties_the_cache_and_an_older_one_does_not() {
        let bodies = BodyCache::new();
        let version: Arc<str> = Arc::from("v1");
        bodies.sotw(5, TypeUrl::Cluster, &version, &[cluster("a")], false);
        bodies.sotw(4, TypeUrl::Cluster, &Arc::from("v0"), &[cluster("b")], false);
        assert_eq!(bodies.len(), 2, "a stream still on an older snapshot does not empty the cache");
        bodies.sotw(6, TypeUrl::Cluster, &Arc::from("v2"), &[cluster("c")], false);
        assert_eq!(bodies.len(), 1, "the first body of a newer snapshot starts the cache over");
    }
}
