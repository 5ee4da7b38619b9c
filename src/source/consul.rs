//! Consul's catalog as a service registry (`serve --consul-address`), as
//! Istio 1.7's Consul registry read it, with blocking queries so that a
//! change arrives as Consul makes it.
//!
//! The loop: a blocking query on `/v1/catalog/services` (`?index=N&wait=5m`,
//! `X-Consul-Index` as the next `N`; an index that goes backwards starts
//! again from 0, as Consul's documentation says). Whenever the index moves,
//! every service listed is read from `/v1/catalog/service/NAME` (16 at a
//! time) and turned into its ServiceEntry (`config::consul`), which is
//! parsed and validated as a file's would be and written as
//! `consul:ADDRESS/NAME`; a service no longer listed, or without instances,
//! is deleted. The token (`--consul-token-file`) is read for each request,
//! so a rotated file is used at once, and sent as `X-Consul-Token`.
//!
//! When Consul goes away (an error, a timeout, an answer other than 200)
//! the last good catalog stays served; the loop retries after 0.5 s,
//! doubling to a minute, and the state is on `/debug/configz` (`consul`).
//! A service whose ServiceEntry does not validate keeps its last good
//! version, reported the same way.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::{BodyExt as _, Empty, Limited};
use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::mpsc;

use super::fetch::{self, HttpClient};
use crate::config::consul::{self, CatalogService};
use crate::config::parse::parse_json;
use crate::config::{ConfigKey, ConfigKind};
use crate::model::store::Write;
use crate::model::{ChangeSet, ConfigStore};

/// How long a blocking query waits for a change.
const WAIT: Duration = Duration::from_secs(300);
/// The most of one answer read (a large catalog's service list).
const MAX_BODY: usize = 64 << 20;
/// Services read at once after a change.
const PARALLEL: usize = 16;
/// The first wait after a failure, and the longest.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(60));
/// The shortest time between two queries (Consul asks clients to limit
/// their rate; a change still arrives within it).
const MIN_INTERVAL: Duration = Duration::from_millis(50);

/// Where Consul is, and how to authenticate.
#[derive(Debug, Clone)]
pub struct ConsulOptions {
    /// `http://HOST:PORT` or `https://HOST:PORT` (Consul's HTTP API).
    pub address: String,
    /// A file holding the ACL token, if any.
    pub token_file: Option<std::path::PathBuf>,
}

/// The catalog's state, for `/debug/configz` and readiness. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ConsulStatus(Arc<Mutex<ConsulReport>>, Arc<tokio::sync::Notify>);

/// What `/debug/configz` shows of Consul.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsulReport {
    /// The address read.
    pub address: String,
    /// `connecting`, `synced` or `unreachable`.
    pub state: &'static str,
    /// Why the last query failed, while it does.
    pub error: Option<String>,
    /// The catalog's last index.
    pub index: u64,
    /// The services served.
    pub services: usize,
    /// Whether one whole catalog was ever read.
    pub synced_once: bool,
    /// What of the catalog is not used as it is, by service.
    pub problems: BTreeMap<String, Vec<String>>,
}

impl ConsulStatus {
    /// The report now.
    pub fn report(&self) -> ConsulReport {
        self.0.lock().clone()
    }

    /// Waits until one whole catalog was read.
    pub async fn wait_synced(&self) {
        loop {
            let notified = self.1.notified();
            if self.0.lock().synced_once {
                return;
            }
            notified.await;
        }
    }

    fn update(&self, f: impl FnOnce(&mut ConsulReport)) {
        f(&mut self.0.lock());
        self.1.notify_waiters();
    }
}

/// Reads Consul's catalog into the store.
pub struct ConsulSource {
    options: ConsulOptions,
    client: HttpClient,
    store: Arc<ConfigStore>,
    changes: mpsc::Sender<ChangeSet>,
    status: ConsulStatus,
    /// The keys written, by service name.
    held: BTreeMap<String, ConfigKey>,
}

impl std::fmt::Debug for ConsulSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsulSource").field("address", &self.options.address).finish()
    }
}

impl ConsulSource {
    /// A source reading `options`' Consul into `store`, sending on `changes`.
    pub fn new(options: ConsulOptions, store: Arc<ConfigStore>, changes: mpsc::Sender<ChangeSet>) -> ConsulSource {
        let status = ConsulStatus::default();
        status.update(|r| {
            r.address = options.address.clone();
            r.state = "connecting";
        });
        ConsulSource { options, client: fetch::client(), store, changes, status, held: BTreeMap::new() }
    }

    /// The catalog's state.
    pub fn status(&self) -> ConsulStatus {
        self.status.clone()
    }

    /// Follows the catalog until the changes channel closes.
    pub async fn run(mut self) {
        let mut index = 0u64;
        let mut wait = BACKOFF.0;
        loop {
            let started = tokio::time::Instant::now();
            let outcome = self.query_services(index).await;
            match outcome {
                Ok((new_index, listed)) => {
                    wait = BACKOFF.0;
                    // Consul: an index that goes backwards starts again;
                    // one of 0 is never waited on.
                    let next = if new_index < index { 0 } else { new_index.max(1) };
                    let moved = new_index != index || !self.status.report().synced_once;
                    index = next;
                    if moved {
                        match self.read_services(&listed).await {
                            Ok(services) => {
                                if !self.apply(services, new_index).await {
                                    return;
                                }
                            }
                            Err(e) => {
                                self.failed(e);
                                index = 0;
                                tokio::time::sleep(wait).await;
                                wait = (wait * 2).min(BACKOFF.1);
                                continue;
                            }
                        }
                    }
                    tokio::time::sleep_until(started + MIN_INTERVAL).await;
                }
                Err(e) => {
                    self.failed(e);
                    // The server answering next may be another, its index
                    // lower: start again from a read that does not block.
                    index = 0;
                    let jitter = wait.mul_f64(fastrand::f64() * 0.5);
                    tokio::time::sleep(wait + jitter).await;
                    wait = (wait * 2).min(BACKOFF.1);
                }
            }
            if self.changes.is_closed() {
                return;
            }
        }
    }

    fn failed(&self, error: String) {
        let address = self.options.address.clone();
        self.status.update(|r| {
            if r.error.as_deref() != Some(&error) {
                tracing::warn!(consul = %address, "Consul catalog: {error}; the last good catalog stays served");
            }
            r.state = "unreachable";
            r.error = Some(error);
        });
    }

    /// A blocking query of the service list at `index`.
    async fn query_services(&self, index: u64) -> Result<(u64, BTreeSet<String>), String> {
        let path = if index == 0 {
            "/v1/catalog/services".to_string()
        } else {
            format!("/v1/catalog/services?index={index}&wait={}s", WAIT.as_secs())
        };
        let (body, new_index) = self.get(&path, WAIT + WAIT / 16 + Duration::from_secs(10)).await?;
        let listed: BTreeMap<String, serde_json::Value> =
            serde_json::from_slice(&body).map_err(|e| format!("/v1/catalog/services: not a map of services: {e}"))?;
        Ok((new_index, listed.into_keys().collect()))
    }

    /// Every listed service's instances.
    async fn read_services(&self, listed: &BTreeSet<String>) -> Result<BTreeMap<String, Vec<CatalogService>>, String> {
        let reads = futures::stream::iter(listed.iter().cloned())
            .map(|name| async move {
                let path = format!("/v1/catalog/service/{}", encode_segment(&name));
                let (body, _) = self.get(&path, Duration::from_secs(30)).await?;
                let instances: Vec<CatalogService> =
                    serde_json::from_slice(&body).map_err(|e| format!("{path}: not a list of instances: {e}"))?;
                Ok::<_, String>((name, instances))
            })
            .buffer_unordered(PARALLEL);
        reads.collect::<Vec<_>>().await.into_iter().collect()
    }

    /// Writes the ServiceEntries of `services`; false when the server is
    /// shutting down.
    async fn apply(&mut self, services: BTreeMap<String, Vec<CatalogService>>, index: u64) -> bool {
        let mut writes = Vec::new();
        let mut problems = BTreeMap::new();
        let mut held = BTreeMap::new();
        for (name, instances) in &services {
            let source = format!("consul:{}/{name}", self.options.address);
            let (document, mut found) = consul::service_entry(name, instances);
            if let Some(document) = document {
                let parsed = parse_json(&source, &document);
                found.extend(parsed.problems.iter().map(|p| format!("{}: {p}", p.severity)));
                let key = ConfigKey::new(ConfigKind::ServiceEntry, consul::NAMESPACE, &format!("consul-{name}"));
                // Refused, there is none: the last good version stays.
                if let Some((object, source)) = parsed.objects.into_iter().next() {
                    writes.push(Write::put(object, source));
                }
                if self.held.contains_key(name) || !found.iter().any(|p| p.starts_with("error")) {
                    held.insert(name.clone(), key);
                }
            }
            if !found.is_empty() {
                problems.insert(name.clone(), found);
            }
        }
        for (name, key) in &self.held {
            if !held.contains_key(name) {
                let source: Arc<str> = format!("consul:{}/{name}", self.options.address).into();
                writes.push(Write::Withdraw(key.clone(), source));
            }
        }
        let count = held.len();
        self.held = held;
        let Ok(permit) = self.changes.clone().reserve_owned().await else {
            return false;
        };
        self.store.apply_then(writes, move |changes| {
            permit.send(changes);
        });
        let address = self.options.address.clone();
        self.status.update(|r| {
            for (name, list) in &problems {
                if r.problems.get(name) != Some(list) {
                    for p in list {
                        tracing::warn!(consul = %address, service = %crate::text::shown(name), "Consul catalog: {p}");
                    }
                }
            }
            if r.state != "synced" {
                tracing::info!(consul = %address, services = count, index, "Consul catalog read");
            }
            r.state = "synced";
            r.error = None;
            r.index = index;
            r.services = count;
            r.synced_once = true;
            r.problems = problems;
        });
        true
    }

    /// GETs `path` of Consul's API: the body and `X-Consul-Index`.
    async fn get(&self, path: &str, timeout: Duration) -> Result<(Bytes, u64), String> {
        let uri = format!("{}{path}", self.options.address.trim_end_matches('/'));
        let mut request = http::Request::get(&uri);
        if let Some(file) = &self.options.token_file {
            let token =
                std::fs::read_to_string(file).map_err(|e| format!("reading the token file {}: {e}", file.display()))?;
            request = request.header("X-Consul-Token", token.trim());
        }
        let request = request.body(Empty::<Bytes>::new()).map_err(|e| format!("{path}: {e}"))?;
        let response = tokio::time::timeout(timeout, self.client.request(request))
            .await
            .map_err(|_| format!("{path}: no answer within {timeout:?}"))?
            .map_err(|e| format!("{path}: {}", crate::text::error_chain(&e)))?;
        let status = response.status();
        let index =
            response.headers().get("X-Consul-Index").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
        let body = tokio::time::timeout(timeout, Limited::new(response.into_body(), MAX_BODY).collect())
            .await
            .map_err(|_| format!("{path}: the answer did not end within {timeout:?}"))?
            .map_err(|e| format!("{path}: reading the answer: {e} (at most {MAX_BODY} bytes are read)"))?
            .to_bytes();
        if status != http::StatusCode::OK {
            let text = String::from_utf8_lossy(&body);
            return Err(format!("{path}: answered {status}: {}", crate::text::shown(text.trim())));
        }
        let index = index.ok_or_else(|| format!("{path}: the answer has no X-Consul-Index"))?;
        Ok((body, index))
    }
}

/// A service name as one path segment (Consul's names are DNS-like, but a
/// catalog may hold anything).
fn encode_segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;
    use crate::config::ConfigObject;
    use crate::testing::consul::ConsulStandIn;
    use crate::testing::wait::wait_until_async;

    fn key() -> ConfigKey {
        ConfigKey::new(ConfigKind::ServiceEntry, "default", "consul-reviews")
    }

    /// The endpoints of the served `reviews` entry, as `address:labels`.
    fn endpoints(store: &ConfigStore) -> Option<Vec<String>> {
        let snapshot = store.snapshot();
        let ConfigObject::ServiceEntry(se) = &*snapshot.get(&key())?.object else { return None };
        Some(
            se.spec
                .endpoints
                .iter()
                .map(|e| format!("{}:{}", e.address, e.labels.get("version").map_or("", String::as_str)))
                .collect(),
        )
    }

    fn start(
        stand_in: &ConsulStandIn,
        token_file: Option<std::path::PathBuf>,
    ) -> (Arc<ConfigStore>, ConsulStatus, mpsc::Receiver<ChangeSet>, tokio::task::JoinHandle<()>) {
        let store = Arc::new(ConfigStore::new());
        let (tx, rx) = mpsc::channel(1024);
        let source = ConsulSource::new(ConsulOptions { address: stand_in.url(), token_file }, store.clone(), tx);
        let status = source.status();
        (store, status, rx, tokio::spawn(source.run()))
    }

    fn deadline() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    #[tokio::test]
    async fn the_catalog_is_served_and_each_change_follows_at_once() {
        let consul = ConsulStandIn::start(None).await;
        let http = [("protocol", "http")];
        consul.register("n1", "10.0.0.1", "reviews", "r1", "10.1.0.1", 9080, &["version|v1"], &http);
        consul.register("n2", "10.0.0.2", "reviews", "r2", "", 9080, &["version|v2"], &http);
        let (store, status, _rx, task) = start(&consul, None);
        wait_until_async(deadline(), "the first catalog", || {
            let found = endpoints(&store);
            async move { found == Some(vec!["10.1.0.1:v1".into(), "10.0.0.2:v2".into()]) }
        })
        .await;
        assert_eq!(status.report().state, "synced");

        consul.register("n3", "10.0.0.3", "reviews", "r3", "10.1.0.3", 9080, &["version|v2"], &http);
        let registered = Instant::now();
        wait_until_async(deadline(), "the new instance", || {
            let n = endpoints(&store).map_or(0, |e| e.len());
            async move { n == 3 }
        })
        .await;
        // A blocking query answers as the catalog changes: no poll interval.
        assert!(registered.elapsed() < Duration::from_secs(2), "{:?}", registered.elapsed());

        consul.deregister("n1", "r1");
        wait_until_async(deadline(), "the deregistered instance gone", || {
            let found = endpoints(&store);
            async move { found == Some(vec!["10.0.0.2:v2".into(), "10.1.0.3:v2".into()]) }
        })
        .await;
        consul.deregister("n2", "r2");
        consul.deregister("n3", "r3");
        wait_until_async(deadline(), "the service gone with its last instance", || {
            let gone = store.snapshot().get(&key()).is_none();
            async move { gone }
        })
        .await;
        task.abort();
    }

    #[tokio::test]
    async fn consul_going_away_keeps_the_catalog_and_its_return_reconciles() {
        let consul = ConsulStandIn::start(None).await;
        let addr = consul.addr;
        consul.register("n1", "10.0.0.1", "reviews", "r1", "10.1.0.1", 9080, &["version|v1"], &[]);
        consul.register("n1", "10.0.0.1", "ratings", "t1", "10.1.0.9", 9080, &[], &[]);
        let (store, status, _rx, task) = start(&consul, None);
        wait_until_async(deadline(), "the first catalog", || {
            let found = endpoints(&store).is_some();
            async move { found }
        })
        .await;
        drop(consul);
        wait_until_async(deadline(), "Consul reported unreachable", || {
            let state = status.report().state;
            async move { state == "unreachable" }
        })
        .await;
        assert!(endpoints(&store).is_some(), "the last good catalog stays");

        let back = ConsulStandIn::start_on(tokio::net::TcpListener::bind(addr).await.unwrap(), None).await;
        back.register("n1", "10.0.0.1", "reviews", "r9", "10.1.0.9", 9080, &["version|v3"], &[]);
        wait_until_async(Instant::now() + Duration::from_secs(20), "the returned catalog", || {
            let found = endpoints(&store);
            let ratings =
                store.snapshot().get(&ConfigKey::new(ConfigKind::ServiceEntry, "default", "consul-ratings")).is_some();
            async move { found == Some(vec!["10.1.0.9:v3".into()]) && !ratings }
        })
        .await;
        task.abort();
    }

    #[tokio::test]
    async fn the_token_is_sent_and_a_refusal_is_reported() {
        let consul = ConsulStandIn::start(Some("s3cret")).await;
        consul.register("n1", "10.0.0.1", "reviews", "r1", "10.1.0.1", 9080, &[], &[]);
        let dir = tempfile::TempDir::new().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "wrong\n").unwrap();
        let (store, status, _rx, task) = start(&consul, Some(file.clone()));
        wait_until_async(deadline(), "the refusal reported", || {
            let error = status.report().error.unwrap_or_default();
            async move { error.contains("403") && error.contains("ACL not found") }
        })
        .await;
        assert!(!status.report().error.unwrap().contains("wrong"), "the token is never shown");
        std::fs::write(&file, "s3cret\n").unwrap();
        wait_until_async(Instant::now() + Duration::from_secs(20), "the catalog with the right token", || {
            let found = endpoints(&store).is_some();
            async move { found }
        })
        .await;
        task.abort();
    }
}
