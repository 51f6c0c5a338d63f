# SPDX-License-Identifier: Apache-2.0
"""Validate real API responses against docs/openapi.yaml.

usage: openapi_check.py SPEC SCHEMA FILE...
Each FILE holds one JSON response body; it must validate against
components.schemas[SCHEMA] (JSON Schema 2020-12, as OpenAPI 3.1 uses).
Prints one line per file and exits 1 if any does not validate.
"""
import json
import sys

import jsonschema
import yaml


def main() -> int:
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    spec_path, name, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(spec_path, encoding="utf-8") as f:
        spec = yaml.safe_load(f)
    if name not in spec.get("components", {}).get("schemas", {}):
        print(f"no schema {name} in {spec_path}", file=sys.stderr)
        return 2
    root = {"components": spec["components"], "$ref": f"#/components/schemas/{name}"}
    validator = jsonschema.Draft202012Validator(root)
    bad = 0
    for path in files:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
        if errors:
            bad += 1
            for e in errors:
                where = "/".join(str(p) for p in e.path) or "(root)"
                print(f"{path}: {name}: {where}: {e.message}")
        else:
            print(f"{path}: {name}: ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
