//! `StreamRecorder`: one ADS stream's metric bookkeeping.
//!
//! The stream task owns its connection (SotW or delta) and its recorder. Around each
//! request or push the recorder compares the connection's counters before
//! and after — responses per type, ACKs, NACKs, stale nonces — so the
//! protocol code stays free of metrics, and it follows the nonces a push went
//! out in until the proxy ACKs them all: that is one observation of
//! `pilot_proxy_convergence_time` (change event to ACK).

use std::sync::Arc;
use std::time::Instant;

use crate::metrics::{Metrics, SHORT_ORDER};
use crate::push::PendingPush;
use crate::resource::TypeUrl;
use crate::xds::stream::connection::ConnectionCore;
use crate::xds::watch::Nonce;

/// Per-type counters of a connection at one moment.
#[derive(Debug, Default, Clone, Copy)]
struct Mark {
    responses: [u64; TypeUrl::COUNT],
    acks: u64,
    nacks: u64,
    stale: u64,
}

impl Mark {
    fn of(conn: &ConnectionCore) -> Mark {
        let counts = conn.counts;
        Mark {
            responses: std::array::from_fn(|i| conn.watches[i].responses),
            acks: counts.acks,
            nacks: counts.nacks,
            stale: counts.stale,
        }
    }
}

/// What the stream task is serving.
#[derive(Debug, Clone, Copy)]
enum Serving {
    Request { t: Option<TypeUrl>, started: Instant },
    Push { first_change: Instant, started: Instant },
}

/// A change being carried to the proxy: the nonce of the latest response of
/// each type it went out in, until each is ACKed.
#[derive(Debug)]
struct Converging {
    first_change: Instant,
    awaiting: [Option<Nonce>; TypeUrl::COUNT],
}

/// One stream's metric bookkeeping, owned by its task. It reads the
/// connection ([`ConnectionCore`]) around each request or push:
///
/// ```text
/// recorder.serving_type(&conn, type_url);  // or serving_push(&conn, &push)
/// let responses = conn.on_request(..);     // the protocol, untouched
/// recorder.finish(&conn, sent_bytes);      // after writing the responses
/// ```
#[derive(Debug)]
pub struct StreamRecorder {
    metrics: Arc<Metrics>,
    mark: Mark,
    serving: Option<Serving>,
    converging: Option<Converging>,
}

impl StreamRecorder {
    /// A recorder for a new stream, counting into `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> StreamRecorder {
        StreamRecorder { metrics, mark: Mark::default(), serving: None, converging: None }
    }

    /// A request for `type_url` (SotW or delta) is about to be handled.
    pub fn serving_type(&mut self, conn: &ConnectionCore, type_url: &str) {
        self.mark = Mark::of(conn);
        self.serving = Some(Serving::Request { t: TypeUrl::parse(type_url), started: Instant::now() });
    }

    /// A push from the engine is about to be handled.
    pub fn serving_push(&mut self, conn: &ConnectionCore, push: &PendingPush) {
        self.mark = Mark::of(conn);
        self.serving = Some(Serving::Push { first_change: push.first_change, started: Instant::now() });
    }

    /// The responses were written (`sent_bytes` of them): count what changed.
    pub fn finish(&mut self, conn: &ConnectionCore, sent_bytes: usize) {
        let Some(serving) = self.serving.take() else { return };
        let m = &self.metrics;
        let after = Mark::of(conn);
        let started = match serving {
            Serving::Request { started, .. } | Serving::Push { started, .. } => started,
        };
        let elapsed = started.elapsed();
        for t in SHORT_ORDER {
            let sent = after.responses[t.index()] - self.mark.responses[t.index()];
            if sent > 0 {
                m.xds_pushes.get(t).inc_by(sent);
                for _ in 0..sent {
                    m.xds_push_time.get(t).observe(elapsed);
                }
                let w = &conn.watches[t.index()];
                tracing::debug!(type_url = %t, responses = sent, nonce = ?w.nonce_sent, version = ?w.version_sent,
                    elapsed_ms = elapsed.as_secs_f64() * 1e3, "sent");
            }
        }
        m.sent_bytes.inc_by(sent_bytes as u64);
        if let Serving::Request { t: Some(t), .. } = serving {
            m.xds_acks.get(t).inc_by(after.acks - self.mark.acks);
            m.xds_rejects.get(t).inc_by(after.nacks - self.mark.nacks);
            m.expired_nonce.get(t).inc_by(after.stale - self.mark.stale);
        }
        if let Serving::Push { first_change, .. } = serving {
            self.carry(conn, first_change, &after);
        }
        self.follow(conn, &after);
    }

    /// A push went out: the change it carries converges when every type it
    /// was sent in is ACKed. A push merged with one still in flight keeps
    /// the earlier change time (the new responses carry both).
    fn carry(&mut self, conn: &ConnectionCore, first_change: Instant, after: &Mark) {
        let sent: Vec<TypeUrl> =
            SHORT_ORDER.into_iter().filter(|t| after.responses[t.index()] > self.mark.responses[t.index()]).collect();
        if sent.is_empty() {
            return;
        }
        let c = self.converging.get_or_insert_with(|| Converging { first_change, awaiting: Default::default() });
        c.first_change = c.first_change.min(first_change);
        for t in sent {
            c.awaiting[t.index()] = conn.watches[t.index()].nonce_sent;
        }
    }

    /// Moves awaited nonces to newer responses, settles ACKed types, drops
    /// the measurement on a NACK, and observes once everything is ACKed.
    fn follow(&mut self, conn: &ConnectionCore, after: &Mark) {
        let Some(c) = self.converging.as_mut() else { return };
        let nacked = after.nacks > self.mark.nacks;
        for t in SHORT_ORDER {
            let w = &conn.watches[t.index()];
            let Some(nonce) = c.awaiting[t.index()] else { continue };
            if nacked && w.last_nack.as_ref().is_some_and(|n| n.nonce == Some(nonce)) {
                // Rejected: this change did not converge on this proxy.
                self.converging = None;
                return;
            }
            if w.nonce_sent != Some(nonce) {
                // A later response of this type replaced it and carries the change too.
                c.awaiting[t.index()] = w.nonce_sent;
            }
            if c.awaiting[t.index()].is_some() && w.nonce_acked == c.awaiting[t.index()] {
                c.awaiting[t.index()] = None;
            }
        }
        if c.awaiting.iter().all(Option::is_none) {
            let took = c.first_change.elapsed();
            self.metrics.convergence.observe(took);
            tracing::debug!(ms = took.as_secs_f64() * 1e3, "converged: every response of the push was ACKed");
            self.converging = None;
        }
    }
}
