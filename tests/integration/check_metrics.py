# SPDX-License-Identifier: Apache-2.0
"""Checks real /metrics scrapes and the deploy/ files that query them.

usage: check_metrics.py ROOT SCRAPE_FILE...

1. Every scrape parses with the Prometheus client's own text-format parser
   (prometheus_client.parser), and every histogram is consistent: buckets
   cumulative and ascending in le, a +Inf bucket equal to _count.
2. deploy/prometheus/alerts.yaml: YAML with groups of rules; every rule has
   alert, expr, labels.severity and annotations summary/runbook_url; the
   runbook_url names a heading of docs/operations.md; the expression is
   balanced and uses only known PromQL functions and metric names that the
   scrapes export.
3. deploy/grafana/sluice.json: valid JSON; every panel target's expression
   passes the same check.
Prints one line per check and "N passed, M failed"; exits 1 on any failure.
"""
import json
import re
import sys

import yaml
from prometheus_client.parser import text_string_to_metric_families

PROMQL_FUNCS = {
    "rate", "irate", "increase", "sum", "max", "min", "avg", "count", "by", "without",
    "histogram_quantile", "max_over_time", "min_over_time", "avg_over_time",
    "last_over_time", "absent", "on", "unless", "and", "or", "ignoring", "group_left",
    "group_right", "clamp_min", "clamp_max", "topk", "bottomk", "delta", "deriv",
}

passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok: {what}")
    else:
        failed += 1
        print(f"FAIL: {what}")


def slug(heading):
    """GitHub's anchor for a Markdown heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def balanced(expr):
    pairs = {")": "(", "]": "[", "}": "{"}
    stack = []
    in_str = False
    for ch in expr:
        if ch == '"':
            in_str = not in_str
            continue
        if in_str:
            continue
        if ch in "([{":
            stack.append(ch)
        elif ch in pairs:
            if not stack or stack.pop() != pairs[ch]:
                return False
    return not stack and not in_str


def expr_problems(expr, exported):
    problems = []
    if not balanced(expr):
        problems.append("unbalanced brackets or quotes")
    no_strings = re.sub(r'"[^"]*"', '""', expr)
    no_labels = re.sub(r"\{[^}]*\}", "{}", no_strings)
    for name in re.findall(r"\b(sluice_[a-zA-Z0-9_]+)", no_labels):
        if name not in exported:
            problems.append(f"metric {name} is not exported")
    for fn in re.findall(r"\b([a-z_]+)\s*\(", no_labels):
        if not fn.startswith("sluice_") and fn not in PROMQL_FUNCS:
            problems.append(f"unknown function {fn}")
    return problems


def main():
    root = sys.argv[1]
    exported = set()
    for path in sys.argv[2:]:
        text = open(path).read()
        try:
            fams = list(text_string_to_metric_families(text))
            check(True, f"{path} parses ({len(fams)} families)")
        except Exception as e:  # the parser's verdict is the check
            check(False, f"{path} parses: {e}")
            continue
        for f in fams:
            check(f.name.startswith("sluice_"), f"{f.name} has the sluice_ prefix")
            exported.add(f.name)
            if f.type == "counter":
                exported.add(f.name + "_total")
            for s in f.samples:
                exported.add(s.name)
            if f.type != "histogram":
                continue
            series = {}
            for s in f.samples:
                key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                series.setdefault(key, {"buckets": [], "count": None})
                if s.name.endswith("_bucket"):
                    series[key]["buckets"].append((float(s.labels["le"]), s.value))
                elif s.name.endswith("_count"):
                    series[key]["count"] = s.value
            for key, d in series.items():
                b = d["buckets"]
                les = [x[0] for x in b]
                counts = [x[1] for x in b]
                ok = (les == sorted(les) and les and les[-1] == float("inf")
                      and counts == sorted(counts) and counts[-1] == d["count"])
                check(ok, f"histogram {f.name}{dict(key)} is cumulative with +Inf == _count")

    ops = open(f"{root}/docs/operations.md").read()
    anchors = {slug(h) for h in re.findall(r"^#+\s+(.*)$", ops, re.M)}

    rules = yaml.safe_load(open(f"{root}/deploy/prometheus/alerts.yaml"))
    names = []
    for g in rules["groups"]:
        check(isinstance(g.get("name"), str) and g.get("rules"), f"rule group {g.get('name')}")
        for r in g["rules"]:
            a = r.get("alert")
            names.append(a)
            check(isinstance(a, str) and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", a or ""),
                  f"alert name {a}")
            check(isinstance(r.get("expr"), str), f"{a}: has expr")
            check(re.fullmatch(r"\d+[smh]", str(r.get("for", "0m"))) is not None,
                  f"{a}: for is a duration")
            check(r.get("labels", {}).get("severity") in ("page", "ticket"),
                  f"{a}: severity page or ticket")
            ann = r.get("annotations", {})
            check(bool(ann.get("summary")), f"{a}: has a summary")
            url = ann.get("runbook_url", "")
            m = re.fullmatch(r"docs/operations\.md#([\w-]+)", url)
            check(m is not None and m.group(1) in anchors,
                  f"{a}: runbook_url {url} names a section of docs/operations.md")
            probs = expr_problems(r.get("expr", ""), exported)
            check(not probs, f"{a}: expr ok {probs if probs else ''}")
    check(len(names) == len(set(names)) and len(names) >= 4, f"{len(names)} distinct alerts")

    dash = json.load(open(f"{root}/deploy/grafana/sluice.json"))
    check(dash.get("uid") and dash.get("panels"), "dashboard has a uid and panels")
    nexpr = 0
    for p in dash["panels"]:
        for t in p.get("targets", []):
            nexpr += 1
            probs = expr_problems(t.get("expr", ""), exported)
            check(not probs, f"panel '{p.get('title')}' {t.get('refId')}: expr ok "
                  f"{probs if probs else ''}")
    check(nexpr >= 10, f"dashboard queries {nexpr} expressions")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
