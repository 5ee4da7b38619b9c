//! YAML text → typed [`ConfigObject`]s, and a [`Problem`] for everything refused.
//!
//! Role in the data flow: a source (the watched directory, `meshpush validate`)
//! reads a file and hands its text to [`parse_documents`]; what comes back is
//! ready for the store (`model::ConfigStore`) plus the problems
//! to show the user. This module owns the `apiVersion` + `kind` → type table,
//! and the YAML-to-type step (with field paths on type errors); what it
//! finds is reported as [`Problem`]s.
//!
//! Invariant: every object in [`ParsedFile::objects`] parsed cleanly and
//! passed [`validate`] without an Error, and no
//! key appears twice there; every non-empty document either yields objects or
//! leaves at least one problem — nothing is dropped silently.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_yaml_ng::{Mapping, Value};

use super::istio::api::{self, ApiField};
use super::problem::{Problem, Severity, not_supported};
use super::validate::validate;
use super::{ConfigKey, ConfigKind, ConfigObject, SourceRef, gateway_api, ingress, istio, k8s, secret};

#[cfg(test)]
mod test;

/// What one file yielded.
#[derive(Debug, Clone, Default)]
pub struct ParsedFile {
    /// Objects that parsed and validated, each key once (a later document
    /// defining the same key wins), in document order.
    pub objects: Vec<(ConfigObject, SourceRef)>,
    /// Everything refused or worth a warning, in document order.
    pub problems: Vec<Problem>,
    /// The file could not be read at all (its text never reached the parser).
    pub unread: bool,
}

impl ParsedFile {
    /// Whether any problem is an Error.
    pub fn has_errors(&self) -> bool {
        self.problems.iter().any(Problem::is_error)
    }
}

/// Parses every YAML document of `text` (the content of `file`, which is only
/// used to label problems and sources).
///
/// Documents are numbered from 0; empty documents are skipped but counted.
/// After a YAML syntax error, parsing resumes at the next `---` line when
/// there is one, so one broken document does not hide the rest of the file.
pub fn parse_documents(file: &str, text: &str) -> ParsedFile {
    let mut reader = FileReader { file: file.into(), parsed: ParsedFile::default() };
    // A chunk is the text from some document start to the end of the file; a
    // syntax error ends a chunk and the next one starts at the next `---`.
    let mut chunk_start = 0;
    let mut first_doc = 0;
    loop {
        // Blank lines keep line numbers in libyaml's messages true to the file.
        let padded;
        let chunk = if chunk_start == 0 {
            text
        } else {
            let lines_before = text[..chunk_start].matches('\n').count();
            padded = format!("{}{}", "\n".repeat(lines_before), &text[chunk_start..]);
            &padded
        };
        let Some(stop) = reader.read_chunk(chunk, first_doc) else {
            break;
        };
        let resume = stop.location.and_then(|(line, column)| next_document_start(text, chunk_start, line, column));
        match resume {
            Some(start) => {
                chunk_start = start;
                first_doc = stop.doc + 1;
            }
            None => {
                let after = stop.location.map_or(0, |(line, _)| line);
                if text.lines().skip(after).any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')) {
                    reader.note_rest_skipped();
                }
                break;
            }
        }
    }
    reader.finish()
}

/// Parses one object already decoded from JSON (an object of the
/// Kubernetes API), through the same type table, typing and validation as a
/// document of a file; `source` labels its problems and its [`SourceRef`]
/// (document 0).
pub fn parse_json(source: &str, object: &serde_json::Value) -> ParsedFile {
    let mut reader = FileReader { file: source.into(), parsed: ParsedFile::default() };
    match serde_yaml_ng::to_value(object) {
        Ok(value) => reader.read_document(0, value),
        Err(err) => reader.problem(Severity::Error, 0, None, "", format!("cannot be read as an object: {err}")),
    }
    reader.finish()
}

/// Where a chunk stopped on a YAML syntax error.
struct SyntaxStop {
    doc: usize,
    /// 1-based line and column, when libyaml knows them.
    location: Option<(usize, usize)>,
}

struct FileReader {
    file: Arc<str>,
    parsed: ParsedFile,
}

impl FileReader {
    /// Reads documents until the end of `chunk` (`None`) or a syntax error.
    fn read_chunk(&mut self, chunk: &str, first_doc: usize) -> Option<SyntaxStop> {
        for (i, document) in serde_yaml_ng::Deserializer::from_str(chunk).enumerate() {
            let doc = first_doc + i;
            match <Value as serde::Deserialize>::deserialize(document) {
                Ok(value) => self.read_document(doc, value),
                Err(err) => {
                    self.problem(Severity::Error, doc, None, "", format!("YAML syntax error: {err}"));
                    // libyaml cannot continue past a syntax error: it repeats it forever.
                    return Some(SyntaxStop { doc, location: err.location().map(|l| (l.line(), l.column())) });
                }
            }
        }
        None
    }

    fn read_document(&mut self, doc: usize, value: Value) {
        match value {
            Value::Null => {}
            Value::Mapping(map) => self.read_object(doc, "", map),
            other => self.problem(
                Severity::Error,
                doc,
                None,
                "",
                format!(
                    "the document is {}, not an object: expected a mapping with apiVersion and kind",
                    describe(&other)
                ),
            ),
        }
    }

    /// Reads one object; `prefix` locates it inside a `List` (`items[3].`).
    fn read_object(&mut self, doc: usize, prefix: &str, mut map: Mapping) {
        let api_version = map.remove("apiVersion");
        let kind = map.remove("kind");
        let (api_version, kind) = match (api_version, kind) {
            (Some(Value::String(a)), Some(Value::String(k))) => (a, k),
            (_, None) => {
                let message = "has no kind: every document needs apiVersion and kind";
                return self.problem(Severity::Error, doc, None, &field(prefix, ""), message.to_string());
            }
            (_, Some(Value::String(k))) => {
                let message = format!("{k} has no apiVersion (a string such as networking.istio.io/v1)");
                return self.problem(Severity::Error, doc, None, &field(prefix, "apiVersion"), message);
            }
            (_, Some(other)) => {
                let message = format!("is {}, not a string", describe(&other));
                return self.problem(Severity::Error, doc, None, &field(prefix, "kind"), message);
            }
        };
        if kind == "List" && api_version == "v1" {
            return self.read_list(doc, prefix, map);
        }
        let Some(config_kind) = config_kind(&api_version, &kind) else {
            let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
            let named = |k: &&ConfigKind| k.kind_name() == kind && !k.is_internal();
            let same_group = ConfigKind::ALL.iter().filter(named).find(|k| k.api_group() == group);
            let hint = match same_group.or_else(|| ConfigKind::ALL.iter().find(named)) {
                Some(known) => format!(" (meshpush reads {known} from {})", expected_api_versions(*known)),
                None => String::new(),
            };
            let message = format!("unknown kind {kind} {api_version}: skipped{hint}");
            return self.problem(Severity::Warning, doc, None, &field(prefix, ""), message);
        };
        let key = peek_key(config_kind, &map);
        let mut ignored = Vec::new();
        // The spec as written, kept for what MCP-over-xDS serves.
        let written = super::mcp::istio_kind(config_kind)
            .and_then(|_| map.get("spec"))
            .and_then(|spec| serde_json::to_value(spec).ok())
            .map(|spec| super::WrittenSpec(Arc::new(spec)));
        let value = Value::Mapping(map);
        let object =
            match config_kind {
                ConfigKind::Service => typed::<k8s::Service>(value, &mut ignored).map(ConfigObject::Service),
                ConfigKind::Pod => typed::<k8s::Pod>(value, &mut ignored).map(ConfigObject::Pod),
                ConfigKind::EndpointSlice => {
                    typed::<k8s::EndpointSlice>(value, &mut ignored).map(ConfigObject::EndpointSlice)
                }
                ConfigKind::Node => typed::<k8s::Node>(value, &mut ignored).map(ConfigObject::Node),
                ConfigKind::ServiceEntry => {
                    typed::<istio::ServiceEntry>(value, &mut ignored).map(|o| ConfigObject::ServiceEntry(Box::new(o)))
                }
                ConfigKind::WorkloadEntry => {
                    typed::<istio::WorkloadEntry>(value, &mut ignored).map(ConfigObject::WorkloadEntry)
                }
                ConfigKind::VirtualService => {
                    typed::<istio::VirtualService>(value, &mut ignored).map(ConfigObject::VirtualService)
                }
                ConfigKind::DestinationRule => typed::<istio::DestinationRule>(value, &mut ignored)
                    .map(|o| ConfigObject::DestinationRule(Box::new(o))),
                ConfigKind::Gateway => typed::<istio::Gateway>(value, &mut ignored).map(ConfigObject::Gateway),
                ConfigKind::Sidecar => {
                    typed::<istio::Sidecar>(value, &mut ignored).map(|o| ConfigObject::Sidecar(Box::new(o)))
                }
                ConfigKind::WorkloadGroup => {
                    typed::<istio::WorkloadGroup>(value, &mut ignored).map(|o| ConfigObject::WorkloadGroup(Box::new(o)))
                }
                ConfigKind::Secret => typed::<secret::Secret>(value, &mut ignored).map(|mut o| {
                    o.normalize();
                    ConfigObject::Secret(Box::new(o))
                }),
                ConfigKind::PeerAuthentication => {
                    typed::<istio::PeerAuthentication>(value, &mut ignored).map(ConfigObject::PeerAuthentication)
                }
                ConfigKind::AuthorizationPolicy => typed::<istio::AuthorizationPolicy>(value, &mut ignored)
                    .map(|o| ConfigObject::AuthorizationPolicy(Box::new(o))),
                ConfigKind::RequestAuthentication => typed::<istio::RequestAuthentication>(value, &mut ignored)
                    .map(|o| ConfigObject::RequestAuthentication(Box::new(o))),
                ConfigKind::ProxyConfig => typed::<istio::ProxyConfigObject>(value, &mut ignored)
                    .map(|o| ConfigObject::ProxyConfig(Box::new(o))),
                ConfigKind::EnvoyFilter => {
                    typed::<istio::EnvoyFilter>(value, &mut ignored).map(|o| ConfigObject::EnvoyFilter(Box::new(o)))
                }
                ConfigKind::Telemetry => {
                    typed::<istio::Telemetry>(value, &mut ignored).map(|o| ConfigObject::Telemetry(Box::new(o)))
                }
                ConfigKind::FetchedJwks
                | ConfigKind::FetchedTrustBundle
                | ConfigKind::ResolvedGatewayHost
                | ConfigKind::MeshConfig => {
                    unreachable!("config_kind never names an internal kind")
                }
                ConfigKind::Namespace => typed::<k8s::Namespace>(value, &mut ignored).map(ConfigObject::Namespace),
                ConfigKind::GatewayClass => typed::<gateway_api::GatewayClass>(value, &mut ignored)
                    .map(|o| ConfigObject::GatewayClass(Box::new(o))),
                ConfigKind::KubernetesGateway => typed::<gateway_api::Gateway>(value, &mut ignored)
                    .map(|o| ConfigObject::KubernetesGateway(Box::new(o))),
                ConfigKind::HttpRoute => {
                    typed::<gateway_api::HttpRoute>(value, &mut ignored).map(|o| ConfigObject::HttpRoute(Box::new(o)))
                }
                ConfigKind::GrpcRoute => {
                    typed::<gateway_api::GrpcRoute>(value, &mut ignored).map(|o| ConfigObject::GrpcRoute(Box::new(o)))
                }
                ConfigKind::TcpRoute => {
                    typed::<gateway_api::TcpRoute>(value, &mut ignored).map(|o| ConfigObject::TcpRoute(Box::new(o)))
                }
                ConfigKind::TlsRoute => {
                    typed::<gateway_api::TlsRoute>(value, &mut ignored).map(|o| ConfigObject::TlsRoute(Box::new(o)))
                }
                ConfigKind::ReferenceGrant => typed::<gateway_api::ReferenceGrant>(value, &mut ignored)
                    .map(|o| ConfigObject::ReferenceGrant(Box::new(o))),
                ConfigKind::Ingress => {
                    typed::<ingress::Ingress>(value, &mut ignored).map(|o| ConfigObject::Ingress(Box::new(o)))
                }
                ConfigKind::IngressClass => {
                    typed::<ingress::IngressClass>(value, &mut ignored).map(|o| ConfigObject::IngressClass(Box::new(o)))
                }
            };
        for path in &ignored {
            self.ignored_field(doc, config_kind, key.as_ref(), &field(prefix, path), path);
        }
        let mut object = match object {
            Ok(object) => object,
            Err(TypeError { path, message }) => {
                return self.problem(Severity::Error, doc, key, &field(prefix, &path), message);
            }
        };
        object.meta_mut().written_spec = written;
        // Nothing meshpush does reads the annotations of the kinds a large
        // mesh has most of (but two): they are not kept.
        // Nor their creation times (only routes are ordered by them).
        let unread = match &mut object {
            ConfigObject::Pod(o) => Some(&mut o.metadata),
            ConfigObject::EndpointSlice(o) => Some(&mut o.metadata),
            ConfigObject::Node(o) => Some(&mut o.metadata),
            ConfigObject::Namespace(o) => Some(&mut o.metadata),
            _ => None,
        };
        if let Some(meta) = unread {
            // Save ambient mode's: whether the CNI captures a Pod's
            // traffic, and a Namespace's default traffic distribution.
            meta.annotations.retain(|k, _| k == k8s::AMBIENT_REDIRECTION || k == k8s::TRAFFIC_DISTRIBUTION);
            meta.creation_timestamp = None;
        }
        // Only a Pod's UID is read (the CA checks a Pod-bound token by it):
        // the other kinds a large mesh has many of do not keep theirs.
        match &mut object {
            ConfigObject::EndpointSlice(o) => o.metadata.uid = None,
            ConfigObject::Node(o) => o.metadata.uid = None,
            ConfigObject::Namespace(o) => o.metadata.uid = None,
            ConfigObject::Service(o) => o.metadata.uid = None,
            ConfigObject::WorkloadEntry(o) => o.metadata.uid = None,
            _ => {}
        }
        if object.meta().name.is_empty() {
            let message = format!("is missing: every {config_kind} needs a name");
            return self.problem(Severity::Error, doc, None, &field(prefix, "metadata.name"), message);
        }
        let key = object.key();
        let mut refused = false;
        for found in validate(&object) {
            refused |= found.severity == Severity::Error;
            let path = field(prefix, &found.path);
            self.problem(found.severity, doc, Some(key.clone()), &path, found.message);
        }
        if !refused {
            self.parsed.objects.push((object, self.source(doc)));
        }
    }

    fn read_list(&mut self, doc: usize, prefix: &str, mut map: Mapping) {
        let items = match map.remove("items") {
            None | Some(Value::Null) => return,
            Some(Value::Sequence(items)) => items,
            Some(other) => {
                let message = format!("is {}, not a list of objects", describe(&other));
                return self.problem(Severity::Error, doc, None, &field(prefix, "items"), message);
            }
        };
        for (i, item) in items.into_iter().enumerate() {
            let item_prefix = format!("{prefix}items[{i}].");
            match item {
                Value::Mapping(item) => self.read_object(doc, &item_prefix, item),
                other => {
                    let message = format!("is {}, not an object", describe(&other));
                    self.problem(Severity::Error, doc, None, &field(&item_prefix, ""), message);
                }
            }
        }
    }

    /// Reports a field the typed object does not model: a field of Istio's
    /// API meshpush does not apply, or no field of the API at all. Fields of
    /// the Kubernetes kinds that meshpush does not read (a Pod's containers)
    /// and bookkeeping such as `metadata.resourceVersion` stay quiet.
    fn ignored_field(&mut self, doc: usize, kind: ConfigKind, key: Option<&ConfigKey>, at: &str, path: &str) {
        if matches!(kind.api_group(), gateway_api::GROUP | ingress::GROUP) && path.starts_with("spec.") {
            // The types model every field of the API meshpush applies, so
            // one they do not model is either one it does not apply or none
            // of the API's: both are said, never dropped.
            let message = format!(
                "is not a field meshpush applies of {} ({}/v1): ignored; check its spelling and indentation",
                kind.kind_name(),
                kind.api_group()
            );
            self.problem(Severity::Warning, doc, key.cloned(), at, message);
            return;
        }
        if !api::is_istio_kind(kind) {
            tracing::debug!(file = %self.file, doc, %kind, field = at, "field not read by meshpush: ignored");
            return;
        }
        let message = match api::classify(kind, path) {
            ApiField::Inert => return,
            ApiField::Unsupported => not_supported(api::consequence(kind, path)),
            ApiField::Removed(instead) => {
                format!("was removed from Istio's {kind} API and is ignored, as Istio ignores it: {instead}")
            }
            ApiField::Unknown => format!(
                "is not a field of Istio's {kind} ({}/v1): ignored; check its spelling and indentation",
                kind.api_group()
            ),
        };
        self.problem(Severity::Warning, doc, key.cloned(), at, message);
    }

    /// Marks the last problem (a syntax error no document start follows) as ending the file.
    fn note_rest_skipped(&mut self) {
        if let Some(last) = self.parsed.problems.last_mut() {
            last.message.push_str("; the rest of the file is skipped");
        }
    }

    fn source(&self, doc: usize) -> SourceRef {
        SourceRef { file: self.file.clone(), doc }
    }

    fn problem(&mut self, severity: Severity, doc: usize, object: Option<ConfigKey>, path: &str, message: String) {
        let source = self.source(doc);
        self.parsed.problems.push(Problem { severity, source, object, path: path.to_string(), message });
    }

    /// Keeps the last definition of each key, warning about the earlier ones.
    fn finish(mut self) -> ParsedFile {
        let objects = std::mem::take(&mut self.parsed.objects);
        let mut kept: Vec<(ConfigObject, SourceRef)> = Vec::with_capacity(objects.len());
        for (object, source) in objects {
            let key = object.key();
            if let Some(earlier) = kept.iter().position(|(o, _)| o.key() == key) {
                let (_, earlier_source) = kept.remove(earlier);
                self.parsed.problems.push(Problem {
                    severity: Severity::Warning,
                    source: source.clone(),
                    object: Some(key),
                    path: String::new(),
                    message: format!(
                        "also defined in doc {} of this file; the later document wins",
                        earlier_source.doc
                    ),
                });
            }
            kept.push((object, source));
        }
        self.parsed.objects = kept;
        self.parsed
    }
}

/// The versions of Istio's API group meshpush reads, most preferred first.
pub const ISTIO_VERSIONS: [&str; 3] = ["v1", "v1beta1", "v1alpha3"];
/// The versions of Istio's security API group meshpush reads, most preferred first.
pub const SECURITY_VERSIONS: [&str; 2] = ["v1", "v1beta1"];
/// The versions of Istio's telemetry API group meshpush reads (one schema),
/// most preferred first.
pub const TELEMETRY_VERSIONS: [&str; 2] = ["v1", "v1alpha1"];

/// The kind meshpush models for this `apiVersion` and `kind`, if any.
fn config_kind(api_version: &str, kind: &str) -> Option<ConfigKind> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let config_kind =
        ConfigKind::ALL.into_iter().find(|k| k.kind_name() == kind && k.api_group() == group && !k.is_internal())?;
    let known = match group {
        // Istio serves ProxyConfig in v1beta1 only.
        "networking.istio.io" if config_kind == ConfigKind::ProxyConfig => version == "v1beta1",
        // and EnvoyFilter in v1alpha3 only.
        "networking.istio.io" if config_kind == ConfigKind::EnvoyFilter => version == "v1alpha3",
        "networking.istio.io" => ISTIO_VERSIONS.contains(&version),
        "security.istio.io" => SECURITY_VERSIONS.contains(&version),
        "telemetry.istio.io" => TELEMETRY_VERSIONS.contains(&version),
        gateway_api::GROUP => gateway_api::versions(kind).contains(&version),
        _ => version == "v1",
    };
    known.then_some(config_kind)
}

fn expected_api_versions(kind: ConfigKind) -> &'static str {
    match kind {
        ConfigKind::Service | ConfigKind::Pod | ConfigKind::Node | ConfigKind::Secret | ConfigKind::Namespace => "v1",
        ConfigKind::GatewayClass
        | ConfigKind::KubernetesGateway
        | ConfigKind::HttpRoute
        | ConfigKind::ReferenceGrant => "gateway.networking.k8s.io/v1 or v1beta1",
        ConfigKind::GrpcRoute | ConfigKind::TcpRoute => "gateway.networking.k8s.io/v1 or v1alpha2",
        ConfigKind::TlsRoute => "gateway.networking.k8s.io/v1, v1alpha3 or v1alpha2",
        ConfigKind::Ingress | ConfigKind::IngressClass => "networking.k8s.io/v1",
        ConfigKind::EndpointSlice => "discovery.k8s.io/v1",
        ConfigKind::PeerAuthentication | ConfigKind::AuthorizationPolicy | ConfigKind::RequestAuthentication => {
            "security.istio.io/v1 or v1beta1"
        }
        ConfigKind::Telemetry => "telemetry.istio.io/v1 or v1alpha1",
        ConfigKind::ProxyConfig => "networking.istio.io/v1beta1",
        ConfigKind::EnvoyFilter => "networking.istio.io/v1alpha3",
        ConfigKind::FetchedJwks | ConfigKind::FetchedTrustBundle | ConfigKind::ResolvedGatewayHost => {
            "no file (meshpush writes it itself)"
        }
        ConfigKind::MeshConfig => "no file (the mesh config is --mesh-config's)",
        _ => "networking.istio.io/v1, v1beta1 or v1alpha3",
    }
}

/// The key named by raw metadata, so that a type error can say which object it is about.
fn peek_key(kind: ConfigKind, map: &Mapping) -> Option<ConfigKey> {
    let metadata = map.get("metadata")?;
    let name = metadata.get("name")?.as_str().filter(|n| !n.is_empty())?;
    let namespace = metadata.get("namespace").and_then(Value::as_str).filter(|n| !n.is_empty());
    let namespace = if kind.is_cluster_scoped() { "" } else { namespace.unwrap_or("default") };
    Some(ConfigKey::new(kind, namespace, name))
}

/// A value of the wrong type: where, and what serde said.
pub struct TypeError {
    /// The field path (`spec.http[0].timeout`; empty for the whole value).
    pub path: String,
    /// What was wrong.
    pub message: String,
}

/// Deserializes a typed object, collecting the paths of fields it does not model.
pub fn typed<T: DeserializeOwned>(value: Value, ignored: &mut Vec<String>) -> Result<T, TypeError> {
    let mut on_ignored = |path: serde_ignored::Path<'_>| ignored.push(render_ignored(&path));
    let deserializer = serde_ignored::Deserializer::new(value, &mut on_ignored);
    serde_path_to_error::deserialize(deserializer).map_err(|err| {
        let path = err.path().to_string();
        let path = if path == "." { String::new() } else { path };
        TypeError { path, message: err.into_inner().to_string() }
    })
}

/// Renders an ignored field's path the way `serde_path_to_error` renders
/// paths (`spec.http[0].mirror`), so both kinds of message read alike.
fn render_ignored(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", render_ignored(parent)),
        Path::Map { parent, key } => {
            let parent = render_ignored(parent);
            if parent.is_empty() { key.clone() } else { format!("{parent}.{key}") }
        }
        Path::Some { parent } | Path::NewtypeStruct { parent } | Path::NewtypeVariant { parent } => {
            render_ignored(parent)
        }
    }
}

/// Joins a `List` item prefix (`items[3].`, or empty) and a path inside the item.
fn field(prefix: &str, path: &str) -> String {
    if path.is_empty() { prefix.trim_end_matches('.').to_string() } else { format!("{prefix}{path}") }
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// The byte offset of the first document start (`---` at column 1) that can
/// begin a new document after a syntax error at `line`:`column` (1-based),
/// searching from the chunk starting at byte `chunk_start`.
///
/// A marker on the error line itself counts only when the error is at its
/// first column: libyaml then stopped on reaching the marker (an unclosed
/// `[` in the previous document), rather than inside the marker's document.
fn next_document_start(text: &str, chunk_start: usize, line: usize, column: usize) -> Option<usize> {
    let mut offset = 0;
    for (i, text_line) in text.split_inclusive('\n').enumerate() {
        let line_no = i + 1;
        let start = offset;
        offset += text_line.len();
        if start <= chunk_start || line_no < line || (line_no == line && column > 1) {
            continue;
        }
        let rest = text_line.strip_prefix("---");
        if rest.is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t', '\r', '\n'])) {
            return Some(start);
        }
    }
    None
}
