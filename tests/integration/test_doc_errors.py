"""One way to read a document (runtime/base/doc_reader.hpp): a profile, a seccomp policy, pack.json
and an exec request each name a mistake as "<source>: <JSON pointer>: <what>", the pointer escaped
per RFC 6901 and nested to the exact value. Runs as root and rootless."""
import json
import os

from sbxtest import SbxTestCase, sbx


class DocTestBase(SbxTestCase):
    def write(self, name, doc):
        p = self.path(name)
        with open(p, "w") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        return p

    def refused(self, args, needle, input=None):
        r = sbx(args, input=input)
        self.assertExit(r, 125)
        text = r.err + r.out
        self.assertIn(needle, text, r.describe())
        return text

    def exec_error(self, request):
        r = sbx(["exec"], input=json.dumps(request).encode())
        self.assertExit(r, 125)
        return json.loads(r.out)["error"]["message"]


class DocErrorTest(DocTestBase):
    def test_a_repeated_member_name_is_refused_in_an_exec_request(self):
        """Issue 30: duplicate keys were accepted, the last one winning: {"code": "safe", "code":
        "other"} ran "other" while a reader keeping the first saw "safe". Now refused, by pointer."""
        r = sbx(["exec"], input=b'{"language": "sh", "code": "echo safe", "code": "echo other"}')
        self.assertExit(r, 125)
        self.assertNotIn("other", r.out.split('"message"')[0])
        self.assertIn('/code: duplicate member name "code"', json.loads(r.out)["error"]["message"])
        r = sbx(["exec"], input=b'{"language": "sh", "code": "echo $(cat /in/input.json)", "inputs": {"a": 1, "a": 2}}')
        self.assertExit(r, 125)
        self.assertIn('/inputs/a: duplicate member name "a"', json.loads(r.out)["error"]["message"])

    def test_exec_request_errors_name_the_member(self):
        """Before DocReader the exec request's errors said what but not where ("exec request:
        unknown key 'extra'"); each now carries the JSON pointer of the member at fault."""
        self.assertEqual(self.exec_error({"language": "sh", "code": "", "extra": 1}),
                         "exec request: /extra: unknown key 'extra' (known: language, code, inputs, files, "
                         "limits, output_schema)")
        self.assertTrue(self.exec_error({"code": ""}).startswith("exec request: /language: "))
        self.assertTrue(self.exec_error({"language": "sh"}).startswith("exec request: /code: "))
        self.assertEqual(self.exec_error({"language": "sh", "code": "", "files": {"a/../x": ""}}),
                         "exec request: /files/a~1..~1x: 'a/../x' must be a relative path of plain names (no '', '.' or '..' component)")
        self.assertEqual(self.exec_error({"language": "sh", "code": "", "files": {"main.sh": ""}}),
                         "exec request: /files/main.sh: 'main.sh' would replace the code itself")
        self.assertIn("exec request: /limits/bogus: unknown limit",
                      self.exec_error({"language": "sh", "code": "", "limits": {"bogus": 1}}))

    def test_profile_errors_point_into_nested_members(self):
        p = self.write("p.json", {"binds": [{"src": "/etc"}, {"src": "/etc", "r/w": True}]})
        self.refused(["run", "--dry-run", "--profile", p, "--", "true"], f"profile {p}: /binds/1/r~1w: unknown key")
        p = self.write("q.json", {"network": {"allow": ["ok.example", 7]}})
        self.refused(["run", "--dry-run", "--profile", p, "--", "true"], f"profile {p}: /network/allow/1: must be a string")

    def test_seccomp_policy_errors_point_into_rules(self):
        p = self.write("s.json", {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
            {"names": ["read"], "action": "SCMP_ACT_ERRNO", "args": [{"index": None, "value": 1, "op": "SCMP_CMP_EQ"}]}]})
        self.refused(["run", "--dry-run", "--seccomp", p, "--", "true"],
                     f"{p}: /syscalls/0/args/0/index: must be a non-negative integer")

    def test_pack_validate_lists_every_problem_with_its_pointer(self):
        d = self.path("pk")
        os.mkdir(d)
        self.write("pk/pack.json", {"name": "Bad Name", "version": "", "entrypoint": ["/bin/true", 1], "extra": 1,
                                    "network": {"mode": "none", "x": 1}, "input_schema": "in.json",
                                    "output_schema": "out.json", "secrets": [{"name": "s", "required": None}]})
        text = self.refused(["pack", "validate", d], "pack.json#/extra: unknown key (known: name, version")
        for needle in ("pack.json#/name: 'Bad Name'", "pack.json#/version: must not be empty",
                       "pack.json#/entrypoint/1: must be a string", "pack.json#/network/x: unknown key (known: mode)",
                       "pack.json#/input_schema: 'in.json'", "pack.json#/secrets/0/required: must be true or false"):
            self.assertIn(needle, text)


class UnitsAndProfileDefaultsTest(DocTestBase):
    """Issue 32: a bare JSON number for a duration or a size meant ms/bytes ("timeout": 10 killed
    after 10 ms) where the command line means seconds; now refused in every document kind, naming
    the key and the forms that would do. And a hand-written profile that named one limit had no
    memory, pids, output or cpus limit at all."""
    DURATION = 'a bare number is ambiguous; write a duration with its unit: "10s" or "10000ms"'

    def test_a_bare_number_is_refused_in_a_profile_a_pack_manifest_and_an_exec_request(self):
        p = self.write("p.json", {"limits": {"timeout": 10}})
        self.refused(["run", "--dry-run", "--profile", p, "--", "true"], f"profile {p}: /limits/timeout: {self.DURATION}")
        d = self.path("pk")
        os.mkdir(d)
        self.write("pk/pack.json", {"name": "p", "version": "1", "entrypoint": ["/bin/true"], "input_schema": "in.json",
                                    "output_schema": "out.json", "limits": {"timeout": 10, "memory": 256}})
        self.write("pk/in.json", {})
        self.write("pk/out.json", {})
        text = self.refused(["pack", "validate", d], f"pack.json#/limits/timeout: {self.DURATION}")
        self.assertIn('pack.json#/limits/memory: a bare number is ambiguous; write a size with its unit: "256M"', text)
        self.assertEqual(self.exec_error({"language": "sh", "code": "", "limits": {"timeout": 10}}),
                         f"exec request: /limits/timeout: {self.DURATION}")
        # Keys named with their unit take a number in it (what the trace records): accepted.
        p = self.write("ms.json", {"limits": {"timeout_ms": 10000}})
        r = sbx(["run", "--dry-run", "--profile", p, "--", "true"])
        self.assertExit(r, 0)

    def test_a_profile_gets_the_default_profiles_value_for_every_limit_it_leaves_out(self):
        p = self.write("p.json", {"limits": {"timeout": "5s"}})
        r = sbx(["profile", "show", p])
        self.assertExit(r, 0)
        shown = json.loads(r.out)
        self.assertEqual(shown["spec"]["limits"]["memory_bytes"], 512 << 20)
        self.assertEqual(shown["spec"]["limits"]["pids"], 64)
        self.assertEqual(shown["spec"]["limits"]["timeout_ms"], 5000)
        self.assertEqual(shown["limits_from_default_profile"], ["memory", "pids", "cpus", "output_limit", "tmp_size"])
        r = sbx(["run", "--dry-run", "--profile", p, "--", "true"])
        self.assertExit(r, 0)
        self.assertIn("the default profile 'untrusted' (profile 'p' leaves it unset)", r.out + r.err)
        c = self.write("c.json", {"extends": "trusted", "limits": {"timeout": "5s"}})
        shown = json.loads(sbx(["profile", "show", c]).out)
        self.assertEqual(shown["spec"]["limits"]["memory_bytes"], 4 << 30)
        self.assertEqual(shown["extends"], ["trusted"])
        self.refused(["profile", "show", self.write("t.json", {"extend": "trusted"})],
                     "/extend: unknown key (did you mean 'extends'?)")

    def test_an_installed_profiles_relative_extends_is_read_beside_it_not_from_the_current_directory(self):
        """Issue 32 review: an installed profile's "extends": "base.json" was read from the
        directory sbx started in, so a checkout's base.json with "memory": null lifted the limit."""
        inst = self.path("installed")
        work = self.path("checkout")
        os.mkdir(inst)
        os.mkdir(work)
        self.write("installed/agent.json", {"extends": "base.json", "limits": {"timeout": "5s"}})
        self.write("checkout/base.json", {"limits": {"memory": None}})
        env = dict(os.environ, SBX_PROFILE_PATH=inst)
        self.assertIn(f"profile {inst}/agent.json: /extends: cannot read profile {inst}/base.json: No such file or directory",
                      sbx(["profile", "show", "agent"], env=env, cwd=work).err)
        self.write("installed/base.json", {"limits": {"memory": "100M"}})
        r = sbx(["profile", "show", "agent"], env=env, cwd=work)
        self.assertExit(r, 0)
        self.assertEqual(json.loads(r.out)["spec"]["limits"]["memory_bytes"], 100 << 20)
        self.refused(["profile", "show", self.write("n.json", {"extends": "trusted", "limits": None})],
                     f"profile {self.path('n.json')}: /limits: must be an object of limits")
