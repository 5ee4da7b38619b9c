#!/usr/bin/env bash
# Installs Debian's iptables package (iptables, ip6tables, their -save and
# -restore) when iptables-restore is missing, for the traffic capture tests
# (tests/e2e/capture.rs runs this). Needs root and apt-get, as those tests
# do (they make network namespaces). Prints the path of iptables-restore.
#
# Safe to run concurrently: a flock serializes installers.
set -euo pipefail

if command -v iptables-restore >/dev/null; then
    command -v iptables-restore
    exit 0
fi
exec 9>/tmp/meshpush-install-iptables.lock
flock 9
if ! command -v iptables-restore >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends iptables >/dev/null 2>&1 ||
        { apt-get update >/dev/null && apt-get install -y --no-install-recommends iptables >/dev/null; }
fi
command -v iptables-restore
