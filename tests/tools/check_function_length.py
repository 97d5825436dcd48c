#!/usr/bin/env python3
"""No function over 80 lines in sbx's product code (cli/, runtime/, init/; tests are not checked).

A long function is a place where several decisions hide in one body, out of reach of a unit test
(docs/ARCHITECTURE.md: runtime/ decides and is unit-tested, cli/ parses and prints). A function's
length is counted from the line its body's '{' is on (the signature's last line, as this code base
writes it) to its closing '}', both included. Lambdas and local classes count toward the function
that holds them.

How functions are found (a brace scanner, not a C++ parser): comments, string and character
literals and raw strings are blanked first; then every '{' is classified by the text before it
since the last '{', '}' or ';': a namespace, class, struct, union, enum or extern "C" body is a
scope (its functions, in-class methods included, are found inside it); a '{' after ')' (with
const, noexcept, override, a trailing return type or a constructor's initialiser list between) is
a function body, unless an '=' precedes it (an initialiser); anything else is a block of whatever
holds it. Only outermost function bodies are counted.

Usage:
  check_function_length.py [--max N] [SOURCE_DIR]   every function over N lines (default 80) under
                                                    SOURCE_DIR's cli/, runtime/, init/; exit 1 if any
  check_function_length.py --list K FILE...         the K longest functions in FILEs, no verdict
Output lines are "LINES FILE:LINE NAME", longest first.
"""
import argparse
import os
import re
import sys

PRODUCT_DIRS = ("cli", "runtime", "init")
SOURCE_EXT = (".c", ".cc", ".cpp", ".h", ".hpp")


def blank(src):
    """`src` with comments and literals replaced by spaces (newlines kept, so lines still count)."""
    out = []
    i, n = 0, len(src)
    spaces = lambda s: re.sub(r"[^\n]", " ", s)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(spaces(src[i:j]))
            i = j
        elif src.startswith('R"', i) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', src[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = src.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + spaces(src[i + 2:j]))
            i = j
        elif c in "\"'":
            # A digit separator (1'000'000) is no character literal.
            if c == "'" and i > 0 and src[i - 1].isalnum() and src[i - 1] not in "uULR8":
                out.append(c)
                i += 1
                continue
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(c + spaces(src[i + 1:j]) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


SCOPE = [
    re.compile(r'(^|\s)(namespace\b[^(]*|extern "C"\s*)$'),
    re.compile(r"^(template ?<.*> ?)?(class|struct|union|enum)\b[^()=]*$"),
]
CLASS_HEAD = re.compile(r"(class|struct|union)\s+\w+[^()=]*$")
FUNCTION_HEAD = [
    re.compile(r"\)\s*(const|noexcept|override|final|mutable|&|&&|\s)*(->\s*[\w:<>,\s\*&]+)?$"),
    re.compile(r"\)\s*:\s*.*$"),  # a constructor's initialiser list
]


def kind_of(head):
    """'scope', 'func' or 'other' for the '{' that `head` (normalised) precedes."""
    if any(p.search(head) for p in SCOPE) or (CLASS_HEAD.search(head) and "(" not in head):
        return "scope"
    if any(p.search(head) for p in FUNCTION_HEAD) and not re.search(r"=\s*$", head) and not head.startswith("="):
        return "func"
    return "other"


def functions(path):
    """(lines, path, line, name) for every outermost function body in `path`."""
    with open(path, encoding="utf-8", errors="replace") as f:
        s = blank(f.read())
    found, stack, last = [], [], 0  # stack: (kind, offset of '{', name)
    for m in re.finditer(r"[{};]", s):
        ch, at = m.group(), m.start()
        if ch == "{":
            head = re.sub(r"\s+", " ", s[last:at]).strip()
            in_function = any(k == "func" for k, _, _ in stack)
            kind = "other" if in_function else kind_of(head)
            names = re.findall(r"([~\w:]+)\s*\(", head)
            stack.append((kind, at, names[0] if names else "?"))
        elif ch == "}" and stack:
            kind, start, name = stack.pop()
            if kind == "func" and not any(k == "func" for k, _, _ in stack):
                first, end = s.count("\n", 0, start), s.count("\n", 0, at)
                found.append((end - first + 1, path, first + 1, name))
        last = at + 1
    return found


def product_files(root):
    for d in PRODUCT_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, d)):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(SOURCE_EXT):
                    yield os.path.join(dirpath, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max", type=int, default=80, help="the most lines a function may have (default 80)")
    ap.add_argument("--list", type=int, metavar="K", help="print the K longest functions of the paths given, no verdict")
    ap.add_argument("paths", nargs="*", help="SOURCE_DIR (default: this checkout), or FILEs with --list")
    a = ap.parse_args()
    if a.list is not None:
        fns = sorted((f for p in a.paths for f in functions(p)), key=lambda t: -t[0])
        for length, path, line, name in fns[: a.list]:
            print(f"{length} {path}:{line} {name}")
        return 0
    root = a.paths[0] if a.paths else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    long_ones = sorted((f for p in product_files(root) for f in functions(p) if f[0] > a.max), key=lambda t: -t[0])
    for length, path, line, name in long_ones:
        print(f"{length} {os.path.relpath(path, root)}:{line} {name}")
    if long_ones:
        print(f"check_function_length: {len(long_ones)} function(s) over {a.max} lines: split each into named "
              f"phases (docs/ARCHITECTURE.md)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
