#!/usr/bin/env python3
"""Lengths of the functions in C++ files, longest first.

A function is a line at column 0 (namespace-level code is not indented in this repository) that
is not a preprocessor line, comment, or declaration ending in ';', and whose brace opens on it or
on a following line; it ends at the matching '}' at column 0. Strings, character literals and
comments are skipped when braces are counted. Methods defined in class bodies (indented) are not
counted: this is a guide for long free functions and out-of-class methods, not a parser.

  tests/tools/fn_lengths.py [-n N] FILE...     the N longest (default 10): lines, file:line, name
"""
import argparse
import re
import sys


def strip_code(line, state):
    """The line without strings, char literals and comments; state carries a /* */ across lines."""
    out = []
    i = 0
    n = len(line)
    while i < n:
        if state["block"]:
            j = line.find("*/", i)
            if j < 0:
                return "".join(out)
            state["block"] = False
            i = j + 2
            continue
        c = line[i]
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        m = re.match(r'R"([^(]*)\(', line[i:])
        if m:  # raw string on one line only (enough for this code base)
            end = line.find(")" + m.group(1) + '"', i + m.end())
            i = n if end < 0 else end + len(m.group(1)) + 2
            continue
        if c in "\"'":
            j = i + 1
            while j < n and line[j] != c:
                j += 2 if line[j] == "\\" else 1
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


HEAD = re.compile(r"^[A-Za-z_~].*\(")
SKIP = re.compile(r"^(namespace|class|struct|enum|union|extern|using|typedef|template\s*<[^>]*>\s*(class|struct))\b")


def functions(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    state = {"block": False}
    code = [strip_code(l, state) for l in lines]
    out = []
    i = 0
    while i < len(code):
        line = code[i]
        if HEAD.match(line) and not SKIP.match(line) and not line.startswith("#"):
            # find the opening brace (the head may wrap); stop at ';' (a declaration)
            j = i
            depth_paren = 0
            opened = None
            while j < len(code) and j < i + 12:
                seg = code[j]
                for ch in seg:
                    if ch == "(":
                        depth_paren += 1
                    elif ch == ")":
                        depth_paren -= 1
                    elif ch == ";" and depth_paren == 0:
                        opened = -1
                        break
                    elif ch == "{" and depth_paren == 0:
                        opened = j
                        break
                if opened is not None:
                    break
                j += 1
            if opened is None or opened < 0:
                i += 1
                continue
            depth = 0
            k = opened
            end = None
            while k < len(code):
                for ch in code[k] if k != opened else code[k][code[k].index("{"):]:
                    if ch == "{":
                        depth += 1
                    elif ch == "}":
                        depth -= 1
                        if depth == 0:
                            end = k
                            break
                if end is not None:
                    break
                k += 1
            if end is None:
                break
            name = re.sub(r"\s+", " ", lines[i].split("(")[0]).strip().split(" ")[-1]
            out.append((end - i + 1, f"{path}:{i + 1}", name))
            i = end + 1
            continue
        i += 1
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=10)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    fns = []
    for p in a.files:
        fns.extend(functions(p))
    fns.sort(key=lambda t: -t[0])
    for length, where, name in fns[: a.n]:
        print(f"{length:5d}  {where}  {name}")


if __name__ == "__main__":
    sys.exit(main())
