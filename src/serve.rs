//! `meshpush serve`: wires the sources, the push engine, ADS and admin together.
//!
//! Start-up order keeps `/ready` honest: the directory is loaded and the
//! first snapshot published before the ready flag is set; only then does
//! the watcher feed the debouncer. The xDS listener is bound before the
//! load, so Envoys that connect early wait on an empty but valid snapshot
//! and get pushed the real one as soon as it exists.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::mpsc;

use crate::model::ConfigStore;
use crate::push::{DebounceConfig, Debouncer, PushEngine, PushRequest, PushSlot};
use crate::source::file::FileSource;
use crate::xds::AdsService;

/// Options of `meshpush serve`.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Directory of YAML.
    pub config_dir: PathBuf,
    /// ADS address.
    pub xds_addr: SocketAddr,
    /// Admin address.
    pub admin_addr: SocketAddr,
    /// Debounce timing.
    pub debounce: DebounceConfig,
}

/// Change sets buffered between the sources and the debouncer.
const CHANGE_QUEUE: usize = 1024;

/// Runs the server until Ctrl-C or SIGTERM.
pub async fn run(options: ServeOptions) -> anyhow::Result<()> {
    let engine = PushEngine::new();
    let store = Arc::new(ConfigStore::new());

    let xds_listener = tokio::net::TcpListener::bind(options.xds_addr)
        .await
        .with_context(|| format!("binding the xDS address {}", options.xds_addr))?;
    let admin_listener = tokio::net::TcpListener::bind(options.admin_addr)
        .await
        .with_context(|| format!("binding the admin address {}", options.admin_addr))?;

    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let shutdown = move || {
        let mut rx = shutdown_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };

    let ads = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .max_concurrent_streams(Some(u32::MAX))
        .add_service(AdsService::new(engine.clone()))
        .serve_with_incoming_shutdown(tokio_stream::wrappers::TcpListenerStream::new(xds_listener), shutdown());
    let ads = tokio::spawn(ads);
    let admin = tokio::spawn({
        let engine = engine.clone();
        let shutdown = shutdown();
        async move { axum::serve(admin_listener, crate::admin::router(engine)).with_graceful_shutdown(shutdown).await }
    });
    tracing::info!(xds = %options.xds_addr, admin = %options.admin_addr, "listening");

    // Initial load: one batch, one snapshot, then ready.
    let dir = options.config_dir.clone();
    let load_store = store.clone();
    let (source, report) = tokio::task::spawn_blocking(move || FileSource::load(&dir, &load_store))
        .await
        .context("loading the config directory")??;
    let version = engine.push(PushRequest::new(report.changes)).await;
    engine.set_ready();
    let ctx = engine.ctx.load();
    tracing::info!(
        version,
        services = ctx.services.len(),
        endpoints = ctx.endpoints.endpoint_count(),
        "first snapshot published; ready"
    );

    let slot = Arc::new(PushSlot::default());
    let (changes_tx, changes_rx) = mpsc::channel(CHANGE_QUEUE);
    let watcher = source.watch(store.clone(), changes_tx).context("watching the config directory")?;
    let debouncer = tokio::spawn(Debouncer::new(options.debounce, slot.clone()).run(changes_rx));
    let pusher = tokio::spawn(engine.clone().run(slot));

    wait_for_signal().await;
    tracing::info!("shutting down");
    let _ = shutdown_tx.send(true);
    watcher.abort();
    debouncer.abort();
    pusher.abort();
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        let _ = ads.await;
        let _ = admin.await;
    })
    .await;
    Ok(())
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
