//! The loop of the sources that keep something fresh for what the
//! published snapshot names: the key sets of RequestAuthentications
//! (`source::jwks`), the SPIFFE bundles of the mesh config
//! (`source::spiffe_bundle`) and the addresses of gateways known by host
//! name (`source::gateway_dns`).
//!
//! At each published snapshot, and whenever the next item falls due, the
//! source reads what the snapshot names and reconciles: refreshes what is
//! due, drops what is no longer named. The loop ends when the changes
//! channel closes. What is named is copied out of the snapshot first, so
//! a refresh never holds an old snapshot alive.

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::engine::PushEngine;
use crate::model::ChangeSet;
use crate::push::PushContext;

/// How long the loop waits with nothing due (a snapshot wakes it sooner).
const IDLE: Duration = Duration::from_secs(3600);

/// A source the loop drives.
pub(super) trait Refreshing {
    /// What a snapshot names for it.
    type Named;

    /// What `ctx` names.
    fn named(&self, ctx: &PushContext) -> Self::Named;

    /// Refreshes what is due of `named` at `now` and drops the rest;
    /// false when the changes channel is closed.
    fn reconcile(&mut self, named: &Self::Named, now: Instant) -> impl Future<Output = bool> + Send;

    /// When the next item falls due, if any is named.
    fn next_due(&self) -> Option<Instant>;
}

/// Drives `source` with `engine`'s snapshots until `changes` closes.
pub(super) async fn follow<R: Refreshing>(mut source: R, engine: &PushEngine, changes: &mpsc::Sender<ChangeSet>) {
    let mut versions = engine.versions();
    loop {
        let named = source.named(&engine.snapshot());
        if !source.reconcile(&named, Instant::now()).await {
            return;
        }
        let wait = source.next_due().map_or(IDLE, |at| at.saturating_duration_since(Instant::now()));
        tokio::select! {
            changed = versions.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(wait) => {}
            () = changes.closed() => return,
        }
    }
}
