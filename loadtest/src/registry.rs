//! A client of meshpush's registry API (`proto/meshpush/v1/registry.proto`),
//! through which the harness loads meshes and makes changes, and
//! [`ChangesVia`]: whether changes go through it or as file edits.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tonic::transport::{Channel, Endpoint};

/// How the harness makes its changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangesVia {
    /// meshpush's registry API.
    Registry,
    /// Edits of the config directory of the meshpush the harness started.
    File,
}

/// The code generated from the registry proto (client side).
#[allow(missing_docs, clippy::all, clippy::pedantic, rust_2018_idioms)]
pub mod proto {
    tonic::include_proto!("meshpush.v1");
}

use proto::registry_client::RegistryClient;
use proto::{ApplyRequest, GetVersionRequest, Object, VersionResponse, WaitForRevisionRequest};

/// Largest message either way: a whole mesh may go in one batch.
const MAX_MESSAGE: usize = 256 * 1024 * 1024;

/// A connected registry client.
#[derive(Debug, Clone)]
pub struct Registry {
    client: RegistryClient<Channel>,
}

impl Registry {
    /// Connects, retrying until `deadline` (the server may still be starting);
    /// `alive` is asked between attempts and ends the wait with its error.
    pub async fn connect(
        addr: SocketAddr,
        deadline: Instant,
        mut alive: impl FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<Registry> {
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))?.tcp_nodelay(true);
        loop {
            alive()?;
            match endpoint.connect().await {
                Ok(channel) => {
                    let client = RegistryClient::new(channel)
                        .max_decoding_message_size(MAX_MESSAGE)
                        .max_encoding_message_size(MAX_MESSAGE);
                    return Ok(Registry { client });
                }
                Err(e) if Instant::now() >= deadline => {
                    return Err(e).with_context(|| format!("connecting to the registry API at {addr}"));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Waits until the server reports ready (its config directory loaded).
    pub async fn wait_ready(
        &mut self,
        deadline: Instant,
        mut alive: impl FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<VersionResponse> {
        loop {
            alive()?;
            let version = self.client.get_version(GetVersionRequest {}).await.context("registry GetVersion")?;
            let version = version.into_inner();
            if version.ready {
                return Ok(version);
            }
            if Instant::now() >= deadline {
                bail!("the server did not report ready in time");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Applies documents in one batch; returns the store revision.
    pub async fn apply(&mut self, documents: Vec<String>) -> anyhow::Result<u64> {
        let puts = documents.into_iter().map(|document| Object { document }).collect();
        let response = self.client.apply(ApplyRequest { puts, deletes: Vec::new() }).await;
        match response {
            Ok(response) => Ok(response.into_inner().revision),
            Err(status) => bail!("registry Apply refused ({:?}): {}", status.code(), status.message()),
        }
    }

    /// Waits until the server publishes store revision `revision`.
    pub async fn wait_for_revision(&mut self, revision: u64, timeout: Duration) -> anyhow::Result<VersionResponse> {
        let request = WaitForRevisionRequest { revision, timeout_ms: timeout.as_millis().min(60_000) as u32 };
        let response = self.client.wait_for_revision(request).await.context("registry WaitForRevision")?;
        Ok(response.into_inner())
    }
}

/// The registry API of every replica under test. Each replica's registry
/// store is its own, so a change is applied to each, at once.
#[derive(Debug, Clone)]
pub struct Registries(Vec<Registry>);

impl Registries {
    /// The registries, in the order of the replicas.
    pub fn new(registries: Vec<Registry>) -> Registries {
        Registries(registries)
    }

    /// Applies documents in one batch to every replica.
    pub async fn apply(&mut self, documents: Vec<String>) -> anyhow::Result<()> {
        let applies = self.0.iter_mut().map(|registry| registry.apply(documents.clone()));
        futures::future::try_join_all(applies).await.map(|_| ())
    }
}
