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

# Where a package's scripts leave /dev/null a regular file (seen after a
# clean run on the development machine; every later `rustc -` probe of
# cargo then reads it as its input), restore the null device and say so.
if [[ ! -c /dev/null ]]; then
    echo "install-iptables: /dev/null was left a regular file after apt-get; restoring the null device" >&2
    rm -f /dev/null
    mknod -m 666 /dev/null c 1 3
fi
command -v iptables-restore
