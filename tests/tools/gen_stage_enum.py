#!/usr/bin/env python3
"""Writes the trace schema's list of error stages from the one table of them.

runtime/base/stage.hpp's kStages is the set of values result.error.stage can take; this rewrites
the `"stage"` line under "definitions" in schemas/trace.schema.json (the enum that
result.error.stage refers to) from it, leaving the rest of the file as it is. Run it after adding a
stage; tests/unit/test_stage.cpp fails while the two differ.

  tests/tools/gen_stage_enum.py [ROOT]        rewrite the schema
  tests/tools/gen_stage_enum.py [ROOT] --check  exit 1 if the schema is not what it would write
"""
import json
import os
import re
import sys

root = next((a for a in sys.argv[1:] if not a.startswith("--")), os.path.join(os.path.dirname(__file__), "../.."))
header = open(os.path.join(root, "runtime/base/stage.hpp")).read()
table = header[header.index("kStages[] = {"):header.index("};", header.index("kStages[] = {"))]
names = re.findall(r'^\s*\{"([^"]+)", "', table, re.M)
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
if "--check" in sys.argv:
    sys.exit(0 if new == text else "gen_stage_enum: schemas/trace.schema.json's stage list is stale: run tests/tools/gen_stage_enum.py")
open(path, "w").write(new)
print(f"gen_stage_enum: {len(names)} stages written to schemas/trace.schema.json")
