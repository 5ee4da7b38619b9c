//! `PushTrigger`: what a push request changed, summarised in Istio's terms
//! for the metrics and the push history before the engine consumes it.

use crate::config::{ConfigKey, ConfigKind};
use crate::metrics::PushReading;

use super::PushRequest;

/// What triggered a push, summarised before the request is consumed.
#[derive(Debug, Clone, Default)]
pub struct PushTrigger {
    /// Distinct reasons (`config`, `service`, `endpoint`), sorted.
    pub reasons: Vec<&'static str>,
    /// Changed objects per inbound-update type.
    pub updates: Vec<(&'static str, u64)>,
    /// Change sets merged into the request.
    pub merged: u32,
    /// Changed keys.
    pub keys: usize,
    /// A few of the changed keys, for the push status.
    pub sample: Vec<String>,
}

impl PushTrigger {
    /// Keys shown in the push status at most.
    const SAMPLE: usize = 8;

    /// Summarises `request`.
    pub fn of(request: &PushRequest) -> PushTrigger {
        let mut reasons: Vec<&'static str> = request.keys.iter().map(|k| trigger_reason(k.kind)).collect();
        reasons.sort_unstable();
        reasons.dedup();
        let mut updates: Vec<(&'static str, u64)> = Vec::new();
        for key in &request.keys {
            let kind = update_type(key, request.store.get(key).is_none());
            match updates.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, n)) => *n += 1,
                None => updates.push((kind, 1)),
            }
        }
        PushTrigger {
            reasons,
            updates,
            merged: request.merged,
            keys: request.keys.len(),
            sample: request.keys.iter().take(Self::SAMPLE).map(ConfigKey::to_string).collect(),
        }
    }
}

/// Istio's push reason for a changed kind.
fn trigger_reason(kind: ConfigKind) -> &'static str {
    match kind {
        k if k.is_endpoint_kind() => "endpoint",
        ConfigKind::Service | ConfigKind::ServiceEntry => "service",
        _ => "config",
    }
}

/// Istio's `pilot_inbound_updates` type for a changed key.
fn update_type(key: &ConfigKey, deleted: bool) -> &'static str {
    match key.kind {
        k if k.is_endpoint_kind() => "eds",
        ConfigKind::Service | ConfigKind::ServiceEntry if deleted => "svcdelete",
        ConfigKind::Service | ConfigKind::ServiceEntry => "svc",
        _ => "config",
    }
}

impl PushTrigger {
    /// The changed keys in a few words: `VirtualService default/reviews`,
    /// or `3 changes: Pod default/a, Pod default/b, Service default/c`, at
    /// most [`Self::SAMPLE`] named.
    pub fn summary(&self) -> String {
        match self.keys {
            0 => "no change".to_string(),
            1 => self.sample.first().cloned().unwrap_or_default(),
            n => {
                let more = if n > self.sample.len() { ", …" } else { "" };
                format!("{n} changes: {}{more}", self.sample.join(", "))
            }
        }
    }

    /// What the metrics record of this push, built in `build`.
    pub fn reading(&self, build: std::time::Duration) -> PushReading<'_> {
        PushReading { build, merged: self.merged, reasons: &self.reasons, updates: &self.updates }
    }
}
