//! End to end: JWT authentication at an ingress gateway, as Istio's
//! "require a token at ingress" pattern writes it.
//!
//! A RequestAuthentication names the issuer of `meshpush jwt` tokens and
//! a `jwksUri` served by this test; meshpush fetches the key set (Envoy is
//! never asked to) and inlines it in the gateway's JWT filter. An
//! AuthorizationPolicy denies requests without a request principal. A
//! request without a token gets 403, one with a token the key set verifies
//! reaches the service, one signed by another key gets 401; then the
//! policy's `requestPrincipals` names one service account's subject and
//! only its token passes.

use crate::support;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use support::envoy::Section;
use support::manifests::{docs, gateway, gateway_route, pod, service};
use support::scene::Scene;

/// The storefront Pod's address (no other test uses it).
const POD_IP: &str = "127.0.129.2";

/// Serves one file over HTTP/1.1 on a free loopback port, counting requests.
struct KeySetServer {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

impl KeySetServer {
    fn start(body: String) -> KeySetServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        // The thread ends with the test process; it holds no child process.
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut head = [0u8; 4096];
                let _ = stream.read(&mut head);
                counter.fetch_add(1, Ordering::SeqCst);
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes());
            }
        });
        KeySetServer { addr, hits }
    }
}

fn policy(principals: &str) -> String {
    format!(
        "apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {{name: require-jwt, namespace: istio-system}}\nspec:\n  selector: {{matchLabels: {{istio: ingressgateway}}}}\n  action: ALLOW\n  rules:\n  - from: [{{source: {{requestPrincipals: [{principals}]}}}}]\n"
    )
}

#[test]
fn a_gateway_verifies_tokens_against_keys_meshpush_fetched_and_authorizes_by_request_principal() {
    let scratch = support::process::scratch_dir("jwt-keys");
    let keys = scratch.path();
    let (key, jwks) = meshpush::cli::jwt::keygen(&keys.join("issuer")).expect("keygen");
    let (other_key, _) = meshpush::cli::jwt::keygen(&keys.join("other")).expect("keygen");
    let server = KeySetServer::start(std::fs::read_to_string(&jwks).unwrap());
    let token = |key: &std::path::Path, sa: &str| {
        meshpush::cli::jwt::issue(key, "shop", sa, Duration::from_secs(600)).expect("a token")
    };
    let (alice, bob, forged) = (token(&key, "alice"), token(&key, "bob"), token(&other_key, "alice"));

    let (gateway_port, service_port) = (support::process::free_port(), support::process::free_port());
    let mesh = docs(&[
        service("shop", "storefront", service_port),
        pod("shop", "storefront-1", POD_IP, &[("app", "storefront")], service_port),
    ]);
    let ingress = docs(&[
        gateway("istio-system", "ingress", "ingressgateway", gateway_port, &["shop.example.test"]),
        gateway_route("shop", "storefront", "istio-system/ingress", "shop.example.test", "storefront", service_port),
        format!(
            "apiVersion: security.istio.io/v1\nkind: RequestAuthentication\nmetadata: {{name: jwt, namespace: istio-system}}\nspec:\n  selector: {{matchLabels: {{istio: ingressgateway}}}}\n  jwtRules:\n  - issuer: {issuer}\n    jwksUri: http://{addr}/jwks.json\n    forwardOriginalToken: true\n",
            issuer = meshpush::cli::jwt::ISSUER,
            addr = server.addr,
        ),
        policy("\"*\""),
    ]);
    let mut scene = Scene::start(
        &[("mesh.yaml", &mesh), ("ingress.yaml", &ingress)],
        &[("storefront-1", &format!("{POD_IP}:{service_port}"))],
    );
    scene.add_ingress_gateway();

    let entry = SocketAddr::from(([127, 0, 0, 1], gateway_port));
    let send = |token: Option<&str>| {
        let bearer = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![("host", "shop.example.test")];
        if let Some(b) = &bearer {
            headers.push(("authorization", b.as_str()));
        }
        support::http::get(entry, "/cart", &headers)
    };
    // Until the key set is fetched, no token verifies: wait for alice's to.
    scene.wait(
        Duration::from_secs(20),
        "a token to verify against the fetched keys",
        Section::Listeners,
        || match send(Some(&alice)) {
            Ok(r) if r.status == 200 => Ok(()),
            Ok(r) => Err(format!("status {}", r.status)),
            Err(e) => Err(e.to_string()),
        },
    );
    assert!(server.hits.load(Ordering::SeqCst) >= 1, "meshpush fetched the key set");
    let listeners = scene.envoy("gateway").section(Section::Listeners).to_string();
    assert!(listeners.contains("local_jwks") && !listeners.contains("remote_jwks"), "Envoy got the keys inline");

    scene.focus(Section::Listeners);
    let status = |token: Option<&str>| send(token).expect("the gateway answers").status;
    assert_eq!(status(Some(&alice)), 200);
    assert_eq!(status(None), 403, "no token: no request principal, denied");
    assert_eq!(status(Some(&forged)), 401, "a token the key set does not verify is refused");
    assert_eq!(status(Some("not.a.token")), 401);

    // Only alice's subject, now.
    let subject = format!("\"{}/system:serviceaccount:shop:alice\"", meshpush::cli::jwt::ISSUER);
    scene.dir().write("policy.yaml", &policy(&subject));
    scene.dir().remove("ingress.yaml");
    let rest = ingress.replace(&policy("\"*\""), "");
    scene.dir().write("ingress.yaml", &rest);
    scene.wait(Duration::from_secs(15), "bob's token to be refused", Section::Listeners, || match send(Some(&bob)) {
        Ok(r) if r.status == 403 => Ok(()),
        Ok(r) => Err(format!("status {}", r.status)),
        Err(e) => Err(e.to_string()),
    });
    assert_eq!(status(Some(&alice)), 200, "alice's subject is allowed");
    scene.assert_nothing_rejected();
}
