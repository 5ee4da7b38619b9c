//! `ConnectionCore`: what every ADS stream keeps, whichever protocol it
//! speaks.
//!
//! A SotW stream (`xds::sotw::Connection`) and a delta stream
//! (`xds::delta::DeltaConnection`) each hold one core and keep beside it
//! only what their protocol needs of its own: SotW what it sent of each
//! type, delta what the client holds. The core owns the stream's identity
//! (connection id and proxy), the per-type [`Watch`] records that status
//! and metrics read, the request counters, the placement (the scope and
//! workload shape the stream is generated for), the nonce sequence, and
//! the make-before-break cluster removal that waits on the client.
//!
//! The rules both protocols share are made here once, so they cannot drift
//! apart: how an ACK and a NACK are recorded, what a response records as
//! sent, when the stream has answered everything, and when clusters held
//! back for make-before-break may go.
//!
//! Invariant: a type's `nonce_sent` is the last nonce this stream numbered
//! for it, and every response numbered is counted in its `responses`.

use std::sync::Arc;
use std::time::SystemTime;

use crate::model::Proxy;
use crate::push::{InboundId, PendingPush, PushContext, Scope};
use crate::resource::TypeUrl;
use crate::text::Shown;
use crate::xds::stream::placement::Placement;
use crate::xds::watch::push_plan::{self, Step};
use crate::xds::watch::{NackRecord, Nonce, RequestCounts, Watch};

/// The state both protocols keep for one ADS stream.
#[derive(Debug)]
pub struct ConnectionCore {
    /// Connection id.
    pub id: u64,
    /// The proxy, parsed once from the first request's node.
    pub proxy: Arc<Proxy>,
    /// Per-type subscription and nonce state, indexed by `TypeUrl::index`.
    pub watches: [Watch; TypeUrl::COUNT],
    /// Request counters.
    pub counts: RequestCounts,
    placement: Placement,
    nonce: u32,
    /// Clusters gone from the scope are still sent (SotW) or not yet
    /// removed (delta) until the listeners and routes of their push settle.
    cluster_cleanup: bool,
}

impl ConnectionCore {
    /// A new stream's core for `proxy`.
    pub fn new(id: u64, proxy: Arc<Proxy>) -> ConnectionCore {
        ConnectionCore {
            id,
            proxy,
            watches: Default::default(),
            counts: RequestCounts::default(),
            placement: Placement::default(),
            nonce: 0,
            cluster_cleanup: false,
        }
    }

    /// The scope last generated for.
    pub fn scope(&self) -> Option<&Arc<Scope>> {
        self.placement.scope()
    }

    /// The workload shape last generated for.
    pub fn inbound(&self) -> Option<InboundId> {
        self.placement.inbound().map(|(id, _)| *id)
    }

    /// Which scope and workload shape the stream is generated for.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Brings the placement to `ctx` and returns the scope. The keys are
    /// computed once; the scope itself comes from the snapshot's memo.
    pub fn refresh_scope(&mut self, ctx: &PushContext) -> Arc<Scope> {
        self.placement.refresh(ctx, &self.proxy, false)
    }

    /// Brings the placement to `ctx` for `push` and returns, in push order,
    /// what the push sends of each type the client watches
    /// ([`push_plan::plan`]: everything when the scope moved).
    pub fn push_plan<'p>(&mut self, ctx: &PushContext, push: &'p PendingPush) -> Vec<(TypeUrl, Step<'p>)> {
        let moved = self.placement.refresh_for_push(ctx, &self.proxy, push);
        push_plan::plan(push, moved, |t| self.watches[t.index()].subscribed)
    }

    /// Whether `nonce` is the last one sent for `t` (an empty one never is).
    pub fn is_latest_nonce(&self, t: TypeUrl, nonce: &str) -> bool {
        let sent = self.watches[t.index()].nonce_sent;
        sent.is_some() && Nonce::parse(nonce) == sent
    }

    /// Counts a request whose nonce is not the latest of its type.
    pub fn record_stale(&mut self) {
        self.counts.stale += 1;
    }

    /// Records an ACK of the last response sent of `t` (the caller has
    /// checked the request's nonce with [`Self::is_latest_nonce`]). The
    /// client holds `version` (SotW's `version_info`), or, where it does
    /// not say (delta), the version sent. An ACK of the version sent
    /// shares its text.
    pub fn record_ack(&mut self, t: TypeUrl, version: Option<&str>) {
        let w = &mut self.watches[t.index()];
        w.nonce_acked = w.nonce_sent;
        w.version_acked = match (version, &w.version_sent) {
            (None, sent) => sent.clone(),
            (Some(v), Some(sent)) if **sent == *v => Some(sent.clone()),
            (Some(v), _) => Some(Arc::from(v)),
        };
        self.counts.acks += 1;
    }

    /// Records and logs a NACK of `nonce` for `t`: the client kept
    /// `version` and said `message`. Both are client strings: what is kept
    /// and logged is bounded ([`crate::text`]).
    pub fn record_nack(&mut self, t: TypeUrl, nonce: &str, version: &str, message: &str) {
        tracing::warn!(conn_id = self.id, node_id = %Shown(&self.proxy.id), type_url = %t, nonce = %Shown(nonce),
            version = %Shown(version), "NACK: {}", Shown(message));
        self.watches[t.index()].last_nack = Some(Arc::new(NackRecord {
            nonce: Nonce::parse(nonce),
            version: crate::text::shown(version).into_owned(),
            message: crate::text::shown(message).into_owned(),
            at: SystemTime::now(),
        }));
        self.counts.nacks += 1;
    }

    /// Numbers a response of `t` that carries `version`, records it as
    /// sent, and returns its nonce.
    pub fn record_sent(&mut self, t: TypeUrl, version: Arc<str>) -> u32 {
        self.nonce = self.nonce.wrapping_add(1);
        let w = &mut self.watches[t.index()];
        w.nonce_sent = Some(Nonce(self.nonce));
        w.version_sent = Some(version);
        w.responses += 1;
        self.nonce
    }

    /// Holds clusters gone from the scope back until the listeners and
    /// routes of the current push are answered.
    pub fn hold_removed_clusters(&mut self) {
        self.cluster_cleanup = true;
    }

    /// Whether clusters were held back and may go now: the client answered
    /// the last CDS, LDS and RDS response. Clears the hold when it says so.
    pub fn take_cluster_cleanup(&mut self) -> bool {
        let due = self.cluster_cleanup
            && [TypeUrl::Cluster, TypeUrl::Listener, TypeUrl::Route].iter().all(|t| self.watches[t.index()].settled());
        if due {
            self.cluster_cleanup = false;
        }
        due
    }

    /// The client has answered (ACKed or NACKed) the last response of
    /// every type: nothing sent to it is in flight.
    pub fn answered(&self) -> bool {
        self.watches.iter().all(Watch::settled)
    }
}
