//! End to end: the control plane dies and comes back.
//!
//! A sidecar and an ingress gateway carry steady traffic to `ledger`
//! (namespace `shop`, service port 18109, gateway port 18119 on 127.0.0.1).
//! meshpush is killed with SIGKILL: both Envoys notice the lost stream and keep
//! serving their last configuration, and not one request fails. meshpush is
//! started again on the same xDS address, as a supervisor would: both Envoys
//! reconnect, and a routing change made after the restart reaches both.
//! It runs twice: SotW, and delta xDS (ports 18113 and 18123, 127.0.113.0/24).

use crate::support;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use meshpush::serve::ListenAddr;
use support::envoy::Section;
use support::manifests::{docs, gateway, pod, router_node, service, sidecar_node, subsets};
use support::scene::Scene;
use support::traffic::{Request, Traffic};

/// One rule for the mesh and the gateway, all of it to `subset`.
fn ledger_route(subset: &str) -> String {
    format!(
        "\
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: ledger
  namespace: shop
spec:
  hosts:
  - ledger.shop.svc.cluster.local
  - ledger.example.test
  gateways:
  - mesh
  - istio-system/edge
  http:
  - route:
    - destination:
        host: ledger.shop.svc.cluster.local
        subset: {subset}
"
    )
}

/// The ledger service on `port` in namespace `shop`, its pods ledger-v1
/// and ledger-v2 at `NET.2` and `NET.3` with their subsets: the documents,
/// and the backends (name, address) that play the pods.
fn ledger(net: &str, port: u16) -> (Vec<String>, Vec<(String, String)>) {
    let ip = |host: u8| format!("{net}.{host}");
    let documents = vec![
        service("shop", "ledger", port),
        pod("shop", "ledger-v1", &ip(2), &[("app", "ledger"), ("version", "v1")], port),
        pod("shop", "ledger-v2", &ip(3), &[("app", "ledger"), ("version", "v2")], port),
        subsets("shop", "ledger", &["v1", "v2"]),
    ];
    let backends =
        vec![("ledger-v1".into(), format!("{}:{port}", ip(2))), ("ledger-v2".into(), format!("{}:{port}", ip(3)))];
    (documents, backends)
}

fn borrowed(pairs: &[(String, String)]) -> Vec<(&str, &str)> {
    pairs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect()
}

/// `Ok` when every Envoy's ADS stream is up (`connected`) or down.
fn all_connected(scene: &Scene, connected: bool) -> Result<(), String> {
    let states: Vec<(String, bool)> = scene.envoys().iter().map(|e| (e.name().to_string(), e.connected())).collect();
    if states.iter().all(|(_, c)| *c == connected) { Ok(()) } else { Err(format!("connected: {states:?}")) }
}

#[test]
fn envoys_serve_through_a_control_plane_crash_and_resync_after_restart() {
    crash_and_restart(18109, 18119, false);
}

/// The same with both Envoys on delta xDS (`DELTA_GRPC`): on reconnect they
/// send `initial_resource_versions`.
#[test]
fn envoys_serve_through_a_control_plane_crash_and_resync_after_restart_over_delta() {
    crash_and_restart(18113, 18123, true);
}

/// The scenario on service port `port` and gateway port `gateway_port`,
/// addresses 127.0.N.0/24 (N = port - 18000).
fn crash_and_restart(port: u16, gateway_port: u16, delta: bool) {
    let net = format!("127.0.{}", port - 18000);
    let ip = |host: u8| format!("{net}.{host}");
    let (mut documents, backends) = ledger(&net, port);
    documents.push(gateway("istio-system", "edge", "edge", gateway_port, &["ledger.example.test"]));
    let mesh = docs(&documents);
    let mut scene =
        Scene::start(&[("mesh.yaml", &mesh), ("ledger-vs.yaml", &ledger_route("v1"))], &borrowed(&backends));
    let mut opts = scene.sidecar(&sidecar_node(&ip(9), "client", "shop"), &[("app", "client")]);
    opts.delta = delta;
    scene.add_envoy("client", &opts);
    let mut opts = scene.sidecar(&router_node("127.0.0.1", "edge-1", "istio-system"), &[("istio", "edge")]);
    opts.delta = delta;
    scene.add_envoy("edge", &opts);

    let via_sidecar = Request::new(SocketAddr::from(([127, 0, 0, 1], port)), "ledger");
    let via_gateway = Request::new(SocketAddr::from(([127, 0, 0, 1], gateway_port)), "ledger.example.test");
    for request in [&via_sidecar, &via_gateway] {
        scene.wait(Duration::from_secs(15), &format!("{} to reach ledger-v1", request.target), Section::Routes, || {
            request.all_answered_by(5, &["ledger-v1"])
        });
    }
    for envoy in scene.envoys() {
        assert_eq!(envoy.ads_api_type(), if delta { "DELTA_GRPC" } else { "GRPC" }, "{}", envoy.name());
    }
    let traffic = [Traffic::start(via_sidecar.clone()), Traffic::start(via_gateway.clone())];
    scene.wait(Duration::from_secs(5), "both Envoys to report the ADS stream up", Section::Clusters, || {
        all_connected(&scene, true)
    });

    // SIGKILL: the streams break, and Envoy serves what it has.
    let ListenAddr::Tcp(xds) = *scene.mesh().xds_addr() else { panic!("meshpush serves ADS over TCP here") };
    scene.mesh_mut().kill_hard();
    assert!(TcpStream::connect(xds).is_err(), "nothing may answer on {xds} while meshpush is down");
    scene.wait(Duration::from_secs(5), "both Envoys to notice the lost ADS stream", Section::Clusters, || {
        all_connected(&scene, false)
    });
    let before: Vec<u64> = traffic.iter().map(Traffic::sent).collect();
    scene.wait(
        Duration::from_secs(10),
        "100 requests through each Envoy while meshpush is down",
        Section::Routes,
        || traffic.iter().zip(&before).all(|(t, b)| t.sent() >= b + 100),
    );
    let down: Vec<_> = traffic.iter().map(Traffic::tally).collect();
    for t in &down {
        assert_eq!(t.failed, 0, "requests failed while meshpush was down: {:?}", t.failures);
    }

    // Back on the same address: every Envoy reconnects on its own.
    let restarted = Instant::now();
    scene.mesh_mut().restart();
    scene.wait(
        Duration::from_secs(30),
        "both Envoys to reconnect to the restarted meshpush",
        Section::Clusters,
        || all_connected(&scene, true),
    );
    eprintln!("both Envoys reconnected {:?} after the restart began", restarted.elapsed());

    // A change made now reaches both.
    scene.dir().write("ledger-vs.yaml", &ledger_route("v2"));
    for request in [&via_sidecar, &via_gateway] {
        scene.wait(
            Duration::from_secs(5),
            &format!("{} to move to ledger-v2", request.target),
            Section::Routes,
            || request.all_answered_by(10, &["ledger-v2"]),
        );
    }
    let [sidecar, gateway] = traffic.map(Traffic::stop);
    eprintln!("through the sidecar: {sidecar:?}\nthrough the gateway: {gateway:?}");
    for (what, t) in [("sidecar", &sidecar), ("gateway", &gateway)] {
        assert_eq!(t.failed, 0, "requests through the {what} failed: {:?}", t.failures);
    }
    scene.assert_nothing_rejected();
}

/// The xDS connection reaches its maximum age (3 s here; Istio's default,
/// and meshpush's, is 30 min): meshpush sends GOAWAY and ends the ADS
/// stream UNAVAILABLE. Envoy keeps serving what it has, opens a new
/// connection, and a change made after that reaches it; not one request
/// fails on the way (service port 18141, 127.0.141.0/24).
#[test]
fn an_envoy_reconnects_after_the_maximum_connection_age_and_no_request_fails() {
    let port = 18141;
    let ip = |host: u8| format!("127.0.141.{host}");
    let (documents, backends) = ledger("127.0.141", port);
    let mesh = docs(&documents);
    let flags = ["--max-connection-age", "3s", "--max-connection-age-grace", "5s"];
    let mut scene = Scene::start_with(
        &[("mesh.yaml", &mesh), ("ledger-vs.yaml", &ledger_route("v1"))],
        &borrowed(&backends),
        |dir| support::meshpush::Meshpush::start_with_flags(dir, &flags),
    );
    let opts = scene.sidecar(&sidecar_node(&ip(9), "client", "shop"), &[("app", "client")]);
    scene.add_envoy("client", &opts);
    let request = Request::new(SocketAddr::from(([127, 0, 0, 1], port)), "ledger");
    scene.wait(Duration::from_secs(15), "the sidecar to reach ledger-v1", Section::Routes, || {
        request.all_answered_by(5, &["ledger-v1"])
    });
    let traffic = Traffic::start(request.clone());
    let envoy = scene.envoy("client");
    // Envoy counts the xDS connections it opened; each drain makes it open one more.
    let connections = || envoy.stat("cluster.xds-grpc.upstream_cx_total").unwrap_or(0);
    scene.wait(
        Duration::from_secs(30),
        "two drains by age, and Envoy on its third xDS connection",
        Section::Clusters,
        || {
            let drained = scene.mesh().metric("meshpush_xds_connections_drained_total");
            if drained >= 2.0 && connections() >= 3 && envoy.connected() {
                Ok(())
            } else {
                Err(format!(
                    "drained {drained}, Envoy's xDS connections {}, connected {}",
                    connections(),
                    envoy.connected()
                ))
            }
        },
    );
    let log = scene.mesh().log();
    assert!(log.contains("draining an xDS connection") && log.contains("max_age"), "no drain logged");

    // The stream on the newest connection serves changes.
    scene.dir().write("ledger-vs.yaml", &ledger_route("v2"));
    scene.wait(Duration::from_secs(10), "the sidecar to move to ledger-v2", Section::Routes, || {
        request.all_answered_by(10, &["ledger-v2"])
    });
    let tally = traffic.stop();
    eprintln!("through the sidecar: {tally:?}");
    assert!(tally.sent >= 100, "too little traffic to tell: {tally:?}");
    assert_eq!(tally.failed, 0, "requests failed across the reconnects: {:?}", tally.failures);
    scene.assert_nothing_rejected();
}

#[test]
fn an_envoy_fails_over_to_another_replica_and_no_request_fails() {
    replica_failover(18142, false);
}

/// The same over delta xDS: the sidecar tells the replica it moves to what
/// it holds per resource (`initial_resource_versions`).
#[test]
fn an_envoy_fails_over_to_another_replica_and_no_request_fails_over_delta() {
    replica_failover(18143, true);
}

/// Two meshpush replicas serve one config directory; a sidecar is
/// bootstrapped with both (`--xds-addr A --xds-addr B`). The replica it is
/// connected to is killed with SIGKILL under steady traffic: the sidecar
/// reconnects to the other, not one request fails, and a change made
/// afterwards reaches it through the survivor, which sends nothing the
/// sidecar already holds (service port `port`, addresses 127.0.N.0/24,
/// N = port - 18000).
fn replica_failover(port: u16, delta: bool) {
    let net = format!("127.0.{}", port - 18000);
    let ip = |host: u8| format!("{net}.{host}");
    let (documents, backends) = ledger(&net, port);
    let mesh = docs(&documents);
    let mut scene =
        Scene::start(&[("mesh.yaml", &mesh), ("ledger-vs.yaml", &ledger_route("v1"))], &borrowed(&backends));
    let mut other = support::meshpush::Meshpush::start(&scene.dir().path());
    let mut opts = scene.sidecar(&sidecar_node(&ip(9), "client", "shop"), &[("app", "client")]);
    opts.xds_addrs.push(other.xds_addr().to_string());
    opts.delta = delta;
    scene.add_envoy("client", &opts);
    let request = Request::new(SocketAddr::from(([127, 0, 0, 1], port)), "ledger");
    scene.wait(Duration::from_secs(15), "the sidecar to reach ledger-v1", Section::Routes, || {
        request.all_answered_by(5, &["ledger-v1"])
    });
    let traffic = Traffic::start(request.clone());

    // Which replica holds the stream: the one whose `pilot_xds` gauge is 1.
    let streams = |mesh: &support::meshpush::Meshpush| mesh.metric("pilot_xds");
    scene.wait(Duration::from_secs(5), "one replica to hold the sidecar's stream", Section::Clusters, || {
        let (first, second) = (streams(scene.mesh()), streams(&other));
        if first + second == 1.0 { Ok(()) } else { Err(format!("streams: {first} and {second}")) }
    });
    let first_held = streams(scene.mesh()) == 1.0;
    // What the replica holding the stream sent: the sidecar's whole config.
    let sent = |mesh: &support::meshpush::Meshpush| mesh.metric("meshpush_xds_sent_bytes_total");
    let whole_config = if first_held { sent(scene.mesh()) } else { sent(&other) };
    if first_held {
        scene.mesh_mut().kill_hard();
    } else {
        other.kill_hard();
    }
    let killed_at = traffic.sent();
    let survivor = if first_held { &other } else { scene.mesh() };
    let envoy = scene.envoy("client");
    scene.wait(Duration::from_secs(20), "the sidecar to reconnect to the surviving replica", Section::Clusters, || {
        if streams(survivor) == 1.0 && envoy.connected() {
            Ok(())
        } else {
            Err(format!("survivor's streams {}, Envoy connected {}", streams(survivor), envoy.connected()))
        }
    });
    scene.wait(Duration::from_secs(10), "100 requests through the sidecar since the kill", Section::Routes, || {
        let since = traffic.sent() - killed_at;
        if since >= 100 { Ok(()) } else { Err(format!("{since} requests")) }
    });

    scene.dir().write("ledger-vs.yaml", &ledger_route("v2"));
    scene.wait(
        Duration::from_secs(10),
        "the sidecar to move to ledger-v2 through the survivor",
        Section::Routes,
        || request.all_answered_by(10, &["ledger-v2"]),
    );
    let tally = traffic.stop();
    eprintln!("through the sidecar: {tally:?}");
    assert!(tally.sent >= 100, "too little traffic to tell: {tally:?}");
    assert_eq!(tally.failed, 0, "requests failed across the failover: {:?}", tally.failures);
    let survivor = if first_held { &other } else { scene.mesh() };
    let resent = sent(survivor);
    eprintln!("the first replica sent {whole_config} bytes, the survivor {resent} (delta: {delta})");
    // The survivor sent the changed route, not the clusters, listeners and
    // assignments again: its versions are content hashes, the same on every
    // replica, and the sidecar's requests name the ones it holds (SotW's
    // `version_info` per type, delta's `initial_resource_versions` per resource).
    assert!(
        resent * 2.0 < whole_config,
        "the survivor sent {resent} bytes after the failover, the whole config was {whole_config}"
    );
    scene.assert_nothing_rejected();
}
