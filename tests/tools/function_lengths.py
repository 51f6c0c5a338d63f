#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""function_lengths.py — no function in the given folders is longer than MAX
lines (from the line that names it to its closing brace).

Usage: function_lengths.py [--max N] [--top K] DIR...
Prints the K longest functions, and every one over N; exits 1 when there is
one. Functions are found by brace matching on the source with comments,
strings and character literals blanked: a line at file scope that names a
function and opens its body (on it or the next lines).
"""
import argparse
import os
import re
import sys

DEF = re.compile(r"^[A-Za-z_][\w\s\*]*?\b([A-Za-z_]\w*)\s*\(")
NOT_FUNCTIONS = {"if", "for", "while", "switch", "return", "sizeof"}


def blank(text):
    """text with comments, strings and character literals blanked (lines kept)."""
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"'(?:\\.|[^'\\\n])*'", "' '", text)


def functions(path):
    """(name, first line, length) of each function defined at file scope."""
    lines = blank(open(path, errors="replace").read()).split("\n")
    out, i = [], 0
    while i < len(lines):
        m = DEF.match(lines[i])
        if m and m.group(1) not in NOT_FUNCTIONS and not lines[i].startswith("#"):
            j, depth, opened = i, 0, False
            while j < len(lines):
                if not opened and ";" in lines[j] and "{" not in lines[j]:
                    break  # a declaration
                depth += lines[j].count("{") - lines[j].count("}")
                opened = opened or "{" in lines[j]
                if opened and depth <= 0:
                    break
                j += 1
            if opened and j < len(lines):
                out.append((m.group(1), i + 1, j - i + 1))
                i = j
        i += 1
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max", type=int, default=120)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("dirs", nargs="+")
    a = ap.parse_args()
    found = []
    for d in a.dirs:
        for root, _, files in os.walk(d):
            for f in sorted(files):
                if f.endswith(".c"):
                    p = os.path.join(root, f)
                    found += [(n, p, line, name) for name, line, n in functions(p)]
    found.sort(reverse=True)
    for n, p, line, name in found[: a.top]:
        print(f"{n:5d} {p}:{line} {name}")
    over = [x for x in found if x[0] > a.max]
    for n, p, line, name in over:
        print(f"function_lengths: {p}:{line} {name} is {n} lines (at most {a.max})")
    if over:
        return 1
    print(f"function_lengths: {len(found)} functions, none over {a.max} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
