//! What each EnvoyFilter patch did: a [`Record`] per generation, and the
//! server's [`PatchLog`] over all of them.
//!
//! A patch *applied* in a generation when it changed at least one object;
//! it was *skipped* when it matched nothing there, or failed everywhere it
//! matched. A failure (a MERGE of a typed config of another type, a filter
//! list Envoy would refuse, a transport socket with no entry to merge into)
//! is kept with its reason: logged once at WARN, shown on
//! `/debug/configz` and the status page, and counted. The counter is
//! `pilot_total_envoy_filter{name, type, result}`, as istiod exported it
//! before its gauge: one increment per patch per generation of a scope.
//!
//! Invariants: the log holds at most one failure per patch (the latest),
//! and a reason is at most [`MAX_REASON`] bytes.

use std::collections::BTreeMap;

use parking_lot::Mutex;
use serde::Serialize;

use crate::config::ConfigKey;
use crate::config::istio::envoy_filter::ApplyTo;
use crate::push::index::envoy_filter::ResolvedPatch;

/// The longest failure reason kept.
pub const MAX_REASON: usize = 512;

/// A patch: its filter and its position there.
type PatchId = (ConfigKey, usize);

#[derive(Debug)]
struct Entry {
    apply_to: ApplyTo,
    revision: u64,
    applied: bool,
    failure: Option<String>,
}

/// What the patches did in one generation.
#[derive(Debug, Default)]
pub struct Record {
    entries: BTreeMap<PatchId, Entry>,
}

impl Record {
    fn entry(&mut self, p: &ResolvedPatch) -> &mut Entry {
        self.entries.entry((p.filter.clone(), p.index)).or_insert_with(|| Entry {
            apply_to: p.apply_to,
            revision: p.revision(),
            applied: false,
            failure: None,
        })
    }

    /// `p` was read in this generation (skipped unless it applies).
    pub fn considered(&mut self, p: &ResolvedPatch) {
        self.entry(p);
    }

    /// `p` changed an object.
    pub fn applied(&mut self, p: &ResolvedPatch) {
        self.entry(p).applied = true;
    }

    /// `p` was skipped for `object`, for `reason`.
    pub fn failed(&mut self, p: &ResolvedPatch, object: &str, reason: impl std::fmt::Display) {
        let mut text = format!("{} {object}: {reason}", p.apply_to.as_str());
        if text.len() > MAX_REASON {
            let mut end = MAX_REASON;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        self.entry(p).failure = Some(text);
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The patches recorded as applied, as `NAMESPACE/NAME[INDEX]`.
    pub fn applied_labels(&self) -> Vec<String> {
        self.entries.iter().filter(|(_, e)| e.applied).map(|((k, i), _)| label(k, *i)).collect()
    }

    /// The failures recorded, as (`NAMESPACE/NAME[INDEX]`, reason).
    pub fn failures(&self) -> Vec<(String, String)> {
        self.entries.iter().filter_map(|((k, i), e)| Some((label(k, *i), e.failure.clone()?))).collect()
    }
}

fn label(filter: &ConfigKey, index: usize) -> String {
    format!("{}/{}[{index}]", filter.namespace, filter.name)
}

/// The metric's `type` label of a patch kind (istiod's names).
pub fn metric_type(apply_to: ApplyTo) -> &'static str {
    match apply_to {
        ApplyTo::Listener => "listener",
        ApplyTo::ListenerFilter => "listenerfilter",
        ApplyTo::FilterChain => "filterchain",
        ApplyTo::NetworkFilter => "networkfilter",
        ApplyTo::HttpFilter => "httpfilter",
        ApplyTo::RouteConfiguration | ApplyTo::HttpRoute => "route",
        ApplyTo::VirtualHost => "vhost",
        ApplyTo::Cluster => "cluster",
        ApplyTo::ExtensionConfig => "extensionconfig",
        ApplyTo::Bootstrap => "bootstrap",
        ApplyTo::Invalid => "invalid",
    }
}

/// A patch that was skipped somewhere, and why (the latest reason).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// `NAMESPACE/NAME[INDEX]`.
    pub patch: String,
    /// The filter.
    #[serde(skip)]
    pub filter: ConfigKey,
    /// The filter revision it was recorded for.
    #[serde(skip)]
    pub revision: u64,
    /// What was skipped, where, and why.
    pub reason: String,
}

#[derive(Debug, Default)]
struct State {
    /// (`NAMESPACE/NAME`, type, result) → generations.
    counts: BTreeMap<(String, &'static str, &'static str), u64>,
    failures: BTreeMap<PatchId, Failure>,
}

/// The server's record of every generation's patches.
#[derive(Debug, Default)]
pub struct PatchLog {
    state: Mutex<State>,
}

impl PatchLog {
    /// Adds one generation's record: counts it, and keeps (and logs, the
    /// first time) each failure.
    pub fn add(&self, record: Record) {
        if record.is_empty() {
            return;
        }
        let mut state = self.state.lock();
        for ((filter, index), entry) in record.entries {
            let name = format!("{}/{}", filter.namespace, filter.name);
            let result = if entry.applied { "applied" } else { "skipped" };
            *state.counts.entry((name, metric_type(entry.apply_to), result)).or_default() += 1;
            let Some(reason) = entry.failure else { continue };
            let failure =
                Failure { patch: label(&filter, index), filter: filter.clone(), revision: entry.revision, reason };
            let id = (filter, index);
            if state.failures.get(&id) != Some(&failure) {
                tracing::warn!(patch = %failure.patch, reason = %failure.reason, "EnvoyFilter patch skipped");
                state.failures.insert(id, failure);
            }
        }
    }

    /// The counters: (`NAMESPACE/NAME`, type, result, generations).
    pub fn counts(&self) -> Vec<(String, &'static str, &'static str, u64)> {
        self.state.lock().counts.iter().map(|((n, t, r), c)| (n.clone(), *t, *r, *c)).collect()
    }

    /// The failures of patches `current` still holds (by filter and revision).
    pub fn failures(&self, current: impl Fn(&ConfigKey) -> Option<u64>) -> Vec<Failure> {
        let mut state = self.state.lock();
        state.failures.retain(|(filter, _), f| current(filter) == Some(f.revision));
        state.failures.values().cloned().collect()
    }
}
