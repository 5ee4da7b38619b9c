#!/usr/bin/env bash
# Validates every document of the given YAML files against the Kubernetes
# 1.34 schemas (kubernetes-validate, strict: an unknown field is an error).
# Installs it into .tools/chart-venv when missing. Exits 1 naming each
# invalid document and field.
#
#   scripts/validate-manifests.sh FILE...
set -euo pipefail
files=("$@")
for i in "${!files[@]}"; do files[$i]=$(realpath "${files[$i]}"); done
cd "$(dirname "$0")/.."
source scripts/chart-venv.sh
exec "$venv/bin/python" scripts/validate_manifests.py "${files[@]}"
