//! The churn phase: endpoint changes at a fixed rate for a fixed time,
//! each tracked to every stream that watches its cluster, with the p99 of
//! every 10 s window so that a stream falling behind shows.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use tokio::sync::Semaphore;

use super::{CHANGE_LIMIT, CHURN_STRIDE, MAX_APPLIES_IN_FLIGHT, Run, SETTLE};
use crate::report::{PhaseReport, Sample};
use crate::track::{Change, Expect, XdsType};

impl Run {
    /// Endpoint changes at a fixed rate for a fixed time, each tracked to
    /// every stream that watches its cluster.
    pub(super) async fn churn(&mut self) -> anyhow::Result<PhaseReport> {
        let Some(registry) = self.registry.clone() else { bail!("churn needs the registry API") };
        let rate = self.options.churn_rate.max(1);
        let duration = self.options.churn_duration;
        let total = (u64::from(rate) * duration.as_millis() as u64 / 1000).max(1);
        let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
        // Applies in flight at once; a tick that finds none free is skipped
        // (and counted): the offered rate falls only when the server takes
        // more than this many changes' worth of time to answer.
        let in_flight = Arc::new(Semaphore::new(MAX_APPLIES_IN_FLIGHT));
        tokio::time::sleep(SETTLE).await;
        let before = self.mark();
        let bar = self.bar(total, "endpoint changes made");
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut changes = Vec::with_capacity(total as usize);
        let mut watchers = Vec::with_capacity(total as usize);
        let mut skipped = 0u64;
        let mut apply_errors = 0u64;
        let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
        for i in 0..total {
            ticker.tick().await;
            let Ok(permit) = in_flight.clone().try_acquire_owned() else {
                skipped += 1;
                continue;
            };
            // Every service once before any twice (a stride coprime with the
            // service count), namespaces interleaved: a service changes again
            // only after all the others did.
            let pick = (i * CHURN_STRIDE) % u64::from(self.shape.services());
            let namespace = (pick / u64::from(self.shape.services_per_namespace)) as u32;
            let service = (pick % u64::from(self.shape.services_per_namespace)) as u32;
            let (document, address) = self.moved_endpoint(namespace, service);
            let cluster = self.shape.cluster(namespace, service);
            let expected = self.shared.names.watchers(XdsType::Endpoint, &cluster);
            let change = Arc::new(Change::new(
                format!("churn {i}"),
                XdsType::Endpoint,
                cluster,
                &address.to_string(),
                Instant::now(),
                Expect::Watchers,
                expected,
            ));
            self.shared.tracker.add(change.clone());
            let mut registry = registry.clone();
            let shared = self.shared.clone();
            let errors = errors.clone();
            let tracked = change.clone();
            watchers.push(tokio::spawn(async move {
                let applied = registry.apply(vec![document]).await;
                drop(permit);
                if applied.is_err() {
                    errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                } else {
                    tracked.wait(CHANGE_LIMIT).await;
                }
                shared.tracker.retire(&tracked);
            }));
            changes.push((change, namespace));
            bar.set_position(i + 1);
        }
        bar.finish_and_clear();
        let made = Instant::now();
        let _ = tokio::time::timeout(CHANGE_LIMIT + Duration::from_secs(5), futures::future::join_all(watchers)).await;
        let drained = made.elapsed();
        apply_errors += errors.load(std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(SETTLE).await;
        let after = self.mark();
        let start = before.at;
        let mut all = Vec::new();
        let mut all_streams = Vec::new();
        let mut expected = 0;
        let mut converged_changes = 0;
        let mut windows: Vec<Vec<Duration>> = Vec::new();
        let mut short = Vec::new();
        for (change, namespace) in &changes {
            if !change.complete() && short.len() < 5 {
                short.push(self.missing(change, *namespace, start));
            }
            let outcome = change.outcome();
            expected += outcome.expected;
            converged_changes += usize::from(change.complete());
            let window = (change.start.duration_since(start).as_secs() / 10) as usize;
            if windows.len() <= window {
                windows.resize(window + 1, Vec::new());
            }
            windows[window].extend(&outcome.latencies);
            all.extend(outcome.latencies);
            all_streams.extend(outcome.streams);
        }
        let mut phase = self.phase(
            &format!("churn: {rate}/s endpoint changes for {}s", duration.as_secs()),
            &before,
            &after,
            expected,
            all,
            &all_streams,
        );
        phase.changes = changes.len();
        phase.changes_converged = converged_changes;
        phase.windows = windows.into_iter().map(Sample::new).map(|s| s.summary()).collect();
        phase.notes.extend(short);
        phase.notes.push(format!(
            "{} changes made, {:.0}/s ({skipped} ticks skipped: {MAX_APPLIES_IN_FLIGHT} applies were in flight), {apply_errors} refused; the last change converged {:.2}s after it was made",
            changes.len(),
            changes.len() as f64 / made.duration_since(before.at).as_secs_f64(),
            drained.as_secs_f64()
        ));
        eprintln!("loadtest: {}", phase.one_line());
        Ok(phase)
    }
}
