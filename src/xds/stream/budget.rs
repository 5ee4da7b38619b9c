//! The request memory budget: how many request bytes all streams together
//! may be receiving or handling at once.
//!
//! One request is limited in size (`--max-request-bytes`), but a thousand
//! streams each sending one just under that limit would hold them all.
//! Every request message takes its length from this budget when its frame
//! header arrives and gives it back once the stream has handled it (when
//! the stream asks for its next message). A message that finds the budget
//! spent waits for it, in arrival order, without reading further: its
//! bytes stay with the client, held back by HTTP/2 flow control. One that
//! waits longer than [`BUDGET_WAIT`] is refused with `RESOURCE_EXHAUSTED`,
//! and one larger than the whole budget is refused at once. A message that
//! has begun must arrive within [`PARTIAL_TIMEOUT`], or its stream ends:
//! a client that starts a request and stalls holds its bytes no longer.
//!
//! Invariant: the bytes of messages being received or handled never exceed
//! the budget (the HTTP/2 windows bound what sits in h2's buffers besides).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Longest a request waits for the budget before it is refused (by default).
pub const BUDGET_WAIT: Duration = Duration::from_secs(10);

/// The default budget: 64 MiB of requests at once, sixteen of the largest
/// (4 MiB) or about a thousand of Envoy 1.40's first requests (60 KB). A
/// request costs about twelve times its size while handled, so this bounds
/// what requests take at well under 1 GiB.
pub const DEFAULT_BUDGET_BYTES: usize = 64 * 1024 * 1024;

/// The server's request budget, shared by every stream.
#[derive(Debug, Clone)]
pub struct RequestBudget {
    bytes: usize,
    permits: Arc<Semaphore>,
    wait: Duration,
    partial_timeout: Duration,
}

/// How long a message may take to arrive once its header has: Envoy sends
/// a request whole, at once; a client that starts one and stalls would hold
/// its share of the budget.
pub const PARTIAL_TIMEOUT: Duration = Duration::from_secs(30);

/// Bytes taken from the budget, given back on drop.
#[derive(Debug)]
pub struct Reservation(#[allow(dead_code, reason = "held for its drop")] OwnedSemaphorePermit);

/// Why a request could not take its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetRefusal {
    /// Larger than the whole budget.
    TooLarge,
    /// The budget stayed spent for its wait.
    Spent,
}

impl RequestBudget {
    /// A budget of `bytes` (at most `u32::MAX` bytes can be waited for at once).
    pub fn new(bytes: usize) -> RequestBudget {
        let bytes = bytes.clamp(1, Semaphore::MAX_PERMITS);
        RequestBudget {
            bytes,
            permits: Arc::new(Semaphore::new(bytes)),
            wait: BUDGET_WAIT,
            partial_timeout: PARTIAL_TIMEOUT,
        }
    }

    /// The same budget with other waits: how long a request waits for room,
    /// and how long a begun message may take to arrive.
    pub fn with_timeouts(self, wait: Duration, partial_timeout: Duration) -> RequestBudget {
        RequestBudget { wait, partial_timeout, ..self }
    }

    /// How long a request waits for room before it is refused.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// How long a begun message may take to arrive.
    pub fn partial_timeout(&self) -> Duration {
        self.partial_timeout
    }

    /// The budget's size.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Bytes free now.
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }

    /// Takes `len` bytes now, if they are free.
    pub fn try_reserve(&self, len: usize) -> Option<Reservation> {
        let n = u32::try_from(len).ok()?;
        self.permits.clone().try_acquire_many_owned(n).ok().map(Reservation)
    }

    /// Takes `len` bytes, waiting for them for at most [`wait`](Self::wait).
    pub async fn reserve(&self, len: usize) -> Result<Reservation, BudgetRefusal> {
        if len > self.bytes {
            return Err(BudgetRefusal::TooLarge);
        }
        let n = u32::try_from(len).map_err(|_| BudgetRefusal::TooLarge)?;
        match tokio::time::timeout(self.wait, self.permits.clone().acquire_many_owned(n)).await {
            Ok(Ok(permit)) => Ok(Reservation(permit)),
            // The semaphore is never closed; a timeout is a spent budget.
            Ok(Err(_)) | Err(_) => Err(BudgetRefusal::Spent),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn reservations_wait_for_room_and_give_it_back_on_drop() {
        let budget = RequestBudget::new(100);
        let a = budget.reserve(60).await.unwrap();
        assert_eq!(budget.available(), 40);
        assert!(budget.try_reserve(50).is_none());
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move { budget.reserve(50).await.map(|_| ()) }
        });
        tokio::task::yield_now().await;
        drop(a);
        assert_eq!(waiting.await.unwrap(), Ok(()));
        assert_eq!(budget.available(), 100);
    }

    #[tokio::test(start_paused = true)]
    async fn a_spent_budget_refuses_after_the_wait_and_too_large_at_once() {
        let budget = RequestBudget::new(100);
        assert_eq!(budget.reserve(101).await.unwrap_err(), BudgetRefusal::TooLarge);
        let _held = budget.reserve(100).await.unwrap();
        let started = tokio::time::Instant::now();
        assert_eq!(budget.reserve(1).await.unwrap_err(), BudgetRefusal::Spent);
        assert_eq!(started.elapsed(), BUDGET_WAIT);
    }
}
