//! What a run found: per-phase latency percentiles, CPU, traffic; the
//! scenario's targets; a summary table, JSON, and an SVG of the
//! convergence distributions.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use hdrhistogram::Histogram;
use plotters::prelude::*;
use serde::Serialize;

use crate::fleet::Protocol;
use crate::mesh::Shape;
use crate::track::Resends;

/// Latencies of one phase.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Sorted ascending.
    sorted: Vec<Duration>,
}

impl Sample {
    /// A sample of these latencies.
    pub fn new(mut latencies: Vec<Duration>) -> Sample {
        latencies.sort_unstable();
        Sample { sorted: latencies }
    }

    /// Percentiles, through an HDR histogram (3 significant digits, µs).
    pub fn summary(&self) -> Summary {
        // 1 µs to 10 minutes.
        let mut histogram = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("valid bounds");
        for latency in &self.sorted {
            histogram.saturating_record(latency.as_micros().max(1) as u64);
        }
        let max_ms = self.sorted.last().map_or(0.0, |d| d.as_secs_f64() * 1e3);
        // The histogram reports a bucket's upper edge: never more than the largest sample.
        let ms = |q: f64| (histogram.value_at_quantile(q) as f64 / 1e3).min(max_ms);
        Summary { count: self.sorted.len(), p50_ms: ms(0.5), p90_ms: ms(0.9), p99_ms: ms(0.99), max_ms }
    }

    /// `(milliseconds, fraction of the sample at or below)` points of the CDF.
    fn cdf(&self, expected: usize) -> Vec<(f64, f64)> {
        let total = expected.max(self.sorted.len()).max(1) as f64;
        let step = (self.sorted.len() / 2000).max(1);
        let mut points: Vec<(f64, f64)> = self
            .sorted
            .iter()
            .enumerate()
            .filter(|(i, _)| i % step == 0 || *i + 1 == self.sorted.len())
            .map(|(i, d)| ((d.as_secs_f64() * 1e3).max(0.01), (i + 1) as f64 / total))
            .collect();
        points.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
        points
    }
}

/// Percentiles of a sample, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Samples.
    pub count: usize,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

/// One phase of a run.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseReport {
    /// What the phase did.
    pub name: String,
    /// Streams that had to converge (sync: all).
    pub expected: usize,
    /// Streams that did.
    pub converged: usize,
    /// Streams that received the change without being expected to.
    pub unexpected: usize,
    /// Percentiles of the convergence (or sync) latencies.
    pub latency: Option<Summary>,
    /// Wall time until the last stream converged, or of the whole phase.
    pub wall_s: f64,
    /// Server CPU during the phase (with 300 ms of quiet after it).
    pub server_cpu_s: Option<f64>,
    /// Server resident memory at the phase's end (after its 300 ms of quiet).
    pub server_rss_mib: Option<f64>,
    /// Harness CPU during the phase.
    pub harness_cpu_s: Option<f64>,
    /// Responses received by all streams.
    pub responses: u64,
    /// Response bytes received by all streams.
    pub bytes: u64,
    /// Changes made.
    pub changes: usize,
    /// Changes that reached every stream expected.
    pub changes_converged: usize,
    /// Churn: percentiles per 10 s window of change start.
    pub windows: Vec<Summary>,
    /// Anything else worth knowing.
    pub notes: Vec<String>,
    /// Restart: what the new server sent, by type.
    pub resends: Option<Resends>,
    /// With several replicas: the latencies of each one's streams, in the
    /// order of the replicas (empty with one).
    pub per_replica: Vec<Option<Summary>>,
    #[serde(skip)]
    sample: Sample,
}

impl PhaseReport {
    /// A phase from its measurements.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: &str,
        expected: usize,
        sample: Sample,
        wall_s: f64,
        server_cpu_s: Option<f64>,
        harness_cpu_s: Option<f64>,
        responses: u64,
        bytes: u64,
    ) -> PhaseReport {
        let summary = sample.summary();
        PhaseReport {
            name: name.into(),
            expected,
            converged: summary.count,
            unexpected: 0,
            wall_s: if summary.count > 0 && summary.count >= expected { summary.max_ms / 1e3 } else { wall_s },
            latency: (summary.count > 0).then_some(summary),
            server_cpu_s,
            server_rss_mib: None,
            harness_cpu_s,
            responses,
            bytes,
            changes: 0,
            changes_converged: 0,
            windows: Vec::new(),
            notes: Vec::new(),
            resends: None,
            per_replica: Vec::new(),
            sample,
        }
    }

    /// Splits the phase's latencies by replica: `streams[i]` is the stream
    /// of `latencies[i]`, `replica_of` the replica serving a stream.
    pub fn split_by_replica(
        &mut self,
        replicas: usize,
        latencies: &[Duration],
        streams: &[u32],
        replica_of: impl Fn(u32) -> usize,
    ) {
        if replicas < 2 {
            return;
        }
        let mut split = vec![Vec::new(); replicas];
        for (latency, stream) in latencies.iter().zip(streams) {
            split[replica_of(*stream).min(replicas - 1)].push(*latency);
        }
        self.per_replica = split
            .into_iter()
            .map(|sample| Some(Sample::new(sample).summary()).filter(|summary| summary.count > 0))
            .collect();
    }

    /// One line for the log.
    pub fn one_line(&self) -> String {
        let mut line = format!("{}: {}/{} streams", self.name, self.converged, self.expected);
        if let Some(l) = &self.latency {
            let _ = write!(line, ", p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms", l.p50_ms, l.p99_ms, l.max_ms);
        }
        if let Some(cpu) = self.server_cpu_s {
            let _ = write!(line, ", server CPU {:.3} s", cpu);
        }
        line
    }
}

/// One target of the issue, checked.
#[derive(Debug, Clone, Serialize)]
pub struct TargetCheck {
    /// The figure.
    pub what: String,
    /// The target.
    pub target: String,
    /// What was measured.
    pub measured: String,
    /// Whether it was met (`None`: not measured).
    pub met: Option<bool>,
}

/// Everything a run found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// The protocol the simulated Envoys spoke (`sotw` or `delta`).
    pub protocol: Protocol,
    /// The command line.
    pub command: String,
    /// Cores, memory, kernel, load at the end.
    pub machine: String,
    /// The server under test.
    pub server: String,
    /// The generated mesh.
    pub shape: Shape,
    /// ADS streams.
    pub streams: u32,
    /// HTTP/2 connections they were spread over.
    pub connections: u32,
    /// Streams per connection.
    pub streams_per_connection: u32,
    /// Distinct EDS name lists the streams watched (about one per scope).
    pub eds_lists: usize,
    /// Distinct RDS name lists.
    pub rds_lists: usize,
    /// Server resident memory once the mesh was loaded, before any stream.
    pub server_rss_loaded_mib: Option<f64>,
    /// Server resident memory once every stream had synced (after the
    /// storm's 300 ms of quiet): the loaded mesh plus what the idle,
    /// synced connections and streams hold.
    pub server_rss_synced_mib: Option<f64>,
    /// Server peak resident memory (VmHWM) at the end.
    pub server_peak_rss_mib: Option<f64>,
    /// Server CPU since it started.
    pub server_cpu_total_s: Option<f64>,
    /// Harness CPU for the whole run (user + system).
    pub harness_cpu_total_s: Option<f64>,
    /// Harness peak resident memory.
    pub harness_peak_rss_mib: Option<f64>,
    /// Requests the streams sent (subscriptions and ACKs).
    pub requests_sent: u64,
    /// Size of the encoded node.
    pub node_bytes: usize,
    /// Which requests carried it.
    pub node_sending: crate::fleet::NodeSending,
    /// How the changes were made.
    pub changes_via: crate::registry::ChangesVia,
    /// Whether the node left Envoy's extension list out (`--lean-node`).
    pub lean_node: bool,
    /// Notes (file-descriptor limit…).
    pub notes: Vec<String>,
    /// With several replicas: each one, in the order of `--target`.
    pub replicas: Vec<ReplicaReport>,
    /// The scenario's targets.
    pub targets: Vec<TargetCheck>,
    /// Phases in order.
    pub phases: Vec<PhaseReport>,
    /// Why the run failed its own checks (empty: it passed).
    pub failures: Vec<String>,
}

/// One replica of several under test.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicaReport {
    /// Its ADS address.
    pub address: String,
    /// Streams connected to it.
    pub streams: u32,
    /// Its CPU since it started (with `--server-pid`).
    pub cpu_total_s: Option<f64>,
    /// Its peak resident memory (with `--server-pid`).
    pub peak_rss_mib: Option<f64>,
}

/// Bytes to MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The machine, for the report: cores, memory, kernel, load average.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().next().map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_string()))
        .and_then(|kib| kib.parse::<f64>().ok())
        .map_or(String::from("?"), |kib| format!("{:.0} GiB", kib / 1024.0 / 1024.0));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    format!("{cores} cores, {memory}, Linux {}, load average {}", kernel.trim(), load.join(" "))
}

impl Report {
    /// What each synced stream adds to the server's resident memory: (synced
    /// − loaded) ÷ streams, in KiB. With one stream per connection, the
    /// memory per connected proxy.
    pub fn synced_kib_per_stream(&self) -> Option<f64> {
        let grown = self.server_rss_synced_mib? - self.server_rss_loaded_mib?;
        (self.streams > 0).then(|| grown * 1024.0 / f64::from(self.streams))
    }

    /// The summary table printed at the end of a run.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\nscenario {}: {} streams over {} connections ({} per connection)",
            self.scenario, self.streams, self.connections, self.streams_per_connection
        );
        let _ = writeln!(
            out,
            "mesh: {} namespaces, {} services, {} endpoints{}; {} distinct EDS lists, {} RDS lists",
            self.shape.namespaces,
            self.shape.services(),
            self.shape.endpoints(),
            if self.shape.scoped { ", Sidecar-scoped" } else { "" },
            self.eds_lists,
            self.rds_lists
        );
        let _ = writeln!(out, "protocol: {} ({})", self.protocol.name(), self.protocol.method());
        let _ = writeln!(
            out,
            "changes: {}",
            match self.changes_via {
                crate::registry::ChangesVia::Registry => "through the registry API",
                crate::registry::ChangesVia::File => "as edits of the config directory's files (written in place)",
            }
        );
        let _ = writeln!(
            out,
            "node: {} bytes on {}{}",
            self.node_bytes,
            match self.node_sending {
                crate::fleet::NodeSending::FirstRequest => {
                    "the first request of each stream (set_node_on_first_message_only, as Istio bootstraps Envoy)"
                }
                crate::fleet::NodeSending::EveryRequest => "every request (--node-every-request)",
            },
            if self.lean_node {
                " (--lean-node: Envoy's extension list left out, unlike Envoy 1.40)"
            } else {
                " (Envoy 1.40's, extension list included)"
            }
        );
        let _ = writeln!(out, "server: {}", self.server);
        let _ = writeln!(out, "machine: {}", self.machine);
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        out.push('\n');
        let header = [
            "phase",
            "streams",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "max ms",
            "wall s",
            "server CPU s",
            "server RSS MiB",
            "harness CPU s",
            "responses",
            "MiB",
        ];
        let mut rows = vec![header.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
        let opt = |v: Option<f64>, p: usize| v.map_or("n/a".to_string(), |v| format!("{v:.p$}"));
        for phase in &self.phases {
            let l = phase.latency.as_ref();
            rows.push(vec![
                phase.name.clone(),
                format!("{}/{}", phase.converged, phase.expected),
                opt(l.map(|l| l.p50_ms), 1),
                opt(l.map(|l| l.p90_ms), 1),
                opt(l.map(|l| l.p99_ms), 1),
                opt(l.map(|l| l.max_ms), 1),
                format!("{:.2}", phase.wall_s),
                opt(phase.server_cpu_s, 2),
                opt(phase.server_rss_mib, 0),
                opt(phase.harness_cpu_s, 2),
                phase.responses.to_string(),
                format!("{:.1}", mib(phase.bytes)),
            ]);
        }
        out.push_str(&render(&rows));
        for phase in &self.phases {
            for note in &phase.notes {
                let _ = writeln!(out, "{}: {note}", phase.name);
            }
            if phase.unexpected > 0 {
                let _ = writeln!(
                    out,
                    "{}: {} streams not expected to see the change received it",
                    phase.name, phase.unexpected
                );
            }
            if !phase.windows.is_empty() {
                let p99s: Vec<String> = phase.windows.iter().map(|w| format!("{:.0}", w.p99_ms)).collect();
                let _ = writeln!(out, "{}: p99 per 10 s window (ms): {}", phase.name, p99s.join(" "));
            }
        }
        if !self.replicas.is_empty() {
            out.push_str("\nper replica (p99 ms of its streams per phase):\n");
            let mut header = vec!["replica".to_string(), "streams".into(), "CPU s".into(), "peak MiB".into()];
            header.extend(self.phases.iter().map(|p| p.name.clone()));
            let mut rows = vec![header];
            for (i, replica) in self.replicas.iter().enumerate() {
                let mut row = vec![
                    replica.address.clone(),
                    replica.streams.to_string(),
                    opt(replica.cpu_total_s, 2),
                    opt(replica.peak_rss_mib, 0),
                ];
                for phase in &self.phases {
                    let p99 = phase.per_replica.get(i).cloned().flatten().map(|l| l.p99_ms);
                    let count = phase.per_replica.get(i).cloned().flatten().map_or(0, |l| l.count);
                    row.push(format!("{} ({count})", opt(p99, 1)));
                }
                rows.push(row);
            }
            out.push_str(&render(&rows));
        }
        let _ = writeln!(
            out,
            "\nserver: RSS loaded {} MiB, synced {} MiB ({} KiB a stream over loaded), peak {} MiB, CPU total {} s; \
             harness: CPU total {} s, peak RSS {} MiB; {} requests sent",
            opt(self.server_rss_loaded_mib, 0),
            opt(self.server_rss_synced_mib, 0),
            opt(self.synced_kib_per_stream(), 1),
            opt(self.server_peak_rss_mib, 0),
            opt(self.server_cpu_total_s, 2),
            opt(self.harness_cpu_total_s, 2),
            opt(self.harness_peak_rss_mib, 0),
            self.requests_sent
        );
        if !self.targets.is_empty() {
            let mut rows = vec![vec!["target".to_string(), "wanted".into(), "measured".into(), "".into()]];
            for t in &self.targets {
                let verdict = match t.met {
                    Some(true) => "met",
                    Some(false) => "MISSED",
                    None => "not measured",
                };
                rows.push(vec![t.what.clone(), t.target.clone(), t.measured.clone(), verdict.into()]);
            }
            out.push('\n');
            out.push_str(&render(&rows));
        }
        if self.failures.is_empty() {
            out.push_str("\nall streams synced and every change converged\n");
        } else {
            out.push_str("\nFAILED:\n");
            for failure in &self.failures {
                let _ = writeln!(out, "  {failure}");
            }
        }
        out
    }

    /// Writes the report as JSON.
    pub fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }

    /// Draws the convergence distribution of every phase (a CDF on a log
    /// time axis) as SVG.
    pub fn write_plot(&self, path: &Path) -> anyhow::Result<()> {
        let series: Vec<(&str, Vec<(f64, f64)>)> = self
            .phases
            .iter()
            .map(|p| (p.name.as_str(), p.sample.cdf(p.expected)))
            .filter(|(_, c)| !c.is_empty())
            .collect();
        let max_ms = series.iter().flat_map(|(_, c)| c.iter().map(|p| p.0)).fold(1.0f64, f64::max) * 1.2;
        let min_ms = series.iter().flat_map(|(_, c)| c.iter().map(|p| p.0)).fold(max_ms, f64::min).max(0.01) / 1.2;
        let root = SVGBackend::new(path, (960, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
        let title = format!(
            "meshpush loadtest {}: {} streams, convergence after each phase starts",
            self.scenario, self.streams
        );
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(56)
            .build_cartesian_2d((min_ms..max_ms).log_scale(), 0.0f64..1.0f64)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .configure_mesh()
            .x_desc("milliseconds from the start of the phase (log scale)")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_desc("fraction of expected streams converged")
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let colors = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
        for (i, (name, points)) in series.into_iter().enumerate() {
            let color = colors[i % colors.len()];
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(())
    }
}

/// Renders rows as an aligned text table (first row is the header).
fn render(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(
                |(c, cell)| {
                    if c == 0 { format!("{cell:<w$}", w = widths[c]) } else { format!("{cell:>w$}", w = widths[c]) }
                },
            )
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
        if i == 0 {
            let _ = writeln!(out, "{}", widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  "));
        }
    }
    out
}
