"""A proxyless gRPC application for meshpush's tests: gRPC's own xDS client
and server (Python grpcio), configured by the bootstrap GRPC_XDS_BOOTSTRAP
names.

  app.py server --name NAME --address HOST:PORT
      An xDS-enabled server (grpc.server(..., xds=True)): it serves only
      once its control plane sent the listener of HOST:PORT, with the
      security that listener says (xDS credentials, plain text as the
      fallback). Every method is answered with "NAME METHOD PEER", PEER
      being the client's certificate identity under mTLS, else "-".

  app.py client --control HOST:PORT
      An xDS client driven over HTTP on HOST:PORT:
      GET /call?target=xds:///echo:7070&method=/echo.Echo/Call&count=10
      &timeout=5&header=x-canary=yes makes COUNT calls (each with the
      headers given) on one channel per target, kept between requests so
      its xDS state lives on, and answers {"results": [...]}, each
      {"ok": "ANSWER"} or {"error": "STATUS", "details": "..."}.
"""

import argparse
import json
import sys
import threading
import urllib.parse
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import grpc.experimental


def identity(bytes_or_none):
    return bytes_or_none.decode() if isinstance(bytes_or_none, bytes) else str(bytes_or_none)


class Answer(grpc.GenericRpcHandler):
    def __init__(self, name):
        self.name = name

    def service(self, details):
        method = details.method

        def answer(request, context):
            peers = context.peer_identities() or []
            uris = [identity(p) for p in peers if identity(p).startswith("spiffe://")]
            peer = uris[0] if uris else "-"
            return f"{self.name} {method} {peer}".encode()

        return grpc.unary_unary_rpc_method_handler(answer)


def serve(args):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), xds=True)
    server.add_generic_rpc_handlers((Answer(args.name),))
    credentials = grpc.xds_server_credentials(grpc.insecure_server_credentials())
    server.add_secure_port(args.address, credentials)
    server.start()
    print(f"started {args.name} on {args.address}", flush=True)
    server.wait_for_termination()


class Client:
    def __init__(self):
        self.lock = threading.Lock()
        self.channels = {}

    def channel(self, target):
        with self.lock:
            if target not in self.channels:
                fallback = grpc.experimental.insecure_channel_credentials()
                credentials = grpc.xds_channel_credentials(fallback_credentials=fallback)
                self.channels[target] = grpc.secure_channel(target, credentials)
            return self.channels[target]

    def call(self, request):
        channel = self.channel(request["target"])
        stub = channel.unary_unary(request.get("method", "/echo.Echo/Call"))
        metadata = [tuple(pair.split("=", 1)) for pair in request.get("header", [])]
        results = []
        for _ in range(int(request.get("count", 1))):
            try:
                answer = stub(b"", timeout=float(request.get("timeout", 5)), metadata=metadata)
                results.append({"ok": answer.decode()})
            except grpc.RpcError as e:
                results.append({"error": e.code().name, "details": (e.details() or "")[:300]})
        return {"results": results}


def control(args):
    client = Client()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            request = {k: (v if k == "header" else v[0]) for k, v in query.items()}
            try:
                body = json.dumps(client.call(request)).encode()
                status = 200
            except Exception as e:  # a bad request from the test: say what
                body = json.dumps({"failure": repr(e)[:300]}).encode()
                status = 400
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass

    host, port = args.control.rsplit(":", 1)
    server = ThreadingHTTPServer((host, int(port)), Handler)
    print(f"client control on {args.control}", flush=True)
    server.serve_forever()


def main():
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    server = commands.add_parser("server")
    server.add_argument("--name", required=True)
    server.add_argument("--address", required=True)
    client = commands.add_parser("client")
    client.add_argument("--control", required=True)
    args = parser.parse_args()
    if args.command == "server":
        serve(args)
    else:
        control(args)


if __name__ == "__main__":
    sys.exit(main())
