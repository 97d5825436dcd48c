#!/usr/bin/env python3
"""An orchestrator loop that sends model-written code through sbx, with the Python client.

The shape of an agent calling a tool: a task with input records and a typed result, a model that
proposes code, a sandbox that runs each proposal fresh, and feedback (the failure, the schema's
complaint) for the next proposal. The "model" here is a list of canned proposals — the first
crashes, the second returns the wrong shape, the third is right — so the example runs offline:

    SBX=build/sbx python3 examples/agent/orchestrator.py          # prints each attempt, then the result
    SBX=build/sbx python3 examples/agent/orchestrator.py --check  # the same, exit 1 unless it converged

Replace `propose()` with a call to your model; nothing else changes.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
from sbx_client import ContractError, Sbx, SbxError  # noqa: E402

TASK = "Given wall-thickness readings, report the count, the thinnest point and its thickness."
INPUTS = [{"point": "CML-1", "thickness_mm": 9.8}, {"point": "CML-2", "thickness_mm": 9.1},
          {"point": "CML-3", "thickness_mm": 9.6}]
OUTPUT_SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["count", "point", "min_thickness_mm"],
    "properties": {"count": {"type": "integer", "minimum": 0}, "point": {"type": "string"},
                   "min_thickness_mm": {"type": "number"}},
}

PROPOSALS = [
    # 1: a typo — the sandbox reports the traceback.
    "import json\nrecs = json.load(open('/in/input.json'))\nprint(min(recs, key=lambda r: r['thickness']))\n",
    # 2: runs, but the result breaks the contract (a string count, an extra key).
    "import json\nrecs = json.load(open('/in/input.json'))\nw = min(recs, key=lambda r: r['thickness_mm'])\n"
    "json.dump({'count': str(len(recs)), 'point': w['point'], 'min_thickness_mm': w['thickness_mm'], 'note': 'ok'},"
    " open('/out/result.json', 'w'))\n",
    # 3: right.
    "import json\nrecs = json.load(open('/in/input.json'))\nw = min(recs, key=lambda r: r['thickness_mm'])\n"
    "json.dump({'count': len(recs), 'point': w['point'], 'min_thickness_mm': w['thickness_mm']},"
    " open('/out/result.json', 'w'))\n",
]


def propose(task, attempt, feedback):
    """Stands in for the model: the next proposal, given the task and the last feedback."""
    return PROPOSALS[attempt]


def main():
    check = "--check" in sys.argv[1:]
    sbx = Sbx(os.environ.get("SBX", "sbx"), state_dir=os.environ.get("SBX_STATE_DIR"), timeout=120)
    feedback = None
    for attempt in range(len(PROPOSALS)):
        code = propose(TASK, attempt, feedback)
        try:
            r = sbx.exec(code=code, inputs=INPUTS, limits={"timeout": "10s", "memory": "256M"},
                         output_schema=OUTPUT_SCHEMA)
        except ContractError as e:
            feedback = f"the result broke the contract: {e.message}"
        except SbxError as e:
            print(f"sbx refused the call: {e.message}", file=sys.stderr)
            return 1
        else:
            if r.ok:
                print(f"attempt {attempt + 1}: ok (run {r.run_id}, {r.usage.wall_ms} ms)")
                print(json.dumps(r.result, sort_keys=True))
                return 0
            tail = r.stderr.strip().splitlines()[-1:] or [f"exit code {r.exit_code}"]
            feedback = f"the program failed ({r.status}): {tail[0]}"
        print(f"attempt {attempt + 1}: {feedback}")
    print("no proposal converged", file=sys.stderr)
    return 1 if check else 0


if __name__ == "__main__":
    sys.exit(main())
