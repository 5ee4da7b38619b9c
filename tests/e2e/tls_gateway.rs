//! End to end: an ingress gateway that terminates and passes through TLS,
//! with certificates from Kubernetes Secrets served over SDS on the ADS
//! stream, as Istio's gateways are configured.
//!
//! One Gateway in `istio-system` has, on 127.0.0.1:
//! * port 18443 (HTTPS, SIMPLE): `shop.example.test` and `bank.example.test`,
//!   each with its own certificate (`credentialName`), one filter chain each;
//! * port 18180 (HTTP): the same hosts, redirected to HTTPS (`httpsRedirect`);
//! * port 18444 (HTTPS, MUTUAL): `vault.example.test`, clients checked
//!   against the CA in the credential's Secret (`ca.crt`);
//! * port 18445 (TLS, PASSTHROUGH): `secure.example.test`, routed by SNI
//!   (a VirtualService `tls:` route) to a backend that terminates TLS itself.
//!
//! curl is the client (`--cacert`, `--resolve`), as the Istio docs show it.
//! The certificates are made by the test (`rcgen`); the Secrets are YAML
//! files in the mesh directory, as `kubectl get secret -o yaml` writes them.

use crate::support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use support::envoy::Section;
use support::manifests::{docs, pod, service};
use support::scene::Scene;
use support::tls::{Leaf, TestCa, TlsBackend, secret, telltales};

const HTTPS: u16 = 18443;
const HTTP: u16 = 18180;
const MUTUAL: u16 = 18444;
const PASSTHROUGH: u16 = 18445;
const APP_PORT: u16 = 18190;
const SECURE_PORT: u16 = 18191;

fn gateway() -> String {
    format!(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: ingress, namespace: istio-system}}
spec:
  selector: {{istio: ingressgateway}}
  servers:
  - port: {{number: {HTTPS}, name: https-shop, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: [shop.example.test]
    tls: {{mode: SIMPLE, credentialName: shop-cert}}
  - port: {{number: {HTTPS}, name: https-bank, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: [bank.example.test]
    tls: {{mode: SIMPLE, credentialName: bank-cert, minProtocolVersion: TLSV1_2}}
  - port: {{number: {HTTP}, name: http, protocol: HTTP}}
    bind: 127.0.0.1
    hosts: [shop.example.test, bank.example.test]
    tls: {{httpsRedirect: true}}
  - port: {{number: {MUTUAL}, name: https-vault, protocol: HTTPS}}
    bind: 127.0.0.1
    hosts: [vault.example.test]
    tls: {{mode: MUTUAL, credentialName: vault-cert}}
  - port: {{number: {PASSTHROUGH}, name: tls-secure, protocol: TLS}}
    bind: 127.0.0.1
    hosts: [secure.example.test]
    tls: {{mode: PASSTHROUGH}}
"#
    )
}

fn routes() -> String {
    let http = |name: &str, host: &str, to: &str| {
        format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: {name}, namespace: shop}}\nspec:\n  hosts: [{host}]\n  gateways: [istio-system/ingress]\n  http:\n  - route: [{{destination: {{host: {to}, port: {{number: {APP_PORT}}}}}}}]\n"
        )
    };
    docs(&[
        http("shop", "shop.example.test", "storefront"),
        http("bank", "bank.example.test", "teller"),
        http("vault", "vault.example.test", "storefront"),
        format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: secure, namespace: shop}}\nspec:\n  hosts: [secure.example.test]\n  gateways: [istio-system/ingress]\n  tls:\n  - match: [{{sniHosts: [secure.example.test]}}]\n    route: [{{destination: {{host: secure, port: {{number: {SECURE_PORT}}}}}}}]\n"
        ),
    ])
}

fn mesh() -> String {
    docs(&[
        service("shop", "storefront", APP_PORT),
        pod("shop", "storefront-1", "127.0.118.2", &[("app", "storefront")], APP_PORT),
        service("shop", "teller", APP_PORT),
        pod("shop", "teller-1", "127.0.118.3", &[("app", "teller")], APP_PORT),
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: secure, namespace: shop}}\nspec:\n  selector: {{app: secure}}\n  ports: [{{name: tls, port: {SECURE_PORT}, targetPort: {SECURE_PORT}}}]\n"
        ),
        pod("shop", "secure-1", "127.0.118.4", &[("app", "secure")], SECURE_PORT),
    ])
}

/// curl through the gateway: `url` reached with `host:port` resolved to
/// 127.0.0.1; returns (exit code, stdout, stderr).
fn curl(dir: &Path, url: &str, resolve: &str, extra: &[&str]) -> (i32, String, String) {
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "5",
            "--resolve",
            resolve,
            "-o",
            "/dev/stderr",
            "-w",
            "%{http_code} %{redirect_url}",
        ])
        .args(extra)
        .arg(url)
        .current_dir(dir)
        .output()
        .expect("run curl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `https://HOST:PORT/PATH` answered 200 by `backend` over a verified connection.
fn answered(dir: &Path, host: &str, port: u16, path: &str, backend: &str, extra: &[&str]) -> Result<(), String> {
    let resolve = format!("{host}:{port}:127.0.0.1");
    let mut args = vec!["--cacert", "ca.pem", "-D", "-"];
    args.extend_from_slice(extra);
    let (code, out, err) = curl(dir, &format!("https://{host}:{port}{path}"), &resolve, &args);
    let ok = code == 0 && out.contains("200 ") && out.to_ascii_lowercase().contains(&format!("x-backend: {backend}"));
    if ok { Ok(()) } else { Err(format!("curl {host}:{port}{path}: exit {code}: {out} {}", err.trim())) }
}

#[test]
fn an_https_gateway_serves_each_host_its_own_certificate_redirects_http_and_passes_tls_through() {
    let ca = TestCa::new("meshpush test CA");
    let clients = TestCa::new("meshpush test client CA");
    let shop = ca.leaf("shop v1", &["shop.example.test"]);
    let bank = ca.leaf("bank", &["bank.example.test"]);
    let vault = ca.leaf("vault", &["vault.example.test"]);
    let secure = ca.leaf("secure backend", &["secure.example.test"]);
    let secrets = docs(&[
        secret("istio-system", "shop-cert", &shop, None),
        secret("istio-system", "bank-cert", &bank, None),
        secret("istio-system", "vault-cert", &vault, Some(&clients.pem)),
    ]);
    let mut scene = Scene::start(
        &[("mesh.yaml", &mesh()), ("gateway.yaml", &gateway()), ("routes.yaml", &routes()), ("secrets.yaml", &secrets)],
        &[("storefront-1", "127.0.118.2:18190"), ("teller-1", "127.0.118.3:18190")],
    );
    let backend = TlsBackend::start("secure-1", SocketAddr::from(([127, 0, 118, 4], SECURE_PORT)), &secure);
    scene.add_ingress_gateway();
    let work = tempfile::tempdir().expect("a scratch dir");
    let dir = work.path();
    ca.write(dir, "ca.pem");
    let client = clients.leaf("a client", &["client.example.test"]);
    std::fs::write(dir.join("client.pem"), &client.cert).unwrap();
    std::fs::write(dir.join("client-key.pem"), &client.key).unwrap();
    let stranger = TestCa::new("nobody's CA").leaf("stranger", &["client.example.test"]);
    std::fs::write(dir.join("stranger.pem"), &stranger.cert).unwrap();
    std::fs::write(dir.join("stranger-key.pem"), &stranger.key).unwrap();

    // Two hosts on one port, each with its own certificate: curl checks the
    // name against the certificate, so a wrong one fails.
    scene.wait(Duration::from_secs(20), "shop.example.test over HTTPS", Section::Listeners, || {
        answered(dir, "shop.example.test", HTTPS, "/cart", "storefront-1", &[])
    });
    answered(dir, "bank.example.test", HTTPS, "/balance", "teller-1", &[]).unwrap();
    let (_, _, verbose) = curl(
        dir,
        &format!("https://bank.example.test:{HTTPS}/"),
        &format!("bank.example.test:{HTTPS}:127.0.0.1"),
        &["--cacert", "ca.pem", "-v"],
    );
    assert!(verbose.contains("CN=bank"), "bank.example.test gets the bank certificate: {verbose}");
    // A name no server has is refused at the handshake.
    let (code, _, _) = curl(
        dir,
        &format!("https://other.example.test:{HTTPS}/"),
        &format!("other.example.test:{HTTPS}:127.0.0.1"),
        &["--cacert", "ca.pem"],
    );
    assert_ne!(code, 0, "no chain takes other.example.test");

    // The HTTP server redirects to HTTPS.
    let (code, out, err) = curl(
        dir,
        &format!("http://shop.example.test:{HTTP}/cart"),
        &format!("shop.example.test:{HTTP}:127.0.0.1"),
        &[],
    );
    assert!(code == 0 && out.starts_with("301 https://shop.example.test"), "redirect: {code} {out} {err}");

    // MUTUAL: no client certificate, or one from another CA, is refused; ours is served.
    scene.wait(Duration::from_secs(10), "vault.example.test with a client certificate", Section::Listeners, || {
        answered(
            dir,
            "vault.example.test",
            MUTUAL,
            "/",
            "storefront-1",
            &["--cert", "client.pem", "--key", "client-key.pem"],
        )
    });
    let resolve = format!("vault.example.test:{MUTUAL}:127.0.0.1");
    let vault_url = format!("https://vault.example.test:{MUTUAL}/");
    let (code, out, _) = curl(dir, &vault_url, &resolve, &["--cacert", "ca.pem"]);
    assert!(code != 0 && !out.starts_with("200"), "a client without a certificate is refused: {code} {out}");
    let (code, out, _) =
        curl(dir, &vault_url, &resolve, &["--cacert", "ca.pem", "--cert", "stranger.pem", "--key", "stranger-key.pem"]);
    assert!(code != 0 && !out.starts_with("200"), "a certificate of another CA is refused: {code} {out}");

    // PASSTHROUGH: the gateway routes by SNI and the backend terminates TLS.
    scene.wait(Duration::from_secs(10), "secure.example.test passed through", Section::Listeners, || {
        answered(dir, "secure.example.test", PASSTHROUGH, "/vault", "secure-1", &[])
    });
    assert!(backend.sni_seen().contains(&Some("secure.example.test".into())), "{:?}", backend.sni_seen());

    // No private key in any debug view, proxy-config output or log.
    let node = "ingress-1.istio-system";
    // The dump, Secrets included (keys redacted), prints what the gateway holds as Envoy prints it.
    support::dump::assert_dump_matches_envoy(scene.mesh(), scene.envoy("gateway"), node);
    let proxy_config = |extra: &[&str]| {
        let admin = scene.mesh().admin_addr().to_string();
        let out = Command::new(env!("CARGO_BIN_EXE_meshpush"))
            .args(["proxy-config", "secret", node, "--admin", &admin])
            .args(extra)
            .output()
            .expect("run meshpush proxy-config");
        assert!(out.status.success(), "proxy-config secret: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let table = proxy_config(&[]);
    let rows: Vec<Vec<&str>> = table.lines().skip(1).map(|l| l.split_whitespace().take(3).collect()).collect();
    assert!(rows.contains(&vec!["kubernetes://shop-cert", "Cert", "Chain"]), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("kubernetes://vault-cert-cacert") && l.contains("CA") && l.contains("true")),
        "{table}"
    );
    let views = [
        scene.mesh().admin(&format!("/debug/config_dump?proxyID={node}")).body,
        scene.mesh().admin("/debug/configz").body,
        scene.mesh().log(),
        table.clone(),
        proxy_config(&["-o", "json"]),
    ];
    let dump: serde_json::Value = serde_json::from_str(&views[0]).expect("config_dump is JSON");
    let secrets_dump = dump["configs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["@type"].as_str().unwrap().ends_with("SecretsConfigDump"));
    let names: Vec<&str> = secrets_dump.expect("a secrets section")["dynamic_active_secrets"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "kubernetes://bank-cert",
            "kubernetes://shop-cert",
            "kubernetes://vault-cert",
            "kubernetes://vault-cert-cacert"
        ]
    );
    assert_no_key(&[&shop, &bank, &vault], &views);
    scene.assert_nothing_rejected();

    // Rotation: a new certificate for shop, while requests keep going.
    let rotated = ca.leaf("shop v2", &["shop.example.test"]);
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let traffic = {
        let (stop, sent, dir) = (stop.clone(), sent.clone(), dir.to_path_buf());
        std::thread::spawn(move || {
            let mut failed = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                if let Err(e) = answered(&dir, "shop.example.test", HTTPS, "/during", "storefront-1", &[]) {
                    failed.push(e);
                }
                sent.fetch_add(1, Ordering::SeqCst);
            }
            failed
        })
    };
    scene.dir().write(
        "secrets.yaml",
        &docs(&[
            secret("istio-system", "shop-cert", &rotated, None),
            secret("istio-system", "bank-cert", &bank, None),
            secret("istio-system", "vault-cert", &vault, Some(&clients.pem)),
        ]),
    );
    let presented = || {
        let (_, _, verbose) = curl(
            dir,
            &format!("https://shop.example.test:{HTTPS}/"),
            &format!("shop.example.test:{HTTPS}:127.0.0.1"),
            &["--cacert", "ca.pem", "-v"],
        );
        if verbose.contains("CN=shop v2") { Ok(()) } else { Err("still the first certificate".to_string()) }
    };
    scene.wait(Duration::from_secs(15), "the rotated certificate", Section::Listeners, presented);
    // Requests go on across and after the switch before the count is taken.
    let after = sent.load(Ordering::SeqCst) + 10;
    scene.wait(Duration::from_secs(15), "ten more requests after the rotation", Section::Listeners, || {
        if sent.load(Ordering::SeqCst) >= after { Ok(()) } else { Err("traffic still running".to_string()) }
    });
    stop.store(true, Ordering::SeqCst);
    let failed = traffic.join().expect("the traffic thread");
    let sent = sent.load(Ordering::SeqCst);
    assert!(failed.is_empty(), "{} of {sent} requests failed during the rotation: {failed:?}", failed.len());
    assert_no_key(
        &[&rotated],
        &[scene.mesh().admin(&format!("/debug/config_dump?proxyID={node}")).body, scene.mesh().log()],
    );
}

fn assert_no_key(leaves: &[&Leaf], views: &[String]) {
    use base64::Engine as _;
    for leaf in leaves {
        let encoded = base64::engine::general_purpose::STANDARD.encode(leaf.key.as_bytes());
        for (i, view) in views.iter().enumerate() {
            for line in telltales(&leaf.key) {
                assert!(!view.contains(&line), "view {i} shows a private key");
            }
            assert!(!view.contains(&encoded[..60]), "view {i} shows a private key, base64-encoded");
        }
    }
}
