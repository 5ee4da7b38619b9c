#!/usr/bin/env bash
# Renders and validates the Helm chart (deploy/helm/meshpush): Helm's own
# renderer through the PyPI package helm-python-sdk (no helm binary), and
# every manifest against the Kubernetes schemas (kubernetes-validate).
# Installs both, pinned, into .tools/chart-venv when missing.
#
#   scripts/chart-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/chart-venv.sh
exec "$venv/bin/python" scripts/chart_check.py
