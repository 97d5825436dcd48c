"""sbx classify: the examples in examples/classify/ answer with their tier, the tier-4 profile it
writes runs a real sandbox, and bad or oversized input is refused with the JSON path (exit 125)."""
import json
import os
import pty
import select
import subprocess
import time

from sbxtest import SBX, SbxTestCase, sbx

# run.sh copies examples/classify beside the suite (the repository may not be readable by the
# rootless user).
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples-classify")


def example(name):
    return os.path.join(EXAMPLES, name)


class ClassifyExamples(SbxTestCase):
    def classify(self, name):
        r = sbx(["classify", "--json", example(name)])
        self.assertExit(r, 0, name)
        return json.loads(r.out)

    def test_database_read_is_tier_0_no_sandbox(self):
        c = self.classify("database-read.json")
        self.assertEqual(c["tier"], 0)
        self.assertEqual(c["sandbox"], "none")
        self.assertEqual([x["rule"] for x in c["reasons"]], ["no-code"])
        self.assertIsNone(c["profile"])
        self.assertEqual({x["rule"] for x in c["up"]}, {"trusted-in-request"})
        text = sbx(["classify", example("database-read.json")])
        self.assertExit(text, 0)
        self.assertTrue(text.out.startswith("tier 0: scoped API call"), text.out)
        self.assertIn("no sandbox: no code runs", text.out)

    def test_customer_rule_pack_is_tier_4_with_its_limits(self):
        c = self.classify("customer-rule-pack.json")
        self.assertEqual(c["tier"], 4)
        self.assertEqual(c["sandbox"], "sbx")
        self.assertEqual([x["rule"] for x in c["reasons"]], ["untrusted-code"])
        p = c["profile"]
        self.assertEqual(p["limits"]["memory"], "256M")
        self.assertEqual(p["limits"]["pids"], 32)
        self.assertEqual(p["limits"]["timeout"], "20s")
        self.assertEqual(p["limits"]["output_limit"], "4M")
        self.assertEqual(p["network"], {"mode": "none", "allow": [], "max_connections": 64, "max_bytes": "1G"})
        self.assertEqual(p["capabilities"]["keep"], [])
        self.assertEqual({x["rule"] for x in c["up"]},
                         {"kernel-features", "untrusted-long-lived", "untrusted-open-egress", "untrusted-gpu"})

    def test_model_analysis_is_tier_4_network_none(self):
        c = self.classify("model-analysis.json")
        self.assertEqual(c["tier"], 4)
        self.assertEqual(c["profile"]["network"]["mode"], "none")
        self.assertEqual(c["profile"]["env_pass"], ["ANALYSIS_RUN_ID"])
        self.assertTrue(any("spend" in n for n in c["notes"]), c["notes"])

    def test_long_lived_desktop_is_tier_5_a_vm(self):
        c = self.classify("long-lived-desktop.json")
        self.assertEqual(c["tier"], 5)
        self.assertEqual(c["sandbox"], "vm")
        self.assertEqual({x["rule"] for x in c["reasons"]}, {"untrusted-long-lived", "untrusted-open-egress"})
        self.assertIsNone(c["profile"])
        self.assertEqual(c["up"], [])
        self.assertIn("sbx is not enough", c["advice"])

    def test_tier_4_profile_runs_a_real_sandbox_with_its_limits(self):
        c = self.classify("model-analysis.json")
        prof = self.path("analysis.json")
        with open(prof, "w") as f:
            json.dump(c["profile"], f)
        env = dict(os.environ, ANALYSIS_RUN_ID="run-42")
        r = self.run_sbx(["sh", "-c", 'echo "id=$ANALYSIS_RUN_ID"; touch /usr/x 2>/dev/null || echo ro-root'],
                         opts=["--profile", prof], env=env)
        self.assertExit(r, 0, "the profile classify wrote must load and run")
        self.assertEqual(r.out, "id=run-42\nro-root\n")
        t = self.need_trace(r)
        self.assertEqual(t["invocation"]["spec"]["limits"]["memory_bytes"], 512 << 20)
        self.assertEqual(t["invocation"]["spec"]["limits"]["pids"], 64)
        self.assertEqual(t["invocation"]["spec"]["limits"]["timeout_ms"], 60000)
        self.assertEqual(t["invocation"]["spec"]["network"]["mode"], "none")
        self.assertEqual(t["invocation"]["spec"]["env_pass"], ["ANALYSIS_RUN_ID"])
        self.assertNotIn("run-42", json.dumps(t), "a credential's value reached the record")


class ClassifyInput(SbxTestCase):
    def write(self, doc):
        p = self.path("w.json")
        with open(p, "w") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        return p

    def test_bad_value_names_the_json_path(self):
        p = self.write({"code": "model-written", "network": "none", "lifetime": "task",
                        "limits": {"memory": "lots"}})
        r = sbx(["classify", p])
        self.assertExit(r, 125)
        line = self.assertOneSbxLine(r)
        self.assertIn(f"{p}: /limits/memory:", line)

    def test_unknown_key_and_bad_choice(self):
        r = sbx(["classify", self.write({"code": "untrusted", "netwerk": "none", "lifetime": "task"})])
        self.assertExit(r, 125)
        self.assertIn("/netwerk: unknown key (did you mean 'network'", self.assertOneSbxLine(r))
        r = sbx(["classify", self.write({"code": "sometimes", "network": "none", "lifetime": "task"})])
        self.assertExit(r, 125)
        self.assertIn("/code: 'sometimes' is not one of none, trusted, untrusted, model-written",
                      self.assertOneSbxLine(r))

    def test_not_json_and_oversized_and_deep(self):
        r = sbx(["classify", self.write("code: untrusted\n")])
        self.assertExit(r, 125)
        self.assertOneSbxLine(r)
        big = self.write({"code": "trusted", "network": "none", "lifetime": "task", "description": "x" * (80 << 10)})
        r = sbx(["classify", big])
        self.assertExit(r, 125)
        self.assertIn("larger than 64 KiB", self.assertOneSbxLine(r))
        r = sbx(["classify", self.write("[" * 100 + "]" * 100)])
        self.assertExit(r, 125)
        self.assertOneSbxLine(r)

    def test_stdin_dash_and_no_file_off_a_terminal(self):
        doc = json.dumps({"code": "trusted", "network": "none", "lifetime": "request"}).encode()
        r = sbx(["classify", "--json", "-"], input=doc)
        self.assertExit(r, 0)
        self.assertEqual(json.loads(r.out)["tier"], 1)
        r = sbx(["classify"])
        self.assertExit(r, 125)
        self.assertIn("give a workload file", self.assertOneSbxLine(r))

    def test_interactive_on_a_terminal(self):
        # The six questions on a pty, answered as a person would: trusted code in a task with a shell -> 3.
        answers = ["batch report", "trusted", "", "none", "task", "", "shell", "", "1G", "", "", "", ""]
        pid, fd = pty.fork()
        if pid == 0:
            os.execv(SBX, [SBX, "classify"])
        out = b""
        deadline = time.monotonic() + 20
        pending = list(answers)
        while time.monotonic() < deadline:
            r, _, _ = select.select([fd], [], [], 0.2)
            if r:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
                # One answer per prompt (each prompt ends with "? ").
                while pending and out.count(b"? ") > len(answers) - len(pending):
                    os.write(fd, pending.pop(0).encode() + b"\n")
        _, status = os.waitpid(pid, 0)
        text = out.decode(errors="replace")
        self.assertEqual(os.waitstatus_to_exitcode(status), 0, text)
        self.assertIn("tier 3: isolated process or container", text)
        self.assertIn("[trusted-needs-process]", text)
        self.assertIn('"memory": "1G"', text)
