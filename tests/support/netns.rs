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
