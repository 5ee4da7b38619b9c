//! `Registry`: the gRPC API through which a platform applies objects in batches.
//!
//! Role in the data flow: this is the second source beside the watched
//! directory ([`FileSource`](super::FileSource)). A platform without
//! Kubernetes — and the loadtest harness — sends batches of Kubernetes and
//! Istio documents (`proto/meshpush/v1/registry.proto`); each is parsed and
//! validated by [`parse_documents`], exactly as a file is, applied to the
//! [`ConfigStore`] in one atomic write, and the resulting [`ChangeSet`] goes
//! down the same channel as the file watcher's, into the debouncer. Objects
//! from the API carry `SourceRef { file: "registry", doc: <index in puts> }`.
//!
//! Rules:
//! * A batch is all or nothing: every object is checked first, and if any is
//!   refused the store is not touched; the refusal is `INVALID_ARGUMENT` with
//!   an [`proto::ApplyProblems`] detail naming each refused
//!   object, its field path and the reason.
//! * Last writer wins between sources: the API may replace or delete an
//!   object a file defined, and a later edit of that file puts the file's
//!   version back.
//! * Nothing is accepted before the config directory is loaded
//!   (`UNAVAILABLE`): the first snapshot is built from the directory alone.
//! * On the secure port every call needs a client certificate whose
//!   identity is among the writers allowed (`--registry-writer`):
//!   `UNAUTHENTICATED` without one, `PERMISSION_DENIED` for another. The
//!   plaintext port is for loopback development and checks nothing.
//!
//! Invariant: change sets reach the debouncer in store-revision order, so a
//! push is never built from a snapshot older than one already pushed. The
//! channel slot is reserved before the write, and the write and the send
//! happen under the store's delivery order ([`ConfigStore::apply_then`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prost::Message as _;
use tokio::sync::mpsc;
use tonic::{Code, Request, Response, Status};

use crate::config::parse::parse_documents;
use crate::config::{ConfigKey, ConfigKind, SourceRef};
use crate::config::{Problem, Severity};
use crate::engine::PushEngine;
use crate::model::store::Write;
use crate::model::{ChangeSet, ConfigStore, Identity};
use crate::xds::stream::peer::{ConnectionContext, Transport};

#[cfg(test)]
mod test;

/// The code generated from `proto/meshpush/v1/registry.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic, rust_2018_idioms)]
pub mod proto {
    tonic::include_proto!("meshpush.v1");
}

use proto::registry_server::{Registry, RegistryServer};
use proto::{
    ApplyProblems, ApplyRequest, ApplyResponse, GetVersionRequest, ObjectProblem, VersionResponse,
    WaitForRevisionRequest,
};

/// `SourceRef::file` of every object applied through the API.
pub const REGISTRY_SOURCE: &str = "registry";

/// Largest request accepted: a platform may load a whole mesh in one batch.
pub const MAX_REQUEST_BYTES: usize = 256 * 1024 * 1024;

/// `type_url` of the [`ApplyProblems`] detail in a refusal.
pub const APPLY_PROBLEMS_TYPE_URL: &str = "type.googleapis.com/meshpush.v1.ApplyProblems";

/// How long `WaitForRevision` waits when the request names no timeout, and at most.
const WAIT_DEFAULT: Duration = Duration::from_secs(10);
const WAIT_MAX: Duration = Duration::from_secs(60);

/// Problems quoted in a refusal's message; the detail lists them all.
const PROBLEMS_IN_MESSAGE: usize = 10;

/// The `Registry` gRPC service. See the module docs.
#[derive(Debug, Clone)]
pub struct RegistryService {
    store: Arc<ConfigStore>,
    engine: Arc<PushEngine>,
    changes: mpsc::Sender<ChangeSet>,
    writers: Arc<[Identity]>,
}

impl RegistryService {
    /// A service writing into `store` and sending change sets on `changes`
    /// (the channel the debouncer reads); `engine` tells readiness and
    /// published versions.
    pub fn new(store: Arc<ConfigStore>, engine: Arc<PushEngine>, changes: mpsc::Sender<ChangeSet>) -> RegistryService {
        RegistryService { store, engine, changes, writers: Arc::from([]) }
    }

    /// The identities allowed to call the API on the secure port.
    pub fn with_writers(mut self, writers: Vec<Identity>) -> RegistryService {
        self.writers = writers.into();
        self
    }

    /// Whether the caller of `request` may use the API (see the module docs).
    fn authorize<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let transport = request.extensions().get::<ConnectionContext>().map(|c| &c.transport);
        let Some(Transport::Mtls { identities }) = transport else { return Ok(()) };
        let refuse = |status: Status| {
            self.engine.metrics().streams_refused.get_or_create(&[("reason", "registry_writer")]).inc();
            tracing::warn!("registry: {}", status.message());
            Err(status)
        };
        if identities.is_empty() {
            return refuse(Status::unauthenticated(
                "the registry API on the secure port needs a client certificate of a --registry-writer",
            ));
        }
        if identities.iter().any(|id| self.writers.contains(id)) {
            return Ok(());
        }
        let shown: Vec<String> = identities.iter().map(ToString::to_string).collect();
        refuse(Status::permission_denied(format!(
            "{} may not use the registry API (allowed: {})",
            shown.join(", "),
            if self.writers.is_empty() {
                "nobody; see --registry-writer".to_string()
            } else {
                self.writers.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            }
        )))
    }

    /// The service ready for a tonic router.
    pub fn into_server(self) -> RegistryServer<RegistryService> {
        RegistryServer::new(self).max_decoding_message_size(MAX_REQUEST_BYTES)
    }

    fn version(&self) -> VersionResponse {
        let ctx = self.engine.snapshot();
        VersionResponse {
            version: ctx.version,
            revision: ctx.store.revision(),
            ready: self.engine.is_ready(),
            instance_id: instance_id().to_string(),
        }
    }
}

#[tonic::async_trait]
impl Registry for RegistryService {
    async fn apply(&self, request: Request<ApplyRequest>) -> Result<Response<ApplyResponse>, Status> {
        self.authorize(&request)?;
        if !self.engine.is_ready() {
            return Err(Status::unavailable("meshpush is still loading its config directory; retry shortly"));
        }
        let request = request.into_inner();
        // Parsing a large batch is CPU work; keep it off the async workers.
        let prepared = tokio::task::spawn_blocking(move || prepare(&request))
            .await
            .map_err(|e| Status::internal(format!("checking the batch failed: {e}")))?;
        let Batch { writes, warnings } = match prepared {
            Ok(batch) => batch,
            Err(problems) => {
                let status = refusal(&problems);
                tracing::info!("registry: {}", status.message());
                return Err(status);
            }
        };
        // Reserve the channel slot before writing, so the write and its send
        // are one step that no other source's write can come between.
        let permit =
            self.changes.clone().reserve_owned().await.map_err(|_| Status::unavailable("meshpush is shutting down"))?;
        let changes = self.store.apply_then(writes, move |changes| {
            permit.send(changes);
        });
        tracing::debug!(keys = changes.keys.len(), revision = changes.revision, "registry batch applied");
        Ok(Response::new(ApplyResponse {
            revision: changes.revision,
            changed: changes.keys.len() as u32,
            warnings,
            instance_id: instance_id().to_string(),
        }))
    }

    async fn get_version(&self, request: Request<GetVersionRequest>) -> Result<Response<VersionResponse>, Status> {
        self.authorize(&request)?;
        Ok(Response::new(self.version()))
    }

    async fn wait_for_revision(
        &self,
        request: Request<WaitForRevisionRequest>,
    ) -> Result<Response<VersionResponse>, Status> {
        self.authorize(&request)?;
        let WaitForRevisionRequest { revision, timeout_ms } = request.into_inner();
        let timeout = match timeout_ms {
            0 => WAIT_DEFAULT,
            ms => Duration::from_millis(ms.into()).min(WAIT_MAX),
        };
        // Subscribe before looking, so a publish in between is not missed.
        let mut published = self.engine.versions();
        let wait = async {
            loop {
                let version = self.version();
                if version.ready && version.revision >= revision {
                    return Ok(version);
                }
                if published.changed().await.is_err() {
                    return Err(Status::unavailable("meshpush is shutting down"));
                }
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(result) => result.map(Response::new),
            Err(_) => Err(Status::deadline_exceeded(format!(
                "store revision {revision} was not published within {timeout:?} (published: revision {})",
                self.version().revision
            ))),
        }
    }
}

/// A checked batch: the store writes, and warnings about accepted objects.
#[derive(Debug)]
struct Batch {
    writes: Vec<Write>,
    warnings: Vec<ObjectProblem>,
}

/// Checks a whole batch: every put parsed and validated, every delete's key
/// well-formed, no key twice. Returns the writes, or every problem found.
fn prepare(request: &ApplyRequest) -> Result<Batch, Vec<ObjectProblem>> {
    let file: Arc<str> = REGISTRY_SOURCE.into();
    let mut refused = Vec::new();
    let mut warnings = Vec::new();
    let mut writes = Vec::with_capacity(request.puts.len() + request.deletes.len());
    let mut put_at: HashMap<ConfigKey, usize> = HashMap::with_capacity(request.puts.len());

    for (index, put) in request.puts.iter().enumerate() {
        let parsed = parse_documents(REGISTRY_SOURCE, &put.document);
        let (errors, others): (Vec<Problem>, Vec<Problem>) = parsed.problems.into_iter().partition(Problem::is_error);
        let refuse = |message: String, object: Option<&ConfigKey>| ObjectProblem {
            delete: false,
            index: index as u32,
            object: object.map(describe_key).unwrap_or_default(),
            path: String::new(),
            message,
        };
        if !errors.is_empty() {
            refused.extend(errors.iter().map(|p| object_problem(false, index, p)));
            continue;
        }
        let mut objects = parsed.objects.into_iter();
        let (object, _) = match (objects.next(), objects.len()) {
            (Some(object), 0) => object,
            (Some(_), more) => {
                refused.push(refuse(format!("carries {} objects; send each as its own Object", more + 1), None));
                continue;
            }
            (None, _) if others.is_empty() => {
                refused
                    .push(refuse("the document is empty: expected one object with apiVersion and kind".into(), None));
                continue;
            }
            // An unknown kind is a warning in a directory (other tools' files
            // live there too); asked for explicitly, it is refused.
            (None, _) => {
                refused.extend(others.iter().map(|p| object_problem(false, index, p)));
                continue;
            }
        };
        warnings.extend(others.iter().map(|p| object_problem(false, index, p)));
        let key = object.key();
        if let Some(first) = put_at.insert(key.clone(), index) {
            refused.push(refuse(format!("puts[{first}] puts the same object; each object once per batch"), Some(&key)));
            continue;
        }
        writes.push(Write::put(object, SourceRef { file: file.clone(), doc: index }));
    }

    for (index, delete) in request.deletes.iter().enumerate() {
        let problem = |message: String| ObjectProblem {
            delete: true,
            index: index as u32,
            object: format!("{} {}/{}", delete.kind, delete.namespace, delete.name),
            path: String::new(),
            message,
        };
        let Some(kind) = ConfigKind::ALL.into_iter().find(|k| k.as_str() == delete.kind && !k.is_internal()) else {
            let known: Vec<&str> = ConfigKind::ALL.iter().filter(|k| !k.is_internal()).map(|k| k.as_str()).collect();
            refused.push(problem(format!("unknown kind {:?}: expected one of {}", delete.kind, known.join(", "))));
            continue;
        };
        if delete.name.is_empty() {
            refused.push(problem("has no name".into()));
            continue;
        }
        let namespace = match &*delete.namespace {
            _ if kind.is_cluster_scoped() => "",
            "" => "default",
            namespace => namespace,
        };
        let key = ConfigKey::new(kind, namespace, &delete.name);
        if let Some(put) = put_at.get(&key) {
            refused.push(problem(format!("puts[{put}] puts the same object; put or delete it, not both")));
            continue;
        }
        writes.push(Write::Delete(key));
    }

    if refused.is_empty() { Ok(Batch { writes, warnings }) } else { Err(refused) }
}

/// `Kind namespace/name`, as problems show objects.
/// This server process's identity for registry clients: its pid and the
/// moment it started, so a restart (even reusing the pid) changes it.
fn instance_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        format!("{}-{}", std::process::id(), started.as_nanos())
    })
}

fn describe_key(key: &ConfigKey) -> String {
    key.to_string()
}

/// A parse or validation problem, located in the batch.
fn object_problem(delete: bool, index: usize, problem: &Problem) -> ObjectProblem {
    ObjectProblem {
        delete,
        index: index as u32,
        object: problem.object.as_ref().map(describe_key).unwrap_or_default(),
        path: problem.path.clone(),
        message: match problem.severity {
            Severity::Error => problem.message.clone(),
            Severity::Warning => format!("warning: {}", problem.message),
        },
    }
}

/// One line for a problem: `puts[2]: VirtualService default/r: spec.http[0]: reason`.
pub fn problem_line(problem: &ObjectProblem) -> String {
    let list = if problem.delete { "deletes" } else { "puts" };
    let mut line = format!("{list}[{}]: ", problem.index);
    for part in [&problem.object, &problem.path] {
        if !part.is_empty() {
            line.push_str(part);
            line.push_str(": ");
        }
    }
    line.push_str(&problem.message);
    line
}

/// The `INVALID_ARGUMENT` status for a refused batch: the first problems in
/// the message, every problem in an [`ApplyProblems`] detail.
fn refusal(problems: &[ObjectProblem]) -> Status {
    let mut message = format!("batch refused, nothing applied: {} problem(s): ", problems.len());
    let shown: Vec<String> = problems.iter().take(PROBLEMS_IN_MESSAGE).map(problem_line).collect();
    message.push_str(&shown.join("; "));
    if problems.len() > PROBLEMS_IN_MESSAGE {
        message.push_str(&format!("; and {} more (see the status details)", problems.len() - PROBLEMS_IN_MESSAGE));
    }
    let detail = ApplyProblems { problems: problems.to_vec() };
    let status = envoy_types::pb::google::rpc::Status {
        code: Code::InvalidArgument as i32,
        message: message.clone(),
        details: vec![envoy_types::pb::google::protobuf::Any {
            type_url: APPLY_PROBLEMS_TYPE_URL.into(),
            value: detail.encode_to_vec(),
        }],
    };
    Status::with_details(Code::InvalidArgument, message, Bytes::from(status.encode_to_vec()))
}

/// Reads the [`ApplyProblems`] detail of a refused `Apply` (for clients).
pub fn apply_problems(status: &Status) -> Option<ApplyProblems> {
    let details = envoy_types::pb::google::rpc::Status::decode(status.details()).ok()?;
    let any = details.details.iter().find(|a| a.type_url == APPLY_PROBLEMS_TYPE_URL)?;
    ApplyProblems::decode(&any.value[..]).ok()
}
