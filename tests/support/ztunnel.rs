//! A stand-in ztunnel: a delta ADS client that behaves on the wire as
//! ztunnel does (`src/xds/client.rs` of istio/ztunnel). Its node is
//! ztunnel's (the `ztunnel~` id, string metadata); it asks for its two
//! types at once, Address then Authorization, with the node on each and
//! empty subscriptions (a wildcard) unless it names resources (on demand);
//! it ACKs and NACKs by nonce; and it reconnects with
//! `initial_resource_versions`. On the secure port it presents no client
//! certificate, only `authorization: Bearer TOKEN` and `clusterid`, as
//! ztunnel does. Responses decode with the workload API's own protos.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DeltaDiscoveryResponse};
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use meshpush::resource::TypeUrl;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

/// How long a stand-in waits for any one answer.
pub const WAIT: Duration = Duration::from_secs(10);

/// The node of a ztunnel on `node_name` whose own Pod is `pod` (in
/// `istio-system`), as ztunnel builds it (`Config::node`): the id, and its
/// metadata as strings.
pub fn node_of(pod: &str, ip: &str, node_name: &str) -> Node {
    let text = |s: &str| Value { kind: Some(Kind::StringValue(s.into())) };
    let metadata: BTreeMap<String, Value> = [
        ("NAME", pod),
        ("NAMESPACE", "istio-system"),
        ("INSTANCE_IPS", ip),
        ("NODE_NAME", node_name),
        ("CLUSTER_ID", "Kubernetes"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), text(v)))
    .collect();
    Node {
        id: format!("ztunnel~{ip}~{pod}.istio-system~istio-system.svc.cluster.local"),
        metadata: Some(Struct { fields: metadata.into_iter().collect() }),
        ..Default::default()
    }
}

/// The stand-in's usual node: Pod `ztunnel-hq5pl` on `node-a`.
pub fn ztunnel_node() -> Node {
    node_of("ztunnel-hq5pl", "10.1.0.2", "node-a")
}

/// What one stream opens with.
#[derive(Debug, Clone, Default)]
pub struct Open {
    /// Its node (default: [`ztunnel_node`]).
    pub node: Option<Node>,
    /// The versions it holds of each type (Address, Authorization): sent
    /// as `initial_resource_versions` on a reconnect.
    pub held: [HashMap<String, String>; 2],
    /// `XDS_ON_DEMAND`: its Address request subscribes to nothing (`*` in
    /// both lists), and it asks for each key as it needs it; its
    /// Authorization request is a wildcard all the same.
    pub on_demand: bool,
    /// Its bearer token (the secure port), sent with `clusterid: Kubernetes`.
    pub token: Option<String>,
}

/// One ztunnel stream.
pub struct Ztunnel {
    /// Requests to send.
    pub tx: mpsc::Sender<DeltaDiscoveryRequest>,
    /// Responses.
    pub rx: Streaming<DeltaDiscoveryResponse>,
}

impl Ztunnel {
    /// Connects over plaintext to `addr` as [`ztunnel_node`], with
    /// wildcard subscriptions, holding `held`.
    pub async fn connect(addr: SocketAddr, held: &[HashMap<String, String>; 2]) -> Result<Ztunnel, tonic::Status> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("a URI")
            .connect()
            .await
            .expect("the xDS port accepts");
        Ztunnel::open(channel, Open { held: held.clone(), ..Open::default() }).await
    }

    /// Opens a stream on `channel` and sends both initial requests, as
    /// ztunnel does: Address then Authorization, the node on each.
    pub async fn open(channel: tonic::transport::Channel, open: Open) -> Result<Ztunnel, tonic::Status> {
        let mut client = AggregatedDiscoveryServiceClient::new(channel);
        let (tx, rx) = mpsc::channel(16);
        let node = open.node.unwrap_or_else(ztunnel_node);
        for (t, versions) in [TypeUrl::Address, TypeUrl::Authorization].into_iter().zip(open.held) {
            let nothing = || if open.on_demand && t == TypeUrl::Address { vec!["*".to_string()] } else { Vec::new() };
            tx.send(DeltaDiscoveryRequest {
                node: Some(node.clone()),
                type_url: t.as_str().into(),
                initial_resource_versions: versions,
                resource_names_subscribe: nothing(),
                resource_names_unsubscribe: nothing(),
                ..Default::default()
            })
            .await
            .unwrap();
        }
        let mut request = tonic::Request::new(ReceiverStream::new(rx));
        if let Some(token) = &open.token {
            request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().expect("ASCII"));
            request.metadata_mut().insert("clusterid", "Kubernetes".parse().expect("ASCII"));
        }
        let response = tokio::time::timeout(WAIT, client.delta_aggregated_resources(request))
            .await
            .expect("the stream opens or is refused within the deadline")?;
        Ok(Ztunnel { tx, rx: response.into_inner() })
    }

    /// The next response.
    pub async fn recv(&mut self) -> DeltaDiscoveryResponse {
        tokio::time::timeout(WAIT, self.rx.message())
            .await
            .expect("a response within the deadline")
            .expect("no stream error")
            .expect("stream still open")
    }

    /// The status the stream ends with before any response (a refusal
    /// comes either as the call's status or as the stream's first item).
    pub async fn refusal(opened: Result<Ztunnel, tonic::Status>) -> tonic::Status {
        match opened {
            Err(status) => status,
            Ok(mut z) => match tokio::time::timeout(WAIT, z.rx.message()).await.expect("an answer") {
                Err(status) => status,
                Ok(m) => panic!("the ztunnel was served: {m:?}"),
            },
        }
    }

    /// ACKs `r`; or NACKs it, as ztunnel does, naming what it rejected.
    pub async fn answer(&mut self, r: &DeltaDiscoveryResponse, rejected: Option<&str>) {
        let error_detail = rejected.map(|m| RpcStatus { code: 0, message: m.into(), details: vec![] });
        let req = DeltaDiscoveryRequest {
            type_url: r.type_url.clone(),
            response_nonce: r.nonce.clone(),
            error_detail,
            ..Default::default()
        };
        self.tx.send(req).await.unwrap();
    }

    /// Subscribes to more `names` of type `t` (ztunnel's on-demand lookup
    /// of a workload or service it does not hold).
    pub async fn subscribe(&mut self, t: TypeUrl, names: &[&str]) {
        let req = DeltaDiscoveryRequest {
            type_url: t.as_str().into(),
            resource_names_subscribe: names.iter().map(|n| n.to_string()).collect(),
            ..Default::default()
        };
        self.tx.send(req).await.unwrap();
    }

    /// The first response of each of its two types, ACKed.
    pub async fn initial(&mut self) -> (DeltaDiscoveryResponse, DeltaDiscoveryResponse) {
        let mut by_type: HashMap<String, DeltaDiscoveryResponse> = HashMap::new();
        while by_type.len() < 2 {
            let r = self.recv().await;
            self.answer(&r, None).await;
            by_type.insert(r.type_url.clone(), r);
        }
        (by_type.remove(TypeUrl::Address.as_str()).unwrap(), by_type.remove(TypeUrl::Authorization.as_str()).unwrap())
    }
}

/// The resources of a response by name, decoded.
pub fn decoded<M: Message + Default>(r: &DeltaDiscoveryResponse) -> BTreeMap<String, M> {
    r.resources
        .iter()
        .map(|x| {
            let any = x.resource.as_ref().expect("a resource carries its body");
            assert_eq!(any.type_url, r.type_url, "each Any is of the response's type");
            (x.name.clone(), M::decode(&any.value[..]).expect("decodes with ztunnel's protos"))
        })
        .collect()
}

/// The version of each resource of a response, by name.
pub fn versions(r: &DeltaDiscoveryResponse) -> HashMap<String, String> {
    r.resources.iter().map(|x| (x.name.clone(), x.version.clone())).collect()
}

/// The real ztunnel's binary: `ZTUNNEL_BIN`, when it names a file
/// (`scripts/build-ztunnel.sh` builds one); `None` otherwise, and the
/// tests that need it say they did not run.
pub fn ztunnel_binary() -> Option<std::path::PathBuf> {
    let path = std::path::PathBuf::from(std::env::var_os("ZTUNNEL_BIN")?);
    assert!(path.is_file(), "ZTUNNEL_BIN={} is not a file", path.display());
    Some(path)
}

/// The user the real ztunnel runs as: `nobody`, as a dedicated ztunnel
/// needs no privilege.
pub const ZTUNNEL_UID: u32 = 65534;

/// A real ztunnel in dedicated mode (one workload's proxy, as a pod's
/// sidecar would be), in network namespace `ns`, as a non-root user.
/// Its fixed ports (15001, 15006, 15008, 15021, 15080 SOCKS5, admin 15000)
/// are the namespace's own.
pub struct RealZtunnel {
    /// The process.
    pub process: super::process::ChildGuard,
    /// Owned by the ztunnel's user: its token, the mesh root, its working directory.
    _home: tempfile::TempDir,
}

/// Who a dedicated ztunnel serves, and where its control plane is.
pub struct Dedicated<'a> {
    /// The workload: `namespace/pod/service account`.
    pub workload: (&'a str, &'a str, &'a str),
    /// Its IP (`INSTANCE_IP`) and node (`NODE_NAME`).
    pub ip: &'a str,
    /// The node.
    pub node: &'a str,
    /// The secure port (`https://IP:PORT`), for both xDS and the CA.
    pub control_plane: &'a str,
    /// The mesh root (PEM).
    pub root_pem: &'a str,
    /// The workload's service-account token.
    pub token: &'a str,
    /// `XDS_ON_DEMAND`: it holds its node's workloads and asks for others
    /// as its connections need them.
    pub on_demand: bool,
}

impl RealZtunnel {
    /// Starts `binary` in `ns` for `d`; returns once it is ready
    /// (`/healthz/ready`: its workload and certificates known), or panics
    /// with its log.
    pub fn start(binary: &std::path::Path, ns: &super::netns::NetNs, d: &Dedicated<'_>) -> RealZtunnel {
        use std::os::unix::fs::PermissionsExt as _;
        let home = super::process::scratch_dir("ztunnel-home");
        std::fs::write(home.path().join("token"), d.token).unwrap();
        std::fs::write(home.path().join("root-cert.pem"), d.root_pem).unwrap();
        for entry in [home.path().to_path_buf(), home.path().join("token"), home.path().join("root-cert.pem")] {
            std::os::unix::fs::chown(&entry, Some(ZTUNNEL_UID), Some(ZTUNNEL_UID)).unwrap();
        }
        std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let (namespace, pod, account) = d.workload;
        let at = |file: &str| home.path().join(file).display().to_string();
        let env = [
            format!("XDS_ADDRESS={}", d.control_plane),
            format!("CA_ADDRESS={}", d.control_plane),
            format!("XDS_ROOT_CA={}", at("root-cert.pem")),
            format!("CA_ROOT_CA={}", at("root-cert.pem")),
            format!("AUTH_TOKEN={}", at("token")),
            "CLUSTER_ID=Kubernetes".into(),
            format!("POD_NAME={pod}"),
            format!("POD_NAMESPACE={namespace}"),
            format!("INSTANCE_IP={}", d.ip),
            format!("NODE_NAME={}", d.node),
            "PROXY_MODE=dedicated".into(),
            format!("PROXY_WORKLOAD_INFO={namespace}/{pod}/{account}"),
            "ISTIO_META_DNS_CAPTURE=false".into(),
            "IPV6_ENABLED=false".into(),
            "UNSTABLE_ENABLE_SOCKS5=true".into(),
            format!("XDS_ON_DEMAND={}", d.on_demand),
            "RUST_LOG=info".into(),
        ];
        let uid = format!("--reuid={ZTUNNEL_UID}");
        let gid = format!("--regid={ZTUNNEL_UID}");
        let mut args: Vec<String> = ["netns", "exec", ns.name(), "setpriv", &uid, &gid, "--clear-groups", "env", "-i"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.push(format!("--chdir={}", home.path().display()));
        args.extend(env);
        args.extend([binary.display().to_string(), "proxy".into(), "ztunnel".into()]);
        let process = super::process::ChildGuard::spawn(
            &format!("ztunnel-{pod}"),
            super::process::scratch_dir("ztunnel"),
            std::path::Path::new("ip"),
            args,
        );
        let ztunnel = RealZtunnel { process, _home: home };
        super::process::wait_until(
            std::time::Instant::now() + Duration::from_secs(30),
            &format!("ztunnel of {pod} is ready"),
            &[&ztunnel.process],
            || ns.run("curl", &["-sf", "-o", "/dev/null", "127.0.0.1:15021/healthz/ready"]).status.success(),
        );
        ztunnel
    }

    /// Its `/config_dump` (JSON), read from inside `ns`.
    pub fn config_dump(ns: &super::netns::NetNs) -> serde_json::Value {
        let text = ns.ok("curl", &["-sf", "127.0.0.1:15000/config_dump"]);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("ztunnel's config_dump is not JSON: {e}"))
    }
}
