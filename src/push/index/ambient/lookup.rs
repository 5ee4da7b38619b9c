//! What an on-demand ztunnel (`XDS_ON_DEMAND`) asks for, and what it gets.
//!
//! Such a ztunnel subscribes to nothing at first, then to one key at a time
//! as its connections need them, as istiod's ambient index answers them
//! (`Lookup`):
//!
//! - a workload uid (`Kubernetes//Pod/NS/NAME`): that workload;
//! - `NETWORK/IP` (`/10.0.0.5` on the default network): the workloads with
//!   that address or, when none has it, the service with that VIP and every
//!   workload behind it;
//! - `NAMESPACE/HOSTNAME`: that service and every workload behind it.
//!
//! It is also sent every workload on its own node (its `NODE_NAME`), as
//! istiod sends them, since those are the workloads it proxies.
//!
//! Resource names are uids and service names, never address keys: a key
//! resolves to them. Built with the index, from the very resources it
//! encodes; names are shared with them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use crate::workload_api::workload::{Address, NetworkAddress, TunnelProtocol, address};

/// The keys of one snapshot's addresses.
#[derive(Debug, Default)]
pub struct AddressKeys {
    /// `NETWORK/IP` → the workloads with that address.
    workloads_at: HashMap<Box<str>, Vec<Arc<str>>>,
    /// `NETWORK/IP` → the services with that VIP (the first is the answer).
    services_at: HashMap<Box<str>, Vec<Arc<str>>>,
    /// Service name → the workloads behind it (every service has an entry).
    behind: HashMap<Arc<str>, Vec<Arc<str>>>,
    /// Node name → the workloads on it.
    on_node: HashMap<Box<str>, Vec<Arc<str>>>,
    /// `NETWORK/IP` of the workloads that take HBONE (a waypoint reaches
    /// them over it).
    hbone: std::collections::HashSet<Box<str>>,
}

impl AddressKeys {
    /// The keys of `addresses` (resource name, resource).
    pub fn of<'a>(addresses: impl IntoIterator<Item = (&'a Arc<str>, &'a Address)>) -> AddressKeys {
        let mut keys = AddressKeys::default();
        let mut services: HashMap<&str, Arc<str>> = HashMap::new();
        let mut backs: Vec<(&'a str, Arc<str>)> = Vec::new();
        for (name, address) in addresses {
            match &address.r#type {
                Some(address::Type::Workload(w)) => {
                    let hbone = w.tunnel_protocol == TunnelProtocol::Hbone as i32;
                    for ip in &w.addresses {
                        if let Some(key) = key(&w.network, ip) {
                            if hbone {
                                keys.hbone.insert(key.clone());
                            }
                            keys.workloads_at.entry(key).or_default().push(name.clone());
                        }
                    }
                    if !w.node.is_empty() {
                        keys.on_node.entry(w.node.as_str().into()).or_default().push(name.clone());
                    }
                    backs.extend(w.services.keys().map(|service| (service.as_str(), name.clone())));
                }
                Some(address::Type::Service(s)) => {
                    for vip in &s.addresses {
                        if let Some(key) = vip_key(vip) {
                            keys.services_at.entry(key).or_default().push(name.clone());
                        }
                    }
                    services.insert(name, name.clone());
                }
                None => {}
            }
        }
        for service in services.values() {
            keys.behind.insert(service.clone(), Vec::new());
        }
        for (service, workload) in backs {
            if let Some(service) = services.get(service) {
                keys.behind.entry(service.clone()).or_default().push(workload);
            }
        }
        keys
    }

    /// The resource names that answer `key`; none when nothing matches.
    /// (A workload uid answers itself: the caller looks names up first.)
    pub fn resolve<'a>(&'a self, key: &str) -> Vec<&'a Arc<str>> {
        if let Some(workloads) = self.workloads_at.get(key) {
            return workloads.iter().collect();
        }
        let service = match self.services_at.get(key) {
            Some(services) => services.first(),
            None => self.behind.get_key_value(key).map(|(service, _)| service),
        };
        let Some(service) = service else { return Vec::new() };
        let mut out = vec![service];
        out.extend(self.behind.get(service).into_iter().flatten());
        out
    }

    /// Whether the workload at `key` (`NETWORK/IP`) takes HBONE.
    pub fn takes_hbone(&self, key: &str) -> bool {
        self.hbone.contains(key)
    }

    /// The workloads on `node`.
    pub fn on_node(&self, node: &str) -> &[Arc<str>] {
        self.on_node.get(node).map_or(&[], Vec::as_slice)
    }
}

/// `NETWORK/IP` of an address given as bytes (4 or 16).
fn key(network: &str, ip: &[u8]) -> Option<Box<str>> {
    let ip: IpAddr = match ip.len() {
        4 => IpAddr::from(<[u8; 4]>::try_from(ip).ok()?),
        16 => IpAddr::from(<[u8; 16]>::try_from(ip).ok()?),
        _ => return None,
    };
    Some(format!("{network}/{ip}").into())
}

/// The key of a VIP: a host address only (a CIDR range is nobody's key).
fn vip_key(vip: &NetworkAddress) -> Option<Box<str>> {
    if vip.length.is_some() {
        return None;
    }
    key(&vip.network, &vip.address)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload_api::workload::{PortList, Service, Workload};

    fn workload(uid: &str, ip: [u8; 4], node: &str, services: &[&str]) -> (Arc<str>, Address) {
        let w = Workload {
            uid: uid.into(),
            addresses: vec![ip.to_vec()],
            node: node.into(),
            services: services.iter().map(|s| (s.to_string(), PortList::default())).collect(),
            ..Default::default()
        };
        (uid.into(), Address { r#type: Some(address::Type::Workload(w)) })
    }

    fn service(name: &str, vip: [u8; 4]) -> (Arc<str>, Address) {
        let s = Service {
            addresses: vec![NetworkAddress { network: String::new(), address: vip.to_vec(), length: None }],
            ..Default::default()
        };
        (name.into(), Address { r#type: Some(address::Type::Service(s)) })
    }

    #[test]
    fn a_key_resolves_as_istiod_s_lookup_does() {
        let all = [
            workload("K//Pod/demo/a", [10, 0, 0, 1], "node-a", &["demo/web.demo.svc.cluster.local"]),
            workload("K//Pod/demo/b", [10, 0, 0, 2], "node-b", &["demo/web.demo.svc.cluster.local"]),
            workload("K//Pod/demo/c", [10, 0, 0, 3], "node-a", &[]),
            service("demo/web.demo.svc.cluster.local", [10, 96, 0, 1]),
        ];
        let keys = AddressKeys::of(all.iter().map(|(n, a)| (n, a)));
        let names = |key: &str| {
            let mut names: Vec<String> = keys.resolve(key).into_iter().map(|n| n.to_string()).collect();
            names.sort();
            names
        };
        assert_eq!(names("/10.0.0.3"), ["K//Pod/demo/c"], "a workload's address: that workload");
        let web = ["K//Pod/demo/a", "K//Pod/demo/b", "demo/web.demo.svc.cluster.local"];
        assert_eq!(names("/10.96.0.1"), web, "a VIP: the service and what backs it");
        assert_eq!(names("demo/web.demo.svc.cluster.local"), web, "a service name: the same");
        assert!(names("/10.9.9.9").is_empty() && names("net-2/10.0.0.3").is_empty(), "another network is another key");
        let local: Vec<&str> = keys.on_node("node-a").iter().map(|n| &**n).collect();
        assert_eq!(local, ["K//Pod/demo/a", "K//Pod/demo/c"]);
    }
}
