//! `Placement`: which scope and workload shape a stream is generated for.
//!
//! Both protocols' stream states keep one. The keys are recomputed only when
//! a push says scope inputs changed (Services, Sidecars, Gateways); between
//! such pushes a new snapshot costs one memo lookup by the interned id, so a
//! push to ten thousand streams does not recompute ten thousand keys.

use std::sync::Arc;

use crate::model::Proxy;
use crate::push::scope::{EndpointView, endpoint_view};
use crate::push::{InboundId, InboundKey, PendingPush, PushContext, Scope, ScopeId, ScopeKey};

/// A stream's scope and inbound key, kept current with the snapshot.
#[derive(Debug, Default)]
pub struct Placement {
    key: Option<(ScopeId, Arc<ScopeKey>)>,
    inbound: Option<(InboundId, Arc<InboundKey>)>,
    scope: Option<Arc<Scope>>,
    version: u64,
    /// The endpoint view, recomputed when the DestinationRules, the
    /// workloads (a Pod's locality) or the networks change.
    view: Option<Arc<EndpointView>>,
    /// The DestinationRule, workload and network indexes `view` was computed from.
    view_inputs: (usize, usize, usize),
}

impl Placement {
    /// Brings the placement to `ctx` for `proxy`; `rekey` recomputes the keys.
    pub fn refresh(&mut self, ctx: &PushContext, proxy: &Proxy, rekey: bool) -> Arc<Scope> {
        if rekey || self.key.is_none() || self.inbound.is_none() {
            self.key = Some(ctx.scope_key_for(proxy));
            self.inbound = Some(ctx.inbound_for(proxy));
            self.scope = None;
        }
        if self.version != ctx.version || self.scope.is_none() {
            let (id, key) = self.key.as_ref().expect("set above");
            self.scope = Some(ctx.scope_of(*id, key));
            self.version = ctx.version;
            let inputs = (
                Arc::as_ptr(&ctx.destination_rules) as usize,
                Arc::as_ptr(&ctx.workloads) as usize,
                Arc::as_ptr(&ctx.networks) as usize,
            );
            if inputs != self.view_inputs {
                self.view = endpoint_view(ctx, proxy);
                self.view_inputs = inputs;
            }
        }
        self.scope.clone().expect("set above")
    }

    /// Brings the placement to `ctx` for a push: the keys are recomputed
    /// when the push says scope inputs changed. Returns whether the scope
    /// moved (the stream then regenerates every type).
    pub fn refresh_for_push(&mut self, ctx: &PushContext, proxy: &Proxy, push: &PendingPush) -> bool {
        let before = self.scope.as_ref().map(|s| s.id);
        let scope = self.refresh(ctx, proxy, push.rescope);
        before != Some(scope.id)
    }

    /// The scope last generated for.
    pub fn scope(&self) -> Option<&Arc<Scope>> {
        self.scope.as_ref()
    }

    /// The endpoint view last computed (`None`: every proxy shares every assignment).
    pub fn view(&self) -> Option<&Arc<EndpointView>> {
        self.view.as_ref()
    }

    /// The workload shape last generated for.
    pub fn inbound(&self) -> Option<&(InboundId, Arc<InboundKey>)> {
        self.inbound.as_ref()
    }
}
