//! Consul's catalog as Istio 1.7's Consul registry read it
//! (`pilot/pkg/serviceregistry/consul` at Istio 1.7.8), turned into the
//! ServiceEntry a file could hold, so that a Consul service is routed,
//! given DestinationRules and VirtualServices, and validated like any
//! other.
//!
//! The mapping, service by service (`/v1/catalog/service/NAME`):
//! - **Host** `NAME.service.consul`, in namespace `default`, visible to
//!   every namespace, without a virtual IP (Istio gave none).
//! - **Ports** from each instance's `ServicePort`, merged by number; the
//!   protocol is `ServiceMeta.protocol` (case-insensitive; none is TCP, an
//!   unknown one is TCP and reported), the port's name that protocol. Two
//!   instances that give one number two protocols: the first wins, the
//!   other is reported.
//! - **Endpoints** (resolution `STATIC`): `ServiceAddress`, else the
//!   node's `Address`; labels from the `key|value` tags (a tag without `|`
//!   is no label, a third part is dropped); locality the `Datacenter`.
//!   Istio 1.7 reached an instance only on its own port number; a
//!   ServiceEntry endpoint is reached on every port of its service, so
//!   each port maps to the instance's own port: where every instance
//!   registers one port, that is the same, and where instances register
//!   different ports (Nomad's dynamic ports), every port reaches each
//!   instance where it listens (reported, since Istio 1.7 differed).
//! - **`ServiceMeta.external`** on any instance: the service is
//!   `MESH_EXTERNAL` with resolution `NONE` (passthrough, Istio 1.7's
//!   Passthrough), and its instances are not endpoints.
//! - An instance whose address is not an IP is left out and reported
//!   (STATIC takes IPs; Istio 1.7 sent it on and Envoy refused it).
//!
//! Invariant: [`service_entry`] yields a document or nothing (a service
//! with no instance left has no ServiceEntry), and every instance or field
//! it does not use is in its problems.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Deserialize;
use serde_json::{Value, json};

/// The namespace Consul services are in (Istio's default config namespace).
pub const NAMESPACE: &str = "default";
/// The domain of Consul services' hosts.
pub const DOMAIN: &str = "service.consul";

/// One element of `/v1/catalog/service/NAME` (the fields read).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct CatalogService {
    /// The node's name.
    #[serde(rename = "Node")]
    pub node: String,
    /// The node's address.
    #[serde(rename = "Address")]
    pub address: String,
    /// The datacenter: the instance's locality.
    #[serde(rename = "Datacenter")]
    pub datacenter: String,
    /// The instance's id.
    #[serde(rename = "ServiceID")]
    pub service_id: String,
    /// The service's name.
    #[serde(rename = "ServiceName")]
    pub service_name: String,
    /// The instance's own address (empty: the node's).
    #[serde(rename = "ServiceAddress")]
    pub service_address: String,
    /// Its port.
    #[serde(rename = "ServicePort")]
    pub service_port: u32,
    /// Its tags (`key|value` ones are labels).
    #[serde(rename = "ServiceTags", deserialize_with = "null_as_default")]
    pub service_tags: Vec<String>,
    /// Its metadata (`protocol`, `external`).
    #[serde(rename = "ServiceMeta", deserialize_with = "null_as_default")]
    pub service_meta: BTreeMap<String, String>,
}

/// `null` (as older Consul servers write an empty list or map) as empty.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// The host of Consul service `name`.
pub fn hostname(name: &str) -> String {
    format!("{name}.{DOMAIN}")
}

/// The protocols Istio 1.7 read from `ServiceMeta.protocol` (its
/// `protocol.Parse`), as a ServiceEntry spells them.
const PROTOCOLS: [(&str, &str); 13] = [
    ("tcp", "TCP"),
    ("udp", "UDP"),
    ("grpc", "GRPC"),
    ("grpc-web", "GRPC-Web"),
    ("http", "HTTP"),
    ("http_proxy", "HTTP_PROXY"),
    ("http2", "HTTP2"),
    ("https", "HTTPS"),
    ("thrift", "Thrift"),
    ("tls", "TLS"),
    ("mongo", "Mongo"),
    ("redis", "Redis"),
    ("mysql", "MySQL"),
];

/// The ServiceEntry document of Consul service `name` with `instances`,
/// and what of them it does not use, each a sentence.
pub fn service_entry(name: &str, instances: &[CatalogService]) -> (Option<Value>, Vec<String>) {
    let mut problems = Vec::new();
    // Ports by number: (name, protocol), first protocol wins.
    let mut ports: BTreeMap<u32, (String, &'static str)> = BTreeMap::new();
    for instance in instances {
        let written = instance.service_meta.get("protocol").map(String::as_str).unwrap_or("");
        let lower = if written.is_empty() { "tcp".to_string() } else { written.to_ascii_lowercase() };
        let protocol = match PROTOCOLS.iter().find(|(k, _)| *k == lower) {
            Some((_, p)) => *p,
            None => {
                problems.push(format!(
                    "instance {}: ServiceMeta.protocol {:?} is no protocol Istio knows: served as TCP, as Istio did",
                    crate::text::shown(&instance.service_id),
                    crate::text::shown(written)
                ));
                "TCP"
            }
        };
        match ports.get(&instance.service_port) {
            Some((_, first)) if *first != protocol => problems.push(format!(
                "instance {}: port {} is {first} for an earlier instance: {protocol} is not used, as Istio did",
                crate::text::shown(&instance.service_id),
                instance.service_port
            )),
            Some(_) => {}
            None => {
                ports.insert(instance.service_port, (lower, protocol));
            }
        }
    }
    if ports.is_empty() {
        return (None, problems);
    }
    // Names: the protocol, made unique by the number where two share one.
    let mut named: Vec<(u32, String, &str)> = Vec::new();
    for (number, (name, protocol)) in &ports {
        let shared = ports.values().filter(|(n, _)| n == name).count() > 1;
        let name = if shared { format!("{name}-{number}") } else { name.clone() };
        named.push((*number, name, protocol));
    }
    if ports.len() > 1 {
        problems.push(format!(
            "instances register ports {}: each port reaches every instance on the instance's own port (Istio 1.7 \
             reached an instance on its own port number only)",
            ports.keys().map(u32::to_string).collect::<Vec<_>>().join(", ")
        ));
    }
    let external = instances.iter().any(|i| i.service_meta.get("external").is_some_and(|e| !e.is_empty()));
    let mut endpoints = Vec::new();
    if !external {
        for instance in instances {
            let address =
                if instance.service_address.is_empty() { &instance.address } else { &instance.service_address };
            if address.parse::<IpAddr>().is_err() {
                problems.push(format!(
                    "instance {}: its address {:?} is not an IP: left out (a Consul service is STATIC)",
                    crate::text::shown(&instance.service_id),
                    crate::text::shown(address)
                ));
                continue;
            }
            let labels: BTreeMap<&str, &str> = instance
                .service_tags
                .iter()
                .filter_map(|tag| {
                    let mut parts = tag.split('|');
                    let key = parts.next()?;
                    parts.next().map(|value| (key, value))
                })
                .collect();
            let own: BTreeMap<&str, u32> = named.iter().map(|(_, n, _)| (n.as_str(), instance.service_port)).collect();
            let mut endpoint = json!({"address": address, "ports": own});
            if !labels.is_empty() {
                endpoint["labels"] = json!(labels);
            }
            if !instance.datacenter.is_empty() {
                endpoint["locality"] = json!(instance.datacenter);
            }
            endpoints.push(endpoint);
        }
        if endpoints.is_empty() {
            return (None, problems);
        }
    }
    let ports: Vec<Value> = named
        .iter()
        .map(|(number, name, protocol)| json!({"number": number, "name": name, "protocol": protocol}))
        .collect();
    let spec = if external {
        json!({"hosts": [hostname(name)], "ports": ports, "location": "MESH_EXTERNAL", "resolution": "NONE"})
    } else {
        json!({"hosts": [hostname(name)], "ports": ports, "location": "MESH_INTERNAL", "resolution": "STATIC", "endpoints": endpoints})
    };
    let document = json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "ServiceEntry",
        "metadata": {"name": format!("consul-{name}"), "namespace": NAMESPACE},
        "spec": spec,
    });
    (Some(document), problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigObject;
    use crate::config::parse::parse_json;

    fn instance(id: &str, address: &str, port: u32, tags: &[&str], meta: &[(&str, &str)]) -> CatalogService {
        CatalogService {
            node: "node-1".into(),
            address: "10.0.0.1".into(),
            datacenter: "dc1".into(),
            service_id: id.into(),
            service_name: "reviews".into(),
            service_address: address.into(),
            service_port: port,
            service_tags: tags.iter().map(|t| t.to_string()).collect(),
            service_meta: meta.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    #[test]
    fn a_service_becomes_a_static_entry_with_labels_from_tags_and_the_datacenter_as_locality() {
        let instances = [
            instance("r1", "10.1.0.1", 9080, &["version|v1", "plain", "k=v", "a|b|c"], &[("protocol", "HTTP")]),
            instance("r2", "", 9080, &["version|v2"], &[("protocol", "http")]),
        ];
        let (doc, problems) = service_entry("reviews", &instances);
        assert!(problems.is_empty(), "{problems:?}");
        let parsed = parse_json("consul:http://c:8500/reviews", &doc.unwrap());
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        let ConfigObject::ServiceEntry(se) = &parsed.objects[0].0 else { panic!() };
        assert_eq!(se.spec.hosts, ["reviews.service.consul"]);
        assert_eq!((se.spec.ports[0].number, se.spec.ports[0].protocol.as_deref()), (9080, Some("HTTP")));
        assert_eq!(se.spec.resolution.as_deref(), Some("STATIC"));
        let e1 = &se.spec.endpoints[0];
        assert_eq!(e1.address, "10.1.0.1");
        assert_eq!(
            e1.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<Vec<_>>(),
            [("a", "b"), ("version", "v1")]
        );
        assert_eq!(e1.locality.as_deref(), Some("dc1"));
        assert_eq!(se.spec.endpoints[1].address, "10.0.0.1", "the node address");
    }

    #[test]
    fn ports_merge_by_number_and_what_is_not_used_is_reported() {
        let instances = [
            instance("a", "10.1.0.1", 9080, &[], &[("protocol", "grpc")]),
            instance("b", "10.1.0.2", 9080, &[], &[("protocol", "http")]),
            instance("c", "10.1.0.3", 9090, &[], &[("protocol", "carrier-pigeon")]),
            instance("d", "reviews.example", 9080, &[], &[]),
        ];
        let (doc, problems) = service_entry("reviews", &instances);
        let doc = doc.unwrap();
        assert_eq!(
            doc["spec"]["ports"],
            json!([
                {"number": 9080, "name": "grpc", "protocol": "GRPC"},
                {"number": 9090, "name": "carrier-pigeon", "protocol": "TCP"},
            ])
        );
        assert_eq!(doc["spec"]["endpoints"][2]["ports"], json!({"grpc": 9090, "carrier-pigeon": 9090}));
        let text = problems.join("\n");
        for expected in ["port 9080 is GRPC", "carrier-pigeon", "ports 9080, 9090", "reviews.example"] {
            assert!(text.contains(expected), "{expected} not in {text}");
        }
    }

    #[test]
    fn an_external_service_passes_through_and_no_instance_means_no_entry() {
        let (doc, _) =
            service_entry("api", &[instance("x", "10.1.0.1", 443, &[], &[("external", "true"), ("protocol", "tls")])]);
        let doc = doc.unwrap();
        assert_eq!(
            (doc["spec"]["location"].as_str(), doc["spec"]["resolution"].as_str()),
            (Some("MESH_EXTERNAL"), Some("NONE"))
        );
        assert!(doc["spec"].get("endpoints").is_none());
        assert!(parse_json("x", &doc).problems.is_empty());
        assert_eq!(service_entry("gone", &[]).0, None);
        let named: CatalogService =
            serde_json::from_str(r#"{"ServiceName":"a","ServiceTags":null,"ServiceMeta":null,"ServicePort":1}"#)
                .unwrap();
        assert!(named.service_tags.is_empty() && named.service_meta.is_empty());
    }
}
