#!/usr/bin/env bash
# Measures what polling meshpush's admin port costs xDS convergence: runs the
# loadtest's s1 scenario against meshpush, quiet or with 32 shell loops
# polling /debug/syncz, / and /debug/connections (perf.md, "Reliability
# limits"). Needs `cargo build --release --workspace`.
#
#   scripts/admin-load.sh quiet|load [NICE]
#
# NICE (default 0) is the pollers' niceness: 19 keeps their own CPU (a fork
# and exec per request) from starving the loadtest and the server on a small
# machine, so that what remains is the server's admin work.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:?quiet or load}"
nice="${2:-0}"
xds=127.0.0.1:26010
admin=127.0.0.1:26014
work="$(mktemp -d)"
pollers=()
stop() {
    for p in "${pollers[@]}"; do kill "$p" 2>/dev/null || true; done
    [[ -n "${server:-}" ]] && kill -- "-$server" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap stop EXIT
mkdir "$work/config"
setsid target/release/meshpush serve --config "$work/config" --xds-addr "$xds" --admin-addr "$admin" \
    --log-level warn >"$work/meshpush.log" 2>&1 &
server=$!
for _ in $(seq 50); do curl -sf "http://$admin/ready" >/dev/null && break; sleep 0.2; done
if [[ "$mode" == load ]]; then
    for _ in $(seq 32); do
        nice -n "$nice" bash -c "while true; do curl -s -o /dev/null http://$admin/debug/syncz; \
            curl -s -o /dev/null http://$admin/; curl -s -o /dev/null http://$admin/debug/connections; done" &
        pollers+=("$!")
    done
fi
target/release/loadtest s1 --target "$xds" --server-pid "$server" --no-progress 2>&1 | grep -E '^loadtest: '
