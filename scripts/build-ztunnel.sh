#!/usr/bin/env bash
# Builds ztunnel from a checkout of github.com/istio/ztunnel, for the tests
# that run a real ztunnel (tests/e2e/ztunnel.rs; they run when ZTUNNEL_BIN
# names the binary this prints).
#
#   scripts/build-ztunnel.sh ZTUNNEL_CHECKOUT [OUT_DIR]
#
# ztunnel is not in the package registries. Its manifest names one git
# dependency (`boring-rustls-provider`, behind the optional `tls-boring`
# feature), which cannot be fetched without GitHub. The checkout is copied to
# OUT_DIR (default target/ztunnel), that dependency and its feature are
# removed from the copy's Cargo.toml, and ztunnel is built there with the
# `tls-ring` provider (no jemalloc, no aws-lc: nothing to build but Rust and
# ring). The checkout itself is not touched. protoc is needed by ztunnel's
# build script and is installed from Debian's `protobuf-compiler` when
# missing (that needs root and apt-get).
#
# A debug build: it takes some minutes on two cores, and the tests do not
# measure ztunnel's speed. Prints the binary's path last.
set -euo pipefail

src=${1:?usage: scripts/build-ztunnel.sh ZTUNNEL_CHECKOUT [OUT_DIR]}
here=$(cd "$(dirname "$0")/.." && pwd)
out=${2:-$here/target/ztunnel}
[[ -f $src/Cargo.toml && -f $src/proto/workload.proto ]] ||
    { echo "build-ztunnel: $src is not a checkout of istio/ztunnel (no Cargo.toml or proto/workload.proto)" >&2; exit 2; }

if ! command -v protoc >/dev/null; then
    echo "build-ztunnel: installing Debian's protobuf-compiler (protoc)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends protobuf-compiler >/dev/null 2>&1 ||
        { apt-get update >/dev/null && apt-get install -y --no-install-recommends protobuf-compiler >/dev/null; }
    # See scripts/install-iptables.sh: a package's scripts have been seen to
    # leave /dev/null a regular file, which breaks every later cargo run.
    if [[ ! -c /dev/null ]]; then
        echo "build-ztunnel: /dev/null was left a regular file after apt-get; restoring the null device" >&2
        rm -f /dev/null
        mknod -m 666 /dev/null c 1 3
    fi
fi

copy=$out/src
mkdir -p "$copy"
# Copy the sources (not the checkout's own target directory).
tar -C "$src" --exclude=./target --exclude=./.git -cf - . | tar -C "$copy" -xf -

# Drop the git dependency and the feature that enables it. Both are single
# lines in ztunnel's manifest; fail loudly if that ever stops being so.
manifest=$copy/Cargo.toml
grep -q '^boring-rustls-provider *=.*git *=' "$manifest" || grep -q '^tls-boring *=' "$manifest" ||
    echo "build-ztunnel: Cargo.toml has no boring-rustls-provider git dependency; building as it is" >&2
sed -i -e '/^boring-rustls-provider *=.*git *=/d' -e '/^tls-boring *=/d' "$manifest"
if grep -q 'git *= *"' "$manifest"; then
    echo "build-ztunnel: Cargo.toml still names a git dependency:" >&2
    grep -n 'git *= *"' "$manifest" >&2
    exit 1
fi

# The copy is its own workspace, even when OUT_DIR lies inside another one
# (the default does: meshpush's target directory).
grep -q '^\[workspace\]' "$manifest" || printf '\n[workspace]\n' >>"$manifest"

# ztunnel's build script stamps its version from git in the working
# directory: point it at the checkout's history (the copy is "dirty": its
# manifest is edited), never at a repository the copy happens to lie in.
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
    export GIT_DIR
    GIT_DIR=$(cd "$src" && cd "$(git rev-parse --git-dir)" && pwd)
    export GIT_WORK_TREE=$copy
else
    export GIT_CEILING_DIRECTORIES=$out
fi
(cd "$copy" && CARGO_TARGET_DIR=$out/target cargo build \
    --no-default-features --features tls-ring --bin ztunnel >&2)
bin=$out/target/debug/ztunnel
"$bin" version >/dev/null 2>&1 || [[ -x $bin ]] ||
    { echo "build-ztunnel: no binary at $bin" >&2; exit 1; }
echo "$bin"
