//! `Endpoint`: one workload address behind a service port.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use super::weak_table::WeakTable;
use crate::config::ClusterId;

/// A workload's labels, shared by the workload and its endpoints.
pub type Labels = Arc<BTreeMap<String, String>>;

/// The one live copy of a label set equal to `labels` (a Deployment's
/// replicas' proxies send equal ones), else `labels`, shared from now on.
pub fn intern_labels(labels: BTreeMap<String, String>) -> Labels {
    static TABLE: std::sync::LazyLock<WeakTable<BTreeMap<String, String>>> = std::sync::LazyLock::new(Default::default);
    if labels.is_empty() {
        return no_labels();
    }
    let hash = std::hash::BuildHasher::hash_one(&foldhash::fast::FixedState::default(), &labels);
    TABLE.intern(hash, labels)
}

/// The empty label set, shared.
pub fn no_labels() -> Labels {
    static EMPTY: std::sync::LazyLock<Labels> = std::sync::LazyLock::new(Labels::default);
    EMPTY.clone()
}

/// One workload instance reachable for a service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Endpoint {
    /// IP address (or DNS name for DNS-resolved ServiceEntries).
    pub address: Arc<str>,
    /// Service port number → port on this workload. Shared by the
    /// endpoints of one EndpointSlice, which all have its ports.
    pub ports: Arc<BTreeMap<u32, u32>>,
    /// Labels; DestinationRule subsets select on them. Shared with the
    /// workload they come from (a Pod's labels are held once however many
    /// services it backs).
    pub labels: Labels,
    /// Locality `region/zone/subzone` (may be empty).
    pub locality: Arc<str>,
    /// Load-balancing weight (≥ 1).
    pub weight: u32,
    /// Service account: clients check for its SPIFFE identity in the
    /// endpoint's certificate under mesh mTLS.
    pub service_account: Option<Arc<str>>,
    /// Its sidecar terminates mesh mTLS (label
    /// `security.istio.io/tlsMode: istio`), read once from the labels
    /// because every assignment that holds the endpoint asks.
    pub mesh_mtls: bool,
    /// Its network (`None`: the default network, which every proxy
    /// reaches). An option, so that a mesh of one network holds no name.
    pub network: Option<Arc<str>>,
    /// The cluster it is in (`ClusterId::LOCAL`: this server's).
    pub cluster: ClusterId,
}

/// The label that names a workload's (or a namespace's) network.
pub const NETWORK_LABEL: &str = "topology.istio.io/network";
/// The label istiod gives every endpoint with its cluster's id, which
/// subsets and failover priorities may select on.
pub const CLUSTER_LABEL: &str = "topology.istio.io/cluster";

/// The label that says an endpoint's sidecar terminates mesh mTLS.
pub const TLS_MODE_LABEL: &str = "security.istio.io/tlsMode";
/// The value of [`TLS_MODE_LABEL`] for such an endpoint.
pub const TLS_MODE_ISTIO: &str = "istio";

/// Whether `labels` say the endpoint's sidecar terminates mesh mTLS.
pub fn has_mesh_mtls(labels: &BTreeMap<String, String>) -> bool {
    labels.get(TLS_MODE_LABEL).is_some_and(|v| v == TLS_MODE_ISTIO)
}

impl Endpoint {
    /// Whether every `selector` label is present with the same value (in
    /// a mesh whose own cluster's id is `local_cluster`).
    pub fn matches(&self, selector: &BTreeMap<String, String>, local_cluster: &str) -> bool {
        selector.iter().all(|(k, v)| self.label(k, local_cluster) == Some(v.as_str()))
    }

    /// The value of label `key`, with the topology labels istiod adds to
    /// every endpoint (its network and cluster) where its own labels do
    /// not set them.
    pub fn label<'a>(&'a self, key: &str, local_cluster: &'a str) -> Option<&'a str> {
        match self.labels.get(key) {
            Some(v) => Some(v),
            None if key == NETWORK_LABEL => self.network.as_deref(),
            None if key == CLUSTER_LABEL => Some(self.cluster_id(local_cluster)),
            None => None,
        }
    }

    /// Its network's name (`""`: the default network).
    pub fn network_name(&self) -> &str {
        self.network.as_deref().unwrap_or("")
    }

    /// The id of its cluster, the local one's being `local_cluster`.
    pub fn cluster_id<'a>(&'a self, local_cluster: &'a str) -> &'a str {
        self.cluster.remote_id().unwrap_or(local_cluster)
    }
}

/// All endpoints of one service, sorted by address so that the same set
/// always encodes to the same bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct ServiceEndpoints {
    /// The endpoints.
    pub endpoints: Vec<Endpoint>,
}

impl ServiceEndpoints {
    /// The service accounts the endpoints run as, sorted, each once.
    pub fn service_accounts(&self) -> Vec<Arc<str>> {
        let mut out: Vec<Arc<str>> = self.endpoints.iter().filter_map(|e| e.service_account.clone()).collect();
        out.sort();
        out.dedup();
        out
    }
}
