//! `serve --mesh-config FILE`: Istio's mesh config read at startup, the
//! fields meshpush applies applied (a flag over the file's value), every
//! other field reported with its path on `/debug/configz` and in the log,
//! and a broken file refused with its line; then followed while serving:
//! an edit is served, a broken edit keeps the last good mesh config and
//! says why until mended. `meshNetworks` is read and followed beside it.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support;
use support::meshpush::Meshpush;

fn bookinfo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/bookinfo"))
}

#[test]
fn the_mesh_config_applies_with_flags_over_it_and_reports_the_rest() {
    let dir = tempfile::TempDir::new().unwrap();
    let file = dir.path().join("mesh");
    // A field applied at injection, a removed Mixer field, and the fields meshpush applies.
    std::fs::write(
        &file,
        "enablePrometheusMerge: false\nmixerCheckServer: istio-policy:15004\ntrustDomain: example.org\n\
         rootNamespace: mesh-root\ningressControllerMode: \"OFF\"\n",
    )
    .unwrap();
    let file_arg = file.display().to_string();
    let mesh = Meshpush::start_with_flags(bookinfo(), &["--mesh-config", &file_arg, "--root-namespace", "flag-root"]);
    let configz: Value = serde_json::from_str(&mesh.admin("/debug/configz").body).expect("JSON");
    let served = &configz["mesh"];
    assert_eq!(served["trustDomain"], "example.org", "{served}");
    assert_eq!(served["rootNamespace"], "flag-root", "the flag wins over the file: {served}");
    assert_eq!(served["ingress"]["mode"], "OFF", "{served}");
    let problems: Vec<(String, String)> = configz["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["file"] == file_arg.as_str())
        .map(|p| (p["path"].as_str().unwrap().to_string(), p["message"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(
        problems,
        vec![
            (
                "enablePrometheusMerge".to_string(),
                "not applied by meshpush yet: served as if it were unset (Istio's default)".to_string()
            ),
            ("mixerCheckServer".to_string(), "Istio removed this field and ignores it (Mixer is gone)".to_string()),
        ]
    );
    assert!(mesh.log().contains("enablePrometheusMerge: not applied by meshpush yet"), "{}", mesh.log_tail(20));
}

#[test]
fn a_broken_mesh_config_stops_the_server_naming_the_line() {
    let dir = tempfile::TempDir::new().unwrap();
    let file = dir.path().join("mesh");
    std::fs::write(&file, "trustDomain: example.org\n  rootNamespace: [\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_meshpush"))
        .args(["serve", "--config"])
        .arg(bookinfo())
        .arg("--mesh-config")
        .arg(&file)
        .args(["--xds-addr", &support::process::free_addr().to_string()])
        .args(["--admin-addr", &support::process::free_addr().to_string()])
        .output()
        .expect("meshpush runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--mesh-config") && stderr.contains("line 2"), "{stderr}");
}

/// `/debug/configz` as JSON.
fn configz(mesh: &Meshpush) -> Value {
    serde_json::from_str(&mesh.admin("/debug/configz").body).expect("JSON")
}

#[test]
fn an_edit_of_the_mesh_config_is_served_and_a_broken_one_keeps_the_last_good() {
    let dir = tempfile::TempDir::new().unwrap();
    let file = dir.path().join("mesh");
    std::fs::write(&file, "rootNamespace: first\n").unwrap();
    let file_arg = file.display().to_string();
    let mesh = Meshpush::start_with_flags(bookinfo(), &["--mesh-config", &file_arg]);
    assert_eq!(configz(&mesh)["mesh"]["rootNamespace"], "first");
    let deadline = || Instant::now() + Duration::from_secs(10);

    // An editor's save: written to a new file, renamed over the old one.
    let edit = |text: &str| {
        let tmp = dir.path().join(".mesh.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &file).unwrap();
    };
    edit("rootNamespace: second\ningressControllerMode: \"OFF\"\n");
    support::process::wait_until(deadline(), "the edited mesh config to be served", &[mesh.process()], || {
        let served = configz(&mesh)["mesh"].clone();
        if served["rootNamespace"] == "second" && served["ingress"]["mode"] == "OFF" {
            Ok(())
        } else {
            Err(served.to_string())
        }
    });
    assert!(mesh.log().contains("mesh config changed: a full push follows"), "{}", mesh.log_tail(20));

    edit("rootNamespace: [\n");
    support::process::wait_until(deadline(), "the broken edit to be reported", &[mesh.process()], || {
        let configz = configz(&mesh);
        let reported = configz["problems"].as_array().unwrap().iter().any(|p| {
            p["file"] == file_arg.as_str()
                && p["severity"] == "error"
                && p["message"].as_str().unwrap().contains("the last good mesh config stays served")
        });
        if reported { Ok(()) } else { Err(configz["problems"].to_string()) }
    });
    assert_eq!(configz(&mesh)["mesh"]["rootNamespace"], "second", "the last good mesh config stays");

    edit("rootNamespace: third\n");
    support::process::wait_until(deadline(), "the mended mesh config to be served", &[mesh.process()], || {
        let configz = configz(&mesh);
        let clean = configz["problems"].as_array().unwrap().iter().all(|p| p["file"] != file_arg.as_str());
        if configz["mesh"]["rootNamespace"] == "third" && clean { Ok(()) } else { Err(configz["mesh"].to_string()) }
    });
}

/// Istio's `istio` ConfigMap (`istio-REV` for a revision) in `istio-system`, holding `mesh`.
fn configmap(name: &str, mesh: &str) -> String {
    let mesh: String = mesh.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: istio-system\ndata:\n  mesh: |\n{mesh}"
    )
}

/// Whether the snapshot `mesh` serves holds a VirtualService `shop/NAME`.
fn serves_virtual_service(mesh: &Meshpush, name: &str) -> bool {
    configz(mesh)["objects"]
        .as_array()
        .unwrap()
        .iter()
        .any(|o| o["kind"] == "VirtualService" && o["namespace"] == "shop" && o["name"] == name)
}

/// With Kubernetes and no file, the mesh config is the `mesh` key of
/// Istio's ConfigMap, read through the API server (the stand-in) and
/// followed; a revision's server reads `istio-REV` and leaves the objects
/// labelled for another revision; a ConfigMap without its `mesh` key, or
/// none at all, serves Istio's defaults and says so.
#[test]
fn the_istio_configmap_is_read_and_followed_and_a_revision_reads_its_own() {
    use support::kube_api::KubeApi;
    let api = KubeApi::start();
    api.put(&configmap("istio", "rootNamespace: first\naccessLogFile: /dev/stdout\n"));
    api.put(&configmap("istio-canary", "rootNamespace: canary-root\n"));
    let route = |name: &str, revision: Option<&str>| {
        let labels = revision.map(|r| format!("\n  labels:\n    istio.io/rev: {r}")).unwrap_or_default();
        format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: shop{labels}\n\
             spec:\n  hosts: [web]\n  http:\n  - route:\n    - destination:\n        host: web\n"
        )
    };
    api.put(&route("everyones", None));
    api.put(&route("canarys", Some("canary")));
    api.put(&route("stables", Some("stable")));
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(kubeconfig.path(), api.kubeconfig()).unwrap();

    let default = Meshpush::start_kube(kubeconfig.path(), &[]);
    let canary = Meshpush::start_kube(kubeconfig.path(), &["--revision", "canary"]);
    let deadline = || Instant::now() + Duration::from_secs(10);
    let wait_root = |mesh: &Meshpush, root: &str| {
        support::process::wait_until(deadline(), &format!("rootNamespace {root}"), &[mesh.process()], || {
            let served = configz(mesh)["mesh"].clone();
            if served["rootNamespace"] == root { Ok(()) } else { Err(served.to_string()) }
        });
    };
    // Read at startup: served from the first snapshot on.
    assert_eq!(configz(&default)["mesh"]["rootNamespace"], "first");
    assert_eq!(configz(&default)["mesh"]["accessLog"]["file"], "/dev/stdout");
    assert_eq!(configz(&canary)["mesh"]["rootNamespace"], "canary-root", "a revision reads istio-canary");
    for name in ["everyones", "canarys", "stables"] {
        assert!(serves_virtual_service(&default, name), "a server without a revision reads every object: {name}");
    }
    assert!(serves_virtual_service(&canary, "everyones") && serves_virtual_service(&canary, "canarys"));
    assert!(!serves_virtual_service(&canary, "stables"), "another revision's object is not served");

    // Followed: an edit is served, a relabelled object leaves the canary.
    api.put(&configmap("istio", "rootNamespace: second\n"));
    wait_root(&default, "second");
    api.put(&route("canarys", Some("stable")));
    support::process::wait_until(deadline(), "the relabelled object to leave", &[canary.process()], || {
        if serves_virtual_service(&canary, "canarys") { Err("still served".to_string()) } else { Ok(()) }
    });

    // Without its `mesh` key: Istio's defaults, and a word on /debug/configz.
    api.put(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: istio, namespace: istio-system}\n\
         data: {meshNetworks: 'networks: {}'}\n",
    );
    wait_root(&default, "istio-system");
    let problems = configz(&default)["problems"].to_string();
    assert!(problems.contains("k8s:ConfigMap/istio-system/istio") && problems.contains("no `mesh` key"), "{problems}");
    api.put(&configmap("istio", "rootNamespace: back\n"));
    wait_root(&default, "back");
    assert!(!configz(&default)["problems"].to_string().contains("no `mesh` key"));
    // Gone: Istio's defaults too, as istiod runs without one; said in the log.
    api.delete("ConfigMap", "istio-system", "istio");
    wait_root(&default, "istio-system");
    assert!(default.log().contains("no ConfigMap k8s:ConfigMap/istio-system/istio"), "{}", default.log_tail(10));
}

/// The addresses of the network gateways `/debug/configz` shows.
fn gateways(mesh: &Meshpush) -> Vec<String> {
    let configz = configz(mesh);
    let listed = configz["networks"]["gateways"].as_array().cloned().unwrap_or_default();
    listed.iter().map(|g| format!("{}:{}", g["address"].as_str().unwrap_or(""), g["port"])).collect()
}

/// `meshNetworks` is read beside the mesh config, from `--mesh-networks`
/// or the ConfigMap's `meshNetworks` key, and followed: an edit is served,
/// a broken one keeps the last good networks and says where it is broken.
#[test]
fn mesh_networks_are_read_from_their_file_or_the_configmap_and_followed() {
    let dir = tempfile::TempDir::new().unwrap();
    let (file, networks) = (dir.path().join("mesh"), dir.path().join("meshNetworks"));
    std::fs::write(&file, "rootNamespace: istio-system\n").unwrap();
    let doc = |ip: &str, port: &str| {
        format!(
            "networks:\n  net-a:\n    endpoints: [{{fromRegistry: Kubernetes}}]\n    gateways: [{{address: {ip}, port: {port}}}]\n"
        )
    };
    std::fs::write(&networks, doc("192.0.2.1", "15443")).unwrap();
    let (file_arg, networks_arg) = (file.display().to_string(), networks.display().to_string());
    let mesh = Meshpush::start_with_flags(bookinfo(), &["--mesh-config", &file_arg, "--mesh-networks", &networks_arg]);
    assert_eq!(gateways(&mesh), ["192.0.2.1:15443"]);
    let deadline = || Instant::now() + Duration::from_secs(10);
    let edit = |text: String| {
        let tmp = dir.path().join(".meshNetworks.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &networks).unwrap();
    };
    edit(doc("192.0.2.2", "15443"));
    support::process::wait_until(deadline(), "the edited networks to be served", &[mesh.process()], || {
        let served = gateways(&mesh);
        if served == ["192.0.2.2:15443"] { Ok(()) } else { Err(format!("{served:?}")) }
    });
    edit(doc("192.0.2.3", "0"));
    support::process::wait_until(deadline(), "the broken networks to be reported", &[mesh.process()], || {
        let problems = configz(&mesh)["problems"].to_string();
        if problems.contains("networks.net-a.gateways[0].port") { Ok(()) } else { Err(problems) }
    });
    assert_eq!(gateways(&mesh), ["192.0.2.2:15443"], "the last good networks stay");

    // From Kubernetes: the ConfigMap's key, followed.
    use support::kube_api::KubeApi;
    let api = KubeApi::start();
    let configmap = |ip: &str| {
        let networks: String = doc(ip, "15443").lines().map(|l| format!("    {l}\n")).collect();
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: istio, namespace: istio-system}}\n\
             data:\n  mesh: |\n    rootNamespace: istio-system\n  meshNetworks: |\n{networks}"
        )
    };
    api.put(&configmap("198.51.100.1"));
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(kubeconfig.path(), api.kubeconfig()).unwrap();
    let kube = Meshpush::start_kube(kubeconfig.path(), &[]);
    assert_eq!(gateways(&kube), ["198.51.100.1:15443"]);
    api.put(&configmap("198.51.100.2"));
    support::process::wait_until(deadline(), "the ConfigMap's new networks", &[kube.process()], || {
        let served = gateways(&kube);
        if served == ["198.51.100.2:15443"] { Ok(()) } else { Err(format!("{served:?}")) }
    });
}
