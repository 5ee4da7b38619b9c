"""Renders deploy/helm/meshpush with Helm (helm-python-sdk: Helm's Go SDK,
no helm binary) and validates every rendered manifest against the
Kubernetes 1.34 schemas (kubernetes-validate, strict: unknown fields are
errors). Run by scripts/chart-check.sh, which installs both.

Checks, for the default values, a second set that turns every option the
other way, and a named revision: `helm lint --strict` finds nothing; every
manifest is valid; the objects a release needs are there; the ClusterRole
grants get/list/watch on exactly the kinds meshpush reads, and writes only
the status of the Gateway API kinds it reports on, the mesh root's
ConfigMaps, the webhook configurations and TokenReviews (a Role: creating
the root's Secret); the Deployment runs `serve --in-cluster` with the
values' flags, the CA and the webhooks; the Service has the secure and
webhook ports; the webhooks select pods and objects exactly as Istio's
chart does; the mesh config points proxies at the secure port, and
meshNetworks is the values'. With
CHART_CHECK_OUT set, the rendered mesh config, meshNetworks and injector settings of
each variant are written there for meshpush itself to read
(tests/deploy.rs). A deliberately broken value must be reported invalid,
so the validation itself is known to work. Exits 1 on any failure, saying
what and where.
"""

import copy
import os
import sys
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import yaml

CHART = Path(__file__).resolve().parent.parent / "deploy" / "helm" / "meshpush"
KUBERNETES = "1.34.0"

READ = ["get", "list", "watch"]
ISTIO_KINDS = ["serviceentries", "workloadentries", "virtualservices", "destinationrules",
               "gateways", "sidecars", "workloadgroups", "proxyconfigs", "envoyfilters"]
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
        "meshConfig": {"accessLogFile": "/dev/stdout", "defaultConfig": {"holdApplicationUntilProxyStarts": True}},
        "meshNetworks": {"net-east": {"endpoints": [{"fromRegistry": "Kubernetes"}], "gateways": [
            {"registryServiceName": "istio-eastwestgateway.istio-system.svc.cluster.local", "port": 15443}]}},
        "webhooks": {"enableNamespacesByDefault": True, "configValidation": False},
        "sidecarInjector": {"policy": "disabled", "nativeSidecars": True,
                            "neverInjectSelector": [{"matchLabels": {"batch": "true"}}]},
    },
    "revision canary": {"revision": "canary"},
    "ambient mode": {"ambient": {"enabled": True}},
    "a remote cluster": {"remote": True},
}

# Istio's injection webhooks: name → (namespaceSelector, objectSelector),
# each a list of (key, operator, values); R is the revision.
NOT_FALSE = ("sidecar.istio.io/inject", "NotIn", ["false"])
INJECTION_WEBHOOKS = {
    "rev.namespace.sidecar-injector.istio.io": (
        [("istio.io/rev", "In", ["R"]), ("istio-injection", "DoesNotExist", None)], [NOT_FALSE]),
    "rev.object.sidecar-injector.istio.io": (
        [("istio.io/rev", "DoesNotExist", None), ("istio-injection", "DoesNotExist", None)],
        [NOT_FALSE, ("istio.io/rev", "In", ["R"])]),
    "namespace.sidecar-injector.istio.io": ([("istio-injection", "In", ["enabled"])], [NOT_FALSE]),
    "object.sidecar-injector.istio.io": (
        [("istio-injection", "DoesNotExist", None), ("istio.io/rev", "DoesNotExist", None)],
        [("sidecar.istio.io/inject", "In", ["true"]), ("istio.io/rev", "DoesNotExist", None)]),
    "auto.sidecar-injector.istio.io": (
        [("istio-injection", "DoesNotExist", None), ("istio.io/rev", "DoesNotExist", None),
         ("kubernetes.io/metadata.name", "NotIn", ["kube-system", "kube-public", "kube-node-lease", "local-path-storage"])],
        [("sidecar.istio.io/inject", "DoesNotExist", None), ("istio.io/rev", "DoesNotExist", None)]),
}
# The writes meshpush makes, beyond the routing APIs' status: group → {resource: verbs}.
WRITES = {
    "": {"configmaps": ["get", "list", "watch", "create", "update"]},
    "admissionregistration.k8s.io": {"mutatingwebhookconfigurations": ["get", "list", "watch", "update"],
                                     "validatingwebhookconfigurations": ["get", "list", "watch", "update"]},
    "authentication.k8s.io": {"tokenreviews": ["create"]},
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


def expressions(selector):
    return [(e["key"], e["operator"], e.get("values")) for e in (selector or {}).get("matchExpressions", [])]


def check_webhooks(variant, values, kinds):
    revision = values.get("revision") or "default"
    named = bool(values.get("revision"))
    mutating = kinds.get("MutatingWebhookConfiguration", [{}])[0]
    if mutating.get("metadata", {}).get("labels", {}).get("istio.io/rev") != revision:
        fail(f"{variant}: the MutatingWebhookConfiguration is not labelled istio.io/rev={revision}")
    wanted = ["rev.namespace.sidecar-injector.istio.io", "rev.object.sidecar-injector.istio.io"]
    if not named:
        wanted += ["namespace.sidecar-injector.istio.io", "object.sidecar-injector.istio.io"]
        if values.get("webhooks", {}).get("enableNamespacesByDefault"):
            wanted.append("auto.sidecar-injector.istio.io")
    hooks = mutating.get("webhooks", [])
    if [h.get("name") for h in hooks] != wanted:
        fail(f"{variant}: injection webhooks {[h.get('name') for h in hooks]}, expected {wanted}")
    for hook in hooks:
        namespaces, objects = INJECTION_WEBHOOKS.get(hook.get("name"), ([], []))
        fill = lambda rules: [(k, o, [revision if v == "R" else v for v in vs] if vs else vs) for k, o, vs in rules]
        if expressions(hook.get("namespaceSelector")) != fill(namespaces):
            fail(f"{variant}: {hook.get('name')} namespaceSelector {hook.get('namespaceSelector')}")
        if expressions(hook.get("objectSelector")) != fill(objects):
            fail(f"{variant}: {hook.get('name')} objectSelector {hook.get('objectSelector')}")
        service = hook.get("clientConfig", {}).get("service", {})
        if (service.get("name"), service.get("path"), service.get("port")) != ("meshpush", "/inject", 443):
            fail(f"{variant}: {hook.get('name')} calls {service}, expected meshpush:443/inject")
        if hook.get("failurePolicy") != "Fail" or hook.get("sideEffects") != "None":
            fail(f"{variant}: {hook.get('name')} failurePolicy/sideEffects {hook.get('failurePolicy')}/{hook.get('sideEffects')}")
        if hook.get("rules") != [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]:
            fail(f"{variant}: {hook.get('name')} rules {hook.get('rules')}")
    validating = kinds.get("ValidatingWebhookConfiguration")
    if not values.get("webhooks", {}).get("configValidation", True):
        return
    hook = (validating or [{}])[0].get("webhooks", [{}])[0]
    expected_name = "rev.validation.istio.io" if named else "validation.istio.io"
    if hook.get("name") != expected_name:
        fail(f"{variant}: validation webhook {hook.get('name')}, expected {expected_name}")
    selector = expressions(hook.get("objectSelector"))
    if selector != ([("istio.io/rev", "In", [values["revision"]])] if named else []):
        fail(f"{variant}: validation objectSelector {selector}")
    groups = hook.get("rules", [{}])[0].get("apiGroups", [])
    if sorted(groups) != sorted(["security.istio.io", "networking.istio.io", "telemetry.istio.io",
                                 "extensions.istio.io", "gateway.networking.k8s.io"]):
        fail(f"{variant}: validation groups {groups}")
    if hook.get("failurePolicy") != "Ignore":
        fail(f"{variant}: a fresh install's validation failurePolicy is {hook.get('failurePolicy')}, expected Ignore")
    if hook.get("clientConfig", {}).get("service", {}).get("path") != "/validate":
        fail(f"{variant}: validation calls {hook.get('clientConfig')}")


def check_remote(variant, kinds):
    """A remote cluster's install is its reader alone, read-only on the registry."""
    wanted = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Secret"}
    if set(kinds) != wanted:
        fail(f"{variant}: rendered kinds {sorted(kinds)}, expected {sorted(wanted)}")
        return
    verbs = {v for rule in kinds["ClusterRole"][0]["rules"] for v in rule["verbs"]}
    if verbs != {"get", "list", "watch"}:
        fail(f"{variant}: the reader may {sorted(verbs)}, not only read")
    resources = {r for rule in kinds["ClusterRole"][0]["rules"] for r in rule["resources"]}
    if resources != {"services", "pods", "nodes", "namespaces", "endpointslices"}:
        fail(f"{variant}: the reader reads {sorted(resources)}")
    token = kinds["Secret"][0]
    if token.get("type") != "kubernetes.io/service-account-token" or \
            token["metadata"]["annotations"].get("kubernetes.io/service-account.name") != "meshpush-reader":
        fail(f"{variant}: the reader's token Secret is {token}")


def check_objects(variant, values, objects):
    kinds = by_kind(objects)
    if values.get("remote"):
        check_remote(variant, kinds)
        return
    wanted = {"Deployment", "Service", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap",
              "MutatingWebhookConfiguration"}
    if values.get("webhooks", {}).get("configValidation", True):
        wanted.add("ValidatingWebhookConfiguration")
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
        extra = [WRITES.get(g, {}).get(r) for g in rule.get("apiGroups", []) for r in resources]
        if extra and all(v is not None for v in extra):
            for verbs in extra:
                if sorted(rule.get("verbs", [])) != sorted(verbs):
                    fail(f"{variant}: ClusterRole grants {rule.get('verbs')} on {resources}, expected {verbs}")
            continue
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
    core = {"services", "pods", "nodes", "secrets", "namespaces"}
    expected = {"": core, "discovery.k8s.io": {"endpointslices"}, "networking.istio.io": set(ISTIO_KINDS),
                "security.istio.io": set(SECURITY_KINDS), "telemetry.istio.io": {"telemetries"}, "gateway.networking.k8s.io": set(GATEWAY_API_KINDS),
                "networking.k8s.io": {"ingresses", "ingressclasses"}}
    if grants != expected:
        fail(f"{variant}: ClusterRole grants {grants}, expected exactly {expected}")
    status = {"gateway.networking.k8s.io": set(GATEWAY_API_STATUS), "networking.k8s.io": {"ingresses/status"}}
    if writes != status:
        fail(f"{variant}: ClusterRole writes {writes}, expected only the routing APIs' status {status}")

    role = kinds.get("Role", [{}])[0]
    if role.get("rules") != [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}]:
        fail(f"{variant}: the Role grants {role.get('rules')}, expected only creating the root's Secret")

    service = kinds.get("Service", [{}])[0]
    ports = {(p.get("port"), p.get("targetPort")) for p in service.get("spec", {}).get("ports", [])}
    for port in [(15012, "grpc-tls-xds"), (443, "https-webhooks")]:
        if port not in ports:
            fail(f"{variant}: the Service has no port {port}: {ports}")

    check_webhooks(variant, values, kinds)
    revision = values.get("revision")
    config_maps = {c["metadata"]["name"]: c for c in kinds.get("ConfigMap", [])}
    mesh_name = f"istio-{revision}" if revision else "istio"
    injector_name = f"meshpush-injector-{revision}" if revision else "meshpush-injector"
    if set(config_maps) != {mesh_name, injector_name}:
        fail(f"{variant}: ConfigMaps {sorted(config_maps)}, expected {mesh_name} and {injector_name}")
    mesh = yaml.safe_load(config_maps.get(mesh_name, {}).get("data", {}).get("mesh", "{}"))
    if mesh.get("defaultConfig", {}).get("discoveryAddress") != "meshpush.istio-system.svc:15012":
        fail(f"{variant}: the mesh config's discoveryAddress is {mesh.get('defaultConfig')}")
    networks = yaml.safe_load(config_maps.get(mesh_name, {}).get("data", {}).get("meshNetworks", "{}"))
    if networks != {"networks": values.get("meshNetworks", {})}:
        fail(f"{variant}: meshNetworks is {networks} in the ConfigMap, expected the values' {values.get('meshNetworks')}")
    for key, value in values.get("meshConfig", {}).items():
        if key != "defaultConfig" and mesh.get(key) != value:
            fail(f"{variant}: meshConfig.{key} is {mesh.get(key)} in the ConfigMap, expected {value}")
    if os.environ.get("CHART_CHECK_OUT"):
        out = os.path.join(os.environ["CHART_CHECK_OUT"], variant.replace(" ", "-"))
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "mesh"), "w") as f:
            f.write(config_maps.get(mesh_name, {}).get("data", {}).get("mesh", ""))
        with open(os.path.join(out, "meshNetworks"), "w") as f:
            f.write(config_maps.get(mesh_name, {}).get("data", {}).get("meshNetworks", ""))
        with open(os.path.join(out, "injector.yaml"), "w") as f:
            f.write(config_maps.get(injector_name, {}).get("data", {}).get("config.yaml", ""))

    deployment = kinds.get("Deployment", [{}])[0]
    pod = deployment.get("spec", {}).get("template", {}).get("spec", {})
    container = (pod.get("containers") or [{}])[0]
    args = container.get("args", [])
    if args[:2] != ["serve", "--in-cluster"]:
        fail(f"{variant}: the container runs {args}, expected serve --in-cluster …")
    for flag in ["--ca-dir=/etc/cacerts", "--ca-secret=istio-system/istio-ca-secret", "--secure-xds-addr=0.0.0.0:15012",
                 "--webhook-addr=0.0.0.0:15017", "--injector-config=/etc/meshpush/injector/config.yaml",
                 "--server-san=meshpush.istio-system.svc", f"--mesh-configmap=istio-system/{mesh_name}"]:
        if flag not in args:
            fail(f"{variant}: the container's flags lack {flag}: {args}")
    account = pod.get("serviceAccountName", "default")
    if f"--service-account={account}" not in args:
        fail(f"{variant}: the container's flags lack --service-account={account} (its Pod's service account)")
    if revision and f"--revision={revision}" not in args:
        fail(f"{variant}: the container's flags lack --revision={revision}")
    ambient = values.get("ambient", {}).get("enabled", False)
    for flag in ["--enable-ambient", "--ca-trusted-node-accounts=istio-system/ztunnel"]:
        if (flag in args) != ambient:
            fail(f"{variant}: {flag} is {'missing' if ambient else 'set'} with ambient.enabled={ambient}: {args}")
    selectors = [a for a in args if a.startswith("--discovery-selector=")]
    if len(selectors) != len(values.get("discoverySelectors", [])):
        fail(f"{variant}: {len(selectors)} --discovery-selector flags for {values.get('discoverySelectors')}")
    for flag, selector in zip(selectors, values.get("discoverySelectors", [])):
        if yaml.safe_load(flag.split("=", 1)[1]) != selector:
            fail(f"{variant}: {flag} does not say {selector}")
    annotations = deployment.get("spec", {}).get("template", {}).get("metadata", {}).get("annotations", {})
    if len(annotations.get("checksum/injector", "")) != 64:
        fail(f"{variant}: the pod template has no checksum of the injector's settings (a change would not roll it)")
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
