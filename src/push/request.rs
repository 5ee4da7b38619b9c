//! `PushRequest`: what changed, merged across a debounce window.

use std::collections::BTreeSet;
use std::time::Instant;

use super::mailbox::Merge;
use crate::config::ConfigKey;
use crate::model::{ChangeSet, StoreSnapshot};

/// A batch of changes to push.
#[derive(Debug, Clone)]
pub struct PushRequest {
    /// Every changed key (merged; each once).
    pub keys: BTreeSet<ConfigKey>,
    /// When the first change of the batch arrived (convergence is measured from here).
    pub first_change: Instant,
    /// How many change sets were merged into this one.
    pub merged: u32,
    /// Store revision the batch reaches.
    pub revision: u64,
    /// The store right after the last merged change: the engine builds from this.
    pub store: StoreSnapshot,
}

impl PushRequest {
    /// A request for one change set.
    pub fn new(changes: ChangeSet) -> PushRequest {
        PushRequest {
            keys: changes.keys.into_iter().collect(),
            first_change: Instant::now(),
            merged: 1,
            revision: changes.revision,
            store: changes.snapshot,
        }
    }

    /// Whether every change only moves endpoints (Pods, EndpointSlices,
    /// WorkloadEntries): such a request takes the fast lane.
    pub fn is_endpoint_only(&self) -> bool {
        !self.keys.is_empty() && self.keys.iter().all(|k| k.kind.is_endpoint_kind())
    }
}

impl Merge for PushRequest {
    /// Merges a later request into this one.
    fn merge(&mut self, other: PushRequest) {
        self.keys.extend(other.keys);
        self.first_change = self.first_change.min(other.first_change);
        self.merged += other.merged;
        if other.revision >= self.revision {
            self.revision = other.revision;
            self.store = other.store;
        }
    }
}
