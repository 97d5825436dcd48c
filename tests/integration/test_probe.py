"""sbx probe: the default profile holds every boundary; a weak configuration (--seccomp unconfined,
a writable host bind) is breached on exactly those lines; the helper runs on the busybox image;
bad run options are 125."""
import json
import os

from sbxtest import MODE, SbxTestCase, busybox_digest, find_procs, sbx


class Probe(SbxTestCase):
    def probe(self, opts, timeout=120):
        r = sbx(["probe", "--json"] + list(opts), timeout=timeout)
        try:
            report = json.loads(r.out)
        except ValueError:
            self.fail("sbx probe --json printed no JSON\n" + r.describe())
        return r, report, {p["probe"]: p for p in report["probes"]}

    def test_default_profile_holds_every_boundary(self):
        r, report, probes = self.probe([])
        self.assertExit(r, 0, json.dumps(report, indent=1))
        self.assertEqual(report["breached"], 0)
        for name in ["fs.host_files", "fs.writable", "fs.mount_flags", "fs.devices", "proc.host_visible",
                     "proc.signal_host", "sys.seccomp", "sys.userns", "sys.capabilities", "net.interfaces",
                     "net.direct_egress", "net.metadata", "net.private", "net.host_loopback", "secret.present",
                     "secret.record", "limit.pids", "limit.memory", "term.survivor", "export.entries", "cleanup.mounts",
                     "record.names"]:
            self.assertIn(name, probes, f"probe {name} missing: {sorted(probes)}")
            self.assertEqual(probes[name]["result"], "held", probes[name])
        self.assertIn("Seccomp: 2", probes["sys.seccomp"]["evidence"])
        self.assertIn("limit 64 processes", probes["limit.pids"]["evidence"])
        self.assertEqual(report["run"]["status"], "ok")
        self.assertIn("symlink and the FIFO were skipped", probes["export.entries"]["evidence"])
        self.assertEqual(r.err, "", "a probe that held prints nothing on stderr")
        self.assertEqual(find_procs("sbx-probe-survivor"), {}, "a survivor is left on the host")

    def test_weak_configuration_is_breached_on_exactly_those_lines(self):
        host = self.path("shared")
        os.mkdir(host)
        os.chmod(host, 0o777)  # writable by the sandbox's mapped user, as a careless bind would be
        r, report, probes = self.probe(["--seccomp", "unconfined", "--bind", f"{host}:/data:rw"])
        self.assertExit(r, 1, json.dumps(report, indent=1))
        breached = {n for n, p in probes.items() if p["result"] == "breached"}
        self.assertEqual(breached, {"fs.writable", "sys.seccomp", "sys.userns"}, json.dumps(report, indent=1))
        self.assertIn("/data", probes["fs.writable"]["evidence"])
        self.assertIn("Seccomp: 0", probes["sys.seccomp"]["evidence"])
        self.assertEqual(os.listdir(host), [], "the probe left a file in the host directory")
        # The table for people says the same.
        t = sbx(["probe", "--seccomp", "unconfined", "--bind", f"{host}:/data:rw"], timeout=120)
        self.assertExit(t, 1)
        lines = {line.split()[0]: line.split()[1] for line in t.out.splitlines()[1:-1]}
        self.assertEqual({n for n, s in lines.items() if s == "breached"}, {"fs.writable", "sys.seccomp", "sys.userns"})
        self.assertRegex(t.out.splitlines()[-1], r"^\d+ held, 3 breached, \d+ skipped$")
        # sbx run's warning about the unconfined policy reaches the probe's caller.
        self.assertIn("sbx: warning: seccomp is UNCONFINED", t.err)

    def test_allowlist_probes_the_proxy(self):
        r, report, probes = self.probe(["--allow-host", "example.com"])
        self.assertExit(r, 0, json.dumps(report, indent=1))
        self.assertEqual(probes["net.proxy_internal"]["result"], "held")
        self.assertIn("403", probes["net.proxy_internal"]["evidence"])
        self.assertEqual(probes["net.proxy_host_loopback"]["result"], "held")
        self.assertIn("403", probes["net.proxy_host_loopback"]["evidence"])

    def test_allowlist_naming_loopback_is_breached_on_that_line(self):
        # An allowlist range that covers loopback lets the proxy (on the host) reach the host's own
        # services: reported on exactly that line.
        r, report, probes = self.probe(["--allow-host", "127.0.0.0/8:*"])
        self.assertExit(r, 1, json.dumps(report, indent=1))
        breached = {n for n, p in probes.items() if p["result"] == "breached"}
        self.assertEqual(breached, {"net.proxy_host_loopback"}, json.dumps(report, indent=1))
        self.assertIn("200", probes["net.proxy_host_loopback"]["evidence"])

    def test_limits_follow_the_options(self):
        r, report, probes = self.probe(["--pids", "20", "--memory", "200M"])
        self.assertExit(r, 0, json.dumps(report, indent=1))
        self.assertIn("limit 20 processes", probes["limit.pids"]["evidence"])
        self.assertIn("limit 200 MiB", probes["limit.memory"]["evidence"])
        r, report, probes = self.probe(["--pids", "none", "--memory", "none"])
        self.assertEqual(probes["limit.pids"]["result"], "skipped")
        self.assertEqual(probes["limit.memory"]["result"], "skipped")

    def test_runs_on_the_busybox_image(self):
        busybox_digest(self)
        r, report, probes = self.probe(["--image", "busybox"])
        self.assertExit(r, 0, json.dumps(report, indent=1))
        self.assertEqual(report["breached"], 0)
        self.assertIn("busybox", probes["record.names"]["evidence"])

    def test_bad_options_and_a_command_are_125(self):
        r = sbx(["probe", "--memory", "lots"])
        self.assertExit(r, 125)
        self.assertIn("--memory", self.assertOneSbxLine(r))
        r = sbx(["probe", "--", "true"])
        self.assertExit(r, 125)
        self.assertIn("no command", self.assertOneSbxLine(r))
        r = sbx(["probe", "--dry-run"])
        self.assertExit(r, 125)
        self.assertOneSbxLine(r)
