//! What large ADS requests cost a running server: opens `--streams`
//! streams at once, each on its own connection, each sending one EDS
//! request that names `--names` clusters (1,000,000 names is a 54 MB
//! request), waits for every answer (a response, or the refusal), and
//! prints the server's resident memory (from `/proc/PID/status`) before,
//! at its peak and after the streams closed, once it has settled.
//!
//! ```text
//! target/release/meshpush serve --config examples/bookinfo &
//! cargo run --release --example big_requests -- --pid $! --names 1000000 --streams 6
//! ```

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use tokio_stream::wrappers::ReceiverStream;

const EDS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

/// `VmRSS` and `VmHWM` of `pid`, in MiB.
fn memory(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned().unwrap_or_else(|| default.into())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let pid: u32 = arg(&args, "--pid", "0").parse().expect("--pid PID of the server");
    let names: usize = arg(&args, "--names", "1000000").parse().expect("--names N");
    let streams: usize = arg(&args, "--streams", "1").parse().expect("--streams N");
    let xds = arg(&args, "--xds-addr", "127.0.0.1:15010");
    let (rss_before, _) = memory(pid);
    let request = DiscoveryRequest {
        node: Some(Node {
            id: "sidecar~127.0.0.11~productpage-v1.default~default.svc.cluster.local".into(),
            ..Default::default()
        }),
        type_url: EDS.into(),
        resource_names: (0..names).map(|i| format!("outbound|9080||svc-{i:07}.ns-0.svc.cluster.local")).collect(),
        ..Default::default()
    };
    let bytes = prost::Message::encoded_len(&request);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..streams {
        let (request, xds) = (request.clone(), xds.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{xds}"))
                .await
                .expect("connecting")
                .max_encoding_message_size(usize::MAX)
                .max_decoding_message_size(usize::MAX);
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            tx.send(request).await.unwrap();
            let outcome = match client.stream_aggregated_resources(ReceiverStream::new(rx)).await {
                Err(status) => format!("refused: {:?} {}", status.code(), status.message()),
                Ok(response) => match response.into_inner().message().await {
                    Ok(Some(r)) => format!("answered: {} resources", r.resources.len()),
                    Ok(None) => "ended".into(),
                    Err(status) => format!("ended: {:?} {}", status.code(), status.message()),
                },
            };
            drop(tx);
            outcome
        }));
    }
    let mut peak = 0.0_f64;
    while !tasks.iter().all(|t| t.is_finished()) {
        peak = peak.max(memory(pid).0);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let answered = started.elapsed();
    for task in tasks {
        println!("{}", task.await.unwrap());
    }
    // Settle: the streams are closed; give the allocator its purge delay and more.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (rss_after, hwm) = memory(pid);
    println!(
        "{streams} stream(s) × {bytes} bytes ({names} names): answered in {:.2} s; server RSS {rss_before:.0} MiB before, \
         {:.0} MiB peak (sampled; VmHWM {hwm:.0} MiB), {rss_after:.0} MiB 5 s after",
        answered.as_secs_f64(),
        peak.max(rss_before)
    );
}
