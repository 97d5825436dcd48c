"""sbx mcp --pool with a profile's `warm` key (issue 34; runtime/model/warm.hpp): each pooled sandbox
starts the profile's interpreter and imports its preloads before any call, and the call's code
runs in it as a fresh main module. Proven here: the preloads are there and their output is not;
the call behaves as `python3 FILE` / `node FILE` does (argv, __main__, exit status, tracebacks,
atexit, threads); nothing of one call reaches the next (files, processes, environment, module
state, random numbers); isolation is the cold sandbox's (the same facts read from inside); a
call of another language runs cold, saying why; a preload missing from the image is a clear
error at the server's start; the record says what was prepared. Runs as root and rootless."""
import json
import os
import time
import uuid

import subprocess

from sbxtest import SBX, SbxTestCase, busybox_tree, ledger_lines, note, scaled, validate_trace
from test_mcp import Server
from test_mcp_pool import pooled_workers, descendants

HAVE_NUMPY = os.path.exists("/usr/lib/python3/dist-packages/numpy")
LIMITS = {"timeout": "30s", "memory": "512M", "pids": 64, "output_limit": "16M", "tmp_size": "64M"}

# Read from inside the sandbox: the facts `sbx probe` judges isolation by, as far as a Python
# program sees them (identity, capabilities, seccomp, no_new_privs, namespaces' contents, what
# is writable, what refuses).
FACTS = r"""
import json, os, socket, errno, ctypes
def status(key):
    for line in open('/proc/self/status'):
        if line.startswith(key + ':'):
            return line.split(':', 1)[1].strip()
def refused(fn):
    try:
        fn()
        return 'allowed'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    def go():
        if getattr(libc, name)(*args) != 0:
            raise OSError(ctypes.get_errno(), name)
    return go
facts = {
    'uid': os.getuid(), 'gid': os.getgid(), 'groups': os.getgroups(),
    'caps': [status(k) for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')],
    'seccomp': status('Seccomp'), 'no_new_privs': status('NoNewPrivs'),
    'hostname': socket.gethostname(), 'pid1': open('/proc/1/comm').read().strip() != '',
    'processes': sorted(int(p) for p in os.listdir('/proc') if p.isdigit()) == [1, os.getpid()],
    'net': sorted(name for _, name in socket.if_nameindex()),
    'root_writable': os.access('/', os.W_OK), 'usr_writable': os.access('/usr', os.W_OK),
    'tmp_writable': os.access('/tmp', os.W_OK),
    'inodes': {d: os.statvfs(d).f_files for d in ('/tmp', '/out', '/dev/shm')},
    # The options of the devpts the program sees (the last mounted at /dev/pts: a template call's
    # is over the template's own).
    'devpts': [l.split(' - ')[1].split()[2] for l in open('/proc/self/mountinfo') if l.split()[4] == '/dev/pts'][-1],
    'sysv': [open('/proc/sys/kernel/' + k).read().split() for k in ('shmall', 'msgmni', 'msgmnb', 'sem')],
    'mount': refused(call('mount', b'none', b'/tmp', b'tmpfs', 0, None)),
    'unshare': refused(call('unshare', 0x10000000)),
    'ptrace_init': refused(call('ptrace', 16, 1, None, None)),
    'connect': refused(lambda: socket.create_connection(('1.1.1.1', 53), timeout=1)),
}
print(json.dumps(facts, sort_keys=True))
"""


# How `python3 FILE` ends, case by case: a prepared interpreter's call and a template's must end
# alike (status, exit code, signal, output, result).
PYTHON_END_CASES = [
    "def f():\n    raise ValueError('boom')\nf()\n",
    "import sys\nsys.exit(3)\n",
    "import sys\nsys.exit('bye')\n",
    "import atexit\natexit.register(lambda: print('atexit ran'))\nprint('main', end='')\n",
    "import threading, time\n"
    "threading.Thread(target=lambda: (time.sleep(0.2), print('thread done', flush=True))).start()\n",
    "import sys\nsys.stdout.write('no newline')\nsys.stderr.write('err')\n",
    "import os\nos.kill(os.getpid(), 9)\n",
    "import sys\nprint(sys.stdin.read() == '')\n",
    # An unclosed file is flushed at the end (the main module's globals are released).
    "def h():\n    pass\nf = open('/out/result.json', 'w')\nf.write('{\"a\": 1}')\n",
    "import sys\nprint('x')\nsys.stdout.close()\n",
    "import sys\nsys.exit(2**64 + 1)\n",
    "import sys\nsys.exit(True)\n",
    "print(type(__builtins__).__name__, __loader__ is not None, __spec__)\n",
    "x = (\n",
    "raise KeyboardInterrupt\n",
    "# -*- coding: latin-1 -*-\nprint('caf\xe9')\n",
]


class McpWarmCase(SbxTestCase):
    def profile(self, warm):
        path = self.path(f"warm-{uuid.uuid4().hex[:8]}.json")
        with open(path, "w") as f:
            json.dump({"limits": LIMITS, "network": {"mode": "none"}, **({"warm": warm} if warm else {})}, f)
        return path

    def server(self, warm, pool=2, extra=()):
        s = Server(self, ["--pool", str(pool), "--profile", self.profile(warm)] + list(extra))
        self.addCleanup(s.close)
        return s

    def wait_ready(self, s, n, timeout=60):
        """Until n pooled workers' sandboxes hold their prepared interpreter (a process below init)."""
        deadline = time.monotonic() + scaled(timeout)
        while time.monotonic() < deadline:
            ready = [w for w in pooled_workers(s.p.pid) if len(descendants(w)) >= 2]
            if len(ready) >= n:
                time.sleep(0.2)  # its preload, up to "ok"
                return
            time.sleep(0.05)
        self.fail(f"{n} prepared sandboxes not ready within {timeout}s; stderr:\n{s.stderr()}")

    def run_code(self, s, code, language="python"):
        """The call's response (isError is set for a program that exited non-zero, too)."""
        r = s.request("tools/call", {"name": "run_code", "arguments": {"language": language, "code": code}},
                      timeout=60)["result"]
        self.assertIn("status", r["structuredContent"], r)
        return r["structuredContent"]

    def records(self, s):
        return [e["record"] for e in ledger_lines(s.state)]

    def test_python_preloads_run_the_call_as_main_and_say_so_in_the_record(self):
        s = self.server({"interpreter": "python3", "preload": ["json", "decimal", "this"]})
        self.wait_ready(s, 2)
        out = self.run_code(s, "import sys\nprint('decimal' in sys.modules, 'this' in sys.modules, __name__, "
                               "sys.argv, sys.path[0], __file__)")
        # "this" prints the Zen of Python when imported: the preload's output went nowhere.
        self.assertEqual(out["stdout"], "True True __main__ ['/code/main.py'] /code /code/main.py\n", out)
        self.assertEqual(out["stderr"], "")
        rec = self.records(s)[-1]
        validate_trace(self, rec)
        self.assertTrue(rec["pool"]["hit"], rec["pool"])
        self.assertEqual(rec["sandbox"]["made_by"], "pooled")
        warm = rec["pool"]["warm"]
        self.assertEqual(warm["interpreter"], "python3")
        self.assertEqual(warm["preload"], ["json", "decimal", "this"])
        self.assertGreaterEqual(warm["ready_ms"], 0)
        note("warm record: pool " + json.dumps(rec["pool"]) + " phases_us " + json.dumps(rec["usage"]["phases_us"]))
        # sbx replay of a warm call: rebuilt under the same profile (its text unchanged), run cold.
        # (The call above printed what only a prepared interpreter has: its replay differs, as it
        # should. This one does not depend on the preloads.)
        self.wait_ready(s, 1)
        self.run_code(s, "import json\nprint(json.dumps({'n': sum(range(10))}))\n")
        warm_rec = self.records(s)[-1]
        self.assertTrue(warm_rec["pool"]["hit"], warm_rec["pool"])
        r = subprocess.run([SBX, "--state-dir", s.state, "replay", warm_rec["run_id"]], capture_output=True,
                           timeout=scaled(60))
        self.assertEqual((r.returncode, r.stdout.decode().strip()), (0, "identical"), r.stderr)
        again = self.records(s)[-1]
        self.assertEqual(again["replay_of"]["run_id"], warm_rec["run_id"], again.get("replay_of"))
        self.assertEqual(again["sandbox"]["made_by"], "cold")
        r = subprocess.run([SBX, "--state-dir", s.state, "replay", rec["run_id"]], capture_output=True,
                           timeout=scaled(60))
        self.assertEqual(r.returncode, 1, r.stderr)  # 'decimal' in sys.modules: True warm, False cold

    def test_python_call_ends_as_python3_file_does(self):
        cold = self.server(None, pool=0)
        warm = self.server({"interpreter": "python3", "preload": ["json"]})
        self.wait_ready(warm, 2)
        for code in PYTHON_END_CASES:
            a, b = self.run_code(cold, code), self.run_code(warm, code)
            for k in ("status", "exit_code", "signal", "stdout", "stderr", "result"):
                self.assertEqual(a.get(k), b.get(k), f"{k} for {code!r}: cold {a.get(k)!r}, warm {b.get(k)!r}")
            self.wait_ready(warm, 1)
        hits = [r["pool"].get("hit") for r in self.records(warm)]
        self.assertTrue(all(hits), hits)

    def test_nothing_of_one_warm_call_reaches_the_next(self):
        pre = ["json", "random"] + (["numpy"] if HAVE_NUMPY else [])
        s = self.server({"interpreter": "python3", "preload": pre})
        self.wait_ready(s, 2)
        first = self.run_code(s, "import json, os, random, subprocess\n"
                                 "json.dumps = None\nrandom.seed(1)\nos.environ['LEAK'] = '1'\n"
                                 "open('/tmp/leak', 'w').write('x')\n"
                                 "subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
                                 "import sys\nsys.modules['json'].LEAK = 1\nprint('set')\n")
        self.assertEqual(first["stdout"], "set\n", first)
        self.wait_ready(s, 1)
        second = self.run_code(s, "import json, os\n"
                                  "print(json.dumps is not None, hasattr(json, 'LEAK'), 'LEAK' in os.environ, "
                                  "os.path.exists('/tmp/leak'), "
                                  "sorted(int(p) for p in os.listdir('/proc') if p.isdigit()) == [1, os.getpid()])\n")
        self.assertEqual(second["stdout"], "True False False False True\n", second)
        # Random numbers: every prepared interpreter seeded its generators itself, at its import.
        code = "import random\nprint(random.random())\n"
        if HAVE_NUMPY:
            code = "import random, numpy\nprint(random.random(), numpy.random.rand())\n"
        seen = []
        for _ in range(30):
            seen.append(self.run_code(s, code)["stdout"])
            time.sleep(0.12)  # time for the pool to refill, so that most calls are served warm
        self.assertEqual(len(set(seen)), len(seen), seen)
        hits = sum(1 for r in self.records(s)[2:] if r["pool"].get("hit"))
        note(f"warm isolation: 30 calls, {hits} warm, all random numbers distinct (numpy: {HAVE_NUMPY})")
        self.assertGreater(hits, 10)

    def test_a_call_that_exhausts_its_sandbox_affects_only_itself(self):
        s = self.server({"interpreter": "python3", "preload": ["json"]})
        self.wait_ready(s, 2)
        hog = self.run_code(s, "x = bytearray(1 << 31)\n")
        self.assertNotEqual(hog["status"], "ok", hog)
        self.wait_ready(s, 1)
        r = s.request("tools/call", {"name": "run_code", "arguments": {
            "language": "python", "limits": {"timeout": "3s"},
            "code": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"}},
            timeout=60)["result"]["structuredContent"]
        self.assertIn(r["status"], ("timeout", "exit_nonzero", "signaled"), r)
        self.wait_ready(s, 1)
        after = self.run_code(s, "import os, json\nprint(json.dumps(sorted(int(p) for p in os.listdir('/proc') "
                                 "if p.isdigit()) == [1, os.getpid()]))\n")
        self.assertEqual(after["stdout"], "true\n", after)
        recs = self.records(s)
        self.assertTrue(all(x["pool"]["hit"] for x in recs), [x["pool"] for x in recs])
        note(f"warm hostile calls: memory hog {hog['status']}, fork bomb {r['status']}, next call clean")

    def test_a_preload_cannot_plant_files_for_the_call(self):
        """The preloads are the image's code, running before the call: /code and /in are not theirs
        to write (0555 until init writes the call's files and remounts them read-only)."""
        lib = self.path("evil-lib")
        os.makedirs(lib)
        with open(os.path.join(lib, "evil.py"), "w") as f:
            f.write("import errno, os\nseen = {}\n"
                    "for p in ('/code/main.py', '/code/x.py', '/in/input.json'):\n"
                    "    try:\n        open(p, 'w').write('planted')\n        seen[p] = 'written'\n"
                    "    except OSError as e:\n        seen[p] = errno.errorcode[e.errno]\n")
        os.chmod(lib, 0o755)
        os.chmod(os.path.join(lib, "evil.py"), 0o644)
        profile = self.profile({"interpreter": "python3", "preload": ["evil"]})
        with open(profile) as f:
            doc = json.load(f)
        doc["binds"] = [lib + ":/opt/evil"]
        doc["env"] = {"PYTHONPATH": "/opt/evil"}
        with open(profile, "w") as f:
            json.dump(doc, f)
        s = Server(self, ["--pool", "1", "--profile", profile])
        self.addCleanup(s.close)
        self.wait_ready(s, 1)
        out = self.run_code(s, "import evil, json\nprint(json.dumps(evil.seen, sort_keys=True))\n")
        self.assertEqual(out["status"], "ok", out)
        self.assertEqual(json.loads(out["stdout"]), {"/code/main.py": "EACCES", "/code/x.py": "EACCES",
                                                     "/in/input.json": "EACCES"}, out)
        self.assertTrue(self.records(s)[-1]["pool"]["hit"])

    def test_isolation_facts_are_the_cold_sandbox_s(self):
        cold = self.server(None, pool=0)
        warm = self.server({"interpreter": "python3", "preload": ["json", "ctypes"]})
        self.wait_ready(warm, 2)
        a = json.loads(self.run_code(cold, FACTS)["stdout"])
        b = json.loads(self.run_code(warm, FACTS)["stdout"])
        self.assertEqual(a, b)
        self.assertTrue(self.records(warm)[-1]["pool"]["hit"])
        self.assertEqual(b["caps"][1:3], ["0000000000000000", "0000000000000000"], b)
        self.assertEqual(b["seccomp"], "2")
        self.assertEqual(b["net"], ["lo"])
        note("warm isolation facts (equal to cold): " + json.dumps(b, sort_keys=True))

    def test_another_language_runs_cold_and_says_why(self):
        s = self.server({"interpreter": "python3"})
        self.wait_ready(s, 2)
        out = self.run_code(s, "echo from sh", language="sh")
        self.assertEqual(out["stdout"], "from sh\n")
        rec = self.records(s)[-1]
        self.assertFalse(rec["pool"]["hit"], rec["pool"])
        self.assertIn("prepared python3 for python calls; this one is in sh", rec["pool"]["reason"])
        self.assertEqual(rec["sandbox"]["made_by"], "cold")

    def test_node_preloads_and_runs_the_call_as_main(self):
        if not os.path.exists("/usr/bin/node"):
            self.skipTest("/usr/bin/node is not installed (make deps-test installs nodejs)")
        s = self.server({"interpreter": "node", "preload": ["util", "node:zlib"]})
        self.wait_ready(s, 2)
        out = self.run_code(s, "console.log(require.main === module, process.argv.slice(1), __filename)",
                            language="node")
        self.assertEqual(out["stdout"], "true [ '/code/main.js' ] /code/main.js\n", out)
        out = self.run_code(s, "process.exitCode = 4", language="node")
        self.assertEqual(out["exit_code"], 4, out)
        recs = self.records(s)
        self.assertTrue(all(r["pool"]["hit"] for r in recs), [r["pool"] for r in recs])
        self.assertEqual(recs[0]["pool"]["warm"]["preload"], ["util", "node:zlib"])

    def test_a_preload_missing_from_the_image_is_an_error_at_the_start(self):
        s = Server(self, ["--pool", "1", "--profile",
                          self.profile({"interpreter": "python3", "preload": ["json", "no_such_module_sbx"]})],
                   initialize=None)
        try:
            rc = s.p.wait(timeout=scaled(60))
        finally:
            s.close()
        err = s.stderr()
        self.assertEqual(rc, 125, err)
        self.assertIn("warm key", err)
        self.assertIn("preload no_such_module_sbx: ModuleNotFoundError: No module named 'no_such_module_sbx'", err)
        self.assertEqual(ledger_lines(s.state) if os.path.exists(s.state) else [], [])
        note("missing preload: " + [l for l in err.splitlines() if "warm key" in l][0])

    def test_a_profile_with_a_bad_warm_key_is_refused_naming_it(self):
        s = Server(self, ["--pool", "1", "--profile",
                          self.profile({"interpreter": "python3", "preload": ["../x"]})], initialize=None)
        try:
            rc = s.p.wait(timeout=scaled(30))
        finally:
            s.close()
        self.assertEqual(rc, 125)
        self.assertIn("/warm/preload/0: '../x' is not a Python module name", s.stderr())

    def test_an_image_without_the_interpreter_is_an_error_at_the_start(self):
        state = self.path("state-image")
        r = subprocess.run([SBX, "--state-dir", state, "image", "import", busybox_tree(), "--name", "bb", "--quiet"],
                           capture_output=True, timeout=scaled(120))
        self.assertEqual(r.returncode, 0, r.stderr)
        profile = self.profile({"interpreter": "python3"})
        with open(profile) as f:
            doc = json.load(f)
        doc["image"] = "bb"
        with open(profile, "w") as f:
            json.dump(doc, f)
        r = subprocess.run([SBX, "--state-dir", state, "mcp", "--pool", "1", "--profile", profile],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=scaled(60))
        err = r.stderr.decode(errors="replace")
        self.assertEqual(r.returncode, 125, err)
        self.assertIn("the image has no /usr/bin/python3", err)
        note("image without python3: " + [l for l in err.splitlines() if "warm key" in l][0])
