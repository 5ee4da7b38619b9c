//! `PushHistory`: the last pushes the engine made, for `/debug/push_status`
//! and the status page's push rate and latency chart.
//!
//! A bounded ring: at most [`PushHistory::CAPACITY`] records, the oldest
//! dropped first, so memory stays constant however long the server runs.
//! The engine appends one record per published snapshot (a lock taken once
//! per push, never on the stream path); readers copy what they need.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use serde::Serialize;

use super::trigger::PushTrigger;

/// One published snapshot.
#[derive(Debug, Clone, Serialize)]
pub struct PushRecord {
    /// Snapshot version published.
    pub version: u64,
    /// When it was published.
    #[serde(serialize_with = "unix_millis")]
    pub at: SystemTime,
    /// What triggered it (`config`, `service`, `endpoint`).
    pub trigger: Vec<&'static str>,
    /// Changed config keys.
    pub keys: usize,
    /// A few of them (`VirtualService default/reviews`).
    pub sample_keys: Vec<String>,
    /// Change sets merged into it.
    pub merged: u32,
    /// Time spent building the snapshot, milliseconds.
    pub build_ms: f64,
    /// From taking the request to the streams being handed the push, milliseconds.
    pub duration_ms: f64,
    /// Streams given a push.
    pub proxies: usize,
    /// Every scope was regenerated.
    pub full: bool,
    /// Only endpoints moved.
    pub endpoint_only: bool,
    /// Hosts whose output may differ.
    pub dirty_hosts: usize,
}

/// The ring of recent pushes.
#[derive(Debug, Default)]
pub struct PushHistory {
    records: Mutex<VecDeque<PushRecord>>,
}

/// What [`PushHistory::record`] is told about a push.
#[derive(Debug)]
pub struct PushOutcome<'a> {
    /// Version published.
    pub version: u64,
    /// The request summary.
    pub trigger: &'a PushTrigger,
    /// Snapshot build time.
    pub build: Duration,
    /// Whole push time.
    pub total: Duration,
    /// Streams given a push.
    pub proxies: usize,
    /// Full push.
    pub full: bool,
    /// Endpoint-only push.
    pub endpoint_only: bool,
    /// Dirty hosts.
    pub dirty_hosts: usize,
}

impl PushHistory {
    /// Records kept.
    pub const CAPACITY: usize = 1024;

    /// Appends a record, dropping the oldest beyond [`Self::CAPACITY`].
    pub fn record(&self, outcome: PushOutcome<'_>) {
        let record = PushRecord {
            version: outcome.version,
            at: SystemTime::now(),
            trigger: outcome.trigger.reasons.clone(),
            keys: outcome.trigger.keys,
            sample_keys: outcome.trigger.sample.clone(),
            merged: outcome.trigger.merged,
            build_ms: outcome.build.as_secs_f64() * 1e3,
            duration_ms: outcome.total.as_secs_f64() * 1e3,
            proxies: outcome.proxies,
            full: outcome.full,
            endpoint_only: outcome.endpoint_only,
            dirty_hosts: outcome.dirty_hosts,
        };
        let mut records = self.records.lock();
        if records.len() == Self::CAPACITY {
            records.pop_front();
        }
        records.push_back(record);
    }

    /// The latest record.
    pub fn last(&self) -> Option<PushRecord> {
        self.records.lock().back().cloned()
    }

    /// Records published within `window` of now, oldest first.
    pub fn since(&self, window: Duration) -> Vec<PushRecord> {
        let cutoff = SystemTime::now().checked_sub(window).unwrap_or(SystemTime::UNIX_EPOCH);
        self.records.lock().iter().filter(|r| r.at >= cutoff).cloned().collect()
    }

    /// Number of records held.
    pub fn len(&self) -> usize {
        self.records.lock().len()
    }

    /// Whether nothing was pushed yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Serializes a time as milliseconds since the Unix epoch.
pub fn unix_millis<S: serde::Serializer>(at: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(at.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_is_bounded_and_keeps_the_newest() {
        let h = PushHistory::default();
        let trigger = PushTrigger::default();
        for version in 0..(PushHistory::CAPACITY as u64 + 10) {
            h.record(PushOutcome {
                version,
                trigger: &trigger,
                build: Duration::ZERO,
                total: Duration::ZERO,
                proxies: 0,
                full: false,
                endpoint_only: false,
                dirty_hosts: 0,
            });
        }
        assert_eq!(h.len(), PushHistory::CAPACITY);
        assert_eq!(h.last().unwrap().version, PushHistory::CAPACITY as u64 + 9);
        assert_eq!(h.since(Duration::from_secs(60)).first().unwrap().version, 10);
    }
}
