#!/usr/bin/env python3
"""Generates the built-in API's wire and merge tables from upstream's API definitions.

Source: the Kubernetes 1.33 API packages as published (tag v0.33.9 of
kubernetes/api, kubernetes/apimachinery, kubernetes/apiextensions-apiserver and
kubernetes/kube-aggregator). Each package's `generated.proto` gives the protobuf
field numbers and wire types; its Go types (`types.go` and friends) give each
field's JSON name, whether it is a pointer (a zero value on the wire is then
kept) or `omitempty` (then dropped), and which struct fields are inlined into
their parent's JSON. The `+patchMergeKey`, `+patchStrategy`, `+listType`,
`+listMapKey`, `+mapType` and `+structType` markers in the same comments are
what upstream's openapi-gen turns into `x-kubernetes-*` OpenAPI extensions,
and `+default=` into a property's `default`.

Writes (deterministically, sorted):
  host/api/src/generated/protobuf.json   message -> {tag: [json, type, flags]}
  host/api/src/generated/extensions.json definition -> {property|"": {x-kubernetes-...}}
  host/api/src/generated/json_fields.json message -> [[json name, type]] in Go's field order

Usage: scripts/gen-api-tables.py [MIRROR_DIR]  (a folder holding git clones
named kubernetes+api, kubernetes+apimachinery, ...; default /work/.mirror).
"""

import json
import os
import re
import subprocess
import sys

TAG = "v0.33.9"
MIRROR = sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "host", "api", "src", "generated")

# (repository, package directory, proto package)
PACKAGES = [
    ("apimachinery", "pkg/apis/meta/v1", "k8s.io.apimachinery.pkg.apis.meta.v1"),
    ("apimachinery", "pkg/api/resource", "k8s.io.apimachinery.pkg.api.resource"),
    ("apimachinery", "pkg/util/intstr", "k8s.io.apimachinery.pkg.util.intstr"),
    ("apimachinery", "pkg/runtime", "k8s.io.apimachinery.pkg.runtime"),
    ("apiextensions-apiserver", "pkg/apis/apiextensions/v1", "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1"),
    ("kube-aggregator", "pkg/apis/apiregistration/v1", "k8s.io.kube_aggregator.pkg.apis.apiregistration.v1"),
]
API_GROUPS = [
    "admissionregistration/v1", "admissionregistration/v1beta1", "apps/v1", "authentication/v1", "authorization/v1",
    "autoscaling/v1", "autoscaling/v2", "batch/v1", "certificates/v1", "coordination/v1",
    "core/v1", "discovery/v1", "events/v1", "flowcontrol/v1", "networking/v1", "node/v1",
    "policy/v1", "rbac/v1", "scheduling/v1", "storage/v1",
]
PACKAGES += [("api", g, "k8s.io.api." + g.replace("/", ".")) for g in API_GROUPS]

# Messages whose JSON form is not their fields (custom JSON marshalling upstream).
SPECIAL = {
    "k8s.io.apimachinery.pkg.apis.meta.v1.Time": "time",
    "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime": "microtime",
    "k8s.io.apimachinery.pkg.apis.meta.v1.Duration": "duration",
    "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1": "raw",
    "k8s.io.apimachinery.pkg.runtime.RawExtension": "raw",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": "intorstring",
    "k8s.io.apimachinery.pkg.api.resource.Quantity": "quantity",
    "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSON": "raw",
}
MARKERS = {
    "patchMergeKey": "x-kubernetes-patch-merge-key",
    "patchStrategy": "x-kubernetes-patch-strategy",
    "listType": "x-kubernetes-list-type",
    "listMapKey": "x-kubernetes-list-map-keys",
    "mapType": "x-kubernetes-map-type",
    "structType": "x-kubernetes-map-type",
}


def git_show(repo, path):
    d = os.path.join(MIRROR, "kubernetes+" + repo, "repo")
    return subprocess.run(["git", "-C", d, "show", f"{TAG}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def git_ls(repo, path):
    d = os.path.join(MIRROR, "kubernetes+" + repo, "repo")
    out = subprocess.run(["git", "-C", d, "ls-tree", "--name-only", TAG, path + "/"], check=True,
                         capture_output=True, text=True).stdout
    return [p for p in out.split() if p.endswith(".go") and not p.endswith("_test.go")
            and "zz_generated" not in p and not p.endswith("generated.pb.go")]


def markers(comments):
    out = {}
    for c in comments:
        d = re.match(r"\+default=(.+)$", c)
        if d:
            # `+default="TCP"` is a JSON value; `ref(...)` constants are not.
            try:
                out["default"] = json.loads(d.group(1))
            except ValueError:
                pass
            continue
        m = re.match(r"\+(\w+)=(\S+)", c)
        if not m or m.group(1) not in MARKERS:
            continue
        key, value = MARKERS[m.group(1)], m.group(2)
        if key == "x-kubernetes-list-map-keys":
            out.setdefault(key, []).append(value)
        elif key == "x-kubernetes-map-type" and m.group(1) == "structType":
            out[key] = value
        else:
            out[key] = value
    return out


def parse_proto(text, package):
    """{message: [(label, type, name, tag, markers)]}, message markers."""
    messages, message_markers = {}, {}
    comments, current = [], None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("//"):
            comments.append(s[2:].strip())
            continue
        m = re.match(r"^message (\w+) \{", s)
        if m and not line.startswith(" "):
            current = package + "." + m.group(1)
            messages[current] = []
            if markers(comments):
                message_markers[current] = markers(comments)
            comments = []
            continue
        m = re.match(r"^(optional|repeated)?\s*(map<[^>]+>|[\w.]+) (\w+) = (\d+);", s)
        if m and current:
            label, ty, name, tag = m.groups()
            if ty.startswith("."):
                ty = ty[1:]
            elif not ty.startswith("map<") and ty not in SCALARS:
                ty = package + "." + ty
            messages[current].append((label or "", ty, name, int(tag), markers(comments)))
        if s == "}" and not line.startswith(" "):
            current = None
        if not s.startswith("//"):
            comments = []
    return messages, message_markers


SCALARS = {"string", "int32", "int64", "bool", "double", "bytes", "float", "uint32", "uint64"}


def parse_go(texts):
    """{struct: {proto tag: (json name, pointer, omitempty, inline)}}, set of slice types,
    {struct: [proto tag | "TypeMeta"]} in declaration order (Go's JSON field order)."""
    structs, slices, order = {}, set(), {}
    for text in texts:
        current = None
        for line in text.splitlines():
            m = re.match(r"^type (\w+) struct \{", line)
            if m:
                current = m.group(1)
                structs.setdefault(current, {})
                order.setdefault(current, [])
                continue
            m = re.match(r"^type (\w+) \[\]", line)
            if m:
                slices.add(m.group(1))
            if line.startswith("}"):
                current = None
                continue
            if not current:
                continue
            m = re.match(r"^\t(\w+)?\s*(\S+)\s+`(.*)`", line)
            if not m:
                continue
            _, gotype, tags = m.groups()
            pm = re.search(r'protobuf:"[a-z0-9]+,(\d+),', tags)
            jm = re.search(r'json:"([^"]*)"', tags)
            if not pm and jm and jm.group(1) == ",inline" and re.match(r"^\t(\w+\.)?TypeMeta\s", line):
                # The embedded `metav1.TypeMeta`: kind and apiVersion, first.
                order[current].append("TypeMeta")
                continue
            if not pm or not jm:
                continue
            order[current].append(int(pm.group(1)))
            parts = jm.group(1).split(",")
            structs[current][int(pm.group(1))] = (
                parts[0], gotype.startswith("*"), "omitempty" in parts[1:], "inline" in parts[1:])
    return structs, slices, order


def definition(proto_name):
    """io.k8s.api.core.v1.Pod from k8s.io.api.core.v1.Pod, as openapi-gen names it."""
    rest = proto_name[len("k8s.io."):]
    return "io.k8s." + rest.replace("_", "-")


def json_fields(table, order):
    """{message: [[json name, value type]]} in Go's JSON field order: inlined
    structs' fields in place, the embedded TypeMeta as kind and apiVersion;
    types as in protobuf.json but only what the encoder needs (messages,
    "map:" of messages, "raw"; "" for anything written as is)."""
    def kind(ty):
        if ty.startswith("map:"):
            v = kind(ty[4:])
            return "map:" + v if v else ""
        if ty == "raw" or ty in table:
            items = table.get(ty, {}).get("items") if ty in table else None
            if items is not None:
                return kind(items)
            return ty
        return ""

    def flat(msg):
        out = []
        for tag in order.get(msg, []):
            if tag == "TypeMeta":
                out += [["kind", ""], ["apiVersion", ""]]
                continue
            name, ty, flags = table[msg][str(tag)]
            if "i" in flags:
                out += flat(ty)
            elif name != "-":
                out.append([name, kind(ty)])
        return out

    return {msg: flat(msg) for msg, f in table.items() if "items" not in f}


def main():
    table, extensions, order = {}, {}, {}
    for repo, path, package in PACKAGES:
        messages, message_markers = parse_proto(git_show(repo, path + "/generated.proto"), package)
        structs, slices, go_order = parse_go(git_show(repo, p) for p in git_ls(repo, path))
        for msg, fields in messages.items():
            short = msg[len(package) + 1:]
            if msg in SPECIAL:
                continue
            if short in slices:
                # `type Verbs []string`: a wrapper message whose JSON is the array.
                table[msg] = {"items": fields[0][1]}
                continue
            go = structs.get(short, {})
            out = {}
            for label, ty, name, tag, mk in fields:
                json_name, pointer, omitempty, inline = go.get(tag, (name, False, True, False))
                flags = ""
                if label == "repeated":
                    flags += "r"
                if pointer:
                    flags += "p"
                if omitempty:
                    flags += "o"
                if inline:
                    flags += "i"
                if ty.startswith("map<"):
                    k, v = [t.strip() for t in ty[4:-1].split(",")]
                    if v.startswith("."):
                        v = v[1:]
                    elif v not in SCALARS:
                        v = package + "." + v
                    ty = "map:" + SPECIAL.get(v, v)
                else:
                    ty = SPECIAL.get(ty, ty)
                out[str(tag)] = [json_name, ty, flags]
                if mk and not inline:
                    extensions.setdefault(definition(msg), {})[json_name] = mk
            table[msg] = out
            tags = {tag for _, _, _, tag, _ in fields}
            order[msg] = [t for t in go_order.get(short, []) if t == "TypeMeta" or t in tags]
            order[msg] += sorted(tags - set(order[msg]))
            if msg in message_markers:
                extensions.setdefault(definition(msg), {})[""] = message_markers[msg]
    # Every referenced message must be known.
    missing = set()
    for msg, fields in table.items():
        for f in fields.values() if isinstance(fields, dict) and "items" not in fields else []:
            ty = f[1][4:] if f[1].startswith("map:") else f[1]
            if "." in ty and ty not in table:
                missing.add(ty)
    if missing:
        sys.exit("unresolved messages: " + ", ".join(sorted(missing)))
    os.makedirs(OUT, exist_ok=True)
    fields = json_fields(table, order)
    for name, data in (("protobuf.json", table), ("extensions.json", extensions),
                       ("json_fields.json", fields)):
        with open(os.path.join(OUT, name), "w") as f:
            json.dump(data, f, sort_keys=True, separators=(",", ":"))
            f.write("\n")
    print(f"{len(table)} messages, {len(extensions)} definitions with extensions")


if __name__ == "__main__":
    main()
