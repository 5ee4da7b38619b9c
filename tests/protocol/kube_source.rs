//! The Kubernetes source against the stand-in API server
//! (`support::kube_api`): `kubectl` lists and watches through the stand-in
//! (a real client agrees it speaks the protocol), and the meshpush binary
//! with `--kubeconfig` serves what the API holds — each object with its
//! `k8s:KIND/NS/NAME@RV` source, changes and deletions as they happen,
//! a relist after `410 Gone` that deletes what went while the watch was
//! down, an invalid object refused with its last good version kept, and
//! `/ready` naming the kind whose first list has not come.
//! `--in-cluster` is run as in a Pod, against the stand-in serving TLS.

use crate::support;

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::kube_api::KubeApi;
use support::meshpush::Meshpush;

const WAIT: Duration = Duration::from_secs(15);

fn service(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: shop}}\n\
         spec:\n  selector: {{app: {name}}}\n  ports:\n  - {{name: http, port: 9080, targetPort: 9080}}\n"
    )
}

fn pod(name: &str, app: &str, ip: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: shop, labels: {{app: {app}}}}}\n\
         spec: {{serviceAccountName: {app}, containers: [{{name: app, image: x}}]}}\n\
         status: {{podIP: {ip}, phase: Running, conditions: [{{type: Ready, status: \"True\"}}]}}\n"
    )
}

fn route(prefix: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: ledger, namespace: shop}}\n\
         spec:\n  hosts: [ledger.shop.svc.cluster.local]\n  http:\n  - match: [{{uri: {{prefix: {prefix}}}}}]\n    \
         route: [{{destination: {{host: ledger.shop.svc.cluster.local}}}}]\n"
    )
}

/// `/debug/configz`'s objects: `KIND/NS/NAME` → its source file.
fn served(mesh: &Meshpush) -> std::collections::BTreeMap<String, String> {
    let configz = configz(mesh);
    configz["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                format!(
                    "{}/{}/{}",
                    o["kind"].as_str().unwrap(),
                    o["namespace"].as_str().unwrap(),
                    o["name"].as_str().unwrap()
                ),
                o["source"]["file"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// `/debug/configz` as JSON.
fn configz(mesh: &Meshpush) -> Value {
    let response = mesh.admin("/debug/configz");
    serde_json::from_str(&response.body)
        .unwrap_or_else(|e| panic!("/debug/configz answered {} {:?}: {e}", response.status, response.body))
}

fn problems(mesh: &Meshpush) -> Vec<String> {
    let configz = configz(mesh);
    configz["problems"].as_array().unwrap().iter().map(|p| p["text"].as_str().unwrap().to_string()).collect()
}

/// The VirtualService's first match prefix as served.
fn served_prefix(mesh: &Meshpush) -> Option<String> {
    let configz = configz(mesh);
    configz["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "VirtualService")
        .and_then(|o| o["object"]["spec"]["http"][0]["match"][0]["uri"]["prefix"].as_str().map(str::to_string))
}

/// The selector meshpush's Secret watch sends.
const UNREAD_SECRET_TYPES: &str = meshpush::source::kube::UNREAD_SECRET_TYPES;

/// A service account's token: a Secret no gateway names, not read.
fn token_secret() -> String {
    "apiVersion: v1\nkind: Secret\nmetadata: {name: default-token, namespace: istio-system}\ntype: kubernetes.io/service-account-token\ndata: {token: dG9rZW4=}\n".to_string()
}

/// A gateway's certificate, and its private key.
fn tls_secret() -> (String, support::tls::Leaf) {
    let leaf = support::tls::TestCa::new("test CA").leaf("shop", &["shop.example.test"]);
    (support::tls::secret("istio-system", "shop-cert", &leaf, None), leaf)
}

fn write_kubeconfig(api: &KubeApi) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), api.kubeconfig()).unwrap();
    file
}

#[test]
fn kubectl_lists_gets_and_watches_through_the_stand_in() {
    let Ok(kubectl) = which("kubectl") else {
        panic!("kubectl is needed to check the stand-in API server (Debian: apt-get install kubectl)");
    };
    let api = KubeApi::start();
    let kubeconfig = write_kubeconfig(&api);
    let cache = tempfile::tempdir().unwrap();
    let base = |args: &[&str]| {
        let mut command = Command::new(&kubectl);
        command.arg("--kubeconfig").arg(kubeconfig.path()).arg("--cache-dir").arg(cache.path()).args(args);
        command
    };
    api.put("apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n");
    api.put(&route("/v1"));
    api.put(&service("ledger"));

    // A list of an Istio kind at another served version, and one object by name.
    let out =
        base(&["get", "virtualservices.v1beta1.networking.istio.io", "-n", "shop", "-o", "json"]).output().unwrap();
    assert!(out.status.success(), "kubectl get: {}", String::from_utf8_lossy(&out.stderr));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["items"][0]["metadata"]["name"], "ledger", "{list}");
    let out =
        base(&["get", "service", "ledger", "-n", "shop", "-o", "jsonpath={.spec.ports[0].port}"]).output().unwrap();
    assert!(out.status.success(), "kubectl get service: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "9080");
    // A field selector, as meshpush lists Secrets (without service-account tokens).
    api.put(&token_secret());
    api.put(&tls_secret().0);
    let out = base(&["get", "secrets", "-n", "istio-system", "--field-selector", UNREAD_SECRET_TYPES, "-o", "name"])
        .output()
        .unwrap();
    assert!(out.status.success(), "kubectl get secrets: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "secret/shop-cert");
    // Istio's ConfigMap by name, as meshpush reads the mesh config from it.
    api.put("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: istio, namespace: istio-system}\ndata:\n  mesh: 'rootNamespace: x'\n");
    let out =
        base(&["get", "configmap", "istio", "-n", "istio-system", "-o", "jsonpath={.data.mesh}"]).output().unwrap();
    assert!(out.status.success(), "kubectl get configmap: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "rootNamespace: x");
    // A create and a replace, as meshpush writes the mesh root's ConfigMaps
    // and the webhook configurations' caBundle (`--validate=false`: the
    // stand-in serves no OpenAPI document for kubectl to check against).
    let root = cache.path().join("root.yaml");
    std::fs::write(
        &root,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: istio-ca-root-cert, namespace: shop}\ndata: {root-cert.pem: R}\n",
    )
    .unwrap();
    let out = base(&["create", "--validate=false", "-f"]).arg(&root).output().unwrap();
    assert!(out.status.success(), "kubectl create: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(api.get("ConfigMap", "shop", "istio-ca-root-cert").unwrap()["data"]["root-cert.pem"], "R");
    let out = base(&["create", "--validate=false", "-f"]).arg(&root).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already exists"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    api.put("apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata: {name: injector}\nwebhooks: []\n");
    let replaced = cache.path().join("injector.yaml");
    std::fs::write(
        &replaced,
        "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\n\
         metadata: {name: injector, labels: {istio.io/rev: default}}\nwebhooks: []\n",
    )
    .unwrap();
    let out = base(&["replace", "--validate=false", "-f"]).arg(&replaced).output().unwrap();
    assert!(out.status.success(), "kubectl replace: {}", String::from_utf8_lossy(&out.stderr));
    let stored = api.get("MutatingWebhookConfiguration", "", "injector").unwrap();
    assert_eq!(stored["metadata"]["labels"]["istio.io/rev"], "default");
    assert_eq!(api.client_writes(), 2, "one create, one replace");
    // A TokenReview, as the CA creates one: kubectl posts it raw.
    api.accept_token("good-token", "shop", "ledger");
    let review = cache.path().join("review.json");
    for (token, authenticated) in [("good-token", true), ("bad-token", false)] {
        let body = serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token, "audiences": ["istio-ca"]}});
        std::fs::write(&review, body.to_string()).unwrap();
        let out = base(&["create", "--raw", "/apis/authentication.k8s.io/v1/tokenreviews", "-f"])
            .arg(&review)
            .output()
            .unwrap();
        assert!(out.status.success(), "kubectl create --raw: {}", String::from_utf8_lossy(&out.stderr));
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(answer["status"]["authenticated"], authenticated, "{answer}");
        if authenticated {
            assert_eq!(answer["status"]["user"]["username"], "system:serviceaccount:shop:ledger");
            assert_eq!(answer["status"]["audiences"][0], "istio-ca");
        }
    }
    let out = base(&["get", "service", "nothing", "-n", "shop"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("not found"), "kubectl get of a missing object: {stderr}");

    // A watch sees a Pod created after it started.
    let mut watch = KillOnDrop(
        base(&["get", "pods", "-n", "shop", "--watch-only", "-o", "name"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = watch.0.stdout.take().unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    // kubectl lists, then watches: the Pod comes once its watch is open.
    support::process::wait_until(Instant::now() + WAIT, "kubectl's watch to open", &[], || {
        if api.open_watches() > 0 { Ok(()) } else { Err("no watch open".to_string()) }
    });
    api.put(&pod("ledger-v2", "ledger", "127.0.0.9"));
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    while Instant::now() < deadline && !seen.iter().any(|l: &String| l.contains("ledger-v2")) {
        if let Ok(line) = lines_rx.recv_timeout(Duration::from_millis(200)) {
            seen.push(line);
        }
    }
    drop(watch);
    assert!(seen.iter().any(|l| l == "pod/ledger-v2"), "kubectl's watch printed {seen:?}");
}

/// A child process killed (and reaped) when this drops, panics included.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn which(program: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|dir| dir.join(program)).find(|p| p.is_file()))
        .ok_or(())
}

#[test]
fn ready_names_the_kinds_whose_first_list_has_not_come() {
    let api = KubeApi::start();
    let kubeconfig = write_kubeconfig(&api);
    api.put(&pod("ledger-v1", "ledger", "127.0.0.2"));
    api.refuse("pods");
    let admin = support::process::free_addr();
    let args: Vec<String> = [
        "serve",
        "--kubeconfig",
        &kubeconfig.path().display().to_string(),
        "--xds-addr",
        &support::process::free_addr().to_string(),
        "--admin-addr",
        &admin.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let name = "meshpush-pods-refused";
    let server = support::process::ChildGuard::spawn(
        name,
        support::process::scratch_dir(name),
        env!("CARGO_BIN_EXE_meshpush").as_ref(),
        args,
    );
    let ready = || support::http::get(admin, "/ready", &[]);
    support::process::wait_until(
        Instant::now() + WAIT,
        "/ready to name the unlisted Pods",
        &[&server],
        || match ready() {
            Ok(r)
                if r.status == 503 && r.body == "not ready: waiting for the first list of 1 Kubernetes kind: Pod\n" =>
            {
                Ok(())
            }
            Ok(r) => Err(format!("{} {:?}", r.status, r.body)),
            Err(e) => Err(e.to_string()),
        },
    );
    api.accept("pods");
    support::process::wait_until(Instant::now() + WAIT, "ready once the Pods are listed", &[&server], || {
        ready().map_err(|e| e.to_string()).and_then(|r| match r.status {
            200 => Ok(()),
            _ => Err(format!("{} {:?}", r.status, r.body)),
        })
    });
}

#[test]
fn meshpush_serves_the_api_objects_and_follows_changes_relists_and_bad_objects() {
    let api = KubeApi::start();
    let kubeconfig = write_kubeconfig(&api);
    api.put(&service("ledger"));
    api.put(&pod("ledger-v1", "ledger", "127.0.0.2"));
    api.put(&service("audit"));
    let route_revision = api.put(&route("/v1"));
    let mesh = Meshpush::start_kube(kubeconfig.path(), &[]);

    // Ready means listed: every object is there at once, with its source.
    let objects = served(&mesh);
    assert_eq!(
        objects.get("VirtualService/shop/ledger").map(String::as_str),
        Some(format!("k8s:VirtualService/shop/ledger@{route_revision}").as_str()),
        "{objects:?}"
    );
    for key in ["Service/shop/ledger", "Pod/shop/ledger-v1", "Service/shop/audit"] {
        assert!(objects.get(key).is_some_and(|s| s.starts_with("k8s:")), "{key} not served: {objects:?}");
    }

    // A change and a deletion arrive over the watch.
    api.put(&route("/v2"));
    api.delete("Service", "shop", "audit");
    support::process::wait_until(Instant::now() + WAIT, "the watch's change and deletion", &[mesh.process()], || {
        let objects = served(&mesh);
        let prefix = served_prefix(&mesh);
        if prefix.as_deref() == Some("/v2") && !objects.contains_key("Service/shop/audit") {
            Ok(())
        } else {
            Err(format!("prefix {prefix:?}, objects {objects:?}"))
        }
    });

    // An outage: while the watches are down a Pod goes and a Service comes,
    // and afterwards they cannot resume (410 Gone). The relist deletes the
    // one and adds the other.
    api.go_down();
    api.delete("Pod", "shop", "ledger-v1");
    api.put(&service("billing"));
    api.come_back();
    support::process::wait_until(Instant::now() + WAIT, "the relist after 410 Gone", &[mesh.process()], || {
        let objects = served(&mesh);
        if !objects.contains_key("Pod/shop/ledger-v1") && objects.contains_key("Service/shop/billing") {
            Ok(())
        } else {
            Err(format!("objects {objects:?}"))
        }
    });
    let log = mesh.log();
    assert!(log.contains("too old resource version"), "the watches were not answered 410 Gone: {}", mesh.log_tail(30));
    assert!(log.contains("objects gone from a relist are deleted"), "{}", mesh.log_tail(30));

    // An invalid version is refused; the last good one stays served.
    api.put(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: ledger, namespace: shop}\n\
         spec:\n  hosts: [ledger.shop.svc.cluster.local]\n  http:\n  - route: [{destination: {host: ledger.shop.svc.cluster.local}, weight: lots}]\n",
    );
    support::process::wait_until(
        Instant::now() + WAIT,
        "the invalid VirtualService's problem",
        &[mesh.process()],
        || {
            let problems = problems(&mesh);
            if problems.iter().any(|p| p.contains("k8s:VirtualService/shop/ledger@") && p.contains("weight")) {
                Ok(())
            } else {
                Err(format!("problems {problems:?}"))
            }
        },
    );
    assert_eq!(served_prefix(&mesh).as_deref(), Some("/v2"), "the last good version is served");
    // Fixed, it is served and its problem is gone.
    api.put(&route("/v3"));
    support::process::wait_until(Instant::now() + WAIT, "the fixed VirtualService", &[mesh.process()], || {
        let (prefix, problems) = (served_prefix(&mesh), problems(&mesh));
        if prefix.as_deref() == Some("/v3") && problems.is_empty() {
            Ok(())
        } else {
            Err(format!("prefix {prefix:?}, problems {problems:?}"))
        }
    });
}

fn namespace(name: &str, labels: &str) -> String {
    format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}, labels: {{{labels}}}}}\n")
}

fn service_in(namespace: &str, name: &str) -> String {
    service(name).replace("namespace: shop", &format!("namespace: {namespace}"))
}

#[test]
fn discovery_selectors_read_only_the_namespaces_they_pick_as_labels_change() {
    let api = KubeApi::start();
    let kubeconfig = write_kubeconfig(&api);
    api.put(&namespace("shop", "mesh: \"on\""));
    api.put(&namespace("lab", ""));
    api.put(&service_in("shop", "ledger"));
    api.put(&service_in("lab", "scratch"));
    api.put(&route("/v1"));
    let node_revision =
        api.put("apiVersion: v1\nkind: Node\nmetadata: {name: worker-1, labels: {topology.kubernetes.io/zone: a}}\n");
    let mesh = Meshpush::start_kube(kubeconfig.path(), &["--discovery-selector", "{matchLabels: {mesh: \"on\"}}"]);
    let objects = served(&mesh);
    assert!(objects.contains_key("Service/shop/ledger") && objects.contains_key("VirtualService/shop/ledger"));
    assert!(!objects.contains_key("Service/lab/scratch"), "an unselected namespace is not read: {objects:?}");
    // Nor its Namespace object; the selected one's labels are read.
    assert!(objects.contains_key("Namespace//shop") && !objects.contains_key("Namespace//lab"), "{objects:?}");
    // A Node is in no namespace: the selectors do not filter it out.
    assert_eq!(
        objects.get("Node//worker-1").map(String::as_str),
        Some(format!("k8s:Node/worker-1@{node_revision}").as_str()),
        "{objects:?}"
    );

    // lab joins, shop leaves: their objects follow.
    api.put(&namespace("lab", "mesh: \"on\""));
    api.put(&namespace("shop", "mesh: \"off\""));
    support::process::wait_until(Instant::now() + WAIT, "lab's objects in, shop's out", &[mesh.process()], || {
        let objects = served(&mesh);
        let keys: Vec<&String> = objects.keys().filter(|k| !k.starts_with("Node/")).collect();
        if keys == ["Namespace//lab", "Service/lab/scratch"] { Ok(()) } else { Err(format!("served {keys:?}")) }
    });
    // A change in an unselected namespace stays out.
    api.put(&service_in("shop", "audit"));
    api.put(&service_in("lab", "notes"));
    support::process::wait_until(Instant::now() + WAIT, "lab's new Service", &[mesh.process()], || {
        let objects = served(&mesh);
        if objects.contains_key("Service/lab/notes") { Ok(()) } else { Err(format!("served {objects:?}")) }
    });
    assert!(!served(&mesh).contains_key("Service/shop/audit"));
}

#[test]
fn a_discovery_selector_needs_kubernetes_and_must_be_a_label_selector() {
    let binary = env!("CARGO_BIN_EXE_meshpush");
    let out = Command::new(binary).args(["serve", "--discovery-selector", "{matchLabels: {a: b}}"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs --kubeconfig or --in-cluster"));
    let out = Command::new(binary)
        .args(["serve", "--kubeconfig", "/nonexistent", "--discovery-selector", "[not, a, selector]"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not a LabelSelector"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--in-cluster`, as in a Pod: `KUBERNETES_SERVICE_HOST` and `_PORT` name
/// the API server; the service account's token, CA and namespace are files
/// under `/var/run/secrets/kubernetes.io/serviceaccount`. meshpush gets
/// exactly that, in a mount namespace of its own (`unshare -m`, a tmpfs on
/// `/run`, so the machine's `/run` is untouched), against the stand-in
/// serving HTTPS with a certificate of its own CA and refusing requests
/// without the token. The token never reaches the log.
#[test]
fn in_cluster_config_is_the_service_account_and_the_kubernetes_service() {
    let token = "stand-in-token-3f9c0d2e";
    let api = KubeApi::start_in_cluster(token);
    let revision = api.put(&service("ledger"));
    let secrets = tempfile::tempdir().unwrap();
    std::fs::write(secrets.path().join("token"), token).unwrap();
    std::fs::write(secrets.path().join("ca.crt"), api.ca_pem().expect("the stand-in serves TLS")).unwrap();
    std::fs::write(secrets.path().join("namespace"), "istio-system").unwrap();
    let (xds, admin) = (support::process::free_addr(), support::process::free_addr());
    let script = format!(
        "export KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT={port}; \
         mount -t tmpfs tmpfs /run && d=/run/secrets/kubernetes.io/serviceaccount && mkdir -p \"$d\" && \
         cp \"$0/token\" \"$0/ca.crt\" \"$0/namespace\" \"$d/\" && exec \"$@\"",
        port = api.addr().port()
    );
    let (xds, admin_arg) = (xds.to_string(), admin.to_string());
    let secrets_dir = secrets.path().display().to_string();
    let args = [
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
        &secrets_dir,
        env!("CARGO_BIN_EXE_meshpush"),
        "serve",
        "--in-cluster",
        "--xds-addr",
        &xds,
        "--admin-addr",
        &admin_arg,
        "--log-level",
        "info,meshpush=debug",
        "--admin-render-budget",
        "0s",
        "--admin-views-per-client",
        "0",
    ];
    let name = "meshpush-in-cluster";
    let mut child =
        support::process::ChildGuard::spawn(name, support::process::scratch_dir(name), "unshare".as_ref(), args);
    child.wait_ready(Instant::now() + WAIT, "meshpush --in-cluster GET /ready to answer 200", || {
        support::http::get(admin, "/ready", &[]).is_ok_and(|r| r.status == 200)
    });
    let configz = support::http::get(admin, "/debug/configz", &[]).expect("/debug/configz answers");
    assert!(
        configz.body.contains(&format!("k8s:Service/shop/ledger@{revision}")),
        "the Service is not served: {}",
        child.log_tail(30)
    );
    assert!(api.authorized_requests() > 0, "no request carried the service account's token");
    let log = std::fs::read_to_string(child.log_path()).unwrap();
    assert!(!log.contains(token), "the token is in the log");
}

#[test]
fn gateway_certificates_come_from_the_api_and_tokens_are_not_read() {
    let api = KubeApi::start();
    let kubeconfig = write_kubeconfig(&api);
    api.put(&token_secret());
    let (secret, leaf) = tls_secret();
    let revision = api.put(&secret);
    let mesh = Meshpush::start_kube(kubeconfig.path(), &[]);
    let objects = served(&mesh);
    assert_eq!(
        objects.get("Secret/istio-system/shop-cert").map(String::as_str),
        Some(format!("k8s:Secret/istio-system/shop-cert@{revision}").as_str()),
        "{objects:?}"
    );
    assert!(!objects.contains_key("Secret/istio-system/default-token"), "a token is not read: {objects:?}");
    let body = mesh.admin("/debug/configz").body;
    for line in support::tls::telltales(&leaf.key) {
        assert!(!body.contains(&line), "/debug/configz shows the private key");
    }
    // A rotation arrives over the watch.
    let rotated = support::tls::TestCa::new("another CA").leaf("shop", &["shop.example.test"]);
    let next = api.put(&support::tls::secret("istio-system", "shop-cert", &rotated, None));
    support::process::wait_until(Instant::now() + WAIT, "the rotated Secret", &[mesh.process()], || {
        let source = served(&mesh).get("Secret/istio-system/shop-cert").cloned();
        if source == Some(format!("k8s:Secret/istio-system/shop-cert@{next}")) {
            Ok(())
        } else {
            Err(format!("{source:?}"))
        }
    });
}
