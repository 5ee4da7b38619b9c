//! `Mailbox`: one pending item that later items merge into, and a consumer
//! woken when there is one.
//!
//! The push path hands work on in two places, and both want the same
//! thing: the producer never waits and never queues, whatever the
//! consumer is doing. The debouncer hands [`PushRequest`]s to the engine;
//! the engine hands each stream a [`PendingPush`]. While the consumer is
//! busy, what arrives merges into what is pending ([`Merge`]), so memory
//! is one item however far the consumer falls behind, and the consumer
//! takes everything that happened meanwhile in one go.
//!
//! Invariant: an item put is taken exactly once, alone or merged with
//! others; `put` never blocks on the consumer.
//!
//! [`PushRequest`]: super::PushRequest
//! [`PendingPush`]: super::PendingPush

use parking_lot::Mutex;
use tokio::sync::Notify;

/// An item that absorbs a later one of its kind.
pub trait Merge {
    /// Folds `later` into `self`: afterwards `self` stands for both.
    fn merge(&mut self, later: Self);
}

/// One pending item, merged while the consumer is busy.
#[derive(Debug)]
pub struct Mailbox<T> {
    pending: Mutex<Option<T>>,
    notify: Notify,
}

impl<T> Default for Mailbox<T> {
    fn default() -> Self {
        Mailbox { pending: Mutex::new(None), notify: Notify::new() }
    }
}

impl<T: Merge> Mailbox<T> {
    /// Puts an item, merging it into the pending one, and wakes the consumer.
    pub fn put(&self, item: T) {
        let mut pending = self.pending.lock();
        match pending.as_mut() {
            Some(p) => p.merge(item),
            None => *pending = Some(item),
        }
        drop(pending);
        self.notify.notify_one();
    }

    /// Takes the pending item without waiting.
    pub fn try_take(&self) -> Option<T> {
        self.pending.lock().take()
    }

    /// Waits for an item and takes it. Cancel-safe: dropped before it
    /// returns, it has taken nothing.
    pub async fn take(&self) -> T {
        loop {
            if let Some(item) = self.try_take() {
                return item;
            }
            // A put between the check and this wait leaves a permit: the
            // wait then returns at once.
            self.notify.notified().await;
        }
    }

    /// Whether an item is waiting.
    pub fn is_pending(&self) -> bool {
        self.pending.lock().is_some()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[derive(Debug, PartialEq)]
    struct Sum(u32);

    impl Merge for Sum {
        fn merge(&mut self, later: Sum) {
            self.0 += later.0;
        }
    }

    #[test]
    fn items_put_while_nobody_takes_merge_into_one() {
        let mailbox = Mailbox::default();
        assert!(!mailbox.is_pending());
        for n in 1..=4 {
            mailbox.put(Sum(n));
        }
        assert!(mailbox.is_pending());
        assert_eq!(mailbox.try_take(), Some(Sum(10)));
        assert_eq!(mailbox.try_take(), None, "taken once");
    }

    #[tokio::test]
    async fn a_waiting_consumer_is_woken_by_a_put() {
        let mailbox = Arc::new(Mailbox::default());
        let consumer = tokio::spawn({
            let mailbox = mailbox.clone();
            async move { mailbox.take().await }
        });
        tokio::task::yield_now().await;
        mailbox.put(Sum(7));
        let taken = tokio::time::timeout(Duration::from_secs(5), consumer).await.expect("woken").unwrap();
        assert_eq!(taken, Sum(7));
    }

    #[tokio::test]
    async fn a_take_dropped_while_waiting_loses_nothing() {
        let mailbox = Mailbox::default();
        // Cancelled while it waits, as a stream's select cancels it when a
        // request comes first.
        assert!(tokio::time::timeout(Duration::from_millis(10), mailbox.take()).await.is_err());
        mailbox.put(Sum(3));
        assert_eq!(tokio::time::timeout(Duration::from_secs(5), mailbox.take()).await.ok(), Some(Sum(3)));
    }
}
