//! `Metrics`: what the control plane counts, exposed in Prometheus text at
//! `GET /metrics` on the admin address.
//!
//! One [`Metrics`] exists per server, held by the push engine and shared
//! by `Arc`. Counters
//! live where their events happen and cost an atomic add:
//!
//! * the engine records each push (build time, triggers, inbound updates,
//!   debounce merges);
//! * each ADS stream task holds a recorder (`xds::stream::recorder`) that
//!   compares its protocol state before and after every request or push,
//!   and so counts responses, ACKs, NACKs and stale nonces per type and
//!   measures convergence, without touching the protocol code.
//!
//! Values that already exist elsewhere — the cache's hit, miss and
//! generation counters, the number of connections, services and scopes —
//! are read at scrape time, never duplicated: the engine hands them over
//! as [`Readings`]. This module knows nothing of the engine or the
//! streams; it sits just above the base types, so every layer can count.
//!
//! Where the meaning matches, names are Istio's (`pilot_xds_pushes`,
//! `pilot_proxy_convergence_time`, …) so existing dashboards and alerts
//! work. Istio exposes its counters without the `_total` suffix, while the
//! client library appends `_total` to every series typed `counter`; those
//! counters are therefore typed `untyped` ([`IstioCounter`]), which keeps
//! their exact names (PromQL's `rate()` does not care about the type).
//! meshpush's own counters are ordinary `…_total` counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

use crate::resource::TypeUrl;

/// `Content-Type` of `GET /metrics` (Prometheus text format 0.0.4, as istiod serves).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Istio's buckets for `pilot_xds_push_time` (seconds).
const PUSH_TIME_BUCKETS: [f64; 8] = [0.01, 0.1, 1.0, 3.0, 5.0, 10.0, 20.0, 30.0];
/// Istio's buckets for `pilot_proxy_convergence_time` (seconds).
pub const CONVERGENCE_BUCKETS: [f64; 8] = [0.1, 0.5, 1.0, 3.0, 5.0, 10.0, 20.0, 30.0];
/// Buckets for `pilot_pushcontext_init_seconds`: builds take milliseconds.
const INIT_BUCKETS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

/// A label set of one `(name, value)` pair.
type Label = [(&'static str, &'static str); 1];

/// A counter exposed under its exact (Istio) name: typed `untyped` so that
/// the text encoder does not append `_total`. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct IstioCounter(Counter);

impl IstioCounter {
    /// Adds one.
    pub fn inc(&self) {
        self.0.inc();
    }

    /// Adds `n`.
    pub fn inc_by(&self, n: u64) {
        self.0.inc_by(n);
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

impl EncodeMetric for IstioCounter {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&(self.0.get() as i64))
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Unknown
    }
}

impl TypedMetric for IstioCounter {
    const TYPE: MetricType = MetricType::Unknown;
}

/// A histogram of durations whose buckets can be read back (the status
/// page draws the convergence histogram from it). Lock-free: one atomic add
/// per bucket, count and sum.
#[derive(Debug, Clone)]
pub struct DurationHistogram(Arc<HistogramInner>);

#[derive(Debug)]
struct HistogramInner {
    /// Upper bounds in seconds, ascending; `+Inf` is implicit.
    bounds: Vec<f64>,
    /// Per-bucket (not cumulative) counts; one more than `bounds`.
    counts: Vec<AtomicU64>,
    sum_nanos: AtomicU64,
}

/// A read of a [`DurationHistogram`].
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// `(upper bound in seconds, observations in this bucket)`, the last bound `+Inf`.
    pub buckets: Vec<(f64, u64)>,
    /// Observations.
    pub count: u64,
    /// Sum of observations, seconds.
    pub sum: f64,
}

impl DurationHistogram {
    /// A histogram with upper `bounds` in seconds.
    pub fn new(bounds: &[f64]) -> DurationHistogram {
        let counts = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        DurationHistogram(Arc::new(HistogramInner { bounds: bounds.to_vec(), counts, sum_nanos: AtomicU64::new(0) }))
    }

    /// Records one duration.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = self.0.bounds.iter().position(|b| secs <= *b).unwrap_or(self.0.bounds.len());
        self.0.counts[i].fetch_add(1, Ordering::Relaxed);
        self.0.sum_nanos.fetch_add(d.as_nanos().min(u128::from(u64::MAX)) as u64, Ordering::Relaxed);
    }

    /// The current buckets, count and sum.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let buckets: Vec<(f64, u64)> = self
            .0
            .bounds
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(self.0.counts.iter().map(|c| c.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        HistogramSnapshot { buckets, count, sum: self.0.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9 }
    }
}

impl EncodeMetric for DurationHistogram {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        let s = self.snapshot();
        encoder.encode_histogram::<NoLabelSet>(s.sum, s.count, &s.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

impl TypedMetric for DurationHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

/// One metric per xDS type, labelled `type="cds|eds|lds|rds"`; indexed by
/// [`TypeUrl`] without a lookup.
#[derive(Debug, Clone)]
pub struct PerType<M>([M; TypeUrl::COUNT]);

impl<M> PerType<M> {
    /// The metric of type `t`.
    pub fn get(&self, t: TypeUrl) -> &M {
        &self.0[t.index()]
    }
}

impl<M: EncodeMetric> EncodeMetric for PerType<M> {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        for t in SHORT_ORDER {
            let label: Label = [("type", t.short())];
            self.0[t.index()].encode(encoder.encode_family(&label)?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        self.0[0].metric_type()
    }
}

impl<M: TypedMetric> TypedMetric for PerType<M> {
    const TYPE: MetricType = M::TYPE;
}

/// Types in the order Istio's dashboards list them.
pub(crate) const SHORT_ORDER: [TypeUrl; TypeUrl::COUNT] = [
    TypeUrl::Cluster,
    TypeUrl::Endpoint,
    TypeUrl::Listener,
    TypeUrl::Route,
    TypeUrl::Secret,
    TypeUrl::ProxyConfig,
    TypeUrl::ExtensionConfig,
    TypeUrl::Address,
    TypeUrl::Authorization,
];

/// Every metric meshpush records as events happen. See the module docs.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// `pilot_xds_pushes{type}`: responses sent.
    pub xds_pushes: PerType<IstioCounter>,
    /// `pilot_xds_push_time{type}`: from serving a push or request to its response being written.
    pub xds_push_time: PerType<DurationHistogram>,
    /// `pilot_proxy_convergence_time`: change event to ACK.
    pub convergence: DurationHistogram,
    /// `pilot_pushcontext_init_seconds`: building a snapshot.
    pub pushcontext_init: DurationHistogram,
    /// `pilot_push_triggers{type}`: pushes by reason.
    pub push_triggers: Family<Label, IstioCounter>,
    /// `pilot_total_xds_rejects{type}`: NACKs.
    pub xds_rejects: PerType<IstioCounter>,
    /// `pilot_xds_expired_nonce{type}`: requests with a stale nonce.
    pub expired_nonce: PerType<IstioCounter>,
    /// `pilot_inbound_updates{type}`: config objects changed.
    pub inbound_updates: Family<Label, IstioCounter>,
    /// `meshpush_xds_acks_total{type}`.
    pub xds_acks: PerType<Counter>,
    /// `meshpush_xds_sent_bytes_total`: response bytes written to streams.
    pub sent_bytes: Counter,
    /// `meshpush_debounce_merges_total`: change sets merged into an earlier one.
    pub debounce_merges: Counter,
    /// `meshpush_pushes_total`: snapshots published.
    pub pushes: Counter,
    /// `meshpush_xds_unanswered_pushes_total`: pushes sent to a stream whose
    /// client had not answered the previous one within `ANSWER_WAIT`.
    pub unanswered_pushes: Counter,
    /// `meshpush_xds_streams_admitted_total`: new streams let through the admission pacing.
    pub streams_admitted: Counter,
    /// `meshpush_xds_streams_awaiting_admission`: new streams waiting for their admission slot.
    pub streams_awaiting_admission: Gauge,
    /// `meshpush_xds_streams_unanswered`: streams arrived whose first
    /// request is not yet handled (at their bound new connections wait).
    pub streams_unanswered: Gauge,
    /// `meshpush_xds_connections_drained_total{reason}`: connections told to go
    /// away (GOAWAY, their streams ended UNAVAILABLE), by why.
    pub connections_drained: Family<Label, Counter>,
    /// `meshpush_xds_requests_refused_total{reason}`: requests refused with
    /// RESOURCE_EXHAUSTED (too large, or the request memory budget was spent).
    pub requests_refused: Family<Label, Counter>,
    /// `meshpush_xds_tls_handshakes_refused_total`: secure-port connections
    /// closed in the handshake (a certificate the mesh root does not sign,
    /// no TLS, or too slow).
    pub tls_handshakes_refused: Counter,
    /// `meshpush_xds_streams_refused_total{reason}`: secure-port streams
    /// refused for what their client proved (no certificate, a node that
    /// is not the certificate's identity, gateway labels not its own).
    pub streams_refused: Family<Label, Counter>,
    /// `citadel_server_csr_count`: certificate requests received.
    pub ca_requests: IstioCounter,
    /// `citadel_server_authentication_failure_count`: requests whose caller
    /// was not authenticated.
    pub ca_authentication_failures: IstioCounter,
    /// `citadel_server_csr_sign_error_count`: authenticated requests not signed.
    pub ca_sign_errors: IstioCounter,
    /// `citadel_server_success_cert_issuance_count`: certificates issued.
    pub ca_issued: IstioCounter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Creates and registers every family.
    pub fn new() -> Metrics {
        let per_type_counter = || PerType(std::array::from_fn(|_| IstioCounter::default()));
        let m = Metrics {
            registry: Registry::default(),
            xds_pushes: per_type_counter(),
            xds_push_time: PerType(std::array::from_fn(|_| DurationHistogram::new(&PUSH_TIME_BUCKETS))),
            convergence: DurationHistogram::new(&CONVERGENCE_BUCKETS),
            pushcontext_init: DurationHistogram::new(&INIT_BUCKETS),
            push_triggers: Family::default(),
            xds_rejects: per_type_counter(),
            expired_nonce: per_type_counter(),
            inbound_updates: Family::default(),
            xds_acks: PerType(std::array::from_fn(|_| Counter::default())),
            sent_bytes: Counter::default(),
            debounce_merges: Counter::default(),
            pushes: Counter::default(),
            unanswered_pushes: Counter::default(),
            streams_admitted: Counter::default(),
            streams_awaiting_admission: Gauge::default(),
            streams_unanswered: Gauge::default(),
            connections_drained: Family::default(),
            requests_refused: Family::default(),
            tls_handshakes_refused: Counter::default(),
            streams_refused: Family::default(),
            ca_requests: IstioCounter::default(),
            ca_authentication_failures: IstioCounter::default(),
            ca_sign_errors: IstioCounter::default(),
            ca_issued: IstioCounter::default(),
        };
        let mut r = Registry::default();
        r.register("pilot_xds_pushes", "Responses sent to proxies, by xDS type", m.xds_pushes.clone());
        r.register(
            "pilot_xds_push_time",
            "Seconds from a stream starting to serve a push (or request) to the response of this type being \
             written to the stream",
            m.xds_push_time.clone(),
        );
        r.register(
            "pilot_proxy_convergence_time",
            "Seconds from a config change event to the proxy's ACK of the response carrying it; unlike Istio \
             (which stops at the send), this includes the debounce wait, the build, the send and the proxy's \
             own processing",
            m.convergence.clone(),
        );
        r.register(
            "pilot_pushcontext_init_seconds",
            "Seconds to build a push context (snapshot) from a change",
            m.pushcontext_init.clone(),
        );
        r.register(
            "pilot_push_triggers",
            "Pushes by what triggered them (config, service, endpoint)",
            m.push_triggers.clone(),
        );
        r.register("pilot_total_xds_rejects", "Responses rejected (NACKed) by proxies, by type", m.xds_rejects.clone());
        r.register(
            "pilot_xds_expired_nonce",
            "Requests ignored because their nonce was not the latest sent",
            m.expired_nonce.clone(),
        );
        r.register(
            "pilot_inbound_updates",
            "Config objects changed (config, eds, svc, svcdelete); an object changed twice within one debounce \
             window counts once",
            m.inbound_updates.clone(),
        );
        r.register("meshpush_xds_acks", "Responses ACKed by proxies, by type", m.xds_acks.clone());
        r.register("meshpush_xds_sent_bytes", "Response bytes written to ADS streams", m.sent_bytes.clone());
        r.register(
            "meshpush_debounce_merges",
            "Change sets merged into an earlier pending one (debounce and engine busy)",
            m.debounce_merges.clone(),
        );
        r.register("meshpush_pushes", "Snapshots built and published", m.pushes.clone());
        r.register(
            "meshpush_xds_unanswered_pushes",
            "Pushes sent to a stream whose client had not answered (ACKed or NACKed) the previous response \
             within the answer wait (10 s); Envoy answers every response, so these point at a stuck client",
            m.unanswered_pushes.clone(),
        );
        r.register(
            "meshpush_xds_streams_admitted",
            "New ADS streams let through the admission pacing (--max-new-streams-per-second)",
            m.streams_admitted.clone(),
        );
        r.register(
            "meshpush_xds_streams_awaiting_admission",
            "New ADS streams waiting, in arrival order, for their admission slot",
            m.streams_awaiting_admission.clone(),
        );
        r.register(
            "meshpush_xds_streams_unanswered",
            "ADS streams arrived whose first request is not yet handled; while they are at \
             --max-unanswered-streams, new xDS connections wait to be served",
            m.streams_unanswered.clone(),
        );
        r.register(
            "meshpush_xds_connections_drained",
            "xDS connections sent GOAWAY with their streams ended UNAVAILABLE, by reason (max_age, shutdown)",
            m.connections_drained.clone(),
        );
        r.register(
            "meshpush_xds_requests_refused",
            "ADS requests refused with RESOURCE_EXHAUSTED, by reason (too_large, budget)",
            m.requests_refused.clone(),
        );
        r.register(
            "meshpush_xds_tls_handshakes_refused",
            "Secure-port connections closed in the TLS handshake (no TLS, a client certificate the mesh root \
             does not sign, or not completed within 10 s)",
            m.tls_handshakes_refused.clone(),
        );
        r.register(
            "meshpush_xds_streams_refused",
            "Secure-port requests refused for what the client proved, by reason (no_certificate, token, identity, \
             gateway_labels, registry_writer)",
            m.streams_refused.clone(),
        );
        r.register("citadel_server_csr", "Certificate signing requests received by the CA", m.ca_requests.clone());
        r.register(
            "citadel_server_authentication_failure",
            "Certificate signing requests whose caller was not authenticated",
            m.ca_authentication_failures.clone(),
        );
        r.register(
            "citadel_server_csr_sign_error",
            "Authenticated certificate signing requests the CA did not sign",
            m.ca_sign_errors.clone(),
        );
        r.register("citadel_server_success_cert_issuance", "Workload certificates the CA issued", m.ca_issued.clone());
        Metrics { registry: r, ..m }
    }

    /// Records a push the engine built and published.
    pub fn record_push(&self, push: &PushReading<'_>) {
        self.pushes.inc();
        self.pushcontext_init.observe(push.build);
        self.debounce_merges.inc_by(u64::from(push.merged.saturating_sub(1)));
        for reason in push.reasons {
            self.push_triggers.get_or_create(&[("type", reason)]).inc();
        }
        for (kind, n) in push.updates {
            self.inbound_updates.get_or_create(&[("type", kind)]).inc_by(*n);
        }
    }

    /// The whole exposition: the registered families, then `readings`
    /// (values read from the engine at scrape time).
    pub fn render(&self, readings: Readings) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        let mut scrape = Registry::default();
        scrape.register_collector(Box::new(readings));
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &scrape);
        out
    }
}

/// What the engine tells the metrics about one push it published.
#[derive(Debug, Clone, Copy)]
pub struct PushReading<'a> {
    /// Time spent building the snapshot.
    pub build: Duration,
    /// Change sets merged into the push.
    pub merged: u32,
    /// Istio's push reasons (`config`, `service`, `endpoint`), each once.
    pub reasons: &'a [&'static str],
    /// Changed objects per `pilot_inbound_updates` type.
    pub updates: &'a [(&'static str, u64)],
}

/// Values read from the engine at scrape time, handed to [`Metrics::render`].
#[derive(Debug, Clone, Default)]
pub struct Readings {
    /// Connected streams.
    pub connections: i64,
    /// Services in the published snapshot.
    pub services: i64,
    /// Scopes computed in the published snapshot.
    pub scopes: i64,
    /// Streams with a push waiting in their slot.
    pub queue_depth: i64,
    /// Version of the published snapshot.
    pub snapshot_version: i64,
    /// CDS, LDS and RDS sets cached.
    pub cache_sets: i64,
    /// ClusterLoadAssignments cached.
    pub cache_assignments: i64,
    /// Cache hits per type, in [`TypeUrl::index`] order.
    pub hits: [u64; TypeUrl::COUNT],
    /// Cache misses per type.
    pub misses: [u64; TypeUrl::COUNT],
    /// Generations per type.
    pub generations: [u64; TypeUrl::COUNT],
    /// Resources encoded per type.
    pub encoded: [u64; TypeUrl::COUNT],
    /// Bytes of resources encoded.
    pub bytes_encoded: u64,
    /// EnvoyFilter patches per generation: (`NAMESPACE/NAME`, patch type,
    /// `applied` or `skipped`, count).
    pub envoy_filters: Vec<(String, &'static str, &'static str, u64)>,
}

impl Collector for Readings {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let gauges: [(&str, &str, i64); 7] = [
            ("pilot_xds", "Connected ADS streams.", self.connections),
            ("pilot_services", "Services in the published snapshot.", self.services),
            ("meshpush_scopes", "Scopes computed in the published snapshot.", self.scopes),
            ("meshpush_push_queue_depth", "Streams with a push waiting in their slot.", self.queue_depth),
            ("meshpush_snapshot_version", "Version of the published snapshot.", self.snapshot_version),
            ("meshpush_cache_scope_sets", "CDS, LDS and RDS sets cached (per type and scope).", self.cache_sets),
            ("meshpush_cache_assignments", "ClusterLoadAssignments cached.", self.cache_assignments),
        ];
        for (name, help, value) in gauges {
            ConstGauge::new(value).encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
        }
        let per_type: [(&str, &str, &[u64; TypeUrl::COUNT]); 4] = [
            ("meshpush_cache_hits", "Cache lookups answered from the cache, by type.", &self.hits),
            ("meshpush_cache_misses", "Cache lookups that had to generate, by type.", &self.misses),
            (
                "meshpush_cache_generations",
                "Scope sets or assignments generated, by type (once per scope, not per proxy).",
                &self.generations,
            ),
            ("meshpush_cache_encoded_resources", "Resources encoded, by type.", &self.encoded),
        ];
        for (name, help, values) in per_type {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for t in SHORT_ORDER {
                let label: Label = [("type", t.short())];
                ConstCounter::new(values[t.index()]).encode(family.encode_family(&label)?)?;
            }
        }
        ConstCounter::new(self.bytes_encoded).encode(encoder.encode_descriptor(
            "meshpush_encoded_bytes",
            "Bytes of resources encoded (each encoded once, shared by every stream).",
            None,
            MetricType::Counter,
        )?)?;
        if !self.envoy_filters.is_empty() {
            // Istio's name, kept exact as its other counters are (see the module docs).
            let mut family = encoder.encode_descriptor(
                "pilot_total_envoy_filter",
                "EnvoyFilter patches applied or skipped, per generation of a scope's resources.",
                None,
                MetricType::Unknown,
            )?;
            for (name, kind, result, count) in &self.envoy_filters {
                let label: [(&str, &str); 3] = [("name", name), ("type", kind), ("result", result)];
                ConstGauge::new(*count as i64).encode(family.encode_family(&label)?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_read_back_and_encode_cumulatively() {
        let h = DurationHistogram::new(&[0.1, 1.0]);
        h.observe(Duration::from_millis(50));
        h.observe(Duration::from_millis(500));
        h.observe(Duration::from_secs(5));
        let s = h.snapshot();
        assert_eq!(s.buckets, vec![(0.1, 1), (1.0, 1), (f64::INFINITY, 1)]);
        assert_eq!(s.count, 3);
        assert!((s.sum - 5.55).abs() < 1e-9);
        let mut r = Registry::default();
        r.register("t", "test", h);
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &r).unwrap();
        assert!(out.contains("t_bucket{le=\"1\"} 2\n"), "{out}");
        assert!(out.contains("t_bucket{le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("t_count 3\n"), "{out}");
    }

    #[test]
    fn istio_counters_keep_their_exact_names() {
        let m = Metrics::new();
        m.xds_pushes.get(TypeUrl::Cluster).inc();
        let text = m.render(Readings::default());
        assert!(text.contains("pilot_xds_pushes{type=\"cds\"} 1\n"), "{text}");
        assert!(!text.contains("pilot_xds_pushes_total"), "{text}");
        assert!(text.contains("meshpush_xds_sent_bytes_total 0\n"), "{text}");
        assert!(text.contains("meshpush_cache_hits_total{type=\"eds\"} 0\n"), "{text}");
        assert!(text.contains("pilot_xds 0\n"), "{text}");
    }
}
