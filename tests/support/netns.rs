//! Network namespaces the tests make (`ip netns`), each its own pod: the
//! capture tests write iptables rules into one without touching the
//! host's. A namespace is deleted when its guard drops, panics included.

use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

/// A network namespace, deleted on drop.
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// A fresh namespace with loopback up and `address` (`ADDR/PREFIX`, v4
    /// or v6) on a veth interface of its own, as a pod has one.
    pub fn new(purpose: &str, address: &str) -> NetNs {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!("mp-{purpose}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let out = Command::new("ip").args(["netns", "add", &name]).output().expect("run ip netns add");
        assert!(out.status.success(), "ip netns add {name}: {}", String::from_utf8_lossy(&out.stderr));
        let ns = NetNs { name };
        ns.ok("ip", &["link", "set", "lo", "up"]);
        ns.ok("ip", &["link", "add", "eth0", "type", "veth", "peer", "name", "peer0"]);
        let mut add = vec!["addr", "add", address, "dev", "eth0"];
        if address.contains(':') {
            add.push("nodad");
        }
        ns.ok("ip", &add);
        ns.ok("ip", &["link", "set", "eth0", "up"]);
        ns
    }

    /// Namespaces on one LAN, each with `loopback` up and one of
    /// `addresses` (`ADDR/PREFIX`) on its `eth0`, all joined by a bridge in
    /// a hub namespace of their own (returned first; it holds nothing else).
    pub fn lan(purpose: &str, addresses: &[&str]) -> (NetNs, Vec<NetNs>) {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let base = format!("mp-{purpose}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let add = |name: String| {
            let out = Command::new("ip").args(["netns", "add", &name]).output().expect("run ip netns add");
            assert!(out.status.success(), "ip netns add {name}: {}", String::from_utf8_lossy(&out.stderr));
            let ns = NetNs { name };
            ns.ok("ip", &["link", "set", "lo", "up"]);
            ns
        };
        let hub = add(format!("{base}-hub"));
        hub.ok("ip", &["link", "add", "br0", "type", "bridge"]);
        hub.ok("ip", &["link", "set", "br0", "up"]);
        let nodes = addresses
            .iter()
            .enumerate()
            .map(|(i, address)| {
                let node = add(format!("{base}-{i}"));
                let port = format!("port{i}");
                hub.ok("ip", &["link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &node.name]);
                hub.ok("ip", &["link", "set", &port, "master", "br0", "up"]);
                node.ok("ip", &["addr", "add", address, "dev", "eth0"]);
                node.ok("ip", &["link", "set", "eth0", "up"]);
                node
            })
            .collect();
        (hub, nodes)
    }

    /// Its name (`ip netns exec NAME …`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A second namespace on the other end of this one's veth, with
    /// `address`: a peer outside the pod.
    pub fn peer(&self, purpose: &str, address: &str) -> NetNs {
        let name = format!("{}-{purpose}", self.name);
        let out = Command::new("ip").args(["netns", "add", &name]).output().expect("run ip netns add");
        assert!(out.status.success(), "ip netns add {name}: {}", String::from_utf8_lossy(&out.stderr));
        let peer = NetNs { name };
        self.ok("ip", &["link", "set", "peer0", "netns", &peer.name]);
        peer.ok("ip", &["link", "set", "lo", "up"]);
        peer.ok("ip", &["addr", "add", address, "dev", "peer0"]);
        peer.ok("ip", &["link", "set", "peer0", "up"]);
        peer
    }

    /// Runs `f` on a thread of its own that has entered the namespace: the
    /// sockets it opens are the namespace's (a test's gRPC client, say).
    pub fn within<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/var/run/netns/{}", self.name);
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
                    rustix::thread::move_into_link_name_space(
                        std::os::fd::AsFd::as_fd(&file),
                        Some(rustix::thread::LinkNameSpaceType::Network),
                    )
                    .unwrap_or_else(|e| panic!("enter {path}: {e}"));
                    f()
                })
                .join()
                .expect("the thread in the namespace panicked")
        })
    }

    /// Runs `program` with `args` inside the namespace.
    pub fn run(&self, program: &str, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name, program])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("run {program} in {}: {e}", self.name))
    }

    /// [`NetNs::run`], which must succeed; its standard output.
    pub fn ok(&self, program: &str, args: &[&str]) -> String {
        let out = self.run(program, args);
        assert!(
            out.status.success(),
            "{program} {} in {}: {}",
            args.join(" "),
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}
