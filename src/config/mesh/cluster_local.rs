//! MeshConfig `serviceSettings`: which hosts are cluster-local, that is
//! served to a proxy only with the endpoints of the proxy's own cluster.
//!
//! Role: [`super::file`] reads the entries ([`ServiceSettings`]) and
//! refuses a mesh config whose hosts Istio's validation refuses
//! ([`check`]); [`ClusterLocalHosts::resolve`] lays them over Istio's
//! defaults as istiod does on every mesh config change
//! (`pilot/pkg/model/cluster_local.go`), and the result is the mesh
//! config's `clusterLocalHosts`, shown on `/debug/configz`.
//!
//! What it changes (`generate::eds`): in a mesh of several clusters, a
//! cluster-local host is served to a proxy with the endpoints of the
//! proxy's own cluster only (its `CLUSTER_ID`, else this server's
//! cluster), as istiod serves it; a proxy whose cluster has none gets
//! none. With one cluster every endpoint is the cluster's own, and every
//! proxy shares one assignment.
//!
//! Invariants: the defaults are Istio's (`*.kube-system.svc`,
//! `kubernetes.default.svc` and the host of the mesh's
//! `defaultConfig.discoveryAddress`, under [`DOMAIN_SUFFIX`]); an entry
//! with `clusterLocal: false` removes a default it equals or falls under;
//! a host is cluster-local by its most specific match, and one that
//! matches nothing is not.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::proxy_config::DEFAULT_DISCOVERY_ADDRESS;
use crate::config::validate::is_wildcard_host;

/// Istio's default domain suffix (istiod's `--domain`), which the cluster's
/// services live under: `model::host::CLUSTER_DOMAIN` is `svc.` and it.
pub const DOMAIN_SUFFIX: &str = "cluster.local";

/// One `serviceSettings` entry: the settings of the hosts it lists.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceSettings {
    /// `settings`; unset reads as `clusterLocal: false`, as in Istio.
    pub settings: Option<Settings>,
    /// `hosts`: host names, or wildcards (`*.example.com`).
    pub hosts: Vec<String>,
}

/// `serviceSettings[].settings`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Settings {
    /// `clusterLocal`: whether the hosts are served with their own
    /// cluster's endpoints only.
    #[serde(alias = "cluster_local")]
    pub cluster_local: bool,
}

impl ServiceSettings {
    fn cluster_local(&self) -> bool {
        self.settings.is_some_and(|s| s.cluster_local)
    }
}

/// Istio's validation of the entries (`validateServiceSettings`): each
/// host a DNS name or wildcard. The first bad host's path and why.
pub fn check(entries: &[ServiceSettings]) -> Result<(), (String, String)> {
    for (i, entry) in entries.iter().enumerate() {
        for (j, host) in entry.hosts.iter().enumerate() {
            if !is_wildcard_host(host) {
                let why = format!("{host:?} is not a host name or wildcard (*.example.com)");
                return Err((format!("serviceSettings[{i}].hosts[{j}]"), why));
            }
        }
    }
    Ok(())
}

/// The resolved cluster-local hosts: each host or wildcard (`*.suffix`,
/// `*`) the entries and Istio's defaults name, and whether it is
/// cluster-local.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ClusterLocalHosts {
    hosts: BTreeMap<Arc<str>, bool>,
}

impl Default for ClusterLocalHosts {
    /// Istio's defaults, for a mesh that sets no `serviceSettings` and
    /// keeps Istio's `discoveryAddress`.
    fn default() -> Self {
        ClusterLocalHosts::resolve(&[], None)
    }
}

impl ClusterLocalHosts {
    /// The hosts `entries` make cluster-local or not, over Istio's defaults
    /// for a mesh whose proxies' upstream is `discovery_address` (`HOST:PORT`;
    /// `None`: Istio's default, `istiod.istio-system.svc:15012`).
    pub fn resolve(entries: &[ServiceSettings], discovery_address: Option<&str>) -> ClusterLocalHosts {
        let mut defaults =
            vec![format!("*.kube-system.svc.{DOMAIN_SUFFIX}"), format!("kubernetes.default.svc.{DOMAIN_SUFFIX}")];
        // istiod logs an address it cannot split and goes on without it.
        if let Some(host) = discovery_host(discovery_address.unwrap_or(DEFAULT_DISCOVERY_ADDRESS)) {
            // A plain string suffix test, as istiod's: `istiod.istio-system.svc` gains it.
            defaults.push(if host.ends_with(DOMAIN_SUFFIX) {
                host.to_string()
            } else {
                format!("{host}.{DOMAIN_SUFFIX}")
            });
        }
        let mut hosts = BTreeMap::new();
        for entry in entries {
            let local = entry.cluster_local();
            if !local {
                // A host that is not cluster-local overrides the defaults
                // it equals or falls under: `foo.kube-system.svc.cluster.local`
                // removes the whole `*.kube-system.svc.cluster.local`.
                defaults.retain(|default| {
                    !entry
                        .hosts
                        .iter()
                        .any(|h| h == default || default.strip_prefix('*').is_some_and(|suffix| h.ends_with(suffix)))
                });
            }
            // A later entry for the same host replaces an earlier one.
            hosts.extend(entry.hosts.iter().map(|h| (Arc::from(h.as_str()), local)));
        }
        hosts.extend(defaults.into_iter().map(|d| (Arc::from(d), true)));
        ClusterLocalHosts { hosts }
    }

    /// Whether `host` is cluster-local: the setting of its most specific
    /// match (itself, else the longest wildcard it falls under); a host
    /// that matches nothing is not.
    pub fn is_cluster_local(&self, host: &str) -> bool {
        if let Some(local) = self.hosts.get(host) {
            return *local;
        }
        // A wildcard host falls under a wildcard whose suffix ends its own.
        let name = host.strip_prefix('*').unwrap_or(host);
        self.hosts
            .iter()
            .filter_map(|(pattern, local)| Some((pattern.strip_prefix('*')?, *local)))
            .filter(|(suffix, _)| name.ends_with(suffix))
            .max_by_key(|(suffix, _)| suffix.len())
            .is_some_and(|(_, local)| local)
    }

    /// Each host and wildcard named, with whether it is cluster-local.
    pub fn hosts(&self) -> impl Iterator<Item = (&str, bool)> {
        self.hosts.iter().map(|(host, local)| (&**host, *local))
    }
}

/// The host of a `HOST:PORT` address, as Go's `net.SplitHostPort` splits it
/// (an IPv6 host in brackets, unbracketed); `None` where it cannot.
fn discovery_host(address: &str) -> Option<&str> {
    let (host, port) = match address.strip_prefix('[') {
        Some(rest) => rest.split_once("]:")?,
        None => address.rsplit_once(':').filter(|(host, _)| !host.contains(':'))?,
    };
    port.parse::<u16>().is_ok().then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(yaml: &str) -> Vec<ServiceSettings> {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    fn named(hosts: &ClusterLocalHosts) -> Vec<(&str, bool)> {
        hosts.hosts().collect()
    }

    #[test]
    fn by_default_kube_system_the_api_server_and_istiod_are_cluster_local() {
        let hosts = ClusterLocalHosts::default();
        assert_eq!(
            named(&hosts),
            [
                ("*.kube-system.svc.cluster.local", true),
                ("istiod.istio-system.svc.cluster.local", true),
                ("kubernetes.default.svc.cluster.local", true),
            ]
        );
        assert!(hosts.is_cluster_local("kube-dns.kube-system.svc.cluster.local"));
        assert!(hosts.is_cluster_local("kubernetes.default.svc.cluster.local"));
        assert!(hosts.is_cluster_local("istiod.istio-system.svc.cluster.local"));
        assert!(!hosts.is_cluster_local("reviews.default.svc.cluster.local"), "no match: not cluster-local");
        assert!(!hosts.is_cluster_local("kube-system.svc.cluster.local"), "a wildcard's suffix is not under it");
    }

    #[test]
    fn a_false_entry_equal_to_a_default_removes_it() {
        let hosts = ClusterLocalHosts::resolve(
            &entries("- settings: {clusterLocal: false}\n  hosts: [kubernetes.default.svc.cluster.local]\n"),
            None,
        );
        assert!(!hosts.is_cluster_local("kubernetes.default.svc.cluster.local"));
        assert!(hosts.hosts().any(|h| h == ("kubernetes.default.svc.cluster.local", false)), "kept as set");
        assert!(hosts.is_cluster_local("istiod.istio-system.svc.cluster.local"), "the other defaults stay");
        assert!(hosts.is_cluster_local("coredns.kube-system.svc.cluster.local"));
    }

    #[test]
    fn a_false_host_under_a_wildcard_default_removes_the_whole_wildcard() {
        let hosts = ClusterLocalHosts::resolve(
            &entries("- settings: {cluster_local: false}\n  hosts: [foo.kube-system.svc.cluster.local]\n"),
            None,
        );
        assert!(!hosts.is_cluster_local("foo.kube-system.svc.cluster.local"));
        assert!(!hosts.is_cluster_local("kube-dns.kube-system.svc.cluster.local"), "the default is gone, as in Istio");
        assert!(!hosts.hosts().any(|(h, _)| h == "*.kube-system.svc.cluster.local"));
        let kept = ClusterLocalHosts::resolve(
            &entries("- hosts: [foo.kube-system.svc.cluster.local]\n  settings: {clusterLocal: true}\n"),
            None,
        );
        assert!(kept.is_cluster_local("kube-dns.kube-system.svc.cluster.local"), "a true entry removes nothing");
    }

    #[test]
    fn the_most_specific_match_decides() {
        let hosts = ClusterLocalHosts::resolve(
            &entries(
                "- settings: {clusterLocal: true}\n  hosts: ['*.svc.cluster.local', 'reviews.prod.svc.cluster.local']\n\
                 - settings: {clusterLocal: false}\n  hosts: ['*.prod.svc.cluster.local']\n\
                 - hosts: ['ratings.prod.svc.cluster.local']\n",
            ),
            None,
        );
        assert!(hosts.is_cluster_local("details.default.svc.cluster.local"), "under *.svc.cluster.local");
        assert!(!hosts.is_cluster_local("details.prod.svc.cluster.local"), "*.prod is more specific");
        assert!(hosts.is_cluster_local("reviews.prod.svc.cluster.local"), "an exact host beats every wildcard");
        assert!(!hosts.is_cluster_local("ratings.prod.svc.cluster.local"), "no settings: not cluster-local");
        assert!(hosts.is_cluster_local("kube-dns.kube-system.svc.cluster.local"), "the longer default wildcard");
        assert!(!hosts.is_cluster_local("*.prod.svc.cluster.local"), "a wildcard is looked up as itself");
        assert!(!hosts.is_cluster_local("*.a.prod.svc.cluster.local"), "or under the wildcards its suffix falls under");
        assert!(!hosts.is_cluster_local("example.com"));
    }

    #[test]
    fn the_discovery_address_host_is_a_default_under_the_domain_suffix() {
        let custom = ClusterLocalHosts::resolve(&[], Some("meshpush.mesh.svc:15012"));
        assert!(custom.is_cluster_local("meshpush.mesh.svc.cluster.local"));
        assert!(!custom.is_cluster_local("istiod.istio-system.svc.cluster.local"), "replaces istiod");
        let full = ClusterLocalHosts::resolve(&[], Some("meshpush.mesh.svc.cluster.local:15012"));
        assert!(full.hosts().any(|h| h == ("meshpush.mesh.svc.cluster.local", true)), "not suffixed twice");
        let ip = ClusterLocalHosts::resolve(&[], Some("[fd00::1]:15012"));
        assert!(ip.is_cluster_local("fd00::1.cluster.local"), "suffixed as istiod suffixes it");
        let unsplit = ClusterLocalHosts::resolve(&[], Some("fd00::1:15012"));
        assert_eq!(unsplit.hosts().count(), 2, "an address Go cannot split adds no default");
        let removed = ClusterLocalHosts::resolve(
            &entries("- settings: {clusterLocal: false}\n  hosts: [meshpush.mesh.svc.cluster.local]\n"),
            Some("meshpush.mesh.svc:15012"),
        );
        assert!(!removed.is_cluster_local("meshpush.mesh.svc.cluster.local"));
    }

    #[test]
    fn a_host_that_is_no_dns_name_or_wildcard_is_refused_with_its_path() {
        assert_eq!(check(&entries("- hosts: [a.example.com, '*.example.com', '*']\n")), Ok(()));
        let (path, why) =
            check(&entries("- hosts: [a.example.com]\n- hosts: [ok.example.com, 'bad_host.example.com']\n"))
                .unwrap_err();
        assert_eq!(path, "serviceSettings[1].hosts[1]");
        assert!(why.starts_with("\"bad_host.example.com\" is not a host name or wildcard"), "{why}");
        for bad in ["", "a.*.example.com", "-a.example.com", "a..example.com"] {
            assert!(check(&[ServiceSettings { settings: None, hosts: vec![bad.into()] }]).is_err(), "{bad:?}");
        }
    }
}
