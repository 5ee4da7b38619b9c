//! Endpoint changes at fixed rates: the machinery the churn and fairness
//! phases share. Each [`Pace`] makes changes at its own rate, services
//! chosen by its `pick`; every change is made through the run's sink (the
//! registry API or a file edit; at most [`MAX_APPLIES_IN_FLIGHT`] at once:
//! a change due when none is free is skipped and counted) and tracked to every stream that watches
//! its cluster, for at most [`CHANGE_LIMIT`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use tokio::sync::Semaphore;

use super::{CHANGE_LIMIT, MAX_APPLIES_IN_FLIGHT, Mark, Run};
use crate::report::{PhaseReport, Sample};
use crate::track::{Change, Expect, XdsType};

/// One stream of changes.
pub(super) struct Pace {
    /// Label of its changes (`LABEL i`).
    pub(super) label: &'static str,
    /// Changes per second.
    pub(super) rate: u32,
    /// The `(namespace, service)` of change `i`.
    pub(super) pick: Box<dyn Fn(u64) -> (u32, u32) + Send>,
}

/// What one pace made.
pub(super) struct Made {
    /// Each change and its namespace, in the order made.
    pub(super) changes: Vec<(Arc<Change>, u32)>,
    /// Changes due when every apply slot was taken.
    pub(super) skipped: u64,
    /// Applies the registry refused.
    pub(super) refused: u64,
}

/// What a run of paces made, and when.
pub(super) struct Paced {
    /// Per pace, in the order given.
    pub(super) made: Vec<Made>,
    /// When the last change was made.
    pub(super) ended: Instant,
    /// From then until the last tracked change converged or gave up.
    pub(super) drained: Duration,
}

impl Run {
    /// Makes the changes of every pace for `duration`, interleaved on one
    /// schedule (change `i` of a pace at rate `r` is due `i / r` seconds
    /// in), and waits until each converged or gave up.
    pub(super) async fn paced(&mut self, paces: &[Pace], duration: Duration, bar: &str) -> anyhow::Result<Paced> {
        let Some(sink) = self.sink.clone() else { bail!("endpoint changes need the registry API") };
        let in_flight = Arc::new(Semaphore::new(MAX_APPLIES_IN_FLIGHT));
        let total: u64 = paces.iter().map(|p| u64::from(p.rate) * duration.as_millis() as u64 / 1000).sum();
        let progress = self.bar(total, bar);
        let mut made: Vec<Made> = paces.iter().map(|_| Made { changes: Vec::new(), skipped: 0, refused: 0 }).collect();
        let mut next = vec![0u64; paces.len()];
        let mut waiters = Vec::new();
        let refusals: Vec<Arc<AtomicU64>> = paces.iter().map(|_| Arc::default()).collect();
        let start = Instant::now();
        let end = start + duration;
        loop {
            let due = |k: usize| start + Duration::from_secs_f64(next[k] as f64 / f64::from(paces[k].rate.max(1)));
            let Some(k) = (0..paces.len()).min_by_key(|&k| due(k)) else { break };
            let at = due(k);
            if at >= end {
                break;
            }
            tokio::time::sleep_until(at.into()).await;
            let i = next[k];
            next[k] += 1;
            let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                made[k].skipped += 1;
                continue;
            };
            let (namespace, service) = (paces[k].pick)(i);
            let (edit, address) = self.moved_endpoint(namespace, service);
            let cluster = self.shape.cluster(namespace, service);
            let expected = self.shared.names.watchers(XdsType::Endpoint, &cluster);
            let change = Arc::new(Change::new(
                format!("{} {i}", paces[k].label),
                XdsType::Endpoint,
                cluster,
                &address.to_string(),
                Instant::now(),
                Expect::Watchers,
                expected,
            ));
            self.shared.tracker.add(change.clone());
            let (mut sink, shape, shared, refused, tracked) =
                (sink.clone(), self.shape, self.shared.clone(), refusals[k].clone(), change.clone());
            waiters.push(tokio::spawn(async move {
                let applied = sink.make(&shape, &edit).await;
                drop(permit);
                if applied.is_err() {
                    refused.fetch_add(1, Ordering::Relaxed);
                } else {
                    tracked.wait(CHANGE_LIMIT).await;
                }
                shared.tracker.retire(&tracked);
            }));
            made[k].changes.push((change, namespace));
            progress.inc(1);
        }
        progress.finish_and_clear();
        let ended = Instant::now();
        let _ = tokio::time::timeout(CHANGE_LIMIT + Duration::from_secs(5), futures::future::join_all(waiters)).await;
        for (made, refused) in made.iter_mut().zip(&refusals) {
            made.refused = refused.load(Ordering::Relaxed);
        }
        Ok(Paced { made, ended, drained: ended.elapsed() })
    }

    /// A phase from changes made: every change's latencies, each 10 s
    /// window's percentiles (of change start), and up to five changes that
    /// did not reach every stream they should have.
    pub(super) fn changes_phase(
        &self,
        name: &str,
        before: &Mark,
        after: &Mark,
        changes: &[(Arc<Change>, u32)],
    ) -> PhaseReport {
        let start = before.at;
        let (mut all, mut all_streams, mut expected, mut converged) = (Vec::new(), Vec::new(), 0, 0);
        let mut windows: Vec<Vec<Duration>> = Vec::new();
        let mut short = Vec::new();
        for (change, namespace) in changes {
            if !change.complete() && short.len() < 5 {
                short.push(self.missing(change, *namespace, start));
            }
            let outcome = change.outcome();
            expected += outcome.expected;
            converged += usize::from(change.complete());
            let window = (change.start.duration_since(start).as_secs() / 10) as usize;
            if windows.len() <= window {
                windows.resize(window + 1, Vec::new());
            }
            windows[window].extend(&outcome.latencies);
            all.extend(outcome.latencies);
            all_streams.extend(outcome.streams);
        }
        let mut phase = self.phase(name, before, after, expected, all, &all_streams);
        phase.changes = changes.len();
        phase.changes_converged = converged;
        phase.windows = windows.into_iter().map(Sample::new).map(|s| s.summary()).collect();
        phase.notes.extend(short);
        phase
    }
}
