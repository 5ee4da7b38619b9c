//! An in-process meshpush ADS server for protocol tests: a `PushEngine` over
//! a `ConfigStore`, served by the real `AdsService` on a free loopback port,
//! and a way to change the store and push at once (no debounce).

use std::net::SocketAddr;
use std::sync::Arc;

use meshpush::config::parse::parse_documents;
use meshpush::config::{ConfigKey, ConfigObject, SourceRef};
use meshpush::engine::PushEngine;
use meshpush::model::ConfigStore;
use meshpush::model::store::Write;
use meshpush::push::PushRequest;
use meshpush::serve::connections::{self, ConnectionPolicy, XdsListener};
use meshpush::source::file::FileSource;
use meshpush::xds::AdsService;
use meshpush::xds::server::StreamLimits;

/// A running server; stopped on drop.
pub struct AdsServer {
    /// The engine behind it.
    pub engine: Arc<PushEngine>,
    /// The service it serves: each stream's status, the shared bodies.
    pub ads: AdsService,
    /// The store the engine reads.
    pub store: Arc<ConfigStore>,
    /// Where it listens.
    pub addr: SocketAddr,
    server: tokio::task::JoinHandle<()>,
    _stop: tokio::sync::watch::Sender<bool>,
}

impl AdsServer {
    /// A server over the bookinfo example.
    pub async fn bookinfo() -> AdsServer {
        AdsServer::bookinfo_with(StreamLimits::default()).await
    }

    /// A server over the bookinfo example whose streams live within `limits`.
    pub async fn bookinfo_with(limits: StreamLimits) -> AdsServer {
        AdsServer::bookinfo_served(limits, ConnectionPolicy::default()).await
    }

    /// A server over the bookinfo example whose connections follow `policy`.
    pub async fn bookinfo_with_policy(policy: ConnectionPolicy) -> AdsServer {
        AdsServer::bookinfo_served(StreamLimits::default(), policy).await
    }

    async fn bookinfo_served(limits: StreamLimits, policy: ConnectionPolicy) -> AdsServer {
        let store = Arc::new(ConfigStore::new());
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bookinfo");
        let (_source, report) = FileSource::load(&dir, &store).expect("bookinfo loads");
        assert_eq!(report.errors, 0, "bookinfo has no errors");
        AdsServer::serve(store, report.changes, limits, policy).await
    }

    /// A server over `objects`.
    pub async fn with_objects(objects: Vec<ConfigObject>) -> AdsServer {
        let store = Arc::new(ConfigStore::new());
        let source = SourceRef { file: "test".into(), doc: 0 };
        let changes = store.apply(objects.into_iter().map(|o| Write::put(o, source.clone())));
        AdsServer::serve(store, changes, StreamLimits::default(), ConnectionPolicy::default()).await
    }

    /// Serves the engine over `store` as `meshpush serve` does (its
    /// connection handling, with `policy`).
    async fn serve(
        store: Arc<ConfigStore>,
        initial: meshpush::model::ChangeSet,
        limits: StreamLimits,
        policy: ConnectionPolicy,
    ) -> AdsServer {
        let engine = PushEngine::new();
        engine.push(PushRequest::new(initial)).await;
        engine.set_ready();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free loopback port");
        let addr = listener.local_addr().expect("bound");
        let service = AdsService::with_limits(engine.clone(), limits);
        let ads = service.clone();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(connections::serve(
            XdsListener::Tcp(listener),
            tonic::service::Routes::new(service),
            policy,
            engine.metrics().clone(),
            stopped,
            None,
            ads.admission(),
        ));
        AdsServer { engine, ads, store, addr, server, _stop: stop }
    }

    /// The status the admin endpoints show for the only connected stream.
    pub fn only_stream_status(&self) -> meshpush::xds::stream::status::StreamStatus {
        let conns = self.engine.queue().connections();
        assert_eq!(conns.len(), 1, "one stream is connected");
        self.ads.statuses().get(conns[0].id)
    }

    /// Applies YAML documents (as a file edit would) and pushes at once.
    pub async fn apply(&self, yaml: &str) {
        let parsed = parse_documents("test.yaml", yaml);
        assert!(parsed.problems.iter().all(|p| !p.is_error()), "{:?}", parsed.problems);
        let changes = self.store.apply(parsed.objects.into_iter().map(|(o, s)| Write::put(o, s)));
        assert!(!changes.is_empty(), "the edit changed something");
        self.engine.push(PushRequest::new(changes)).await;
    }

    /// Applies store writes and pushes at once.
    pub async fn write(&self, writes: Vec<Write>) {
        let changes = self.store.apply(writes);
        self.engine.push(PushRequest::new(changes)).await;
    }

    /// Deletes objects and pushes at once.
    pub async fn delete(&self, keys: Vec<ConfigKey>) {
        self.write(keys.into_iter().map(Write::Delete).collect()).await;
    }
}

impl Drop for AdsServer {
    fn drop(&mut self) {
        self.server.abort();
    }
}
