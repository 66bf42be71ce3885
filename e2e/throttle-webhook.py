#!/usr/bin/env python3
"""A validating admission webhook for the e2e scenarios that need the API server
to misbehave in a controlled way. Two modes:

* throttling (--user or --user-prefix, --throttle-file): while the file named by
  --throttle-file exists, it refuses every request of the user named by --user (or
  of every user whose name starts with --user-prefix) with 429 Too Many Requests,
  which kube-apiserver passes on to that client as an API server shedding load
  would; otherwise it allows everything. With --slow-file, while that file exists
  each answer to such a user waits --slow-seconds first: an API server that
  answers, slowly.
* a black hole for a leader's Lease renewals (--hang-lease, --hang-holder,
  --hang-file): while the file named by --hang-file exists, an UPDATE of the Lease
  named by --hang-lease whose new spec.holderIdentity is --hang-holder (that is, a
  renewal by that holder) is read and never answered: its thread sleeps until the
  process is killed, so the API server waits for it until the webhook's
  timeoutSeconds. Everything else is allowed at once. One JSON line per review
  goes to stdout (time, lease, holder, verdict), for the scenario to read.

Standard library only; serves HTTPS on 127.0.0.1 until killed; prints "ready"
once it listens.
"""

import argparse
import http.server
import json
import os
import ssl
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--cert", required=True)
parser.add_argument("--key", required=True)
parser.add_argument("--user", help="throttling: the user whose requests get 429")
parser.add_argument("--user-prefix", help="throttling: every user whose name starts with this")
parser.add_argument("--slow-file", help="throttling: answer slowly while this file exists")
parser.add_argument("--slow-seconds", type=float, default=3.0, help="throttling: how slowly")
parser.add_argument("--throttle-file", help="throttling: refuse while this file exists")
parser.add_argument("--hang-lease", help="black hole: the Lease whose renewals hang")
parser.add_argument("--hang-holder", help="black hole: the holder whose renewals hang")
parser.add_argument("--hang-file", help="black hole: hang while this file exists")
args = parser.parse_args()
throttling = any(a is not None for a in (args.user, args.user_prefix, args.throttle_file))
hanging = any(a is not None for a in (args.hang_lease, args.hang_holder, args.hang_file))
if throttling == hanging:
    parser.error("give either --user and --throttle-file, or --hang-lease, --hang-holder and --hang-file")
if throttling and (args.throttle_file is None or (args.user is None) == (args.user_prefix is None)):
    parser.error("throttling needs --throttle-file and one of --user and --user-prefix")
if hanging and None in (args.hang_lease, args.hang_holder, args.hang_file):
    parser.error("the black hole needs --hang-lease, --hang-holder and --hang-file")

# Held by the handler threads that never answer; nothing ever sets it.
NEVER = threading.Event()
stdout_lock = threading.Lock()


def throttled_user(request):
    user = request.get("userInfo", {}).get("username") or ""
    if args.user is not None:
        return user == args.user
    return user.startswith(args.user_prefix)


def throttle_response(request):
    ours = throttled_user(request)
    if ours and args.slow_file is not None and os.path.exists(args.slow_file):
        time.sleep(args.slow_seconds)
    refuse = ours and os.path.exists(args.throttle_file)
    response = {"uid": request["uid"], "allowed": not refuse}
    if refuse:
        response["status"] = {
            "code": 429,
            "reason": "TooManyRequests",
            "message": "e2e throttling: the API server sheds the operator's node writes",
        }
    return response


def black_hole(request):
    """True when this review must never be answered; reports every Lease review."""
    obj = request.get("object") or {}
    name = obj.get("metadata", {}).get("name") or request.get("name")
    holder = (obj.get("spec") or {}).get("holderIdentity")
    hang = (
        request.get("operation") == "UPDATE"
        and request.get("resource", {}).get("resource") == "leases"
        and name == args.hang_lease
        and holder == args.hang_holder
        and os.path.exists(args.hang_file)
    )
    line = json.dumps(
        {
            "time": time.time(),
            "lease": name,
            "holder": holder,
            "verdict": "hang" if hang else "allow",
        }
    )
    with stdout_lock:
        print(line, flush=True)
    return hang


class Review(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        request = review["request"]
        if throttling:
            response = throttle_response(request)
        elif black_hole(request):
            # Accepted and read, never answered: the API server's call times out.
            NEVER.wait()
            return
        else:
            response = {"uid": request["uid"], "allowed": True}
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
