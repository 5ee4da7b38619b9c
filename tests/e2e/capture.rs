//! `meshpush iptables` for real: the rules written into a network
//! namespace of the test's own (a pod, with an address on a veth) by
//! Debian's iptables (installed by `scripts/install-iptables.sh` when
//! missing), read back with `iptables -C` and `iptables-save`, written
//! once however often the command runs, and all gone after `clean`; and
//! real traffic through a sidecar Envoy under those rules, both ways,
//! proven by the Envoy's stats, with the `istio-init` arguments `meshpush
//! inject` gives a Deployment.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::envoy::{Envoy, Section};
use crate::support::manifests::sidecar_node;
use crate::support::netns::NetNs;
use crate::support::process::{ChildGuard, scratch_dir};
use crate::support::scene::Scene;

/// The flags Istio's injector gives istio-init by default.
const INJECTOR_FLAGS: [&str; 16] = [
    "-p",
    "15001",
    "-z",
    "15006",
    "-u",
    "1337",
    "-m",
    "REDIRECT",
    "-i",
    "*",
    "-x",
    "",
    "-b",
    "*",
    "-d",
    "15090,15021,15020",
];

fn meshpush() -> &'static str {
    env!("CARGO_BIN_EXE_meshpush")
}

fn ensure_iptables() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-iptables.sh");
    let out = Command::new("bash").arg(&script).output().expect("run install-iptables.sh");
    assert!(out.status.success(), "no iptables for the capture tests: {}", String::from_utf8_lossy(&out.stderr));
}

/// `iptables-save` (or `ip6tables-save`) of the namespace, without its
/// comment lines (they carry the time).
fn saved(ns: &NetNs, program: &str) -> String {
    ns.ok(program, &[]).lines().filter(|l| !l.starts_with('#')).map(|l| format!("{l}\n")).collect()
}

/// Whether `iptables -t TABLE -C RULE…` finds the rule.
fn has(ns: &NetNs, table: &str, rule: &str) -> bool {
    let mut args = vec!["-t", table, "-C"];
    args.extend(rule.split_whitespace());
    ns.run("iptables", &args).status.success()
}

/// The arguments of the `istio-init` container `meshpush inject` gives
/// a Deployment whose pods carry `annotations` (they start `iptables`).
fn injected_capture_args(annotations: &str) -> Vec<String> {
    let dir = scratch_dir("inject");
    let manifest = dir.path().join("web.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: traffic}}\nspec:\n  \
             selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata:\n      labels: {{app: web}}\n      \
             annotations: {annotations}\n    spec:\n      containers: [{{name: web, image: web, ports: [{{containerPort: 8080}}]}}]\n"
        ),
    )
    .unwrap();
    let out = Command::new(meshpush()).args(["inject", "-f"]).arg(&manifest).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(text.trim_end().trim_end_matches("---")).unwrap();
    let init = &doc["spec"]["template"]["spec"]["initContainers"][0];
    assert_eq!(init["name"], "istio-init");
    init["args"].as_sequence().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect()
}

fn capture(ns: &NetNs, args: &[&str]) -> std::process::Output {
    let mut all = vec!["iptables"];
    all.extend_from_slice(args);
    ns.run(meshpush(), &all)
}

#[test]
fn the_injectors_rules_are_written_once_and_clean_leaves_nothing() {
    // meshpush's injector passes Istio's flags (and the group, which
    // istio-iptables defaults to the user).
    let mut istio: Vec<&str> = INJECTOR_FLAGS.to_vec();
    istio.splice(6..6, ["-g", "1337"]);
    assert_eq!(injected_capture_args("{}")[1..], istio.iter().map(|f| f.to_string()).collect::<Vec<_>>()[..]);
    ensure_iptables();
    let ns = NetNs::new("capture", "198.18.0.2/24");
    let before = saved(&ns, "iptables-save");
    let out = capture(&ns, &INJECTOR_FLAGS);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // Inbound to any port but the status ports goes to 15006, outbound to 15001, the proxy's own never.
    for rule in [
        "PREROUTING -p tcp -j ISTIO_INBOUND",
        "ISTIO_INBOUND -p tcp --dport 15021 -j RETURN",
        "ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT",
        "ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006",
        "OUTPUT -j ISTIO_OUTPUT",
        "ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN",
        "ISTIO_OUTPUT -j ISTIO_REDIRECT",
        "ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001",
    ] {
        assert!(has(&ns, "nat", rule), "no `{rule}` in\n{}", saved(&ns, "iptables-save"));
    }
    // Exactly the rules `--dry-run` prints, no more.
    let mut dry = INJECTOR_FLAGS.to_vec();
    dry.push("--dry-run");
    let printed = String::from_utf8(capture(&ns, &dry).stdout).unwrap();
    let rules = |text: &str| text.lines().filter(|l| l.starts_with("-A ") || l.starts_with("-I ")).count();
    let installed = saved(&ns, "iptables-save");
    assert_eq!(rules(&installed), rules(&printed), "installed:\n{installed}\nprinted:\n{printed}");
    assert!(printed.starts_with("* nat\n-N ISTIO_INBOUND\n"), "{printed}");

    // Again: nothing changes.
    let out = capture(&ns, &INJECTOR_FLAGS);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(saved(&ns, "iptables-save"), installed, "a second run wrote rules");

    // Other flags over them: refused, nothing touched.
    let mut other = INJECTOR_FLAGS.to_vec();
    other[15] = "15090";
    let out = capture(&ns, &other);
    assert_eq!(out.status.code(), Some(1));
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(why.contains("differ") && why.contains("meshpush iptables clean"), "{why}");
    assert_eq!(saved(&ns, "iptables-save"), installed);

    // Clean: back to what the namespace had; cleaning again is fine.
    let mut clean = vec!["clean"];
    clean.extend_from_slice(&INJECTOR_FLAGS);
    for _ in 0..2 {
        let out = capture(&ns, &clean);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let after = saved(&ns, "iptables-save");
    assert!(!after.contains("ISTIO"), "{after}");
    assert_eq!(rules(&after), rules(&before));
}

#[test]
fn tproxy_marks_and_routes_are_set_and_removed() {
    ensure_iptables();
    let ns = NetNs::new("tproxy", "198.18.0.2/24");
    let flags = ["-m", "TPROXY", "-b", "*", "-i", "*", "-d", "15090,15021,15020"];
    let out = capture(&ns, &flags);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(has(&ns, "mangle", "PREROUTING -p tcp -j ISTIO_INBOUND"));
    assert!(has(
        &ns,
        "mangle",
        "ISTIO_TPROXY ! -d 127.0.0.1/32 -p tcp -j TPROXY --tproxy-mark 1337/0xffffffff --on-port 15006"
    ));
    assert!(has(&ns, "mangle", "OUTPUT -p tcp -m connmark --mark 1337 -j CONNMARK --restore-mark"));
    // Marked packets are delivered locally, through table 133.
    let rules = ns.ok("ip", &["rule", "show"]);
    assert!(rules.contains("fwmark 0x539 lookup 133"), "{rules}");
    assert!(ns.ok("ip", &["route", "show", "table", "133"]).contains("local default dev lo"));

    let mut clean = vec!["clean"];
    clean.extend_from_slice(&flags);
    let out = capture(&ns, &clean);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!saved(&ns, "iptables-save").contains("ISTIO"));
    assert!(!has(&ns, "mangle", "OUTPUT -p tcp -m connmark --mark 1337 -j CONNMARK --restore-mark"), "a mark left");
    assert!(!ns.ok("ip", &["rule", "show"]).contains("lookup 133"));
}

#[test]
fn an_ipv6_pod_gets_ip6tables_rules_too() {
    ensure_iptables();
    let ns = NetNs::new("ipv6", "fd00::2/64");
    let out = capture(&ns, &INJECTOR_FLAGS);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v6 = saved(&ns, "ip6tables-save");
    assert!(v6.contains("-A ISTIO_OUTPUT -s ::6/128 -o lo -j RETURN"), "{v6}");
    assert!(v6.contains("-A ISTIO_OUTPUT -d ::1/128 -j RETURN"), "{v6}");
    assert!(saved(&ns, "iptables-save").contains("ISTIO_OUTPUT"), "IPv4 rules as well");
    // The proxy's inbound passthrough binds ::6.
    assert!(ns.ok("ip", &["-6", "addr", "show", "dev", "lo"]).contains("::6/128"));
    let mut clean = vec!["clean"];
    clean.extend_from_slice(&INJECTOR_FLAGS);
    assert!(capture(&ns, &clean).status.success());
    assert!(!saved(&ns, "ip6tables-save").contains("ISTIO"));
}

#[test]
fn bad_flags_are_refused_naming_them() {
    let cases: [(&[&str], &str); 4] = [
        (&["-m", "NONE", "--dry-run"], "-m \"NONE\""),
        (&["-b", "80,http", "--dry-run"], "\"http\" is not a port"),
        (&["-i", "10.0.0.0/40", "--dry-run"], "-i: \"10.0.0.0/40\" is not a CIDR"),
        (&["-x", "*", "--dry-run"], "-x \"*\""),
    ];
    for (flags, says) in cases {
        let mut args = vec!["iptables"];
        args.extend_from_slice(flags);
        let out = Command::new(meshpush()).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        let why = String::from_utf8_lossy(&out.stderr);
        assert!(why.contains(says), "{flags:?}: {why}");
    }
}

/// A plain HTTP server on `addr` inside `ns` (Python's, run as root: not
/// the proxy's group, so its traffic is captured as an application's).
fn app(ns: &NetNs, name: &str, port: u16) -> ChildGuard {
    let port = port.to_string();
    let args = ["netns", "exec", ns.name(), "python3", "-m", "http.server", &port, "--bind", POD_IP];
    let mut guard = ChildGuard::spawn(name, scratch_dir(name), Path::new("ip"), args);
    let url = format!("http://{POD_IP}:{port}/");
    guard.wait_ready(Instant::now() + DEADLINE, "the app to answer", || {
        ns.run("curl", &["-s", "-o", "/dev/null", "--max-time", "2", &url]).status.success()
    });
    guard
}

/// `curl` from `ns`: the status line and headers, or why it failed.
fn curl(ns: &NetNs, url: &str, host: Option<&str>) -> Result<String, String> {
    let host = host.map(|h| format!("host: {h}"));
    let mut args = vec!["-s", "-o", "/dev/null", "-D", "-", "--max-time", "5"];
    if let Some(h) = &host {
        args.extend(["-H", h]);
    }
    args.push(url);
    let out = ns.run("curl", &args);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("curl {url}: {out:?}"))
    }
}

const POD_IP: &str = "198.18.0.2";

/// Whether a response head is a 200 (the app's own HTTP/1.0, or Envoy's HTTP/1.1).
fn ok(head: &str) -> bool {
    head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200")
}
const DEADLINE: Duration = Duration::from_secs(20);

/// The pod `web-1` of service `web` (virtual IP 10.96.0.10, port 80 to the
/// app's 8080), and a VirtualService that marks what it routes.
fn traffic_mesh() -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: web, namespace: traffic}}
spec:
  clusterIP: 10.96.0.10
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: web-1, namespace: traffic, labels: {{app: web}}}}
spec:
  containers: [{{name: app, ports: [{{name: http, containerPort: 8080}}]}}]
status: {{podIP: {POD_IP}, phase: Running}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: web, namespace: traffic}}
spec:
  hosts: [web.traffic.svc.cluster.local]
  http:
  - headers: {{response: {{add: {{x-routed-by: virtual-service}}}}}}
    route: [{{destination: {{host: web.traffic.svc.cluster.local}}}}]
"
    )
}

#[test]
fn captured_traffic_goes_through_the_sidecar_both_ways_and_clean_sends_it_straight() {
    ensure_iptables();
    let pod = NetNs::new("traffic", &format!("{POD_IP}/24"));
    let client = pod.peer("client", "198.18.0.1/24");
    // The app's declared port, an undeclared one, and one capture leaves
    // alone. (Started before the pod has a default route: Python looks its
    // own name up when it binds, which fails fast only without one.)
    let _apps = [app(&pod, "app-8080", 8080), app(&pod, "app-8082", 8082), app(&pod, "app-9090", 9090)];
    pod.ok("ip", &["route", "add", "default", "via", "198.18.0.1", "dev", "eth0"]);
    let mut scene = Scene::start_unix(&[("mesh.yaml", &traffic_mesh())], &[]);
    let mut opts = scene.sidecar(&sidecar_node(POD_IP, "web-1", "traffic"), &[("app", "web")]);
    opts.interception = "REDIRECT".into();
    scene.keep_envoy(Envoy::start_in(&pod, "traffic-sidecar", &opts));
    let envoy = scene.envoy("traffic-sidecar");
    scene.wait(DEADLINE, "the sidecar's capture listeners", Section::Listeners, || {
        let active = envoy.listener_names("active_state");
        if active.iter().any(|l| l == "virtualInbound") && active.iter().any(|l| l == "0.0.0.0_80") {
            Ok(())
        } else {
            Err(format!("{active:?}"))
        }
    });
    // What `meshpush inject` gives the Deployment's pods, 9090 excluded by
    // its annotation: istio-init runs `meshpush iptables` with these.
    let injected = injected_capture_args("{traffic.sidecar.istio.io/excludeInboundPorts: \"9090\"}");
    assert_eq!(injected[0], "iptables");
    assert!(injected.windows(2).any(|w| w == ["-d", "15090,15021,9090,15020"]), "{injected:?}");
    let flags: Vec<&str> = injected[1..].iter().map(String::as_str).collect();
    let out = capture(&pod, &flags);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stat = |name: &str| envoy.stat(name).unwrap_or(0);
    const INBOUND: &str = "cluster.inbound|8080||.upstream_cx_total";
    const PASSTHROUGH: &str = "cluster.InboundPassthroughCluster.upstream_cx_total";

    // Outbound: the app's plain request to the service's virtual IP is
    // captured, routed by the VirtualService, and (to its own pod) comes
    // back in through the inbound listener, whose connection from
    // 127.0.0.6 reaches the app without being captured again.
    let inbound_before = stat(INBOUND);
    let answer = curl(&pod, "http://10.96.0.10/", Some("web.traffic.svc.cluster.local")).unwrap();
    assert!(ok(&answer), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("x-routed-by: virtual-service"),
        "not routed by the sidecar: {answer}"
    );
    assert!(stat("cluster.outbound|80||web.traffic.svc.cluster.local.upstream_rq_total") >= 1);
    assert!(stat(INBOUND) > inbound_before, "the own-pod call did not come in through the sidecar");

    // Inbound from outside the pod: through the sidecar's inbound listener.
    let inbound_before = stat(INBOUND);
    let answer = curl(&client, &format!("http://{POD_IP}:8080/"), None).unwrap();
    assert!(ok(&answer), "{answer}");
    assert!(stat(INBOUND) > inbound_before, "inbound to 8080 bypassed the sidecar");
    // A port the workload does not declare: through the sidecar, no loop.
    let answer = curl(&client, &format!("http://{POD_IP}:8082/"), None).unwrap();
    assert!(ok(&answer), "{answer}");
    assert!(stat(PASSTHROUGH) >= 1, "the undeclared port bypassed the sidecar");
    // An excluded port: straight to the app.
    let (inbound_before, passthrough_before) = (stat(INBOUND), stat(PASSTHROUGH));
    let answer = curl(&client, &format!("http://{POD_IP}:9090/"), None).unwrap();
    assert!(answer.starts_with("HTTP/1.0 200"), "the app answers itself (Python's HTTP/1.0): {answer}");
    assert_eq!(
        (stat(INBOUND), stat(PASSTHROUGH)),
        (inbound_before, passthrough_before),
        "9090 went through the sidecar"
    );

    // Clean: traffic goes straight to the app, and no rule is left.
    let mut clean = vec!["clean"];
    clean.extend_from_slice(&flags);
    assert!(capture(&pod, &clean).status.success());
    assert!(!saved(&pod, "iptables-save").contains("ISTIO"));
    let inbound_before = stat(INBOUND);
    let answer = curl(&client, &format!("http://{POD_IP}:8080/"), None).unwrap();
    assert!(ok(&answer), "{answer}");
    assert_eq!(stat(INBOUND), inbound_before, "after clean, 8080 still went through the sidecar");
}

#[test]
fn under_tproxy_inbound_traffic_reaches_the_app_through_the_sidecar_from_the_clients_own_address() {
    ensure_iptables();
    let pod = NetNs::new("tproxy-traffic", &format!("{POD_IP}/24"));
    let client = pod.peer("tproxy-client", "198.18.0.1/24");
    let app = app(&pod, "tproxy-app-8080", 8080);
    pod.ok("ip", &["route", "add", "default", "via", "198.18.0.1", "dev", "eth0"]);
    let mut scene = Scene::start_unix(&[("mesh.yaml", &traffic_mesh())], &[]);
    let mut opts = scene.sidecar(&sidecar_node(POD_IP, "web-1", "traffic"), &[("app", "web")]);
    opts.interception = "TPROXY".into();
    // As Istio runs the proxy under TPROXY: root, group 1337.
    scene.keep_envoy(Envoy::start_in_as(&pod, "tproxy-sidecar", &opts, 0));
    let envoy = scene.envoy("tproxy-sidecar");
    scene.wait(DEADLINE, "the sidecar's transparent inbound listener", Section::Listeners, || {
        let active = envoy.listener_names("active_state");
        if active.iter().any(|l| l == "virtualInbound") { Ok(()) } else { Err(format!("{active:?}")) }
    });
    // What `meshpush inject` gives a pod that asks for TPROXY.
    let injected = injected_capture_args("{sidecar.istio.io/interceptionMode: TPROXY}");
    assert!(injected.windows(2).any(|w| w == ["-m", "TPROXY"]), "{injected:?}");
    let flags: Vec<&str> = injected[1..].iter().map(String::as_str).collect();
    let out = capture(&pod, &flags);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    const INBOUND: &str = "cluster.inbound|8080||.upstream_cx_total";
    let before = envoy.stat(INBOUND).unwrap_or(0);
    let answer = curl(&client, &format!("http://{POD_IP}:8080/"), None).unwrap();
    assert!(ok(&answer), "{answer}");
    assert!(envoy.stat(INBOUND).unwrap_or(0) > before, "inbound to 8080 bypassed the sidecar");
    // The app saw the client's own address (Python logs it): the sidecar
    // made its connection from there, as TPROXY's original source does.
    crate::support::process::wait_until(
        Instant::now() + DEADLINE,
        "the app's log to show the client's address",
        &[&app],
        || app.log_tail(20).lines().any(|l| l.starts_with("198.18.0.1 ")),
    );

    let mut clean = vec!["clean"];
    clean.extend_from_slice(&flags);
    assert!(capture(&pod, &clean).status.success());
    assert!(!saved(&pod, "iptables-save").contains("ISTIO"));
}
