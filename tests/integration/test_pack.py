"""Rule packs and sbx exec: the typed IO contract. Runs as root and rootless."""
import json
import os
import stat
import subprocess
import unittest

from sbxtest import INIT_VIEW_PROBE, SBX, SbxTestCase, busybox_digest, check_init_view, note, sbx, validate_trace

RECORD_SCHEMA = {"type": "object", "required": ["id", "mm"], "additionalProperties": False,
                 "properties": {"id": {"type": "string", "minLength": 1},
                                "mm": {"type": "number", "minimum": 0}}}
OUTPUT_SCHEMA = {"type": "object", "required": ["count"], "additionalProperties": False,
                 "properties": {"count": {"type": "integer", "minimum": 0}}}


class PackCase(SbxTestCase):
    def make_pack(self, script, name="p", secrets=(), context=()):
        d = self.path(name)
        os.makedirs(d + "/schemas")
        os.chmod(d, 0o755)
        os.chmod(d + "/schemas", 0o755)
        manifest = {"name": "t-" + name, "version": "1.2.3", "entrypoint": ["/bin/sh", "/pack/run.sh"],
                    "input_schema": "schemas/in.json", "output_schema": "schemas/out.json",
                    "limits": {"timeout": "20s"}, "network": {"mode": "none"},
                    "context": list(context), "secrets": list(secrets)}
        for rel, content in (("pack.json", json.dumps(manifest)), ("schemas/in.json", json.dumps(RECORD_SCHEMA)),
                             ("schemas/out.json", json.dumps(OUTPUT_SCHEMA)), ("run.sh", script)):
            with open(os.path.join(d, rel), "w") as f:
                f.write(content)
            os.chmod(os.path.join(d, rel), 0o644)
        return d

    def records(self, recs, name="records.json"):
        p = self.path(name)
        with open(p, "w") as f:
            json.dump(recs, f)
        os.chmod(p, 0o644)
        return p

    def pack_run(self, d, inp, *extra, env=None):
        return self.sbx_traced(["pack", "run", d, "--input", inp], after=extra, timeout=60, env=env)


COUNT = "set -eu\nn=$(grep -o '\"id\"' /in/records.json | wc -l)\nprintf '{\"count\": %d}' \"$n\" > /out/result.json\n"


class PackRun(PackCase):
    def test_valid_run_prints_validated_result_and_records_hashes(self):
        d = self.make_pack(COUNT)
        inp = self.records([{"id": "a", "mm": 1.5}, {"id": "b", "mm": 2}])
        r = self.pack_run(d, inp)
        self.assertExit(r, 0)
        self.assertEqual(json.loads(r.out), {"count": 2})
        t = self.need_trace(r)
        self.assertEqual(t["result"]["status"], "ok")
        self.assertEqual(t["invocation"]["pack"]["name"], "t-p")
        self.assertEqual(t["invocation"]["pack"]["version"], "1.2.3")
        self.assertRegex(t["invocation"]["pack"]["digest"], r"^sha256:[0-9a-f]{64}$")
        import hashlib
        with open(inp, "rb") as f:
            self.assertEqual(t["inputs"][0]["sha256"], hashlib.sha256(f.read()).hexdigest())
        self.assertEqual(t["outputs"][0]["path"], "/out/result.json")
        self.assertEqual(t["outputs"][0]["sha256"], hashlib.sha256(b'{"count": 2}').hexdigest())
        self.assertEqual(t["validation"]["input"]["status"], "ok")
        self.assertEqual(t["validation"]["output"]["status"], "ok")

    def test_result_file(self):
        d = self.make_pack(COUNT)
        out = self.path("res.json")
        r = self.pack_run(d, self.records([{"id": "a", "mm": 1}]), "--result", out)
        self.assertExit(r, 0)
        self.assertEqual(r.stdout, b"")
        with open(out) as f:
            self.assertEqual(json.load(f), {"count": 1})

    def test_input_invalid_runs_nothing(self):
        marker = self.path("ran")
        d = self.make_pack(COUNT + f"touch {marker}\n")
        r = self.pack_run(d, self.records([{"id": "a", "mm": 1}, {"id": "", "mm": -1}, {"mm": 2, "x": 1}]))
        self.assertExit(r, 65)
        self.assertIn("#/1/id", r.err)
        self.assertIn("#/1/mm", r.err)
        self.assertIn("#/2", r.err)
        self.assertEqual(r.stdout, b"")
        self.assertFalse(os.path.exists(marker), "nothing ran")
        t = self.need_trace(r)
        self.assertEqual(t["result"]["status"], "input_invalid")
        self.assertEqual(t["validation"]["input"]["status"], "invalid")
        pointers = {e["pointer"] for e in t["validation"]["input"]["errors"]}
        self.assertTrue({"/1/id", "/1/mm"} <= pointers, pointers)
        self.assertEqual(t["outputs"], [])
        note("input_invalid stderr:\n" + r.err)

    def test_input_not_an_array(self):
        r = self.pack_run(self.make_pack(COUNT), self.records({"id": "a", "mm": 1}))
        self.assertExit(r, 65)
        self.assertIn("array of records", r.err)

    def test_output_invalid_is_not_printed(self):
        d = self.make_pack("printf '{\"count\": \"SHOULD-NOT-LEAK\"}' > /out/result.json\n")
        r = self.pack_run(d, self.records([{"id": "a", "mm": 1}]))
        self.assertExit(r, 65)
        self.assertNotIn(b"SHOULD-NOT-LEAK", r.stdout + r.stderr)
        t = self.need_trace(r)
        self.assertEqual(t["result"]["status"], "output_invalid")
        self.assertEqual(t["validation"]["output"]["status"], "invalid")
        self.assertNotIn("SHOULD-NOT-LEAK", json.dumps(t))
        self.assertEqual(t["outputs"][0]["bytes"], len('{"count": "SHOULD-NOT-LEAK"}'))
        self.assertIn("/count", r.err)
        note("output_invalid stderr:\n" + r.err)

    def test_missing_result_and_symlinked_result(self):
        r = self.pack_run(self.make_pack("true\n", "a"), self.records([{"id": "a", "mm": 1}]))
        self.assertExit(r, 65)
        self.assertIn("no /out/result.json", r.err)
        r = self.pack_run(self.make_pack("ln -s /etc/passwd /out/result.json\n", "b"), self.records([{"id": "a", "mm": 1}]))
        self.assertExit(r, 65)
        self.assertNotIn(b"root:", r.stdout + r.stderr)

    def test_program_failure_keeps_its_status(self):
        r = self.pack_run(self.make_pack("exit 3\n"), self.records([{"id": "a", "mm": 1}]))
        self.assertExit(r, 3)
        self.assertEqual(self.need_trace(r)["validation"]["output"]["status"], "not_checked")

    def test_pack_is_read_only(self):
        d = self.make_pack("touch /pack/x 2>/dev/null && exit 9\n" + COUNT)
        r = self.pack_run(d, self.records([{"id": "a", "mm": 1}]))
        self.assertExit(r, 0)

    def test_manifest_limits_and_flags_override(self):
        d = self.make_pack("sleep 5\n")
        with open(d + "/pack.json") as f:
            m = json.load(f)
        m["limits"]["timeout"] = "300ms"
        with open(d + "/pack.json", "w") as f:
            json.dump(m, f)
        r = self.pack_run(d, self.records([{"id": "a", "mm": 1}]))
        self.assertExit(r, 124, "manifest timeout applies")
        self.assertEqual(self.need_trace(r)["invocation"]["spec"]["limits"]["timeout_ms"], 300)
        r = self.pack_run(d, self.records([{"id": "a", "mm": 1}]), "--timeout", "200ms")
        self.assertExit(r, 124)
        self.assertEqual(self.need_trace(r)["invocation"]["spec"]["limits"]["timeout_ms"], 200, "flag beats manifest")

    def test_profile_is_a_ceiling_for_the_manifest(self):
        """pack.json may lower the profile's limits, never raise them; the operator's flags may."""
        recs = self.records([{"id": "a", "mm": 1}])
        for key, value in (("timeout", "100h"), ("tmp_size", "100G"), ("memory", "64G"), ("pids", 100000)):
            with self.subTest(key=key):
                d = self.make_pack("echo '{\"count\": 1}' > /out/result.json\n", name="ceil-" + key)
                with open(d + "/pack.json") as f:
                    m = json.load(f)
                m["limits"] = {key: value}
                with open(d + "/pack.json", "w") as f:
                    json.dump(m, f)
                r = self.pack_run(d, recs)
                self.assertExit(r, 125, f"a manifest asking for {key}={value} over the untrusted profile")
                self.assertOneSbxLine(r)
                self.assertIn(f"/limits/{key}", r.err)
                self.assertIn("above the ceiling of profile 'untrusted'", r.err)
                v = sbx(["pack", "validate", d])
                self.assertExit(v, 125, "pack validate reports it against the default profile")
                self.assertIn(f"/limits/{key}", v.err)
        d = self.make_pack("echo '{\"count\": 1}' > /out/result.json\n", name="ceil-flag")
        with open(d + "/pack.json") as f:
            m = json.load(f)
        m["limits"] = {"timeout": "1h"}
        with open(d + "/pack.json", "w") as f:
            json.dump(m, f)
        r = self.pack_run(d, recs, "--timeout", "2h")
        self.assertExit(r, 0, "the operator's flag decides the timeout: the manifest's value is replaced")
        self.assertEqual(self.need_trace(r)["invocation"]["spec"]["limits"]["timeout_ms"], 7200000)
        r = self.pack_run(d, recs, "--profile", self.profile_file({"limits": {"timeout_ms": "2h"}}))
        self.assertExit(r, 0, "under a profile whose ceiling is higher the manifest's 1h is a lowering")
        self.assertEqual(self.need_trace(r)["invocation"]["spec"]["limits"]["timeout_ms"], 3600000)

    def profile_file(self, obj):
        p = self.path("profile-%d.json" % self._n)
        with open(p, "w") as f:
            json.dump(obj, f)
        os.chmod(p, 0o644)
        return p


class PackContext(PackCase):
    def test_context_mounted_read_only_and_required(self):
        ctx = self.path("tol.json")
        with open(ctx, "w") as f:
            f.write('{"tol": 7}')
        os.chmod(ctx, 0o644)
        script = ("grep -q '\"tol\": 7' /ctx/tol.json || exit 7\n"
                  "echo x >> /ctx/tol.json 2>/dev/null && exit 8\n" + COUNT)
        d = self.make_pack(script, context=[{"name": "tol", "path": "/ctx/tol.json", "required": True}])
        inp = self.records([{"id": "a", "mm": 1}])
        r = self.pack_run(d, inp)
        self.assertExit(r, 125)
        self.assertIn("--context tol", r.err)
        r = self.pack_run(d, inp, "--context", "tol=" + ctx)
        self.assertExit(r, 0)
        r = self.pack_run(d, inp, "--context", "nope=" + ctx)
        self.assertExit(r, 125)


class PackSecrets(PackCase):
    SECRET = "s3cr3t-VALUE-9f8e7d"

    def secret_file(self):
        p = self.path("secret.txt")
        with open(p, "w") as f:
            f.write(self.SECRET)
        os.chmod(p, 0o600)
        return p

    def test_secret_file_delivery_and_no_leaks(self):
        script = ("stat -c '%a %u' /run/secrets/token >&2\n"
                  "cat /run/secrets/token; echo; cat /run/secrets/token >&2\n"
                  "echo \"argv-probe\" >/dev/null\n" + COUNT)
        d = self.make_pack(script, secrets=[{"name": "token", "required": False, "delivery": "file"}])
        inp = self.records([{"id": "a", "mm": 1}])
        r = self.pack_run(d, inp, "--secret", "token=@" + self.secret_file())
        self.assertExit(r, 0)
        self.assertIn("400 0", r.err, "mode 0400, owned by the sandbox user (uid 0 inside)")
        # The program itself may print it; its stdout goes to sbx's stderr (stdout is the result's).
        self.assertIn(self.SECRET, r.err, "the program itself may print it")
        self.assertNotIn(self.SECRET, r.out, "sbx's stdout carries only the validated result")
        # sbx's own lines on stderr never carry it; the program's stderr does (it printed it).
        sbx_lines = [l for l in r.err.splitlines() if l.startswith("sbx:")]
        self.assertFalse(any(self.SECRET in l for l in sbx_lines), sbx_lines)
        store = os.environ.get("SBX_STATE_DIR", "")
        hits = []
        for root, _, files in os.walk(store):
            for fn in files:
                # Not followed: earlier tests leave image roots whose /etc/hosts is a dangling symlink
                # (test_container_image); a link's own text is what it stores.
                path = os.path.join(root, fn)
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    data = os.readlink(path).encode()
                elif stat.S_ISREG(st.st_mode):
                    with open(path, "rb") as f:
                        data = f.read()
                else:
                    continue
                if self.SECRET.encode() in data:
                    hits.append(fn)
        self.assertEqual(hits, [], "trace store holds the secret")
        self.assertNotIn(self.SECRET, json.dumps(self.need_trace(r)))
        self.assertEqual(self.need_trace(r)["invocation"]["pack"]["secrets"], ["token"], "names only")
        # The next run without the secret cannot find it.
        r2 = self.pack_run(self.make_pack("ls /run/secrets/token 2>/dev/null && exit 5\n" + COUNT, "q"), inp)
        self.assertExit(r2, 0)
        note(f"secret leak check: trace store files scanned under {store}: none contain the value")

    def test_secret_file_path_and_pack_dir_not_visible_in_init(self):
        """/proc/1 inside names neither the file given to --secret NAME=@FILE nor the pack's or the
        input's host paths (test_isolation.InitView has the rest)."""
        d = self.make_pack("/usr/bin/python3 /pack/probe.py >&2\n" + COUNT,
                           secrets=[{"name": "token", "required": True, "delivery": "file"}])
        with open(d + "/probe.py", "w") as f:
            f.write(INIT_VIEW_PROBE)
        inp = self.records([{"id": "a", "mm": 1}])
        secret = self.secret_file()
        r = self.pack_run(d, inp, "--secret", "token=@" + secret)
        self.assertExit(r, 0)
        check_init_view(self, r.err, [secret, d, inp, self.tmp, SBX])

    def test_secret_not_in_sbx_environ_or_cmdline(self):
        d = self.make_pack("sleep 2\n" + COUNT, secrets=[{"name": "token", "required": True, "delivery": "file"}])
        inp = self.records([{"id": "a", "mm": 1}])
        tpath = self.path("tr.json")
        p = subprocess.Popen([SBX, "pack", "run", d, "--input", inp, "--trace-file", tpath,
                              "--secret", "token=@" + self.secret_file()],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        import time
        time.sleep(1.0)
        try:
            for what in ("environ", "cmdline"):
                try:
                    with open(f"/proc/{p.pid}/{what}", "rb") as f:
                        self.assertNotIn(self.SECRET.encode(), f.read(), what)
                except PermissionError:
                    # environ, rootless: sbx is non-dumpable while its sandbox runs (runtime/linux/clone.hpp),
                    # so not even its own uid may read it; cmdline is world-readable and always checked.
                    self.assertEqual(what, "environ")
                    note(f"/proc/{p.pid}/environ of sbx is not readable while it runs (non-dumpable)")
        finally:
            out, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 0, err)
        self.assertNotIn(self.SECRET.encode(), err)

    def test_secret_env_delivery_and_required(self):
        d = self.make_pack("[ \"$TOKEN\" = \"$EXPECT\" ] || exit 4\n" + COUNT,
                           secrets=[{"name": "TOKEN", "required": True, "delivery": "env"}])
        inp = self.records([{"id": "a", "mm": 1}])
        r = self.pack_run(d, inp)
        self.assertExit(r, 125)
        self.assertIn("--secret TOKEN", r.err)
        env = dict(os.environ, MYTOK="tok-123")
        with open(d + "/run.sh") as f:
            s = f.read().replace("$EXPECT", "tok-123")
        with open(d + "/run.sh", "w") as f:
            f.write(s)
        r = self.pack_run(d, inp, "--secret", "TOKEN=env:MYTOK", env=env)
        self.assertExit(r, 0)
        r = self.pack_run(d, inp, "--secret", "TOKEN=plain-value-here", env=env)
        self.assertExit(r, 125)
        self.assertNotIn("plain-value-here", r.err, "a mistyped source is not echoed")


class PackTools(PackCase):
    def test_init_then_validate_then_run(self):
        r = sbx(["pack", "init", self.path("mypack")])
        self.assertExit(r, 0)
        os.chmod(self.path("mypack"), 0o755)
        r = sbx(["pack", "validate", self.path("mypack")])
        self.assertExit(r, 0)
        self.assertIn("sha256:", r.out)
        r = sbx(["pack", "run", self.path("mypack"), "--input", self.path("mypack/records.json")], timeout=60)
        self.assertExit(r, 0)
        self.assertEqual(json.loads(r.out), {"records": 2})

    def test_validate_lists_every_problem(self):
        d = self.make_pack(COUNT)
        with open(d + "/pack.json") as f:
            m = json.load(f)
        m["limits"] = {"memory": "lots", "bogus": 1}
        m["image"] = "Debian/12"
        m["extra"] = True
        with open(d + "/pack.json", "w") as f:
            json.dump(m, f)
        with open(d + "/schemas/out.json", "w") as f:
            f.write("{not json")
        r = sbx(["pack", "validate", d])
        self.assertExit(r, 125)
        for needle in ("pack.json#/limits/memory", "pack.json#/limits/bogus", "pack.json#/image",
                       "pack.json#/extra", "schemas/out.json#"):
            self.assertIn(needle, r.err)

    def test_validate_checks_the_entrypoint_and_speaks_json(self):
        d = self.make_pack(COUNT)
        with open(d + "/pack.json") as f:
            m = json.load(f)
        m["entrypoint"] = ["/bin/sh", "/pack/rnu.sh"]  # a typo: the first run would exit 127
        m["extra"] = True
        with open(d + "/pack.json", "w") as f:
            json.dump(m, f)
        r = sbx(["pack", "validate", d])
        self.assertExit(r, 125)
        self.assertIn("pack.json#/entrypoint/1: '/pack/rnu.sh' names 'rnu.sh', which the pack does not have", r.err)
        self.assertIn("pack.json#/extra", r.err)
        r = sbx(["pack", "validate", "--json", d])
        self.assertExit(r, 125)
        j = json.loads(r.out)
        self.assertFalse(j["ok"])
        self.assertEqual(sorted(p["pointer"] for p in j["problems"]), ["/entrypoint/1", "/extra"], j)
        self.assertIsNone(j["digest"])
        # What the manifest had, though it failed (null on the previous main).
        self.assertEqual((j["name"], j["version"]), (m["name"], m["version"]), j)
        m["entrypoint"] = ["/bin/sh", "/pack/run.sh"]
        del m["extra"]
        with open(d + "/pack.json", "w") as f:
            json.dump(m, f)
        r = sbx(["pack", "validate", "--json", d])
        self.assertExit(r, 0)
        j = json.loads(r.out)
        self.assertEqual((j["ok"], j["name"], j["problems"]), (True, "t-p", []), j)
        self.assertTrue(j["digest"].startswith("sha256:"), j)


class Exec(SbxTestCase):
    def exec(self, req):
        return sbx(["exec"], input=json.dumps(req).encode(), timeout=60)

    def test_python_with_schema(self):
        r = self.exec({"language": "python", "inputs": [1, 2, 3], "files": {"lib/helper.py": "K = 10\n"},
                       "code": "import json, sys\nsys.path.insert(0, '/code/lib')\nimport helper\n"
                               "d = json.load(open('/in/input.json'))\nprint('hello')\n"
                               "json.dump({'sum': sum(d) * helper.K}, open('/out/result.json', 'w'))\n",
                       "output_schema": {"type": "object", "required": ["sum"]}})
        self.assertExit(r, 0)
        resp = json.loads(r.out)
        self.assertEqual(resp["status"], "ok")
        self.assertEqual(resp["result"], {"sum": 60})
        self.assertEqual(resp["stdout"], "hello\n")
        self.assertIn("run_id", resp)

    def test_failure_is_a_response_and_output_capped(self):
        r = self.exec({"language": "sh", "code": "head -c 100000 /dev/zero | tr '\\0' x; exit 3",
                       "limits": {"output_limit": "1000B"}})
        self.assertExit(r, 0)
        resp = json.loads(r.out)
        self.assertEqual(resp["status"], "exit_nonzero")
        self.assertEqual(resp["exit_code"], 3)
        self.assertEqual(len(resp["stdout"]), 1000)
        self.assertTrue(resp["stdout_truncated"])

    def test_request_cannot_raise_the_profile(self):
        """A request asked for 100 GB of RAM-backed /tmp and 100 hours: refused, naming the key."""
        for limits, key in (({"tmp_size": "100G"}, "tmp_size"), ({"timeout": "100h"}, "timeout"),
                            ({"memory": "64G"}, "memory")):
            r = self.exec({"language": "sh", "code": "true", "limits": limits})
            self.assertExit(r, 125, json.dumps(limits))
            err = json.loads(r.out)["error"]["message"]
            self.assertIn(f"/limits/{key}", err)
            self.assertIn("above the ceiling", err)
        r = self.exec({"language": "sh", "code": "echo ok", "limits": {"timeout": "5s", "memory": "128M"}})
        self.assertExit(r, 0, "lowering is fine")
        self.assertEqual(json.loads(r.out)["status"], "ok")

    def test_schema_violation(self):
        r = self.exec({"language": "sh", "code": "echo '{\"a\":1}' > /out/result.json",
                       "output_schema": {"type": "object", "required": ["b"]}})
        self.assertExit(r, 0)
        resp = json.loads(r.out)
        self.assertEqual(resp["status"], "output_invalid")
        self.assertIsNone(resp["result"])
        self.assertTrue(resp["result_errors"])

    @unittest.skipUnless(os.access("/usr/bin/node", os.X_OK), "no /usr/bin/node on this host (apt-get install nodejs)")
    def test_node(self):
        """Issue 34: agents write JavaScript too. /code/main.js, its files, inputs and result as for python."""
        r = self.exec({"language": "node", "inputs": {"a": 41}, "files": {"lib/k.js": "module.exports = 1;\n"},
                       "code": "const fs = require('fs'); const k = require('/code/lib/k.js');\n"
                               "const v = JSON.parse(fs.readFileSync('/in/input.json'));\nconsole.log(v.a + k);\n"
                               "fs.writeFileSync('/out/result.json', JSON.stringify({n: v.a + k}));\n",
                       "output_schema": {"type": "object", "required": ["n"]}})
        self.assertExit(r, 0)
        resp = json.loads(r.out)
        self.assertEqual((resp["status"], resp["stdout"], resp["result"]), ("ok", "42\n", {"n": 42}), resp)

    def test_a_language_the_image_lacks_says_so(self):
        busybox_digest(self)
        prof = self.path("bb.json")
        with open(prof, "w") as f:
            json.dump({"extends": "untrusted", "image": "busybox"}, f)
        r = sbx(["exec", "--profile", prof], input=json.dumps({"language": "node", "code": "1"}).encode(), timeout=60)
        self.assertExit(r, 0)
        resp = json.loads(r.out)
        self.assertEqual(resp["status"], "setup_error", resp)
        self.assertIn("/usr/bin/node is not in image busybox", resp["error"])
        self.assertIn("use an image that has it", resp["error"])
        # A dynamic host binary bound into the image is there: what it lacks is its loader.
        r = self.run_sbx(["/usr/bin/python3", "-c", "1"], opts=["--image", "busybox", "--bind", "/usr/bin"], timeout=60)
        self.assertIn("/usr/bin/python3 is bound from the host, but image busybox lacks what it needs to start",
                      r.err)

    def test_malformed_requests(self):
        for req in (b"{", b"[]", json.dumps({"language": "cobol", "code": ""}).encode(),
                    json.dumps({"language": "sh"}).encode(),
                    json.dumps({"language": "sh", "code": "", "files": {"../x": ""}}).encode(),
                    json.dumps({"language": "sh", "code": "", "limits": {"memory": "x"}}).encode()):
            r = sbx(["exec"], input=req)
            self.assertExit(r, 125, req)
            self.assertIn("error", json.loads(r.out))


TREE_SCHEMA = {"$ref": "#/definitions/node",
               "definitions": {"node": {"type": "object", "required": ["c"],
                                        "properties": {"c": {"type": "array", "items": {"$ref": "#/definitions/node"}}}}}}


class SchemaContract(PackCase):
    """Hostile schemas and records: refused with the place, or judged quickly; never a crash or a hang."""

    def with_schema(self, rel, schema, name="p"):
        d = self.make_pack(COUNT, name)
        with open(os.path.join(d, rel), "w") as f:
            f.write(schema if isinstance(schema, str) else json.dumps(schema))
        return d

    def test_ref_cycles_are_refused_naming_the_pointer(self):
        for rel, schema, needle in (
                ("schemas/in.json", {"$ref": "#"}, "schemas/in.json#/$ref: a cycle"),
                ("schemas/out.json", {"definitions": {"a": {"$ref": "#/definitions/b"}, "b": {"$ref": "#/definitions/a"}},
                                      "properties": {"count": {"$ref": "#/definitions/a"}}},
                 "schemas/out.json#/definitions/")):
            r = sbx(["pack", "validate", self.with_schema(rel, schema, rel.split("/")[1][:-5])], timeout=20)
            self.assertExit(r, 125)
            self.assertIn(needle, r.err)
            note(r.err)

    def test_deep_record_against_recursive_schema_is_input_invalid(self):
        # 50,000 levels of {"c": [...]}: this used to overflow the stack in the validator. Written
        # as text: Python's json module would itself recurse too deep.
        d = self.with_schema("schemas/in.json", TREE_SCHEMA)
        n = 50000
        p = self.path("deep.json")
        with open(p, "w") as f:
            f.write('[' + '{"c":[' * n + '{"c":[]}' + ']}' * n + ']')
        os.chmod(p, 0o644)
        r = self.pack_run(d, p)
        self.assertExit(r, 65)
        self.assertRegex(r.err, "deep|depth")
        # A shallow tree still validates and runs.
        self.assertExit(self.pack_run(d, self.records([{"c": [{"c": [{"c": []}]}]}], "shallow.json")), 0)

    def test_pattern_bombs_are_judged_in_linear_time(self):
        # std::regex backtracks: ^(a+)+$ on 31 characters took ~50 s, ^(\w+\s?)*$ on 29 ~15 s,
        # and ^[a-z]*$ on 300 KB crashed (one stack frame per character).
        d = self.with_schema("schemas/in.json", {"type": "object", "properties": {
            "a": {"type": "string", "pattern": "^(a+)+$"},
            "b": {"type": "string", "pattern": "^(\\w+\\s?)*$"},
            "c": {"type": "string", "pattern": "^[a-z]*$"}}})
        inp = self.records([{"a": "a" * 30 + "!"}, {"b": "a" * 28 + "!"}, {"c": "a" * 300000}])
        r = self.pack_run(d, inp)
        self.assertExit(r, 65)
        self.assertIn("#/0/a", r.err)
        self.assertIn("#/1/b", r.err)
        self.assertNotIn("#/2", r.err)
        self.assertLess(r.wall, 20, "generous: it takes milliseconds, std::regex took over a minute")
        t = self.need_trace(r)
        self.assertEqual({e["pointer"] for e in t["validation"]["input"]["errors"]}, {"/0/a", "/1/b"})
        # The valid ones run.
        self.assertExit(self.pack_run(d, self.records([{"a": "a" * 30, "b": "ab cd", "c": "a" * 300000}], "ok.json")), 0)

    def test_validation_budget(self):
        # 20,000 items each checked against a 20,000-value enum: 4e8 comparisons (the previous
        # validator took ~24 s and accepted). Stopped by the step budget, with the reason.
        d = self.with_schema("schemas/in.json", {"type": "object", "properties": {
            "v": {"items": {"enum": ["v%d" % i for i in range(20000)]}}}})
        r = self.pack_run(d, self.records([{"v": ["v19999"] * 20000}]))
        self.assertExit(r, 65)
        self.assertIn("validation stopped after", r.err)
        self.assertLess(r.wall, 15, "the budget is about a second of work")

    def test_patterns_re2_cannot_run_are_refused(self):
        d = self.with_schema("schemas/in.json", {"properties": {"id": {"pattern": "^(?!admin)\\w+$"}}})
        r = sbx(["pack", "validate", d], timeout=20)
        self.assertExit(r, 125)
        self.assertIn("schemas/in.json#/properties/id/pattern", r.err)
        self.assertIn("lookahead", r.err)

    def test_other_drafts_are_refused(self):
        d = self.with_schema("schemas/out.json", {"$schema": "https://json-schema.org/draft/2020-12/schema",
                                                  "type": "object", "dependentRequired": {"count": ["total"]}})
        r = sbx(["pack", "validate", d], timeout=20)
        self.assertExit(r, 125)
        self.assertIn("schemas/out.json#/$schema", r.err)
        self.assertIn("2020-12", r.err)
        # sbx exec: an error response, and nothing runs.
        r = sbx(["exec"], input=json.dumps({
            "language": "sh", "code": "echo '{\"a\": 1}' > /out/result.json",
            "output_schema": {"type": "object", "prefixItems": [{"type": "string"}],
                              "unevaluatedProperties": False}}).encode(), timeout=60)
        self.assertExit(r, 125)
        err = json.loads(r.out)["error"]["message"]
        self.assertIn("output_schema#/", err)
        self.assertIn("later JSON Schema draft", err)

    def test_misspelled_keywords_are_reported(self):
        """"requried" and "patern" check nothing (draft-07 ignores unknown keywords): pack validate
        refuses them by default, naming each with its pointer and the keyword meant; --no-strict
        and pack run warn; an exec request's output_schema refuses them."""
        d = self.with_schema("schemas/in.json", {"type": "object", "requried": ["id"],
                                                 "properties": {"id": {"type": "string", "patern": "^a"},
                                                                "mm": {"x-unit": "mm"}}})
        r = sbx(["pack", "validate", d], timeout=20)
        self.assertExit(r, 125)
        self.assertIn('schemas/in.json#/requried: "requried" is not a draft-07 keyword', r.err)
        self.assertIn('(did you mean "required"?)', r.err)
        self.assertIn('schemas/in.json#/properties/id/patern: "patern" is not a draft-07 keyword', r.err)
        self.assertIn('(did you mean "pattern"?)', r.err)
        self.assertNotIn("x-unit", r.err, "x- extensions are allowed")
        self.assertIn("2 problem(s)", r.err)
        r = sbx(["pack", "validate", "--no-strict", d], timeout=20)
        self.assertExit(r, 0)
        self.assertIn("sbx: warning: ", r.err)
        self.assertIn("#/requried", r.err)
        # Beside a real problem, the warnings are still listed (and not counted as problems).
        with open(d + "/pack.json") as f:
            m = json.load(f)
        m["bogus"] = 1
        with open(d + "/pack.json", "w") as f:
            json.dump(m, f)
        r = sbx(["pack", "validate", "--no-strict", d], timeout=20)
        self.assertExit(r, 125)
        self.assertIn("pack.json#/bogus", r.err)
        self.assertRegex(r.err, r"sbx: warning: .*schemas/in.json#/requried")
        self.assertIn("1 problem(s)", r.err)
        m.pop("bogus")
        with open(d + "/pack.json", "w") as f:
            json.dump(m, f)
        r = self.pack_run(d, self.records([{"id": "zz", "mm": 1}]))
        self.assertExit(r, 0)
        self.assertIn("#/properties/id/patern", r.err)
        r = sbx(["exec"], input=json.dumps({"language": "sh", "code": "true",
                                            "output_schema": {"type": "object", "requried": ["a"]}}).encode(),
                timeout=60)
        self.assertExit(r, 125)
        self.assertIn('output_schema#/requried: "requried" is not a draft-07 keyword', json.loads(r.out)["error"]["message"])

    def test_every_schema_error_is_listed_with_its_pointer(self):
        d = self.with_schema("schemas/in.json", {"type": "object", "properties": {
            "a": {"type": "strng"}, "b": {"minimum": "zero"}, "c": {"pattern": "^(?=x)"}, "d": {"minLength": -1}}})
        r = sbx(["pack", "validate", d], timeout=20)
        self.assertExit(r, 125)
        for pointer in ("#/properties/a/type:", "#/properties/b/minimum:", "#/properties/c/pattern:",
                        "#/properties/d/minLength:"):
            self.assertIn("schemas/in.json" + pointer, r.err)
        self.assertIn("4 problem(s)", r.err)

    def test_validation_messages_show_what_was_expected_and_found(self):
        d = self.with_schema("schemas/in.json", {"type": "object", "properties": {
            "id": {"type": "string", "pattern": "^[a-z]+$"}, "mm": {"type": "integer", "minimum": 0},
            "k": {"enum": ["x", "y"]}, "s": {"maxLength": 3}}})
        r = self.pack_run(d, self.records([{"id": "AB1", "mm": -2, "k": "z", "s": "q" * 500}, {"id": 7}]))
        self.assertExit(r, 65)
        self.assertIn('#/0/id: must match the pattern "^[a-z]+$" (got "AB1")', r.err)
        self.assertIn("#/0/mm: must be at least 0 (got -2)", r.err)
        self.assertIn('#/0/k: must be one of ["x","y"] (got "z")', r.err)
        self.assertIn("#/0/s: must be at most 3 characters long, not 500 (got \"qqq", r.err)
        self.assertIn('qqq...)', r.err, "the offending value is cut")
        self.assertLess(max(len(l) for l in r.err.splitlines()), 200)
        self.assertIn("#/1/id: must be of type string, not integer (got 7)", r.err)
        self.assertNotIn("0.000000", r.err)


if __name__ == "__main__":
    unittest.main()


class Examples(SbxTestCase):
    """The packs and requests shipped in examples/ run as documented."""
    ROOT = os.environ.get("SBX_REPO") or os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

    def example(self, *parts):
        # The suite runs from a copy; find the repo's examples/ through SBX_REPO or sbx's location.
        for base in (self.ROOT, os.path.normpath(os.path.join(os.path.dirname(SBX), ".."))):
            p = os.path.join(base, "examples", *parts)
            if os.path.exists(p) and os.access(p, os.R_OK | os.X_OK):
                # Copy so the sandbox's (possibly unprivileged, mapped) uid can reach it.
                dst = os.path.join(self.tmp, parts[-1])
                subprocess.run(["cp", "-r", p, dst], check=True)
                subprocess.run(["chmod", "-R", "a+rX", dst], check=True)
                return dst
        self.skipTest("examples/ not found next to the binary (set SBX_REPO)")

    def test_corrosion_grade(self):
        # sh + awk on the busybox image (the manifest's image), as `make run` does it.
        busybox_digest(self)
        d = self.example("packs", "corrosion-grade")
        tpath = self.path("t.json")
        r = sbx(["pack", "run", d, "--input", d + "/records.json", "--trace-file", tpath], timeout=60)
        self.assertExit(r, 0)
        with open(tpath) as f:
            self.assertEqual(json.load(f)["image"]["name"], "busybox")
        grades = {a["asset"]: a["grade"] for a in json.loads(r.out)["assets"]}
        self.assertEqual(grades, {"P-101": "A", "P-102": "B", "V-201": "C", "V-202": "D", "T-301": "F"})

    def test_tolerance_check(self):
        d = self.example("packs", "tolerance-check")
        r = sbx(["pack", "run", d, "--input", d + "/records.json", "--context",
                 "tolerances=" + d + "/tolerances.json"], timeout=60)
        self.assertExit(r, 0)
        res = {f["feature"]: f["result"] for f in json.loads(r.out)["features"]}
        self.assertEqual(res, {"bore-A": "pass", "bore-B": "fail", "groove-1": "pass", "slot-9": "no_tolerance"})

    def test_requests(self):
        d = self.example("requests")
        for name in sorted(os.listdir(d)):
            with open(os.path.join(d, name), "rb") as f:
                r = sbx(["exec"], input=f.read(), timeout=60)
            self.assertExit(r, 0, name)
            self.assertEqual(json.loads(r.out)["status"], "ok", name + "\n" + r.out)
