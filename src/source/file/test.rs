use std::collections::BTreeSet;
use std::fs;

use tempfile::TempDir;

use super::*;
use crate::config::{ConfigKey, ConfigKind, ConfigObject};
use crate::model::StoreSnapshot;

fn dr_yaml(name: &str, host: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: {name}, namespace: default}}\nspec: {{host: {host}}}\n"
    )
}

fn dr_key(name: &str) -> ConfigKey {
    ConfigKey::new(ConfigKind::DestinationRule, "default", name)
}

/// The host of a stored DestinationRule, if the store has it.
fn dr_host(snapshot: &StoreSnapshot, name: &str) -> Option<String> {
    match &*snapshot.get(&dr_key(name))?.object {
        ConfigObject::DestinationRule(dr) => Some(dr.spec.host.clone()),
        _ => None,
    }
}

const BAD_VS: &str = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: reviews}\nspec:\n  hosts: [reviews]\n  http: [{route: [{destination: {host: reviews}, weight: -5}]}]\n";

fn good_vs(host: &str) -> String {
    BAD_VS.replace("weight: -5", "weight: 100").replace("host: reviews}", &format!("host: {host}}}"))
}

fn vs_key() -> ConfigKey {
    ConfigKey::new(ConfigKind::VirtualService, "default", "reviews")
}

fn vs_destination(snapshot: &StoreSnapshot) -> Option<String> {
    match &*snapshot.get(&vs_key())?.object {
        ConfigObject::VirtualService(vs) => Some(vs.spec.http[0].route[0].destination.host.clone()),
        _ => None,
    }
}

fn write(dir: &TempDir, name: &str, text: &str) {
    let path = dir.path().join(name);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// Re-reads `names` the way a batch of events does.
fn reread(source: &FileSource, store: &ConfigStore, names: &[&str]) -> ChangeSet {
    source.tree.refresh(store, names.iter().map(|n| n.to_string()).collect(), false, None)
}

#[test]
fn the_initial_load_reads_yaml_files_recursively_and_skips_the_rest() {
    let dir = TempDir::new().unwrap();
    write(&dir, "a.yaml", &dr_yaml("a", "a"));
    write(&dir, "sub/b.yml", &dr_yaml("b", "b"));
    write(&dir, ".hidden.yaml", &dr_yaml("hidden", "x"));
    write(&dir, ".git/c.yaml", &dr_yaml("git", "x"));
    write(&dir, "a.yaml~", &dr_yaml("backup", "x"));
    write(&dir, "#a.yaml#", &dr_yaml("autosave", "x"));
    write(&dir, "notes.txt", "not yaml");
    write(&dir, "broken.yaml", BAD_VS);
    let store = ConfigStore::new();
    let (source, report) = FileSource::load(dir.path(), &store).unwrap();
    assert_eq!((report.files, report.objects, report.errors, report.warnings), (3, 2, 1, 0));
    assert_eq!(report.changes.keys, vec![dr_key("a"), dr_key("b")]);
    let snapshot = store.snapshot();
    assert_eq!(snapshot.len(), 2);
    assert_eq!(
        snapshot.get(&dr_key("b")).unwrap().source.file.as_ref(),
        Path::new("sub").join("b.yml").to_str().unwrap()
    );
    let problems = source.problems();
    assert_eq!(problems.len(), 1);
    assert_eq!(
        problems[0].to_string(),
        "broken.yaml doc 0: VirtualService default/reviews: spec.http[0].route[0].weight: -5 is negative"
    );
}

/// The index keeps every file's objects to re-put them: the store holds
/// the same allocations, not copies (at s2, a copy was 80 MB), and an
/// object a rewrite leaves as it was keeps its allocation.
#[test]
fn the_store_shares_the_objects_the_index_keeps() {
    let dir = TempDir::new().unwrap();
    write(&dir, "two.yaml", &format!("{}---\n{}", dr_yaml("a", "a"), dr_yaml("b", "b")));
    let store = ConfigStore::new();
    let (source, _) = FileSource::load(dir.path(), &store).unwrap();
    let shared = |name: &str| {
        let snapshot = store.snapshot();
        let stored = snapshot.get(&dr_key(name)).unwrap().object.clone();
        let index = source.tree.index.lock();
        let kept = index.object("two.yaml", &dr_key(name)).unwrap().clone();
        assert!(Arc::ptr_eq(&stored, &kept), "{name}: the store and the index hold one allocation");
        stored
    };
    let (a, b) = (shared("a"), shared("b"));
    write(&dir, "two.yaml", &format!("{}---\n{}", dr_yaml("a", "a"), dr_yaml("b", "b2")));
    let changes = reread(&source, &store, &["two.yaml"]);
    assert_eq!(changes.keys, vec![dr_key("b")]);
    assert!(Arc::ptr_eq(&a, &shared("a")), "the unchanged object is the one read before");
    assert!(!Arc::ptr_eq(&b, &shared("b")));
    assert_eq!(dr_host(&store.snapshot(), "b").as_deref(), Some("b2"));
}

#[test]
fn loading_a_missing_directory_fails() {
    let dir = TempDir::new().unwrap();
    let err = FileSource::load(&dir.path().join("nope"), &ConfigStore::new()).unwrap_err();
    assert!(matches!(err, SourceError::Io { .. }), "{err}");
}

#[test]
fn an_object_removed_from_its_file_is_deleted_unless_another_file_defines_it() {
    let dir = TempDir::new().unwrap();
    write(&dir, "a.yaml", &format!("{}---\n{}", dr_yaml("x", "a"), dr_yaml("y", "a")));
    write(&dir, "b.yaml", &dr_yaml("y", "b"));
    let store = ConfigStore::new();
    let (source, _) = FileSource::load(dir.path(), &store).unwrap();
    // b.yaml was read after a.yaml: its y wins, and the shadowed definition is reported.
    assert_eq!(dr_host(&store.snapshot(), "y").as_deref(), Some("b"));
    let shadowed: Vec<String> = source.problems().iter().map(ToString::to_string).collect();
    assert_eq!(
        shadowed,
        vec![
            "a.yaml doc 1: DestinationRule default/y: also defined in b.yaml doc 0, which wins (the file read last wins): ignored here"
        ]
    );

    // Re-reading a.yaml with y unchanged does not take y over.
    assert!(reread(&source, &store, &["a.yaml"]).is_empty());
    assert_eq!(dr_host(&store.snapshot(), "y").as_deref(), Some("b"));

    write(&dir, "b.yaml", "");
    let changes = reread(&source, &store, &["b.yaml"]);
    assert_eq!(changes.keys, vec![dr_key("y")], "y falls back to a.yaml's version");
    assert_eq!(dr_host(&store.snapshot(), "y").as_deref(), Some("a"));

    write(&dir, "a.yaml", &dr_yaml("x", "a"));
    let changes = reread(&source, &store, &["a.yaml"]);
    assert_eq!(changes.keys, vec![dr_key("y")]);
    assert_eq!(dr_host(&store.snapshot(), "y"), None);
    assert_eq!(dr_host(&store.snapshot(), "x").as_deref(), Some("a"));
}

#[test]
fn an_invalid_edit_keeps_the_previous_object_and_reports_the_problem() {
    let dir = TempDir::new().unwrap();
    write(&dir, "reviews.yaml", &format!("{}---\n{}", good_vs("v1"), dr_yaml("other", "o")));
    let store = ConfigStore::new();
    let (source, _) = FileSource::load(dir.path(), &store).unwrap();

    // The VirtualService breaks and the DestinationRule is removed in the same edit.
    write(&dir, "reviews.yaml", BAD_VS);
    let changes = reread(&source, &store, &["reviews.yaml"]);
    assert_eq!(changes.keys, vec![dr_key("other")]);
    assert_eq!(vs_destination(&store.snapshot()).as_deref(), Some("v1"));
    let problems = source.problems();
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].path, "spec.http[0].route[0].weight");

    write(&dir, "reviews.yaml", &good_vs("v2"));
    let changes = reread(&source, &store, &["reviews.yaml"]);
    assert_eq!(changes.keys, vec![vs_key()]);
    assert_eq!(vs_destination(&store.snapshot()).as_deref(), Some("v2"));
    assert!(source.problems().is_empty(), "fixed files have no problems");
}

#[test]
fn a_yaml_syntax_error_keeps_every_object_of_the_file() {
    let dir = TempDir::new().unwrap();
    write(&dir, "a.yaml", &format!("{}---\n{}", dr_yaml("x", "a"), dr_yaml("y", "a")));
    let store = ConfigStore::new();
    let (source, _) = FileSource::load(dir.path(), &store).unwrap();

    write(&dir, "a.yaml", "apiVersion: [v1\nkind: Service\n");
    let changes = reread(&source, &store, &["a.yaml"]);
    assert!(changes.is_empty(), "{:?}", changes.keys);
    assert_eq!(store.snapshot().len(), 2);
    assert!(source.problems()[0].message.starts_with("YAML syntax error"));
}

#[test]
fn a_deleted_file_deletes_its_objects() {
    let dir = TempDir::new().unwrap();
    write(&dir, "a.yaml", &dr_yaml("x", "a"));
    let store = ConfigStore::new();
    let (source, _) = FileSource::load(dir.path(), &store).unwrap();
    fs::remove_file(dir.path().join("a.yaml")).unwrap();
    let changes = reread(&source, &store, &["a.yaml"]);
    assert_eq!(changes.keys, vec![dr_key("x")]);
    assert!(store.snapshot().is_empty());
}

#[test]
fn editor_leftovers_and_hidden_paths_are_not_config_files() {
    for name in ["a.yaml", "a.yml", "A.YAML", "sub/dir/a.yaml"] {
        assert!(is_config_file(Path::new(name)), "{name}");
    }
    for name in
        [".a.yaml", ".a.yaml.swp", "a.yaml~", "#a.yaml#", "a.yaml.tmp", "4913", ".git/a.yaml", "..data/a.yaml", ""]
    {
        assert!(!is_config_file(Path::new(name)), "{name}");
    }
}

// The watcher, end to end: real files, real notify events.

/// Waits up to 5 s for `condition` to hold of the store.
async fn eventually(store: &ConfigStore, what: &str, condition: impl Fn(&StoreSnapshot) -> bool) {
    crate::testing::wait::wait_until_async(Instant::now() + Duration::from_secs(5), what, || {
        let holds = condition(&store.snapshot());
        async move { holds }
    })
    .await;
}

/// The next ChangeSet, within 5 s.
async fn next_change(changes: &mut mpsc::Receiver<ChangeSet>) -> ChangeSet {
    tokio::time::timeout(Duration::from_secs(5), changes.recv())
        .await
        .expect("no ChangeSet within 5 s")
        .expect("the watch task ended")
}

/// Loads `dir` and starts watching it.
fn watched(dir: &TempDir) -> (Arc<ConfigStore>, SourceStatus, mpsc::Receiver<ChangeSet>, JoinHandle<()>) {
    let store = Arc::new(ConfigStore::new());
    let (source, _) = FileSource::load(dir.path(), &store).unwrap();
    let status = source.status();
    let (tx, rx) = mpsc::channel(16);
    let task = source.watch(store.clone(), tx).unwrap();
    (store, status, rx, task)
}

#[tokio::test]
async fn watching_applies_edits_new_files_and_deletions() {
    let dir = TempDir::new().unwrap();
    write(&dir, "a.yaml", &dr_yaml("x", "one"));
    let (store, _status, mut changes, task) = watched(&dir);

    write(&dir, "a.yaml", &dr_yaml("x", "two"));
    let change = next_change(&mut changes).await;
    assert_eq!(change.keys, vec![dr_key("x")]);
    assert_eq!(dr_host(&change.snapshot, "x").as_deref(), Some("two"));

    write(&dir, "new/b.yaml", &dr_yaml("y", "b"));
    eventually(&store, "b.yaml in a new directory is read", |s| dr_host(s, "y").is_some()).await;

    fs::remove_file(dir.path().join("a.yaml")).unwrap();
    eventually(&store, "x is deleted with its file", |s| dr_host(s, "x").is_none()).await;
    fs::remove_dir_all(dir.path().join("new")).unwrap();
    eventually(&store, "y is deleted with its directory", |s| s.is_empty()).await;
    task.abort();
}

#[tokio::test]
async fn a_broken_edit_keeps_the_served_object_until_it_is_fixed() {
    let dir = TempDir::new().unwrap();
    write(&dir, "reviews.yaml", &good_vs("v1"));
    let (store, status, mut changes, task) = watched(&dir);

    write(&dir, "reviews.yaml", BAD_VS);
    crate::testing::wait::wait_until_async(
        Instant::now() + Duration::from_secs(5),
        "the broken edit to be read",
        || {
            let read = !status.problems().is_empty();
            async move { read }
        },
    )
    .await;
    assert_eq!(vs_destination(&store.snapshot()).as_deref(), Some("v1"));
    assert!(changes.try_recv().is_err(), "a refused edit changes nothing");

    write(&dir, "reviews.yaml", &good_vs("v2"));
    let change = next_change(&mut changes).await;
    assert_eq!(change.keys, vec![vs_key()]);
    assert_eq!(vs_destination(&store.snapshot()).as_deref(), Some("v2"));
    assert!(status.problems().is_empty());
    task.abort();
}

#[tokio::test]
async fn a_temp_file_renamed_over_the_original_is_one_update() {
    let dir = TempDir::new().unwrap();
    write(&dir, "a.yaml", &dr_yaml("x", "one"));
    let (store, _status, mut changes, task) = watched(&dir);

    // What editors and `kubectl`-style tools do: write beside, then rename over.
    write(&dir, ".a.yaml.tmp", &dr_yaml("x", "two"));
    fs::rename(dir.path().join(".a.yaml.tmp"), dir.path().join("a.yaml")).unwrap();
    let change = next_change(&mut changes).await;
    assert_eq!(change.keys, vec![dr_key("x")]);
    assert_eq!(dr_host(&store.snapshot(), "x").as_deref(), Some("two"));

    // Renaming a config file away from a YAML name deletes its objects.
    fs::rename(dir.path().join("a.yaml"), dir.path().join("a.yaml.bak")).unwrap();
    eventually(&store, "x is deleted", |s| s.is_empty()).await;
    task.abort();
}

#[tokio::test]
async fn the_watch_task_ends_when_the_change_receiver_is_dropped() {
    let dir = TempDir::new().unwrap();
    let (_store, _status, changes, task) = watched(&dir);
    drop(changes);
    tokio::time::timeout(Duration::from_secs(5), task).await.expect("the task did not end").unwrap();
}

#[tokio::test]
async fn a_file_too_large_to_read_is_unread_until_it_shrinks() {
    let dir = TempDir::new().unwrap();
    write(&dir, "a.yaml", &dr_yaml("x", "one"));
    let big = format!("# padding\n{}", "#".repeat((DEFAULT_MAX_FILE_BYTES + 1) as usize));
    write(&dir, "big.yaml", &big);
    let (store, status, _changes, task) = watched(&dir);
    let unread = status.unread_files();
    assert_eq!(unread.iter().map(|f| &*f.name).collect::<Vec<_>>(), vec!["big.yaml"]);
    assert!(unread[0].reason.contains("more than the 16777216 bytes"), "{}", unread[0]);
    let problem = status.problems().into_iter().find(|p| &*p.source.file == "big.yaml").expect("a problem");
    assert!(problem.is_error() && problem.message.contains("more than the 16777216 bytes"), "{problem}");
    assert!(dr_host(&store.snapshot(), "x").is_some(), "the other files are read");

    write(&dir, "big.yaml", &dr_yaml("y", "two"));
    eventually(&store, "the shrunk file is read", |s| dr_host(s, "y").is_some()).await;
    assert!(status.unread_files().is_empty());
    task.abort();
}

#[test]
fn a_symlink_to_a_directory_is_not_followed_at_startup_or_while_watching() {
    let dir = TempDir::new().unwrap();
    let elsewhere = TempDir::new().unwrap();
    fs::write(elsewhere.path().join("x.yaml"), dr_yaml("x", "linked")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("at-start")).unwrap();
    write(&dir, "a.yaml", &dr_yaml("a", "one"));
    let store = ConfigStore::new();
    let (source, _) = FileSource::load(dir.path(), &store).unwrap();
    assert!(dr_host(&store.snapshot(), "x").is_none(), "not followed at startup");

    // While watching, the link's creation is an event for its path.
    let link = source.tree.root.join("while-serving");
    std::os::unix::fs::symlink(elsewhere.path(), &link).unwrap();
    let affected = source.tree.affected(&BTreeSet::from([link]), false);
    assert!(affected.is_empty(), "not followed while watching either: {affected:?}");
}

#[tokio::test]
async fn a_file_written_in_place_with_a_pause_is_read_only_once_it_is_closed() {
    use std::io::Write as _;
    let dir = TempDir::new().unwrap();
    let whole = format!("{}---\n{}", dr_yaml("x", "one"), dr_yaml("y", "two"));
    write(&dir, "a.yaml", &whole);
    let (store, _status, mut changes, task) = watched(&dir);
    assert!(dr_host(&store.snapshot(), "y").is_some());
    // Once another file's change came through, the watch task is past its first rescan.
    write(&dir, "b.yaml", &dr_yaml("z", "other"));
    next_change(&mut changes).await;

    // Rewritten in place: the first part, a pause, then the rest.
    let mut file = fs::OpenOptions::new().write(true).truncate(true).open(dir.path().join("a.yaml")).unwrap();
    let edited = format!("{}---\n{}", dr_yaml("x", "three"), dr_yaml("y", "four"));
    // Cut inside the second document: read now, y would be gone.
    let (head, tail) = edited.split_at(dr_yaml("x", "three").len() + 4 + 40);
    file.write_all(head.as_bytes()).unwrap();
    file.flush().unwrap();
    // While the file is open and half-written, nothing is applied: no change set comes.
    let early = tokio::time::timeout(Duration::from_millis(700), changes.recv()).await;
    assert!(early.is_err(), "a half-written file was applied: {:?}", early.map(|c| c.map(|c| c.keys)));
    assert_eq!(dr_host(&store.snapshot(), "y").as_deref(), Some("two"), "y is still served");
    file.write_all(tail.as_bytes()).unwrap();
    drop(file);
    let change = next_change(&mut changes).await;
    assert_eq!(dr_host(&change.snapshot, "x").as_deref(), Some("three"));
    assert_eq!(dr_host(&change.snapshot, "y").as_deref(), Some("four"), "read whole once closed");
    task.abort();
}

/// A ConfigMap volume as the kubelet's atomic writer keeps it: each file is
/// a symlink through `..data` into a timestamped directory, and an update
/// writes a new directory and swaps `..data` to it with one rename. The
/// swap is one update with exactly the changed file's objects, and only
/// that file is parsed again: the unchanged one is recognised by its text.
#[tokio::test]
async fn a_configmap_volume_swap_parses_only_the_files_that_changed() {
    use std::os::unix::fs::symlink;
    let dir = TempDir::new().unwrap();
    let root = dir.path();
    let version = |name: &str, files: &[(&str, String)]| {
        fs::create_dir(root.join(name)).unwrap();
        for (file, text) in files {
            fs::write(root.join(name).join(file), text).unwrap();
        }
    };
    version("..2026_12_01_a", &[("a.yaml", dr_yaml("a", "one")), ("b.yaml", dr_yaml("b", "one"))]);
    symlink("..2026_12_01_a", root.join("..data")).unwrap();
    symlink("..data/a.yaml", root.join("a.yaml")).unwrap();
    symlink("..data/b.yaml", root.join("b.yaml")).unwrap();
    let (store, status, mut changes, task) = watched(&dir);
    assert_eq!(dr_host(&store.snapshot(), "b").as_deref(), Some("one"));
    // Watching starts with a rescan of what the load read: nothing changed.
    crate::testing::wait::wait_until_async(Instant::now() + Duration::from_secs(5), "the first rescan", || {
        let done = status.reads().unchanged >= 2;
        async move { done }
    })
    .await;
    let before = status.reads();
    assert_eq!(before.parsed, 2, "the load parsed both files, the rescan neither: {before:?}");

    version("..2026_12_01_b", &[("a.yaml", dr_yaml("a", "one")), ("b.yaml", dr_yaml("b", "two"))]);
    symlink("..2026_12_01_b", root.join("..data_tmp")).unwrap();
    fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
    let change = next_change(&mut changes).await;
    assert_eq!(change.keys, vec![dr_key("b")]);
    assert_eq!(dr_host(&change.snapshot, "b").as_deref(), Some("two"));
    let after = status.reads();
    assert_eq!(after.parsed - before.parsed, 1, "only b.yaml is parsed again: {before:?} → {after:?}");
    assert!(after.unchanged > before.unchanged, "a.yaml was read and found unchanged: {before:?} → {after:?}");
    task.abort();
}
