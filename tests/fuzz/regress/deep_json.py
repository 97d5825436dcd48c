#!/usr/bin/env python3
"""Writes the deeply nested JSON inputs that crashed sbx (stack overflow, exit 139) before every
reader bounded its depth (runtime/base/json_io.hpp), one per reader, into the directory given
(default: .):

  spec-merge-patch.json  a profile: sbx::merge_patch recursed per level (runtime/model/spec.cpp)
  exec-inputs.json       an exec request: nlohmann's recursive copy of "inputs" (runtime/typed/exec.cpp)
  pack-limits.json       pack.json: the recursive copy of a limits value (runtime/typed/pack.cpp)
  exec-schema.json       an exec request's output_schema: schema compilation recursion

Now each is a clean error (125, or a problem of pack validate) naming the JSON pointer; the
integration tests (tests/integration/test_hostile_json.py) hold the same shapes. Replay by hand:
sbx run --profile spec-merge-patch.json -- /bin/true; sbx exec < exec-inputs.json. They are
generated, not kept, because they are megabytes each."""
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
