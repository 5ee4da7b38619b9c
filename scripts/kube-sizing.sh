#!/usr/bin/env bash
# What meshpush takes to read the loadtest's s2 mesh (10,000 Services,
# 10,000 EndpointSlices of 10 endpoints, 100 namespaces) from the
# Kubernetes source, next to the file source (perf.md, "The Kubernetes
# source at s2 size"): seconds from start to /ready, resident memory 3 s
# later (and its peak), CPU. Needs `cargo build --release --workspace` and
# `cargo build --release --examples`.
#
#   scripts/kube-sizing.sh file|kube|kube2|kube-pods|kube2-pods|file-pods
#
# MESHPUSH=path runs another meshpush binary (to compare two builds,
# interleaved). LOADTEST=s2 then runs the loadtest's s2 scenario against
# the server so fed (its 10,000 simulated sidecars, its changes applied
# through the registry API), and prints its report.
#
# kube-pods adds a realistic Pod for each of the 100,000 endpoints to the
# stand-in API server (examples/kube_standin.rs); file-pods reads the same
# Pods from YAML files. kube2 and kube2-pods spread the mesh over two
# stand-ins (two clusters: the second named by a remote secret in the
# first, its registry objects about half the namespaces').
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:?file, kube, kube2, kube-pods, kube2-pods or file-pods}"
work="$(mktemp -d)"
admin=127.0.0.1:27014
pids=()
stop() {
    for p in "${pids[@]}"; do kill -- "-$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap stop EXIT
target/release/loadtest s2 --write-mesh "$work/mesh" >/dev/null 2>&1
pods=()
[[ "$mode" == *-pods ]] && pods=(--pods)
[[ "$mode" == file-pods ]] && pods+=(--write-pods "$work/mesh")
[[ "$mode" == kube2* ]] && pods+=(--two-clusters)
if [[ "$mode" == kube* || "$mode" == file-pods ]]; then
    setsid target/release/examples/kube_standin --mesh "$work/mesh" "${pods[@]}" \
        --kubeconfig "$work/kubeconfig" >"$work/standin.log" 2>&1 &
    pids+=("$!")
    for _ in $(seq 1200); do grep -q serving "$work/standin.log" && break; sleep 0.5; done
    grep -q serving "$work/standin.log" || { echo "kube-sizing: the stand-in did not start" >&2; exit 1; }
fi
if [[ "$mode" == kube* ]]; then source=(--kubeconfig "$work/kubeconfig"); else source=(--config "$work/mesh"); fi
start=$(date +%s.%N)
setsid "${MESHPUSH:-target/release/meshpush}" serve "${source[@]}" --max-config-file-bytes 64MiB \
    --xds-addr 127.0.0.1:27010 --admin-addr "$admin" --log-level warn >"$work/meshpush.log" 2>&1 &
server=$!
pids+=("$server")
until curl -sf "http://$admin/ready" >/dev/null; do
    kill -0 "$server" 2>/dev/null || { echo "kube-sizing: meshpush exited" >&2; tail -5 "$work/meshpush.log" >&2; exit 1; }
    sleep 0.05
done
end=$(date +%s.%N)
# Memory once the work that follows readiness (the reference checks) is done.
sleep 3
status=/proc/$server/status
printf 'kube-sizing %s: ready after %.2f s; RSS %.0f MiB (peak %.0f MiB); CPU %.2f s; %s\n' "$mode" \
    "$(echo "$end - $start" | bc)" "$(awk '/VmRSS/ {print $2/1024}' "$status")" \
    "$(awk '/VmHWM/ {print $2/1024}' "$status")" "$(awk '{print ($14 + $15) / 100}' "/proc/$server/stat")" \
    "$(curl -s "http://$admin/metrics" | grep -E '^pilot_services ' || true)"
if [[ -n "${LOADTEST:-}" ]]; then
    target/release/loadtest "$LOADTEST" --target 127.0.0.1:27010 --no-load --server-pid "$server" --no-progress \
        --json "$work/report.json" >"$work/loadtest.log" 2>&1 || { tail -20 "$work/loadtest.log" >&2; exit 1; }
    cat "$work/loadtest.log"
fi
