//! Config sources: where typed config objects come from.
//!
//! Role in the data flow: a source is the only writer of the [`ConfigStore`].
//! The main ones are the watched YAML directory ([`FileSource`]), the
//! registry gRPC API ([`RegistryService`]), a Kubernetes API server
//! ([`kube`]) and the MCP-over-xDS servers of the mesh config ([`mcp`]).
//! Each turns documents into
//! validated [`ConfigObject`](crate::config::ConfigObject)s, applies them in
//! atomic batches and hands each resulting
//! [`ChangeSet`](crate::model::ChangeSet) to the push side, both down the
//! same channel and in store-revision order.
//!
//! This module also holds the offline check behind `meshpush validate DIR`
//! ([`validate_dir`], [`print_report`]): the same parsing, validation and
//! file merging as the running source, plus the cross-object reference
//! checks, which the server runs too on every revision it serves
//! ([`ReferenceReport`]) — so the command and the server never disagree
//! about a file.
//!
//! Invariant: a source never lets an object that failed validation into the
//! store, and never removes a served object because its file became
//! unreadable or invalid — only because the object was deleted.

use std::fmt::Write as _;
use std::path::Path;

use crate::config::SourceRef;
use crate::config::{Problem, Severity};
use crate::model::ConfigStore;
use crate::model::check_references;

pub mod autoregistration;
pub mod ca_bundle;
pub mod consul;
mod fetch;
pub mod file;
pub mod gateway_dns;
pub mod gateway_status;
pub mod jwks;
pub mod kube;
pub mod mcp;
pub mod mesh_config;
pub mod references;
mod refresh;
pub mod registry;
pub mod spiffe_bundle;

pub use file::{FileSource, LoadReport, SourceError, SourceStatus, UnreadFile};
pub use references::ReferenceReport;
pub use registry::RegistryService;

#[cfg(test)]
mod test;

/// Checks a config directory (or a single file) as the server would load it:
/// every file parsed and validated, duplicate definitions resolved, then
/// references between the accepted objects checked. Problems are sorted by
/// file and document; an unreadable directory is itself one Error. No file
/// larger than `max_file_bytes` is read (as `serve`, whose limit it is).
pub fn validate_dir(dir: &Path, max_file_bytes: u64, mesh: &crate::config::mesh::MeshConfig) -> Vec<Problem> {
    let store = ConfigStore::new();
    let mut problems = match file::read_quietly(dir, &store, max_file_bytes) {
        Ok(problems) => problems,
        Err(err) => {
            return vec![Problem {
                severity: Severity::Error,
                source: SourceRef { file: dir.display().to_string().into(), doc: 0 },
                object: None,
                path: String::new(),
                message: err.to_string(),
            }];
        }
    };
    let snapshot = store.snapshot();
    problems.extend(check_references(&snapshot));
    problems.extend(crate::model::check_telemetry(&snapshot, mesh));
    problems.extend(crate::model::check_ext_authz(&snapshot, mesh));
    problems.extend(gateway_api_problems(&snapshot, mesh));
    problems
        .sort_by(|a, b| (&a.source.file, a.source.doc, a.severity).cmp(&(&b.source.file, b.source.doc, b.severity)));
    problems
}

/// The Gateway API conditions of `store` that do not hold, and the Ingress
/// paths that route nothing (of the Ingresses `mesh` serves), as problems.
pub fn gateway_api_problems(
    store: &crate::model::StoreSnapshot,
    mesh: &crate::config::mesh::MeshConfig,
) -> Vec<Problem> {
    use crate::push::index::{GatewayApiIndex, IngressIndex};
    let mut out = Vec::new();
    if GatewayApiIndex::has_objects(store) {
        out.extend(GatewayApiIndex::build(store).problems(store));
    }
    if IngressIndex::has_objects(store) {
        out.extend(IngressIndex::build(store, &mesh.ingress).problems(store));
    }
    out
}

/// Prints each problem on one line (`error: reviews.yaml doc 2: …`) and a
/// summary line, on standard output. Returns the process exit code: 1 when
/// any problem is an Error, else 0.
pub fn print_report(problems: &[Problem]) -> i32 {
    print!("{}", report(problems));
    if problems.iter().any(Problem::is_error) { 1 } else { 0 }
}

/// The text [`print_report`] prints.
fn report(problems: &[Problem]) -> String {
    let mut out = String::new();
    for problem in problems {
        let _ = writeln!(out, "{}: {problem}", problem.severity);
    }
    let errors = problems.iter().filter(|p| p.is_error()).count();
    let warnings = problems.len() - errors;
    let plural = |n: usize, word: &str| {
        if n == 1 { format!("{n} {word}") } else { format!("{n} {word}s") }
    };
    let _ = writeln!(out, "{}, {}", plural(errors, "error"), plural(warnings, "warning"));
    out
}
