"""Validates every object of the files named on the command line (each
document, a List's items) against the Kubernetes 1.34 schemas, strictly (an unknown field is an error).
Prints one line per invalid document (file, document index, kind/name,
what is wrong), then `validate-manifests: N documents, ok` or exits 1.
Run by scripts/validate-manifests.sh, which installs kubernetes-validate."""

import sys

import kubernetes_validate
import yaml

KUBERNETES = "1.34.0"


def objects(doc):
    """The objects a document holds: a List's items, and OpenShift's
    DeploymentConfig (no Kubernetes schema) as the PodTemplate it holds."""
    if doc.get("apiVersion") == "v1" and doc.get("kind") == "List":
        for item in doc.get("items") or []:
            yield from objects(item)
    elif doc.get("apiVersion") in ("apps.openshift.io/v1", "v1") and doc.get("kind") == "DeploymentConfig":
        template = (doc.get("spec") or {}).get("template") or {}
        yield {"apiVersion": "v1", "kind": "PodTemplate", "metadata": doc.get("metadata"), "template": template}
    else:
        yield doc


failures = 0
count = 0
for path in sys.argv[1:]:
    with open(path) as f:
        documents = list(yaml.safe_load_all(f))
    for index, doc in ((i, o) for i, d in enumerate(documents) if d is not None for o in objects(d)):
        count += 1
        name = f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"
        try:
            kubernetes_validate.validate(doc, KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as e:
            failures += 1
            where = ".".join(str(p) for p in e.path)
            print(f"{path}: document {index + 1} ({name}): {where}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            failures += 1
            print(f"{path}: document {index + 1} ({name}): no schema: {e}")
if failures:
    print(f"validate-manifests: {failures} of {count} documents invalid")
    sys.exit(1)
print(f"validate-manifests: {count} documents, ok")
