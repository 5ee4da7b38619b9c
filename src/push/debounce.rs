//! `Debouncer`: turns a stream of change sets into push requests.
//!
//! * Leading edge: a change that arrives when nothing was pushed for
//!   `after` is pushed at once.
//! * Trailing merge: changes that follow within `after` of each other are
//!   merged into one request, pushed when the burst is quiet for `after`, or
//!   at the latest `max` after its first change.
//! * Fast lane: an endpoint-only change (Pods, EndpointSlices,
//!   WorkloadEntries) skips the wait: it flushes whatever is pending together
//!   with itself.
//!
//! Output goes into a [`PushSlot`] (a [`Mailbox`]): one pending request,
//! merged while the engine is busy — the engine never falls behind by more than one request,
//! and nothing queues without bound.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::PushRequest;
use super::mailbox::{Mailbox, Merge};
use crate::model::ChangeSet;

/// Debounce timing.
#[derive(Debug, Clone, Copy)]
pub struct DebounceConfig {
    /// Quiet time that ends a burst (Istio's `PILOT_DEBOUNCE_AFTER`, 100 ms).
    pub after: Duration,
    /// Longest a burst is held (Istio's `PILOT_DEBOUNCE_MAX`, 10 s).
    pub max: Duration,
}

impl Default for DebounceConfig {
    fn default() -> Self {
        DebounceConfig { after: Duration::from_millis(100), max: Duration::from_secs(10) }
    }
}

/// The debouncer's output: one pending push request, merged while the
/// engine is busy.
pub type PushSlot = Mailbox<PushRequest>;

/// The debouncer task.
#[derive(Debug)]
pub struct Debouncer {
    config: DebounceConfig,
    slot: Arc<PushSlot>,
}

impl Debouncer {
    /// A debouncer writing into `slot`.
    pub fn new(config: DebounceConfig, slot: Arc<PushSlot>) -> Debouncer {
        Debouncer { config, slot }
    }

    /// Runs until `changes` closes. Returns how many change sets were merged
    /// into an earlier one (for metrics).
    pub async fn run(self, mut changes: mpsc::Receiver<ChangeSet>) -> u64 {
        let mut merges = 0u64;
        let mut last_fire: Option<Instant> = None;
        while let Some(first) = changes.recv().await {
            if first.keys.is_empty() {
                continue;
            }
            let mut request = PushRequest::new(first);
            let quiet = last_fire.is_none_or(|t| t.elapsed() >= self.config.after);
            if request.is_endpoint_only() || quiet {
                self.slot.put(request);
                last_fire = Some(Instant::now());
                continue;
            }
            let burst_end = Instant::now() + self.config.max;
            let mut closed = false;
            loop {
                let wake = (Instant::now() + self.config.after).min(burst_end);
                tokio::select! {
                    next = changes.recv() => match next {
                        Some(cs) => {
                            let cs = PushRequest::new(cs);
                            let fast = cs.is_endpoint_only();
                            request.merge(cs);
                            merges += 1;
                            if fast || Instant::now() >= burst_end {
                                break;
                            }
                        }
                        None => {
                            closed = true;
                            break;
                        }
                    },
                    _ = tokio::time::sleep_until(wake) => break,
                }
            }
            self.slot.put(request);
            last_fire = Some(Instant::now());
            if closed {
                break;
            }
        }
        merges
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ConfigKey, ConfigKind};

    fn cs(kind: ConfigKind, name: &str) -> ChangeSet {
        ChangeSet { keys: vec![ConfigKey::new(kind, "default", name)], ..Default::default() }
    }

    async fn take_within(slot: &PushSlot, limit: Duration) -> Option<PushRequest> {
        tokio::time::timeout(limit, slot.take()).await.ok()
    }

    #[tokio::test(start_paused = true)]
    async fn isolated_change_is_pushed_at_once_and_burst_is_merged() {
        let slot = Arc::new(PushSlot::default());
        let (tx, rx) = mpsc::channel(16);
        let config = DebounceConfig { after: Duration::from_millis(100), max: Duration::from_secs(10) };
        tokio::spawn(Debouncer::new(config, slot.clone()).run(rx));

        tx.send(cs(ConfigKind::VirtualService, "a")).await.unwrap();
        let first = take_within(&slot, Duration::from_millis(1)).await.expect("leading edge fires at once");
        assert_eq!(first.keys.len(), 1);

        // A burst right after: merged into one request, pushed after the quiet period.
        for name in ["b", "c", "d"] {
            tx.send(cs(ConfigKind::VirtualService, name)).await.unwrap();
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        assert!(slot.try_take().is_none(), "a burst is held until quiet");
        let merged = take_within(&slot, Duration::from_millis(200)).await.expect("burst pushed when quiet");
        assert_eq!(merged.keys.len(), 3);
        assert_eq!(merged.merged, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn endpoint_change_skips_the_wait_and_flushes_the_burst() {
        let slot = Arc::new(PushSlot::default());
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(Debouncer::new(DebounceConfig::default(), slot.clone()).run(rx));
        tx.send(cs(ConfigKind::VirtualService, "a")).await.unwrap();
        take_within(&slot, Duration::from_millis(1)).await.unwrap();
        tx.send(cs(ConfigKind::VirtualService, "b")).await.unwrap();
        tx.send(cs(ConfigKind::Pod, "p")).await.unwrap();
        let r = take_within(&slot, Duration::from_millis(5)).await.expect("fast lane");
        assert_eq!(r.keys.len(), 2, "the pending burst goes out with the endpoint change");
    }

    #[tokio::test(start_paused = true)]
    async fn a_continuous_burst_is_cut_at_max() {
        let slot = Arc::new(PushSlot::default());
        let (tx, rx) = mpsc::channel(16);
        let config = DebounceConfig { after: Duration::from_millis(100), max: Duration::from_millis(500) };
        tokio::spawn(Debouncer::new(config, slot.clone()).run(rx));
        tx.send(cs(ConfigKind::Gateway, "g0")).await.unwrap();
        take_within(&slot, Duration::from_millis(1)).await.unwrap();
        let start = Instant::now();
        let mut i = 0;
        let got = loop {
            tx.send(cs(ConfigKind::Gateway, &format!("g{}", i + 1))).await.unwrap();
            i += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
            if let Some(r) = slot.try_take() {
                break r;
            }
            assert!(i < 100, "burst never pushed");
        };
        assert!(start.elapsed() <= Duration::from_millis(600), "held {:?}", start.elapsed());
        assert!(got.keys.len() >= 8);
    }
}
