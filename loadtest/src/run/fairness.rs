//! The fairness phases: does one namespace's endpoint churn delay the
//! others? First the quiet namespaces' endpoint changes alone (the
//! baseline), then the same changes again while one namespace, the noisy
//! neighbour, receives `--noisy-rate` endpoint changes a second. The
//! quiet namespaces' p99 beside the noisy one is compared with their p99
//! alone (Istio has one global debounce and push queue; one tenant's churn
//! delaying every other is a known complaint there).

use anyhow::bail;

use super::paced::{Made, Pace, Paced};
use super::{Run, SETTLE};
use crate::report::PhaseReport;

/// The quiet namespaces' endpoint changes a second, one namespace after another.
const QUIET_RATE: u32 = 10;

impl Run {
    /// The baseline, then the same quiet changes beside the noisy
    /// namespace's: three phases (quiet alone, quiet beside noisy, noisy).
    pub(super) async fn fairness(&mut self) -> anyhow::Result<Vec<PhaseReport>> {
        let shape = self.shape;
        if shape.namespaces < 3 {
            bail!("the fairness phases need at least 3 namespaces: the shared one, a noisy one and quiet ones");
        }
        // ns-0 is shared (every stream watches it); the noisy neighbour is
        // the last namespace; the quiet ones are those between.
        let noisy = shape.namespaces - 1;
        let quiet_namespaces = u64::from(shape.namespaces - 2);
        let services = u64::from(shape.services_per_namespace);
        let quiet = move || Pace {
            label: "quiet",
            rate: QUIET_RATE,
            pick: Box::new(move |i| (1 + (i % quiet_namespaces) as u32, ((i / quiet_namespaces) % services) as u32)),
        };
        let rate = self.options.noisy_rate.max(1);
        let loud = Pace { label: "noisy", rate, pick: Box::new(move |i| (noisy, (i % services) as u32)) };
        let duration = self.options.churn_duration;
        let seconds = duration.as_secs();

        let mut phases = Vec::new();
        tokio::time::sleep(SETTLE).await;
        let before = self.mark();
        let Paced { made, .. } = self.paced(&[quiet()], duration, "quiet changes made").await?;
        tokio::time::sleep(SETTLE).await;
        let after = self.mark();
        let name = format!("quiet baseline: {QUIET_RATE}/s endpoint changes in quiet namespaces for {seconds}s");
        phases.push(self.fairness_phase(&name, &before, &after, &made[0]));

        tokio::time::sleep(SETTLE).await;
        let before = self.mark();
        let Paced { made, .. } = self.paced(&[quiet(), loud], duration, "quiet and noisy changes made").await?;
        tokio::time::sleep(SETTLE).await;
        let after = self.mark();
        let name = format!("quiet beside noisy: the same, while ns-{noisy} gets {rate}/s");
        phases.push(self.fairness_phase(&name, &before, &after, &made[0]));
        let name = format!("noisy namespace: ns-{noisy}, {rate}/s endpoint changes");
        phases.push(self.fairness_phase(&name, &before, &after, &made[1]));
        Ok(phases)
    }

    fn fairness_phase(&self, name: &str, before: &super::Mark, after: &super::Mark, made: &Made) -> PhaseReport {
        let mut phase = self.changes_phase(name, before, after, &made.changes);
        phase.notes.push(format!(
            "{} changes made ({} skipped: every apply slot taken; {} refused)",
            made.changes.len(),
            made.skipped,
            made.refused
        ));
        eprintln!("loadtest: {}", phase.one_line());
        phase
    }
}
