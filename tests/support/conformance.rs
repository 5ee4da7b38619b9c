//! The Gateway API conformance suite's HTTP tests, run against meshpush and
//! real Envoys instead of a cluster.
//!
//! The suite (kubernetes-sigs/gateway-api, `conformance/`) applies its base
//! manifests once, then for each test applies the test's manifests, waits
//! for the status it expects, sends requests to the Gateway's address and
//! checks what the echo backend saw and what the client got, and deletes
//! the test's manifests. [`Suite`] does the same, with these stand-ins for
//! what a cluster provides:
//!
//! * **Gateway addresses.** A cluster gives each Gateway its own address.
//!   Here each Gateway is given a loopback address (`spec.addresses`, type
//!   `IPAddress`), and a real Envoy is started as its router (`meshpush
//!   bootstrap --gateway NS/NAME`, node IP that address), so its listeners
//!   bind that address on the ports the manifests say.
//! * **Pods.** Each Deployment of the echo server becomes its Pods (at
//!   loopback addresses, labelled from the template) and one test
//!   [`Backend`] per Pod, answering on the container's port. A backend says
//!   `NAMESPACE/POD` in `x-backend` and echoes the request's headers, which
//!   is what the suite's echo server reports.
//! * **Status.** Conditions are read from meshpush's `/debug/configz`.
//!
//! The manifests are the suite's own files (`tests/data/gateway-api/conformance`,
//! Apache-2.0), with `{GATEWAY_CLASS_NAME}` replaced by `istio` as the
//! suite's applier replaces it.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde_yaml_ng::{Mapping, Value};

use super::envoy::{Envoy, Section};
use super::http;
use super::manifests::router_node;
use super::scene::Scene;

/// The suite's namespace of shared infrastructure.
pub const INFRA: &str = "gateway-conformance-infra";
/// The suite's application namespace.
pub const APP: &str = "gateway-conformance-app-backend";
/// The suite's web namespace.
pub const WEB: &str = "gateway-conformance-web-backend";

/// How many answers in a row must match (the suite's default).
const CONSECUTIVE: usize = 3;
/// How long an expectation may take to hold (the suite's default for
/// eventually consistent responses is longer; a loopback mesh converges in
/// well under this).
const CONVERGE: Duration = Duration::from_secs(30);

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/gateway-api/conformance")
}

/// One expected exchange: the suite's `ExpectedResponse`.
#[derive(Debug, Clone)]
pub struct Expect {
    host: String,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    status: u16,
    backend: Option<String>,
    namespace: String,
    seen_path: Option<String>,
    seen_headers: Vec<(String, String)>,
    absent_seen_headers: Vec<String>,
    redirect: Option<Redirect>,
}

/// Where a redirect should point (`Location`); `port` empty means the
/// scheme's default, as the suite checks it.
#[derive(Debug, Clone, Default)]
pub struct Redirect {
    /// Scheme (default `http`).
    pub scheme: String,
    /// Host (default: the request's).
    pub host: String,
    /// Port (empty: the scheme's default or none).
    pub port: String,
    /// Path (default: the request's).
    pub path: String,
}

impl Expect {
    /// `GET path`, expected to reach a backend of the infra namespace.
    pub fn get(path: &str) -> Expect {
        Expect {
            host: String::new(),
            method: "GET".into(),
            path: path.into(),
            headers: Vec::new(),
            status: 200,
            backend: None,
            namespace: INFRA.into(),
            seen_path: None,
            seen_headers: Vec::new(),
            absent_seen_headers: Vec::new(),
            redirect: None,
        }
    }

    /// With `Host: host`.
    pub fn host(mut self, host: &str) -> Expect {
        self.host = host.into();
        self
    }

    /// With method `method`.
    pub fn method(mut self, method: &str) -> Expect {
        self.method = method.into();
        self
    }

    /// With request header `name: value`.
    pub fn header(mut self, name: &str, value: &str) -> Expect {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Answered by a Pod whose name starts with `backend`.
    pub fn backend(mut self, backend: &str) -> Expect {
        self.backend = Some(backend.into());
        self
    }

    /// ...of namespace `namespace`.
    pub fn namespace(mut self, namespace: &str) -> Expect {
        self.namespace = namespace.into();
        self
    }

    /// Answered with `status` (no backend check unless one is named).
    pub fn status(mut self, status: u16) -> Expect {
        self.status = status;
        self
    }

    /// The backend sees `path` (default: the request's).
    pub fn seen_path(mut self, path: &str) -> Expect {
        self.seen_path = Some(path.into());
        self
    }

    /// The backend sees header `name: value`.
    pub fn seen_header(mut self, name: &str, value: &str) -> Expect {
        self.seen_headers.push((name.into(), value.into()));
        self
    }

    /// The backend does not see header `name`.
    pub fn seen_without(mut self, name: &str) -> Expect {
        self.absent_seen_headers.push(name.into());
        self
    }

    /// Answered with a redirect (status `status`) to `redirect`.
    pub fn redirect(mut self, status: u16, redirect: Redirect) -> Expect {
        self.status = status;
        self.redirect = Some(redirect);
        self
    }

    fn describe(&self) -> String {
        let headers: Vec<String> = self.headers.iter().map(|(n, v)| format!("{n}: {v}")).collect();
        format!("{} {}{} {headers:?}", self.method, self.host, self.path)
    }

    /// Whether `response` is what is expected; why not, when not.
    fn check(&self, response: &http::Response) -> Result<(), String> {
        if response.status != self.status {
            return Err(format!("status {} (expected {}), body {:?}", response.status, self.status, response.body));
        }
        if let Some(r) = &self.redirect {
            let location = response.header("location").ok_or("no location header")?;
            let (scheme, rest) = location.split_once("://").ok_or_else(|| format!("location {location:?}"))?;
            let (authority, path) = rest.find('/').map_or((rest, "/"), |i| (&rest[..i], &rest[i..]));
            let (host, port) = authority.rsplit_once(':').unwrap_or((authority, ""));
            let want_scheme = if r.scheme.is_empty() { "http" } else { &r.scheme };
            let want_host = if r.host.is_empty() { &self.host } else { &r.host };
            let want_path = if r.path.is_empty() { &self.path } else { &r.path };
            let default_port = match scheme {
                "http" => "80",
                "https" => "443",
                _ => "",
            };
            let port_ok = if r.port.is_empty() { port.is_empty() || port == default_port } else { port == r.port };
            if scheme != want_scheme || host != want_host || path != want_path || !port_ok {
                return Err(format!(
                    "location {location:?}, expected {want_scheme}://{want_host}:{}{want_path}",
                    r.port
                ));
            }
            return Ok(());
        }
        if response.status != 200 {
            return Ok(());
        }
        let seen = response.header("x-backend").ok_or("no x-backend: not answered by a backend")?;
        let (namespace, pod) = seen.split_once('/').ok_or_else(|| format!("x-backend {seen:?}"))?;
        if let Some(backend) = &self.backend
            && (!pod.starts_with(backend.as_str()) || namespace != self.namespace)
        {
            return Err(format!("answered by {seen}, expected {}/{backend}…", self.namespace));
        }
        let seen_path = response.header("x-request-path").unwrap_or_default();
        let want_path = self.seen_path.as_deref().unwrap_or(&self.path);
        if seen_path != want_path {
            return Err(format!("the backend saw path {seen_path:?}, expected {want_path:?}"));
        }
        for (name, value) in &self.seen_headers {
            let name = format!("x-echo-{}", name.to_ascii_lowercase());
            let values: Vec<&str> =
                response.headers.iter().filter(|(n, _)| *n == name).map(|(_, v)| v.as_str()).collect();
            if values.join(",") != *value {
                return Err(format!("the backend saw {name} {values:?}, expected {value:?}"));
            }
        }
        for name in &self.absent_seen_headers {
            if let Some(v) = response.header(&format!("x-echo-{}", name.to_ascii_lowercase())) {
                return Err(format!("the backend saw {name}: {v}, expected none"));
            }
        }
        Ok(())
    }
}

/// A Gateway of the suite and the Envoy serving it.
struct GatewayProxy {
    address: Ipv4Addr,
    file: Option<String>,
}

/// The suite's infrastructure: meshpush serving the base manifests, one
/// Envoy per Gateway, one backend per echo Pod.
pub struct Suite {
    scene: Scene,
    gateways: BTreeMap<String, GatewayProxy>,
    next_gateway: u8,
    next_pod: u8,
    layout: Layout,
    /// The CA of the suite's TLS certificate (`tls-validity-checks-certificate`).
    ca: super::tls::TestCa,
    /// Every Pod: (namespace, name, address, port).
    pods: Vec<(String, String, Ipv4Addr, u16)>,
}

/// Where a suite's Gateways and Pods live (`127.0.N.x`), and which port a
/// Deployment's Pods answer on (`None`: it gets no Pods).
#[derive(Clone, Copy)]
pub struct Layout {
    /// The third octet of Gateway addresses.
    pub gateways: u8,
    /// The third octet of Pod addresses.
    pub pods: u8,
    /// The port a Deployment's container answers on.
    pub port: fn(&Value) -> Option<u16>,
}

/// The conformance suite's layout: the plain HTTP echo servers.
pub const CONFORMANCE: Layout = Layout { gateways: 170, pods: 171, port: echo_port };

/// What the stand-ins make of a manifest file: the documents to serve, the
/// Gateways in it, and the Pods of its Deployments.
struct Prepared {
    yaml: String,
    gateways: Vec<(String, Ipv4Addr)>,
    pods: Vec<(String, String, Ipv4Addr, u16)>,
}

impl Suite {
    /// Starts meshpush on the base manifests, an Envoy per Gateway and a
    /// backend per echo Pod; returns once every Gateway's Envoy is connected.
    pub fn start() -> Suite {
        let base = std::fs::read_to_string(data_dir().join("base.yaml")).expect("the base manifests");
        Suite::start_on(&[("base.yaml", &base)], CONFORMANCE)
    }

    /// The suite's TLS certificate's CA (PEM), which clients of its HTTPS
    /// listeners trust.
    pub fn ca_pem(&self) -> &str {
        &self.ca.pem
    }

    /// `GET https://host/path` through Gateway `gateway` on `port`, TLS
    /// verified against the suite's CA with `host` as SNI (curl, as the
    /// suite's TLS round tripper): `(status, x-backend)`.
    pub fn https_get(&self, gateway: &str, port: u16, host: &str, path: &str) -> Result<(u16, String), String> {
        self.curl_https(&self.ca.pem, gateway, port, host, path, &[])
    }

    /// [`Suite::https_get`] over HTTP/1.1 (what a TCP route's HTTP backend,
    /// or a backend TLS passes through to, speaks: the Gateway offers `h2`
    /// too when it terminates TLS, as Istio's does), trusting the CA
    /// `ca_pem` (a backend's, when the Gateway passes TLS through).
    pub fn https1_get_trusting(
        &self,
        ca_pem: &str,
        gateway: &str,
        port: u16,
        host: &str,
        path: &str,
    ) -> Result<(u16, String), String> {
        self.curl_https(ca_pem, gateway, port, host, path, &["--http1.1"])
    }

    fn curl_https(
        &self,
        ca_pem: &str,
        gateway: &str,
        port: u16,
        host: &str,
        path: &str,
        extra: &[&str],
    ) -> Result<(u16, String), String> {
        let target = self.address(gateway, port);
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, ca_pem).map_err(|e| e.to_string())?;
        let out = std::process::Command::new("curl")
            .args(extra)
            .args(["-sS", "--max-time", "5", "-o", "/dev/null", "-D", "-", "--cacert"])
            .arg(&ca)
            .arg("--resolve")
            .arg(format!("{host}:{port}:{}", target.ip()))
            .arg(format!("https://{host}:{port}{path}"))
            .output()
            .map_err(|e| format!("run curl: {e}"))?;
        let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
        if !out.status.success() {
            return Err(format!("curl: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or("no status line")?;
        let backend =
            head.lines().find_map(|l| l.strip_prefix("x-backend:")).map(|v| v.trim().to_string()).unwrap_or_default();
        Ok((status, backend))
    }

    /// Starts meshpush on `files` (name, YAML) laid out as `layout` says,
    /// with an Envoy per Gateway and a backend per Pod of their Deployments.
    pub fn start_on(files: &[(&str, &str)], layout: Layout) -> Suite {
        let (mut next_gateway, mut next_pod) = (1, 1);
        let mut prepared = Prepared { yaml: String::new(), gateways: Vec::new(), pods: Vec::new() };
        let mut written = Vec::new();
        let mut allocate = |_: &str| {
            next_gateway += 1;
            Ipv4Addr::new(127, 0, layout.gateways, next_gateway - 1)
        };
        for (name, text) in files {
            let one = prepare(text, layout, &mut allocate, &mut next_pod);
            written.push((name.to_string(), one.yaml));
            prepared.gateways.extend(one.gateways);
            prepared.pods.extend(one.pods);
        }
        let backends: Vec<(String, String)> =
            prepared.pods.iter().map(|(ns, pod, ip, port)| (format!("{ns}/{pod}"), format!("{ip}:{port}"))).collect();
        let backend_refs: Vec<(&str, &str)> = backends.iter().map(|(n, a)| (n.as_str(), a.as_str())).collect();
        // The certificate the suite creates for its HTTPS listeners (`*`,
        // `*.org`, `*.wildcard.org`), with the names its tests ask for
        // spelled out too: curl, unlike Go's client, takes no `*.org`.
        let ca = super::tls::TestCa::new("gateway-conformance");
        let names = ["*", "*.org", "*.wildcard.org", "example.org", "unknown-example.org", "second-example.org"];
        let leaf = ca.leaf("tls-validity-checks", &names);
        let certificate = super::tls::secret(INFRA, "tls-validity-checks-certificate", &leaf, None);
        // And the one of the web namespace, which Gateways of the infra
        // namespace may use when a ReferenceGrant lets them.
        let web_leaf = ca.leaf("certificate", &["*"]);
        let web_certificate = super::tls::secret(WEB, "certificate", &web_leaf, None);
        written.push(("certificate.yaml".to_string(), format!("{certificate}\n---\n{web_certificate}")));
        let files: Vec<(&str, &str)> = written.iter().map(|(n, t)| (n.as_str(), t.as_str())).collect();
        let scene = Scene::start(&files, &backend_refs);
        let pods = prepared.pods.clone();
        let mut suite = Suite { scene, gateways: BTreeMap::new(), next_gateway, next_pod, layout, ca, pods };
        for (gateway, address) in prepared.gateways {
            suite.start_gateway(&gateway, address, None);
        }
        suite
    }

    fn start_gateway(&mut self, gateway: &str, address: Ipv4Addr, file: Option<&str>) {
        let (namespace, name) = gateway.split_once('/').expect("NS/NAME");
        let node = router_node(&address.to_string(), &format!("{name}-istio-0"), namespace);
        let mut opts = self.scene.sidecar(&node, &[]);
        opts.interception = "REDIRECT".into();
        opts.gateway = Some(gateway.to_string());
        self.scene.add_envoy(&gateway.replace('/', "."), &opts);
        self.gateways.insert(gateway.to_string(), GatewayProxy { address, file: file.map(String::from) });
    }

    /// The scene (meshpush, the Envoys, the backends).
    pub fn scene(&self) -> &Scene {
        &self.scene
    }

    /// Applies the test manifests `file` (starting an Envoy for each
    /// Gateway they add); [`Suite::cleanup`] deletes them.
    pub fn apply(&mut self, file: &str) {
        let text = std::fs::read_to_string(data_dir().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        self.apply_text(file, &text);
    }

    /// Applies the manifests `text` as file `file` (its Deployments' Pods
    /// get backends; its Gateways, Envoys).
    pub fn apply_text(&mut self, file: &str, text: &str) {
        let (gateways, layout) = (&self.gateways, self.layout);
        let next_gateway = &mut self.next_gateway;
        // A Gateway applied again keeps its address and its Envoy.
        let mut address_of = |gateway: &str| match gateways.get(gateway) {
            Some(g) => g.address,
            None => {
                *next_gateway += 1;
                Ipv4Addr::new(127, 0, layout.gateways, *next_gateway - 1)
            }
        };
        let prepared = prepare(text, layout, &mut address_of, &mut self.next_pod);
        for (ns, pod, ip, port) in &prepared.pods {
            self.scene.add_backend(&format!("{ns}/{pod}"), &format!("{ip}:{port}"));
        }
        self.pods.extend(prepared.pods.iter().cloned());
        self.scene.dir().write(file, &prepared.yaml);
        for (gateway, address) in prepared.gateways {
            if !self.gateways.contains_key(&gateway) {
                self.start_gateway(&gateway, address, Some(file));
            }
        }
    }

    /// Deletes object `kind NAMESPACE/NAME` that `file` applied (the suite
    /// deletes a ReferenceGrant mid-test, say).
    pub fn delete(&self, file: &str, kind: &str, namespace: &str, name: &str) {
        let path = self.scene.dir().path().join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut kept = Vec::new();
        let mut found = false;
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(doc).expect("YAML the suite wrote");
            let this = value["kind"] == kind
                && value["metadata"]["namespace"] == namespace
                && value["metadata"]["name"] == name;
            found |= this;
            if !this {
                kept.push(serde_yaml_ng::to_string(&value).expect("YAML"));
            }
        }
        assert!(found, "{file} has no {kind} {namespace}/{name}");
        self.scene.dir().write(file, &kept.join("---\n"));
    }

    /// Edits object `kind NAMESPACE/NAME` that `file` applied (the suite
    /// patches a Gateway's listeners mid-test, say).
    pub fn edit(&self, file: &str, kind: &str, namespace: &str, name: &str, change: impl Fn(&mut Value)) {
        let path = self.scene.dir().path().join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut docs = Vec::new();
        let mut found = false;
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let mut value: Value = serde::Deserialize::deserialize(doc).expect("YAML the suite wrote");
            if value["kind"] == kind && value["metadata"]["namespace"] == namespace && value["metadata"]["name"] == name
            {
                change(&mut value);
                found = true;
            }
            docs.push(serde_yaml_ng::to_string(&value).expect("YAML"));
        }
        assert!(found, "{file} has no {kind} {namespace}/{name}");
        self.scene.dir().write(file, &docs.join("---\n"));
    }

    /// Fills the IPv4 EndpointSlices `slices` of `file` with the Pods whose
    /// names start with `pods` (the suite does this for its manual
    /// EndpointSlices, from the Pods of a Deployment).
    pub fn fill_endpoint_slices(&self, file: &str, slices: &[&str], pods: &str) {
        let path = self.scene.dir().path().join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        let addresses: Vec<Value> = self
            .pods
            .iter()
            .filter(|(_, name, _, _)| name.starts_with(pods))
            .map(|(ns, name, ip, _)| {
                serde_yaml_ng::from_str(&format!(
                    "{{addresses: [{ip}], conditions: {{ready: true}}, targetRef: {{kind: Pod, name: {name}, namespace: {ns}}}}}"
                ))
                .expect("an endpoint")
            })
            .collect();
        let mut docs = Vec::new();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let mut value: Value = serde::Deserialize::deserialize(doc).expect("YAML the suite wrote");
            let name = value["metadata"]["name"].as_str().unwrap_or_default().to_string();
            if value["kind"] == "EndpointSlice"
                && value["addressType"] == "IPv4"
                && slices.iter().any(|s| name.starts_with(s))
            {
                value["endpoints"] = Value::Sequence(addresses.clone());
            }
            docs.push(serde_yaml_ng::to_string(&value).expect("YAML"));
        }
        self.scene.dir().write(file, &docs.join("---\n"));
    }

    /// How many routes are attached to listener `listener` of Gateway `NS/NAME`.
    pub fn attached_routes(&self, gateway: &str, listener: &str) -> Option<u64> {
        let (namespace, name) = gateway.split_once('/')?;
        let configz: serde_json::Value =
            serde_json::from_str(&self.scene.mesh().admin("/debug/configz").body).expect("configz is JSON");
        let object = configz["objects"]
            .as_array()?
            .iter()
            .find(|o| o["kind"] == "KubernetesGateway" && o["namespace"] == namespace && o["name"] == name)?;
        object["status"]["listeners"].as_array()?.iter().find(|l| l["name"] == listener)?["attachedRoutes"].as_u64()
    }

    /// Sends `count` requests for `path` through `gateway` and returns how
    /// many each backend (by Pod name prefix) answered; a request answered
    /// otherwise than by one of them is an error.
    pub fn distribution(
        &self,
        gateway: &str,
        path: &str,
        count: usize,
        backends: &[&str],
    ) -> Result<Vec<usize>, String> {
        self.distribution_on(gateway, 80, path, count, backends)
    }

    /// [`Suite::distribution`] through the Gateway's `port` (a TCP
    /// listener's, say: each request is a connection of its own).
    pub fn distribution_on(
        &self,
        gateway: &str,
        port: u16,
        path: &str,
        count: usize,
        backends: &[&str],
    ) -> Result<Vec<usize>, String> {
        let target = self.address(gateway, port);
        let mut counts = vec![0; backends.len()];
        for _ in 0..count {
            let r = http::get(target, path, &[]).map_err(|e| format!("{path} through {gateway}: {e}"))?;
            let seen = r.header("x-backend").ok_or_else(|| format!("{path}: status {} {:?}", r.status, r.body))?;
            let pod = seen.split_once('/').map_or(seen, |(_, p)| p);
            let i = backends.iter().position(|b| pod.starts_with(b)).ok_or_else(|| format!("answered by {seen}"))?;
            counts[i] += 1;
        }
        Ok(counts)
    }

    /// Deletes the manifests `file` applied, and stops the Envoys of its Gateways.
    pub fn cleanup(&mut self, file: &str) {
        self.scene.dir().remove(file);
        let gone: Vec<String> =
            self.gateways.iter().filter(|(_, g)| g.file.as_deref() == Some(file)).map(|(k, _)| k.clone()).collect();
        for gateway in gone {
            self.gateways.remove(&gateway);
            self.scene.remove_envoy(&gateway.replace('/', "."));
        }
    }

    /// The Envoy of Gateway `NS/NAME`.
    pub fn envoy(&self, gateway: &str) -> &Envoy {
        self.scene.envoy(&gateway.replace('/', "."))
    }

    /// Where Gateway `NS/NAME` listens on `port`.
    pub fn address(&self, gateway: &str, port: u16) -> SocketAddr {
        let g = self.gateways.get(gateway).unwrap_or_else(|| panic!("no Gateway {gateway}"));
        SocketAddr::new(IpAddr::V4(g.address), port)
    }

    /// Waits until every expectation holds through Gateway `gateway` on
    /// port 80, each for several answers in a row.
    pub fn expect_all(&self, gateway: &str, cases: &[Expect]) {
        self.expect_all_on(gateway, 80, cases);
    }

    /// [`Suite::expect_all`] on `port`.
    pub fn expect_all_on(&self, gateway: &str, port: u16, cases: &[Expect]) {
        let target = self.address(gateway, port);
        for case in cases {
            let mut streak = 0;
            let what = format!("{} through {gateway}", case.describe());
            self.scene.wait(CONVERGE, &what, Section::Routes, || {
                let mut headers: Vec<(&str, &str)> =
                    case.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                if !case.host.is_empty() {
                    headers.push(("host", &case.host));
                }
                let verdict = http::request(target, &case.method, &case.path, &headers)
                    .map_err(|e| e.to_string())
                    .and_then(|r| case.check(&r));
                streak = if verdict.is_ok() { streak + 1 } else { 0 };
                if streak >= CONSECUTIVE {
                    Ok(())
                } else {
                    verdict.and(Err("not yet enough answers in a row".to_string()))
                }
            });
        }
    }

    /// The conditions of object `kind NS/NAME` at `at` (`parents[0]`,
    /// `listeners[http]` or the object's own), from meshpush's configz.
    pub fn conditions(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        at: &str,
    ) -> Option<Vec<(String, String, String)>> {
        let configz: serde_json::Value =
            serde_json::from_str(&self.scene.mesh().admin("/debug/configz").body).expect("configz is JSON");
        let object = configz["objects"]
            .as_array()?
            .iter()
            .find(|o| o["kind"] == kind && o["namespace"] == namespace && o["name"] == name)?;
        let status = &object["status"];
        let conditions = if let Some(i) = at.strip_prefix("parents[").and_then(|r| r.strip_suffix(']')) {
            &status["parents"][i.parse::<usize>().ok()?]["conditions"]
        } else if let Some(l) = at.strip_prefix("listeners[").and_then(|r| r.strip_suffix(']')) {
            &status["listeners"].as_array()?.iter().find(|x| x["name"] == l)?["conditions"]
        } else {
            &status["conditions"]
        };
        Some(
            conditions
                .as_array()?
                .iter()
                .map(|c| {
                    let s = |f: &str| c[f].as_str().unwrap_or_default().to_string();
                    (s("type"), s("status"), s("reason"))
                })
                .collect(),
        )
    }

    /// Waits until condition `kind` of the object at `at` has `status` and,
    /// when given, `reason`.
    pub fn expect_condition(
        &self,
        object: (&str, &str, &str),
        at: &str,
        condition: &str,
        status: &str,
        reason: Option<&str>,
    ) {
        let (kind, namespace, name) = object;
        let what = format!("{kind} {namespace}/{name} {at} {condition}={status} {reason:?}");
        self.scene.wait(CONVERGE, &what, Section::Routes, || {
            let found = self.conditions(kind, namespace, name, at).ok_or("no such status yet")?;
            let c =
                found.iter().find(|(t, _, _)| t == condition).ok_or_else(|| format!("no {condition} in {found:?}"))?;
            if c.1 == status && reason.is_none_or(|r| r == c.2) { Ok(()) } else { Err(format!("{c:?}")) }
        });
    }

    /// Waits until listener `listener` of Gateway `gateway` (`NS/NAME`)
    /// has what the suite's `GatewayStatusMustHaveListeners` checks: among
    /// its supported kinds `kinds` (none at all when `kinds` is empty),
    /// `attached` routes, and each of `conditions` (type, status, reason or
    /// any).
    pub fn expect_listener(
        &self,
        gateway: &str,
        listener: &str,
        kinds: &[&str],
        attached: u64,
        conditions: &[(&str, &str, Option<&str>)],
    ) {
        self.expect_listener_among(gateway, None, listener, kinds, attached, conditions);
    }

    /// [`Suite::expect_listener`], with the Gateway's status listing
    /// exactly `listeners` (by name) when given.
    pub fn expect_listener_among(
        &self,
        gateway: &str,
        listeners: Option<&[&str]>,
        listener: &str,
        kinds: &[&str],
        attached: u64,
        conditions: &[(&str, &str, Option<&str>)],
    ) {
        let (namespace, name) = gateway.split_once('/').expect("NS/NAME");
        let what = format!("listener {listener} of {gateway}: kinds {kinds:?}, {attached} routes, {conditions:?}");
        self.scene.wait(CONVERGE, &what, Section::Listeners, || {
            let configz: serde_json::Value =
                serde_json::from_str(&self.scene.mesh().admin("/debug/configz").body).map_err(|e| e.to_string())?;
            let object = configz["objects"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|o| o["kind"] == "KubernetesGateway" && o["namespace"] == namespace && o["name"] == name)
                .ok_or("no such Gateway")?;
            let all = object["status"]["listeners"].as_array().cloned().unwrap_or_default();
            if let Some(names) = listeners {
                let have: Vec<&str> = all.iter().filter_map(|l| l["name"].as_str()).collect();
                if have != names {
                    return Err(format!("listeners {have:?}"));
                }
            }
            let l = all.iter().find(|l| l["name"] == listener).ok_or("no such listener in the status")?;
            let supported: Vec<&str> =
                l["supportedKinds"].as_array().into_iter().flatten().filter_map(|k| k["kind"].as_str()).collect();
            if kinds.is_empty() && !supported.is_empty() || kinds.iter().any(|k| !supported.contains(k)) {
                return Err(format!("supported kinds {supported:?}"));
            }
            if l["attachedRoutes"].as_u64() != Some(attached) {
                return Err(format!("attachedRoutes {}", l["attachedRoutes"]));
            }
            for (kind, status, reason) in conditions {
                let found =
                    l["conditions"].as_array().into_iter().flatten().any(|c| {
                        c["type"] == *kind && c["status"] == *status && reason.is_none_or(|r| c["reason"] == r)
                    });
                if !found {
                    return Err(format!("no {kind}={status} {reason:?} in {}", l["conditions"]));
                }
            }
            Ok(())
        });
    }

    /// Waits until route `NS/NAME` is accepted by and resolves all its
    /// references for every parent (the suite's
    /// `GatewayAndHTTPRoutesMustBeAccepted` and
    /// `HTTPRouteMustHaveResolvedRefsConditionsTrue`).
    pub fn route_accepted(&self, namespace: &str, name: &str, parents: usize) {
        self.route_of_kind_accepted("HTTPRoute", namespace, name, parents);
    }

    /// [`Suite::route_accepted`] for a route of any kind (`GRPCRoute`, `TCPRoute`…).
    pub fn route_of_kind_accepted(&self, kind: &str, namespace: &str, name: &str, parents: usize) {
        for i in 0..parents {
            let at = format!("parents[{i}]");
            self.expect_condition((kind, namespace, name), &at, "Accepted", "True", Some("Accepted"));
            self.expect_condition((kind, namespace, name), &at, "ResolvedRefs", "True", Some("ResolvedRefs"));
        }
    }
}

/// Prepares a manifest file: the class placeholder replaced, each Gateway
/// given an address (`address_of` it), each echo Deployment replaced by
/// its Pods (addresses from `next_pod`).
fn prepare(text: &str, layout: Layout, address_of: &mut dyn FnMut(&str) -> Ipv4Addr, next_pod: &mut u8) -> Prepared {
    let text = text.replace("{GATEWAY_CLASS_NAME}", "istio");
    let mut out = Prepared { yaml: String::new(), gateways: Vec::new(), pods: Vec::new() };
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let mut value: Value = serde::Deserialize::deserialize(doc).expect("the suite's manifests are YAML");
        let kind = value["kind"].as_str().unwrap_or_default().to_string();
        let api = value["apiVersion"].as_str().unwrap_or_default().to_string();
        let namespace = value["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
        let name = value["metadata"]["name"].as_str().unwrap_or_default().to_string();
        match (kind.as_str(), api.starts_with("gateway.networking.k8s.io")) {
            ("Gateway", true) => {
                let address = address_of(&format!("{namespace}/{name}"));
                let mut entry = Mapping::new();
                entry.insert("type".into(), "IPAddress".into());
                entry.insert("value".into(), address.to_string().into());
                value["spec"]
                    .as_mapping_mut()
                    .expect("a Gateway has a spec")
                    .insert("addresses".into(), Value::Sequence(vec![Value::Mapping(entry)]));
                out.gateways.push((format!("{namespace}/{name}"), address));
                docs.push(value);
            }
            ("Deployment", _) => {
                let spec = &value["spec"];
                let container = &spec["template"]["spec"]["containers"][0];
                // Only the plain HTTP echo servers: the TLS ones are not needed here.
                let Some(port) = (layout.port)(container) else { continue };
                let labels: Vec<(String, String)> = spec["template"]["metadata"]["labels"]
                    .as_mapping()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.as_str().unwrap_or_default().into(), v.as_str().unwrap_or_default().into()))
                    .collect();
                let replicas = spec["replicas"].as_u64().unwrap_or(1);
                for i in 0..replicas {
                    let pod = format!("{name}-{i}");
                    let ip = Ipv4Addr::new(127, 0, layout.pods, *next_pod);
                    *next_pod += 1;
                    let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                    let manifest = super::manifests::pod(&namespace, &pod, &ip.to_string(), &labels, port);
                    docs.push(serde_yaml_ng::from_str(&manifest).expect("a Pod manifest"));
                    out.pods.push((namespace.clone(), pod, ip, port));
                }
            }
            // What only a cluster runs (the echo server's ConfigMaps, accounts).
            ("ConfigMap", _) | ("ServiceAccount", _) => {}
            _ => docs.push(value),
        }
    }
    out.yaml = docs.iter().map(|d| serde_yaml_ng::to_string(d).expect("YAML")).collect::<Vec<_>>().join("---\n");
    out
}

/// The first port a container declares (the Istio samples' applications).
pub fn container_port(container: &Value) -> Option<u16> {
    container["ports"][0]["containerPort"].as_u64().and_then(|p| u16::try_from(p).ok())
}

/// The HTTP port of an echo server container (`echo-basic` listens on 3000);
/// `None` for the TLS echo servers.
fn echo_port(container: &Value) -> Option<u16> {
    let image = container["image"].as_str().unwrap_or_default();
    let env = container["env"].as_sequence().into_iter().flatten();
    let plain = env.clone().all(|e| e["name"] != "TLS_SERVER_CERT" && e["name"] != "GRPC_ECHO_SERVER");
    (image.contains("echo-basic") && plain).then_some(3000)
}
