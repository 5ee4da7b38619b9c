//! The push engine's model side: change requests, snapshots, scopes.
//!
//! * [`PushRequest`]: merged change keys.
//! * [`PushContext`]: the immutable snapshot generators read, published with `ArcSwap`.
//! * [`Scope`]: what decides a proxy's output, interned as [`ScopeId`].
//! * [`Debouncer`]: turns a stream of change sets into push requests.

pub mod context;
pub mod debounce;
pub mod engine;
pub mod history;
pub mod index;
pub mod queue;
pub mod request;
pub mod scope;

pub use context::{PushChanges, PushContext};
pub use debounce::{DebounceConfig, Debouncer, PushSlot};
pub use engine::PushEngine;
pub use queue::{ConnId, PendingPush, PushQueue};
pub use request::PushRequest;
pub use scope::{InboundId, InboundKey, Scope, ScopeId, ScopeInterner, ScopeKey};
