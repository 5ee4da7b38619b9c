//! `FileSource`: a directory of Kubernetes/Istio YAML, loaded once and then watched.
//!
//! Role in the data flow: this is the first stage. It reads `*.yaml` and
//! `*.yml` files under one directory (recursively), parses and validates them
//! ([`parse_documents`]), and writes the result into the
//! [`ConfigStore`] — one atomic `apply` per batch of filesystem events — then
//! sends each non-empty [`ChangeSet`] to the push side.
//!
//! It owns the per-file bookkeeping (`FileIndex`): which keys each file
//! contributed, the last good version of each, and each file's current
//! problems (shown by [`FileSource::problems`]).
//!
//! Invariant: the store holds, for every key some file defines, the last
//! version that parsed and validated, from the file read last; a broken
//! edit never removes or damages what is being served — the object keeps its
//! previous version until the file is fixed.
//!
//! A file is read only when its writer is done with it: a write (a data
//! modification, or a new file) marks the file as being written, and it is
//! read when the writer closes it (inotify's close-write), when it is
//! renamed into place, or — should no close ever come (a platform without
//! close events, a writer that keeps the file open) — [`WRITE_GRACE`] after
//! its last write. So a script that writes a file in place, pauses, and
//! writes the rest is never served half a file.
//!
//! A batch is the first event that makes a file ready and every event
//! already queued behind it; only the files it touched are re-read, and a
//! file whose text hashes to the text it was last parsed from is not parsed
//! again (a ConfigMap volume's `..data` swap, which re-reads every file,
//! parses only the ones that changed). While
//! other files are still being written the batch waits up to 50 ms for them
//! to close too; otherwise a closed file is read at once (the engine's own
//! debounce merges what follows into one push).
//! Hidden files and editor leftovers (`.foo.swp`, `foo~`, `#foo#`) are
//! ignored, so editors that write a temporary file and rename it over the
//! original produce exactly one update.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::sync::mpsc::OwnedPermit;
use tokio::sync::mpsc::error::TrySendError;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::SourceRef;
use crate::config::parse::{ParsedFile, parse_documents};
use crate::config::{Problem, Severity};
use crate::model::{ChangeSet, ConfigStore};

mod index;
#[cfg(test)]
mod test;

use index::FileIndex;
pub use index::UnreadFile;

/// How long a batch waits for files still being written to close.
const DEBOUNCE: Duration = Duration::from_millis(50);

/// How long a file written to but not closed waits before it is read anyway.
const WRITE_GRACE: Duration = Duration::from_secs(5);

/// Filesystem notices queued between notify's thread and the watch task.
/// When it is full, notices are dropped and the next batch rescans the whole directory.
const NOTICE_QUEUE: usize = 1024;

/// Why a directory could not be loaded or watched.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The directory (or a subdirectory) could not be read.
    #[error("config directory {path}: {source}")]
    Io {
        /// The path that failed.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The path exists but is not a directory.
    #[error("config directory {0}: not a directory")]
    NotADirectory(PathBuf),
    /// The filesystem watcher could not be set up.
    #[error("watching config directory {path}: {source}")]
    Watch {
        /// The watched directory.
        path: PathBuf,
        /// notify's error.
        #[source]
        source: notify::Error,
    },
}

/// What the initial load found.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// YAML files read.
    pub files: usize,
    /// Distinct objects accepted into the store.
    pub objects: usize,
    /// Problems of severity Error (each refused a document or an object).
    pub errors: usize,
    /// Problems of severity Warning.
    pub warnings: usize,
    /// What the load changed in the store.
    pub changes: ChangeSet,
}

/// A watched directory of YAML config. See the module docs.
#[derive(Debug)]
pub struct FileSource {
    tree: Arc<Tree>,
}

/// A read-only view of a [`FileSource`]'s state that stays valid after the
/// source has moved into its watch task (for the debug endpoint).
#[derive(Debug, Clone)]
pub struct SourceStatus {
    tree: Arc<Tree>,
}

impl SourceStatus {
    /// Current problems of every file, sorted by file and document.
    pub fn problems(&self) -> Vec<Problem> {
        self.tree.index.lock().problems()
    }

    /// How many file reads were parsed and how many skipped as unchanged.
    pub fn reads(&self) -> FileReads {
        FileReads {
            parsed: self.tree.parsed.load(Ordering::Relaxed),
            unchanged: self.tree.unchanged.load(Ordering::Relaxed),
        }
    }

    /// Files that exist but were never read whole (unreadable, too large),
    /// sorted by name: the server is not ready while there are any, as
    /// istiod waits for its informers to sync before serving.
    pub fn unread_files(&self) -> Vec<UnreadFile> {
        self.tree.index.lock().unread_files()
    }
}

/// The directory and what was read from it; shared by the source, its
/// watch task and status handles.
#[derive(Debug)]
struct Tree {
    /// Canonical path of the directory; event paths are relative to it.
    root: PathBuf,
    /// Files larger than this are not read.
    max_file_bytes: u64,
    index: Mutex<FileIndex>,
    /// Files read and parsed.
    parsed: AtomicU64,
    /// Files read whose text was the one parsed last time: not parsed again.
    unchanged: AtomicU64,
}

impl Tree {
    fn new(root: PathBuf, max_file_bytes: u64) -> Tree {
        Tree { root, max_file_bytes, index: Mutex::default(), parsed: AtomicU64::new(0), unchanged: AtomicU64::new(0) }
    }
}

/// What reading one file found.
#[derive(Debug)]
enum Read {
    /// It is gone (or no longer a file).
    Gone,
    /// Its text is the one parsed last time.
    Unchanged,
    /// Parsed (or found unreadable), with the hash of its text when read.
    Parsed(ParsedFile, Option<u64>),
}

/// How many file reads were parsed, and how many found the text parsed
/// last time (a ConfigMap volume's swap re-reads every file; only the
/// changed ones are parsed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileReads {
    /// Reads that parsed the file.
    pub parsed: u64,
    /// Reads that found the same text and skipped the parse.
    pub unchanged: u64,
}

impl FileSource {
    /// Reads every config file under `dir` into `store` in one batch.
    ///
    /// Fails only when `dir` itself cannot be read; a broken file is a
    /// problem in the report (and in [`problems`](Self::problems)), not a failure.
    pub fn load(dir: &Path, store: &ConfigStore) -> Result<(FileSource, LoadReport), SourceError> {
        FileSource::load_limited(dir, store, DEFAULT_MAX_FILE_BYTES)
    }

    /// [`load`](Self::load), reading no file larger than `max_file_bytes`
    /// (now or while watching): such a file is an Error that keeps what it
    /// defined before.
    pub fn load_limited(
        dir: &Path,
        store: &ConfigStore,
        max_file_bytes: u64,
    ) -> Result<(FileSource, LoadReport), SourceError> {
        let root = dir.canonicalize().map_err(|source| SourceError::Io { path: dir.to_path_buf(), source })?;
        if !root.is_dir() {
            return Err(SourceError::NotADirectory(dir.to_path_buf()));
        }
        let tree = Arc::new(Tree::new(root, max_file_bytes));
        let names = tree.walk(&tree.root)?;
        let files = names.len();
        let changes = tree.refresh(store, names, true, None);
        let (objects, problems) = {
            let index = tree.index.lock();
            (index.key_count(), index.problems())
        };
        let errors = problems.iter().filter(|p| p.is_error()).count();
        let report = LoadReport { files, objects, errors, warnings: problems.len() - errors, changes };
        tracing::info!(
            dir = %tree.root.display(),
            files,
            objects,
            errors,
            warnings = report.warnings,
            "config directory loaded"
        );
        Ok((FileSource { tree }, report))
    }

    /// The watched directory (canonical).
    pub fn dir(&self) -> &Path {
        &self.tree.root
    }

    /// Current problems of every file, sorted by file and document.
    pub fn problems(&self) -> Vec<Problem> {
        self.tree.index.lock().problems()
    }

    /// A handle on the problems that outlives [`watch`](Self::watch).
    pub fn status(&self) -> SourceStatus {
        SourceStatus { tree: self.tree.clone() }
    }

    /// Starts watching the directory: changes are applied to `store` (the
    /// store given to [`load`](Self::load)) and each non-empty [`ChangeSet`]
    /// is sent on `changes`.
    ///
    /// The watcher is set up before this returns, so a failure to watch is
    /// reported here; the directory is then rescanned once to catch edits
    /// made since the load. The task ends when `changes` is closed (or when
    /// aborted through the handle). Must be called within a Tokio runtime.
    pub fn watch(
        self,
        store: Arc<ConfigStore>,
        changes: mpsc::Sender<ChangeSet>,
    ) -> Result<JoinHandle<()>, SourceError> {
        let (notices, queue) = mpsc::channel(NOTICE_QUEUE);
        let overflowed = Arc::new(AtomicBool::new(false));
        let on_event = {
            let overflowed = overflowed.clone();
            move |event: notify::Result<notify::Event>| {
                let notice = match event {
                    // A writer closing the file is worth a look (the write is
                    // complete); other access events are our own reads.
                    Ok(event) if is_read_only(&event.kind) => return,
                    Ok(event) if event.need_rescan() => Notice::Rescan,
                    // Written to, maybe not finished: wait for the close.
                    Ok(event) if is_write_in_progress(&event.kind) => Notice::Writing(event.paths),
                    Ok(event) => Notice::Paths(event.paths),
                    Err(err) => {
                        tracing::warn!("file watcher: {err}; rescanning the config directory");
                        Notice::Rescan
                    }
                };
                if let Err(TrySendError::Full(_)) = notices.try_send(notice) {
                    overflowed.store(true, Ordering::Relaxed);
                }
            }
        };
        let watch_error = |source: notify::Error| SourceError::Watch { path: self.tree.root.clone(), source };
        let mut watcher = notify::recommended_watcher(on_event).map_err(watch_error)?;
        watcher.watch(&self.tree.root, RecursiveMode::Recursive).map_err(watch_error)?;
        let batches = Batches { queue, overflowed, pending: BTreeSet::new(), writing: BTreeMap::new(), rescan: true };
        Ok(tokio::spawn(run(self.tree, watcher, batches, store, changes)))
    }
}

/// Parses every config file under `path` (a directory or one file) into
/// `store`, without logging, and returns the problems found.
pub(super) fn read_quietly(path: &Path, store: &ConfigStore, max_file_bytes: u64) -> Result<Vec<Problem>, SourceError> {
    let canonical = path.canonicalize().map_err(|source| SourceError::Io { path: path.to_path_buf(), source })?;
    let (root, single) = if canonical.is_dir() {
        (canonical, None)
    } else {
        let parent = canonical.parent().map(Path::to_path_buf).unwrap_or_default();
        let name = canonical.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        (parent, Some(name))
    };
    let tree = Tree::new(root, max_file_bytes);
    let names = match single {
        Some(name) => BTreeSet::from([name]),
        None => tree.walk(&tree.root)?,
    };
    tree.refresh(store, names, false, None);
    Ok(tree.index.into_inner().problems())
}

/// What notify's callback passes to the watch task.
#[derive(Debug)]
enum Notice {
    /// These paths changed and are complete (closed after writing, created
    /// by a rename, removed, renamed away).
    Paths(Vec<PathBuf>),
    /// These files are being written: read them once they are closed.
    Writing(Vec<PathBuf>),
    /// Events were lost: look at everything.
    Rescan,
}

/// The watch task's side of the notice queue, grouping notices into batches.
struct Batches {
    queue: mpsc::Receiver<Notice>,
    overflowed: Arc<AtomicBool>,
    pending: BTreeSet<PathBuf>,
    /// Files written to and not closed yet, with their last write.
    writing: BTreeMap<PathBuf, Instant>,
    rescan: bool,
}

impl Batches {
    /// Waits for the next batch: the first notice that makes a file ready,
    /// what is queued behind it, and, while other files are being written,
    /// whatever arrives within [`DEBOUNCE`]. `None` when the watcher is gone.
    async fn next(&mut self) -> Option<(BTreeSet<PathBuf>, bool)> {
        while self.pending.is_empty() && !self.rescan {
            // Wake for the next notice, or when a file left open is due.
            let due = self.writing.values().min().map(|last| *last + WRITE_GRACE);
            let notice = match due {
                Some(due) => match tokio::time::timeout_at(due, self.queue.recv()).await {
                    Ok(notice) => notice?,
                    Err(_) => {
                        self.flush_overdue(Instant::now());
                        continue;
                    }
                },
                None => self.queue.recv().await?,
            };
            self.add(notice);
            if self.pending.is_empty() && !self.rescan {
                continue;
            }
            // What is already queued joins the batch. A closed or renamed
            // file is complete, so there is no window to wait out, unless
            // other files are still being written: they are likely part of
            // the same edit (a checkout, a tool writing several files), and
            // get up to DEBOUNCE to close.
            while let Ok(notice) = self.queue.try_recv() {
                self.add(notice);
            }
            let deadline = Instant::now() + DEBOUNCE;
            while !self.writing.is_empty()
                && let Ok(notice) = tokio::time::timeout_at(deadline, self.queue.recv()).await
            {
                self.add(notice?);
            }
        }
        let rescan = std::mem::take(&mut self.rescan) || self.overflowed.swap(false, Ordering::Relaxed);
        Some((std::mem::take(&mut self.pending), rescan))
    }

    fn add(&mut self, notice: Notice) {
        match notice {
            Notice::Paths(paths) => {
                for path in paths {
                    self.writing.remove(&path);
                    self.pending.insert(path);
                }
            }
            Notice::Writing(paths) => {
                let now = Instant::now();
                for path in paths {
                    // A directory's contents arrive as events of their own.
                    if path.is_dir() {
                        self.pending.insert(path);
                    } else {
                        self.writing.insert(path, now);
                    }
                }
            }
            Notice::Rescan => self.rescan = true,
        }
    }

    /// Files written to more than [`WRITE_GRACE`] ago and never closed are read now.
    fn flush_overdue(&mut self, now: Instant) {
        let overdue: Vec<PathBuf> = self
            .writing
            .iter()
            .filter(|(_, last)| now.duration_since(**last) >= WRITE_GRACE)
            .map(|(p, _)| p.clone())
            .collect();
        for path in overdue {
            tracing::debug!(path = %path.display(), "written to and not closed: reading it now");
            self.writing.remove(&path);
            self.pending.insert(path);
        }
    }
}

/// The watch loop: one batch of notices → re-read the files it names → one
/// store apply → one ChangeSet sent.
async fn run(
    tree: Arc<Tree>,
    watcher: RecommendedWatcher,
    mut batches: Batches,
    store: Arc<ConfigStore>,
    changes: mpsc::Sender<ChangeSet>,
) {
    // Dropping the watcher stops the notices, so it lives as long as this task.
    let _watcher = watcher;
    loop {
        let batch = tokio::select! {
            batch = batches.next() => batch,
            () = changes.closed() => None,
        };
        let Some((paths, rescan)) = batch else { return };
        // The channel slot is taken before the write, so the write and its
        // send are one step: change sets of all sources reach the debouncer
        // in revision order (see `ConfigStore::apply_then`).
        let Ok(slot) = changes.clone().reserve_owned().await else { return };
        let (tree, store) = (tree.clone(), store.clone());
        // Reading and parsing is blocking work; keep it off the async workers.
        let refreshed = tokio::task::spawn_blocking(move || {
            let names = tree.affected(&paths, rescan);
            tree.refresh(&store, names, true, Some(slot))
        })
        .await;
        let change_set = match refreshed {
            Ok(change_set) => change_set,
            Err(err) => {
                tracing::error!("re-reading the config directory failed: {err}");
                continue;
            }
        };
        if !change_set.is_empty() {
            tracing::debug!(keys = change_set.keys.len(), revision = change_set.revision, "config files changed");
        }
    }
}

impl Tree {
    /// Re-reads `names` (paths relative to the root) and applies the result
    /// to `store` in one batch; a non-empty result is sent through `slot`.
    fn refresh(
        &self,
        store: &ConfigStore,
        names: BTreeSet<String>,
        log: bool,
        slot: Option<OwnedPermit<ChangeSet>>,
    ) -> ChangeSet {
        // Parse outside the lock: readers of `problems()` never wait on disk.
        let known: Vec<(String, Option<u64>)> = {
            let index = self.index.lock();
            names
                .into_iter()
                .map(|name| {
                    let known = index.content(&name);
                    (name, known)
                })
                .collect()
        };
        let reads: Vec<(String, Read)> =
            known.into_iter().map(|(name, known)| (name.clone(), self.read(&name, known))).collect();
        let mut index = self.index.lock();
        let mut touched = BTreeSet::new();
        for (name, read) in reads {
            match read {
                Read::Unchanged => {
                    self.unchanged.fetch_add(1, Ordering::Relaxed);
                }
                Read::Gone => touched.extend(index.update(&name, None, None, log)),
                Read::Parsed(parsed, content) => {
                    self.parsed.fetch_add(1, Ordering::Relaxed);
                    touched.extend(index.update(&name, Some(parsed), content, log));
                }
            }
        }
        // Applied under the index lock, so the store always matches the index.
        let writes = index.writes(&touched, log);
        match slot {
            Some(slot) => store.apply_then(writes, |changes| {
                slot.send(changes);
            }),
            None => store.apply(writes),
        }
    }

    /// Reads one file and parses it, unless its text hashes to `known`
    /// (the text it was last parsed from).
    fn read(&self, name: &str, known: Option<u64>) -> Read {
        let path = self.root.join(name);
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() && meta.len() > self.max_file_bytes => {
                return Read::Parsed(too_large(name, meta.len(), self.max_file_bytes), None);
            }
            Ok(meta) if meta.is_file() => {}
            Ok(_) => return Read::Gone,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Read::Gone,
            Err(err) => return Read::Parsed(unreadable(name, &err), None),
        }
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let content = xxhash_rust::xxh3::xxh3_64(text.as_bytes());
                if known == Some(content) {
                    return Read::Unchanged;
                }
                Read::Parsed(parse_documents(name, &text), Some(content))
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => Read::Gone,
            Err(err) => Read::Parsed(unreadable(name, &err), None),
        }
    }

    /// The files a batch of changed paths may have affected, relative to the root.
    fn affected(&self, paths: &BTreeSet<PathBuf>, rescan: bool) -> BTreeSet<String> {
        let known = self.index.lock().file_names();
        let rescan = rescan || paths.iter().any(|p| self.needs_rescan(p));
        if rescan {
            return match self.walk(&self.root) {
                Ok(mut names) => {
                    names.extend(known.iter().map(|n| n.to_string()));
                    names
                }
                Err(err) => {
                    // Deleting everything because the directory vanished would take
                    // the mesh's config down; keep serving the last one instead.
                    tracing::error!("{err}; keeping the config read so far (restart to watch the directory again)");
                    BTreeSet::new()
                }
            };
        }
        let mut names = BTreeSet::new();
        for path in paths {
            let Ok(relative) = path.strip_prefix(&self.root) else {
                continue;
            };
            if relative.components().any(|c| is_hidden(c.as_os_str())) {
                continue;
            }
            if is_config_file(relative) {
                names.insert(relative.to_string_lossy().into_owned());
            }
            // A directory removed or renamed away: the files read from under it.
            names.extend(known.iter().filter(|n| Path::new(&n[..]).starts_with(relative)).map(|n| n.to_string()));
            // A directory created or renamed in: the files now under it. A
            // symlink to a directory is not followed, as at startup (it could loop).
            if path.symlink_metadata().is_ok_and(|m| m.is_dir()) {
                match self.walk(path) {
                    Ok(found) => names.extend(found),
                    Err(err) => tracing::warn!("{err}; its files are not read"),
                }
            }
        }
        names
    }

    /// Whether a changed path means the whole tree must be looked at: the
    /// root itself, or Kubernetes' `..data` symlink swap in a ConfigMap
    /// volume, which renames hidden entries only.
    fn needs_rescan(&self, path: &Path) -> bool {
        match path.strip_prefix(&self.root) {
            Ok(relative) => {
                relative.as_os_str().is_empty()
                    || relative.components().next().is_some_and(|c| c.as_os_str().to_string_lossy().starts_with(".."))
            }
            Err(_) => false,
        }
    }

    /// Config files under `dir`, as paths relative to the root. Hidden
    /// entries are skipped; symlinks to files are followed, symlinks to
    /// directories are not (they could loop).
    fn walk(&self, dir: &Path) -> Result<BTreeSet<String>, SourceError> {
        let mut found = BTreeSet::new();
        let mut pending = vec![dir.to_path_buf()];
        while let Some(dir) = pending.pop() {
            let io_error = |source| SourceError::Io { path: dir.clone(), source };
            for entry in std::fs::read_dir(&dir).map_err(io_error)? {
                let entry = entry.map_err(io_error)?;
                if is_hidden(&entry.file_name()) {
                    continue;
                }
                let path = entry.path();
                let Ok(file_type) = entry.file_type() else {
                    continue;
                };
                if file_type.is_dir() {
                    pending.push(path);
                    continue;
                }
                let Ok(relative) = path.strip_prefix(&self.root) else {
                    continue;
                };
                if is_config_file(relative) && path.is_file() {
                    found.insert(relative.to_string_lossy().into_owned());
                }
            }
        }
        Ok(found)
    }
}

/// Config files larger than this are not read unless the limit is raised
/// (`--max-config-file-bytes`; 16 MiB: a file of a thousand objects is well
/// under 1 MiB, and parsing one takes about ten times its size in memory).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 16 << 20;

/// A file over the size limit: an Error with no object key, so the index
/// keeps everything the file defined before.
fn too_large(name: &str, len: u64, limit: u64) -> ParsedFile {
    let problem = Problem {
        severity: Severity::Error,
        source: SourceRef { file: name.into(), doc: 0 },
        object: None,
        path: String::new(),
        message: format!(
            "is {len} bytes, more than the {limit} bytes a config file may hold: not read, what it defined \
             before is kept (split it into several files, or raise --max-config-file-bytes)"
        ),
    };
    ParsedFile { objects: Vec::new(), problems: vec![problem], unread: true }
}

/// A file that exists but cannot be read: an Error with no object key, so
/// the index keeps everything the file defined before.
fn unreadable(name: &str, err: &io::Error) -> ParsedFile {
    let problem = Problem {
        severity: Severity::Error,
        source: SourceRef { file: name.into(), doc: 0 },
        object: None,
        path: String::new(),
        message: format!("cannot read the file: {err}"),
    };
    ParsedFile { objects: Vec::new(), problems: vec![problem], unread: true }
}

/// Whether a path (relative to the root) is a config file: `*.yaml` or
/// `*.yml`, not hidden, not under a hidden directory, not an editor backup.
fn is_config_file(relative: &Path) -> bool {
    let mut components = relative.components().peekable();
    if components.peek().is_none() {
        return false;
    }
    if !components.all(|c| matches!(c, Component::Normal(name) if !is_hidden(name))) {
        return false;
    }
    let Some(name) = relative.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let lower = name.to_ascii_lowercase();
    (lower.ends_with(".yaml") || lower.ends_with(".yml")) && !name.starts_with('#') && !name.ends_with('~')
}

/// Access events other than a writer closing the file: they change nothing.
/// Whether an event means a file is being written: its data modified, or
/// the file created (its content may follow). A close, a rename or a
/// removal is complete.
fn is_write_in_progress(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Modify(notify::event::ModifyKind::Data(_)) | EventKind::Create(notify::event::CreateKind::File)
    )
}

fn is_read_only(kind: &EventKind) -> bool {
    matches!(kind, EventKind::Access(access) if *access != AccessKind::Close(AccessMode::Write))
}

fn is_hidden(name: &std::ffi::OsStr) -> bool {
    name.to_string_lossy().starts_with('.')
}
