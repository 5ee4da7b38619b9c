//! Istio's `meshNetworks`: which network each cluster's (or address
//! range's) endpoints are on, and the gateways that reach each network.
//!
//! Role: istiod reads it beside the mesh config, from the file its
//! `--networksConfig` names or from the `meshNetworks` key of the `istio`
//! ConfigMap; meshpush reads it the same way (`serve --mesh-networks FILE`,
//! or the ConfigMap's key) and serves it as part of the
//! [`MeshConfig`](super::MeshConfig). `push::index::networks` resolves
//! endpoint networks and network gateways from it, from the
//! `topology.istio.io/network` labels, and from gateway Services.
//!
//! Parsing follows Istio's validation (`ValidateMeshNetworks`): a
//! `fromCidr` is a CIDR, a `fromRegistry` a DNS label (a cluster id), a
//! `registryServiceName` a fully qualified host name, an `address` an IP
//! or host name, a `port` 1 to 65535. A document that fails it is refused
//! whole, as istiod refuses it, and the last good one stays served.
//!
//! Invariant: every field the document sets is applied or reported with
//! its path: a gateway's `locality` (Istio ignores it too) and fields
//! Istio does not define are reported.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::validate::is_dns_label_any_case as is_dns_label;
use crate::config::{Problem, Severity, SourceRef};

/// Istio's `MeshNetworks`: networks by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MeshNetworks {
    /// The networks, by name.
    pub networks: BTreeMap<Arc<str>, Network>,
}

/// One network of `meshNetworks`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Network {
    /// Where its endpoints are: address ranges and clusters.
    pub endpoints: Vec<NetworkEndpoints>,
    /// The gateways that reach it from other networks.
    pub gateways: Vec<NetworkGatewaySpec>,
}

/// One `endpoints` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum NetworkEndpoints {
    /// `fromCidr`: endpoints whose address is in the range.
    FromCidr(ipnet::IpNet),
    /// `fromRegistry`: every endpoint of the cluster with this id.
    FromRegistry(Arc<str>),
}

/// One `gateways` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkGatewaySpec {
    /// Its address, or the Service whose addresses it has.
    pub target: GatewayTarget,
    /// The port it takes mesh mTLS on (15443 by convention).
    pub port: u32,
}

/// Where a `gateways` entry is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum GatewayTarget {
    /// `registryServiceName`: the load balancer addresses of this Service
    /// (a fully qualified host) in the clusters the network's
    /// `fromRegistry` entries name.
    RegistryServiceName(Arc<str>),
    /// `address`: an IP, or a host name, resolved as istiod resolves it.
    Address(Arc<str>),
}

/// The addresses meshpush resolved for a network gateway known by host
/// name (a `meshNetworks` gateway `address`, a load balancer's
/// `hostname`), as istiod resolves them (`RESOLVE_HOSTNAME_GATEWAYS`): an
/// internal object `source::gateway_dns` keeps, one per host name.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ResolvedGatewayHost {
    /// Metadata: a cluster-scoped name made from the host name.
    pub metadata: crate::config::ObjectMeta,
    /// The host name.
    pub host: String,
    /// Its addresses at the last good lookup, sorted (none before the
    /// first).
    pub addresses: Vec<String>,
    /// Why the last lookup failed, when it did: the addresses of the last
    /// good one stay.
    pub error: Option<String>,
}

/// The name of the [`ResolvedGatewayHost`] of `host`.
pub fn resolved_gateway_host_name(host: &str) -> String {
    format!("gateway-host-{:016x}", xxhash_rust::xxh3::xxh3_64(host.to_ascii_lowercase().as_bytes()))
}

/// The document as written, with the keys Istio reads (camelCase or the
/// protos' snake_case).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Document {
    networks: BTreeMap<String, NetworkDocument>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NetworkDocument {
    endpoints: Vec<EndpointsDocument>,
    gateways: Vec<GatewayDocument>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct EndpointsDocument {
    #[serde(alias = "from_cidr")]
    from_cidr: Option<String>,
    #[serde(alias = "from_registry")]
    from_registry: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct GatewayDocument {
    #[serde(alias = "registry_service_name")]
    registry_service_name: Option<String>,
    address: Option<String>,
    port: Option<u32>,
    locality: Option<String>,
}

impl MeshNetworks {
    /// Parses the `meshNetworks` document read from `file` (empty text: no
    /// networks). The networks and what of them is not applied; an error
    /// says where the document is invalid, and refuses it.
    pub fn parse(file: &str, text: &str) -> Result<(MeshNetworks, Vec<Problem>), String> {
        let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).map_err(|e| format!("{file}: {e}"))?;
        if value.is_null() {
            return Ok((MeshNetworks::default(), Vec::new()));
        }
        if !value.is_mapping() {
            return Err(format!("{file}: meshNetworks is a mapping with the key `networks`"));
        }
        let mut ignored = Vec::new();
        let doc: Document = crate::config::parse::typed(value, &mut ignored)
            .map_err(|e| format!("{file}: {}: {}", if e.path.is_empty() { "." } else { &e.path }, e.message))?;
        let warning = |path: String, message: String| Problem {
            severity: Severity::Warning,
            source: SourceRef { file: file.into(), doc: 0 },
            object: None,
            path,
            message,
        };
        let mut problems: Vec<Problem> = ignored
            .into_iter()
            .map(|path| warning(path, "not a field of Istio's MeshNetworks: ignored".into()))
            .collect();
        let mut out = MeshNetworks::default();
        for (name, network) in doc.networks {
            let at = |rest: &str| format!("networks.{name}.{rest}");
            let mut parsed = Network::default();
            for (i, e) in network.endpoints.into_iter().enumerate() {
                let path = at(&format!("endpoints[{i}]"));
                parsed.endpoints.push(match (e.from_cidr, e.from_registry) {
                    (Some(cidr), None) => NetworkEndpoints::FromCidr(
                        cidr.parse().map_err(|_| format!("{file}: {path}.fromCidr: {cidr:?} is not a CIDR"))?,
                    ),
                    (None, Some(registry)) if is_dns_label(&registry) => {
                        NetworkEndpoints::FromRegistry(registry.into())
                    }
                    (None, Some(registry)) => {
                        return Err(format!(
                            "{file}: {path}.fromRegistry: {registry:?} is not a cluster id (a DNS label)"
                        ));
                    }
                    (Some(_), Some(_)) => {
                        return Err(format!("{file}: {path}: sets fromCidr and fromRegistry: one of them"));
                    }
                    (None, None) => return Err(format!("{file}: {path}: sets neither fromCidr nor fromRegistry")),
                });
            }
            for (i, g) in network.gateways.into_iter().enumerate() {
                let path = at(&format!("gateways[{i}]"));
                let target = match (g.registry_service_name, g.address) {
                    (Some(host), None) if is_fqdn(&host) => GatewayTarget::RegistryServiceName(host.into()),
                    (Some(host), None) => {
                        return Err(format!(
                            "{file}: {path}.registryServiceName: {host:?} is not a fully qualified host name"
                        ));
                    }
                    (None, Some(address)) if address.parse::<std::net::IpAddr>().is_ok() || is_fqdn(&address) => {
                        GatewayTarget::Address(address.into())
                    }
                    (None, Some(address)) => {
                        return Err(format!("{file}: {path}.address: {address:?} is not an IP address or DNS name"));
                    }
                    (Some(_), Some(_)) => {
                        return Err(format!("{file}: {path}: sets registryServiceName and address: one of them"));
                    }
                    (None, None) => {
                        return Err(format!("{file}: {path}: sets neither registryServiceName nor address"));
                    }
                };
                let port = g.port.unwrap_or(0);
                if !(1..=65535).contains(&port) {
                    return Err(format!("{file}: {path}.port: {port} is not a port (1 to 65535)"));
                }
                if g.locality.is_some() {
                    problems.push(warning(
                        format!("{path}.locality"),
                        "not applied (istiod ignores it too): the gateway's endpoints take the locality of the \
                         endpoints it stands for"
                            .into(),
                    ));
                }
                parsed.gateways.push(NetworkGatewaySpec { target, port });
            }
            out.networks.insert(name.into(), parsed);
        }
        Ok((out, problems))
    }

    /// Whether no network is defined.
    pub fn is_empty(&self) -> bool {
        self.networks.is_empty()
    }
}

/// A fully qualified host name: dot-separated DNS labels, at least two.
fn is_fqdn(s: &str) -> bool {
    let s = s.strip_suffix('.').unwrap_or(s);
    s.len() <= 255 && s.contains('.') && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISTIO_SAMPLE: &str = "\
networks:
  network1:
    endpoints:
    - fromRegistry: cluster1
    gateways:
    - registryServiceName: istio-eastwestgateway.istio-system.svc.cluster.local
      port: 15443
  network2:
    endpoints:
    - fromCidr: 10.2.0.0/16
    gateways:
    - address: 192.0.2.7
      port: 15443
      locality: us-east1
";

    #[test]
    fn reads_istios_shapes_and_reports_what_it_does_not_apply() {
        let (networks, problems) = MeshNetworks::parse("meshNetworks", ISTIO_SAMPLE).unwrap();
        let n1 = &networks.networks["network1"];
        assert_eq!(n1.endpoints, [NetworkEndpoints::FromRegistry("cluster1".into())]);
        assert_eq!(
            n1.gateways,
            [NetworkGatewaySpec {
                target: GatewayTarget::RegistryServiceName(
                    "istio-eastwestgateway.istio-system.svc.cluster.local".into()
                ),
                port: 15443
            }]
        );
        let n2 = &networks.networks["network2"];
        assert_eq!(n2.endpoints, [NetworkEndpoints::FromCidr("10.2.0.0/16".parse().unwrap())]);
        assert_eq!(n2.gateways[0].target, GatewayTarget::Address("192.0.2.7".into()));
        let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, ["networks.network2.gateways[0].locality"]);
        // snake_case keys, as the protos spell them, and an unknown field.
        let (snake, problems) = MeshNetworks::parse(
            "f",
            "networks: {n: {endpoints: [{from_registry: Kubernetes}], gateways: [{registry_service_name: a.b, port: 1}], weight: 3}}",
        )
        .unwrap();
        assert_eq!(
            snake.networks["n"].endpoints,
            [NetworkEndpoints::FromRegistry("Kubernetes".into())],
            "Istio's default id"
        );
        assert_eq!(problems[0].path, "networks.n.weight");
        assert_eq!(MeshNetworks::parse("f", "").unwrap().0, MeshNetworks::default());
        assert_eq!(MeshNetworks::parse("f", "networks: {}").unwrap().0, MeshNetworks::default());
    }

    #[test]
    fn refuses_what_istios_validation_refuses_with_the_path() {
        for (doc, wanted) in [
            ("networks: {n: {endpoints: [{fromCidr: 10.0.0.0/33}]}}", "networks.n.endpoints[0].fromCidr"),
            ("networks: {n: {endpoints: [{fromRegistry: not_a_label}]}}", "networks.n.endpoints[0].fromRegistry"),
            ("networks: {n: {endpoints: [{fromRegistry: a, fromCidr: 10.0.0.0/8}]}}", "one of them"),
            ("networks: {n: {gateways: [{address: 1.2.3.4}]}}", "networks.n.gateways[0].port: 0"),
            ("networks: {n: {gateways: [{address: '-x', port: 15443}]}}", "networks.n.gateways[0].address"),
            ("networks: {n: {gateways: [{registryServiceName: eastwest, port: 15443}]}}", "registryServiceName"),
            ("networks: {n: {gateways: [{port: 15443}]}}", "sets neither"),
            ("networks: {n: {endpoints: 3}}", "networks.n.endpoints"),
            ("[1]", "a mapping"),
        ] {
            let err = MeshNetworks::parse("mn", doc).unwrap_err();
            assert!(err.starts_with("mn: ") && err.contains(wanted), "{doc}: {err}");
        }
    }
}
