//! The restart phase: with every stream synced, meshpush is killed
//! (SIGKILL, as a node failure or an OOM kill ends it) and started again
//! on the same config directory and ports. Every simulated Envoy sees its
//! stream end, retries after Envoy's backoff, and opens a new stream that
//! says what it holds (SotW: the version of each type; delta: every
//! resource's version).
//!
//! While the server is down, two things every stream watches change in
//! its config directory: one endpoint of `svc-1` and the route prefix of
//! `svc-0`, both in the shared namespace `ns-0`. A stream is synced again
//! once it has ACKed both; the route configuration is the last type a
//! stream asks for, so by then the new server has taken its whole
//! subscription. Anything else the new server sends is a resend, counted
//! by type: resources whose content the stream held already, and (SotW)
//! responses at the version the stream held.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;

use super::sink::Edit;
use super::{RESTART_LIMIT, Run, SETTLE};
use crate::mesh::PORT;
use crate::report::PhaseReport;
use crate::track::{Change, Expect, XdsType};

/// After the last stream is synced again, how long no response may arrive
/// before the resends are counted (anything the server still sends late
/// is counted too).
const QUIET: Duration = Duration::from_secs(1);

/// The longest the count waits for that quiet.
const QUIET_LIMIT: Duration = Duration::from_secs(15);

impl Run {
    /// Kills the server, changes its config while it is down, starts it
    /// again, and measures until every stream is synced again.
    pub(super) async fn restart(&mut self) -> anyhow::Result<PhaseReport> {
        if self.targets.len() != 1 || self.targets[0].process.is_none() {
            bail!("the restart scenario kills and restarts the meshpush it starts: run it without --target");
        }
        let n = self.next_change();
        let (namespace, service) = (0, 1);
        let (endpoints, address) = self.moved_endpoint(namespace, service);
        let prefix = format!("/loadtest-restart-{n}");
        let files = [endpoints.file(&self.shape), Edit::Route { namespace, prefix: prefix.clone() }.file(&self.shape)];
        let cluster = self.shape.cluster(namespace, service);
        let streams = self.shape.streams() as usize;
        let watchers = self.shared.names.watchers(XdsType::Endpoint, &cluster);
        if watchers != streams {
            bail!("the restart phase needs a shape where every stream watches {cluster} ({watchers} of {streams} do)");
        }

        tokio::time::sleep(SETTLE).await;
        let before = self.mark();
        let resends_before = self.shared.stats.resends();
        let reconnects_before = self.shared.stats.reconnects.load(std::sync::atomic::Ordering::Relaxed);
        self.targets[0].kill()?;
        if let Some(process) = &self.targets[0].process {
            for (file, text) in &files {
                process.write_config(file, text)?;
            }
        }
        let start = Instant::now();
        let endpoint = Arc::new(Change::new(
            "restart: endpoint".into(),
            XdsType::Endpoint,
            cluster,
            &address.to_string(),
            start,
            Expect::Watchers,
            streams,
        ));
        let route = Arc::new(Change::new(
            "restart: route".into(),
            XdsType::Route,
            PORT.to_string(),
            &prefix,
            start,
            Expect::All,
            streams,
        ));
        self.shared.tracker.add(endpoint.clone());
        self.shared.tracker.add(route.clone());
        let restarted = self.targets[0].restart();
        if restarted.is_ok() {
            tokio::join!(endpoint.wait(RESTART_LIMIT), route.wait(RESTART_LIMIT));
        }
        self.shared.tracker.retire(&endpoint);
        self.shared.tracker.retire(&route);
        restarted?;
        self.wait_quiet().await;
        let after = self.mark();

        // Each stream is synced again at the later of its two ACKs.
        let (endpoint, route) = (endpoint.outcome(), route.outcome());
        let endpoint_at: HashMap<u32, Duration> = endpoint.streams.iter().copied().zip(endpoint.latencies).collect();
        let (streams_back, times): (Vec<u32>, Vec<Duration>) = route
            .streams
            .iter()
            .zip(&route.latencies)
            .filter_map(|(stream, routed)| endpoint_at.get(stream).map(|ep| (*stream, (*ep).max(*routed))))
            .unzip();
        let wall = times.iter().max().copied();
        let mut phase =
            self.phase("restart → all synced again", &before, &after, streams, times.clone(), &streams_back);
        phase.wall_s = wall.map_or(phase.wall_s, |d| d.as_secs_f64());
        phase.unexpected = endpoint.unexpected + route.unexpected;
        let resends = self.shared.stats.resends().since(&resends_before);
        phase.resends = Some(resends);
        let reconnects = self.shared.stats.reconnects.load(std::sync::atomic::Ordering::Relaxed) - reconnects_before;
        phase.notes.push(format!(
            "{reconnects} streams opened again; after the restart, by type (cds, eds, lds, rds): resources received \
             {:?}, of them unchanged {:?}; SotW responses at the version held {:?}",
            resends.resources, resends.unchanged, resends.same_version
        ));
        eprintln!("loadtest: {}", phase.one_line());
        Ok(phase)
    }

    /// Waits until no response arrived for [`QUIET`], at most [`QUIET_LIMIT`].
    async fn wait_quiet(&self) {
        let limit = Instant::now() + QUIET_LIMIT;
        let mut seen = self.shared.stats.responses_total();
        let mut quiet_since = Instant::now();
        while Instant::now() < limit && quiet_since.elapsed() < QUIET {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = self.shared.stats.responses_total();
            if now != seen {
                seen = now;
                quiet_since = Instant::now();
            }
        }
    }
}
