//! The churn phase: endpoint changes at a fixed rate for a fixed time,
//! each tracked to every stream that watches its cluster, with the p99 of
//! every 10 s window so that a stream falling behind shows.

use super::paced::{Made, Pace, Paced};
use super::{CHURN_STRIDE, MAX_APPLIES_IN_FLIGHT, Run, SETTLE};
use crate::report::PhaseReport;

impl Run {
    /// Endpoint changes at a fixed rate for a fixed time, each tracked to
    /// every stream that watches its cluster.
    pub(super) async fn churn(&mut self) -> anyhow::Result<PhaseReport> {
        let rate = self.options.churn_rate.max(1);
        let duration = self.options.churn_duration;
        let (services, per_namespace) = (u64::from(self.shape.services()), self.shape.services_per_namespace);
        // Every service once before any twice (a stride coprime with the
        // service count), namespaces interleaved: a service changes again
        // only after all the others did.
        let pick = move |i: u64| {
            let pick = (i * CHURN_STRIDE) % services;
            ((pick / u64::from(per_namespace)) as u32, (pick % u64::from(per_namespace)) as u32)
        };
        let pace = Pace { label: "churn", rate, pick: Box::new(pick) };
        tokio::time::sleep(SETTLE).await;
        let before = self.mark();
        let paced = self.paced(std::slice::from_ref(&pace), duration, "endpoint changes made").await?;
        let Paced { made, ended, drained, .. } = paced;
        let Made { changes, skipped, refused } = made.into_iter().next().unwrap_or_else(|| unreachable!("one pace"));
        tokio::time::sleep(SETTLE).await;
        let after = self.mark();
        let name = format!("churn: {rate}/s endpoint changes for {}s", duration.as_secs());
        let mut phase = self.changes_phase(&name, &before, &after, &changes);
        phase.notes.push(format!(
            "{} changes made, {:.0}/s ({skipped} ticks skipped: {MAX_APPLIES_IN_FLIGHT} applies were in flight), {refused} refused; the last change converged {:.2}s after it was made",
            changes.len(),
            changes.len() as f64 / ended.duration_since(before.at).as_secs_f64(),
            drained.as_secs_f64()
        ));
        eprintln!("loadtest: {}", phase.one_line());
        Ok(phase)
    }
}
