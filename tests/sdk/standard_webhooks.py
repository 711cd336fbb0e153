"""The `standardwebhooks` package (PyPI), unchanged, verifies a webhook the relay delivered.

Run by `cargo xtask sdk` against a built relay: RELAY_BASE_URL, RELAY_ADMIN_TOKEN. A receiver
on 127.0.0.1 records one delivery of a finished task; the package's Webhook(secret).verify
must accept it as delivered and refuse it with its body changed.
"""

import http.server
import json
import os
import sys
import threading
import time
import urllib.request

import standardwebhooks

BASE = os.environ["RELAY_BASE_URL"].rstrip("/")
ADMIN = os.environ["RELAY_ADMIN_TOKEN"]
received = []


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        received.append(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def call(method, path, token, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, method=method)
    req.add_header("authorization", "Bearer " + token)
    if data is not None:
        req.add_header("content-type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as res:
        return json.loads(res.read())


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hook = "http://127.0.0.1:%d/hook" % server.server_address[1]

    key = call("POST", "/admin/keys", ADMIN, {"name": "standard-webhooks", "group": "gen2"})
    secret = key["webhook_secret"]
    task = call(
        "POST", "/v1/videos", key["key"],
        {"model": "model_h3", "prompt": "a verified webhook", "callback_url": hook},
    )
    deadline = time.time() + 60
    while not received and time.time() < deadline:
        time.sleep(0.2)
    if not received:
        sys.exit("no webhook arrived within 60 s")
    headers, body = received[0]

    event = standardwebhooks.Webhook(secret).verify(body, headers)
    assert event["type"] == "video.completed", event
    assert event["data"]["id"] == task["id"], event
    assert event["id"] == headers["webhook-id"], event
    try:
        standardwebhooks.Webhook(secret).verify(body.replace(b"completed", b"cancelled"), headers)
    except standardwebhooks.WebhookVerificationError:
        pass
    else:
        sys.exit("a changed body verified")
    print("standardwebhooks verified", event["type"], "for", task["id"])
    server.shutdown()


if __name__ == "__main__":
    main()
