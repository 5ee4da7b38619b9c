#!/usr/bin/env bash
# Measures what polling meshpush's admin port costs xDS convergence: runs the
# loadtest's s1 scenario against meshpush, quiet or with 32 pollers of
# /debug/syncz, / and /debug/connections (perf.md, "Reliability limits").
# Needs `cargo build --release --workspace`.
#
#   scripts/admin-load.sh quiet|load [NICE]|clients
#
# load: 32 shell loops, a fork and exec of curl per request. NICE (default 0)
# is their niceness: 19 keeps their own CPU from starving the loadtest and
# the server on a small machine.
# clients: 32 long-lived curl processes, each from its own loopback address
# (so each is its own client for the admin's rate limit) on one kept-alive
# connection, as dashboards poll: the generator itself costs little CPU, so
# what remains is the server's admin work.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:?quiet or load}"
nice="${2:-0}"
xds=127.0.0.1:26010
admin=127.0.0.1:26014
work="$(mktemp -d)"
pollers=()
stop() {
    # Each poller is a process group of its own: its curl dies with it
    # rather than going on to poll the next run's server.
    for p in "${pollers[@]}"; do kill -- "-$p" 2>/dev/null || true; done
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
        setsid nice -n "$nice" bash -c "while true; do curl -s -o /dev/null http://$admin/debug/syncz; \
            curl -s -o /dev/null http://$admin/; curl -s -o /dev/null http://$admin/debug/connections; done" &
        pollers+=("$!")
    done
elif [[ "$mode" == clients ]]; then
    urls=()
    for _ in $(seq 30); do
        for view in /debug/syncz / /debug/connections; do urls+=(-o /dev/null "http://$admin$view"); done
    done
    for i in $(seq 32); do
        setsid bash -c 'while true; do curl -s --interface "$0" -w "%{stderr}%{http_code}\n" "${@}"; done' \
            "127.0.0.$((100 + i))" "${urls[@]}" 2>"$work/answers.$i" &
        pollers+=("$!")
    done
elif [[ "$mode" != quiet ]]; then
    echo "admin-load: unknown mode $mode (quiet, load or clients)" >&2
    exit 2
fi
target/release/loadtest s1 --target "$xds" --server-pid "$server" --no-progress 2>&1 | grep -E '^loadtest: '
if [[ "$mode" == clients ]]; then
    echo "admin-load: the pollers' answers by status: $(cat "$work"/answers.* | sort | uniq -c | xargs)"
fi
