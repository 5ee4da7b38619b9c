//! `StreamStatus`: a copy of one stream's protocol state that the admin
//! endpoints can read without touching the stream task.
//!
//! The stream task owns its protocol state; after every request or push it
//! brings a small copy (per type: nonces, shared versions, counts; no
//! resource names) up to date in the [`StatusBoard`], keyed by connection
//! id. `/debug/syncz`,
//! `/debug/connections`, `proxy-status` and the status page read those
//! copies; they never wait on a stream.
//!
//! [`SyncState`] is the one place Istio's proxy-status vocabulary is decided.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;
use serde::Serialize;

use crate::push::ConnId;
use crate::resource::TypeUrl;
use crate::xds::stream::connection::ConnectionCore;
use crate::xds::watch::{NackRecord, Nonce, Watch};

/// Istio's sync states, as `istioctl proxy-status` prints them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SyncState {
    /// The proxy ACKed the last response sent (or reconnected with the current version).
    #[serde(rename = "SYNCED")]
    Synced,
    /// Nothing of this type was sent.
    #[serde(rename = "NOT SENT")]
    NotSent,
    /// A response was sent and is not ACKed yet.
    #[serde(rename = "STALE")]
    Stale,
    /// The proxy rejected (NACKed) the last response.
    #[serde(rename = "ERROR")]
    Error,
}

impl SyncState {
    /// The label printed in tables.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncState::Synced => "SYNCED",
            SyncState::NotSent => "NOT SENT",
            SyncState::Stale => "STALE",
            SyncState::Error => "ERROR",
        }
    }
}

impl fmt::Display for SyncState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One type's state on one stream.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TypeStatus {
    /// The client asked for this type.
    pub subscribed: bool,
    /// Wildcard subscription.
    pub wildcard: bool,
    /// Names the client watches explicitly.
    pub watched: usize,
    /// Last nonce sent.
    pub nonce_sent: Option<Nonce>,
    /// Version of the last response.
    pub version_sent: Option<Arc<str>>,
    /// Last nonce ACKed.
    pub nonce_acked: Option<Nonce>,
    /// Last version ACKed.
    pub version_acked: Option<Arc<str>>,
    /// Last NACK.
    pub last_nack: Option<Arc<NackRecord>>,
    /// Responses sent.
    pub responses: u64,
}

/// Sets `dst` to `src` unless it already holds the same allocation: the
/// versions are shared by every stream of a scope, and an unchanged one is
/// not counted again.
fn share<T: ?Sized>(dst: &mut Option<Arc<T>>, src: &Option<Arc<T>>) {
    let same = match (&*dst, src) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    };
    if !same {
        dst.clone_from(src);
    }
}

impl TypeStatus {
    /// Brings this copy up to date with `w`, without allocating (a stream
    /// publishes its state after every request and push).
    fn update(&mut self, w: &Watch) {
        self.subscribed = w.subscribed;
        self.wildcard = w.wildcard;
        self.watched = w.names.len();
        self.nonce_sent = w.nonce_sent;
        share(&mut self.version_sent, &w.version_sent);
        self.nonce_acked = w.nonce_acked;
        share(&mut self.version_acked, &w.version_acked);
        share(&mut self.last_nack, &w.last_nack);
        self.responses = w.responses;
    }

    /// Istio's meaning: ERROR when the last response was NACKed; SYNCED when
    /// the last nonce sent was ACKed (or the client reconnected holding the
    /// current version, so nothing needed sending); STALE when it was sent
    /// and not ACKed yet; NOT SENT when nothing was sent.
    pub fn sync_state(&self) -> SyncState {
        match self.nonce_sent {
            Some(sent) if self.last_nack.as_ref().is_some_and(|n| n.nonce == Some(sent)) => SyncState::Error,
            Some(sent) if self.nonce_acked == Some(sent) => SyncState::Synced,
            Some(_) => SyncState::Stale,
            None if self.version_sent.is_some() && self.version_sent == self.version_acked => SyncState::Synced,
            None => SyncState::NotSent,
        }
    }
}

/// A stream's published state.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StreamStatus {
    /// Per type, indexed by [`TypeUrl::index`].
    pub types: [TypeStatus; TypeUrl::COUNT],
    /// ACKs received.
    pub acks: u64,
    /// NACKs received.
    pub nacks: u64,
    /// Requests ignored for a stale nonce.
    pub stale: u64,
    /// When the stream last handled a request or push.
    pub updated: Option<SystemTime>,
}

impl StreamStatus {
    /// Brings this copy up to date with `conn` in place.
    pub fn update(&mut self, conn: &ConnectionCore) {
        for (status, w) in self.types.iter_mut().zip(&conn.watches) {
            status.update(w);
        }
        let counts = conn.counts;
        (self.acks, self.nacks, self.stale) = (counts.acks, counts.nacks, counts.stale);
        self.updated = Some(SystemTime::now());
    }

    /// One type's state.
    pub fn get(&self, t: TypeUrl) -> &TypeStatus {
        &self.types[t.index()]
    }
}

const SHARDS: usize = 16;

/// Every open stream's [`StreamStatus`], by connection id. Sharded so that
/// thousands of streams updating their copy after every request and push
/// do not meet on one lock; each copy has its own lock, held only to copy.
#[derive(Debug)]
pub struct StatusBoard {
    shards: Vec<Mutex<HashMap<ConnId, Arc<Mutex<StreamStatus>>>>>,
}

impl Default for StatusBoard {
    fn default() -> Self {
        StatusBoard { shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect() }
    }
}

impl StatusBoard {
    fn shard(&self, id: ConnId) -> &Mutex<HashMap<ConnId, Arc<Mutex<StreamStatus>>>> {
        &self.shards[id as usize % SHARDS]
    }

    /// A stream opened: its copy, for the stream task to keep updating.
    pub fn open(&self, id: ConnId) -> Arc<Mutex<StreamStatus>> {
        self.shard(id).lock().entry(id).or_default().clone()
    }

    /// A stream closed: its copy goes.
    pub fn close(&self, id: ConnId) {
        self.shard(id).lock().remove(&id);
    }

    /// A copy of stream `id`'s status (the default for an unknown stream).
    pub fn get(&self, id: ConnId) -> StreamStatus {
        let entry = self.shard(id).lock().get(&id).cloned();
        entry.map(|status| status.lock().clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nack(nonce: u32, version: &str) -> Arc<NackRecord> {
        Arc::new(NackRecord {
            nonce: Some(Nonce(nonce)),
            version: version.into(),
            message: "bad".into(),
            at: SystemTime::now(),
        })
    }

    fn status(sent: Option<u32>, acked: Option<u32>, nacked: Option<u32>) -> TypeStatus {
        TypeStatus {
            nonce_sent: sent.map(Nonce),
            nonce_acked: acked.map(Nonce),
            last_nack: nacked.map(|n| nack(n, "")),
            ..Default::default()
        }
    }

    #[test]
    fn an_update_in_place_leaves_what_the_watch_holds() {
        let mut w = Watch { nonce_sent: Some(Nonce(1)), version_sent: Some("a1".into()), ..Default::default() };
        let mut status = TypeStatus::default();
        status.update(&w);
        assert_eq!((status.nonce_sent, status.version_sent.as_deref()), (Some(Nonce(1)), Some("a1")));
        assert_eq!(status.sync_state(), SyncState::Stale);

        w.nonce_acked = w.nonce_sent;
        w.version_acked = w.version_sent.clone();
        w.nonce_sent = Some(Nonce(2));
        w.version_sent = Some("b2-longer".into());
        w.last_nack = Some(nack(2, "a1"));
        status.update(&w);
        assert_eq!(status.nonce_sent, Some(Nonce(2)));
        assert_eq!(status.version_sent.as_deref(), Some("b2-longer"));
        assert_eq!(status.nonce_acked, Some(Nonce(1)));
        assert_eq!(status.version_acked.as_deref(), Some("a1"));
        assert!(Arc::ptr_eq(status.version_acked.as_ref().unwrap(), w.version_acked.as_ref().unwrap()), "shared");
        assert_eq!(status.sync_state(), SyncState::Error);

        w.nonce_sent = None;
        w.last_nack = None;
        status.update(&w);
        assert_eq!((status.nonce_sent, status.last_nack.is_none()), (None, true));
    }

    #[test]
    fn a_types_status_stays_small() {
        // Nine per stream; as `Watch`, with the watched count for the names.
        assert!(std::mem::size_of::<TypeStatus>() <= 80, "TypeStatus is {} bytes", std::mem::size_of::<TypeStatus>());
    }

    #[test]
    fn the_board_holds_a_streams_copy_while_it_is_open() {
        let board = StatusBoard::default();
        let copy = board.open(7);
        copy.lock().acks = 3;
        assert_eq!(board.get(7).acks, 3, "the board reads what the stream wrote");
        assert_eq!(board.get(8).acks, 0, "an unknown stream reads as nothing sent");
        board.close(7);
        assert_eq!(board.get(7).acks, 0, "a closed stream's copy is gone");
    }

    #[test]
    fn sync_states_follow_istio() {
        assert_eq!(status(None, None, None).sync_state(), SyncState::NotSent);
        assert_eq!(status(Some(2), Some(2), None).sync_state(), SyncState::Synced);
        assert_eq!(status(Some(3), Some(2), None).sync_state(), SyncState::Stale);
        assert_eq!(status(Some(3), Some(2), Some(3)).sync_state(), SyncState::Error);
        // An old NACK does not taint a later, ACKed response.
        assert_eq!(status(Some(4), Some(4), Some(3)).sync_state(), SyncState::Synced);
        let reconnected =
            TypeStatus { version_sent: Some("v".into()), version_acked: Some("v".into()), ..Default::default() };
        assert_eq!(reconnected.sync_state(), SyncState::Synced);
    }
}
