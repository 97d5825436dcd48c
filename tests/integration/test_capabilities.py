"""Capabilities kept inside the user namespace: `capabilities.keep` (profiles, pack manifests,
--cap-add). The trusted profile keeps CHOWN, DAC_OVERRIDE, FOWNER, SETGID and SETUID, which act
only on the ids the namespace maps; untrusted keeps none. Each claim is shown by what the program
can and cannot do, and by the sets the trace records. Runs as root and rootless."""
import json
import os
import shutil
import unittest

from sbxtest import MODE, SbxTestCase, sbx, validate_trace
from test_pack import PackCase

FIVE = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_SETGID", "CAP_SETUID"]
SETS = ("inheritable", "permitted", "effective", "bounding", "ambient")
# A file only its owner could read, made unreadable: reading it back needs CAP_DAC_OVERRIDE,
# whatever the uid (the owner too is refused by mode 000).
READ_000 = "echo secret > /tmp/f && chmod 000 /tmp/f && cat /tmp/f"


class KeptCapabilities(SbxTestCase):
    def program_sets(self, r):
        caps = self.need_trace(r)["enforcement"]["capabilities"]
        self.assertIn("program", caps, "the trace must record the program's actual sets\n" + r.describe())
        self.assertIsNotNone(caps["program"], "the program's sets were not read\n" + r.describe())
        return caps

    def test_trusted_keeps_exactly_the_five_for_any_uid(self):
        """Every set (ambient too, so they survive execve) is the five, as uid 0 and as uid 1000."""
        for uid in ("0", "1000"):
            with self.subTest(uid=uid):
                r = self.run_sbx(["/bin/sh", "-c", "grep -E '^Cap(Eff|Amb)' /proc/self/status"],
                                 ["--profile", "trusted", "--uid", uid])
                self.assertExit(r, 0)
                self.assertIn("CapEff:\t00000000000000cb", r.out, "the program after its own execve")
                self.assertIn("CapAmb:\t00000000000000cb", r.out)
                caps = self.program_sets(r)
                self.assertEqual(caps["kept"], FIVE)
                for s in SETS:
                    self.assertEqual(caps["program"][s], FIVE, s)

    def test_untrusted_keeps_none(self):
        r = self.run_sbx(["/bin/sh", "-c", "grep -E '^Cap' /proc/self/status"])
        self.assertExit(r, 0)
        for line in r.out.splitlines():
            self.assertTrue(line.endswith("0000000000000000"), line)
        caps = self.program_sets(r)
        self.assertEqual(caps["kept"], [])
        for s in SETS:
            self.assertEqual(caps["program"][s], [], s)

    def test_dac_override_reads_a_mode_000_file_only_under_trusted(self):
        for uid in ("0", "1000"):
            with self.subTest(uid=uid):
                r = self.run_sbx(["/bin/sh", "-c", READ_000], ["--profile", "trusted", "--uid", uid])
                self.assertExit(r, 0, "CAP_DAC_OVERRIDE, kept across execve")
                self.assertEqual(r.out.strip(), "secret")
                r = self.run_sbx(["/bin/sh", "-c", READ_000], ["--uid", uid])
                self.assertNotEqual(r.rc, 0, "untrusted: no capability overrides the mode\n" + r.describe())
                self.assertIn("Permission denied", r.err)

    def test_cap_add_keeps_one_more_and_nothing_else(self):
        r = self.run_sbx(["/bin/sh", "-c", READ_000], ["--cap-add", "dac_override"])
        self.assertExit(r, 0)
        self.assertEqual(r.out.strip(), "secret")
        caps = self.program_sets(r)
        self.assertEqual(caps["kept"], ["CAP_DAC_OVERRIDE"])
        self.assertEqual(caps["program"]["effective"], ["CAP_DAC_OVERRIDE"])
        self.assertEqual(self.need_trace(r)["invocation"]["spec"]["capabilities"]["keep"], ["CAP_DAC_OVERRIDE"])

    @unittest.skipIf(MODE == "rootless", "rootless: the namespace maps one id and setgroups is denied in it "
                                         "(the kernel's rule for unprivileged id maps), whatever the capabilities")
    def test_trusted_setgroups_and_chown_to_another_mapped_id(self):
        """What CPython's test_os/test_posix chown and setgroups tests need."""
        if not shutil.which("python3"):
            self.skipTest("no python3 on the host root")
        code = ("import os; os.setgroups([0, 1000]); open('/tmp/f', 'w').close(); os.chown('/tmp/f', 1000, 1000); "
                "print(os.getgroups(), os.stat('/tmp/f').st_uid)")
        r = self.run_sbx(["python3", "-c", code], ["--profile", "trusted"])
        self.assertExit(r, 0)
        self.assertEqual(r.out.strip(), "[0, 1000] 1000")
        r = self.run_sbx(["python3", "-c", code])
        self.assertNotEqual(r.rc, 0, "untrusted: setgroups needs CAP_SETGID\n" + r.describe())
        self.assertIn("PermissionError", r.err)

    def test_kept_capabilities_do_not_reach_host_owned_files(self):
        """DAC_OVERRIDE, FOWNER and CHOWN act only on ids the namespace maps: a file of host root
        (unmapped: it shows as 65534) stays unreadable and its mode and owner unchangeable, even
        where the bind is writable."""
        if MODE == "root":
            d = self.path("hostroot")
            os.mkdir(d)
            os.chmod(d, 0o777)  # the bind is writable (sbx refuses a rw bind its root cannot write)
            secret = os.path.join(d, "secret")
            with open(secret, "w") as f:
                f.write("host secret\n")
            os.chmod(secret, 0o600)
            bind = [f"{d}:/data:rw"]
        elif os.path.exists("/etc/shadow") and not os.access("/etc/shadow", os.R_OK):
            bind = ["/etc/shadow:/data/secret"]
        else:
            self.skipTest("rootless: no host-root file this user cannot read (/etc/shadow) to try")
        script = ("ls -ln /data/secret; cat /data/secret && echo READ; chmod 666 /data/secret && echo CHMOD; "
                  "chown 0:0 /data/secret && echo CHOWN; exit 0")
        r = self.run_sbx(["/bin/sh", "-c", script], ["--profile", "trusted", "--bind", bind[0]])
        self.assertExit(r, 0)
        self.assertIn(" 65534 65534 ", r.out, "host root is not mapped")
        for done in ("READ", "CHMOD", "CHOWN"):
            self.assertNotIn(done, r.out, r.describe())
        self.assertIn("cat: /data/secret: Permission denied", r.err)
        self.assertEqual(self.program_sets(r)["program"]["effective"], FIVE)

    def test_unknown_name_is_refused_with_a_suggestion(self):
        r = sbx(["run", "--cap-add", "chwon", "--", "/bin/true"])
        self.assertExit(r, 125)
        self.assertOneSbxLine(r)
        self.assertIn("--cap-add: 'chwon' is not a capability (did you mean 'CAP_CHOWN'?)", r.err)
        p = self.path("typo.json")
        with open(p, "w") as f:
            json.dump({"capabilities": {"keep": ["CAP_CHOWN", "CAP_SETGUID"]}}, f)
        os.chmod(p, 0o644)
        r = sbx(["run", "--profile", p, "--", "/bin/true"])
        self.assertExit(r, 125)
        self.assertOneSbxLine(r)
        self.assertIn("/capabilities/keep/1: 'CAP_SETGUID' is not a capability (did you mean 'CAP_SETGID'?)", r.err)


class PackCapabilities(PackCase):
    def pack_keeping(self, keep, name):
        d = self.make_pack("grep CapEff /proc/self/status >&2; echo '{\"count\": 1}' > /out/result.json\n", name=name)
        with open(d + "/pack.json") as f:
            m = json.load(f)
        m["capabilities"] = {"keep": keep}
        with open(d + "/pack.json", "w") as f:
            json.dump(m, f)
        return d

    def test_manifest_keeps_a_subset_of_the_profile_never_more(self):
        recs = self.records([{"id": "a", "mm": 1}])
        d = self.pack_keeping(["CAP_NET_RAW"], "wants-raw")
        r = self.pack_run(d, recs)
        self.assertExit(r, 125, "untrusted keeps nothing: the manifest may not ask for more")
        self.assertOneSbxLine(r)
        self.assertIn("pack.json: /capabilities/keep: CAP_NET_RAW is not kept by profile 'untrusted' (it keeps none)",
                      r.err)
        r = self.pack_run(d, recs, "--profile", "trusted")
        self.assertExit(r, 125, "trusted does not keep CAP_NET_RAW either")
        self.assertIn("CAP_NET_RAW is not kept by profile 'trusted'", r.err)
        r = self.pack_run(d, recs, "--cap-add", "CAP_NET_RAW")
        self.assertExit(r, 0, "the operator may add it")
        self.assertEqual(self.need_trace(r)["enforcement"]["capabilities"]["kept"], ["CAP_NET_RAW"])
        d = self.pack_keeping(["chown"], "narrow")
        r = self.pack_run(d, recs, "--profile", "trusted")
        self.assertExit(r, 0, "a subset of trusted's five")
        caps = self.need_trace(r)["enforcement"]["capabilities"]
        self.assertEqual(caps["kept"], ["CAP_CHOWN"])
        self.assertEqual(caps["program"]["effective"], ["CAP_CHOWN"])
        d = self.pack_keeping(["CAP_CHOWM"], "typo")
        v = sbx(["pack", "validate", d])
        self.assertExit(v, 125)
        self.assertIn("/capabilities/keep/0", v.err)
        self.assertIn("did you mean 'CAP_CHOWN'", v.err)


if __name__ == "__main__":
    unittest.main()
