#!/usr/bin/env bash
# Installs headless Chromium from Debian's packages (package `chromium`) when it
# is missing, and prints the path of the binary. The status page's browser test
# (tests/e2e/operate.rs, through tests/support/browser.rs) runs this; a developer can too. Needs root (CI and the
# development machines run as root) and a reachable Debian mirror.
#
# Safe to run concurrently: a flock serializes installers.
set -euo pipefail

find_chromium() {
    command -v chromium || command -v chromium-browser || true
}

bin="$(find_chromium)"
if [[ -n "$bin" ]]; then
    echo "$bin"
    exit 0
fi

exec 9>/tmp/meshpush-install-chromium.lock
flock 9
bin="$(find_chromium)"
if [[ -z "$bin" ]]; then
    export DEBIAN_FRONTEND=noninteractive
    echo "install-chromium: apt-get install chromium" >&2
    # A fresh machine has no package lists yet: update once and try again.
    if ! apt-get install -y chromium >&2; then
        apt-get update >&2
        apt-get install -y chromium >&2
    fi
    bin="$(find_chromium)"
fi

# Where a package's scripts leave /dev/null a regular file (seen after a
# clean run on the development machine; every later `rustc -` probe of
# cargo then reads it as its input), restore the null device and say so.
if [[ ! -c /dev/null ]]; then
    echo "install-chromium: /dev/null was left a regular file after apt-get; restoring the null device" >&2
    rm -f /dev/null
    mknod -m 666 /dev/null c 1 3
fi
if [[ -z "$bin" ]]; then
    echo "install-chromium: chromium is still not on PATH after installing it" >&2
    exit 1
fi
echo "$bin"
