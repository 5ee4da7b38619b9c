//! Where the harness makes its changes: through meshpush's registry API,
//! or as edits of the config directory of the meshpush it started (a file
//! written in place, as `kubectl cp` or a shell redirect writes it: opened,
//! truncated, written, closed), so that the file watcher's path is the one
//! measured.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use crate::mesh::Shape;
use crate::registry::{ChangesVia, Registries};
use crate::server;

/// One change to the mesh.
#[derive(Debug, Clone)]
pub(super) enum Edit {
    /// `svc-<service>` of `ns-<namespace>` now has these endpoints.
    Endpoints { namespace: u32, service: u32, addresses: Vec<Ipv4Addr> },
    /// `svc-0`'s route in `ns-<namespace>` now matches `prefix`.
    Route { namespace: u32, prefix: String },
}

/// Where changes go.
#[derive(Debug, Clone)]
pub(super) enum Sink {
    /// Each change is one `Apply` of the registry API (to every replica).
    Registry(Registries),
    /// Each change rewrites one file of this config directory.
    Files(PathBuf),
}

impl Sink {
    /// The sink `via` names: the registry, or the config directory of the
    /// server the harness started.
    pub(super) fn new(via: ChangesVia, registry: Option<&Registries>, config: Option<PathBuf>) -> Option<Sink> {
        match via {
            ChangesVia::Registry => registry.cloned().map(Sink::Registry),
            ChangesVia::File => config.map(Sink::Files),
        }
    }

    /// Makes the change; returns once the registry answered or the file is closed.
    pub(super) async fn make(&mut self, shape: &Shape, edit: &Edit) -> anyhow::Result<()> {
        match self {
            Sink::Registry(registry) => {
                let document = match edit {
                    Edit::Endpoints { namespace, service, addresses } => {
                        shape.slice_document(*namespace, *service, addresses)
                    }
                    Edit::Route { namespace, prefix } => shape.virtual_service_document(*namespace, 0, prefix),
                };
                registry.apply(vec![document]).await.map(|_| ())
            }
            Sink::Files(config) => {
                let (name, text) = edit.file(shape);
                server::write_file(config, &name, &text)
            }
        }
    }
}

impl Edit {
    /// The file of the harness's layout ([`Shape::files`]) that holds the change, as it reads now.
    pub(super) fn file(&self, shape: &Shape) -> (String, String) {
        match self {
            Edit::Endpoints { namespace, service, addresses } => shape.service_file(*namespace, *service, addresses),
            Edit::Route { namespace, prefix } => shape.namespace_file(*namespace, prefix),
        }
    }
}
