# Sourced by chart-check.sh and validate-manifests.sh: makes sure
# .tools/chart-venv holds Helm's renderer (helm-python-sdk, Helm's Go SDK,
# no helm binary) and the Kubernetes schemas (kubernetes-validate), pinned,
# and sets $venv to it.
venv=.tools/chart-venv
want="helm-python-sdk==0.2.2 kubernetes-validate==1.37.0 PyYAML"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import helm_python, kubernetes_validate, yaml' 2>/dev/null; then
    echo "chart-venv: installing $want into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check $want
fi
