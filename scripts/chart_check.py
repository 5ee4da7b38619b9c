"""Renders deploy/helm/meshpush with Helm (helm-python-sdk: Helm's Go SDK,
no helm binary) and validates every rendered manifest against the
Kubernetes 1.34 schemas (kubernetes-validate, strict: unknown fields are
errors). Run by scripts/chart-check.sh, which installs both.

Checks, for the default values and for a second set that turns every
option the other way: `helm lint --strict` finds nothing; every manifest
is valid; the objects a release needs are there; the ClusterRole grants
get/list/watch on exactly the kinds meshpush reads, and writes only the
status of the Gateway API kinds it reports on; the Deployment runs
`serve --in-cluster` with the values' flags. A deliberately broken value
must be reported invalid, so the validation itself is known to work.
Exits 1 on any failure, saying what and where.
"""

import copy
import sys
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import yaml

CHART = Path(__file__).resolve().parent.parent / "deploy" / "helm" / "meshpush"
KUBERNETES = "1.34.0"

READ = ["get", "list", "watch"]
ISTIO_KINDS = ["serviceentries", "workloadentries", "virtualservices", "destinationrules",
               "gateways", "sidecars", "workloadgroups", "proxyconfigs"]
SECURITY_KINDS = ["peerauthentications", "authorizationpolicies", "requestauthentications"]
GATEWAY_API_KINDS = ["gatewayclasses", "gateways", "httproutes", "grpcroutes", "tcproutes", "tlsroutes",
                     "referencegrants"]
# The status meshpush writes: the Gateway API's conditions and the Ingresses'
# addresses, nothing else.
STATUS_WRITES = ["get", "patch", "update"]
GATEWAY_API_STATUS = ["gatewayclasses/status", "gateways/status", "httproutes/status", "grpcroutes/status",
                      "tcproutes/status", "tlsroutes/status"]

VARIANTS = {
    "default values": {},
    "every option turned": {
        "replicaCount": 3,
        "autoscaling": {"enabled": False},
        "podDisruptionBudget": {"enabled": False},
        "serviceAccount": {"create": False, "name": "mesh-reader"},
        "discoverySelectors": [
            {"matchLabels": {"istio-discovery": "enabled"}},
            {"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "staging"]}]},
        ],
        "antiAffinity": "hard",
        "extraArgs": ["--max-new-streams-per-second=500"],
        "imagePullSecrets": [{"name": "registry"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "mesh", "effect": "NoSchedule"}],
        "service": {"type": "LoadBalancer", "annotations": {"example.com/internal": "true"}},
    },
}

failures = []
quiet = False


def fail(message):
    failures.append(message)
    if not quiet:
        print(f"chart-check: FAIL {message}", file=sys.stderr)


def render(values):
    """Every rendered object, as (template path, object)."""
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(values, name="meshpush", namespace="istio-system", is_install=True)
    objects = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        for document in yaml.safe_load_all(text):
            if document:
                objects.append((path, document))
    return objects


def validate(variant, objects):
    for path, document in objects:
        what = f"{variant}: {path} {document.get('kind')} {document.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(document, KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as e:
            fail(f"{what}: {e.path}: {e.message}")
        except Exception as e:  # a schema the package lacks, say
            fail(f"{what}: {e}")


def by_kind(objects):
    found = {}
    for _, document in objects:
        found.setdefault(document["kind"], []).append(document)
    return found


def check_objects(variant, values, objects):
    kinds = by_kind(objects)
    wanted = {"Deployment", "Service", "ClusterRole", "ClusterRoleBinding"}
    if values.get("serviceAccount", {}).get("create", True):
        wanted.add("ServiceAccount")
    if values.get("autoscaling", {}).get("enabled", True):
        wanted.add("HorizontalPodAutoscaler")
    if values.get("podDisruptionBudget", {}).get("enabled", True):
        wanted.add("PodDisruptionBudget")
    if set(kinds) != wanted:
        fail(f"{variant}: rendered kinds {sorted(kinds)}, expected {sorted(wanted)}")

    role = kinds.get("ClusterRole", [{}])[0]
    grants = {}
    writes = {}
    for rule in role.get("rules", []):
        resources = rule.get("resources", [])
        if all(r.endswith("/status") for r in resources):
            if sorted(rule.get("verbs", [])) != sorted(STATUS_WRITES):
                fail(f"{variant}: ClusterRole grants {rule.get('verbs')} on {resources} (status: {STATUS_WRITES})")
            for group in rule.get("apiGroups", []):
                writes.setdefault(group, set()).update(resources)
            continue
        if sorted(rule.get("verbs", [])) != sorted(READ):
            fail(f"{variant}: ClusterRole grants {rule.get('verbs')} (read only: {READ})")
        for group in rule.get("apiGroups", []):
            grants.setdefault(group, set()).update(resources)
    # Secrets: the certificates Gateways and DestinationRules name;
    # ConfigMaps: Istio's mesh config (the `istio` ConfigMap).
    core = {"services", "pods", "nodes", "secrets", "namespaces", "configmaps"}
    expected = {"": core, "discovery.k8s.io": {"endpointslices"}, "networking.istio.io": set(ISTIO_KINDS),
                "security.istio.io": set(SECURITY_KINDS), "telemetry.istio.io": {"telemetries"}, "gateway.networking.k8s.io": set(GATEWAY_API_KINDS),
                "networking.k8s.io": {"ingresses", "ingressclasses"}}
    if grants != expected:
        fail(f"{variant}: ClusterRole grants {grants}, expected exactly {expected}")
    status = {"gateway.networking.k8s.io": set(GATEWAY_API_STATUS), "networking.k8s.io": {"ingresses/status"}}
    if writes != status:
        fail(f"{variant}: ClusterRole writes {writes}, expected only the routing APIs' status {status}")

    deployment = kinds.get("Deployment", [{}])[0]
    pod = deployment.get("spec", {}).get("template", {}).get("spec", {})
    container = (pod.get("containers") or [{}])[0]
    args = container.get("args", [])
    if args[:2] != ["serve", "--in-cluster"]:
        fail(f"{variant}: the container runs {args}, expected serve --in-cluster …")
    selectors = [a for a in args if a.startswith("--discovery-selector=")]
    if len(selectors) != len(values.get("discoverySelectors", [])):
        fail(f"{variant}: {len(selectors)} --discovery-selector flags for {values.get('discoverySelectors')}")
    for flag, selector in zip(selectors, values.get("discoverySelectors", [])):
        if yaml.safe_load(flag.split("=", 1)[1]) != selector:
            fail(f"{variant}: {flag} does not say {selector}")
    if container.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/ready":
        fail(f"{variant}: the readiness probe is not GET /ready")
    account = values.get("serviceAccount", {}).get("name") or "meshpush"
    if pod.get("serviceAccountName") != account:
        fail(f"{variant}: the Pod runs as {pod.get('serviceAccountName')}, expected {account}")
    binding = kinds.get("ClusterRoleBinding", [{}])[0]
    if [s.get("name") for s in binding.get("subjects", [])] != [account]:
        fail(f"{variant}: the ClusterRoleBinding binds {binding.get('subjects')}, expected {account}")


def check_validation_catches_a_broken_value():
    global quiet
    values = {"autoscaling": {"enabled": False}, "replicaCount": "two"}
    before = len(failures)
    quiet = True
    validate("broken on purpose", render(values))
    quiet = False
    caught = [f for f in failures[before:] if "spec', 'replicas'" in f]
    del failures[before:]
    if not caught:
        fail("a Deployment with replicas: two passed validation: the validation checks nothing")
    else:
        print("chart-check: a broken value (replicas: two) is reported invalid, as it should be")


def main():
    lint = helm.lint(CHART, strict=True, namespace="istio-system", kube_version=f"v{KUBERNETES}")
    for message in lint.get("messages", []):
        if message.get("severity", 0) >= 2:
            fail(f"helm lint: {message.get('path')}: {message.get('error')}")
    for error in lint.get("errors", []) or []:
        fail(f"helm lint: {error}")
    for variant, values in VARIANTS.items():
        objects = render(copy.deepcopy(values))
        validate(variant, objects)
        check_objects(variant, values, objects)
        print(f"chart-check: {variant}: {len(objects)} manifests rendered and validated against Kubernetes {KUBERNETES}")
    check_validation_catches_a_broken_value()
    if failures:
        print(f"chart-check: {len(failures)} failures", file=sys.stderr)
        return 1
    print("chart-check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
