#!/usr/bin/env python3
"""A validating admission webhook for the e2e throttling scenario.

While the file named by --throttle-file exists, it refuses every request of the
user named by --user with 429 Too Many Requests, which kube-apiserver passes on to
that client as an API server shedding load would; otherwise it allows everything.
Standard library only; serves HTTPS on 127.0.0.1 until killed.
"""

import argparse
import http.server
import json
import os
import ssl

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--cert", required=True)
parser.add_argument("--key", required=True)
parser.add_argument("--user", required=True)
parser.add_argument("--throttle-file", required=True)
args = parser.parse_args()


class Review(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        request = review["request"]
        refuse = (
            os.path.exists(args.throttle_file)
            and request.get("userInfo", {}).get("username") == args.user
        )
        response = {"uid": request["uid"], "allowed": not refuse}
        if refuse:
            response["status"] = {
                "code": 429,
                "reason": "TooManyRequests",
                "message": "e2e throttling: the API server sheds the operator's node writes",
            }
        body = json.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Review)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(args.cert, args.key)
server.socket = context.wrap_socket(server.socket, server_side=True)
print("ready", flush=True)
server.serve_forever()
