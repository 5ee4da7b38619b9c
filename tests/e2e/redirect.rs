//! End to end: a sidecar in REDIRECT mode (Istio's default, iptables capture)
//! accepts everything meshpush sends and gets Istio's listeners.
//!
//! A REDIRECT sidecar binds `virtualOutbound` on 0.0.0.0:15001 and
//! `virtualInbound` on 0.0.0.0:15006. Tests never listen outside loopback, so
//! this Envoy runs in a network namespace of its own, where 0.0.0.0 is that
//! namespace's loopback and nothing else; it reaches meshpush over a Unix
//! socket (`meshpush serve --xds-addr unix:…`, bootstrap with a `pipe`
//! address), and its admin API answers on a Unix socket too.
//!
//! The workload `web` (namespace `redir`) serves HTTP on 18110; the mesh also
//! has an HTTP service on 18130 and a TCP service on 18120.

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::envoy::{Envoy, Section};
use support::manifests::{docs, pod, service, sidecar_node};
use support::scene::Scene;

/// The listeners of a REDIRECT sidecar of `web`, as Istio names them.
const LISTENERS: [&str; 5] = ["0.0.0.0_18110", "0.0.0.0_18120", "0.0.0.0_18130", "virtualInbound", "virtualOutbound"];

/// The network namespace of process `pid`.
fn netns(pid: u32) -> String {
    let link = Path::new("/proc").join(pid.to_string()).join("ns/net");
    std::fs::read_link(&link).unwrap_or_else(|e| panic!("{}: {e}", link.display())).display().to_string()
}

#[test]
fn redirect_sidecar_accepts_every_resource_and_has_istio_listeners() {
    let tcp_service = "\
apiVersion: v1
kind: Service
metadata:
  name: db
  namespace: redir
spec:
  selector:
    app: db
  ports:
  - name: tcp
    port: 18120
";
    let mesh = docs(&[
        service("redir", "web", 18110),
        pod("redir", "web-1", "127.0.110.2", &[("app", "web")], 18110),
        service("redir", "api", 18130),
        pod("redir", "api-1", "127.0.110.3", &[("app", "api")], 18130),
        tcp_service.to_string(),
        pod("redir", "db-1", "127.0.110.4", &[("app", "db")], 18120),
    ]);
    let mut scene = Scene::start_unix(&[("mesh.yaml", &mesh)], &[]);
    let mut opts = scene.sidecar(&sidecar_node("127.0.110.2", "web-1", "redir"), &[("app", "web")]);
    opts.interception = "REDIRECT".into();
    assert!(opts.xds_addrs.iter().all(|a| a.starts_with("unix:")), "{:?}", opts.xds_addrs);
    scene.keep_envoy(Envoy::start_isolated("web", &opts));
    let web = scene.envoy("web");

    // It runs in a namespace of its own: its 0.0.0.0 is not ours.
    assert_ne!(netns(web.process().pid()), netns(std::process::id()), "the REDIRECT Envoy shares our network");

    scene.wait(Duration::from_secs(15), "Istio's listeners, all active", Section::Listeners, || {
        let mut active = web.listener_names("active_state");
        active.sort();
        let warming = web.listener_names("warming_state");
        if active == LISTENERS && warming.is_empty() {
            Ok(())
        } else {
            Err(format!("active {active:?}, warming {warming:?}"))
        }
    });
    // Route configs are fetched after the listeners that name them.
    scene.wait(Duration::from_secs(5), "route configs 18110 and 18130", Section::Routes, || {
        let routes = web.section(Section::Routes);
        let names: Vec<&str> = routes["dynamic_route_configs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["route_config"]["name"].as_str())
            .collect();
        if names.contains(&"18110") && names.contains(&"18130") { Ok(()) } else { Err(format!("{names:?}")) }
    });

    // Everything sent was accepted.
    let stats = web.stat_values();
    let stat = |name: &str| stats.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
    for name in ["cluster_manager.cds", "listener_manager.lds"] {
        assert_eq!(stat(&format!("{name}.update_rejected")), Some(0), "{name}");
        assert!(stat(&format!("{name}.update_success")).is_some_and(|n| n > 0), "{name}: nothing accepted");
    }
    let rds: Vec<_> = stats.iter().filter(|(n, _)| n.starts_with("http.") && n.contains(".rds.")).collect();
    assert!(rds.iter().any(|(n, v)| n.ends_with(".update_success") && *v > 0), "no RDS update accepted: {rds:?}");
    scene.assert_nothing_rejected();

    // The listeners are Istio's: virtualOutbound hands connections over by
    // original destination, virtualInbound has a chain for the workload's port.
    scene.focus(Section::Listeners);
    let listeners = web.section(Section::Listeners);
    let listener = |name: &str| {
        listeners["dynamic_listeners"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|l| l["name"] == name)
            .map(|l| l["active_state"]["listener"].clone())
            .unwrap_or_else(|| panic!("no listener {name}"))
    };
    let socket = |l: &serde_json::Value| {
        let a = &l["address"]["socket_address"];
        (a["address"].as_str().unwrap_or_default().to_string(), a["port_value"].as_u64().unwrap_or_default())
    };
    let outbound = listener("virtualOutbound");
    assert_eq!(socket(&outbound), ("0.0.0.0".to_string(), 15001));
    assert_eq!(outbound["use_original_dst"], true);
    let inbound = listener("virtualInbound");
    assert_eq!(socket(&inbound), ("0.0.0.0".to_string(), 15006));
    let chains: Vec<&str> =
        inbound["filter_chains"].as_array().into_iter().flatten().filter_map(|c| c["name"].as_str()).collect();
    assert!(chains.contains(&"inbound|18110||"), "virtualInbound chains: {chains:?}");
    for port in ["0.0.0.0_18110", "0.0.0.0_18120", "0.0.0.0_18130"] {
        assert_eq!(listener(port)["bind_to_port"], false, "{port} takes connections from virtualOutbound");
    }

    // And Envoy really listens on them — inside its own namespace:
    // /proc/PID/net/tcp lists the sockets of PID's network namespace.
    let listening = listening_ports(web.process().pid());
    for port in [15001, 15006] {
        assert!(listening.contains(&("00000000".to_string(), port)), "0.0.0.0:{port} not listening: {listening:?}");
    }
}

/// `(address as hex, port)` of every listening TCP socket in the network
/// namespace of process `pid`.
fn listening_ports(pid: u32) -> Vec<(String, u16)> {
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).expect("read /proc/PID/net/tcp");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // fields: sl, local_address, rem_address, st (0A is LISTEN), …
            let (local, state) = (fields.get(1)?, fields.get(3)?);
            let (address, port) = local.split_once(':')?;
            (*state == "0A").then(|| Some((address.to_string(), u16::from_str_radix(port, 16).ok()?))).flatten()
        })
        .collect()
}
