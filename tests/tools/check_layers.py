#!/usr/bin/env python3
"""runtime/ in layers (runtime/layers.cmake, docs/ARCHITECTURE.md): each folder is a layer that
may include only its own headers and those of the layers it names in DEPS, each declared before
it (so the layers form a line from base up, never a cycle). Inside a layer, no two units (X.hpp
with X.cpp) include each other: what both need goes in a unit beneath them (docs/ARCHITECTURE.md,
section 4); a unit's private half (PRIVATE_HALVES, its pimpl header) is part of that unit. Prints every include that
breaks this and exits 1; 0 when the tree holds. Usage: check_layers.py [SOURCE_DIR]"""
import os
import re
import sys

src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
runtime = os.path.join(src, "runtime")
text = open(os.path.join(runtime, "layers.cmake"), encoding="utf-8").read()
layers, deps, problems = [], {}, []
unit_uses = {}  # "layer/unit" -> {"layer/unit": "file:line"} it includes (own header aside)


# Private halves: a header that holds a unit's hidden type (its pimpl), part of that unit.
PRIVATE_HALVES = {"typed/schema_impl": "typed/schema_validate"}


def unit_of(layer, file_name):
    unit = f"{layer}/{file_name.rsplit('.', 1)[0]}"
    return PRIVATE_HALVES.get(unit, unit)

for m in re.finditer(r"^sbx_layer\((\w+)([^)]*)\)", text, re.M):
    name, args = m.group(1), m.group(2).split()
    named = args[args.index("DEPS") + 1:] if "DEPS" in args else []
    for keyword in ("SOURCES", "EXCLUDE"):
        named = named[:named.index(keyword)] if keyword in named else named
    for d in named:
        if d not in layers:
            problems.append(f"layers.cmake: {name} depends on {d}, which is not declared before it")
    layers.append(name)
    deps[name] = set(named)
if not layers:
    sys.exit("check_layers: no sbx_layer(...) in runtime/layers.cmake")

include = re.compile(r'^\s*#\s*include\s+"runtime/([^"]+)"')
for entry in sorted(os.listdir(runtime)):
    path = os.path.join(runtime, entry)
    if os.path.isfile(path):
        if entry != "layers.cmake":
            problems.append(f"runtime/{entry}: a file outside every layer (put it in one of {', '.join(layers)})")
        continue
    if entry not in deps:
        problems.append(f"runtime/{entry}/: a folder that is no layer in runtime/layers.cmake")
        continue
    for f in sorted(os.listdir(path)):
        if not f.endswith((".cpp", ".hpp")):
            continue
        for n, line in enumerate(open(os.path.join(path, f), encoding="utf-8"), 1):
            m = include.match(line)
            if not m:
                continue
            target = m.group(1)
            if "/" not in target:
                problems.append(f"runtime/{entry}/{f}:{n}: includes runtime/{target}, a path without its layer")
                continue
            layer = target.split("/", 1)[0]
            used = unit_of(layer, target.split("/", 1)[1])
            if used != unit_of(entry, f):
                unit_uses.setdefault(unit_of(entry, f), {}).setdefault(used, f"runtime/{entry}/{f}:{n}")
            if layer != entry and layer not in deps[entry]:
                how = "up" if layer in layers and layers.index(layer) > layers.index(entry) else "sideways"
                problems.append(f"runtime/{entry}/{f}:{n}: includes runtime/{target}: "
                                f"{entry} may include only {', '.join(sorted(deps[entry] | {entry}))} ({how})")
for a, uses in sorted(unit_uses.items()):
    for b, where in sorted(uses.items()):
        if a < b and a in unit_uses.get(b, {}):
            problems.append(f"{where}: units {a} and {b} include each other (also {unit_uses[b][a]}): "
                            "move what both need into a unit beneath them")
for p in problems:
    print(p)
print(f"check_layers: {len(layers)} layers, {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
