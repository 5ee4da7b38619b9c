//! The push side of the data flow: what changed, the snapshot built from
//! it, and who must be told.
//!
//! * [`PushRequest`]: merged change keys; [`PushTrigger`]: their summary.
//! * [`Debouncer`]: turns a stream of change sets into push requests.
//! * [`PushContext`]: the immutable snapshot generators read, published with `ArcSwap`.
//! * [`Scope`]: what decides a proxy's output, interned as [`ScopeId`].
//! * [`PushQueue`]: every stream's pending push, indexed by scope.
//! * [`Mailbox`]: the one "latest wins, wake the consumer" hand-off both
//!   the debouncer and the queue use.
//! * [`PushHistory`]: the last pushes, for the admin views.
//!
//! This layer knows nothing of how resources are generated or sent: the
//! engine (`crate::engine`) ties it to generation, and the xDS streams
//! read the queue.

pub mod affected;
pub mod context;
pub mod debounce;
pub mod history;
pub mod index;
pub mod mailbox;
pub mod queue;
pub mod request;
pub mod scope;
pub mod trigger;

pub use context::{PushChanges, PushContext};
pub use debounce::{DebounceConfig, Debouncer, PushSlot};
pub use history::PushHistory;
pub use mailbox::{Mailbox, Merge};
pub use queue::{ConnId, ConnectionHandle, PendingPush, PushQueue};
pub use request::PushRequest;
pub use scope::{InboundId, InboundKey, Scope, ScopeId, ScopeInterner, ScopeKey};
pub use trigger::PushTrigger;
