#!/usr/bin/env python3
"""Extract the OpenAPI v3 schemas of CustomResourceDefinitions into JSON files, one per served
version: <group>/<kind lowercase>_<version>.json, `description` fields removed (they are most of
the size and no part of validation). Usage: extract.py OUTDIR CRD.yaml...
See README.md for the source of the files checked in here."""
import json
import os
import sys

import yaml


class Loader(yaml.SafeLoader):
    pass


# Some CRDs hold the YAML 1.1 "value" tag (`=`) as a plain string.
Loader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


def strip(node):
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def main():
    out = sys.argv[1]
    for path in sys.argv[2:]:
        with open(path) as f:
            crd = yaml.load(f, Loader=Loader)
        group = crd["spec"]["group"]
        kind = crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if not version.get("served", True):
                continue
            schema = strip(version["schema"]["openAPIV3Schema"])
            dest = os.path.join(out, group, f"{kind.lower()}_{version['name']}.json")
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "w") as f:
                json.dump(schema, f, sort_keys=True, separators=(",", ":"))
                f.write("\n")
            print(dest, os.path.getsize(dest))


if __name__ == "__main__":
    main()
