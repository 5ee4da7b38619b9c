#!/usr/bin/env bash
# One command to see meshpush work: meshpush serving examples/bookinfo, a
# small HTTP server for each bookinfo pod (it answers with the pod's name),
# and productpage's sidecar Envoy (INTERCEPTION_MODE NONE: its outbound
# listener binds 127.0.0.1:9080). Prints what to try, then runs until
# Ctrl-C, when it stops everything it started.
#
#   scripts/demo.sh
#
# Uses the ports of the README's examples: ADS 127.0.0.1:15010, meshpush's
# admin 127.0.0.1:15014, Envoy's admin 127.0.0.1:15000, the mesh port 9080
# on 127.0.0.1 and on the pods' 127.0.0.11-16. Builds meshpush (release)
# and installs Envoy into .envoy/ when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

work="$(mktemp -d)"
groups=()
stop() {
    trap - EXIT INT TERM
    for group in "${groups[@]}"; do
        kill -- "-$group" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap stop EXIT
trap 'echo; echo "demo: stopping"; exit 0' INT TERM

in_use() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
for addr in 127.0.0.1:15010 127.0.0.1:15014 127.0.0.1:15000 127.0.0.1:9080 127.0.0.14:9080; do
    if in_use "${addr%:*}" "${addr#*:}"; then
        echo "demo: $addr is in use (another meshpush or Envoy?); stop it first" >&2
        exit 1
    fi
done

cargo build --release --bin meshpush
envoy="$(scripts/install-envoy.sh)"
meshpush=target/release/meshpush

# Every process starts in a session of its own, so its whole group is killed at the end.
setsid "$meshpush" serve --config examples/bookinfo --xds-addr 127.0.0.1:15010 \
    --admin-addr 127.0.0.1:15014 >"$work/meshpush.log" 2>&1 &
groups+=("$!")

setsid python3 - >"$work/pods.log" 2>&1 <<'PODS' &
import http.server
import threading

PODS = {
    "productpage-v1": "127.0.0.11", "details-v1": "127.0.0.12", "reviews-v1": "127.0.0.13",
    "reviews-v2": "127.0.0.14", "reviews-v3": "127.0.0.15", "ratings-v1": "127.0.0.16",
}

def handler(name):
    class Pod(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = f"{name} answered {self.command} {self.path} (Host: {self.headers.get('Host')})\n".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    return Pod

servers = [http.server.ThreadingHTTPServer((ip, 9080), handler(name)) for name, ip in PODS.items()]
for server in servers[1:]:
    threading.Thread(target=server.serve_forever, daemon=True).start()
servers[0].serve_forever()
PODS
groups+=("$!")

"$meshpush" bootstrap \
    --node-id 'sidecar~127.0.0.20~productpage-v1.default~default.svc.cluster.local' \
    --label app=productpage --label version=v1 --interception NONE \
    --xds-addr 127.0.0.1:15010 --admin-port 15000 >"$work/productpage.yaml"
setsid "$envoy" -c "$work/productpage.yaml" --base-id 1 >"$work/envoy.log" 2>&1 &
groups+=("$!")

# Ready once Envoy routes a request to a pod.
for _ in $(seq 300); do
    if curl -sf -H 'Host: ratings' http://127.0.0.1:9080/ >/dev/null 2>&1; then
        ready=1
        break
    fi
    sleep 0.1
done
if [[ -z "${ready:-}" ]]; then
    echo "demo: Envoy did not route within 30 s; the logs:" >&2
    tail -n 20 "$work/meshpush.log" "$work/envoy.log" "$work/pods.log" >&2
    exit 1
fi

cat <<TRY

meshpush, six bookinfo pods and productpage's sidecar Envoy are running.
Try, in another terminal:

  curl -H 'Host: reviews' -H 'end-user: jason' http://127.0.0.1:9080/   # reviews-v2 (the jason rule)
  curl -H 'Host: reviews' http://127.0.0.1:9080/                        # reviews-v1 or reviews-v3, 50/50
  curl -H 'Host: ratings' http://127.0.0.1:9080/                        # ratings-v1
  $meshpush proxy-status                                   # the Envoy, SYNCED per type
  $meshpush proxy-config routes productpage-v1.default
  open http://127.0.0.1:15014/ in a browser                              # the status page

Edit examples/bookinfo/virtual-services.yaml and the routes change live.
Logs: $work/{meshpush,envoy,pods}.log. Ctrl-C stops everything.
TRY

wait
