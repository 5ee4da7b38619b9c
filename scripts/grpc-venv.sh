#!/usr/bin/env bash
# Installs gRPC's Python library (grpcio, which speaks xDS itself: the
# proxyless gRPC tests' real clients and servers) into .tools/grpc-venv,
# pinned, and prints the venv's python. Does nothing (but print) when it is
# there. tests/support/proxyless.rs runs it when the venv is missing.
#
# Safe to run concurrently: a flock serializes installers, and the venv is
# built beside its final place and renamed into it.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.tools/grpc-venv"
want="grpcio==1.85.3"

ready() { [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c 'import grpc; grpc.xds_server_credentials' 2>/dev/null; }

if ready; then
    echo "$venv/bin/python"
    exit 0
fi
mkdir -p "$repo/.tools"
exec 9>"$repo/.tools/grpc-venv.lock"
flock 9
if ready; then
    echo "$venv/bin/python"
    exit 0
fi
work="$(mktemp -d "$repo/.tools/grpc-venv.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "grpc-venv: installing $want into $venv" >&2
python3 -m venv "$work/venv" >&2
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check --only-binary=:all: "$want" >&2
# Only bin/python is used, which does not depend on where the venv lies
# (its pip's script would name the old path).
rm -rf "$venv"
mv "$work/venv" "$venv"
echo "$venv/bin/python"
