"""sbx probe: the default profile holds every boundary; a weak configuration (--seccomp unconfined,
a writable host bind) is breached on exactly those lines; the helper runs on the busybox image;
bad run options are 125. The allowlist end to end (an allowed host:port passes the proxy, the same
host's other ports do not), --secret (readable where declared during the run, nowhere on the host
after it, not in the record) and cleanup (mounts, cgroup, processes, files) are judged too."""
import json
import os
import secrets
import socket
import subprocess
import threading

from sbxtest import MODE, SBX, SbxTestCase, busybox_digest, find_procs, sbx, scaled, wait_for


class Listener:
    """A TCP listener on the host's 127.0.0.1 that accepts and closes: the allowed upstream."""

    def __enter__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.stop = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()
        return self.sock.getsockname()[1]

    def serve(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
                c.close()
            except OSError:
                pass

    def __exit__(self, *a):
        self.stop = True
        self.thread.join()
        self.sock.close()


class Probe(SbxTestCase):
    def probe(self, opts, timeout=120):
        r = sbx(["probe", "--json"] + list(opts), timeout=timeout)
        try:
            report = json.loads(r.out)
        except ValueError:
            self.fail("sbx probe --json printed no JSON\n" + r.describe())
        return r, report, {p["probe"]: p for p in report["probes"]}

    def limit_degraded(self, name):
        """What a plain run's record on this host says of the limit: enforced only in part."""
        tf = self.path(f"degraded-{name}.json")
        r = sbx(["run", "--trace-file", tf, "--", "/bin/true"])
        self.assertExit(r, 0)
        with open(tf) as f:
            applied = json.load(f)["enforcement"]["limits_applied"]
        return bool(applied.get(name, {}).get("degraded"))

    def test_default_profile_holds_every_boundary(self):
        r, report, probes = self.probe([])
        self.assertExit(r, 0, json.dumps(report, indent=1))
        self.assertEqual(report["breached"], 0)
        for name in ["fs.host_files", "fs.writable", "fs.mount_flags", "fs.devices", "proc.host_visible",
                     "proc.signal_host", "sys.seccomp", "sys.userns", "sys.capabilities", "net.interfaces",
                     "net.direct_egress", "net.metadata", "net.private", "net.host_loopback", "secret.present",
                     "secret.record", "limit.pids", "limit.memory", "term.survivor", "export.entries", "cleanup.mounts",
                     "record.names", "cleanup.cgroup", "cleanup.processes", "cleanup.files", "secret.after"]:
            self.assertIn(name, probes, f"probe {name} missing: {sorted(probes)}")
            expected = "held"
            if name.startswith("limit.") and self.limit_degraded(name[len("limit."):]):
                # Not enforced for the run as a whole on this host (no cgroup v2 controller): the
                # probe must not call that held, and it is not a breach.
                expected = "degraded"
                self.assertIn("not for the run as a whole", probes[name]["evidence"])
            self.assertEqual(probes[name]["result"], expected, probes[name])
        self.assertEqual(report["degraded"], sum(p["result"] == "degraded" for p in probes.values()))
        self.assertIn("Seccomp: 2", probes["sys.seccomp"]["evidence"])
        self.assertIn("limit 64 processes", probes["limit.pids"]["evidence"])
        self.assertEqual(report["run"]["status"], "ok")
        self.assertIn("symlink and the FIFO were skipped", probes["export.entries"]["evidence"])
        self.assertEqual(r.err, "", "a probe that held prints nothing on stderr")
        # The probe kills a survivor it finds (and says breached); none may outlive it. Waited for,
        # not read once: the other suite (tests/sanitize.sh runs both at once) may be mid-probe, and
        # its survivor lives until its own run ends.
        self.assertTrue(wait_for(lambda: not find_procs("sbx-probe-survivor"), scaled(10), interval=0.1),
                        f"a survivor is left on the host: {find_procs('sbx-probe-survivor')}")

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
        self.assertRegex(t.out.splitlines()[-1], r"^\d+ held, (\d+ degraded, )?3 breached, \d+ skipped$")
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
        # ... and, every port being allowed, the "other ports" line too (127.0.0.1:22 passes).
        self.assertEqual(breached, {"net.proxy_host_loopback", "net.proxy_other_ports"}, json.dumps(report, indent=1))
        self.assertIn("200", probes["net.proxy_host_loopback"]["evidence"])
        self.assertIn("127.0.0.1:22", probes["net.proxy_other_ports"]["evidence"])

    def test_allowed_host_passes_and_its_other_ports_do_not(self):
        # The allowed upstream is a listener on the host's loopback, named by an exact host:port
        # rule (as test_network.py reaches its upstreams): the proxy passes that port only.
        with Listener() as port:
            r, report, probes = self.probe(["--allow-host", f"127.0.0.1:{port}"])
        self.assertExit(r, 0, json.dumps(report, indent=1))
        self.assertEqual(probes["net.proxy_allowed"]["result"], "held", probes["net.proxy_allowed"])
        self.assertIn(f"127.0.0.1:{port} -> HTTP/1.1 200", probes["net.proxy_allowed"]["evidence"])
        self.assertEqual(probes["net.proxy_other_ports"]["result"], "held", probes["net.proxy_other_ports"])
        self.assertIn("127.0.0.1:22 -> HTTP/1.1 403", probes["net.proxy_other_ports"]["evidence"])
        self.assertEqual(probes["net.proxy_host_loopback"]["result"], "held")
        self.assertEqual(report["breached"], 0)

    def test_every_port_allowed_is_breached_on_the_other_ports_line(self):
        # A weak rule: every port of [::1]. The exact rule beside it still works; only "other
        # ports" is breached ([::1]:22 passes the policy: a tunnel, or a 502 from the upstream).
        with Listener() as port:
            r, report, probes = self.probe(["--allow-host", f"127.0.0.1:{port}", "--allow-host", "[::1]:*"])
        self.assertExit(r, 1, json.dumps(report, indent=1))
        breached = {n for n, p in probes.items() if p["result"] == "breached"}
        self.assertEqual(breached, {"net.proxy_other_ports"}, json.dumps(report, indent=1))
        self.assertIn("[::1]:22 -> ", probes["net.proxy_other_ports"]["evidence"])
        self.assertNotIn("[::1]:22 -> HTTP/1.1 403", probes["net.proxy_other_ports"]["evidence"])
        self.assertEqual(probes["net.proxy_allowed"]["result"], "held")

    def secret_file(self, value):
        p = self.path("secret-" + secrets.token_hex(4))
        with open(p, "w") as f:
            f.write(value)
        os.chmod(p, 0o600)
        return p

    def test_secret_present_during_gone_after_not_recorded(self):
        value = "s3cr3t-" + secrets.token_hex(16)
        src = self.secret_file(value)
        os.environ["SBX_PROBE_TEST_SECRET"] = "env-" + secrets.token_hex(16)
        try:
            r, report, probes = self.probe(["--secret", f"API_KEY=@{src}", "--secret", "TOKEN=env:SBX_PROBE_TEST_SECRET"])
        finally:
            env_value = os.environ.pop("SBX_PROBE_TEST_SECRET")
        self.assertExit(r, 0, json.dumps(report, indent=1))
        self.assertEqual(report["breached"], 0)
        ev = probes["secret.file"]["evidence"]
        self.assertEqual(probes["secret.file"]["result"], "held", ev)
        self.assertIn(f"/run/secrets/API_KEY: all {len(value)} bytes, mode 0400", ev)
        self.assertIn(f"/run/secrets/TOKEN: all {len(env_value)} bytes", ev)
        self.assertEqual(probes["secret.after"]["result"], "held", probes["secret.after"])
        self.assertIn("API_KEY, TOKEN", probes["secret.after"]["evidence"])
        self.assertEqual(probes["secret.record"]["result"], "held", probes["secret.record"])
        self.assertNotIn(value, r.out + r.err)
        self.assertNotIn(env_value, r.out + r.err)

    def test_a_secret_copied_into_the_environment_is_breached_on_the_record_line(self):
        # A careless configuration: the secret's value also given with --env, which the record
        # keeps (invocation.spec.env), so the ledger on the host holds it after the run: exactly
        # secret.record and secret.after are breached.
        value = "leak-" + secrets.token_hex(16)
        src = self.secret_file(value)
        r, report, probes = self.probe(["--secret", f"API_KEY=@{src}", "--env", f"COPY={value}"])
        self.assertExit(r, 1, json.dumps(report, indent=1))
        breached = {n for n, p in probes.items() if p["result"] == "breached"}
        self.assertEqual(breached, {"secret.record", "secret.after"}, json.dumps(report, indent=1))
        self.assertIn("API_KEY", probes["secret.record"]["evidence"])
        self.assertIn("traces/ledger.jsonl", probes["secret.after"]["evidence"])
        self.assertEqual(probes["secret.file"]["result"], "held")
        self.assertNotIn(value, r.out)

    def test_cleanup_lines_name_their_evidence(self):
        r, report, probes = self.probe([])
        self.assertExit(r, 0, json.dumps(report, indent=1))
        # A mount another process makes meanwhile (CI runs the root suite's podman tests beside
        # this one: /var/lib/containers/storage/overlay) is named in a clause of its own and not
        # judged (runtime/launch/probe_host.cpp); the line must still say none is where the run reaches.
        self.assertRegex(probes["cleanup.mounts"]["evidence"], r"^/proc/self/mountinfo: \d+ mounts before the run, \d+ after; none added where the run reaches(; \d+ added meanwhile outside every path the run could reach \(another process's, not judged\): .+)?$")
        self.assertRegex(probes["cleanup.processes"]["evidence"], r"no process left in the run's pid namespace \(inode \d+\)")
        self.assertIn("is empty again", probes["cleanup.files"]["evidence"])
        self.assertIn("cgroup", probes["cleanup.cgroup"]["evidence"])

    def test_runs_under_a_strict_umask(self):
        # The helper and the marker get their modes explicitly: under umask 077 the helper was
        # 0700, and as root the sandbox's mapped user could not execute it (setup_error, 125).
        p = subprocess.run(["sh", "-c", 'umask 077; exec "$0" probe --json', SBX], capture_output=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))
        self.assertEqual(json.loads(p.stdout)["breached"], 0)

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
        # A secret's source that cannot be read: 125, naming the secret, never the source text.
        r = sbx(["probe", "--secret", "K=not-a-source-value"])
        self.assertExit(r, 125)
        line = self.assertOneSbxLine(r)
        self.assertIn("--secret K", line)
        self.assertNotIn("not-a-source-value", line)
