#!/usr/bin/env python3
"""Writes the seed corpus of each fuzz target into fuzz/corpus/TARGET/.

Seeds are what the targets see in practice: the example mesh's YAML,
Istio node ids, SotW and delta requests as Envoy 1.40 encodes them (the
node first, then the fields by number), those requests framed for the
deframer, CSRs as an agent makes them (by openssl: a P-256 key, SPIFFE URI
SANs; PEM text and the DER alone), and JWTs of every shape a CA sees,
signed by no key the target knows. Run from the repository root: python3 fuzz/make_seeds.py
"""
import base64
import hashlib
import json
import pathlib
import struct
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(number, value):
    """A length-delimited field."""
    if isinstance(value, str):
        value = value.encode()
    return varint(number << 3 | 2) + varint(len(value)) + value


def struct_string(key, value):
    # google.protobuf.Struct { fields: map<string, Value> }; Value.string_value = 3
    entry = field(1, key) + field(2, field(3, value))
    return field(1, entry)


def node(node_id, namespace="default", labels=None):
    metadata = struct_string("NAMESPACE", namespace) + struct_string("INTERCEPTION_MODE", "NONE")
    if labels:
        inner = b"".join(struct_string(k, v) for k, v in labels.items())
        metadata += field(1, field(1, "LABELS") + field(2, field(5, inner)))
    return field(1, node_id) + field(2, "productpage.default") + field(3, metadata) + field(6, "envoy")


ID = "sidecar~127.0.0.11~productpage-v1.default~default.svc.cluster.local"
CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
EDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
NAMES = ["outbound|9080||reviews.default.svc.cluster.local", "outbound|9080|v1|ratings.default.svc.cluster.local"]


def sotw(with_node=True, version="", names=(), type_url=CDS, nonce="", nack=None):
    out = b""
    if version:
        out += field(1, version)
    if with_node:
        out += field(2, node(ID, labels={"app": "productpage", "version": "v1"}))
    for n in names:
        out += field(3, n)
    out += field(4, type_url)
    if nonce:
        out += field(5, nonce)
    if nack:
        out += field(6, varint(0 << 3) + varint(13) + field(2, nack))
    return out


def delta(with_node=True, subscribe=(), unsubscribe=(), versions=None, type_url=CDS, nonce=""):
    out = field(1, node(ID)) if with_node else b""
    out += field(2, type_url)
    for n in subscribe:
        out += field(3, n)
    for n in unsubscribe:
        out += field(4, n)
    for k, v in (versions or {}).items():
        out += field(5, field(1, k) + field(2, v))
    if nonce:
        out += field(6, nonce)
    return out


def framed(message, flag=0):
    return bytes([flag]) + struct.pack(">I", len(message)) + message


def write(target, seeds):
    directory = CORPUS / target
    directory.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        (directory / hashlib.sha1(seed).hexdigest()).write_bytes(seed)


sotw_seeds = [
    sotw(),
    sotw(type_url=EDS, names=NAMES),
    sotw(with_node=False, version="v1", type_url=EDS, names=NAMES, nonce="0000002a"),
    sotw(with_node=False, version="v1", nonce="00000001", nack="cluster rejected"),
    b"",
]
delta_seeds = [
    delta(),
    delta(type_url=EDS, subscribe=NAMES),
    delta(with_node=False, unsubscribe=NAMES[:1], nonce="00000003"),
    delta(versions={NAMES[0]: "a1b2c3"}, subscribe=["*"]),
]
write("sotw_request", sotw_seeds)
write("delta_request", delta_seeds)
write("node_id", [s.encode() for s in [
    ID,
    "router~10.0.0.1~istio-ingressgateway-abc.istio-system~istio-system.svc.cluster.local",
    "sidecar~::1~vm.ns~ns.svc.cluster.local",
    "not-an-istio-id",
    "sidecar~~~",
]])
write("grpc_deframer", [
    bytes([15]) + framed(sotw_seeds[0]) + framed(sotw_seeds[2]),
    bytes([0]) + framed(b"") + framed(b"x" * 40),
    bytes([255]) + framed(delta_seeds[1]),
    bytes([3]) + framed(b"abc", flag=1),
    bytes([7]) + framed(b"y" * 10)[:9],
])
yaml = sorted((ROOT / "examples" / "bookinfo").rglob("*.yaml"))
yaml += sorted((ROOT / "tests" / "data" / "api-coverage").glob("*.yaml"))
write("yaml_documents", [p.read_bytes() for p in yaml if p.stat().st_size < 64 * 1024])


def csr(sans):
    """A PEM CSR for a fresh P-256 key naming `sans` (URIs), by openssl."""
    with tempfile.TemporaryDirectory() as tmp:
        key = pathlib.Path(tmp) / "key.pem"
        subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key],
                       check=True, capture_output=True)
        args = ["openssl", "req", "-new", "-key", key, "-subj", "/O=fuzz"]
        if sans:
            args += ["-addext", "subjectAltName=" + ",".join("URI:" + s for s in sans)]
        return subprocess.run(args, check=True, capture_output=True).stdout


def der_of(pem):
    body = b"".join(l for l in pem.splitlines() if not l.startswith(b"-----"))
    return base64.b64decode(body)


SLEEP = "spiffe://cluster.local/ns/default/sa/sleep"
csrs = [csr([SLEEP]), csr([SLEEP, "spiffe://cluster.local/ns/istio-system/sa/istiod"]), csr([])]
write("ca_csr", [bytes([0]) + c for c in csrs] + [bytes([1]) + der_of(c) for c in csrs])


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def jwt(header, claims, signature=b"\x01" * 64):
    return b".".join([b64url(json.dumps(header).encode()), b64url(json.dumps(claims).encode()), b64url(signature)])


claims = {"iss": "meshpush", "aud": "istio-ca", "sub": "system:serviceaccount:default:sleep", "exp": 4102444800}
write("ca_token", [
    jwt({"alg": "ES256", "typ": "JWT", "kid": "meshpush-1"}, claims),
    jwt({"alg": "RS256", "kid": "other"}, claims),
    jwt({"alg": "HS256"}, claims),
    jwt({"alg": "none"}, claims, b""),
    jwt({"alg": "ES256"}, {"sub": "system:serviceaccount:default"}),
    b"not.a.jwt",
    b"opaque-kubernetes-token",
])
