//! Admission of new streams: a reconnect storm is served in arrival order,
//! as fast as the server answers it, instead of all at once.
//!
//! When a control plane restarts, or a replica goes away, every Envoy it
//! served reconnects within a second or two. Serving them all at once makes
//! each wait for all the others (their first responses are built and sent
//! together) and holds every first request in memory at the same time.
//! Two bounds pace a storm:
//!
//! - **Unanswered streams.** A stream is unanswered from its arrival until
//!   its first request has been handled (its responses handed to the
//!   stream). At most [`Admission::max_unanswered`] places exist. A new
//!   connection is accepted at once (the kernel's accept queue never
//!   overflows, and no Envoy times out connecting) but is served, HTTP/2
//!   and all, only once it has a place ([`Admission::enter`], first come
//!   first served); until then its client's requests wait in the kernel's
//!   socket buffers, not in h2's buffers in this process. Its first stream
//!   takes the place over ([`Admission::arrive`]). A further stream of a
//!   connection takes a place if one is free and is let in anyway if not
//!   (it is counted in the metric), so a connection brings at most its
//!   `SETTINGS_MAX_CONCURRENT_STREAMS` over the bound. A connection that
//!   opens no stream within [`FIRST_REQUEST_HOLD`], and a stream that sends
//!   no first request within it, give their place back: a client that says
//!   nothing does not hold the others out.
//! - **A rate.** Istio paces new streams with a token bucket
//!   (`PILOT_MAX_REQUESTS_PER_SECOND`); meshpush does the same, as a
//!   schedule: each new stream takes the next slot, `1 / rate` after the
//!   one before, and waits until it comes. Up to `burst` streams may start
//!   at once after a quiet spell.
//!
//! Invariants: places are handed out in the order connections asked for
//! them (tokio's semaphore is fair), and a place is held by one connection
//! or one stream at a time; rate slots are handed out under one lock, so
//! streams start in the order they arrived, and no more than
//! `burst + rate × t` streams start in any span of `t` seconds. A stream
//! whose client leaves while it waits keeps its slot (the next stream does
//! not move up); the schedule is at most that many slots late.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
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

/// How long a connection that opens no stream, or a stream that sends no
/// first request, keeps its place. Envoy and gRPC clients open their stream
/// and send its first request as soon as they have connected.
pub const FIRST_REQUEST_HOLD: Duration = Duration::from_secs(5);

/// The default bound on unanswered streams: 256 per core the server may
/// use. Envoy 1.40's first request is about 60 KB, so the first requests
/// of 512 unanswered streams (2 cores) hold 31 MiB: half the default
/// request budget, which leaves the other half to the streams already
/// served.
pub fn default_max_unanswered() -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    256u32.saturating_mul(u32::try_from(cores).unwrap_or(u32::MAX))
}

/// The admission of one server: its rate schedule and the places of
/// unanswered streams.
#[derive(Debug)]
pub struct Admission {
    /// Time between two slots; `None` when unlimited.
    interval: Option<Duration>,
    /// How far ahead of its slot a stream may start (the burst).
    tolerance: Duration,
    /// The theoretical arrival time of the next stream (GCRA's TAT).
    next: Mutex<Option<Instant>>,
    /// The places, one permit each; `None` when unbounded.
    places: Option<Arc<Semaphore>>,
    /// Their number.
    max_unanswered: Option<u32>,
    /// The unanswered streams, as a metric.
    gauge: Gauge,
}

/// A place among the unanswered (empty when the bound is off, or none was
/// free for a further stream of a connection).
#[derive(Debug)]
pub struct Place(#[allow(dead_code, reason = "held for its drop")] Option<OwnedSemaphorePermit>);

/// The place a connection entered with, until its first stream takes it
/// over or [`FIRST_REQUEST_HOLD`] passes. Cloned into each request of the
/// connection.
#[derive(Debug, Clone, Default)]
pub struct EntryPlace(Arc<Mutex<Option<Place>>>);

impl EntryPlace {
    /// Holds `place` for the connection's first stream.
    pub fn new(place: Place) -> EntryPlace {
        EntryPlace(Arc::new(Mutex::new(Some(place))))
    }

    /// Takes the place over (the first stream), or gives it back (dropped).
    pub fn take(&self) -> Option<Place> {
        self.0.lock().take()
    }
}

/// One unanswered stream: its place, and its count in the metric, until it
/// is answered or dropped.
#[derive(Debug)]
pub struct Unanswered {
    place: Option<Place>,
    gauge: Option<Gauge>,
}

impl Unanswered {
    /// The stream has been answered: its place is free for the next.
    pub fn answered(&mut self) {
        self.place = None;
        if let Some(gauge) = self.gauge.take() {
            gauge.dec();
        }
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        self.answered();
    }
}

impl Admission {
    /// An admission at `rate`, with `max_unanswered` places (`None`: no
    /// bound), counting unanswered streams in `gauge`.
    pub fn new(rate: AdmissionRate, max_unanswered: Option<u32>, gauge: Gauge) -> Admission {
        let interval = rate.per_second.filter(|r| *r > 0.0).map(|r| Duration::from_secs_f64(1.0 / r));
        let tolerance = interval.map_or(Duration::ZERO, |i| i * rate.burst.max(1).saturating_sub(1));
        let max_unanswered = max_unanswered.map(|n| n.max(1));
        Admission {
            interval,
            tolerance,
            next: Mutex::new(None),
            places: max_unanswered.map(|n| Arc::new(Semaphore::new(n as usize))),
            max_unanswered,
            gauge,
        }
    }

    /// No rate, no bound (a server that paces nothing, such as the
    /// examples' replay servers).
    pub fn unlimited() -> Admission {
        Admission::new(AdmissionRate::UNLIMITED, None, Gauge::default())
    }

    /// The number of places, if bounded.
    pub fn max_unanswered(&self) -> Option<u32> {
        self.max_unanswered
    }

    /// Places taken now.
    pub fn taken(&self) -> u32 {
        match (&self.places, self.max_unanswered) {
            (Some(places), Some(max)) => max.saturating_sub(places.available_permits() as u32),
            _ => 0,
        }
    }

    /// Waits, first come first served, for a place for a new connection.
    pub async fn enter(&self) -> Place {
        match &self.places {
            // The semaphore is never closed.
            Some(places) => Place(places.clone().acquire_owned().await.ok()),
            None => Place(None),
        }
    }

    /// Counts a stream that has just arrived until it is answered, in the
    /// place its connection entered with, or else in one free now.
    pub fn arrive(&self, entered: Option<Place>) -> Unanswered {
        let place = match (entered, &self.places) {
            (Some(place), _) => place,
            (None, Some(places)) => Place(places.clone().try_acquire_owned().ok()),
            (None, None) => Place(None),
        };
        self.gauge.inc();
        Unanswered { place: Some(place), gauge: Some(self.gauge.clone()) }
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
        let admission = Admission::new(AdmissionRate { per_second: Some(100.0), burst: 3 }, None, Gauge::default());
        let start = Instant::now();
        // Ten streams arrive together: three start now, then one per 10 ms.
        let slots: Vec<u64> = (0..10).map(|_| admission.slot(start).duration_since(start).as_millis() as u64).collect();
        assert_eq!(slots, vec![0, 0, 0, 10, 20, 30, 40, 50, 60, 70]);
        // One arriving later waits behind them.
        assert_eq!(admission.slot(at(start, 5)).duration_since(start).as_millis(), 80);
    }

    #[test]
    fn a_quiet_spell_refills_the_burst_and_no_more() {
        let admission = Admission::new(AdmissionRate { per_second: Some(100.0), burst: 2 }, None, Gauge::default());
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
        let admission = Admission::new(AdmissionRate::UNLIMITED, None, Gauge::default());
        let start = Instant::now();
        assert!((0..1000).all(|_| admission.slot(start) == start));
        let zero = Admission::new(AdmissionRate { per_second: Some(0.0), burst: 1 }, None, Gauge::default());
        assert_eq!(zero.slot(start), start);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_stream_is_counted_until_it_starts_or_leaves() {
        let metrics = Metrics::new();
        let admission = std::sync::Arc::new(Admission::new(
            AdmissionRate { per_second: Some(10.0), burst: 1 },
            None,
            Gauge::default(),
        ));
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

    #[tokio::test(start_paused = true)]
    async fn connections_are_served_in_order_as_places_free_up() {
        let admission = Arc::new(Admission::new(AdmissionRate::UNLIMITED, Some(2), Gauge::default()));
        // Two connections enter; their first streams take their places over.
        let entered = EntryPlace::new(admission.enter().await);
        let mut first = admission.arrive(entered.take());
        assert!(entered.take().is_none(), "a place is taken over once");
        let second = admission.arrive(Some(admission.enter().await));
        assert_eq!(admission.taken(), 2);
        // A third and a fourth connection wait, in order.
        let order = Arc::new(Mutex::new(Vec::new()));
        let waiting: Vec<_> = (3..=4)
            .map(|n| {
                let (admission, order) = (admission.clone(), order.clone());
                tokio::spawn(async move {
                    let place = admission.enter().await;
                    order.lock().push(n);
                    place
                })
            })
            .collect();
        tokio::task::yield_now().await;
        assert!(order.lock().is_empty(), "no place is free");
        // A further stream of a connection is let in without a place.
        let extra = admission.arrive(None);
        assert_eq!(admission.taken(), 2);
        drop(extra);
        first.answered();
        first.answered();
        tokio::task::yield_now().await;
        assert_eq!(*order.lock(), vec![3], "one place freed, the first waiter served");
        drop(second);
        tokio::task::yield_now().await;
        assert_eq!(*order.lock(), vec![3, 4]);
        let places: Vec<Place> = futures::future::join_all(waiting).await.into_iter().map(Result::unwrap).collect();
        assert_eq!(admission.taken(), 2, "the waiters hold the places now");
        drop(places);
        assert_eq!(admission.taken(), 0);
        let unbounded = Admission::unlimited();
        assert_eq!(unbounded.max_unanswered(), None);
        assert!(futures::FutureExt::now_or_never(unbounded.enter()).is_some());
    }

    #[test]
    fn the_metric_counts_each_stream_until_it_is_answered() {
        let gauge = Gauge::default();
        let admission = Admission::new(AdmissionRate::UNLIMITED, Some(1), gauge.clone());
        let mut a = admission.arrive(None);
        let b = admission.arrive(None);
        assert_eq!((gauge.get(), admission.taken()), (2, 1), "both counted, one place");
        a.answered();
        a.answered();
        assert_eq!(gauge.get(), 1);
        drop(b);
        assert_eq!((gauge.get(), admission.taken()), (0, 0));
    }
}
