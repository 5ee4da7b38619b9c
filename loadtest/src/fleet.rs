//! What the simulated Envoys of one run share, and who each one is: the
//! protocol they speak ([`Protocol`]), the state every stream reports into
//! ([`Shared`]: counters, sync progress, watched lists, tracked changes) and
//! one stream's [`Identity`].
//!
//! Everything a stream does sits above this module: `envoy` (what Envoy
//! does alike on both protocols), `sotw` and `delta` (the wire), `ads` (the
//! stream task and its connections).

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::watch;

use crate::deps::DepsTable;
use crate::held::HeldTable;
use crate::track::{NameSets, Stats, SyncState, Tracker};
use crate::wire;

/// Which ADS method the simulated Envoys use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// State of the world: `StreamAggregatedResources` (Envoy's `api_type: GRPC`).
    Sotw,
    /// Incremental: `DeltaAggregatedResources` (Envoy's `api_type: DELTA_GRPC`).
    Delta,
}

impl Protocol {
    /// `sotw` or `delta`.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Sotw => "sotw",
            Protocol::Delta => "delta",
        }
    }

    /// The gRPC method.
    pub fn method(self) -> &'static str {
        match self {
            Protocol::Sotw => "StreamAggregatedResources",
            Protocol::Delta => "DeltaAggregatedResources",
        }
    }

    pub(crate) fn path(self) -> &'static str {
        match self {
            Protocol::Sotw => "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
            Protocol::Delta => "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources",
        }
    }

    /// The request's `node` field.
    pub(crate) fn node_field(self) -> u32 {
        match self {
            Protocol::Sotw => wire::SOTW_NODE_FIELD,
            Protocol::Delta => wire::DELTA_NODE_FIELD,
        }
    }
}

/// Which of a stream's requests carry the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum NodeSending {
    /// The first request of each stream only: Envoy with
    /// `set_node_on_first_message_only: true`, as Istio bootstraps it (and
    /// `meshpush bootstrap`).
    FirstRequest,
    /// Every request, ACKs included: Envoy's own default.
    EveryRequest,
}

/// State every stream shares.
#[derive(Debug)]
pub struct Shared {
    /// Counters.
    pub stats: Stats,
    /// Sync progress.
    pub sync: SyncState,
    /// Watched name lists.
    pub names: NameSets,
    /// Changes being looked for.
    pub tracker: Tracker,
    /// Set to `true` to end every stream.
    pub stop: watch::Sender<bool>,
    /// The encoded `Node` fields every simulated Envoy shares.
    pub node_common: Bytes,
    /// Which requests carry the node.
    pub node_sending: NodeSending,
    /// Delta streams' resource → wanted-name maps, interned.
    pub(crate) deps: DepsTable,
    /// What streams hold of each type, interned.
    pub(crate) held: HeldTable,
    /// Whether streams hash what they receive, to count resources resent
    /// unchanged ([`crate::track::Stats::unchanged`]).
    pub measure_resends: bool,
}

impl Shared {
    /// Fresh state; the sync clock starts now. `node_common` is the encoded
    /// `Node` fields every stream sends after its own (see [`crate::mesh::Shape::node_common`]).
    pub fn new(node_common: Bytes, node_sending: NodeSending, measure_resends: bool) -> Arc<Shared> {
        Arc::new(Shared {
            measure_resends,
            held: HeldTable::default(),
            node_sending,
            stats: Stats::default(),
            sync: SyncState::new(),
            names: NameSets::default(),
            tracker: Tracker::default(),
            stop: watch::Sender::new(false),
            node_common,
            deps: DepsTable::default(),
        })
    }
}

/// One simulated Envoy's identity.
#[derive(Debug, Clone)]
pub struct Identity {
    /// Stream number (0..N).
    pub id: u32,
    /// Namespace index of its sidecar.
    pub namespace: u32,
    /// The encoded `Node` fields of its own (id, cluster, metadata).
    pub node: Vec<u8>,
}
