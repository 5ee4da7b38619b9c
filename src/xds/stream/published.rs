//! `Published`: what a stream answers from — the published snapshot, the
//! resources generated for it, and the response bodies assembled from them.
//!
//! A stream loads the snapshot once per request or push and hands this
//! view to its protocol state, which asks it for resources and bodies.
//! Every lookup goes to a cache shared by all streams, so what one stream
//! generates or assembles, the next one of its scope reuses.

use std::sync::Arc;

use bytes::Bytes;

use super::bodies::{BodyCache, Key};
use crate::generate::cache::ScopedCache;
use crate::generate::grpc::SERVER_LISTENER_PREFIX;
use crate::model::XdsClient;
use crate::push::scope::EndpointView;
use crate::push::{InboundId, InboundKey, PushContext, Scope};
use crate::resource::{EncodedResource, ResourceSet, TypeUrl};

/// One snapshot's view for a stream's request or push.
#[derive(Debug, Clone, Copy)]
pub struct Published<'a> {
    /// The snapshot.
    pub ctx: &'a PushContext,
    /// Resources generated from it.
    pub cache: &'a ScopedCache,
    /// Response bodies assembled from them.
    pub bodies: &'a BodyCache,
}

impl Published<'_> {
    /// The CDS, LDS or RDS set of `scope`.
    pub fn scoped(&self, scope: &Scope, type_url: TypeUrl) -> Arc<ResourceSet> {
        self.cache.scoped(self.ctx, scope, type_url)
    }

    /// The CDS or LDS set of a proxy in `scope` with workload shape `inbound`.
    pub fn proxy_set(
        &self,
        scope: &Scope,
        inbound: &(InboundId, Arc<InboundKey>),
        type_url: TypeUrl,
    ) -> Arc<ResourceSet> {
        self.cache.proxy_set(self.ctx, scope, inbound, type_url)
    }

    /// The CDS or LDS resources a proxy in `scope` with workload shape
    /// `inbound` asked for by `names`: those of its set, and for a
    /// proxyless gRPC server the listeners of the addresses it listens on
    /// (built by name, `ScopedCache::grpc_server_listener`).
    pub fn named<'n>(
        &self,
        scope: &Scope,
        inbound: &(InboundId, Arc<InboundKey>),
        type_url: TypeUrl,
        names: impl IntoIterator<Item = &'n str>,
    ) -> Vec<Arc<EncodedResource>> {
        let set = self.proxy_set(scope, inbound, type_url);
        let grpc_server = type_url == TypeUrl::Listener && inbound.1.client == XdsClient::Grpc;
        names
            .into_iter()
            .filter_map(|name| match set.get(name) {
                Some(r) => Some(r.clone()),
                None if grpc_server && name.starts_with(SERVER_LISTENER_PREFIX) => {
                    self.cache.grpc_server_listener(inbound, name)
                }
                None => None,
            })
            .collect()
    }

    /// The ClusterLoadAssignment of a cluster as a proxy with endpoint
    /// `view` gets it; `None` when no such cluster exists.
    pub fn endpoint(&self, cluster: &str, view: Option<&EndpointView>) -> Option<Arc<EncodedResource>> {
        self.cache.endpoint(self.ctx, cluster, view)
    }

    /// The shared response body `key` names, assembled by `build` if no
    /// stream has yet (see [`BodyCache::get_or_assemble`]).
    pub fn body(&self, key: Key, build: impl FnOnce() -> Bytes) -> Bytes {
        self.bodies.get_or_assemble(self.ctx.version, key, build)
    }
}
