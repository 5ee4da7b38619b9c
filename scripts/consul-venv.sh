#!/usr/bin/env bash
# Installs a real Consul client (py-consul, from PyPI; it imports as
# `consul`) into .tools/consul-venv, pinned, and prints the venv's python.
# Does nothing (but print) when it is there. tests/protocol/consul.rs runs
# it when the venv is missing, to check the stand-in Consul server with it.
#
# Safe to run concurrently: a flock serializes installers, and the venv is
# built beside its final place and renamed into it.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.tools/consul-venv"
want="py-consul==1.8.0"

ready() { [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c 'import consul; consul.Consul' 2>/dev/null; }

if ready; then
    echo "$venv/bin/python"
    exit 0
fi
mkdir -p "$repo/.tools"
exec 9>"$repo/.tools/consul-venv.lock"
flock 9
if ready; then
    echo "$venv/bin/python"
    exit 0
fi
work="$(mktemp -d "$repo/.tools/consul-venv.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "consul-venv: installing $want into $venv" >&2
python3 -m venv "$work/venv" >&2
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check --only-binary=:all: "$want" >&2
# Only bin/python is used, which does not depend on where the venv lies
# (its pip's script would name the old path).
rm -rf "$venv"
mv "$work/venv" "$venv"
echo "$venv/bin/python"
