//! Admission of new streams: a reconnect storm is served in arrival order,
//! at a configured rate, instead of all at once.
//!
//! When a control plane restarts, or a replica goes away, every Envoy it
//! served reconnects within a second or two. Serving them all at once makes
//! each wait for all the others (their first responses are built and sent
//! together) and holds every first request in memory at the same time.
//! Istio paces new streams with a token bucket (`PILOT_MAX_REQUESTS_PER_SECOND`);
//! meshpush does the same, as a schedule: each new stream takes the next
//! slot, `1 / rate` after the one before, and waits until it comes. Up to
//! `burst` streams may start at once after a quiet spell.
//!
//! Invariants: slots are handed out under one lock, so streams start in the
//! order they arrived; no more than `burst + rate × t` streams start in any
//! span of `t` seconds. A stream whose client leaves while it waits keeps
//! its slot (the next stream does not move up); the schedule is at most
//! that many slots late.

use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::metrics::Metrics;

/// How fast new streams may start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdmissionRate {
    /// New streams per second; `None` admits every stream at once.
    pub per_second: Option<f64>,
    /// Streams that may start together after a quiet spell (at least 1).
    pub burst: u32,
}

impl AdmissionRate {
    /// No pacing.
    pub const UNLIMITED: AdmissionRate = AdmissionRate { per_second: None, burst: 1 };

    /// The default: 1,000 new streams per second per core the server may
    /// use, a second's worth of them at once. The loadtest's s2 storm
    /// (10,000 Envoys) syncs at about 1,700 a second on 2 cores, so the
    /// default paces only a storm the server could not serve faster anyway.
    pub fn default_for_this_machine() -> AdmissionRate {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let per_second = 1000 * cores as u32;
        AdmissionRate { per_second: Some(f64::from(per_second)), burst: per_second }
    }
}

/// The admission schedule of one server.
#[derive(Debug)]
pub struct Admission {
    /// Time between two slots; `None` when unlimited.
    interval: Option<Duration>,
    /// How far ahead of its slot a stream may start (the burst).
    tolerance: Duration,
    /// The theoretical arrival time of the next stream (GCRA's TAT).
    next: Mutex<Option<Instant>>,
}

impl Admission {
    /// A schedule at `rate`.
    pub fn new(rate: AdmissionRate) -> Admission {
        let interval = rate.per_second.filter(|r| *r > 0.0).map(|r| Duration::from_secs_f64(1.0 / r));
        let tolerance = interval.map_or(Duration::ZERO, |i| i * rate.burst.max(1).saturating_sub(1));
        Admission { interval, tolerance, next: Mutex::new(None) }
    }

    /// When a stream arriving `now` may start; takes its slot.
    fn slot(&self, now: Instant) -> Instant {
        let Some(interval) = self.interval else { return now };
        let mut next = self.next.lock();
        let tat = next.map_or(now, |t| t.max(now));
        *next = Some(tat + interval);
        (tat.checked_sub(self.tolerance)).map_or(now, |start| start.max(now))
    }

    /// Waits for this stream's slot, counted in `metrics` while it waits.
    pub async fn admit(&self, metrics: &Metrics) {
        let slot = self.slot(Instant::now());
        if slot > Instant::now() {
            metrics.streams_awaiting_admission.inc();
            // Decremented however the wait ends (the client may go away).
            let _waiting = scopeguard::guard((), |()| {
                metrics.streams_awaiting_admission.dec();
            });
            tokio::time::sleep_until(slot).await;
        }
        metrics.streams_admitted.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn a_storm_is_spread_at_the_rate_after_the_burst() {
        let admission = Admission::new(AdmissionRate { per_second: Some(100.0), burst: 3 });
        let start = Instant::now();
        // Ten streams arrive together: three start now, then one per 10 ms.
        let slots: Vec<u64> = (0..10).map(|_| admission.slot(start).duration_since(start).as_millis() as u64).collect();
        assert_eq!(slots, vec![0, 0, 0, 10, 20, 30, 40, 50, 60, 70]);
        // One arriving later waits behind them.
        assert_eq!(admission.slot(at(start, 5)).duration_since(start).as_millis(), 80);
    }

    #[test]
    fn a_quiet_spell_refills_the_burst_and_no_more() {
        let admission = Admission::new(AdmissionRate { per_second: Some(100.0), burst: 2 });
        let start = Instant::now();
        for _ in 0..5 {
            admission.slot(start);
        }
        // A second later the bucket is full again: two at once, then paced.
        let later = at(start, 1000);
        let slots: Vec<u128> = (0..4).map(|_| admission.slot(later).duration_since(later).as_millis()).collect();
        assert_eq!(slots, vec![0, 0, 10, 20]);
    }

    #[test]
    fn unlimited_admits_at_once() {
        let admission = Admission::new(AdmissionRate::UNLIMITED);
        let start = Instant::now();
        assert!((0..1000).all(|_| admission.slot(start) == start));
        let zero = Admission::new(AdmissionRate { per_second: Some(0.0), burst: 1 });
        assert_eq!(zero.slot(start), start);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_stream_is_counted_until_it_starts_or_leaves() {
        let metrics = Metrics::new();
        let admission = std::sync::Arc::new(Admission::new(AdmissionRate { per_second: Some(10.0), burst: 1 }));
        admission.admit(&metrics).await;
        let waiting = {
            let (admission, metrics) = (admission.clone(), std::sync::Arc::new(Metrics::new()));
            let m = metrics.clone();
            (tokio::spawn(async move { admission.admit(&m).await }), metrics)
        };
        tokio::task::yield_now().await;
        assert_eq!(waiting.1.streams_awaiting_admission.get(), 1);
        waiting.0.abort();
        let _ = waiting.0.await;
        assert_eq!(waiting.1.streams_awaiting_admission.get(), 0, "a stream that left is no longer waiting");
        assert_eq!(waiting.1.streams_admitted.get(), 0);
        assert_eq!(metrics.streams_admitted.get(), 1);
    }
}
