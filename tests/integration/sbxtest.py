"""Shared helpers for sbx's integration tests.

The harness (run.sh) sets:
  SBX_BIN        the sbx binary under test (readable/executable by the user running the suite)
  SBX_MODE       "root" or "rootless"
  SBX_STATE_DIR  a fresh state dir for this suite run (traces land in $SBX_STATE_DIR/traces)
  SBX_SCHEMA     path of schemas/trace.schema.json ("" or missing file: schema checks are skipped)
  TMPDIR         a temp dir owned by the user running the suite

Everything here runs sbx the way users do: as a separate process, with a timeout, capturing
stdout/stderr/exit status and the --trace-file JSON.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

SBX = os.environ.get("SBX_BIN", "")
MODE = os.environ.get("SBX_MODE", "root" if os.geteuid() == 0 else "rootless")
SCHEMA_PATH = os.environ.get("SBX_SCHEMA", "")

# A sanitizer build of sbx (tests/sanitize.sh) is several times slower. Tests that time sbx widen
# the slack of their *upper* bounds by this factor (scaled(...)); lower bounds never move, and a
# normal run uses 1, so the normal suite is exactly as strict as before.
TIME_SCALE = float(os.environ.get("SBX_TEST_TIME_SCALE", "1") or "1")


def scaled(limit, floor=0.0, sanitizer_scale=0.0):
    """An upper time bound `limit` whose slack above `floor` grows with TIME_SCALE; in a sanitizer
    pass (TIME_SCALE > 1) by at least `sanitizer_scale`, for a bound that needs more than the rest."""
    scale = max(TIME_SCALE, sanitizer_scale) if TIME_SCALE > 1 else TIME_SCALE
    return floor + (limit - floor) * scale


ALL_NAMESPACES = ["user", "pid", "mount", "net", "ipc", "uts", "cgroup"]
TRACE_STATUSES = {"ok", "exit_nonzero", "signaled", "timeout", "oom", "seccomp_violation",
                  "output_limit", "input_invalid", "output_invalid", "setup_error"}

_schema_validator = None
_schema_note_printed = False


def sanitizer_start_s():
    """In a sanitizer pass (TIME_SCALE > 1), the least of three starts of `sbx --version`, in
    seconds; 0 otherwise. The ASan build registers ~100 MB of instrumented .data at every start
    (no longer relocated: it is linked -no-pie, CMakeLists.txt; 0.3 s on a 2-core VM, more under
    load, against ~2 ms for the static release binary): a bound on what sbx itself does adds it,
    rather than a scale that guesses it."""
    if TIME_SCALE <= 1:
        return 0.0
    walls = []
    for _ in range(3):
        t = time.monotonic()
        subprocess.run([SBX, "--version"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        walls.append(time.monotonic() - t)
    return min(walls)


def shared_tmp(test, tmp):
    """As root the sandbox's uid could not write the caller's $TMPDIR (sbx refuses such a rw bind):
    open it for the attack as /tmp is (1777), so that the attacker writes there as any other user
    of a shared /tmp does. Rootless the sandbox writes as the caller already."""
    if os.geteuid() == 0:
        mode = os.stat(tmp).st_mode & 0o7777
        os.chmod(tmp, 0o1777)
        test.addCleanup(os.chmod, tmp, mode)


def note(msg):
    """A remark that shows up in the test log (stderr), e.g. which of two allowed behaviours we saw."""
    sys.stderr.write(f"\n    note: {msg}\n")
    sys.stderr.flush()


def schema_validator():
    """A jsonschema validator for schemas/trace.schema.json, or None (with the reason printed once)."""
    global _schema_validator, _schema_note_printed
    if _schema_validator is not None:
        return _schema_validator
    reason = None
    if not SCHEMA_PATH or not os.path.exists(SCHEMA_PATH):
        reason = f"trace schema file not found ({SCHEMA_PATH or 'schemas/trace.schema.json'}): schema validation skipped"
    else:
        try:
            import jsonschema  # noqa: F401
        except ImportError:
            reason = "python3-jsonschema is not installed: schema validation skipped"
    if reason:
        if not _schema_note_printed:
            note(reason)
            _schema_note_printed = True
        return None
    import jsonschema
    with open(SCHEMA_PATH) as f:
        schema = json.load(f)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    _schema_validator = cls(schema, format_checker=getattr(cls, "FORMAT_CHECKER", None))
    return _schema_validator


def schema_missing_reason():
    if not SCHEMA_PATH or not os.path.exists(SCHEMA_PATH):
        return f"trace schema file not found ({SCHEMA_PATH or 'schemas/trace.schema.json'})"
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        return "python3-jsonschema is not installed"
    return None


def validate_trace(tc, trace):
    """Validates a trace record against the shipped schema (when it exists) and the basics of the contract."""
    v = schema_validator()
    if v is not None:
        errors = sorted(v.iter_errors(trace), key=lambda e: list(e.path))
        if errors:
            lines = [f"  at /{'/'.join(str(p) for p in e.path)}: {e.message}" for e in errors[:10]]
            tc.fail("trace record does not validate against schemas/trace.schema.json:\n" + "\n".join(lines))
    tc.assertEqual(trace.get("schema"), "sbx.trace/v1", "trace.schema")
    tc.assertIn("result", trace)
    tc.assertIn(trace["result"].get("status"), TRACE_STATUSES, "trace.result.status")


def ledger_lines(state):
    """The trace ledger's lines (<state>/traces/ledger.jsonl) as parsed JSON: {record, seq, run_id, prev, hash}.
    Whole lines only: a test that polls the ledger while sbx appends to it can read a line that
    is still being written (one write(2) is not atomic to a reader; seen in CI), and a line
    without its newline is not yet a record."""
    path = os.path.join(state, "traces", "ledger.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        data = f.read()
    return [json.loads(line) for line in data[:data.rfind(b"\n") + 1].split(b"\n") if line]


def write_tree(d, files):
    """Writes {relative path: text} below the directory d (made as needed), then makes d and every
    directory in it 0755 and every file 0644: a pack or image tree the sandbox's mapped uid (as
    root) can read, whatever the umask."""
    for rel, content in files.items():
        os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
        with open(os.path.join(d, rel), "w") as f:
            f.write(content)
    for top, _, names in os.walk(d):
        os.chmod(top, 0o755)
        for n in names:
            os.chmod(os.path.join(top, n), 0o644)


def stored_records(state):
    """The records in the trace ledger, by run id."""
    return {e["run_id"]: e["record"] for e in ledger_lines(state)}


BUILD_BUSYBOX = os.environ.get("SBX_BUILD_BUSYBOX",
                               os.path.join(os.environ.get("SBX_REPO", ""), "rootfs/build-busybox.sh"))
_busybox = {}


def busybox_tree():
    """The busybox image tree (rootfs/build-busybox.sh), built once per suite run."""
    if "tree" not in _busybox:
        d = tempfile.mkdtemp(prefix="sbxit-bb-")
        os.chmod(d, 0o755)
        subprocess.run([BUILD_BUSYBOX, d + "/tree"], check=True, capture_output=True)
        _busybox["tree"] = d + "/tree"
    return _busybox["tree"]


def busybox_digest(tc):
    """Imports the busybox image as `busybox` into the suite's store (once); returns its digest."""
    if "digest" not in _busybox:
        r = sbx(["image", "import", busybox_tree(), "--name", "busybox", "--quiet"], timeout=120)
        tc.assertEqual(r.rc, 0, r.describe())
        _busybox["digest"] = r.out.strip()
    return _busybox["digest"]


class Result:
    def __init__(self, argv, rc, stdout, stderr, wall, trace=None, trace_path=None):
        self.argv, self.rc, self.stdout, self.stderr, self.wall = argv, rc, stdout, stderr, wall
        self.trace, self.trace_path = trace, trace_path

    @property
    def out(self):
        return self.stdout.decode(errors="replace")

    @property
    def err(self):
        return self.stderr.decode(errors="replace")

    @property
    def program_stderr(self):
        """stderr without sbx's own warning lines ("sbx: warning: ..."), for tests about the program's
        stream. Whether sbx may print those at all is checked by test_cli's quiet-by-default test.
        A warning after the run (a stream truncated at --output-limit) follows the program's last
        byte, which need not end a line: it is cut off the end too."""
        lines = self.stderr.splitlines(keepends=True)
        if lines:
            lines[-1] = re.sub(rb"sbx: warning: [^\n]*\n\Z", b"", lines[-1])
        return b"".join(line for line in lines if not line.startswith(b"sbx: warning: "))

    def describe(self):
        return (f"command: {' '.join(self.argv)}\n  exit: {self.rc}  wall: {self.wall * 1000:.0f} ms\n"
                f"  stdout: {self.stdout[:2000]!r}\n  stderr: {self.stderr[:2000]!r}")


def sbx(args, timeout=30, env=None, cwd=None, input=None, pass_fds=(), stdin=subprocess.DEVNULL):
    """Runs `sbx ARGS...` and returns a Result. A run that exceeds `timeout` is killed and raises."""
    argv = [SBX] + list(args)
    start = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.PIPE if input is not None else stdin,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                         pass_fds=pass_fds, start_new_session=False)
    try:
        # The harness's guard against a hung sbx, not a bound a test asserts: wider for a sanitizer build.
        out, err = p.communicate(input=input, timeout=timeout * TIME_SCALE if timeout else timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        try:
            out, err = p.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            # A leftover process of the sandbox still holds the pipes: stop waiting for EOF.
            for f in (p.stdout, p.stderr):
                f.close()
            p.wait()
            out, err = b"", b""
        raise AssertionError(f"sbx did not finish within {timeout}s: {' '.join(argv)}\n"
                             f"  stdout so far: {out[:500]!r}\n  stderr so far: {err[:500]!r}")
    return Result(argv, p.returncode, out, err, time.monotonic() - start)


class SbxTestCase(unittest.TestCase):
    """Base class: a scratch dir per test, `self.run_sbx(cmd, opts)` with a trace file."""

    maxDiff = 4000

    def setUp(self):
        if not SBX or not os.access(SBX, os.X_OK):
            self.fail(f"SBX_BIN is not an executable file: {SBX!r}")
        self.tmp = tempfile.mkdtemp(prefix="sbxit-case-")
        # The sandbox's users may map to an unprivileged host uid (root mode): keep our scratch
        # dirs traversable so bind sources resolve the way they would for a user's project dir.
        os.chmod(self.tmp, 0o755)
        self._n = 0

    def tearDown(self):
        subprocess.run(["rm", "-rf", "--one-file-system", self.tmp], check=False)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def run_sbx(self, cmd, opts=(), trace=True, timeout=30, env=None, cwd=None, input=None,
                pass_fds=(), validate=True):
        """sbx run [opts] --trace-file T -- cmd...; loads the trace (if written) into result.trace."""
        if not trace:
            return sbx(["run"] + list(opts) + ["--"] + list(cmd), timeout=timeout, env=env, cwd=cwd, input=input,
                       pass_fds=pass_fds)
        return self.sbx_traced(["run"] + list(opts), after=["--"] + list(cmd), timeout=timeout, env=env, cwd=cwd,
                               input=input, pass_fds=pass_fds, validate=validate)

    def sbx_traced(self, args, after=(), timeout=30, env=None, cwd=None, input=None, pass_fds=(), validate=True):
        """sbx ARGS --trace-file T AFTER... (a command that takes --trace-file: run, pack run); loads
        the trace, if one was written, into result.trace (None otherwise) and validates it."""
        self._n += 1
        tpath = self.path(f"trace-{self._n}.json")
        r = sbx(list(args) + ["--trace-file", tpath] + list(after), timeout=timeout, env=env, cwd=cwd, input=input,
                pass_fds=pass_fds)
        r.trace_path = tpath
        r.trace = None
        if os.path.exists(tpath):
            with open(tpath) as f:
                text = f.read()
            try:
                r.trace = json.loads(text)
            except ValueError as e:
                self.fail(f"--trace-file is not valid JSON ({e}): {text[:500]!r}\n" + r.describe())
            if validate:
                validate_trace(self, r.trace)
        return r

    def need_trace(self, r):
        if r.trace is None:
            self.fail("no trace record written to --trace-file\n" + r.describe())
        return r.trace

    def assertExit(self, r, code, msg=""):
        self.assertEqual(r.rc, code, f"{msg}\n{r.describe()}")

    def assertOneSbxLine(self, r):
        """Usage/setup errors: exactly one line on stderr, starting 'sbx: '. Progress lines of a
        store operation that took over a second (runtime/base/progress_line.hpp: "importing SRC:
        extracting, 12 entries, 3.0 MiB"; slow on a loaded machine) come before it and are not
        errors: they are left out."""
        lines = [l for l in r.err.splitlines() if not PROGRESS_LINE.match(l)]
        self.assertEqual(len(lines), 1, "expected exactly one line on stderr\n" + r.describe())
        self.assertTrue(lines[0].startswith("sbx: "), "stderr line must start with 'sbx: '\n" + r.describe())
        return lines[0]

    def assertRefused(self, r, *words):
        """A usage or setup error (exit 125, one 'sbx: ' line) whose line says each of `words`."""
        self.assertExit(r, 125)
        line = self.assertOneSbxLine(r)
        for w in words:
            self.assertIn(w, line)
        return line


# A store operation's progress line (runtime/base/progress_line.cpp, not on a terminal).
PROGRESS_LINE = re.compile(r"^(importing|verifying) .*: [a-z ]+, [0-9]+ entries, [0-9.]+ (B|KiB|MiB|GiB|TiB)$")


def unique(tag="m"):
    return f"{tag}{uuid.uuid4().hex[:12]}"


def sleep_marker(whole=1234):
    """A `sleep` argument that marks one test's processes on the host: a number no other test, and
    no other suite running at the same time (tests/sanitize.sh runs root's beside rootless's), uses.
    find_procs matches substrings; every marker has the same length, so none is part of another."""
    return f"{whole}.{uuid.uuid4().int % 10**12:012d}"


def procs():
    """{pid: (cmdline as list of str, uid)} of every process visible on the host."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                raw = f.read()
            st = os.stat(f"/proc/{d}")
        except OSError:
            continue
        out[int(d)] = ([a.decode(errors="replace") for a in raw.split(b"\0") if a], st.st_uid)
    return out


def find_procs(needle):
    """Host processes whose cmdline contains `needle` as one argument (or part of one)."""
    me = os.getpid()
    return {pid: cl for pid, (cl, _) in procs().items()
            if pid != me and any(needle in a for a in cl)}


def find_program(needle, prog="sleep"):
    """Like find_procs, but only processes running `prog` (not sbx itself, whose argv holds the needle too)."""
    return {pid: cl for pid, cl in find_procs(needle).items() if os.path.basename(cl[0]) == prog}


def wait_for(pred, timeout, interval=0.01):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def mountinfo():
    with open("/proc/self/mountinfo") as f:
        # Drop the mount id / parent id fields so that a remount does not look like a new mount.
        return sorted(" ".join(line.split()[2:]) for line in f)


def kill_tree_by_marker(marker):
    for pid in find_procs(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


HEX64 = re.compile(r"^[0-9a-f]{64}$")


# What the program can see of, and do to, sbx's init (pid 1) through /proc. Prints one line:
# "INITVIEW " + JSON {what: text or "ERR <errno name>"}. check_init_view judges it.
INIT_VIEW_PROBE = r"""
import errno, json, os
res = {}
def attempt(name, fn):
    try:
        res[name] = fn()
    except OSError as e:
        res[name] = "ERR " + errno.errorcode.get(e.errno, str(e.errno))
def read(name):
    with open("/proc/1/" + name, "rb") as f:
        return f.read().decode(errors="replace")
# (mountinfo is left out: it is the sandbox's one mount table, the same as /proc/self/mountinfo.)
for n in ("cmdline", "environ", "maps", "status", "stat"):
    attempt(n, lambda: read(n))
for n in ("cwd", "root", "exe"):
    attempt(n, lambda: os.readlink("/proc/1/" + n))
attempt("fd", lambda: " ".join(sorted(os.listdir("/proc/1/fd"))))
attempt("fdinfo", lambda: " ".join(sorted(os.listdir("/proc/1/fdinfo"))))
attempt("oom_before", lambda: read("oom_score_adj").strip())
def raise_oom():
    with open("/proc/1/oom_score_adj", "w") as f:
        f.write("777")
    return "WROTE"
attempt("oom_write", raise_oom)
attempt("oom_after", lambda: read("oom_score_adj").strip())
print("INITVIEW " + json.dumps(res), flush=True)
"""


def check_init_view(tc, output, host_paths):
    """Asserts on INIT_VIEW_PROBE's line in `output`: none of `host_paths` appears in anything
    read from /proc/1, init's fd numbers cannot be listed, and its oom_score_adj cannot be raised."""
    lines = [l for l in output.splitlines() if l.startswith("INITVIEW ")]
    tc.assertEqual(len(lines), 1, output)
    res = json.loads(lines[0][len("INITVIEW "):])
    note(f"/proc/1 seen from inside: { {k: v[:60] for k, v in res.items()} }")
    problems = [f"/proc/1/{what} shows the host path {p!r}: {text[:300]!r}"
                for what, text in res.items() for p in host_paths if p in text]
    for what in ("fd", "fdinfo"):
        if not res[what].startswith("ERR "):
            problems.append(f"init's fd numbers are listed in /proc/1/{what}: {res[what]}")
    if not res["oom_write"].startswith("ERR ") or res["oom_after"] != res["oom_before"]:
        problems.append(f"init's oom_score_adj was raised: {res['oom_before']} -> {res['oom_after']}")
    tc.assertEqual(problems, [], "\n".join(problems))
    tc.assertIn("sbx", res["cmdline"], "init's title")
    return res
