//! The MCP client against the stand-in server (`testing::mcp`): what
//! arrives, changes and goes; refusals; a server that goes away and comes
//! back; older type URLs; revisions.

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::config::mesh::config_sources::{ConfigSourceEntry, resolve};
use crate::config::{ConfigKey, ConfigKind, ConfigObject};
use crate::testing::mcp::McpStandIn;
use crate::testing::wait::wait_until_async;

const VS: &str = "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: bookinfo}
spec:
  hosts: [reviews]
  http:
  - route:
    - {destination: {host: reviews, subset: v1}, weight: WEIGHT_V1}
    - {destination: {host: reviews, subset: v2}, weight: WEIGHT_V2}
";

const DR: &str = "apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: bookinfo}
spec:
  host: reviews
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
";

fn vs(v1: u32, v2: u32) -> String {
    VS.replace("WEIGHT_V1", &v1.to_string()).replace("WEIGHT_V2", &v2.to_string())
}

fn server(addr: std::net::SocketAddr) -> McpServer {
    let entry = ConfigSourceEntry { address: format!("xds://{addr}"), ..Default::default() };
    resolve(&[entry]).0.remove(0)
}

struct Fixture {
    store: Arc<ConfigStore>,
    sources: McpSources,
    _changes: mpsc::Receiver<ChangeSet>,
}

fn fixture(revision: Option<&str>) -> Fixture {
    let store = Arc::new(ConfigStore::new());
    let (tx, rx) = mpsc::channel(1024);
    let options = McpOptions {
        transport: TransportContext::default(),
        revision: revision.map(Arc::from),
        node: node("istio-system", "meshpush-0", "10.0.0.9", revision),
    };
    let sources = McpSources::new(store.clone(), PushEngine::new(), tx, options);
    Fixture { store, sources, _changes: rx }
}

fn key(kind: ConfigKind, name: &str) -> ConfigKey {
    ConfigKey::new(kind, "bookinfo", name)
}

/// The weights of the stored VirtualService's first route, and its source.
fn stored_weights(store: &ConfigStore) -> Option<(Vec<Option<i64>>, String)> {
    let snapshot = store.snapshot();
    let stored = snapshot.get(&key(ConfigKind::VirtualService, "reviews"))?;
    let ConfigObject::VirtualService(vs) = &*stored.object else { return None };
    let weights = vs.spec.http[0].route.iter().map(|r| r.weight).collect();
    Some((weights, stored.source.file.to_string()))
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

#[tokio::test]
async fn objects_arrive_change_and_go_with_the_servers_full_state() {
    let stand_in = McpStandIn::start().await;
    stand_in.set_yaml("v1", &format!("{}---\n{DR}", vs(90, 10)));
    let mut f = fixture(None);
    let server = server(stand_in.addr);
    assert!(f.sources.reconcile(std::slice::from_ref(&server)).await);

    let label = format!("mcp:xds://{}/VirtualService/bookinfo/reviews", stand_in.addr);
    wait_until_async(deadline(), "the VirtualService from the server", || {
        let found = stored_weights(&f.store);
        let label = label.clone();
        async move { found == Some((vec![Some(90), Some(10)], label)) }
    })
    .await;
    assert!(f.store.snapshot().get(&key(ConfigKind::DestinationRule, "reviews")).is_some());
    let seen = stand_in.seen();
    assert_eq!(
        seen.nodes[0],
        ("sidecar~10.0.0.9~meshpush-0.istio-system~istio-system.svc.cluster.local".into(), Some("api".into()))
    );
    for url in [
        "networking.istio.io/v1/VirtualService",
        "networking.istio.io/v1alpha3/VirtualService",
        "security.istio.io/v1beta1/AuthorizationPolicy",
    ] {
        assert!(seen.subscribed.iter().any(|s| s == url), "{url} not subscribed: {:?}", seen.subscribed);
    }

    // A weight change, and the DestinationRule dropped from the next state.
    stand_in.set_yaml("v1", &vs(10, 90));
    wait_until_async(deadline(), "the new weights and the rule withdrawn", || {
        let weights = stored_weights(&f.store).map(|(w, _)| w);
        let rule = f.store.snapshot().get(&key(ConfigKind::DestinationRule, "reviews")).is_some();
        async move { weights == Some(vec![Some(10), Some(90)]) && !rule }
    })
    .await;
    // Every type URL's first state and the one after the change, each ACKed.
    let subscribed = stand_in.seen().subscribed.len();
    assert_eq!(subscribed, crate::istio_api::KINDS.iter().flat_map(|k| k.type_urls()).count());
    wait_until_async(deadline(), "ACKs of every type", || {
        let acks = stand_in.seen().acks.len();
        async move { acks >= 2 * subscribed }
    })
    .await;
    assert!(stand_in.seen().nacks.is_empty());
    let report = f.sources.status().reports()[&server.address].clone();
    assert_eq!((report.state, report.synced), ("connected", true));
    assert_eq!(report.objects["networking.istio.io/v1/VirtualService"], 1);

    // No longer listed: its objects are withdrawn.
    assert!(f.sources.reconcile(&[]).await);
    assert!(f.store.snapshot().get(&key(ConfigKind::VirtualService, "reviews")).is_none());
    assert!(f.sources.status().reports().is_empty());
}

#[tokio::test]
async fn a_refused_resource_keeps_its_last_good_version_and_the_rest_applies() {
    let stand_in = McpStandIn::start().await;
    stand_in.set_yaml("v1", &vs(90, 10));
    let mut f = fixture(None);
    let server = server(stand_in.addr);
    f.sources.reconcile(std::slice::from_ref(&server)).await;
    wait_until_async(deadline(), "the first version", || {
        let found = stored_weights(&f.store).is_some();
        async move { found }
    })
    .await;

    // The VirtualService's body is now garbage, and a DestinationRule is new.
    stand_in.set_yaml("v1", DR);
    let good_vs = {
        let snapshot = f.store.snapshot();
        let stored = snapshot.get(&key(ConfigKind::VirtualService, "reviews")).unwrap();
        crate::config::mcp::resource(&stored.object, "1").unwrap()
    };
    stand_in.edit(|state| {
        let mut broken = good_vs.clone();
        broken.body.as_mut().unwrap().value = vec![0x0a, 0xff];
        state.insert("networking.istio.io/v1/VirtualService".into(), vec![broken]);
    });
    wait_until_async(deadline(), "the DestinationRule applied beside the refusal", || {
        let rule = f.store.snapshot().get(&key(ConfigKind::DestinationRule, "reviews")).is_some();
        async move { rule }
    })
    .await;
    assert_eq!(stored_weights(&f.store).map(|(w, _)| w), Some(vec![Some(90), Some(10)]), "the last good version stays");
    let report = f.sources.status().reports()[&server.address].clone();
    let label = format!("mcp:xds://{}/VirtualService/bookinfo/reviews", stand_in.addr);
    assert!(
        report.problems.iter().any(|p| p.starts_with("error: ") && p.contains(&label) && p.contains("does not decode")),
        "{:?}",
        report.problems
    );

    // One that decodes but does not validate (a negative weight) is refused
    // the same way, naming its field; the last good version still stays.
    let kind = crate::istio_api::kind_named("VirtualService").unwrap();
    let spec = serde_json::json!({"hosts": ["reviews"], "http": [{"route": [{"destination": {"host": "reviews"}, "weight": -5}]}]});
    let mut invalid = good_vs.clone();
    invalid.body = Some(crate::istio_api::spec_to_body(kind, &spec, true).unwrap());
    stand_in.edit(|state| {
        state.insert("networking.istio.io/v1/VirtualService".into(), vec![invalid]);
    });
    wait_until_async(deadline(), "the validation problem reported", || {
        let problems = f.sources.status().reports()[&server.address].problems.clone();
        let label = label.clone();
        async move { problems.iter().any(|p| p.contains(&label) && p.contains("spec.http[0].route[0].weight")) }
    })
    .await;
    assert_eq!(stored_weights(&f.store).map(|(w, _)| w), Some(vec![Some(90), Some(10)]));
    assert!(f.store.snapshot().get(&key(ConfigKind::DestinationRule, "reviews")).is_some());
}

#[tokio::test]
async fn a_server_that_goes_away_keeps_its_objects_and_the_next_state_reconciles() {
    let stand_in = McpStandIn::start().await;
    let addr = stand_in.addr;
    stand_in.set_yaml("v1", &format!("{}---\n{DR}", vs(90, 10)));
    let mut f = fixture(None);
    let server = server(addr);
    f.sources.reconcile(std::slice::from_ref(&server)).await;
    wait_until_async(deadline(), "the first state", || {
        let found = stored_weights(&f.store).is_some();
        async move { found }
    })
    .await;

    drop(stand_in);
    wait_until_async(deadline(), "the server reported unreachable", || {
        let state = f.sources.status().reports()[&server.address].state;
        async move { state == "unreachable" }
    })
    .await;
    assert!(stored_weights(&f.store).is_some(), "the objects stay while the server is away");
    assert!(f.store.snapshot().get(&key(ConfigKind::DestinationRule, "reviews")).is_some());

    // Back on the same port, without the DestinationRule.
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let back = McpStandIn::start_on(listener).await;
    back.set_yaml("v1", &vs(50, 50));
    wait_until_async(deadline(), "the reconnected state", || {
        let weights = stored_weights(&f.store).map(|(w, _)| w);
        let rule = f.store.snapshot().get(&key(ConfigKind::DestinationRule, "reviews")).is_some();
        async move { weights == Some(vec![Some(50), Some(50)]) && !rule }
    })
    .await;
    assert_eq!(f.sources.status().reports()[&server.address].state, "connected");
}

#[tokio::test]
async fn older_type_urls_are_read_and_other_revisions_left_out() {
    let stand_in = McpStandIn::start().await;
    let canary = DR.replace("name: reviews,", "name: canary, labels: {istio.io/rev: canary},");
    stand_in.set_yaml("v1alpha3", &format!("{}---\n{canary}", vs(90, 10)));
    let mut f = fixture(Some("default"));
    f.sources.reconcile(&[server(stand_in.addr)]).await;
    wait_until_async(deadline(), "the v1alpha3 VirtualService", || {
        let found = stored_weights(&f.store).is_some();
        async move { found }
    })
    .await;
    assert!(f.store.snapshot().get(&key(ConfigKind::DestinationRule, "canary")).is_none(), "another revision's");
}

/// A CA in a fresh directory, and a server configuration for 127.0.0.1
/// that asks for a client certificate from it when `mutual`.
fn tls_server(
    dir: &std::path::Path,
    mutual: bool,
) -> (Arc<crate::ca::CertificateAuthority>, Arc<rustls::ServerConfig>) {
    use rustls_pki_types::pem::PemObject as _;
    let ca =
        Arc::new(crate::ca::CertificateAuthority::open(dir, "cluster.local", crate::ca::Lifetimes::default()).unwrap());
    let key = rcgen::KeyPair::generate().unwrap();
    let issued = ca.sign_server(&key, &["127.0.0.1".to_string()], Duration::from_secs(3600)).unwrap();
    let chain: Vec<_> = rustls::pki_types::CertificateDer::pem_slice_iter(issued.chain[0].as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder =
        rustls::ServerConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions().unwrap();
    let builder = if mutual {
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(ca.roots().to_vec());
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).build().unwrap();
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let mut config = builder.with_single_cert(chain, key).unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    (ca, Arc::new(config))
}

fn tls_entry(addr: std::net::SocketAddr, settings: &str) -> McpServer {
    let yaml = format!("- address: xds://{addr}\n  tlsSettings: {settings}\n");
    let entries: Vec<ConfigSourceEntry> = serde_yaml_ng::from_str(&yaml).unwrap();
    let (mut servers, problems) = resolve(&entries);
    assert!(problems.is_empty(), "{problems:?}");
    servers.remove(0)
}

#[tokio::test]
async fn istio_mutual_presents_meshpushs_own_identity_and_checks_the_server_against_the_mesh_roots() {
    let dir = tempfile::TempDir::new().unwrap();
    let (ca, tls) = tls_server(dir.path(), true);
    let stand_in = McpStandIn::start_tls(tls).await;
    stand_in.set_yaml("v1", &vs(90, 10));
    let mut f = fixture(None);
    let identity = crate::model::Identity::new("cluster.local", "istio-system", "istiod").unwrap();
    f.sources.context.transport =
        TransportContext { mesh: Some(MeshIdentity { ca, identity }), system_namespace: "istio-system".into() };
    f.sources.reconcile(&[tls_entry(stand_in.addr, "{mode: ISTIO_MUTUAL}")]).await;
    wait_until_async(deadline(), "the VirtualService over mutual TLS", || {
        let found = stored_weights(&f.store).is_some();
        async move { found }
    })
    .await;
    assert_eq!(stand_in.seen().peers[0], ["spiffe://cluster.local/ns/istio-system/sa/istiod"]);
}

#[tokio::test]
async fn simple_tls_checks_the_server_against_the_given_roots_and_names() {
    let dir = tempfile::TempDir::new().unwrap();
    let (ca, tls) = tls_server(dir.path(), false);
    let stand_in = McpStandIn::start_tls(tls).await;
    stand_in.set_yaml("v1", &vs(90, 10));
    let roots = dir.path().join("roots.pem");
    std::fs::write(&roots, ca.roots_pem()).unwrap();
    let mut f = fixture(None);

    // Roots of another CA: refused, and said why.
    let (other, _) = crate::testing::certs::ca("other");
    let other = other.replace('\n', "\\n");
    let wrong = tls_entry(stand_in.addr, &format!("{{mode: SIMPLE, caCertificates: \"{other}\"}}"));
    f.sources.reconcile(std::slice::from_ref(&wrong)).await;
    wait_until_async(deadline(), "the untrusted server reported", || {
        let error = f.sources.status().reports()[&wrong.address].error.clone().unwrap_or_default();
        async move { error.contains("connecting") }
    })
    .await;
    assert!(stored_weights(&f.store).is_none());

    // The right roots (a file), but a name the certificate does not carry.
    let misnamed = tls_entry(
        stand_in.addr,
        &format!("{{mode: SIMPLE, caCertificates: {}, subjectAltNames: [mcp.example]}}", roots.display()),
    );
    f.sources.reconcile(std::slice::from_ref(&misnamed)).await;
    wait_until_async(deadline(), "the misnamed server reported", || {
        let error = f.sources.status().reports()[&misnamed.address].error.clone().unwrap_or_default();
        async move { error.contains("connecting") }
    })
    .await;
    assert!(stored_weights(&f.store).is_none());

    let right = tls_entry(
        stand_in.addr,
        &format!("{{mode: SIMPLE, caCertificates: {}, subjectAltNames: [mcp.example, 127.0.0.1]}}", roots.display()),
    );
    f.sources.reconcile(std::slice::from_ref(&right)).await;
    wait_until_async(deadline(), "the VirtualService over TLS", || {
        let found = stored_weights(&f.store).is_some();
        async move { found }
    })
    .await;
    assert!(stand_in.seen().peers.iter().all(Vec::is_empty), "no client certificate in SIMPLE");
}

#[tokio::test]
async fn mutual_tls_presents_the_settings_own_certificate() {
    let dir = tempfile::TempDir::new().unwrap();
    let (ca, tls) = tls_server(dir.path(), true);
    let stand_in = McpStandIn::start_tls(tls).await;
    stand_in.set_yaml("v1", &vs(90, 10));
    // A client certificate of the server's CA, in files, as an operator mounts one.
    let key = rcgen::KeyPair::generate().unwrap();
    let identity = crate::model::Identity::new("cluster.local", "registry", "feeder").unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.subject_alt_names = vec![rcgen::SanType::URI(identity.to_string().try_into().unwrap())];
    let csr = params.serialize_request(&key).unwrap().pem().unwrap();
    let issued = ca.sign_workload(&csr, std::slice::from_ref(&identity), Duration::ZERO).unwrap();
    let (cert, private, roots) =
        (dir.path().join("cert.pem"), dir.path().join("key.pem"), dir.path().join("roots.pem"));
    std::fs::write(&cert, issued.chain[..issued.chain.len() - 1].join("")).unwrap();
    std::fs::write(&private, key.serialize_pem()).unwrap();
    std::fs::write(&roots, ca.roots_pem()).unwrap();
    let settings = format!(
        "{{mode: MUTUAL, clientCertificate: {}, privateKey: {}, caCertificates: {}}}",
        cert.display(),
        private.display(),
        roots.display()
    );
    let mut f = fixture(None);
    f.sources.reconcile(&[tls_entry(stand_in.addr, &settings)]).await;
    wait_until_async(deadline(), "the VirtualService over mutual TLS with the settings' certificate", || {
        let found = stored_weights(&f.store).is_some();
        async move { found }
    })
    .await;
    assert_eq!(stand_in.seen().peers[0], [identity.to_string()]);
}
