//! Operating meshpush as a person would: `meshpush proxy-status` and
//! `meshpush proxy-config` against the real binary with a real Envoy
//! connected, and the status page loaded in headless Chromium.
//!
//! Each test serves a small mesh of its own — one `echo` Service on a free
//! loopback port, a DestinationRule with a subset, and (for the page) a
//! broken file — to a sidecar Envoy in `INTERCEPTION_MODE: NONE`, whose
//! outbound listener binds `127.0.0.1:<that port>`. Nothing else on the
//! machine is touched.

use crate::support;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use meshpush::bootstrap::BootstrapOptions;
use support::browser;
use support::envoy::{Envoy, envoy_binary};
use support::meshpush::Meshpush;
use support::process::{free_port, wait_until};

const DEADLINE: Duration = Duration::from_secs(20);

/// The test mesh: `echo.ops` on `port`, one pod, a DestinationRule with `subsets`.
fn mesh_yaml(port: u16, subsets: &[&str]) -> String {
    let subsets: Vec<String> = subsets.iter().map(|s| format!("{{name: {s}, labels: {{version: {s}}}}}")).collect();
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: echo, namespace: ops}}\nspec:\n  selector: {{app: echo}}\n  ports: [{{name: http, port: {port}, targetPort: {port}}}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: echo-v1, namespace: ops, labels: {{app: echo, version: v1}}}}\nstatus: {{podIP: 127.0.0.51, phase: Running}}\n---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: echo, namespace: ops}}\nspec:\n  host: echo\n  subsets: [{}]\n",
        subsets.join(", ")
    )
}

/// Writes `text` to `file` with one rename, as an editor would.
fn replace(file: &Path, text: &str) {
    let staged = file.with_extension("new");
    fs::write(&staged, text).unwrap();
    fs::rename(&staged, file).unwrap();
}

/// A sidecar Envoy for workload `pod` at `ip` in namespace ops.
fn sidecar(mesh: &Meshpush, ip: &str, pod: &str) -> Envoy {
    let node = format!("sidecar~{ip}~{pod}.ops~ops.svc.cluster.local");
    let mut opts = BootstrapOptions::new(node, mesh.xds_addr().to_string());
    opts.admin_port = free_port();
    opts.labels = [("app".into(), "sleep".into())].into();
    opts.interception = "NONE".into();
    Envoy::start(&opts)
}

/// Runs the meshpush binary with `args`; its stdout, or a panic with stderr.
fn meshpush_cli(args: &[&str]) -> Result<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_meshpush")).args(args).output().expect("run meshpush");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("meshpush {args:?} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)))
    }
}

/// The row of `name` in a proxy-status table, split on runs of spaces.
fn status_row(table: &str, name: &str) -> Option<Vec<String>> {
    table
        .lines()
        .find(|l| l.starts_with(name))
        .map(|l| l.split("   ").map(|c| c.trim().to_string()).filter(|c| !c.is_empty()).collect())
}

#[test]
fn proxy_status_shows_a_converged_envoy_synced_and_proxy_config_lists_what_it_was_sent() {
    envoy_binary();
    let work = tempfile::tempdir().unwrap();
    let port = free_port();
    fs::write(work.path().join("mesh.yaml"), mesh_yaml(port, &["v1"])).unwrap();
    let mesh = Meshpush::start(work.path());
    let envoy = sidecar(&mesh, "127.0.0.52", "sleep-v1");
    let admin = mesh.admin_addr().to_string();
    let procs = [mesh.process(), envoy.process()];
    let listener = format!("0.0.0.0_{port}");

    wait_until(Instant::now() + DEADLINE, "Envoy to activate its outbound listener", &procs, || {
        envoy.has_active_listener(&listener)
    });
    let mut table = String::new();
    wait_until(Instant::now() + DEADLINE, "proxy-status to show the sidecar SYNCED on every type", &procs, || {
        table = meshpush_cli(&["proxy-status", "--admin", &admin])?;
        match status_row(&table, "sleep-v1.ops") {
            Some(row) if row[2..6] == ["SYNCED", "SYNCED", "SYNCED", "SYNCED"] => Ok(()),
            _ => Err(table.clone()),
        }
    });
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "CLUSTER", "CDS", "LDS", "EDS", "RDS", "ISTIOD", "VERSION"]);
    let row = status_row(&table, "sleep-v1.ops").unwrap();
    assert_eq!(row[1], "Kubernetes", "the proxy's cluster id: its node says none, so meshpush's own (Istio's default)");
    assert_eq!(row[6], format!("meshpush-{}", env!("CARGO_PKG_VERSION")));

    // proxy-config: the tables show what Envoy holds.
    let clusters = meshpush_cli(&["proxy-config", "clusters", "sleep-v1.ops", "--admin", &admin]).unwrap();
    let fqdn = "echo.ops.svc.cluster.local";
    let rows: Vec<Vec<&str>> = clusters.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    assert!(rows.contains(&vec![fqdn, &port.to_string(), "v1", "outbound", "EDS"]), "{clusters}");
    assert!(rows.contains(&vec![fqdn, &port.to_string(), "-", "outbound", "EDS"]), "{clusters}");
    assert!(rows.iter().any(|r| r[0] == "PassthroughCluster"), "{clusters}");
    let envoy_clusters: Vec<String> = envoy.config_section("ClustersConfigDump")["dynamic_active_clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cluster"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(envoy_clusters.len(), rows.len(), "one row per cluster Envoy has:\n{clusters}\n{envoy_clusters:?}");

    let listeners = meshpush_cli(&["proxy-config", "listeners", "sleep-v1.ops", "--admin", &admin]).unwrap();
    assert!(
        listeners
            .lines()
            .any(|l| l.starts_with(&listener) && l.contains("127.0.0.1") && l.contains(&format!("Route: {port}"))),
        "{listeners}"
    );
    let routes = meshpush_cli(&["proxy-config", "routes", "sleep-v1.ops", "--admin", &admin]).unwrap();
    assert!(routes.lines().any(|l| l.contains(&format!("outbound|{port}||{fqdn}"))), "{routes}");
    let endpoints = meshpush_cli(&["proxy-config", "endpoints", "sleep-v1.ops", "--admin", &admin]).unwrap();
    assert!(
        endpoints.lines().any(|l| l.starts_with(&format!("127.0.0.51:{port}")) && l.contains("HEALTHY")),
        "{endpoints}"
    );
    let json = meshpush_cli(&["proxy-config", "clusters", "sleep-v1.ops", "-o", "json", "--admin", &admin]).unwrap();
    let section: serde_json::Value = serde_json::from_str(&json).expect("-o json prints JSON");
    assert_eq!(section["@type"], "type.googleapis.com/envoy.admin.v3.ClustersConfigDump");
    assert_eq!(section["dynamic_active_clusters"].as_array().unwrap().len(), envoy_clusters.len());

    // An unknown proxy is an error, not an empty table.
    let err = meshpush_cli(&["proxy-config", "clusters", "nobody.ops", "--admin", &admin]).unwrap_err();
    assert!(err.contains("404") && err.contains("nobody.ops"), "{err}");
}

#[test]
fn status_page_shows_proxies_charts_and_problems_in_a_browser() {
    envoy_binary();
    browser::chromium_binary();
    let work = tempfile::tempdir().unwrap();
    let port = free_port();
    let mesh_file = work.path().join("mesh.yaml");
    fs::write(&mesh_file, mesh_yaml(port, &["v1"])).unwrap();
    fs::write(
        work.path().join("broken.yaml"),
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: broken, namespace: ops}\nspec:\n  hosts: [echo]\n  http:\n  - route:\n    - destination: {host: echo}\n      weight: -5\n",
    )
    .unwrap();
    let mesh = Meshpush::start(work.path());
    let envoy = sidecar(&mesh, "127.0.0.53", "sleep-v2");
    let admin = mesh.admin_addr();
    let procs = [mesh.process(), envoy.process()];
    wait_until(Instant::now() + DEADLINE, "Envoy to activate its outbound listener", &procs, || {
        envoy.has_active_listener(&format!("0.0.0.0_{port}"))
    });

    // A change the Envoy takes and ACKs: one convergence observation.
    replace(&mesh_file, &mesh_yaml(port, &["v1", "v2"]));
    wait_until(Instant::now() + DEADLINE, "a convergence observation in /metrics", &procs, || {
        let m = mesh.admin("/metrics").body;
        let count = m.lines().find_map(|l| l.strip_prefix("pilot_proxy_convergence_time_count ")).unwrap_or("0");
        if count.trim().parse::<u64>().unwrap_or(0) >= 1 { Ok(()) } else { Err(format!("count {count}")) }
    });
    let synced = || {
        let syncz: serde_json::Value = serde_json::from_str(&mesh.admin("/debug/syncz").body).unwrap();
        // A sidecar's listeners name no Secrets: every other type is synced.
        syncz[0]["types"].as_array().is_some_and(|t| {
            t.iter().filter(|t| t["type"] != "sds").all(|t| t["status"] == "SYNCED")
                && t.iter().any(|t| t["type"] == "sds" && t["status"] == "NOT SENT")
        })
    };
    wait_until(Instant::now() + DEADLINE, "the sidecar to be synced", &procs, synced);

    let url = format!("http://{admin}/");
    let dom = browser::dump_dom(&url);
    assert!(dom.contains("<title>meshpush status</title>"), "{dom}");
    let proxy_rows = dom.matches("<tr class=\"proxy\">").count();
    assert_eq!(proxy_rows, 1, "one row per connected proxy:\n{dom}");
    assert!(dom.contains("sidecar~127.0.0.53~sleep-v2.ops~ops.svc.cluster.local"), "{dom}");
    assert_eq!(dom.matches("<span class=\"state SYNCED\">SYNCED</span>").count(), 4, "{dom}");
    // The browser laid out all three charts with a size (set by the page's script).
    assert!(dom.contains("data-charts-drawn=\"3\""), "charts not drawn:\n{dom}");
    // The convergence histogram has a bar with a height.
    let conv = &dom[dom.find("id=\"convergence-chart\"").expect("convergence chart")..];
    let conv = &conv[..conv.find("</svg>").unwrap()];
    let heights: Vec<f64> = conv
        .split("class=\"bar conv\"")
        .skip(1)
        .filter_map(|rect| rect.split("height=\"").nth(1)?.split('"').next()?.parse().ok())
        .collect();
    assert_eq!(heights.len(), meshpush::metrics::CONVERGENCE_BUCKETS.len() + 1, "{conv}");
    assert!(heights.iter().any(|h| *h > 0.0), "no drawn bar: {heights:?}");
    let rate = &dom[dom.find("id=\"push-rate-chart\"").expect("push rate chart")..];
    assert!(rate[..rate.find("</svg>").unwrap()].contains("pushes</title>"), "push-rate bars");
    // The broken file is listed, with its reason.
    let problems = &dom[dom.find("id=\"problems\"").expect("problems list")..];
    assert!(problems.contains("broken.yaml") && problems.contains("-5"), "{problems}");

    let png = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/status-page.png");
    browser::screenshot(&url, &png, 1280, 1000);
    let size = fs::metadata(&png).unwrap().len();
    assert!(size > 10_000, "a screenshot of a drawn page is more than {size} bytes");
    eprintln!("status page screenshot: {}", png.display());
}

#[test]
fn status_page_escapes_text_from_proxies() {
    // A node id is whatever the client sends: it must reach the page as text.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let work = tempfile::tempdir().unwrap();
    fs::write(work.path().join("mesh.yaml"), mesh_yaml(free_port(), &["v1"])).unwrap();
    let mesh = Meshpush::start(work.path());
    let xds = mesh.xds_addr().to_string();
    let evil = "sidecar~127.0.0.54~<img src=x onerror=alert(1)>.ops~ops.svc.cluster.local";
    let _stream = rt.block_on(async {
        use envoy_types::pb::envoy::config::core::v3::Node;
        use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
        use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
        let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{xds}")).await.unwrap();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.send(DiscoveryRequest {
            type_url: meshpush::resource::TypeUrl::Cluster.as_str().into(),
            node: Some(Node { id: evil.into(), cluster: "<b>c</b>".into(), ..Default::default() }),
            ..Default::default()
        })
        .await
        .unwrap();
        let stream = client.stream_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx)).await.unwrap();
        (tx, stream)
    });
    wait_until(Instant::now() + DEADLINE, "the stream to be listed", &[mesh.process()], || {
        mesh.admin("/debug/connections").body.contains("onerror")
    });
    let html = mesh.admin("/").body;
    assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"), "{html}");
    assert!(!html.contains("<img"), "markup from a node id reached the page:\n{html}");
    assert!(html.contains("&lt;b&gt;c&lt;/b&gt;") && !html.contains("<b>c</b>"));
}

/// The admin endpoints run on threads of their own, never on the xDS
/// runtime's workers.
#[test]
fn the_admin_endpoints_have_a_runtime_of_their_own() {
    let dir = crate::support::scene::MeshDir::new();
    dir.write("mesh.yaml", &crate::support::manifests::service("shop", "web", 18111));
    let mesh = crate::support::meshpush::Meshpush::start(&dir.path());
    let pid = mesh.process().pid();
    let names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect();
    assert!(names.iter().any(|n| n.starts_with("meshpush-admin")), "threads: {names:?}");
    assert_eq!(mesh.admin("/ready").status, 200, "served from there");
}

/// `meshpush apply -f` and `meshpush delete` feed the registry API as
/// `kubectl` feeds an API server: a valid batch applies, an invalid one is
/// refused whole with each problem located in its file and document.
#[test]
fn apply_and_delete_from_the_command_line() {
    let dir = crate::support::scene::MeshDir::new();
    let mesh = crate::support::meshpush::Meshpush::start(&dir.path());
    let xds = mesh.xds_addr().to_string();
    let files = tempfile::tempdir().unwrap();
    let good = files.path().join("good.yaml");
    std::fs::write(
        &good,
        format!(
            "{}---\n{}",
            crate::support::manifests::service("shop", "web", 18112),
            crate::support::manifests::service("shop", "api", 18112)
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_meshpush")).args(args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (code, out) = run(&["apply", "-f", good.to_str().unwrap(), "--xds-addr", &xds]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("applied: 2 objects changed"), "{out}");
    let configz = || mesh.admin("/debug/configz").body;
    let deadline = || std::time::Instant::now() + std::time::Duration::from_secs(5);
    let has_api = || configz().contains("\"name\":\"api\"");
    crate::support::process::wait_until(deadline(), "the applied Service to be served", &[mesh.process()], has_api);

    let bad = files.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: Service\nmetadata: {name: db, namespace: shop}\nspec: {ports: [{name: tcp, port: 0}]}\n",
    )
    .unwrap();
    let (code, out) = run(&["apply", "-f", bad.to_str().unwrap(), "--xds-addr", &xds]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("refused, nothing applied")
            && out.contains("bad.yaml doc 0")
            && out.contains("spec.ports[0].port"),
        "{out}"
    );

    let (code, out) = run(&["delete", "Service", "shop/api", "--xds-addr", &xds]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("applied: 1 objects changed"), "{out}");
    crate::support::process::wait_until(deadline(), "the deleted Service to be gone", &[mesh.process()], || !has_api());
}
