#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""dpkg_closure.py PKG... - the installed packages apt brings in with PKG...

Prints, one a line, PKG... and everything they depend on (Depends and
Pre-Depends, recursively), read from dpkg's status database of this machine
(no apt lists needed). For "a | b" the installed alternatives are followed.
An argument that is not installed is an error (exit 1): the closure would be
incomplete. Used by tests/deploy/test_packages.sh to ask "does installing
tools/packages/runtime.txt give every library the binaries link?".
"""
import re
import subprocess
import sys


def installed():
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package}\t${db:Status-Abbrev}\t${Provides}\t${Depends}\t${Pre-Depends}\n"],
        check=True, capture_output=True, text=True).stdout
    deps, provides = {}, {}
    for line in out.splitlines():
        name, status, prov, dep, pre = (line.split("\t") + ["", "", "", ""])[:5]
        if not status.startswith("ii"):
            continue
        deps[name] = ", ".join(x for x in (dep, pre) if x)
        for p in prov.split(","):
            p = re.sub(r"\s*\(.*\)", "", p).strip()
            if p:
                provides.setdefault(p, []).append(name)
    return deps, provides


def main():
    deps, provides = installed()
    want = [a.split(":")[0] for a in sys.argv[1:]]
    missing = [p for p in want if p not in deps]
    if missing:
        print("not installed: " + " ".join(missing), file=sys.stderr)
        return 1
    seen, todo = set(), list(want)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for clause in filter(None, (c.strip() for c in deps[p].split(","))):
            for alt in clause.split("|"):
                name = re.sub(r"\s*\(.*\)", "", alt).strip().split(":")[0]
                for cand in ([name] if name in deps else provides.get(name, [])):
                    todo.append(cand)
    print("\n".join(sorted(seen)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
