# SPDX-License-Identifier: Apache-2.0
"""A webhook receiver for tests/integration/test_notify.sh (a test tool).

Usage: notify_receiver.py ADDRESS:PORT LOGFILE   (ADDRESS may be [IPv6])

Appends one JSON line per request to LOGFILE: path, the X-Sluice-* headers,
the raw body (text) and the status it answered. What it answers depends on
the path's first segment; the attempt number counts requests per path:
  /ok/...          200
  /flaky/N/...     503 to the first N requests, then 200
  /slow/MS/...     sleeps MS ms before answering the first request, then 200
  /gone/...        410 to the first request, then 200
  /redirect/...    302 to /ok/
Each line also records the Host and X-Sluice-Key headers the request carried.
It verifies nothing itself: the test checks every signature with openssl.
"""
import http.server
import json
import socket
import sys
import threading
import time

LOCK = threading.Lock()
COUNTS = {}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n).decode("utf-8", "replace")
        parts = self.path.strip("/").split("/")
        with LOCK:
            COUNTS[self.path] = COUNTS.get(self.path, 0) + 1
            attempt = COUNTS[self.path]
        status, extra = 200, {}
        kind = parts[0] if parts else ""
        if kind == "flaky" and attempt <= int(parts[1]):
            status = 503
        elif kind == "slow" and attempt == 1:
            time.sleep(int(parts[1]) / 1000.0)
        elif kind == "gone" and attempt == 1:
            status = 410
        elif kind == "redirect":
            status, extra = 302, {"Location": "/ok/redirected"}
        entry = {
            "path": self.path,
            "attempt": attempt,
            "status": status,
            "signature": self.headers.get("X-Sluice-Signature", ""),
            "delivery": self.headers.get("X-Sluice-Delivery", ""),
            "event": self.headers.get("X-Sluice-Event", ""),
            "content_type": self.headers.get("Content-Type", ""),
            "host": self.headers.get("Host", ""),
            "key": self.headers.get("X-Sluice-Key", ""),
            "body": body,
        }
        try:
            self.send_response(status)
            for k, v in extra.items():
                self.send_header(k, v)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
        except (BrokenPipeError, ConnectionResetError):
            entry["client_gone"] = True  # the sender timed out first
        with LOCK, open(sys.argv[2], "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    server = http.server.ThreadingHTTPServer
    if host.startswith("["):

        class Server6(http.server.ThreadingHTTPServer):
            address_family = socket.AF_INET6

        server, host = Server6, host.strip("[]")
    srv = server((host, int(port)), Handler)
    srv.daemon_threads = True
    srv.serve_forever()


if __name__ == "__main__":
    main()
