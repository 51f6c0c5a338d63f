#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""sse_flood.py - opens many server-sent event streams from one address.

Usage: sse_flood.py --port P [--bind ADDR] [--n N] [--hold S] [--token T]
                    [--xff CLIENT]

Opens N connections to results on 127.0.0.1:P from local address ADDR, all
at once, each asking for GET /v1/submissions/<id>/events of a fresh UUIDv7
(a "young" id results holds a stream for) with a bogus bearer credential
("bogus-<i>", or T for every one with --token). Answers other than 200 are
read to their end; 200 streams are kept open (and read) until S seconds
after the last connection got its answer, counting how many were open at
once. Prints one JSON line:
  {"status": {"200": k, "429": m, ...}, "codes": {"too_many_...": m},
   "errors": e, "max_open": x, "open_at_end": y}
A test tool (tests/integration/test_stream_caps.sh), not shipped.
"""
import argparse
import json
import os
import re
import resource
import selectors
import socket
import time


def uuid7():
    ms = int(time.time() * 1000)
    r = int.from_bytes(os.urandom(10), "big")
    h = "%012x7%03x%x%03x%012x" % (ms, r & 0xFFF, 8 | ((r >> 12) & 3),
                                     (r >> 14) & 0xFFF, (r >> 26) & 0xFFFFFFFFFFFF)
    return "%s-%s-%s-%s-%s" % (h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--n", type=int, default=1100)
    ap.add_argument("--hold", type=float, default=5.0)
    ap.add_argument("--token", default="")
    ap.add_argument("--xff", default="", help="an X-Forwarded-For header to send")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = a.n + 64
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))

    sel = selectors.DefaultSelector()
    status, codes = {}, {}
    errors = 0
    n_open = max_open = 0
    pending = 0
    for i in range(a.n):
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        except OSError:  # out of file descriptors: counted, not fatal
            errors += 1
            continue
        try:
            s.bind((a.bind, 0))
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", a.port))
        except OSError:
            errors += 1
            s.close()
            continue
        cred = a.token or "bogus-%d" % i
        req = ("GET /v1/submissions/%s/events HTTP/1.1\r\nHost: results\r\n"
               "Accept: text/event-stream\r\nAuthorization: Bearer %s\r\n"
               "%sConnection: close\r\n\r\n" %
               (uuid7(), cred, "X-Forwarded-For: %s\r\n" % a.xff if a.xff else "")).encode()
        st = {"sock": s, "out": req, "buf": b"", "status": None}
        sel.register(s, selectors.EVENT_WRITE, st)
        pending += 1

    def close(st):
        nonlocal n_open, pending, errors
        sel.unregister(st["sock"])
        st["sock"].close()
        if st["status"] == 200:
            n_open -= 1
        elif st["status"] is None:
            errors += 1
            pending -= 1
        else:
            m = re.search(rb'"code":"([a-z_]+)"', st["buf"])
            c = m.group(1).decode() if m else "?"
            codes[c] = codes.get(c, 0) + 1

    done_at = None
    deadline = time.time() + 60
    while time.time() < deadline:
        if pending == 0 and done_at is None:
            done_at = time.time()
        if done_at is not None and time.time() - done_at >= a.hold:
            break
        for key, ev in sel.select(timeout=0.1):
            st = key.data
            s = st["sock"]
            if ev & selectors.EVENT_WRITE:
                try:
                    n = s.send(st["out"])
                    st["out"] = st["out"][n:]
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    close(st)
                    continue
                if not st["out"]:
                    sel.modify(s, selectors.EVENT_READ, st)
                continue
            try:
                data = s.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:
                close(st)
                continue
            if st["status"] is None:
                st["buf"] += data
                if b"\r\n" in st["buf"]:
                    line = st["buf"].split(b"\r\n", 1)[0].split()
                    code = int(line[1]) if len(line) > 1 and line[1].isdigit() else 0
                    st["status"] = code
                    status[str(code)] = status.get(str(code), 0) + 1
                    pending -= 1
                    if code == 200:
                        n_open += 1
                        max_open = max(max_open, n_open)
                        st["buf"] = b""
            elif st["status"] != 200 and len(st["buf"]) < 65536:
                st["buf"] += data
    open_at_end = n_open
    for st in list(key.data for key in sel.get_map().values()):
        st["sock"].close()
    print(json.dumps({"status": status, "codes": codes, "errors": errors,
                      "max_open": max_open, "open_at_end": open_at_end,
                      "unanswered": pending}))


if __name__ == "__main__":
    main()
