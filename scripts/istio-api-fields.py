#!/usr/bin/env python3
"""Lists every field path of Istio's networking, security and telemetry kinds, and of its mesh config, from istio/api's protos.

Usage: scripts/istio-api-fields.py ISTIO_API_CHECKOUT > src/config/istio/api_fields.txt

The output is one line per field: `Kind path`, where the path is written as
the YAML spells it (camelCase), `[]` marks a list and `*` a map key:
`VirtualService spec.http[].match[].headers.*.exact`. The mesh config
(`mesh/v1alpha1`'s MeshConfig, the `mesh` key of Istio's ConfigMap) is
listed as kind `MeshConfig`, its paths from the top (`defaultConfig.tracing`).
meshpush reads it to
tell a field of Istio's API that it does not apply ("not supported") from
one that is not in the API at all (a typo, or a newer field); the coverage
test reads it to know which fields a complete document must set.
"""
import re
import sys
from pathlib import Path

WELL_KNOWN = {
    "google.protobuf.Duration", "google.protobuf.UInt32Value", "google.protobuf.UInt64Value",
    "google.protobuf.BoolValue", "google.protobuf.DoubleValue", "google.protobuf.StringValue",
    "google.protobuf.Int64Value", "google.protobuf.Int32Value", "google.protobuf.Struct",
}
SCALARS = {"string", "bool", "bytes", "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64"}
FIELD = re.compile(r"^\s*(repeated\s+)?(map<\s*\w+\s*,\s*([\w.]+)\s*>|[\w.]+)\s+(\w+)\s*=\s*\d+")

def camel(name):
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)

def parse(path, package, messages, enums):
    """Fills messages[qualified] = [(name, type, repeated, is_map)] and enums (a set)."""
    stack = []
    for raw in Path(path).read_text().splitlines():
        line = raw.split("//", 1)[0]
        m = re.match(r"^\s*(message|enum|oneof)\s+(\w+)\s*\{", line)
        if m:
            kind, name = m.groups()
            if kind == "oneof":
                stack.append(("oneof", stack[-1][1]))
                continue
            qualified = (stack[-1][1] if stack else package) + "." + name
            stack.append((kind, qualified))
            if kind == "message":
                messages[qualified] = []
            else:
                enums.add(qualified)
            # `message Empty {}` opens and closes on one line.
            if re.search(r"\}\s*$", line):
                stack.pop()
            continue
        if re.match(r"^\s*\}", line) and stack:
            stack.pop()
            continue
        if not stack or stack[-1][0] == "enum" or "reserved" in line or "option " in line:
            continue
        f = FIELD.match(line)
        if f:
            repeated, typ, map_value, name = f.groups()
            is_map = map_value is not None
            messages[stack[-1][1]].append((name, map_value if is_map else typ, bool(repeated), is_map))

def resolve(typ, scope, messages, enums):
    if typ in SCALARS or typ in WELL_KNOWN:
        return None
    if "." in typ and typ.startswith("istio."):
        return typ if typ in messages else None
    parts = scope.split(".")
    while parts:
        candidate = ".".join(parts) + "." + typ
        if candidate in messages:
            return candidate
        if candidate in enums:
            return None
        parts.pop()
    return None

def walk(message, prefix, messages, enums, out, seen):
    for name, typ, repeated, is_map in messages[message]:
        path = prefix + camel(name) + ("[]" if repeated and not is_map else "") + (".*" if is_map else "")
        out.append(path)
        inner = resolve(typ, message, messages, enums)
        if inner and inner not in seen:
            walk(inner, path + ".", messages, enums, out, seen | {inner})

def main():
    root = Path(sys.argv[1])
    messages, enums = {}, set()
    parse(root / "type/v1beta1/selector.proto", "istio.type.v1beta1", messages, enums)
    for proto in sorted((root / "networking/v1alpha3").glob("*.proto")):
        parse(proto, "istio.networking.v1alpha3", messages, enums)
    for proto in sorted((root / "security/v1beta1").glob("*.proto")):
        parse(proto, "istio.security.v1beta1", messages, enums)
    for proto in sorted((root / "telemetry/v1alpha1").glob("*.proto")):
        parse(proto, "istio.telemetry.v1alpha1", messages, enums)
    parse(root / "networking/v1beta1/proxy_config.proto", "istio.networking.v1beta1", messages, enums)
    kinds = [
        ("networking.v1alpha3", k)
        for k in ["VirtualService", "DestinationRule", "Gateway", "ServiceEntry", "WorkloadEntry", "WorkloadGroup", "Sidecar",
                  "EnvoyFilter"]
    ] + [("security.v1beta1", k) for k in ["PeerAuthentication", "RequestAuthentication", "AuthorizationPolicy"]] + [
        ("telemetry.v1alpha1", "Telemetry"),
        ("networking.v1beta1", "ProxyConfig"),
    ]
    for package, kind in kinds:
        out = []
        walk(f"istio.{package}.{kind}", "spec.", messages, enums, out, {kind})
        for path in out:
            print(kind, path)
    for proto in sorted((root / "mesh/v1alpha1").glob("*.proto")):
        parse(proto, "istio.mesh.v1alpha1", messages, enums)
    out = []
    walk("istio.mesh.v1alpha1.MeshConfig", "", messages, enums, out, {"istio.mesh.v1alpha1.MeshConfig"})
    for path in out:
        print("MeshConfig", path)

main()
