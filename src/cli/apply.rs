//! `meshpush apply -f FILE|DIR` and `meshpush delete KIND NAMESPACE/NAME`:
//! the registry API from the command line, as `kubectl apply` and
//! `kubectl delete` are to the API server.
//!
//! `apply` sends every document of the files (a directory is read
//! recursively, `*.yaml` and `*.yml`) as one batch: all of it is applied,
//! or — when any object is invalid — none, and each refused object's
//! problem is printed with the file and document it came from.

use std::path::{Path, PathBuf};

use crate::source::registry::proto::registry_client::RegistryClient;
use crate::source::registry::proto::{ApplyRequest, Object, ObjectKey};
use crate::source::registry::{apply_problems, problem_line};

/// What a command against the registry ends with.
#[derive(Debug)]
pub struct Outcome {
    /// What to print on standard output.
    pub text: String,
    /// Whether the batch was applied.
    pub applied: bool,
}

/// One document of a file, and where it came from.
struct Document {
    text: String,
    origin: String,
}

/// Applies every document of `paths` through the registry at `xds_addr`.
pub fn apply(xds_addr: &str, paths: &[PathBuf]) -> Result<Outcome, String> {
    let mut documents = Vec::new();
    for path in paths {
        for file in yaml_files(path)? {
            let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            for (i, doc) in split_documents(&text).into_iter().enumerate() {
                documents.push(Document { text: doc, origin: format!("{} doc {i}", file.display()) });
            }
        }
    }
    if documents.is_empty() {
        return Err("no documents to apply".to_string());
    }
    let puts = documents.iter().map(|d| Object { document: d.text.clone() }).collect();
    send(xds_addr, ApplyRequest { puts, deletes: Vec::new() }, |index| documents.get(index).map(|d| d.origin.clone()))
}

/// Deletes `kind` `namespace/name` through the registry at `xds_addr`.
pub fn delete(xds_addr: &str, kind: &str, object: &str) -> Result<Outcome, String> {
    let (namespace, name) = object.split_once('/').unwrap_or(("default", object));
    let key = ObjectKey { kind: kind.to_string(), namespace: namespace.to_string(), name: name.to_string() };
    send(xds_addr, ApplyRequest { puts: Vec::new(), deletes: vec![key] }, |_| None)
}

fn send(xds_addr: &str, request: ApplyRequest, origin: impl Fn(usize) -> Option<String>) -> Result<Outcome, String> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{xds_addr}"))
            .map_err(|e| format!("{xds_addr}: {e}"))?
            .connect()
            .await
            .map_err(|e| format!("{xds_addr}: {e}"))?;
        let mut client = RegistryClient::new(channel);
        match client.apply(request).await {
            Ok(response) => {
                let r = response.into_inner();
                let mut text = format!("applied: {} objects changed, revision {}\n", r.changed, r.revision);
                for w in &r.warnings {
                    text.push_str(&located(&problem_line(w), w.delete, w.index as usize, &origin));
                }
                Ok(Outcome { text, applied: true })
            }
            Err(status) => match apply_problems(&status) {
                Some(problems) => {
                    let mut text = "refused, nothing applied:\n".to_string();
                    for p in &problems.problems {
                        text.push_str(&located(&problem_line(p), p.delete, p.index as usize, &origin));
                    }
                    Ok(Outcome { text, applied: false })
                }
                None => Err(format!("{xds_addr}: {}", status.message())),
            },
        }
    })
}

/// A problem line with the file and document of the put it is about.
fn located(line: &str, delete: bool, index: usize, origin: &impl Fn(usize) -> Option<String>) -> String {
    match (delete, origin(index)) {
        (false, Some(origin)) => format!("  {origin}: {line}\n"),
        _ => format!("  {line}\n"),
    }
}

/// The YAML files of a path: the file itself, or a directory's, recursively and sorted.
fn yaml_files(path: &Path) -> Result<Vec<PathBuf>, String> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    let mut pending = vec![path.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in entries.flatten() {
            let p = entry.path();
            let hidden = p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'));
            if hidden {
                continue;
            }
            if p.is_dir() {
                pending.push(p);
            } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The non-empty documents of a multi-document YAML text, each as its own text.
fn split_documents(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.split_inclusive('\n') {
        let marker = line.strip_prefix("---").is_some_and(|r| r.trim().is_empty() || r.starts_with([' ', '#']));
        if marker {
            out.push(std::mem::take(&mut current));
        } else {
            current.push_str(line);
        }
    }
    out.push(current);
    out.into_iter().filter(|d| d.lines().any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_split_on_markers_and_empty_ones_are_dropped() {
        let docs = split_documents("# head\n---\na: 1\n---\n\n--- # comment\nb: 2\n");
        assert_eq!(docs, vec!["a: 1\n".to_string(), "b: 2\n".to_string()]);
    }
}
