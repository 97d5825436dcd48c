#!/usr/bin/env python3
"""Writes the lists of error stages from the one table of them.

runtime/base/stage.hpp's kStages is the set of values result.error.stage can take; this rewrites
from it the `"stage"` line under "definitions" in schemas/trace.schema.json (the enum that
result.error.stage refers to) and the list between the stages-begin/stages-end marks in
man/sbx.1, leaving the rest of each file as it is. Run it after adding a stage;
tests/unit/test_stage.cpp fails while the schema differs, `--check` (ctest stage_lists) while either does.

  tests/tools/gen_stage_enum.py [ROOT]          rewrite both
  tests/tools/gen_stage_enum.py [ROOT] --check  exit 1 if either is not what it would write
"""
import json
import os
import re
import sys

root = next((a for a in sys.argv[1:] if not a.startswith("--")), os.path.join(os.path.dirname(__file__), "../.."))
header = open(os.path.join(root, "runtime/base/stage.hpp")).read()
table = header[header.index("kStages[] = {"):header.index("};", header.index("kStages[] = {"))]
entries = re.findall(r'^\s*\{"([^"]+)", "((?:[^"\\]|\\.)*)"\},', table, re.M)
names = [n for n, _ in entries]
if not names:
    sys.exit("gen_stage_enum: no stages found in runtime/base/stage.hpp")
line = ('    "stage": {"description": "Where it failed: generated from runtime/base/stage.hpp (kStages) by '
        'tests/tools/gen_stage_enum.py.", "enum": ' + json.dumps(names) + "},\n")
path = os.path.join(root, "schemas/trace.schema.json")
text = open(path).read()
start = text.index('  "definitions": {\n') + len('  "definitions": {\n')
m = re.compile(r'    "stage": \{"description": "Where it failed[^\n]*\n').match(text, start)
new = text[:start] + line + (text[m.end():] if m else text[start:])
json.loads(new)  # still one JSON document

man_path = os.path.join(root, "man/sbx.1")
man = open(man_path).read()
begin = man.index(".\\\" stages-begin")
begin = man.index("\n", begin) + 1
end = man.index(".\\\" stages-end", begin)
rows = "".join(f".TP\n.B {n}\n{what[0].upper() + what[1:]}.\n" for n, what in entries)
new_man = man[:begin] + rows + man[end:]

if "--check" in sys.argv:
    stale = [p for p, a, b in (("schemas/trace.schema.json", new, text), ("man/sbx.1", new_man, man)) if a != b]
    sys.exit(0 if not stale else "gen_stage_enum: the stage list in " + " and ".join(stale) +
             " is stale: run tests/tools/gen_stage_enum.py")
open(path, "w").write(new)
open(man_path, "w").write(new_man)
print(f"gen_stage_enum: {len(names)} stages written to schemas/trace.schema.json and man/sbx.1")
