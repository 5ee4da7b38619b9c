//! The watch bookkeeping both protocols share: per type, what the client
//! subscribed and what was sent, ACKed and NACKed ([`Watch`]), the
//! stream's request counters ([`RequestCounts`]), the watched name lists
//! ([`name_list`]) and the one decision of what a push sends
//! ([`push_plan`]).
//!
//! A stream keeps them in its `ConnectionCore` (`xds::stream::connection`),
//! so a SotW and a delta stream look alike to status and metrics.

pub mod name_list;
pub mod nonce;
pub mod push_plan;

use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;

use name_list::NameList;
pub use nonce::Nonce;

/// A recorded NACK.
#[derive(Debug, Clone, Serialize)]
pub struct NackRecord {
    /// The nonce that was rejected (none when the request named none).
    pub nonce: Option<Nonce>,
    /// The version the client kept.
    pub version: String,
    /// Envoy's message.
    pub message: String,
    /// When.
    pub at: SystemTime,
}

/// Per-type state of a stream, SotW or delta.
///
/// Kept small (nine per stream, and nine more in the stream's status
/// copy): nonces are numbers, versions are shared `Arc`s (an ACK of the
/// version sent shares its text), and a NACK, rare, is behind a pointer.
#[derive(Debug, Clone, Serialize)]
pub struct Watch {
    /// The client asked for this type.
    pub subscribed: bool,
    /// Wildcard subscription (CDS/LDS: empty first request, or `*`).
    pub wildcard: bool,
    /// Explicit names (without `*`), shared with every stream watching the same list.
    pub names: Arc<NameList>,
    /// Last nonce sent.
    pub nonce_sent: Option<Nonce>,
    /// Version of the last response (delta: its `system_version_info`).
    pub version_sent: Option<Arc<str>>,
    /// Last version the client ACKed.
    pub version_acked: Option<Arc<str>>,
    /// Last nonce the client ACKed.
    pub nonce_acked: Option<Nonce>,
    /// Last NACK.
    pub last_nack: Option<Arc<NackRecord>>,
    /// Responses sent.
    pub responses: u64,
}

impl Default for Watch {
    fn default() -> Watch {
        Watch {
            subscribed: false,
            wildcard: false,
            names: NameList::none(),
            nonce_sent: None,
            version_sent: None,
            version_acked: None,
            nonce_acked: None,
            last_nack: None,
            responses: 0,
        }
    }
}

impl Watch {
    /// Whether the last response was answered, ACKed or NACKed (or nothing
    /// is outstanding).
    pub fn settled(&self) -> bool {
        self.nonce_sent.is_none() || self.nonce_sent == self.nonce_acked || self.last_nack_is_latest()
    }

    fn last_nack_is_latest(&self) -> bool {
        self.last_nack.as_ref().is_some_and(|n| n.nonce.is_some() && n.nonce == self.nonce_sent)
    }
}

/// Counters of one stream's request handling.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct RequestCounts {
    /// ACKs.
    pub acks: u64,
    /// NACKs.
    pub nacks: u64,
    /// Requests ignored for a stale nonce.
    pub stale: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_stays_small() {
        // Nine per stream, and nine more in its status copy: at 100,000
        // streams each byte here is 1.7 MB. 80 is two flags, the names
        // pointer, two nonces, two shared versions, the NACK pointer and the
        // response count.
        assert!(std::mem::size_of::<Watch>() <= 80, "Watch is {} bytes", std::mem::size_of::<Watch>());
    }

    #[test]
    fn watches_that_name_nothing_share_one_empty_list() {
        // Nine a stream before its first requests: one list each was 1.5 KB
        // a stream.
        let (a, b) = (Watch::default(), Watch::default());
        assert!(a.names.is_empty());
        assert!(Arc::ptr_eq(&a.names, &b.names));
    }

    #[test]
    fn a_watch_is_settled_once_its_last_response_is_answered() {
        let mut w = Watch::default();
        assert!(w.settled(), "nothing sent, nothing outstanding");
        w.nonce_sent = Some(Nonce(2));
        w.nonce_acked = Some(Nonce(1));
        assert!(!w.settled(), "the last response is not answered");
        let nack = |nonce| {
            Some(Arc::new(NackRecord { nonce, version: String::new(), message: "old".into(), at: SystemTime::now() }))
        };
        w.last_nack = nack(Some(Nonce(1)));
        assert!(!w.settled(), "a NACK of an older response answers nothing");
        w.last_nack = nack(None);
        assert!(!w.settled(), "a NACK that names no response answers nothing");
        w.last_nack = nack(Some(Nonce(2)));
        assert!(w.settled(), "a NACK answers");
        w.last_nack = None;
        w.nonce_acked = Some(Nonce(2));
        assert!(w.settled(), "an ACK answers");
    }
}
