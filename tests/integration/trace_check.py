#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""trace_check.py - reads one trace from Jaeger's query API (a JSON file of
GET /api/traces/<id>) and checks one question's journey through the
pipeline: the spans of presign, ingest, preflight, stt, grade, materialize
and notify, each stage's span a child of the one before it (a retry attempt
a child of the attempt before), every parent present in the trace but the
root's, the provider calls children of their stage's span.

Usage: trace_check.py TRACE.json [--client-span ID] [--attempts STAGE=N]
  --client-span ID   the root's parent is the client's span ID (not in the trace)
  --attempts STAGE=N STAGE ran at least N times (its retries), each attempt
                     a child of the attempt before
Prints one line per finding; exits 0 when the journey is whole, 1 when it is
not (the first finding says where it breaks), 2 on usage errors.
"""
import json
import sys

CHAIN = ["presign", "ingest", "preflight", "stt", "grade"]
AFTER_GRADE = ["materialize", "notify"]
PROVIDERS = ["stt", "grade"]


def parent_of(span):
    for ref in span.get("references", []):
        if ref.get("refType") == "CHILD_OF":
            return ref["spanID"]
    return None


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    client_span = None
    attempts = {}
    i = 2
    while i < len(argv):
        if argv[i] == "--client-span" and i + 1 < len(argv):
            client_span = argv[i + 1]
            i += 2
        elif argv[i] == "--attempts" and i + 1 < len(argv):
            k, _, v = argv[i + 1].partition("=")
            attempts[k] = int(v)
            i += 2
        else:
            print("trace_check: unknown argument %s" % argv[i], file=sys.stderr)
            return 2
    with open(argv[1]) as f:
        doc = json.load(f)
    data = doc.get("data") or []
    if len(data) != 1:
        print("no trace (%d in the answer)" % len(data))
        return 1
    trace = data[0]
    procs = {k: v["serviceName"] for k, v in trace["processes"].items()}
    spans = {s["spanID"]: s for s in trace["spans"]}
    svc = lambda s: procs[s["processID"]].removeprefix("sluice-")
    bad = []

    # every parent is in the trace, but the root's (the client's span, or none)
    roots = []
    for s in spans.values():
        p = parent_of(s)
        if p is None or p not in spans:
            roots.append((s, p))
    want_root_parent = client_span
    if len(roots) != 1:
        bad.append("%d spans have no parent in the trace (%s), want 1 (presign's)" % (
            len(roots), ", ".join("%s:%s" % (svc(s), s["operationName"]) for s, _ in roots)))
    else:
        s, p = roots[0]
        if svc(s) != "presign":
            bad.append("the root is %s:%s, not presign's" % (svc(s), s["operationName"]))
        if p != want_root_parent:
            bad.append("the root's parent is %s, want %s" % (p, want_root_parent))

    # the stage spans, and the chain
    process = {}
    for s in spans.values():
        name = s["operationName"]
        if name.startswith("process ") or name == "POST /v1/submissions":
            process.setdefault(svc(s), []).append(s)
    prev = None
    for stage in CHAIN + AFTER_GRADE:
        ss = process.get(stage, [])
        if not ss:
            bad.append("no span of %s" % stage)
            prev = None if stage in CHAIN else prev
            continue
        want = attempts.get(stage, 1)
        if len(ss) < want:
            bad.append("%s ran %d time(s), want at least %d" % (stage, len(ss), want))
        if prev:
            prev_ids = {x["spanID"] for x in prev}
            own_ids = {x["spanID"] for x in ss}
            # the first attempt is a child of the stage before; each retry of an earlier attempt
            first = [x for x in ss if parent_of(x) in prev_ids]
            retries = [x for x in ss if parent_of(x) in own_ids]
            if not first:
                bad.append("no span of %s is a child of %s's" % (stage, svc(prev[0])))
            elif stage in AFTER_GRADE:  # they read every stage's statuses: one is grade's
                print("ok: %s (%d span(s), %d under grade)" % (stage, len(ss), len(first)))
            elif len(first) + len(retries) != len(ss):
                bad.append("%d span(s) of %s have another parent" % (
                    len(ss) - len(first) - len(retries), stage))
            else:
                print("ok: %s (%d span(s)) under %s" % (stage, len(ss), svc(prev[0])))
        if stage in CHAIN:
            prev = ss
    for stage in PROVIDERS:
        own = {x["spanID"] for x in process.get(stage, [])}
        calls = [s for s in spans.values()
                 if s["operationName"].startswith("call ") and svc(s) == stage]
        if not calls:
            bad.append("no provider call span in %s" % stage)
        elif not all(parent_of(c) in own for c in calls):
            bad.append("a provider call of %s is not a child of its span" % stage)
        else:
            print("ok: %s's %d provider call(s) are children of its spans" % (stage, len(calls)))
    for b in bad:
        print("broken: %s" % b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
