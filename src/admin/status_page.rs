//! `GET /`: a status page a person can read — connected proxies and their
//! sync state, push rate and latency over the last minutes, the convergence
//! histogram, the latest validation errors.
//!
//! Server-rendered HTML with inline SVG charts, no scripts needed to draw
//! and no front-end build step; it reloads itself every few seconds. Every
//! piece of text that comes from outside (node ids, clusters, file names,
//! validation messages) goes through [`escape`].

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::response::Html;

use super::AdminState;
use super::debug::{VERSION, sorted_connections, sync_state};
use crate::metrics::HistogramSnapshot;
use crate::push::history::PushRecord;
use crate::resource::TypeUrl;
use crate::xds::stream::status::SyncState;

/// Seconds between reloads.
const REFRESH_SECONDS: u32 = 5;
/// The push chart covers this much time…
const WINDOW: Duration = Duration::from_secs(600);
/// …in buckets this wide.
const BUCKET: Duration = Duration::from_secs(30);
/// Validation problems listed at most.
const MAX_PROBLEMS: usize = 50;

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `GET /`.
pub async fn page(State(state): State<AdminState>) -> Html<String> {
    Html(render(&state))
}

const STYLE: &str = "
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em 2em; color: #1d2330; background: #f7f8fa; }
h1 { font-size: 1.5em; margin: 0 0 .2em; } h2 { font-size: 1.1em; margin: 1.6em 0 .5em; }
.summary span { margin-right: 1.5em; } .muted { color: #6b7280; }
table { border-collapse: collapse; background: #fff; } th, td { padding: .3em .8em; border-bottom: 1px solid #e5e7eb; text-align: left; }
th { background: #eef0f4; font-weight: 600; } td.mono { font-family: ui-monospace, monospace; font-size: 12.5px; }
.state { font-weight: 600; font-size: 12px; padding: .1em .45em; border-radius: 3px; }
.SYNCED { background: #d9f2e0; color: #17663a; } .STALE { background: #fff1c7; color: #7a5600; }
.ERROR { background: #fbd9d9; color: #9b1c1c; } .NOT_SENT { background: #eceef2; color: #4b5563; }
.charts { display: flex; flex-wrap: wrap; gap: 1.5em; } figure { margin: 0; background: #fff; padding: .6em; border: 1px solid #e5e7eb; }
figcaption { font-weight: 600; margin-bottom: .3em; } svg.chart text { font-size: 11px; fill: #4b5563; }
svg.chart .bar { fill: #3b6fd8; } svg.chart .conv { fill: #2f9e63; } svg.chart .line { fill: none; stroke: #d9572b; stroke-width: 2; }
svg.chart .dot { fill: #d9572b; } svg.chart .axis { stroke: #9ca3af; stroke-width: 1; }
ul.problems { background: #fff; border: 1px solid #e5e7eb; padding: .6em 1.6em; } ul.problems li { font-family: ui-monospace, monospace; font-size: 12.5px; }
.error { color: #9b1c1c; } .warning { color: #7a5600; }
";

/// The whole page.
pub fn render(state: &AdminState) -> String {
    let engine = &state.engine;
    let ctx = engine.snapshot();
    let conns = sorted_connections(state);
    let history = engine.history().since(WINDOW);
    let convergence = engine.metrics().convergence.snapshot();
    let problems = state.problems();

    let mut html = String::with_capacity(16 * 1024);
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <title>meshpush status</title><style>{STYLE}</style></head><body>\n\
         <h1>meshpush {version}</h1>\n<p class=\"summary\">\
         <span>connected proxies: <b id=\"proxy-count\">{proxies}</b></span>\
         <span><b>{services}</b> services</span>\
         <span>snapshot version <b>{snapshot}</b></span>\
         <span>{pushes} pushes in the last {minutes} minutes</span>\
         <span class=\"muted\">refreshes every {REFRESH_SECONDS} s</span></p>\n",
        version = escape(VERSION),
        proxies = conns.len(),
        services = ctx.services.len(),
        snapshot = ctx.version,
        pushes = history.len(),
        minutes = WINDOW.as_secs() / 60,
    );

    html.push_str("<h2>Proxies</h2>\n");
    if conns.is_empty() {
        html.push_str("<p class=\"muted\" id=\"no-proxies\">No proxy is connected.</p>\n");
    } else {
        html.push_str(
            "<table id=\"proxies\"><thead><tr><th>NAME</th><th>CLUSTER</th><th>CDS</th><th>LDS</th>\
             <th>EDS</th><th>RDS</th><th>CONNECTED</th></tr></thead><tbody>\n",
        );
        for c in &conns {
            let _ = write!(
                html,
                "<tr class=\"proxy\"><td class=\"mono\">{}</td><td>{}</td>",
                escape(&crate::text::shown(&c.proxy.id)),
                escape(&crate::text::shown(&c.proxy.cluster))
            );
            for t in [TypeUrl::Cluster, TypeUrl::Listener, TypeUrl::Endpoint, TypeUrl::Route] {
                let s = sync_state(state, c, t);
                let class = if s == SyncState::NotSent { "NOT_SENT" } else { s.as_str() };
                let _ = write!(html, "<td><span class=\"state {class}\">{}</span></td>", s.as_str());
            }
            let _ = writeln!(html, "<td>{}</td></tr>", age(c.connected.elapsed()));
        }
        html.push_str("</tbody></table>\n");
    }

    html.push_str("<h2>Pushes</h2>\n<div class=\"charts\">\n");
    html.push_str(&push_charts(&history, SystemTime::now()));
    html.push_str(&convergence_chart(&convergence));
    html.push_str("</div>\n");

    html.push_str("<h2>Validation problems</h2>\n");
    if problems.is_empty() {
        html.push_str("<p class=\"muted\" id=\"no-problems\">None: every object was accepted.</p>\n");
    } else {
        let _ = writeln!(html, "<ul class=\"problems\" id=\"problems\">");
        for p in problems.iter().take(MAX_PROBLEMS) {
            let class = if p.is_error() { "error" } else { "warning" };
            let _ = writeln!(html, "<li class=\"{class}\">{}: {}</li>", p.severity, escape(&p.to_string()));
        }
        if problems.len() > MAX_PROBLEMS {
            let _ = writeln!(html, "<li>… and {} more (see /debug/configz)</li>", problems.len() - MAX_PROBLEMS);
        }
        html.push_str("</ul>\n");
    }
    let skipped = super::debug::skipped_patches(state);
    if !skipped.is_empty() {
        html.push_str("<h2>EnvoyFilter patches skipped</h2>\n<ul class=\"problems\" id=\"skipped-patches\">\n");
        for f in skipped.iter().take(MAX_PROBLEMS) {
            let _ = writeln!(html, "<li class=\"warning\">{}: {}</li>", escape(&f.patch), escape(&f.reason));
        }
        if skipped.len() > MAX_PROBLEMS {
            let _ = writeln!(html, "<li>… and {} more (see /debug/configz)</li>", skipped.len() - MAX_PROBLEMS);
        }
        html.push_str("</ul>\n");
    }
    html.push_str(
        "<p class=\"muted\">JSON: <a href=\"/debug/syncz\">syncz</a> · <a href=\"/debug/connections\">connections</a> · \
         <a href=\"/debug/push_status\">push_status</a> · <a href=\"/debug/scopes\">scopes</a> · \
         <a href=\"/debug/configz\">configz</a> · <a href=\"/metrics\">metrics</a></p>\n",
    );
    // Marks, for a browser test or a curious person, how many charts the
    // browser actually laid out with a size.
    html.push_str(
        "<script>document.documentElement.dataset.chartsDrawn = String(Array.from(\
         document.querySelectorAll('svg.chart')).filter(s => s.getBBox().width > 0).length);</script>\n",
    );
    html.push_str("</body></html>\n");
    html
}

fn age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        _ => format!("{}h{}m", s / 3600, (s % 3600) / 60),
    }
}

const W: f64 = 520.0;
const H: f64 = 170.0;
const LEFT: f64 = 44.0;
const BOTTOM: f64 = 24.0;
const TOP: f64 = 10.0;

/// A "nice" ceiling for an axis.
fn nice_max(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * magnitude).find(|m| *m >= v).unwrap_or(10.0 * magnitude)
}

fn svg_open(id: &str, caption: &str) -> String {
    format!(
        "<figure><figcaption>{}</figcaption><svg class=\"chart\" id=\"{id}\" width=\"{W}\" height=\"{H}\" \
         viewBox=\"0 0 {W} {H}\" role=\"img\" xmlns=\"http://www.w3.org/2000/svg\">\
         <line class=\"axis\" x1=\"{LEFT}\" y1=\"{y0}\" x2=\"{W}\" y2=\"{y0}\"/>\
         <line class=\"axis\" x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{y0}\"/>",
        escape(caption),
        y0 = H - BOTTOM
    )
}

/// Push rate (bars, pushes per bucket) and latency (line, slowest push of
/// each bucket) over [`WINDOW`].
fn push_charts(history: &[PushRecord], now: SystemTime) -> String {
    let n = (WINDOW.as_secs() / BUCKET.as_secs()) as usize;
    let mut counts = vec![0u32; n];
    let mut slowest = vec![None::<f64>; n];
    for r in history {
        let ago = now.duration_since(r.at).unwrap_or_default();
        let back = (ago.as_secs() / BUCKET.as_secs()) as usize;
        if back < n {
            let i = n - 1 - back;
            counts[i] += 1;
            slowest[i] = Some(slowest[i].map_or(r.duration_ms, |s: f64| s.max(r.duration_ms)));
        }
    }
    let plot_w = W - LEFT - 6.0;
    let plot_h = H - BOTTOM - TOP;
    let slot = plot_w / n as f64;

    let max_count = nice_max(f64::from(counts.iter().copied().max().unwrap_or(0)));
    let mut rate =
        svg_open("push-rate-chart", &format!("Pushes per {} s, last {} min", BUCKET.as_secs(), WINDOW.as_secs() / 60));
    for (i, c) in counts.iter().enumerate() {
        let h = f64::from(*c) / max_count * plot_h;
        let x = LEFT + i as f64 * slot + 1.0;
        let _ = write!(
            rate,
            "<rect class=\"bar\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\"><title>{c} pushes</title></rect>",
            H - BOTTOM - h,
            slot - 2.0
        );
    }
    axis_labels(&mut rate, &format!("{max_count}"), "pushes");
    rate.push_str("</svg></figure>\n");

    let max_ms = nice_max(slowest.iter().flatten().copied().fold(0.0, f64::max));
    let mut latency = svg_open("push-latency-chart", "Slowest push per bucket (build + fan-out), ms");
    let points: Vec<(f64, f64, f64)> = slowest
        .iter()
        .enumerate()
        .filter_map(|(i, ms)| ms.map(|ms| (LEFT + (i as f64 + 0.5) * slot, H - BOTTOM - ms / max_ms * plot_h, ms)))
        .collect();
    if points.len() > 1 {
        let path: Vec<String> = points.iter().map(|(x, y, _)| format!("{x:.1},{y:.1}")).collect();
        let _ = write!(latency, "<polyline class=\"line\" points=\"{}\"/>", path.join(" "));
    }
    for (x, y, ms) in &points {
        let _ = write!(
            latency,
            "<circle class=\"dot\" cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3\"><title>{ms:.2} ms</title></circle>"
        );
    }
    axis_labels(&mut latency, &format!("{max_ms} ms"), "ms");
    latency.push_str("</svg></figure>\n");
    rate + &latency
}

fn axis_labels(svg: &mut String, top: &str, _unit: &str) {
    let _ = write!(
        svg,
        "<text x=\"{x}\" y=\"{y}\" text-anchor=\"end\">{}</text><text x=\"{x}\" y=\"{y0}\" text-anchor=\"end\">0</text>\
         <text x=\"{LEFT}\" y=\"{H}\" dy=\"-6\">-{} min</text><text x=\"{W}\" y=\"{H}\" dy=\"-6\" text-anchor=\"end\">now</text>",
        escape(top),
        WINDOW.as_secs() / 60,
        x = LEFT - 4.0,
        y = TOP + 8.0,
        y0 = H - BOTTOM,
    );
}

/// The convergence-time histogram: one bar per bucket.
fn convergence_chart(h: &HistogramSnapshot) -> String {
    let plot_w = W - LEFT - 6.0;
    let plot_h = H - BOTTOM - TOP;
    let slot = plot_w / h.buckets.len().max(1) as f64;
    let max = nice_max(h.buckets.iter().map(|(_, n)| *n).max().unwrap_or(0) as f64);
    let caption = if h.count == 0 {
        "Convergence time (change → ACK): no observation yet".to_string()
    } else {
        format!("Convergence time (change → ACK): {} observed, mean {:.0} ms", h.count, h.sum / h.count as f64 * 1e3)
    };
    let mut svg = svg_open("convergence-chart", &caption);
    let mut lower = 0.0;
    for (i, (upper, n)) in h.buckets.iter().enumerate() {
        let bar = *n as f64 / max * plot_h;
        let x = LEFT + i as f64 * slot + 2.0;
        let label = if upper.is_infinite() { format!(">{lower}s") } else { format!("≤{upper}s") };
        let _ = write!(
            svg,
            "<rect class=\"bar conv\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bar:.1}\"><title>{label}: {n}</title></rect>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>",
            H - BOTTOM - bar,
            slot - 4.0,
            x + (slot - 4.0) / 2.0,
            H - 8.0,
        );
        lower = *upper;
    }
    let _ = write!(
        svg,
        "<text x=\"{x}\" y=\"{y}\" text-anchor=\"end\">{max}</text><text x=\"{x}\" y=\"{y0}\" text-anchor=\"end\">0</text>",
        x = LEFT - 4.0,
        y = TOP + 8.0,
        y0 = H - BOTTOM,
    );
    svg.push_str("</svg></figure>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::PushEngine;
    use crate::xds::AdsService;

    #[test]
    fn escape_neutralises_markup() {
        assert_eq!(escape("<b a=\"x\">&'"), "&lt;b a=&quot;x&quot;&gt;&amp;&#39;");
    }

    #[test]
    fn empty_server_renders_every_section() {
        let state = AdminState::new(AdsService::new(PushEngine::new()));
        let html = render(&state);
        for id in ["no-proxies", "push-rate-chart", "push-latency-chart", "convergence-chart", "no-problems"] {
            assert!(html.contains(&format!("id=\"{id}\"")), "{id} missing");
        }
        assert!(html.contains("http-equiv=\"refresh\""));
    }

    #[test]
    fn nice_axis_maxima() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(3.0), 5.0);
        assert_eq!(nice_max(12.0), 20.0);
        assert_eq!(nice_max(0.7), 1.0);
    }
}
