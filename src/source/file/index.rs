//! `FileIndex`: which objects each file contributed, and which file wins a key.
//!
//! The watcher re-reads files; this index turns each re-read into the store
//! writes that make the store match the directory, under three rules:
//!
//! * an object whose document now fails keeps its last good version (a typo
//!   never takes a route down), and so does every object of a file that
//!   cannot be read at all or has a problem no object key could be given to;
//! * an object that is gone from a file is deleted, unless another file still
//!   defines it;
//! * when two files define the same key, the one read last wins.
//!
//! Invariant: for every key the index holds, the store holds the winning
//! contribution (after the writes returned by [`FileIndex::writes`] are
//! applied), and for every key the index dropped, the store holds nothing
//! from this source.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use crate::config::parse::ParsedFile;
use crate::config::{ConfigKey, ConfigObject, SourceRef};
use crate::config::{Problem, Severity};
use crate::model::store::Write;

/// A config file that exists but was never read whole, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadFile {
    /// Its path, relative to the directory.
    pub name: Arc<str>,
    /// What kept it from being read (the file's problem).
    pub reason: String,
}

impl fmt::Display for UnreadFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name, self.reason)
    }
}

/// Every file's contribution.
#[derive(Debug, Default)]
pub(super) struct FileIndex {
    files: BTreeMap<Arc<str>, FileEntry>,
    /// Counts file reads; a contribution remembers the read that produced it.
    reads: u64,
}

#[derive(Debug, Default)]
struct FileEntry {
    objects: FileObjects,
    problems: Vec<Problem>,
    /// The file was read whole at least once.
    read_once: bool,
    /// xxh3 of the text last parsed (none when it could not be read): a
    /// re-read that finds the same text need not parse it again.
    content: Option<u64>,
}

/// One object as a file last defined it successfully.
#[derive(Debug)]
struct Contribution {
    /// Shared with the store, which holds the same object when it wins.
    object: Arc<ConfigObject>,
    source: SourceRef,
    /// The read that first produced this content: the highest wins a key
    /// defined twice.
    read: u64,
}

impl FileIndex {
    /// Records a new read of `file` (`None`: the file is gone), whose text
    /// hashed to `content`. Returns the keys whose stored version may have
    /// to change. Problems are logged when `log` is set, each with what
    /// happens to the object now.
    pub(super) fn update(
        &mut self,
        file: &str,
        parsed: Option<ParsedFile>,
        content: Option<u64>,
        log: bool,
    ) -> BTreeSet<ConfigKey> {
        self.reads += 1;
        let read = self.reads;
        let previous = self.files.remove(file).unwrap_or_default();
        let mut touched: BTreeSet<ConfigKey> = previous.objects.keys().cloned().collect();
        let Some(parsed) = parsed else {
            if log && !previous.objects.is_empty() {
                tracing::info!(file, objects = previous.objects.len(), "config file removed: its objects are deleted");
            }
            return touched;
        };
        // An unchanged object keeps the read it came from, so that touching a
        // file does not take over keys another file defines too.
        let mut objects: BTreeMap<ConfigKey, Contribution> = BTreeMap::new();
        for (object, source) in parsed.objects {
            let key = object.key();
            let contribution = match previous.objects.get(&key) {
                Some(old) if *old.object == object => {
                    Contribution { object: old.object.clone(), source, read: old.read }
                }
                _ => Contribution { object: Arc::new(object), source, read },
            };
            objects.insert(key, contribution);
        }
        touched.extend(objects.keys().cloned());

        // Objects whose document failed keep their last good version. When a
        // problem cannot be tied to a key (a syntax error, an unreadable
        // file), nothing of the file is deleted until it reads cleanly.
        let failed_keys: BTreeSet<&ConfigKey> =
            parsed.problems.iter().filter(|p| p.is_error()).filter_map(|p| p.object.as_ref()).collect();
        let keyless_error = parsed.problems.iter().any(|p| p.is_error() && p.object.is_none());
        let mut kept = Vec::new();
        for (key, old) in previous.objects.0 {
            if !objects.contains_key(&key) && (keyless_error || failed_keys.contains(&key)) {
                kept.push(key.clone());
                objects.insert(key, old);
            }
        }
        // Only news is logged: re-reading a file that is still broken the
        // same way (or touching a fine one) stays quiet.
        if log && parsed.problems != previous.problems {
            log_problems(file, &parsed.problems, &kept);
        }
        let read_once = previous.read_once || !parsed.unread;
        let objects = FileObjects(objects.into_iter().collect());
        self.files.insert(file.into(), FileEntry { objects, problems: parsed.problems, read_once, content });
        touched
    }

    /// The hash of the text `file` was last parsed from.
    pub(super) fn content(&self, file: &str) -> Option<u64> {
        self.files.get(file).and_then(|f| f.content)
    }

    /// The writes that bring the store in line with the index for `keys`:
    /// a Put of the winning contribution, or a Delete when no file defines
    /// the key any more. A Put of an unchanged object is harmless: the store
    /// reports no change for it.
    pub(super) fn writes(&self, keys: &BTreeSet<ConfigKey>, log: bool) -> Vec<Write> {
        keys.iter()
            .map(|key| {
                let contributions = self.contributions(key);
                let Some(winner) = contributions.iter().max_by_key(|c| c.read) else {
                    return Write::Delete(key.clone());
                };
                if log && contributions.len() > 1 {
                    let others: Vec<String> =
                        contributions.iter().filter(|c| c.read != winner.read).map(|c| c.source.to_string()).collect();
                    tracing::warn!(
                        "{key} is defined in {} and in {}: using {} (the file read last wins)",
                        winner.source,
                        others.join(", "),
                        winner.source
                    );
                }
                Write::put(winner.object.clone(), winner.source.clone())
            })
            .collect()
    }

    /// Current problems of every file, plus a warning for each definition
    /// that loses to another file's; sorted by file and document.
    pub(super) fn problems(&self) -> Vec<Problem> {
        let mut problems: Vec<Problem> = self.files.values().flat_map(|f| f.problems.iter().cloned()).collect();
        let mut keys: BTreeMap<&ConfigKey, Vec<&Contribution>> = BTreeMap::new();
        for entry in self.files.values() {
            for (key, contribution) in entry.objects.iter() {
                keys.entry(key).or_default().push(contribution);
            }
        }
        for (key, contributions) in keys.into_iter().filter(|(_, c)| c.len() > 1) {
            let Some(winner) = contributions.iter().max_by_key(|c| c.read) else {
                continue;
            };
            for loser in contributions.iter().filter(|c| c.read != winner.read) {
                problems.push(Problem {
                    severity: Severity::Warning,
                    source: loser.source.clone(),
                    object: Some(key.clone()),
                    path: String::new(),
                    message: format!(
                        "also defined in {}, which wins (the file read last wins): ignored here",
                        winner.source
                    ),
                });
            }
        }
        problems.sort_by(|a, b| {
            (&a.source.file, a.source.doc, a.severity).cmp(&(&b.source.file, b.source.doc, b.severity))
        });
        problems
    }

    /// Files that exist but were never read whole, each with the problem
    /// that kept it from being read.
    pub(super) fn unread_files(&self) -> Vec<UnreadFile> {
        self.files
            .iter()
            .filter(|(_, f)| !f.read_once)
            .map(|(name, f)| UnreadFile {
                name: name.clone(),
                reason: f
                    .problems
                    .iter()
                    .find(|p| p.is_error() && p.object.is_none())
                    .map_or_else(|| "not read yet".to_string(), |p| p.message.clone()),
            })
            .collect()
    }

    /// The files currently known (read at least once and not gone).
    pub(super) fn file_names(&self) -> Vec<Arc<str>> {
        self.files.keys().cloned().collect()
    }

    /// Number of distinct keys the files define.
    pub(super) fn key_count(&self) -> usize {
        self.files.values().flat_map(|f| f.objects.keys()).collect::<BTreeSet<_>>().len()
    }

    fn contributions(&self, key: &ConfigKey) -> Vec<&Contribution> {
        self.files.values().filter_map(|f| f.objects.get(key)).collect()
    }

    /// The object `file` defines as `key`, as the index holds it.
    #[cfg(test)]
    pub(super) fn object(&self, file: &str, key: &ConfigKey) -> Option<&Arc<ConfigObject>> {
        self.files.get(file)?.objects.get(key).map(|c| &c.object)
    }
}

/// A file's objects, sorted by key, one each: held for every file of the
/// directory, so kept to exactly their size (a map would give a file of
/// one Service and its EndpointSlice room for eleven).
#[derive(Debug, Default)]
struct FileObjects(Box<[(ConfigKey, Contribution)]>);

impl FileObjects {
    fn get(&self, key: &ConfigKey) -> Option<&Contribution> {
        self.0.binary_search_by(|(k, _)| k.cmp(key)).ok().map(|i| &self.0[i].1)
    }

    fn keys(&self) -> impl Iterator<Item = &ConfigKey> {
        self.0.iter().map(|(k, _)| k)
    }

    fn iter(&self) -> impl Iterator<Item = &(ConfigKey, Contribution)> {
        self.0.iter()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// One warning line per problem, saying what happens to the object now.
fn log_problems(file: &str, problems: &[Problem], kept: &[ConfigKey]) {
    for problem in problems {
        if problem.severity == Severity::Warning {
            tracing::warn!("{problem}");
            continue;
        }
        let outcome = match &problem.object {
            Some(key) if kept.contains(key) => format!("kept the previous {key}"),
            Some(key) => format!("{key} is not applied (there is no previous version to keep)"),
            None if kept.is_empty() => "nothing from this document is applied".to_string(),
            None => format!("kept the previous {} objects of {file} until it reads cleanly", kept.len()),
        };
        tracing::warn!("{problem}; {outcome}");
    }
}
