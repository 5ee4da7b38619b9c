//! Draining a connection: what tells the streams of one HTTP/2 connection
//! to end, so their Envoys reconnect (to this replica or another).
//!
//! The connection that accepts streams (`serve::connections`) owns a
//! [`DrainSignal`] and hands every request on it a
//! [`ConnectionContext`](super::peer::ConnectionContext) (an HTTP request
//! extension) with the matching [`Drain`]. When the
//! connection reaches its maximum age, or the server shuts down, it sends
//! GOAWAY (no new streams on it) and signals: every ADS stream on it ends
//! with `UNAVAILABLE` and the reason. Envoy keeps the config it has and
//! opens a new stream on a new connection, which a load balancer in front
//! of several replicas may place elsewhere: that is how long-lived xDS
//! connections rebalance (Istio: `keepaliveMaxServerConnectionAge`).
//!
//! A stream opened without a connection (benches and tests drive streams
//! over in-memory channels) gets [`Drain::never`].

use tokio::sync::watch;

/// Why a connection is drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainReason {
    /// It reached its maximum age (with jitter).
    MaxAge,
    /// The server is shutting down.
    Shutdown,
}

impl DrainReason {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            DrainReason::MaxAge => "max_age",
            DrainReason::Shutdown => "shutdown",
        }
    }

    /// The status message a drained stream ends with.
    pub fn message(self) -> &'static str {
        match self {
            DrainReason::MaxAge => "the connection reached its maximum age; reconnect",
            DrainReason::Shutdown => "the server is shutting down; reconnect",
        }
    }
}

/// The connection's side: signals its streams once.
#[derive(Debug)]
pub struct DrainSignal(watch::Sender<Option<DrainReason>>);

/// A stream's side: resolves once its connection is drained.
#[derive(Debug, Clone)]
pub struct Drain(Option<watch::Receiver<Option<DrainReason>>>);

impl DrainSignal {
    /// A signal and the receiver its streams get.
    pub fn new() -> (DrainSignal, Drain) {
        let (tx, rx) = watch::channel(None);
        (DrainSignal(tx), Drain(Some(rx)))
    }

    /// Tells every stream of the connection to end (the first reason wins).
    pub fn drain(&self, reason: DrainReason) {
        self.0.send_if_modified(|r| r.is_none() && r.replace(reason).is_none());
    }
}

impl Drain {
    /// A drain that never comes.
    pub fn never() -> Drain {
        Drain(None)
    }

    /// Resolves with the reason once the connection is drained; never if
    /// it is not (or has no drain).
    pub async fn drained(&mut self) -> DrainReason {
        if let Some(rx) = &mut self.0
            && let Ok(reason) = rx.wait_for(Option::is_some).await
            && let Some(reason) = *reason
        {
            return reason;
        }
        std::future::pending().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_stream_of_a_connection_sees_the_first_reason() {
        let (signal, drain) = DrainSignal::new();
        let (mut a, mut b) = (drain.clone(), drain);
        signal.drain(DrainReason::MaxAge);
        signal.drain(DrainReason::Shutdown);
        assert_eq!(a.drained().await, DrainReason::MaxAge);
        assert_eq!(b.drained().await, DrainReason::MaxAge);
    }

    #[tokio::test(start_paused = true)]
    async fn no_signal_no_drain() {
        let (signal, mut drain) = DrainSignal::new();
        let waited = tokio::time::timeout(std::time::Duration::from_secs(3600), drain.drained()).await;
        assert!(waited.is_err(), "drained without a signal");
        // A dropped connection does not end its streams either: the stream ends with its body.
        drop(signal);
        assert!(tokio::time::timeout(std::time::Duration::from_secs(1), drain.drained()).await.is_err());
        assert!(tokio::time::timeout(std::time::Duration::from_secs(1), Drain::never().drained()).await.is_err());
    }
}
