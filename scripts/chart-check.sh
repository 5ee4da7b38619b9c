#!/usr/bin/env bash
# Renders and validates the Helm chart (deploy/helm/meshpush): Helm's own
# renderer through the PyPI package helm-python-sdk (no helm binary), and
# every manifest against the Kubernetes schemas (kubernetes-validate).
# Installs both, pinned, into .tools/chart-venv when missing.
#
#   scripts/chart-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.tools/chart-venv
want="helm-python-sdk==0.2.2 kubernetes-validate==1.37.0 PyYAML"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import helm_python, kubernetes_validate, yaml' 2>/dev/null; then
    echo "chart-check: installing $want into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check $want
fi
exec "$venv/bin/python" scripts/chart_check.py
