//! The fetcher against a SPIFFE bundle server on loopback, over HTTPS with
//! a CA of the test's own that the fetcher's client trusts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use super::*;
use crate::config::mesh::MeshConfig;
use crate::config::mesh::trust_anchors::TrustAnchors;
use crate::testing::certs;
use crate::testing::wait::wait_until_async;

/// What the bundle server answers: a bundle, or 500 when `None`.
type Answer = Arc<Mutex<Option<String>>>;

/// A bundle server on 127.0.0.1 answering `answer` at `/bundle`: its URL,
/// and the roots a client needs to trust it.
async fn bundle_server(answer: Answer) -> (String, rustls::RootCertStore) {
    let (ca_pem, ca) = certs::ca("bundle server CA");
    let (cert, key) = certs::leaf(&ca, &["127.0.0.1"]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}/bundle", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/bundle",
        axum::routing::get(move || {
            let answer = answer.lock().clone();
            async move {
                match answer {
                    Some(bundle) => (http::StatusCode::OK, bundle),
                    None => (http::StatusCode::INTERNAL_SERVER_ERROR, String::new()),
                }
            }
        }),
    );
    crate::testing::https::serve(listener, &cert, &key, app);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap()).unwrap();
    (url, roots)
}

/// A fresh root CA's certificate, DER.
fn root(name: &str) -> Vec<u8> {
    let (pem, _) = certs::ca(name);
    der(&pem)
}

fn der(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap().to_vec()
}

/// A SPIFFE bundle holding `roots` as x509-svid keys, and a JWT key.
fn bundle(roots: &[&[u8]]) -> String {
    use base64::Engine as _;
    let mut keys: Vec<serde_json::Value> = roots
        .iter()
        .map(|r| {
            let x5c = base64::engine::general_purpose::STANDARD.encode(r);
            serde_json::json!({"use": "x509-svid", "kty": "EC", "crv": "P-256", "x5c": [x5c]})
        })
        .collect();
    keys.push(serde_json::json!({"use": "jwt-svid", "kty": "EC", "kid": "jwt-1", "crv": "P-256"}));
    serde_json::json!({"spiffe_sequence": 1, "keys": keys}).to_string()
}

/// The one bundle of the store.
fn stored(store: &ConfigStore) -> Option<FetchedTrustBundle> {
    let snapshot = store.snapshot();
    let mut all: Vec<FetchedTrustBundle> = snapshot
        .kind(ConfigKind::FetchedTrustBundle)
        .values()
        .filter_map(|s| match &*s.object {
            ConfigObject::FetchedTrustBundle(f) => Some(f.as_ref().clone()),
            _ => None,
        })
        .collect();
    assert!(all.len() <= 1, "one bundle per URL: {all:?}");
    all.pop()
}

/// The roots of the store's bundle, DER.
fn stored_roots(store: &ConfigStore) -> Vec<Vec<u8>> {
    stored(store).map(|b| b.roots.iter().map(|r| der(r)).collect()).unwrap_or_default()
}

/// A fetcher of `store` whose client trusts `roots`.
fn fetcher(
    store: &Arc<ConfigStore>,
    engine: Arc<PushEngine>,
    refresh: Duration,
    roots: rustls::RootCertStore,
) -> (SpiffeBundleFetcher, mpsc::Receiver<ChangeSet>) {
    let (tx, rx) = mpsc::channel(64);
    let mut fetcher = SpiffeBundleFetcher::new(store.clone(), engine, tx, refresh);
    fetcher.client = fetch::client_trusting(roots);
    (fetcher, rx)
}

#[tokio::test]
async fn a_bundle_is_fetched_again_when_due_kept_on_failure_and_dropped_when_unlisted() {
    let (b, c) = (root("root B"), root("root C"));
    let answer: Answer = Arc::new(Mutex::new(Some(bundle(&[&b]))));
    let (url, roots) = bundle_server(answer.clone()).await;
    let store = Arc::new(ConfigStore::new());
    let (mut fetcher, mut rx) = fetcher(&store, PushEngine::new(), DEFAULT_REFRESH, roots);
    let listed: [Arc<str>; 1] = [url.as_str().into()];

    let start = Instant::now();
    assert!(fetcher.reconcile(&listed, start).await);
    assert!(rx.try_recv().is_ok(), "a new bundle is a change");
    let first = stored(&store).expect("the bundle is in the store");
    assert_eq!((first.url.as_str(), first.error.as_deref()), (url.as_str(), None));
    assert!(first.fetched.is_some());
    assert_eq!(stored_roots(&store), vec![b.clone()], "the x509-svid root, not the JWT key");

    // Not due yet: the server's new root is not fetched.
    *answer.lock() = Some(bundle(&[&c]));
    assert!(fetcher.reconcile(&listed, start + Duration::from_secs(1)).await);
    assert!(rx.try_recv().is_err(), "nothing fetched, nothing changed");
    assert_eq!(stored_roots(&store), vec![b.clone()]);

    // Due: the new root replaces the old one.
    let due = start + DEFAULT_REFRESH;
    assert!(fetcher.reconcile(&listed, due).await);
    assert!(rx.try_recv().is_ok());
    assert_eq!(stored_roots(&store), vec![c.clone()]);

    // The same roots again: the object is left alone.
    assert!(fetcher.reconcile(&listed, due + DEFAULT_REFRESH).await);
    assert!(rx.try_recv().is_err(), "an unchanged bundle writes nothing");

    // Failing: the last good roots stay, the failure is recorded, a retry is soon.
    *answer.lock() = None;
    let failing = due + 2 * DEFAULT_REFRESH;
    assert!(fetcher.reconcile(&listed, failing).await);
    let failed = stored(&store).unwrap();
    assert!(failed.error.as_deref().is_some_and(|e| e.contains("500")), "{:?}", failed.error);
    assert_eq!(stored_roots(&store), vec![c.clone()], "the last good roots are kept");
    let (retry, _) = fetcher.due[&listed[0]];
    assert!(retry <= failing + fetch::RETRY_FIRST, "a failed fetch is retried after {:?}", fetch::RETRY_FIRST);

    // Not a bundle (a root that is not a CA): a failure too.
    let (leaf, _) = certs::leaf(&certs::ca("other").1, &["leaf.example"]);
    *answer.lock() = Some(bundle(&[&der(&leaf)]));
    assert!(fetcher.reconcile(&listed, retry).await);
    let refused = stored(&store).unwrap();
    assert!(refused.error.as_deref().is_some_and(|e| e.contains("not a CA")), "{:?}", refused.error);
    assert_eq!(stored_roots(&store), [c], "the last good roots are kept");

    // No longer listed: the bundle goes.
    assert!(fetcher.reconcile(&[], retry).await);
    assert!(rx.try_recv().is_ok());
    assert_eq!(stored(&store), None);
}

#[tokio::test]
async fn a_url_the_served_mesh_config_lists_is_followed_through_a_root_swap_and_a_failure() {
    let (b, c) = (root("root B"), root("root C"));
    let answer: Answer = Arc::new(Mutex::new(Some(bundle(&[&b]))));
    let (url, roots) = bundle_server(answer.clone()).await;
    let anchors =
        TrustAnchors { multi_root: true, bundle_urls: [Arc::from(url.as_str())].into(), ..Default::default() };
    let engine = PushEngine::for_mesh(MeshConfig { trust_anchors: anchors, ..Default::default() });
    let store = Arc::new(ConfigStore::new());
    let (fetcher, _rx) = fetcher(&store, engine, MIN_REFRESH, roots);
    let task = tokio::spawn(fetcher.run());
    let deadline = || tokio::time::Instant::now() + Duration::from_secs(10);

    wait_until_async(deadline(), "root B to be fetched", || async { stored_roots(&store) == [b.clone()] }).await;
    *answer.lock() = Some(bundle(&[&c]));
    wait_until_async(deadline(), "root C to replace it after a refresh", || async {
        stored_roots(&store) == [c.clone()]
    })
    .await;
    *answer.lock() = None;
    wait_until_async(deadline(), "the failure to be recorded", || async {
        stored(&store).is_some_and(|s| s.error.is_some())
    })
    .await;
    assert_eq!(stored_roots(&store), [c], "a failing server leaves the last good roots");
    task.abort();
}
