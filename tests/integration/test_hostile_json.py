"""Hostile JSON and hostile bytes: every JSON document sbx reads is bounded in size and depth, every
string it records is valid UTF-8 (invalid bytes escaped as \\xHH and listed in "escaped_strings"),
malformed profiles are clean errors, and the typed contract owns stdout. Runs as root and rootless.

What the caller gave is exit 125 with one line on stderr (sbx exec: a JSON error response on stdout);
what the sandbox produced is output_invalid (exit 65 for pack run; a response for exec), with a JSON
pointer and the reason in the record."""
import json
import os

from sbxtest import SbxTestCase, ledger_lines, sbx, validate_trace

DEPTH_LIMIT = 128


def deep_array(n):
    return "[" * n + "]" * n


def write(path, text, mode=0o644):
    with open(path, "w" if isinstance(text, str) else "wb") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


# /out/result.json of 200,000 nested arrays, written from inside the sandbox.
DEEP_RESULT_SH = ("head -c 200000 /dev/zero | tr '\\0' '[' > /out/result.json\n"
                  "head -c 200000 /dev/zero | tr '\\0' ']' >> /out/result.json\n")


class HostileCase(SbxTestCase):
    def make_pack(self, script, name="p", out_schema=None):
        d = self.path(name)
        os.makedirs(d + "/schemas")
        os.chmod(d, 0o755)
        os.chmod(d + "/schemas", 0o755)
        manifest = {"name": "t-" + name, "version": "1", "entrypoint": ["/bin/sh", "/pack/run.sh"],
                    "input_schema": "schemas/in.json", "output_schema": "schemas/out.json",
                    "limits": {"timeout": "20s"}}
        if out_schema is None:
            out_schema = {"type": "object", "required": ["count"], "properties": {"count": {"type": "integer"}}}
        for rel, content in (("pack.json", json.dumps(manifest)), ("schemas/in.json", json.dumps({"type": "object"})),
                             ("schemas/out.json", json.dumps(out_schema)), ("run.sh", script)):
            write(os.path.join(d, rel), content)
        return d

    def pack_run(self, d, records_text):
        inp = write(self.path(f"records-{self._n}.json"), records_text)
        return self.sbx_traced(["pack", "run", d, "--input", inp], timeout=60)

    def exec(self, req_bytes):
        return sbx(["exec"], input=req_bytes, timeout=60)


class DeepJsonFromTheCaller(HostileCase):
    def test_exec_request_nested_60000_deep_is_a_json_error(self):
        req = '{"language": "sh", "code": "true", "inputs": ' + deep_array(60000) + "}"
        r = self.exec(req.encode())
        self.assertExit(r, 125)
        resp = json.loads(r.out)
        msg = resp["error"]["message"]
        self.assertIn("nested deeper than 128 levels", msg)
        self.assertIn("/inputs" + "/0" * (DEPTH_LIMIT - 1), msg)

    def test_profile_nested_100000_deep_is_exit_125(self):
        # Objects: the layering of profiles (an RFC 7386 merge patch) recursed once per level.
        p = write(self.path("deep.json"), '{"x": ' * 100000 + "1" + "}" * 100000)
        r = sbx(["run", "--profile", p, "--", "/bin/true"])
        self.assertExit(r, 125)
        line = self.assertOneSbxLine(r)
        self.assertIn(p, line)
        self.assertIn(": " + "/x" * DEPTH_LIMIT + ": nested deeper", line)
        self.assertIn("nested deeper than 128 levels", line)

    def test_seccomp_policy_nested_deep_is_exit_125(self):
        p = write(self.path("seccomp.json"), '{"syscalls": ' + deep_array(100000) + "}")
        r = sbx(["run", "--seccomp", p, "--", "/bin/true"])
        self.assertExit(r, 125)
        line = self.assertOneSbxLine(r)
        self.assertIn("nested deeper than 128 levels", line)

    def test_pack_manifest_nested_deep_is_exit_125(self):
        d = self.make_pack("true\n")
        write(os.path.join(d, "pack.json"), '{"name": ' + deep_array(100000) + "}")
        r = sbx(["pack", "validate", d])
        self.assertExit(r, 125)
        self.assertIn("pack.json#/name/0/0", r.err)
        self.assertIn("nested deeper than 128 levels", r.err)

    def test_pack_records_nested_deep_are_input_invalid(self):
        d = self.make_pack("echo '{\"count\": 1}' > /out/result.json\n")
        r = self.pack_run(d, "[" + deep_array(200000) + "]")
        self.assertExit(r, 65)
        self.assertEqual(r.trace["result"]["status"], "input_invalid")
        err = r.trace["validation"]["input"]["errors"][0]
        self.assertTrue(err["pointer"].startswith("/0/0/0"), err)
        self.assertEqual(err["message"], "nested deeper than 128 levels")

    def test_records_file_is_size_capped(self):
        d = self.make_pack("true\n")
        # A sparse 65 MiB file: the cap is checked while reading, not by trusting its size.
        big = self.path("big.json")
        with open(big, "wb") as f:
            f.truncate(65 << 20)
        os.chmod(big, 0o644)
        r = sbx(["pack", "run", d, "--input", big], timeout=60)
        self.assertExit(r, 125)
        self.assertIn("larger than 64 MiB", self.assertOneSbxLine(r))


class MalformedExecRequests(HostileCase):
    def test_every_malformed_request_is_a_json_error_and_one_line(self):
        sh = {"language": "sh", "code": "true"}
        shapes = [b"", b"x", b'"x"', b"null", b"[1]", b'{"language": "sh", "code": "true"', b"\xff",
                  b'{"language": "sh", "code": "\xff"}', b'{"language": "sh", "code": "true"} 1']
        for extra in ({"language": 5}, {"language": "\u0000"}, {"code": []}, {"code": None}, {"files": []},
                      {"files": {"a": 5}}, {"files": {"/etc/x": ""}}, {"files": {"a/../../b": ""}},
                      {"files": {"main.sh": ""}}, {"limits": []}, {"limits": {"timeout": {}}},
                      {"limits": {"memory_bytes": -1}}, {"limits": {"timeout_ms": 1e308}},
                      {"limits": {"pids": 18446744073709551615}}, {"limits": {"nope": 1}},
                      # A bare number under a key without its unit (units.hpp):
                      {"limits": {"timeout": 10}}, {"limits": {"memory": 256}},
                      # Out of range for what sbx computes with (deadlines, cgroup files):
                      {"limits": {"timeout_ms": 9223372036854775807}}, {"limits": {"pids": 99999999999}},
                      {"output_schema": 5}, {"output_schema": {"type": 5}}, {"nope": 1}):
            shapes.append(json.dumps(dict(sh, **extra)).encode())
        for req in shapes:
            r = self.exec(req)
            self.assertExit(r, 125, req[:100])
            resp = json.loads(r.out)
            self.assertEqual(set(resp), {"error"}, req[:100])
            self.assertIn("message", resp["error"])
            self.assertEqual(len(r.err.splitlines()), 1, r.describe())


class DeepJsonFromTheSandbox(HostileCase):
    def test_pack_result_of_200000_nested_arrays_is_output_invalid(self):
        # A schema that accepts anything: the result would be handed on (and dumped) if parsed.
        d = self.make_pack(DEEP_RESULT_SH, out_schema={})
        r = self.pack_run(d, "[{}]")
        self.assertExit(r, 65)
        self.assertEqual(r.stdout, b"")
        self.assertIsNotNone(r.trace, "the run's record must still be written")
        self.assertEqual(r.trace["result"]["status"], "output_invalid")
        out = r.trace["validation"]["output"]
        self.assertEqual(out["errors"][0]["pointer"], "/0" * DEPTH_LIMIT)
        self.assertEqual(out["errors"][0]["message"], "nested deeper than 128 levels")
        self.assertEqual(out["bounds"]["max_depth"], DEPTH_LIMIT)
        self.assertIn("nested deeper than 128 levels", r.err)

    def test_exec_result_of_200000_nested_arrays_is_output_invalid(self):
        r = self.exec(json.dumps({"language": "sh", "code": DEEP_RESULT_SH}).encode())
        self.assertExit(r, 0)
        resp = json.loads(r.out)
        self.assertEqual(resp["status"], "output_invalid")
        self.assertIsNone(resp["result"])
        self.assertEqual(resp["result_errors"][0]["pointer"], "/0" * DEPTH_LIMIT)
        self.assertIn("nested deeper", resp["result_errors"][0]["message"])

    def test_trace_store_with_a_deep_record_still_lists(self):
        state = self.path("state")
        ok = sbx(["--state-dir", state, "run", "--", "/bin/true"])
        self.assertExit(ok, 0)
        traces = os.path.join(state, "traces")
        good = [e["run_id"] + ".json" for e in ledger_lines(state)]
        self.assertEqual(len(good), 1)
        # A record of the previous store format (one file per run), nested too deep.
        bad_id = "20000101T000000.000Z-deadbeef"
        write(os.path.join(traces, bad_id + ".json"),
              '{"schema": "sbx.trace/v1", "result": ' + deep_array(200000) + "}", 0o600)
        ls = sbx(["--state-dir", state, "trace", "ls"])
        self.assertExit(ls, 1)  # every readable run listed; 1: something was left out (man sbx)
        self.assertIn(good[0][:-5], ls.out)
        self.assertIn("nested deeper", ls.err)
        show = sbx(["--state-dir", state, "trace", "show", bad_id])
        self.assertExit(show, 125)
        self.assertIn("nested deeper than 128 levels", self.assertOneSbxLine(show))


class InvalidUtf8(HostileCase):
    def test_run_with_invalid_utf8_argument_records_it_escaped(self):
        arg = os.fsdecode(b"\xff")
        latin1 = os.fsdecode(b"caf\xe9\\")
        r = self.run_sbx(["/bin/sh", "-c", "echo ran; exit 5", arg, latin1])
        self.assertEqual(r.stdout, b"ran\n")
        self.assertExit(r, 5)
        self.assertIsNotNone(r.trace, "the record must be written")
        argv = r.trace["invocation"]["spec"]["argv"]
        self.assertEqual(argv[-2:], ["\\xff", "caf\\xe9\\x5c"])
        self.assertIn("/invocation/spec/argv/3", r.trace["escaped_strings"])
        self.assertIn("/invocation/spec/argv/4", r.trace["escaped_strings"])

    def test_env_with_invalid_utf8_reaches_the_program_raw(self):
        r = self.run_sbx(["/bin/sh", "-c", 'printf %s "$X"'], opts=["--env", os.fsdecode(b"X=\xff\xfe")])
        self.assertExit(r, 0)
        self.assertEqual(r.stdout, b"\xff\xfe")
        self.assertEqual(r.trace["invocation"]["spec"]["env"]["X"], "\\xff\\xfe")
        self.assertIn("/invocation/spec/env/X", r.trace["escaped_strings"])

    def test_exec_output_is_escaped_losslessly(self):
        r = self.exec(json.dumps({"language": "sh", "code": "printf 'a\\377b\\\\c'; printf '\\376' >&2"}).encode())
        self.assertExit(r, 0)
        resp = json.loads(r.out)
        self.assertEqual(resp["stdout"], "a\\xffb\\x5cc")
        self.assertEqual(resp["stderr"], "\\xfe")
        self.assertEqual(sorted(resp["escaped_strings"]), ["/stderr", "/stdout"])


class MalformedProfiles(HostileCase):
    def test_input_without_a_name_is_exit_125_naming_file_and_key(self):
        p = write(self.path("p.json"), '{"inputs": [{"src": "/"}]}')
        r = sbx(["run", "--profile", p, "--", "/bin/true"])
        self.assertExit(r, 125)
        line = self.assertOneSbxLine(r)
        self.assertIn(p, line)
        self.assertIn("/inputs/0/dst", line)

    def test_other_bad_values_name_their_pointer(self):
        for text, pointer in (('{"limits": {"timeout_ms": 9223372036854775807}}', "/limits/timeout_ms"),
                              ('{"uid": 18446744073709551615}', "/uid"),
                              ('{"env_pass": [1]}', "/env_pass/0"),
                              ('{"tmpfs": [{"dst": "/t", "size_bytes": -1}]}', "/tmpfs/0/size_bytes"),
                              # A NUL would cut the path the kernel sees to "/tmp".
                              ('{"binds": [{"src": "/tmp\\u0000/../etc", "dst": "/d"}]}', "/binds/0/src")):
            p = write(self.path("q.json"), text)
            r = sbx(["run", "--profile", p, "--", "/bin/true"])
            self.assertExit(r, 125, text)
            line = self.assertOneSbxLine(r)
            self.assertIn(p + ": " + pointer + ":", line)


class ContractOwnsStdout(HostileCase):
    def test_pack_stdout_carries_only_the_validated_result(self):
        d = self.make_pack("echo '{\"count\": 999}'\necho 'free text'\necho '{\"count\": 2}' > /out/result.json\n")
        r = self.pack_run(d, "[{}]")
        self.assertExit(r, 0)
        self.assertEqual(json.loads(r.stdout), {"count": 2})
        self.assertNotIn(b"999", r.stdout)
        self.assertIn(b'{"count": 999}', r.stderr)
        self.assertIn(b"free text", r.stderr)


class InvalidUtf8Documents(HostileCase):
    """Every JSON document sbx prints or stores, not just the trace, survives bytes that are not UTF-8."""

    def test_dry_run_prints_the_spec_escaped(self):
        r = sbx(["run", "--dry-run", "--", "/bin/echo", os.fsdecode(b"\xff")])
        self.assertExit(r, 0)
        spec = json.loads(r.out)
        self.assertEqual(spec["argv"], ["/bin/echo", "\\xff"])
        self.assertEqual(spec["escaped_strings"], ["/argv/1"])

    def test_profile_show_of_a_file_at_a_non_utf8_path(self):
        p = write(os.fsdecode(os.fsencode(self.tmp) + b"/prof\xe9.json"), '{"limits": {"timeout_ms": 1000}}')
        r = sbx(["profile", "show", p])
        self.assertExit(r, 0)
        doc = json.loads(r.out)
        self.assertTrue(doc["origin"].endswith("/prof\\xe9.json"), doc["origin"])
        self.assertIn("/origin", doc["escaped_strings"])

    def test_image_import_from_a_non_utf8_path(self):
        src = os.fsencode(self.tmp) + b"/tree\xff"
        os.makedirs(src + b"/bin")
        write(os.fsdecode(src + b"/bin/x"), "hi\n")
        state = self.path("state")
        r = sbx(["--state-dir", state, "image", "import", os.fsdecode(src), "--name", "t"], timeout=120)
        self.assertExit(r, 0)
        r = sbx(["--state-dir", state, "image", "inspect", "t"])
        self.assertExit(r, 0)
        meta = json.loads(r.out)
        self.assertTrue(meta["source"].endswith("/tree\\xff"), meta["source"])


class ContractErrorsAreCapped(HostileCase):
    def test_ten_thousand_bad_records_list_100_errors_and_count_the_rest(self):
        d = self.make_pack("true\n")
        with open(self.path("s.json"), "w") as f:
            json.dump({"type": "object", "required": ["id"]}, f)
        os.replace(self.path("s.json"), os.path.join(d, "schemas/in.json"))
        os.chmod(os.path.join(d, "schemas/in.json"), 0o644)
        r = self.pack_run(d, json.dumps([{}] * 10000))
        self.assertExit(r, 65)
        lines = [l for l in r.err.splitlines() if l.startswith("sbx: input_invalid:")]
        self.assertEqual(len(lines), 101, r.err[-500:])
        self.assertIn("9900 more error(s) not listed", lines[-1])
        check = r.trace["validation"]["input"]
        self.assertEqual(len(check["errors"]), 100)
        self.assertEqual(check["errors_omitted"], 9900)
        self.assertIn("10000 error(s)", r.trace["result"]["error"]["message"])
