//! End to end: meshpush serving examples/bookinfo to a real Envoy sidecar.
//!
//! A backend process stands in for each bookinfo pod at its loopback pod IP;
//! meshpush serves a copy of the example directory; an Envoy 1.40 sidecar for
//! productpage (INTERCEPTION_MODE NONE, so its outbound listener binds
//! 127.0.0.1:9080) takes its bootstrap from `meshpush::bootstrap::render`. The
//! test then checks what a user of the mesh would notice: where requests land,
//! that a routing edit takes effect within two seconds, and that Envoy rejected
//! nothing it was sent.

use crate::support;

use std::collections::BTreeSet;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::time::{Duration, Instant};

use meshpush::bootstrap::BootstrapOptions;
use support::backend::Backend;
use support::envoy::Section;
use support::envoy::{Envoy, envoy_binary};
use support::http::{self, Response};
use support::meshpush::Meshpush;
use support::process::{free_port, logs, wait_until_report};

/// Each bookinfo pod and its pod IP, as in examples/bookinfo/workloads.yaml.
const PODS: [(&str, Ipv4Addr); 6] = [
    ("productpage-v1", Ipv4Addr::new(127, 0, 0, 11)),
    ("details-v1", Ipv4Addr::new(127, 0, 0, 12)),
    ("reviews-v1", Ipv4Addr::new(127, 0, 0, 13)),
    ("reviews-v2", Ipv4Addr::new(127, 0, 0, 14)),
    ("reviews-v3", Ipv4Addr::new(127, 0, 0, 15)),
    ("ratings-v1", Ipv4Addr::new(127, 0, 0, 16)),
];

/// The bookinfo service port, which is also every pod's target port.
const PORT: u16 = 9080;

const NODE_ID: &str = "sidecar~127.0.0.20~productpage-v1.default~default.svc.cluster.local";

/// Where the sidecar's outbound listener for port 9080 binds in NONE mode.
const OUTBOUND: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), PORT);

/// The example copied into `dir`, YAML files only.
fn copy_example(dir: &Path) {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bookinfo");
    fs::create_dir_all(dir).unwrap();
    for entry in fs::read_dir(&example).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
    }
}

/// Sets the reviews VirtualService's v1/v3 split to `v1`/`v3` in `file`, the way
/// a user edits a manifest, and moves it into place with one rename so meshpush
/// never reads a half-written file.
fn set_reviews_weights(file: &Path, scratch: &Path, v1: i64, v3: i64) {
    let text = fs::read_to_string(file).unwrap();
    let mut docs: Vec<serde_yaml_ng::Value> =
        serde_yaml_ng::Deserializer::from_str(&text).map(|d| serde::Deserialize::deserialize(d).unwrap()).collect();
    let reviews = docs
        .iter_mut()
        .find(|d| d["kind"] == "VirtualService" && d["metadata"]["name"] == "reviews")
        .expect("reviews VirtualService in virtual-services.yaml");
    let http = reviews["spec"]["http"].as_sequence_mut().unwrap();
    let split = http.iter_mut().find(|r| r["name"] == "split").expect("the split route");
    for dest in split["route"].as_sequence_mut().unwrap() {
        let weight = match dest["destination"]["subset"].as_str() {
            Some("v1") => v1,
            Some("v3") => v3,
            other => panic!("unexpected subset {other:?} in the split route"),
        };
        dest["weight"] = weight.into();
    }
    let text: Vec<String> = docs.iter().map(|d| serde_yaml_ng::to_string(d).unwrap()).collect();
    let staged = scratch.join("virtual-services.yaml.new");
    fs::write(&staged, text.join("---\n")).unwrap();
    fs::rename(&staged, file).unwrap();
}

/// A GET through the sidecar's outbound listener with `Host: host`.
fn call(host: &str, headers: &[(&str, &str)]) -> std::io::Result<Response> {
    let mut all = vec![("host", host)];
    all.extend_from_slice(headers);
    http::get(OUTBOUND, "/bookinfo/e2e", &all)
}

/// The backend that answered, failing the test on anything but a 200 from a backend.
fn backend_for(host: &str, headers: &[(&str, &str)]) -> String {
    let r = call(host, headers).unwrap_or_else(|e| panic!("GET via 127.0.0.1:9080, Host {host}: {e}"));
    assert_eq!(r.status, 200, "Host {host} {headers:?}: {} {}", r.status, r.body);
    assert_eq!(r.header("x-request-path"), Some("/bookinfo/e2e"), "path not forwarded as sent: {r:?}");
    r.header("x-backend").unwrap_or_else(|| panic!("answer not from a backend: {r:?}")).to_string()
}

/// The backends that answered `n` requests.
fn backends_for(n: usize, host: &str, headers: &[(&str, &str)]) -> BTreeSet<String> {
    (0..n).map(|_| backend_for(host, headers)).collect()
}

#[test]
fn sidecar_routes_bookinfo_and_follows_a_weight_change() {
    // Install Envoy first: on a fresh machine that is the slow part, and it must
    // not eat into any deadline below.
    envoy_binary();
    TcpListener::bind(OUTBOUND)
        .unwrap_or_else(|e| panic!("{OUTBOUND} must be free for the sidecar's outbound listener: {e}"));

    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("config");
    copy_example(&config);
    let _backends: Vec<Backend> =
        PODS.iter().map(|(name, ip)| Backend::start(name, SocketAddr::from((*ip, PORT)))).collect();

    let mesh = Meshpush::start(&config);
    let mut opts = BootstrapOptions::new(NODE_ID, mesh.xds_addr().to_string());
    opts.admin_port = free_port();
    opts.labels = [("app".into(), "productpage".into()), ("version".into(), "v1".into())].into();
    opts.interception = "NONE".into();
    let envoy = Envoy::start(&opts);
    // On a timeout: meshpush's log tail, Envoy's, and the config_dump section the wait is about.
    let (mesh, envoy) = (&mesh, &envoy);
    let report = |section: Section| move || format!("{}{}", logs(&[mesh.process()]), envoy.report(section));

    wait_until_report(
        Instant::now() + Duration::from_secs(15),
        "listener 0.0.0.0_9080 active in the sidecar's config_dump",
        report(Section::Listeners),
        || envoy.has_active_listener("0.0.0.0_9080"),
    );
    // Routes and endpoints may land just after the listener.
    wait_until_report(
        Instant::now() + Duration::from_secs(10),
        "reviews to answer through the sidecar",
        report(Section::Routes),
        || match call("reviews", &[]) {
            Ok(r) if r.status == 200 => Ok(()),
            Ok(r) => Err(format!("{} {}", r.status, r.body.trim())),
            Err(e) => Err(e.to_string()),
        },
    );

    // meshpush's config dump prints what this Envoy holds as Envoy prints it.
    support::dump::assert_dump_matches_envoy(mesh, envoy, NODE_ID);

    // Without the header: the 50/50 split, and nothing else.
    for host in ["reviews", "reviews:9080"] {
        let seen = backends_for(40, host, &[]);
        let expected: BTreeSet<String> = ["reviews-v1", "reviews-v3"].map(String::from).into();
        assert_eq!(seen, expected, "Host {host}: 40 requests split 50/50 should reach exactly v1 and v3");
    }
    // jason always sees v2.
    for host in ["reviews", "reviews:9080"] {
        let seen = backends_for(20, host, &[("end-user", "jason")]);
        assert_eq!(seen, BTreeSet::from(["reviews-v2".to_string()]), "Host {host} with end-user: jason");
    }
    // An exact header match: another user falls through to the split.
    assert_ne!(backend_for("reviews", &[("end-user", "jason2")]), "reviews-v2");
    assert_eq!(backends_for(10, "ratings", &[]), BTreeSet::from(["ratings-v1".to_string()]));
    assert_eq!(backends_for(10, "details", &[]), BTreeSet::from(["details-v1".to_string()]));
    assert_eq!(backends_for(10, "productpage", &[]), BTreeSet::from(["productpage-v1".to_string()]));

    // Move all of the split to v3: within 2 s of the write, 20 requests in a row hit v3.
    set_reviews_weights(&config.join("virtual-services.yaml"), work.path(), 0, 100);
    let written = Instant::now();
    let what = "20 consecutive reviews requests to reach reviews-v3";
    wait_until_report(written + Duration::from_secs(2), what, report(Section::Routes), || {
        for i in 0..20 {
            match call("reviews", &[]) {
                Ok(r) if r.header("x-backend") == Some("reviews-v3") => {}
                Ok(r) => {
                    return Err(format!("request {i}: {} from {:?}", r.status, r.header("x-backend")));
                }
                Err(e) => return Err(format!("request {i}: {e}")),
            }
        }
        Ok(())
    });
    eprintln!("weight change served {:?} after the write", written.elapsed());
    // The header route is untouched by the edit.
    assert_eq!(backend_for("reviews", &[("end-user", "jason")]), "reviews-v2");

    // Envoy accepted everything it was sent.
    let stats = envoy.stat_values();
    let get = |name: &str| stats.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
    for name in ["cluster_manager.cds.update_rejected", "listener_manager.lds.update_rejected"] {
        assert_eq!(get(name), Some(0), "{name}\n{}", envoy.log_tail(80));
    }
    assert!(get("cluster_manager.cds.update_success").is_some_and(|n| n > 0), "no CDS update accepted");
    let rds_rejected: Vec<_> = stats
        .iter()
        .filter(|(n, v)| n.starts_with("http.") && n.contains(".rds.") && n.ends_with(".update_rejected") && *v > 0)
        .collect();
    assert!(rds_rejected.is_empty(), "RDS updates rejected: {rds_rejected:?}\n{}", envoy.log_tail(80));
}
