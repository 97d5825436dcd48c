#!/usr/bin/env python3
"""Writes the deeply nested JSON inputs that crash sbx today (stack overflow; open, owned by the
JSON depth-limit work), one per reader, into the directory given (default: .):

  spec-merge-patch.json  a profile: sbx::merge_patch recurses per level (runtime/spec.cpp)
  exec-inputs.json       an exec request: nlohmann's recursive copy of "inputs" (runtime/exec.cpp)
  pack-limits.json       pack.json: the recursive copy of a limits value (runtime/pack.cpp)
  exec-schema.json       an exec request's output_schema: schema compilation recursion
                         (runtime/schema_validate.cpp)

Replay: build-fuzz/tests/fuzz/fuzz_spec spec-merge-patch.json (fuzz_exec, fuzz_pack likewise), or
the release binary: sbx run --profile spec-merge-patch.json -- /bin/true; sbx exec < exec-inputs.json
(both end in SIGSEGV, exit 139, on the main of 2026-12-01). Once each reader bounds its depth,
move the files to tests/fuzz/corpus/TARGET/ so that every fuzz run replays them."""
import os
import sys

out = sys.argv[1] if len(sys.argv) > 1 else "."
n, m = 200000, 100000
files = {
    "spec-merge-patch.json": '{"env":' + '{"a":' * n + "1" + "}" * n + "}",
    "exec-inputs.json": '{"language":"sh","code":"","inputs":' + "[" * m + "]" * m + "}",
    "pack-limits.json": '{"name":"a","version":"1","entrypoint":["x"],"limits":{"timeout":' + "[" * m + "]" * m + "}}",
    "exec-schema.json": '{"language":"sh","code":"","output_schema":' + '{"not":' * 20000 + "{}" + "}" * 20000 + "}",
}
for name, text in files.items():
    with open(os.path.join(out, name), "w") as f:
        f.write(text)
