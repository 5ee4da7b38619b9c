//! What `/ready` says while the server is not ready.

use std::sync::Arc;

use super::*;
use crate::config::ConfigKind;
use crate::model::ConfigStore;
use crate::source::FileSource;

fn state() -> AdminState {
    AdminState::new(AdsService::new(PushEngine::new()))
}

#[test]
fn before_anything_is_known_it_waits_for_the_first_snapshot() {
    let state = state();
    assert_eq!(state.waiting_for().as_deref(), Some("the first snapshot of the sources to be published"));
    state.engine.set_ready();
    assert_eq!(state.waiting_for(), None, "a ready server waits for nothing");
}

#[test]
fn unread_files_are_named_with_why_and_a_long_list_is_cut() {
    let dir = tempfile::TempDir::new().unwrap();
    for i in 0..7 {
        std::fs::write(dir.path().join(format!("big-{i}.yaml")), "# more than ten bytes\n").unwrap();
    }
    std::fs::write(dir.path().join("small.yaml"), "").unwrap();
    let store = Arc::new(ConfigStore::new());
    let (source, _) = FileSource::load_limited(dir.path(), &store, 10).unwrap();
    let state = state();
    state.set_source(source.status());
    let text = state.waiting_for().expect("not ready");
    assert!(text.starts_with("the first read of 7 files: big-0.yaml: is 22 bytes, more than the 10 bytes"), "{text}");
    assert!(text.contains("big-4.yaml: is 22 bytes") && !text.contains("big-5.yaml"), "five are named: {text}");
    assert!(text.ends_with(", and 2 more (see /debug/configz)"), "{text}");
    assert!(!text.contains("small.yaml"), "a file that was read is not waited for: {text}");
}

#[test]
fn kubernetes_kinds_not_yet_listed_are_named() {
    let state = state();
    state.set_kube(crate::source::kube::KubeStatus::new([ConfigKind::Service, ConfigKind::Pod]));
    let text = state.waiting_for().expect("not ready");
    assert_eq!(text, "the first list of 2 Kubernetes kinds: Service, Pod");
}
