//! Synthetic meshes of any size, for benches, load tests and sizing.
//!
//! A [`MeshSpec`] describes the shape (services, endpoints per service,
//! namespaces, Sidecar scoping); [`MeshSpec::objects`] produces the typed
//! config objects, exactly what the YAML of such a mesh would parse to.
//! Namespace `ns-0` is the *shared* namespace: with scoping on, every
//! namespace's Sidecar sees its own namespace and `ns-0`.
//!
//! Addresses are data only (10.0.0.0/8): nothing ever connects to them.

use std::collections::BTreeMap;

use crate::config::istio::{
    Destination, HttpRoute, HttpRouteDestination, IstioEgressListener, Sidecar, SidecarSpec, VirtualService,
    VirtualServiceSpec,
};
use crate::config::k8s::{Pod, PodStatus, Service, ServicePort, ServiceSpec};
use crate::config::{ConfigKey, ConfigKind, ConfigObject, ObjectMeta};

/// The shape of a synthetic mesh.
#[derive(Debug, Clone, Copy)]
pub struct MeshSpec {
    /// Number of services.
    pub services: usize,
    /// Endpoints of service `i`: `min + i % (max - min + 1)`.
    pub endpoints: (usize, usize),
    /// Number of namespaces (`ns-0` … ); services are spread round-robin.
    pub namespaces: usize,
    /// Every namespace gets a Sidecar that sees `./*` and `ns-0/*`.
    pub sidecar_scoping: bool,
    /// Every n-th service gets a VirtualService (0: none).
    pub virtual_service_every: usize,
    /// The one service port every service uses.
    pub port: u32,
}

impl MeshSpec {
    /// `services` services with 5 to 10 endpoints in 100 namespaces, one
    /// VirtualService per 10 services, port 8080.
    pub fn new(services: usize) -> MeshSpec {
        MeshSpec {
            services,
            endpoints: (5, 10),
            namespaces: 100,
            sidecar_scoping: false,
            virtual_service_every: 10,
            port: 8080,
        }
    }

    /// The same with Sidecar scoping on.
    pub fn scoped(self) -> MeshSpec {
        MeshSpec { sidecar_scoping: true, ..self }
    }

    /// Namespace of service `i`.
    pub fn namespace_of(&self, i: usize) -> String {
        format!("ns-{}", i % self.namespaces.max(1))
    }

    /// Name of service `i`.
    pub fn service_name(i: usize) -> String {
        format!("svc-{i}")
    }

    /// Endpoints of service `i`.
    pub fn endpoints_of(&self, i: usize) -> usize {
        let (min, max) = self.endpoints;
        min + i % (max.saturating_sub(min) + 1)
    }

    /// The address of endpoint `e` of service `i` (unique across the mesh).
    pub fn address(i: usize, e: usize) -> String {
        let n = i * 16 + e + 1;
        format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff)
    }

    /// Every object of the mesh.
    pub fn objects(&self) -> Vec<ConfigObject> {
        let mut out = Vec::new();
        for i in 0..self.services {
            out.push(self.service(i));
            for e in 0..self.endpoints_of(i) {
                out.push(self.pod(i, e, &Self::address(i, e)));
            }
            if self.virtual_service_every > 0 && i.is_multiple_of(self.virtual_service_every) {
                out.push(self.virtual_service(i, 90));
            }
        }
        if self.sidecar_scoping {
            for n in 0..self.namespaces {
                out.push(sidecar(&format!("ns-{n}")));
            }
        }
        out
    }

    /// Service `i`.
    pub fn service(&self, i: usize) -> ConfigObject {
        let name = Self::service_name(i);
        ConfigObject::Service(Service {
            metadata: meta(&name, &self.namespace_of(i), BTreeMap::new()),
            spec: ServiceSpec {
                ports: vec![ServicePort { name: Some("http".into()), port: self.port, ..Default::default() }],
                selector: [("app".to_string(), name)].into(),
                ..Default::default()
            },
            status: Default::default(),
        })
    }

    /// Endpoint `e` of service `i` as a running Pod at `address`.
    pub fn pod(&self, i: usize, e: usize, address: &str) -> ConfigObject {
        let labels: BTreeMap<String, String> = [
            ("app".to_string(), Self::service_name(i)),
            ("version".to_string(), if e.is_multiple_of(2) { "v1" } else { "v2" }.to_string()),
        ]
        .into();
        ConfigObject::Pod(Pod {
            metadata: meta(&format!("{}-{e}", Self::service_name(i)), &self.namespace_of(i), labels),
            status: PodStatus { pod_ip: Some(address.into()), phase: Some("Running".into()), ..Default::default() },
            ..Default::default()
        })
    }

    /// The EndpointSlice of service `i`, as a Kubernetes controller writes
    /// it: every one of its Pods, at `addresses`, ready.
    pub fn slice(&self, i: usize, addresses: &[String]) -> ConfigObject {
        use crate::config::k8s::{EndpointSlice, ObjectReference, SERVICE_NAME_LABEL, SliceEndpoint, SlicePort};
        let name = Self::service_name(i);
        let namespace = self.namespace_of(i);
        let labels: BTreeMap<String, String> = [(SERVICE_NAME_LABEL.to_string(), name.clone())].into();
        ConfigObject::EndpointSlice(EndpointSlice {
            metadata: meta(&format!("{name}-slice"), &namespace, labels),
            address_type: Some("IPv4".into()),
            endpoints: addresses
                .iter()
                .enumerate()
                .map(|(e, address)| SliceEndpoint {
                    addresses: vec![address.clone()],
                    target_ref: Some(ObjectReference {
                        kind: Some("Pod".into()),
                        name: Some(format!("{name}-{e}")),
                        namespace: Some(namespace.clone()),
                    }),
                    ..Default::default()
                })
                .collect(),
            ports: vec![SlicePort { name: Some("http".into()), port: Some(self.port), protocol: None }],
        })
    }

    /// The slices of every service, at their Pods' addresses.
    pub fn slices(&self) -> Vec<ConfigObject> {
        (0..self.services)
            .map(|i| self.slice(i, &(0..self.endpoints_of(i)).map(|e| Self::address(i, e)).collect::<Vec<_>>()))
            .collect()
    }

    /// Key of endpoint `e`'s Pod of service `i`.
    pub fn pod_key(&self, i: usize, e: usize) -> ConfigKey {
        ConfigKey::new(ConfigKind::Pod, &self.namespace_of(i), &format!("{}-{e}", Self::service_name(i)))
    }

    /// A VirtualService for service `i` that splits traffic `weight`/`100 - weight`
    /// between it and the next service of its namespace.
    pub fn virtual_service(&self, i: usize, weight: i64) -> ConfigObject {
        let name = Self::service_name(i);
        // The next service of the same namespace that exists (or itself).
        let n = self.namespaces.max(1);
        let other = Self::service_name(if i + n < self.services { i + n } else { i % n });
        let dest = |host: &str, w: i64| HttpRouteDestination {
            destination: Destination { host: host.into(), ..Default::default() },
            weight: Some(w),
            headers: None,
        };
        ConfigObject::VirtualService(VirtualService {
            metadata: meta(&name, &self.namespace_of(i), BTreeMap::new()),
            spec: VirtualServiceSpec {
                hosts: vec![name.clone()],
                http: vec![HttpRoute {
                    route: vec![dest(&name, weight), dest(&other, 100 - weight)],
                    ..Default::default()
                }],
                ..Default::default()
            },
        })
    }

    /// The Istio node id of sidecar `k` (placed in namespace `k % namespaces`,
    /// labelled as a workload of service `k % services`'s namespace peer).
    pub fn sidecar_node_id(&self, k: usize) -> String {
        let ns = format!("ns-{}", k % self.namespaces.max(1));
        format!("sidecar~10.255.{}.{}~client-{k}.{ns}~{ns}.svc.cluster.local", (k >> 8) & 0xff, k & 0xff)
    }
}

fn meta(name: &str, namespace: &str, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta { name: name.into(), namespace: namespace.into(), labels, ..Default::default() }
}

fn sidecar(namespace: &str) -> ConfigObject {
    ConfigObject::Sidecar(Box::new(Sidecar {
        metadata: meta("default", namespace, BTreeMap::new()),
        spec: SidecarSpec {
            egress: vec![IstioEgressListener { hosts: vec!["./*".into(), "ns-0/*".into()], ..Default::default() }],
            ..Default::default()
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_spec() {
        let spec = MeshSpec::new(100).scoped();
        let objects = spec.objects();
        let count = |k: ConfigKind| objects.iter().filter(|o| o.kind() == k).count();
        assert_eq!(count(ConfigKind::Service), 100);
        assert_eq!(count(ConfigKind::Sidecar), 100);
        assert_eq!(count(ConfigKind::VirtualService), 10);
        let pods = count(ConfigKind::Pod);
        assert!((500..=1000).contains(&pods), "{pods}");
        for o in &objects {
            let errors: Vec<_> = crate::config::validate::validate(o)
                .into_iter()
                .filter(|e| e.severity == crate::config::Severity::Error)
                .collect();
            assert!(errors.is_empty(), "{}: {errors:?}", o.key());
        }
    }

    #[test]
    fn addresses_are_unique() {
        let spec = MeshSpec::new(2000);
        let mut seen = std::collections::HashSet::new();
        for i in 0..spec.services {
            for e in 0..spec.endpoints_of(i) {
                assert!(seen.insert(MeshSpec::address(i, e)));
            }
        }
    }
}
