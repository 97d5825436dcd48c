"""Seccomp and capabilities: attacks that must fail, each asserted to fail AND to appear
in the trace, and the policy loader's behaviour as users see it.

The attacks are tests/attacks/attack.c, compiled here with the host's cc (gcc comes with
`make deps`); the binary is bound read-only into the sandbox at /attack/attack.
"""
import atexit
import json
import os
import pty
import select
import shutil
import signal
import subprocess
import tempfile
import unittest

from sbxtest import MODE, SBX, SbxTestCase, note, sbx

ERRNO_ATTACKS = {
    # attack subcommand: the system call the trace must name
    "mount": "mount",
    "umount2": "umount2",
    "unshare": "unshare",
    "clone-newuser": "clone",
    "setns": "setns",
    "ptrace": "ptrace",
    "keyctl": "keyctl",
    "bpf": "bpf",
    "perf_event_open": "perf_event_open",
    "kexec_load": "kexec_load",
    "open_by_handle_at": "open_by_handle_at",
    "io_uring_setup": "io_uring_setup",
    # file watches on the shared read-only host root: a side channel on what others open (issue 30)
    "inotify": "inotify_init1",
    "fanotify_init": "fanotify_init",
}


def find_repo():
    """The source tree: the suite may run from a copy (rootless), so look beside the binary too."""
    starts = [os.environ.get("SBX_SOURCE_DIR", ""), os.path.dirname(os.path.abspath(__file__)),
              os.path.dirname(os.path.realpath(os.environ.get("SBX_BIN", "") or "/"))]
    for start in starts:
        d = start
        while d and d != "/":
            if os.path.isfile(os.path.join(d, "tests", "attacks", "attack.c")):
                return d
            d = os.path.dirname(d)
    return None


REPO = find_repo()
_attack_dir = None
_attack_error = None


def attack_dir():
    """Compiles attack.c once per suite run into a world-readable temp dir."""
    global _attack_dir, _attack_error
    if _attack_dir or _attack_error:
        return _attack_dir
    cc = shutil.which("cc") or shutil.which("gcc")
    if not REPO:
        _attack_error = "tests/attacks/attack.c not found (set SBX_SOURCE_DIR)"
    elif not cc:
        _attack_error = "no C compiler (cc/gcc): run `make deps`"
    else:
        d = tempfile.mkdtemp(prefix="sbxit-attack-")
        atexit.register(shutil.rmtree, d, True)
        os.chmod(d, 0o755)
        p = subprocess.run([cc, "-O1", "-o", os.path.join(d, "attack"), os.path.join(REPO, "tests", "attacks", "attack.c")],
                           capture_output=True, text=True)
        if p.returncode != 0:
            _attack_error = "attack.c does not compile: " + p.stderr[-2000:]
        else:
            os.chmod(os.path.join(d, "attack"), 0o755)
            _attack_dir = d
    return _attack_dir


class SeccompCase(SbxTestCase):
    def attack(self, name, opts=(), cmd_args=(), **kw):
        d = attack_dir()
        if not d:
            self.fail(_attack_error)
        return self.run_sbx(["/attack/attack", name] + list(cmd_args), ["--bind", f"{d}:/attack"] + list(opts), **kw)

    def violations(self, r):
        return self.need_trace(r).get("violations", [])

    def assertViolation(self, r, name, action=None, arch="x86_64"):
        vs = [v for v in self.violations(r) if v.get("name") == name and v.get("arch") == arch]
        self.assertTrue(vs, f"trace.violations must name {name} ({arch})\n{json.dumps(self.violations(r))}\n" + r.describe())
        v = vs[0]
        self.assertGreaterEqual(v["count"], 1)
        self.assertIsInstance(v["number"], int)
        self.assertIsInstance(v["first_at_ms"], int)
        self.assertGreaterEqual(v["first_at_ms"], 0)
        if action:
            self.assertEqual(v["action"], action, json.dumps(v))
        return v

    def policy(self, obj, name="policy.json"):
        path = self.path(name)
        with open(path, "w") as f:
            f.write(obj if isinstance(obj, str) else json.dumps(obj))
        os.chmod(path, 0o644)
        return path


class FileWatches(SeccompCase):
    """A watch on the read-only host /usr that every sandbox shares shows what the host and the
    other sandboxes open (issue 30). The default policy refuses inotify (and fanotify) in every
    profile -- `trusted` too: the runs it would watch are other callers' -- and the tools that use
    it fall back to polling."""

    def test_refused_under_trusted_too(self):
        r = self.attack("inotify", ["--profile", "trusted"])
        self.assertExit(r, 0, "inotify must be refused under trusted")
        self.assertIn("inotify: blocked", r.out, r.describe())
        self.assertNotIn("SUCCEEDED", r.out, r.describe())
        self.assertViolation(r, "inotify_init1", "SCMP_ACT_ERRNO(EPERM)")
        self.assertViolation(r, "inotify_add_watch", "SCMP_ACT_ERRNO(EPERM)")

    def test_common_tools_still_work(self):
        script = ("python3 -c 'import os, json, subprocess' && echo PY-OK;"
                  " printf 'all:\\n\\t@echo MAKE-OK\\n' > /tmp/Makefile && make -s -C /tmp;"
                  " echo TAILED > /tmp/log; timeout 2 tail -f /tmp/log; echo TAIL-EXIT-$?")
        r = self.run_sbx(["sh", "-c", script])
        self.assertExit(r, 0)
        for want in ("PY-OK", "MAKE-OK", "TAILED", "TAIL-EXIT-124"):
            self.assertIn(want, r.out, r.describe())


class Attacks(SeccompCase):
    """Run inside the sandbox as root of its user namespace: each must fail and be recorded."""

    def test_attacks_refused_with_eperm_and_recorded(self):
        for attack, syscall in ERRNO_ATTACKS.items():
            with self.subTest(attack=attack):
                r = self.attack(attack)
                self.assertExit(r, 0, f"attack {attack} must be blocked")
                self.assertIn("blocked", r.out, r.describe())
                self.assertNotIn("SUCCEEDED", r.out, r.describe())
                self.assertEqual(self.need_trace(r)["result"]["status"], "ok")
                self.assertViolation(r, syscall, "SCMP_ACT_ERRNO(EPERM)")

    def test_a_run_with_refusals_ends_with_one_line_saying_so(self):
        # Refusals used to show only with -v. clone3's ENOSYS (libc falls back to clone) is not one.
        r = self.attack("unshare")
        self.assertExit(r, 0)
        last = r.err.strip().splitlines()[-1]
        self.assertRegex(last, r"^sbx: warning: \d+ system calls? refused \(unshare\): "
                               r"see 'sbx trace show \S+ --format text'$", r.describe())
        r = self.run_sbx(["python3", "-c", "import threading; t = threading.Thread(target=print); t.start(); t.join()"])
        self.assertExit(r, 0)
        self.assertNotIn("refused", r.err, r.describe())

    def test_calls_newer_than_the_policy_answer_enosys_and_are_recorded(self):
        # A newer C library (an image's) falls back on ENOSYS and fails on EPERM: mseal (462),
        # statmount (457) and a number past every table answer ENOSYS; kexec_load, older and
        # not newer than the policy, keeps the policy's EPERM. Each is a violation in the record.
        code = ("import ctypes, errno\n"
                "libc = ctypes.CDLL(None, use_errno=True)\n"
                "for nr in (462, 457, 1000, 246):\n"
                "    r = libc.syscall(nr, 0, 0, 0, 0)\n"
                "    print(nr, r, errno.errorcode.get(ctypes.get_errno()))\n")
        r = self.run_sbx(["python3", "-c", code])
        self.assertExit(r, 0)
        self.assertEqual(r.out.split("\n")[:4], ["462 -1 ENOSYS", "457 -1 ENOSYS", "1000 -1 ENOSYS", "246 -1 EPERM"],
                         r.describe())
        rec = self.need_trace(r)
        got = {v["number"]: v["action"] for v in rec["violations"] if v.get("kind") == "seccomp"}
        self.assertEqual((got.get(462), got.get(1000), got.get(246)),
                         ("SCMP_ACT_ERRNO(ENOSYS)", "SCMP_ACT_ERRNO(ENOSYS)", "SCMP_ACT_ERRNO(EPERM)"), r.describe())
        notes = rec["enforcement"]["seccomp"].get("notes", [])
        self.assertTrue(any("are answered ENOSYS" in n for n in notes), notes)

    def test_flood_of_junk_calls_does_not_hide_the_real_attempts(self):
        """1,100 distinct junk calls first, then mount, ptrace and bpf: the list stays bounded, the
        policy's named calls are listed anyway, and the totals say how much was left out."""
        r = self.attack("flood-then-escape")
        self.assertExit(r, 0, "the attempts must be refused")
        self.assertIn("flood-then-escape: blocked", r.out, r.describe())
        for name in ("mount", "ptrace", "bpf"):
            self.assertViolation(r, name, "SCMP_ACT_ERRNO(EPERM)")
        t = self.need_trace(r)
        listed = [v for v in t["violations"] if v.get("kind") == "seccomp"]
        summary = t.get("violations_summary", {}).get("seccomp")
        self.assertIsNotNone(summary, "trace.violations_summary.seccomp must say what the list left out\n" + r.describe())
        self.assertLessEqual(len(listed), summary["listed_cap"] + 3, "the list must stay bounded")
        self.assertEqual(summary["listed"], len(listed))
        self.assertTrue(summary["truncated"], json.dumps(summary))
        self.assertGreaterEqual(summary["calls"], 1103, json.dumps(summary))
        self.assertEqual(summary["calls"], sum(v["count"] for v in listed) + summary["unlisted_calls"], json.dumps(summary))
        self.assertGreaterEqual(summary["unlisted_distinct"], 1100 + 3 - len(listed), json.dumps(summary))
        self.assertIn("not listed", r.err, "a truncated list is said on stderr too")

    def test_x32_syscall_kills_the_sandbox_and_is_named(self):
        r = self.attack("x32")
        self.assertExit(r, 159, "a foreign-ABI (x32) system call must kill the sandbox (SIGSYS semantics)")
        t = self.need_trace(r)
        self.assertEqual(t["result"]["status"], "seccomp_violation")
        self.assertEqual(t["result"]["signal"], signal.SIGSYS)
        self.assertIn("getpid", t["result"]["reason"])
        self.assertViolation(r, "getpid", "SCMP_ACT_KILL_PROCESS", arch="x32")
        self.assertNotIn("SUCCEEDED", r.out)

    def test_int80_32bit_syscall_fails(self):
        d = attack_dir()
        if not d:
            self.fail(_attack_error)
        outside = subprocess.run([os.path.join(d, "attack"), "int80"], capture_output=True)
        r = self.attack("int80")
        self.assertNotIn("SUCCEEDED", r.out, r.describe())
        t = self.need_trace(r)
        if outside.returncode == -signal.SIGSEGV:
            # This kernel has no `int 0x80` entry at all (the host gets SIGSEGV too): the call
            # cannot reach seccomp. It still must fail inside, and the trace says how it ended.
            note("host kernel refuses int 0x80 itself (SIGSEGV outside the sandbox too); "
                 "the filter's i386 handling is covered by the unit tests")
            self.assertIn(r.rc, (139, 159), r.describe())
            self.assertIn(t["result"]["status"], ("signaled", "seccomp_violation"))
            return
        self.assertExit(r, 159, "an i386 system call must kill the sandbox")
        self.assertEqual(t["result"]["status"], "seccomp_violation")
        self.assertViolation(r, "getpid", "SCMP_ACT_KILL_PROCESS", arch="x86")

    def test_tiocsti_into_the_controlling_terminal_fails(self):
        d = attack_dir()
        if not d:
            self.fail(_attack_error)
        master, slave = pty.openpty()
        try:
            tpath = self.path("trace-tty.json")
            r = sbx(["run", "--bind", f"{d}:/attack", "--trace-file", tpath, "--", "/attack/attack", "tiocsti"],
                    stdin=slave)
            os.close(slave)
            slave = -1
            injected = b""
            while select.select([master], [], [], 0.2)[0]:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                injected += chunk
            self.assertNotIn(b"X", injected, "a character was pushed into the terminal's input")
            self.assertEqual(r.rc, 0, r.describe())
            self.assertIn("tiocsti: blocked", r.out)
            self.assertIn("tiocsti (upper bits set): blocked", r.out)
            with open(tpath) as f:
                r.trace = json.load(f)
            v = self.assertViolation(r, "ioctl", "SCMP_ACT_ERRNO(EPERM)")
            self.assertGreaterEqual(v["count"], 2)
        finally:
            os.close(master)
            if slave >= 0:
                os.close(slave)

    def test_ptrace_of_a_sibling_fails(self):
        r = self.attack("ptrace")
        self.assertExit(r, 0)
        self.assertIn("ptrace (attach to sibling): blocked", r.out)
        self.assertViolation(r, "ptrace")

    def test_the_program_cannot_set_init_s_limits(self):
        # Init shares the program's uid, so the kernel lets the program prlimit it: RLIMIT_CPU 1
        # had init killed while the program kept it busy (the record lost the program's CPU
        # time), RLIMIT_NOFILE 0 broke a template call's pid 1 (its record blamed sbx). The
        # default policy refuses setting pid 1's limits; reading them, and setting its own and
        # its children's, still work.
        code = ("import os, resource\n"
                "def attempt(pid, res, lim):\n"
                "    try:\n        resource.prlimit(pid, res, lim)\n        return 'set'\n"
                "    except OSError as e:\n        return os.strerror(e.errno)\n"
                "pid = os.fork()\n"
                "if pid == 0:\n    import time; time.sleep(5); os._exit(0)\n"
                "print(attempt(1, resource.RLIMIT_CPU, (1, 1)), attempt(1, resource.RLIMIT_NOFILE, (0, 0)),\n"
                "      resource.prlimit(1, resource.RLIMIT_NOFILE)[0] > 0, attempt(0, resource.RLIMIT_CORE, (0, 0)),\n"
                "      attempt(pid, resource.RLIMIT_NOFILE, (64, 64)), sep=',')\n"
                "os.kill(pid, 9)\n")
        r = self.run_sbx(["python3", "-c", code])
        self.assertExit(r, 0)
        self.assertEqual(r.out.strip(), "Operation not permitted,Operation not permitted,True,set,set", r.describe())
        self.assertViolation(r, "prlimit64")

    def test_setuid_binary_gains_nothing(self):
        d = attack_dir()
        if not d:
            self.fail(_attack_error)
        # A setuid copy owned by whoever is uid 0 inside the sandbox: run as uid 1000, it would
        # become root of the user namespace if setuid worked.
        probe = self.run_sbx(["true"])
        ident = self.need_trace(probe)["enforcement"].get("identity", {})
        owner = None
        for m in ident.get("uid_map", []):
            if m["inside"] == 0:
                owner = m["outside"]
        sd = tempfile.mkdtemp(prefix="sbxit-suid-")
        os.chmod(sd, 0o755)
        try:
            suid = os.path.join(sd, "attack")
            shutil.copy(os.path.join(d, "attack"), suid)
            if owner is not None and os.geteuid() == 0:
                os.chown(suid, owner, owner)
            os.chmod(suid, 0o4755)
            r = self.run_sbx(["/suid/attack", "setuid"], ["--bind", f"{sd}:/suid", "--uid", "1000", "--gid", "1000"])
            if r.rc == 125 and MODE == "rootless":
                r = self.run_sbx(["/suid/attack", "setuid"], ["--bind", f"{sd}:/suid"])
            self.assertExit(r, 0, "a setuid binary must gain nothing")
            self.assertIn("setuid: blocked", r.out)
            self.assertIn("NoNewPrivs=1", r.out)
            caps = self.need_trace(r)["enforcement"]["capabilities"]
            self.assertEqual(caps["kept"], [])
            self.assertTrue(caps.get("no_new_privs"))
        finally:
            shutil.rmtree(sd, ignore_errors=True)


# Where sbx's filter once let sendmsg through: the address after the `syscall` instruction of its
# hand-off stub. sbx is static and not position-independent, so the address was fixed per build;
# this is the one of the last build that had it (nm: sbx_handoff_sendmsg_after_syscall). A binary
# that still has the symbol is attacked at its own address.
LAST_HANDOFF_ADDRESS = 0x607a07


def handoff_address():
    nm = shutil.which("nm")
    if nm and SBX:
        p = subprocess.run([nm, SBX], capture_output=True, text=True)
        for line in p.stdout.splitlines():
            f = line.split()
            if len(f) == 3 and f[2] == "sbx_handoff_sendmsg_after_syscall":
                return int(f[0], 16)
    return LAST_HANDOFF_ADDRESS


class HandOff(SeccompCase):
    """The listener's way to the supervisor adds nothing to the policy, and the program child's
    last calls before execve cannot hang the run."""

    def test_sendmsg_from_the_old_handoff_address_is_refused_and_recorded(self):
        p = self.policy({"defaultAction": "SCMP_ACT_ALLOW",
                         "syscalls": [{"names": ["sendmsg"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13}]})
        addr = handoff_address()
        r = self.attack("handoff-forge", ["--seccomp", p], cmd_args=[f"{addr:x}"])
        self.assertNotIn("cannot map", r.out, r.describe())
        self.assertNotIn("SUCCEEDED", r.out, f"sendmsg from 0x{addr:x} got past a policy that forbids it\n" + r.describe())
        self.assertExit(r, 0)
        self.assertIn("handoff-forge: blocked (1024 of 1024", r.out, r.describe())
        v = self.assertViolation(r, "sendmsg", "SCMP_ACT_ERRNO(EACCES)")
        self.assertEqual(v["count"], 1024, "every call is refused and recorded")
        summary = self.need_trace(r)["violations_summary"]["seccomp"]
        self.assertEqual(summary["calls"], 1024, json.dumps(summary))

    def test_the_program_holds_no_listener(self):
        r = self.run_sbx(["ls", "-l", "/proc/self/fd/"])
        self.assertExit(r, 0)
        self.assertIn("0 -> /dev/null", r.out, r.describe())
        self.assertNotIn("seccomp", r.out, r.describe())

    def test_policy_refusing_execve_is_a_clear_error_not_a_hang(self):
        for action in ({"action": "SCMP_ACT_ERRNO", "errnoRet": 13}, {"action": "SCMP_ACT_KILL_PROCESS"}):
            with self.subTest(action=action["action"]):
                p = self.policy({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [dict(names=["execve"], **action)]})
                r = self.run_sbx(["true"], ["--seccomp", p], timeout=20)
                self.assertExit(r, 125)
                line = self.assertOneSbxLine(r)
                self.assertIn("setup failed at seccomp: the seccomp policy refuses execve", line)
                self.assertIn(action["action"], line)
                self.assertEqual(self.need_trace(r)["result"]["status"], "setup_error")

    def test_failed_execve_under_a_policy_refusing_write_and_exit_is_reported(self):
        """execve passes the filter but fails (no such file); the policy refuses what the child
        would report and exit with: init reports, and the child leaves without a system call."""
        p = self.policy({"defaultAction": "SCMP_ACT_ALLOW",
                         "syscalls": [{"names": ["write", "exit", "exit_group"], "action": "SCMP_ACT_ERRNO"}]})
        r = self.run_sbx(["/no/such/program"], ["--seccomp", p], timeout=20)
        self.assertExit(r, 127)
        self.assertIn("setup failed at execve: execute '/no/such/program': No such file or directory", r.err)
        self.assertEqual(self.need_trace(r)["result"]["status"], "setup_error")


class Policies(SeccompCase):
    def test_default_policy_is_recorded_and_cached(self):
        r1 = self.run_sbx(["true"])
        self.assertExit(r1, 0)
        r2 = self.run_sbx(["true"])
        self.assertExit(r2, 0)
        s = self.need_trace(r2)["enforcement"]["seccomp"]
        self.assertEqual(s["mode"], "filter")
        self.assertEqual(s["profile"], "default")
        self.assertRegex(s["sha256"], r"^[0-9a-f]{64}$")
        self.assertEqual(s["default_action"], "SCMP_ACT_ERRNO(EPERM)")
        self.assertIsInstance(s["unresolved"], list)
        self.assertTrue(s["cached"], "the second run must load the compiled policy from the cache")
        self.assertIsInstance(s["setup_us"], int)
        self.assertEqual(self.need_trace(r2)["violations"], [])

    def test_ordinary_programs_run_under_the_default_policy(self):
        r = self.run_sbx(["python3", "-c", "import threading, subprocess, os\n"
                          "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
                          "print(subprocess.run(['sh', '-c', 'echo child; ls / >/dev/null'], capture_output=True, text=True).stdout.strip())\n"
                          "os.makedirs('/tmp/a/b'); print(sorted(os.listdir('/tmp/a')))"])
        self.assertExit(r, 0)
        self.assertEqual(r.out.split(), ["thread", "child", "['b']"], r.describe())

    def test_policy_forbidding_mkdirat_makes_mkdir_fail_with_its_errno(self):
        p = self.policy({"defaultAction": "SCMP_ACT_ALLOW",
                         "syscalls": [{"names": ["mkdirat", "mkdir"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13}]})
        r = self.run_sbx(["mkdir", "/tmp/d"], ["--seccomp", p])
        self.assertExit(r, 1)
        self.assertIn("Permission denied", r.err)
        names = {v["name"] for v in self.violations(r)}
        self.assertTrue(names & {"mkdirat", "mkdir"}, r.describe())
        v = [v for v in self.violations(r) if v["name"] in ("mkdirat", "mkdir")][0]
        self.assertEqual(v["action"], "SCMP_ACT_ERRNO(EACCES)")
        s = self.need_trace(r)["enforcement"]["seccomp"]
        self.assertEqual(s["profile"], p)
        self.assertEqual(s["default_action"], "SCMP_ACT_ALLOW")

    def test_kill_action_ends_the_run_with_159_naming_the_syscall(self):
        p = self.policy({"defaultAction": "SCMP_ACT_ALLOW",
                         "syscalls": [{"names": ["mkdirat", "mkdir"], "action": "SCMP_ACT_KILL_PROCESS"}]})
        r = self.run_sbx(["sh", "-c", "echo before; mkdir /tmp/d; echo after"], ["--seccomp", p])
        self.assertExit(r, 159)
        self.assertIn("before", r.out)
        self.assertNotIn("after", r.out)
        t = self.need_trace(r)
        self.assertEqual(t["result"]["status"], "seccomp_violation")
        self.assertIn("mkdir", t["result"]["reason"])
        self.assertTrue([v for v in t["violations"] if v["name"].startswith("mkdir") and v["action"] == "SCMP_ACT_KILL_PROCESS"])

    def test_a_sigsys_the_program_sends_itself_is_no_seccomp_violation(self):
        # The policy's kills are the supervisor's, with the call named; a SIGSYS the program sends
        # itself once read as "seccomp_violation" with no violation recorded.
        r = self.run_sbx(["sh", "-c", "kill -SYS $$"])
        self.assertExit(r, 159)
        t = self.need_trace(r)
        self.assertEqual(t["result"]["status"], "signaled", t["result"])
        self.assertEqual(t["result"]["signal"], signal.SIGSYS)
        self.assertIn("not from sbx's seccomp policy", t["result"]["reason"])
        self.assertEqual(t["violations"], [])

    def test_unknown_syscall_name_is_skipped_and_reported(self):
        p = self.policy({"defaultAction": "SCMP_ACT_ALLOW",
                         "syscalls": [{"names": ["frobnicate_9000", "kexec_load"], "action": "SCMP_ACT_ERRNO"}]})
        r = self.run_sbx(["true"], ["--seccomp", p])
        self.assertExit(r, 0)
        self.assertEqual(self.need_trace(r)["enforcement"]["seccomp"]["unresolved"], ["frobnicate_9000"])

    def test_malformed_policy_exits_125_naming_file_and_json_path(self):
        p = self.policy({"defaultAction": "SCMP_ACT_ERRNO",
                         "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"},
                                      {"names": ["write"], "action": "SCMP_ACT_FOO"}]})
        r = self.run_sbx(["true"], ["--seccomp", p])
        self.assertExit(r, 125)
        self.assertIn(f"{p}: /syscalls/1/action: unknown action 'SCMP_ACT_FOO'", r.err)
        self.assertEqual(self.need_trace(r)["result"]["status"], "setup_error")
        bad = self.policy("{\"defaultAction\": ", "broken.json")
        r2 = self.run_sbx(["true"], ["--seccomp", bad])
        self.assertExit(r2, 125)
        self.assertIn("broken.json: /defaultAction: not valid JSON", r2.err)
        r3 = self.run_sbx(["true"], ["--seccomp", self.path("missing.json")])
        self.assertExit(r3, 125)
        self.assertIn("missing.json", r3.err)

    def test_docker_shaped_policy_loads(self):
        if not REPO:
            self.fail("tests/fixtures/seccomp/docker-trimmed.json not found (set SBX_SOURCE_DIR)")
        with open(os.path.join(REPO, "tests", "fixtures", "seccomp", "docker-trimmed.json")) as f:
            p = self.policy(f.read(), "docker.json")
        r = self.attack("mount", ["--seccomp", p])
        self.assertNotEqual(r.rc, 125, r.describe())
        self.assertNotIn("SUCCEEDED", r.out, r.describe())
        s = self.need_trace(r)["enforcement"]["seccomp"]
        self.assertEqual(s["mode"], "filter")
        self.assertEqual(s["unresolved"], ["landlock_frobnicate"])
        self.assertTrue(any("CAP_SYS_ADMIN" in n for n in s["notes"]), s["notes"])
        self.assertTrue(any("archMap" in n for n in s["notes"]), s["notes"])
        self.assertViolation(r, "mount", "SCMP_ACT_ERRNO(EPERM)")

    def test_podman_and_docker_policies_as_debian_ships_them_load_unchanged(self):
        """Podman's /usr/share/containers/seccomp.json (golang-github-containers-common 0.50.1) and
        Docker's default profile (golang-github-docker-docker-dev 20.10.24), as Debian 12 ships them."""
        if not REPO:
            self.fail("tests/fixtures/seccomp/ not found (set SBX_SOURCE_DIR)")
        for fixture in ("podman-debian12.json", "docker-debian12.json"):
            with self.subTest(policy=fixture):
                with open(os.path.join(REPO, "tests", "fixtures", "seccomp", fixture)) as f:
                    p = self.policy(f.read(), fixture)
                r = self.run_sbx(["sh", "-c", "echo hello"], ["--seccomp", p])
                self.assertExit(r, 0, f"a run under {fixture}")
                self.assertEqual(r.out, "hello\n")
                r = self.attack("bpf", ["--seccomp", p])
                self.assertExit(r, 0, "bpf is refused (EPERM without CAP_SYS_ADMIN)")
                self.assertViolation(r, "bpf", "SCMP_ACT_ERRNO(EPERM)")
                want = "SCMP_ACT_ERRNO(ENOSYS)" if fixture.startswith("podman") else "SCMP_ACT_ERRNO(EPERM)"
                self.assertEqual(self.need_trace(r)["enforcement"]["seccomp"]["default_action"], want)

    def test_unconfined_is_loud(self):
        r = self.attack("mount", ["--seccomp", "unconfined"])
        self.assertIn("sbx: warning: seccomp is UNCONFINED", r.err)
        s = self.need_trace(r)["enforcement"]["seccomp"]
        self.assertEqual(s["mode"], "unconfined")
        self.assertIn("UNCONFINED", s["note"])
        self.assertEqual(self.need_trace(r)["violations"], [])
        # Still no capabilities: the kernel refuses the mount itself.
        self.assertExit(r, 0)

    def test_seccomp_in_a_profile_and_dry_run(self):
        prof = self.policy({"seccomp": "unconfined"}, "prof.json")
        r = sbx(["run", "--profile", prof, "--dry-run", "--", "true"])
        self.assertEqual(r.rc, 0, r.describe())
        self.assertEqual(json.loads(r.out)["seccomp"], "unconfined")
        r2 = sbx(["run", "--profile", prof, "--seccomp", "default", "--dry-run", "--", "true"])
        self.assertEqual(json.loads(r2.out)["seccomp"], "default")


if __name__ == "__main__":
    unittest.main()
