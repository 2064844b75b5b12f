#!/usr/bin/env python3
"""Writes N CustomResourceDefinitions shaped like a Crossplane provider's
(a 30-60 KB schema each: nested objects, lists with map keys, CEL rules,
descriptions, printer columns, two served versions) as one multi-document
YAML file, for the 1,000-CRD test and bench (issue 16).

    scripts/gen-crds.py N OUT.yaml [GROUP-SUFFIX]
"""
import json
import sys

WORDS = ("the provider reconciles this field against the external API and "
         "reports drift in status; when unset the cloud default applies and "
         "the value is late-initialized from the observed resource").split()


def text(seed, n=16):
    return " ".join(WORDS[(seed * 7 + i) % len(WORDS)] for i in range(n)).capitalize() + "."


def leaf(seed):
    kinds = [
        {"type": "string", "maxLength": 253},
        {"type": "integer", "format": "int64", "minimum": 0},
        {"type": "boolean"},
        {"type": "number"},
        {"type": "string", "enum": ["Enabled", "Disabled", "Suspended"]},
        {"type": "array", "items": {"type": "string", "maxLength": 63}, "maxItems": 32},
    ]
    s = dict(kinds[seed % len(kinds)])
    s["description"] = text(seed)
    return s


def obj(seed, depth, width):
    props = {}
    for i in range(width):
        name = f"field{seed % 97}x{i}"
        if depth > 0 and i % 4 == 0:
            props[name] = obj(seed * 31 + i, depth - 1, max(3, width // 2))
        elif depth > 0 and i % 4 == 1:
            item = obj(seed * 17 + i, depth - 1, max(3, width // 2))
            item["properties"]["name"] = {"type": "string", "maxLength": 63, "description": text(i)}
            item["required"] = ["name"]
            props[name] = {
                "type": "array",
                "description": text(seed + i),
                "maxItems": 16,
                "items": item,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
            }
        elif i == 2:
            # The CEL rules' fields: a string and an integer.
            props[name] = {"type": "string", "maxLength": 253, "description": text(seed + i)}
        elif i == 3:
            props[name] = {"type": "integer", "format": "int64", "description": text(seed + i)}
        else:
            props[name] = leaf(seed + i)
    return {"type": "object", "description": text(seed), "properties": props}


def schema(n):
    for_provider = obj(n, 2, 12)
    for_provider["x-kubernetes-validations"] = [
        {"rule": "!has(self.field%dx2) || self.field%dx2 != 'forbidden'" % (n % 97, n % 97),
         "message": "field must not be 'forbidden'"},
        {"rule": "!has(self.field%dx3) || self.field%dx3 >= 0" % (n % 97, n % 97),
         "message": "must not be negative"},
    ]
    return {
        "type": "object",
        "description": text(n, 60),
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "description": text(n + 1, 60),
                "required": ["forProvider"],
                "properties": {
                    "forProvider": for_provider,
                    "initProvider": obj(n + 7, 1, 8),
                    "deletionPolicy": {"type": "string", "enum": ["Orphan", "Delete"], "default": "Delete",
                                       "description": text(n + 2)},
                    "providerConfigRef": {
                        "type": "object", "default": {"name": "default"}, "required": ["name"],
                        "properties": {"name": {"type": "string", "description": text(n + 3)}},
                    },
                },
                "x-kubernetes-validations": [
                    {"rule": "self.deletionPolicy == 'Delete' || has(self.providerConfigRef)",
                     "message": "an orphaned resource needs a provider config"},
                ],
            },
            "status": {
                "type": "object",
                "properties": {
                    "atProvider": obj(n + 11, 1, 10),
                    "conditions": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["type"],
                        "items": {
                            "type": "object", "required": ["type", "status"],
                            "properties": {
                                "type": {"type": "string"}, "status": {"type": "string"},
                                "reason": {"type": "string"}, "message": {"type": "string"},
                                "lastTransitionTime": {"type": "string", "format": "date-time"},
                            },
                        },
                    },
                },
            },
        },
    }


def crd(n, suffix):
    kind = f"Resource{n}"
    plural = f"resource{n}s"
    group = f"g{n % 50}.{suffix}"
    s = schema(n)
    columns = [
        {"name": "READY", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].status"},
        {"name": "SYNCED", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Synced')].status"},
        {"name": "POLICY", "type": "string", "jsonPath": ".spec.deletionPolicy", "priority": 1},
        {"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    versions = []
    for name, storage in (("v1beta1", True), ("v1beta2", False)):
        versions.append({
            "name": name, "served": True, "storage": storage,
            "schema": {"openAPIV3Schema": s},
            "additionalPrinterColumns": columns,
            "subresources": {"status": {}},
        })
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "listKind": kind + "List", "plural": plural, "singular": f"resource{n}",
                      "categories": ["crossplane", "managed"]},
            "scope": "Cluster",
            "versions": versions,
        },
    }


def main():
    n = int(sys.argv[1])
    out = sys.argv[2]
    suffix = sys.argv[3] if len(sys.argv) > 3 else "bench.example.com"
    with open(out, "w") as f:
        for i in range(n):
            if i:
                f.write("---\n")
            f.write(json.dumps(crd(i, suffix)))
            f.write("\n")


if __name__ == "__main__":
    main()
