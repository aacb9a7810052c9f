#!/usr/bin/env python3
"""The Python half of exporter/tests/helm.rs: the real Helm engine (PyPI helm-python-sdk, the
Helm Go library) and strict Kubernetes schema validation (PyPI kubernetes-validate, and the
Prometheus Operator's CRD schemas in ../crd-schemas). It prints JSON on stdout for the Rust
test to judge and decides nothing itself; it never skips: a missing package exits 3 with how
to install it (scripts/test.sh does).

  kube_tools.py versions                      the pinned packages' versions
  kube_tools.py lint CHART                    values (JSON or null) on stdin -> helm lint --strict's report
  kube_tools.py render CHART NAME NAMESPACE   values (JSON) on stdin -> {template: manifest}
  kube_tools.py validate                      objects (JSON list) on stdin -> a list of errors
"""
import json
import os
import sys

try:
    import helm_python
    import jsonschema
    import kubernetes_validate
    import kubernetes_validate.utils as kv_utils
    import referencing
except ImportError as e:  # never a skip: the test fails with this message
    print(
        f"{e}: the Helm and schema tests need PyPI helm-python-sdk and kubernetes-validate "
        "(bash scripts/test.sh installs the pinned versions)",
        file=sys.stderr,
    )
    sys.exit(3)

KUBERNETES_VERSION = "1.37.0"
CRD_SCHEMAS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crd-schemas")
DEFINITIONS_ID = "https://kubernetes.io/api/_definitions.json"
OBJECT_META = DEFINITIONS_ID + "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def strict(node):
    """A CRD's OpenAPI v3 schema as a JSON schema that refuses unknown fields, as the API server
    does with strict field validation (kubectl apply --validate=strict): an object with
    `properties` takes no other field unless it says x-kubernetes-preserve-unknown-fields."""
    if isinstance(node, list):
        return [strict(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if out.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def crd_schema(obj):
    group, _, version = obj["apiVersion"].rpartition("/")
    path = os.path.join(CRD_SCHEMAS, group, f"{obj['kind'].lower()}_{version}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        schema = strict(json.load(f))
    # metadata: the Kubernetes ObjectMeta, strictly (a CRD's schema leaves it open).
    schema["properties"]["metadata"] = {"$ref": OBJECT_META}
    return schema


def definitions():
    strict_dir = f"kubernetes-json-schema/v{KUBERNETES_VERSION}-local-strict/_definitions.json"
    return kv_utils.schema_contents(strict_dir, KUBERNETES_VERSION)


def validate(objects):
    errors = []
    registry = referencing.Resource.from_contents(definitions()) @ referencing.Registry()
    for obj in objects:
        meta = obj.get("metadata") or {}
        what = f"{obj.get('kind')}/{meta.get('namespace', '')}/{meta.get('name')}"
        if "." in obj.get("apiVersion", "").split("/")[0] and "k8s.io" not in obj["apiVersion"]:
            schema = crd_schema(obj)
            if schema is None:
                errors.append({"object": what, "error": f"no schema for {obj['apiVersion']}"})
                continue
            validator = jsonschema.Draft202012Validator(schema, registry=registry)
            for e in validator.iter_errors(obj):
                path = "/".join(str(p) for p in e.absolute_path)
                errors.append({"object": what, "error": f"{path}: {e.message}"})
            continue
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = "/".join(str(p) for p in e.path)
            errors.append({"object": what, "error": f"{path}: {e.message}"})
        except kubernetes_validate.SchemaNotFoundError as e:
            errors.append({"object": what, "error": e.message})
    return errors


def main():
    cmd = sys.argv[1]
    if cmd == "versions":
        out = {
            "helm-python-sdk": helm_python.__version__,
            "helm": helm_python.helm_sdk_version(),
            "kubernetes-validate": kubernetes_validate.__version__
            if hasattr(kubernetes_validate, "__version__")
            else __import__("importlib.metadata").metadata.version("kubernetes-validate"),
        }
    elif cmd == "lint":
        values = json.load(sys.stdin)
        out = helm_python.chart.lint(sys.argv[2], values or None, strict=True)
    elif cmd == "render":
        values = json.load(sys.stdin)
        chart = helm_python.Chart.load(sys.argv[2])
        try:
            out = {"manifests": chart.render(values, name=sys.argv[3], namespace=sys.argv[4])}
        except helm_python.HelmError as e:
            out = {"error": f"{type(e).__name__}: {e}"}
    elif cmd == "validate":
        out = validate(json.load(sys.stdin))
    else:
        print(f"unknown command {cmd}", file=sys.stderr)
        sys.exit(2)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
