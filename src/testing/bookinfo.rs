//! The bundled example mesh (`examples/bookinfo`), loaded into a store as
//! the file source loads it, for tests that want a real mesh rather than a
//! synthetic one.

use std::path::Path;

use crate::config::parse::parse_documents;
use crate::model::ConfigStore;
use crate::model::store::Write;

/// The productpage sidecar's node id (its pod has `127.0.0.11`).
pub const PRODUCTPAGE: &str = "sidecar~127.0.0.11~productpage-v1.default~default.svc.cluster.local";

/// Every object of `examples/bookinfo`, each put with its file and document.
pub fn writes() -> Vec<Write> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bookinfo");
    let mut files: Vec<_> =
        std::fs::read_dir(&dir).expect("examples/bookinfo").map(|e| e.expect("a directory entry").path()).collect();
    files.sort();
    let mut writes = Vec::new();
    for path in files.iter().filter(|p| p.extension().is_some_and(|e| e == "yaml")) {
        let text = std::fs::read_to_string(path).expect("a readable example file");
        let parsed = parse_documents(&path.display().to_string(), &text);
        assert!(!parsed.has_errors(), "{}: {:?}", path.display(), parsed.problems);
        writes.extend(parsed.objects.into_iter().map(|(o, s)| Write::put(o, s)));
    }
    writes
}

/// A store holding `examples/bookinfo`.
pub fn store() -> ConfigStore {
    let store = ConfigStore::new();
    store.apply(writes());
    store
}

/// Puts for the objects of `yaml` (one or more documents), as an edit of a file would make them.
pub fn puts(yaml: &str) -> Vec<Write> {
    let parsed = parse_documents("edit.yaml", yaml);
    assert!(!parsed.has_errors(), "{:?}", parsed.problems);
    parsed.objects.into_iter().map(|(o, s)| Write::put(o, s)).collect()
}

/// An engine that published the bookinfo mesh (not marked ready: streams
/// driven directly do not wait for it).
pub async fn engine() -> std::sync::Arc<crate::engine::PushEngine> {
    let engine = crate::engine::PushEngine::new();
    engine.push(crate::push::PushRequest::new(ConfigStore::new().apply(writes()))).await;
    engine
}

/// The productpage sidecar, in `NONE` interception mode.
pub fn productpage() -> crate::model::Proxy {
    let node = crate::testing::memory::node(PRODUCTPAGE, "NONE", &[]);
    crate::model::Proxy::from_node(&node).expect("the productpage node is valid")
}

/// `examples/bookinfo` and, on top of it, `tests/data/mesh-cases.yaml`:
/// the cases the generator tests need that bookinfo does not have (a rich
/// DestinationRule and VirtualService, TCP and gRPC services, every
/// ServiceEntry resolution, colliding virtual IPs, another namespace, a
/// Sidecar, more gateway servers).
pub fn with_cases() -> Vec<Write> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mesh-cases.yaml");
    let text = std::fs::read_to_string(&path).expect("tests/data/mesh-cases.yaml");
    let parsed = parse_documents("mesh-cases.yaml", &text);
    assert!(!parsed.has_errors(), "mesh-cases.yaml: {:?}", parsed.problems);
    let mut all = writes();
    all.extend(parsed.objects.into_iter().map(|(o, s)| Write::put(o, s)));
    all
}

/// A proxy of the test mesh from its node id, interception mode and labels.
pub fn proxy(id: &str, mode: &str, labels: &[(&str, &str)]) -> crate::model::Proxy {
    crate::model::Proxy::from_node(&crate::testing::memory::node(id, mode, labels)).expect("a valid node")
}

/// The productpage sidecar with its pod's labels, in `mode`
/// (`REDIRECT` or `NONE`): a Service selects it, so it has inbound ports.
pub fn productpage_in(mode: &str) -> crate::model::Proxy {
    proxy(
        "sidecar~10.0.0.1~productpage-v1.default~default.svc.cluster.local",
        mode,
        &[("app", "productpage"), ("version", "v1")],
    )
}

/// The ingress gateway router (`istio: ingressgateway`).
pub fn ingress() -> crate::model::Proxy {
    proxy("router~10.0.0.100~ingress.default~default.svc.cluster.local", "REDIRECT", &[("istio", "ingressgateway")])
}

/// A sidecar of the Sidecar-scoped namespace of `tests/data/mesh-cases.yaml`.
pub fn scoped_client() -> crate::model::Proxy {
    proxy("sidecar~10.0.2.9~client.scoped~scoped.svc.cluster.local", "REDIRECT", &[("app", "client")])
}
