//! The watch bookkeeping both protocols share: per type, what the client
//! subscribed and what was sent, ACKed and NACKed ([`Watch`]), the
//! stream's request counters ([`RequestCounts`]), the watched name lists
//! ([`name_list`]) and the one decision of what a push sends
//! ([`push_plan`]).
//!
//! A stream keeps them in its `ConnectionCore` (`xds::stream::connection`),
//! so a SotW and a delta stream look alike to status and metrics.

pub mod name_list;
pub mod push_plan;

use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;

use name_list::NameList;

/// A recorded NACK.
#[derive(Debug, Clone, Serialize)]
pub struct NackRecord {
    /// The nonce that was rejected.
    pub nonce: String,
    /// The version the client kept.
    pub version: String,
    /// Envoy's message.
    pub message: String,
    /// When.
    pub at: SystemTime,
}

/// Per-type state of a stream, SotW or delta.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Watch {
    /// The client asked for this type.
    pub subscribed: bool,
    /// Wildcard subscription (CDS/LDS: empty first request, or `*`).
    pub wildcard: bool,
    /// Explicit names (without `*`), shared with every stream watching the same list.
    pub names: Arc<NameList>,
    /// Last nonce sent.
    pub nonce_sent: Option<String>,
    /// Version of the last response (delta: its `system_version_info`).
    pub version_sent: Option<Arc<str>>,
    /// Last version the client ACKed.
    pub version_acked: Option<String>,
    /// Last nonce the client ACKed.
    pub nonce_acked: Option<String>,
    /// Last NACK.
    pub last_nack: Option<NackRecord>,
    /// Responses sent.
    pub responses: u64,
}

impl Watch {
    /// Whether the last response was answered, ACKed or NACKed (or nothing
    /// is outstanding).
    pub fn settled(&self) -> bool {
        self.nonce_sent.is_none() || self.nonce_sent == self.nonce_acked || self.last_nack_is_latest()
    }

    fn last_nack_is_latest(&self) -> bool {
        self.last_nack.as_ref().is_some_and(|n| Some(&n.nonce) == self.nonce_sent.as_ref())
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
    fn a_watch_is_settled_once_its_last_response_is_answered() {
        let mut w = Watch::default();
        assert!(w.settled(), "nothing sent, nothing outstanding");
        w.nonce_sent = Some("00000002".into());
        w.nonce_acked = Some("00000001".into());
        assert!(!w.settled(), "the last response is not answered");
        w.last_nack = Some(NackRecord {
            nonce: "00000001".into(),
            version: String::new(),
            message: "old".into(),
            at: SystemTime::now(),
        });
        assert!(!w.settled(), "a NACK of an older response answers nothing");
        w.last_nack.as_mut().expect("set").nonce = "00000002".into();
        assert!(w.settled(), "a NACK answers");
        w.last_nack = None;
        w.nonce_acked = Some("00000002".into());
        assert!(w.settled(), "an ACK answers");
    }
}
