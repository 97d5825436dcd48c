"""sbx mcp --pool with a profile whose warm mode is "template" (issue 34 item 3;
runtime/server/mcp_template.hpp): one template sandbox prepares python3 and its preloads, and each
run_code call runs in a copy-on-write fork of it, in namespaces of its own. Proven here: the call
runs as `python3 FILE` does, with the preloads already imported; the record says it was forked
from the template (its digest and record id) and the template has a record of its own; nothing
of one call reaches the next (files, processes, environment, module state, random numbers: 100
calls, all distinct); the isolation facts read from inside are the cold sandbox's; the control
socket is out of the call's reach; the call's own filter holds (a refused call is recorded); a
timeout, a memory hog and a fork bomb affect only their own call; a dead template is rebuilt
while calls run cold saying why; a preload missing from the image is a clear error at the start.
Runs as root and rootless."""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid

from sbxtest import MODE, SBX, SbxTestCase, ledger_lines, note, scaled, validate_trace
from test_mcp import Server
from test_mcp import descendants
from test_mcp_pool import parent, pooled_workers
from test_mcp_warm import FACTS, HAVE_NUMPY, LIMITS, PYTHON_END_CASES


def started(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def template_hosts(server_pid):
    """The server's template worker: with no call running, its worker children are the template's
    and its pooled forks' (sbx retitles them all "sbx mcp-worker"), and the template's is the
    first started (its forks are made once it is ready)."""
    return sorted(pooled_workers(server_pid), key=started)[:1]


def depth_below(host, p):
    """How many parents up from p the process host is (-1: not below it, or over 8 up)."""
    n = 0
    while p not in (0, host) and n < 8:
        p, n = parent(p), n + 1
    return n if p == host else -1


# Below the template's worker: init, the template sandbox's program (which waits for the
# template), the template (pid 1 of a pid namespace of its own: warm_template.py,
# _pid_no_call_has), a call's pid 1, then the call's program.
PROGRAM_DEPTH = 5


def leftover_control_dirs():
    tmp = tempfile.gettempdir()
    return [d for d in os.listdir(tmp) if d.startswith("sbx-template.")]


def alive(pid):
    """Whether `pid` runs (neither gone nor a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def send_job(path, tag, out_sock):
    """Connects to a template's control socket at `path` and sends a job as a call's worker does
    (sandbox.cpp, send_to_template): `tag` ("call" and a token), /dev/null for each fd but the out
    socket (4th, warm_template.py's FD_NAMES), where the driver sends a forked call's pidfd."""
    null = os.open("/dev/null", os.O_RDWR)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as c:
            c.connect(path)
            socket.send_fds(c, [tag], [null, null, null, out_sock.fileno(), null, null, null, null])
    finally:
        os.close(null)


class Impostor:
    """A SEQPACKET listener of the test's own, renamed over a template's control socket, as
    another sandbox that reaches the path could: it keeps what each connection sent it (a call's
    job is "call" and its fds)."""

    def __init__(self, path, listener_ended=False):
        """listener_ended: the socket's listen() is a child's, which then ends: the kernel's
        record of who listens is a pid that has ended, and that another process may have next."""
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.s.bind(path + ".impostor")
        if listener_ended:
            pid = os.fork()
            if pid == 0:
                self.s.listen(8)
                os._exit(0)
            os.waitpid(pid, 0)
        else:
            self.s.listen(8)
        os.rename(path + ".impostor", path)
        self.s.settimeout(0.1)
        self.got = []
        self.done = False
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    def _serve(self):
        while not self.done:
            try:
                c, _ = self.s.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with c:
                c.settimeout(2)
                try:
                    data, fds, _, _ = socket.recv_fds(c, 64, 16)
                except OSError:
                    continue
                for fd in fds:
                    os.close(fd)
                self.got.append((data, len(fds)))

    def jobs(self):
        """What reached it beyond a bare connection (the server's check of who listens)."""
        return [g for g in self.got if g != (b"", 0)]

    def close(self):
        self.done = True
        self.t.join()
        self.s.close()


class McpTemplateCase(SbxTestCase):
    def profile(self, preload, extra=None):
        path = self.path(f"tpl-{uuid.uuid4().hex[:8]}.json")
        doc = {"limits": LIMITS, "network": {"mode": "none"},
               "warm": {"interpreter": "python3", "preload": preload, "mode": "template"}, **(extra or {})}
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    def server(self, preload=("json",), extra=None, args=(), forked_ahead=False):
        """forked_ahead: returns once a call was served by a fork made before it (a pooled fork:
        mcp_template.hpp), and its pool has had time to refill, so the test's calls are too."""
        s = Server(self, ["--pool", "2", "--profile", self.profile(list(preload), extra)] + list(args))
        self.addCleanup(s.close)
        if forked_ahead:
            deadline = time.monotonic() + scaled(30)
            while not self.records(s) or not self.records(s)[-1]["pool"]["hit"]:
                self.assertLess(time.monotonic(), deadline, [r["pool"] for r in self.records(s)])
                time.sleep(0.1)
                self.run_code(s, "pass\n")
            time.sleep(scaled(0.5))
            # Every pooled fork got the template's key on its socket from the first (a worker
            # spawned before the key was set waited for it in vain, then ended).
            self.assertNotIn("key did not come", s.stderr())
            self.assertNotIn("ended before hand-out", s.stderr())
        return s

    def own_tmpdir(self):
        """A TMPDIR of the test's own for a server's template: other servers' control directories
        are not this one's."""
        tmp = tempfile.mkdtemp(prefix="sbxit-tpl-")
        os.chmod(tmp, 0o755)  # as root the template's sandbox id makes its socket below it
        self.addCleanup(shutil.rmtree, tmp, True)
        return tmp

    def server_in(self, tmp, *args, **kwargs):
        """server(), its template's control directory made in `tmp`."""
        old = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = tmp
        try:
            return self.server(*args, **kwargs)
        finally:
            if old is None:
                del os.environ["TMPDIR"]
            else:
                os.environ["TMPDIR"] = old

    def run_code(self, s, code, language="python", limits=None):
        args = {"language": language, "code": code, **({"limits": limits} if limits else {})}
        r = s.request("tools/call", {"name": "run_code", "arguments": args}, timeout=60)["result"]
        self.assertIn("status", r.get("structuredContent", {}), r)
        return r["structuredContent"]

    def records(self, s):
        return [e["record"] for e in ledger_lines(s.state)]

    def test_a_call_is_a_fork_of_the_template_and_its_record_says_which(self):
        s = self.server(["json", "decimal", "this"], forked_ahead=True)
        out = self.run_code(s, "import sys\nprint('decimal' in sys.modules, 'this' in sys.modules, __name__, "
                               "sys.argv, sys.path[0], __file__)\n"
                               "open('/out/result.json', 'w').write('{\"ok\": true}')\n")
        # "this" prints the Zen of Python when imported: the template's output went nowhere.
        self.assertEqual(out["stdout"], "True True __main__ ['/code/main.py'] /code /code/main.py\n", out)
        self.assertEqual((out["stderr"], out["status"], out["result"]), ("", "ok", {"ok": True}), out)
        rec = self.records(s)[-1]
        validate_trace(self, rec)
        self.assertEqual(rec["sandbox"]["made_by"], "template", rec["sandbox"])
        # Forked before the call came, its pid 1 ready (the pool note's warm member says when).
        self.assertTrue(rec["pool"]["hit"], rec["pool"])
        self.assertEqual(rec["pool"]["warm"]["interpreter"], "python3", rec["pool"])
        tpl = rec["sandbox"]["template"]
        self.assertTrue(tpl["digest"].startswith("sha256:"), tpl)
        # The template's own record, written when it ends (the server's end).
        s.close()
        own = [r for r in self.records(s) if r["run_id"] == tpl["run_id"]]
        self.assertEqual(len(own), 1, [r["run_id"] for r in self.records(s)])
        validate_trace(self, own[0])
        self.assertEqual(own[0]["template"], {"digest": tpl["digest"], "interpreter": "python3",
                                              "preload": ["json", "decimal", "this"]})
        self.assertEqual(own[0]["enforcement"]["seccomp"]["profile"], "default+template")
        r = subprocess.run([SBX, "--state-dir", s.state, "trace", "verify"], capture_output=True, text=True,
                           timeout=scaled(60))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        note("template call record: sandbox " + json.dumps(rec["sandbox"]) + " phases_us " +
             json.dumps(rec["usage"].get("phases_us")))

    def test_nothing_of_one_call_reaches_the_next(self):
        pre = ["json", "random"] + (["numpy"] if HAVE_NUMPY else [])
        s = self.server(pre)
        first = self.run_code(s, "import json, os, random, subprocess\n"
                                 "json.dumps = None\nrandom.seed(1)\nos.environ['LEAK'] = '1'\n"
                                 "open('/tmp/leak', 'w').write('x')\nopen('/dev/shm/leak', 'w').write('x')\n"
                                 "subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
                                 "import sys\nsys.modules['json'].LEAK = 1\nprint('set')\n")
        self.assertEqual(first["stdout"], "set\n", first)
        second = self.run_code(s, "import json, os\n"
                                  "print(json.dumps is not None, hasattr(json, 'LEAK'), 'LEAK' in os.environ, "
                                  "os.path.exists('/tmp/leak'), os.path.exists('/dev/shm/leak'), "
                                  "sorted(int(p) for p in os.listdir('/proc') if p.isdigit()) == [1, os.getpid()])\n")
        self.assertEqual(second["stdout"], "True False False False False True\n", second)
        code = "import random\nprint(random.random())\n"
        if HAVE_NUMPY:
            code = "import random, numpy\nprint(random.random(), numpy.random.rand())\n"
        seen = [self.run_code(s, code)["stdout"] for _ in range(100)]
        self.assertEqual(len(set(seen)), len(seen), seen)
        recs = self.records(s)
        self.assertTrue(all(r["sandbox"]["made_by"] == "template" for r in recs), [r["sandbox"] for r in recs])
        note(f"template isolation: 100 forked calls, all random numbers distinct (numpy: {HAVE_NUMPY})")

    def test_what_a_preload_drew_from_openssl_is_not_every_call_s(self):
        # Libraries notice a fork by a changed getpid(): OpenSSL reseeds its generator only then.
        # As pid 2 of its sandbox, the template had every call's program's pid, so once a
        # preload had drawn from OpenSSL (tornado.netutil makes an SSL context at import) every
        # call printed the same ssl.RAND_bytes (and made the same private keys); the template is
        # pid 1 of a pid namespace of its own now (warm_template.py, _pid_no_call_has). And the
        # key multiprocessing drew at import is every call's own (_reseed).
        if subprocess.run(["python3", "-c", "import tornado.netutil"], capture_output=True).returncode != 0:
            self.skipTest("python3-tornado is not installed: no preload here draws from OpenSSL at import")
        s = self.server(["tornado.netutil", "multiprocessing"])
        code = ("import os, ssl, multiprocessing\n"
                "print(os.getpid(), ssl.RAND_bytes(16).hex(), multiprocessing.current_process().authkey.hex())\n")
        outs = [self.run_code(s, code) for _ in range(4)]
        self.assertTrue(all(o["status"] == "ok" for o in outs), outs)
        rows = [o["stdout"].split() for o in outs]
        self.assertTrue(all(r[0] == "2" for r in rows), rows)  # the program's pid is still 2
        for col, what in ((1, "ssl.RAND_bytes"), (2, "multiprocessing's authkey")):
            self.assertEqual(len({r[col] for r in rows}), len(rows), f"{what} repeated across calls: {rows}")
        recs = self.records(s)
        self.assertTrue(all(r["sandbox"]["made_by"] == "template" for r in recs), [r["sandbox"] for r in recs])

    def test_isolation_facts_are_the_cold_sandbox_s(self):
        cold = Server(self, ["--pool", "0", "--profile", self.profile(["json"])])
        self.addCleanup(cold.close)
        warm = self.server(["json", "ctypes"], forked_ahead=True)
        a = json.loads(self.run_code(cold, FACTS)["stdout"])
        b = json.loads(self.run_code(warm, FACTS)["stdout"])
        self.assertEqual(a, b)
        self.assertEqual(self.records(warm)[-1]["sandbox"]["made_by"], "template")
        self.assertTrue(self.records(warm)[-1]["pool"]["hit"])
        # And on demand: six calls at once empty the pool of two forks, and a call that finds
        # none ready is forked from the template at the call.
        args = {"name": "run_code", "arguments": {"language": "python", "code": FACTS}}
        ids, answers = {warm.start("tools/call", args) for _ in range(6)}, []
        while ids:
            m = warm.read(timeout=60)
            self.assertIsNotNone(m, warm.stderr())
            if isinstance(m, dict) and m.get("id") in ids:
                ids.discard(m["id"])
                answers.append(m["result"]["structuredContent"])
        for out in answers:
            self.assertEqual(a, json.loads(out["stdout"]), out)
        recs = self.records(warm)[-6:]
        self.assertTrue(all(r["sandbox"]["made_by"] == "template" for r in recs), [r["sandbox"] for r in recs])
        self.assertIn(False, [r["pool"]["hit"] for r in recs], [r["pool"] for r in recs])
        self.assertEqual(b["caps"], ["0000000000000000"] * 5, b)
        self.assertEqual(b["net"], ["lo"])
        # Each scratch tmpfs holds one inode per KiB (mount_plan.hpp): 64 MiB, 65,536 files.
        self.assertEqual(b["inodes"], {"/tmp": 65536, "/out": 65536, "/dev/shm": 65536}, b)
        note("template isolation facts (equal to cold): " + json.dumps(b, sort_keys=True))

    def test_a_hostile_preload_cannot_change_the_sbx_binary_nor_its_read_only_binds(self):
        # The template gets, with each call, an fd of sbx for a fork made ahead to exec
        # (template_pid1.hpp). A preload's code runs in the template, with CAP_SYS_ADMIN in its
        # user namespace: with an fd of the file on the host's mount it could chmod the binary
        # through /proc/self/fd (rootless, the caller's own file: made setuid, run by anyone as
        # the caller). The fd is of a read-only bind that no one in the sandbox can remount.
        import unittest.mock
        import test_mcp
        own = self.path("own-sbx")
        os.makedirs(own)
        binary = os.path.join(own, "sbx")
        shutil.copy(SBX, binary)
        os.chmod(binary, 0o755)
        mods, log = self.path("mods"), self.path("log")
        os.makedirs(mods)
        os.makedirs(log)
        os.chmod(log, 0o777)
        with open(os.path.join(mods, "evil.py"), "w") as f:
            f.write("""
import json, os, socket
_recv = socket.recv_fds
def _tries(fd):
    path = f"/proc/self/fd/{fd}"
    out = {}
    for name, fn in (("chmod", lambda: os.chmod(path, 0o6777)), ("utime", lambda: os.utime(path, (0, 0))),
                     ("setxattr", lambda: os.setxattr(path, "user.sbx", b"x")),
                     ("write", lambda: os.close(os.open(path, os.O_WRONLY)))):
        try:
            fn()
            out[name] = "allowed"
        except OSError as e:
            out[name] = os.strerror(e.errno)
    return out
def _remount():
    # The profile's read-only bind of /mods (the caller's own files, rootless) made writable again.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(None, b"/mods", None, 0x20 | 0x1000, None) != 0:  # MS_REMOUNT | MS_BIND
        return os.strerror(ctypes.get_errno())
    try:
        open("/mods/written", "w").close()
        return "allowed"
    except OSError as e:
        return "remounted, then " + os.strerror(e.errno)
def _uncover():
    # A read-only bind inside a read-write one (/ws/ro in /ws): a way to the directory below it.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    out = {}
    def attempt(name, make, path):
        if make() != 0:
            out[name] = os.strerror(ctypes.get_errno())
            return
        try:
            open(path, "w").close()
            out[name] = "wrote"
        except OSError as e:
            out[name] = "mounted, then " + os.strerror(e.errno)
    os.makedirs("/tmp/x", exist_ok=True)
    os.makedirs("/tmp/y", exist_ok=True)
    attempt("bind", lambda: libc.mount(b"/ws", b"/tmp/x", None, 0x1000, None), "/tmp/x/ro/via_bind")  # MS_BIND
    attempt("move", lambda: libc.mount(b"/ws/ro", b"/tmp/y", None, 0x2000, None), "/ws/ro/via_move")  # MS_MOVE
    attempt("umount", lambda: libc.umount2(b"/ws/ro", 2), "/ws/ro/via_umount")  # MNT_DETACH
    return out
with open("/log/remount.json", "w") as f:
    json.dump([_remount(), _uncover()], f)
def recv_fds(*a, **k):
    got = _recv(*a, **k)
    if len(got[1]) == 8 and not os.path.exists("/log/tries.json"):
        with open("/log/tries.json", "w") as f:
            json.dump(_tries(got[1][7]), f)
    return got
socket.recv_fds = recv_fds
""")
        os.chmod(os.path.join(mods, "evil.py"), 0o644)
        ws = self.path("ws")
        os.makedirs(os.path.join(ws, "ro"))
        os.chmod(ws, 0o777)
        os.chmod(os.path.join(ws, "ro"), 0o777)  # only the read-only mount stands in the way
        extra = {"binds": [f"{mods}:/mods", f"{log}:/log:rw", f"{ws}:/ws:rw", f"{ws}/ro:/ws/ro"],
                 "env": {"PYTHONPATH": "/mods"}}
        with unittest.mock.patch.object(test_mcp, "SBX", binary):
            s = self.server(["json", "evil"], extra, forked_ahead=True)
            self.assertEqual(self.run_code(s, "print(1)\n")["stdout"], "1\n")
        with open(os.path.join(log, "tries.json")) as f:
            tries = json.load(f)
        write = tries.pop("write")
        self.assertEqual(tries, dict.fromkeys(("chmod", "utime", "setxattr"), os.strerror(30)), tries)  # EROFS
        self.assertNotEqual(write, "allowed")  # the file's own mode may answer first (EACCES)
        st = os.stat(binary)
        self.assertEqual(oct(st.st_mode & 0o7777), oct(0o755))
        self.assertNotEqual(st.st_mtime, 0)
        # Nor can it make the profile's read-only bind writable (the template's filter refuses a
        # remount that leaves its target writable).
        refused = (os.strerror(1), os.strerror(38))  # EPERM, or ENOSYS where no one listens
        with open(os.path.join(log, "remount.json")) as f:
            remount, uncover = json.load(f)
        self.assertIn(remount, refused)
        self.assertEqual(os.listdir(mods), ["evil.py"])
        # Nor uncover what a read-only bind inside a read-write one hides (a non-recursive bind
        # of the parent, a move, an unmount): the filter takes none of them.
        for how, got in uncover.items():
            self.assertIn(got, refused, (how, uncover))
        self.assertEqual(os.listdir(os.path.join(ws, "ro")), [])

    def test_the_template_and_its_control_socket_are_out_of_reach(self):
        s = self.server(["json"], forked_ahead=True)
        out = self.run_code(s, r"""
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def err(fn):
    try:
        fn()
        return 'allowed'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def sys(name, *a):
    def go():
        if getattr(libc, name)(*a) != 0:
            raise OSError(ctypes.get_errno(), name)
    return go
def connect():
    c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    c.connect('/run/sbx-template/sock')
r = {'ls': err(lambda: os.listdir('/run/sbx-template')), 'connect': err(connect),
     'umount': err(sys('umount2', b'/run/sbx-template', 2)),
     'userns': err(sys('unshare', 0x10000000)), 'mountns': err(sys('unshare', 0x20000)),
     'setns': err(sys('setns', os.open('/proc/self/ns/mnt', os.O_RDONLY), 0)),
     'pid1_fds': sorted({err(lambda: os.open('/proc/1/fd/' + n, os.O_WRONLY)) for n in os.listdir('/proc/1/fd')}),
     'pid1_mem': err(lambda: open('/proc/1/mem', 'rb')),
     'code_ro': err(lambda: open('/code/main.py', 'a')), 'in_ro': err(lambda: open('/code/x', 'w')),
     'code_chmod': err(lambda: os.chmod('/code/main.py', 0o644)),
     'pid1_comm': open('/proc/1/comm').read().strip(),
     'proc_sys': err(lambda: open('/proc/sys/kernel/hostname', 'w').write('x')),
     'kcore': os.path.getsize('/proc/kcore') if os.path.exists('/proc/kcore') else 0}
import json
print(json.dumps(sorted(r.items())))
""")
        self.assertEqual(out["status"], "ok", out)
        facts = dict(json.loads(out["stdout"]))
        self.assertEqual(facts["ls"], "EACCES", out)
        self.assertIn(facts["connect"], ("EACCES", "ENOENT"), out)
        for k in ("umount", "userns", "mountns", "setns"):
            self.assertEqual(facts[k], "EPERM", (k, out))
        # The call's pid 1 (which holds its report pipe to the worker) is out of its reach: it
        # is not dumpable, as a cold sandbox's init is not.
        self.assertEqual((facts["pid1_fds"], facts["pid1_mem"]), (["EACCES"], "EACCES"), out)
        # A fork made ahead: its pid 1 runs sbx (template_pid1.hpp), not a copy of the interpreter.
        self.assertEqual(facts["pid1_comm"], "sbx", out)
        # /code is read-only as a mount (a bind remount, as a cold pooled init makes it:
        # pool_job.cpp), so main.py's own mode (0444) may answer first; its owner's chmod, which
        # the mode cannot refuse, shows the mount's.
        self.assertIn(facts["code_ro"], ("EROFS", "EACCES"), out)
        self.assertEqual((facts["code_chmod"], facts["in_ro"]), ("EROFS", "EROFS"), out)
        self.assertIn(facts["proc_sys"], ("EROFS", "EACCES"), out)
        self.assertEqual(facts["kcore"], 0, out)
        rec = self.records(s)[-1]
        self.assertTrue(rec["pool"]["hit"], rec["pool"])  # a fork made ahead: /code written at hand-out
        refused = {v.get("name") for v in rec["violations"]}
        # Every refusal reaches the call's record, not only those the template's filter allows
        # (its filter notifies too: child.hpp, seccomp_listener).
        self.assertTrue({"umount2", "unshare", "setns"} <= refused, rec["violations"])
        # On the host, as root, the socket is root's alone: the sandbox's host uid is every default
        # sandbox's, and one that reached the path could send the template a job of its own.
        if MODE == "root":
            dirs = leftover_control_dirs()
            socks = [os.path.join(tempfile.gettempdir(), d, "sock") for d in dirs]
            mine = [p for p in socks if os.path.exists(p)]
            self.assertTrue(mine, dirs)
            for p in mine:
                st = os.lstat(p)
                self.assertEqual((st.st_uid, st.st_gid, oct(st.st_mode & 0o777)), (0, 0, "0o600"), p)
        note("template reach: " + out["stdout"].strip())

    def test_hostile_calls_affect_only_themselves(self):
        s = self.server(["json"])
        hog = self.run_code(s, "x = bytearray(1 << 31)\n")
        self.assertNotEqual(hog["status"], "ok", hog)
        bomb = self.run_code(s, "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
                             limits={"timeout": "3s"})
        self.assertIn(bomb["status"], ("timeout", "exit_nonzero", "signaled"), bomb)
        slow = self.run_code(s, "import time\ntime.sleep(60)\n", limits={"timeout": "1s"})
        self.assertEqual(slow["status"], "timeout", slow)
        # Ended at its limit, not 2 s later (kEndReportMs): the call's pid 1, a pid namespace's
        # init, would drop the end signal a cold init obeys (supervisor.cpp, end_sandbox).
        slow_wall = self.records(s)[-1]["usage"]["wall_ms"]
        self.assertLess(slow_wall, 1000 + scaled(900), self.records(s)[-1]["usage"])
        # Ended by its pid 1 (warm_template.py, _finish), which reports the tree's usage as a
        # cold init does: a busy child's CPU time is in the record.
        busy = self.run_code(s, "import os\nif os.fork() == 0:\n    while True: pass\nwhile True: pass\n",
                             limits={"timeout": "1s"})
        self.assertEqual(busy["status"], "timeout", busy)
        busy_usage = self.records(s)[-1]["usage"]
        self.assertLess(busy_usage["wall_ms"], 1000 + scaled(900), busy_usage)
        self.assertGreater(busy_usage["cpu_user_ms"] + busy_usage["cpu_sys_ms"], 300, busy_usage)
        after = self.run_code(s, "import os, json\nprint(json.dumps(sorted(int(p) for p in os.listdir('/proc') "
                                 "if p.isdigit()) == [1, os.getpid()]))\n")
        self.assertEqual(after["stdout"], "true\n", after)
        recs = self.records(s)
        self.assertTrue(all(r["sandbox"]["made_by"] == "template" for r in recs), [r["sandbox"] for r in recs])
        note(f"template hostile calls: memory hog {hog['status']}, fork bomb {bomb['status']}, "
             f"sleep past 1s {slow['status']} after {slow_wall} ms, a busy one's usage {busy_usage}, next call clean")

    def test_a_call_cannot_make_its_pid_1_miss_the_end_at_its_limit(self):
        # Pid 1 shares the call's uid, so the call can signal it: eight processes send it the end
        # signal (64) as fast as they can, to fill its queue of pending signals, where the
        # worker's own end would then only set the pending bit and be taken with the call's
        # (pid 1 ran on to the worker's SIGKILL 2 s later, kEndReportMs, with no usage). The
        # signal only wakes pid 1; the end is the worker's byte on the sync pipe, which no process
        # of the call holds (warm_template.py, _end_requested).
        s = self.server(["json"])
        code = ("import os, signal, time\n"
                "for _ in range(7):\n"
                "    if os.fork() == 0:\n        break\n"
                "sent = 0\n"
                "while True:\n"
                "    try:\n        os.kill(1, 64)\n        sent += 1\n"
                "    except OSError:\n        pass\n")
        out = self.run_code(s, code, limits={"timeout": "1s"})
        self.assertEqual(out["status"], "timeout", out)
        usage = self.records(s)[-1]["usage"]
        self.assertLess(usage["wall_ms"], 1000 + scaled(900), usage)
        self.assertGreater(usage["cpu_user_ms"] + usage["cpu_sys_ms"], 50, usage)  # the tree's, reported by pid 1
        after = self.run_code(s, "print('next')\n", limits={"timeout": "10s"})
        self.assertEqual(after["stdout"], "next\n", after)
        note(f"template call flooding its pid 1 with the end signal: ended at {usage['wall_ms']} ms, usage {usage}")

    def test_a_call_cannot_set_its_pid_1_s_limits_to_hide_its_usage(self):
        # Pid 1 shares the call's uid: a review set its RLIMIT_NOFILE to 0 with prlimit, pid 1's
        # poll failed, and the call's record said setup_error (stage "template"), sbx's fault,
        # though the call had run and ended well; RLIMIT_CPU 1 had it killed and the record's
        # usage 0. The call's filter refuses setting pid 1's limits (profiles/seccomp/default.json).
        s = self.server(["json"])
        out = self.run_code(s, "import resource, time\nt = time.process_time()\n"
                               "while time.process_time() - t < 0.4: pass\n"
                               "for res, lim in ((resource.RLIMIT_NOFILE, (0, 0)), (resource.RLIMIT_CPU, (1, 1))):\n"
                               "    try:\n        resource.prlimit(1, res, lim)\n        print('set')\n"
                               "    except PermissionError:\n        print('refused')\n")
        self.assertEqual((out["status"], out["stdout"]), ("ok", "refused\nrefused\n"), out)
        rec = self.records(s)[-1]
        self.assertEqual(rec["sandbox"]["made_by"], "template", rec["sandbox"])
        self.assertEqual(rec["result"]["status"], "ok", rec["result"])
        self.assertGreaterEqual(rec["usage"]["cpu_user_ms"] + rec["usage"]["cpu_sys_ms"], 300, rec["usage"])

    def test_a_call_s_usage_counts_the_processes_it_left_behind(self):
        # At the program's end pid 1 kills and reaps every other process of the call before it
        # reports (warm_template.py, _finish), as a cold init does: a child left running, with
        # 0.3 s of CPU of its own, is in the record's usage, though the program itself used none.
        s = self.server(["json"])
        code = ("import os, time\n"
                "r, w = os.pipe()\n"
                "if os.fork() == 0:\n"
                "    while time.process_time() < 0.3:\n        pass\n"
                "    os.write(w, b'x')\n    time.sleep(600)\n"
                "os.read(r, 1)\n")
        out = self.run_code(s, code)
        self.assertEqual(out["status"], "ok", out)
        usage = self.records(s)[-1]["usage"]
        self.assertGreaterEqual(usage["cpu_user_ms"] + usage["cpu_sys_ms"], 290, usage)
        note(f"template call whose child outlived its program: usage {usage}")

    def test_a_dead_template_is_rebuilt_and_calls_meanwhile_run_cold(self):
        s = self.server(["json"])
        hosts = template_hosts(s.p.pid)
        self.assertEqual(len(hosts), 1, hosts)
        os.kill(hosts[0], signal.SIGKILL)
        deadline = time.monotonic() + scaled(30)
        made = []
        while time.monotonic() < deadline:
            out = self.run_code(s, "print('x')\n")
            self.assertEqual(out["stdout"], "x\n", out)
            made.append(self.records(s)[-1])
            if made[-1]["sandbox"]["made_by"] == "template" and len(made) > 1:
                break
            time.sleep(0.2)
        self.assertEqual(made[-1]["sandbox"]["made_by"], "template", [m["sandbox"] for m in made])
        cold = [m for m in made if m["sandbox"]["made_by"] == "cold"]
        self.assertTrue(cold, "no call ran while the template was rebuilt")
        self.assertFalse(cold[0]["pool"]["hit"])
        self.assertIn("template", cold[0]["pool"]["reason"])
        self.assertNotEqual(made[-1]["sandbox"]["template"]["run_id"], made[0]["sandbox"].get("template", {}).get("run_id"))

    def test_a_fork_whose_program_died_before_its_call_is_never_handed_one(self):
        s = self.server(["json"], forked_ahead=True)
        host = template_hosts(s.p.pid)[0]

        programs = [p for p in descendants(host) if depth_below(host, p) == PROGRAM_DEPTH]
        self.assertTrue(programs, descendants(host))
        for p in programs:
            os.kill(p, signal.SIGKILL)
        # Each fork's pid 1 says so at once, and its worker tells the server (a call handed out
        # at that very moment ends as a setup error of stage "pool", never as its program's exit).
        time.sleep(scaled(1))
        outs = [self.run_code(s, "print('ok')\n") for _ in range(3)]
        self.assertEqual([o["stdout"] for o in outs], ["ok\n"] * 3, outs)
        recs = self.records(s)[-3:]
        self.assertEqual([(r["sandbox"]["made_by"], r["result"]["status"]) for r in recs], [("template", "ok")] * 3)
        self.assertIn("discarded pooled sandbox", s.stderr())
        note(f"template forks made ahead: {len(programs)} programs killed before their calls, each fork discarded; "
             f"the next calls: {[r['pool'].get('hit') for r in recs]} (pool.hit)")

    def test_a_call_whose_worker_is_gone_is_killed_by_the_template(self):
        # The template is each call's pid 1's parent (warm_template.py, _Calls): when the call's
        # worker goes away mid-call, nobody else would end the call (without run cgroups nothing
        # kills its processes); the template sees the report pipe lose its reader and kills pid 1,
        # and with it the call's pid namespace. Then it serves the next call.
        s = self.server(["json"], forked_ahead=True)
        host = template_hosts(s.p.pid)[0]
        s.start("tools/call", {"name": "run_code", "arguments": {
            "language": "python", "code": "import os, time\nif os.fork() == 0:\n    time.sleep(600)\ntime.sleep(600)\n"}})
        deadline = time.monotonic() + scaled(20)
        # the call's own child (pid 3)
        while not [p for p in descendants(host) if depth_below(host, p) == PROGRAM_DEPTH + 1]:
            self.assertLess(time.monotonic(), deadline, descendants(host))
            time.sleep(0.05)
        grandchild = [p for p in descendants(host) if depth_below(host, p) == PROGRAM_DEPTH + 1][0]
        pid1 = parent(parent(grandchild))
        # Its worker among the server's workers: all of them but the template's are killed (its
        # own cannot be told from the idle forks' workers by a rootless test: sbx makes its
        # processes non-dumpable). An idle fork's pid 1 ends when its worker does; the running
        # call's pid 1 only reaps, and is ended by the template.
        workers = [w for w in pooled_workers(s.p.pid) if w != host]
        self.assertTrue(workers)
        for w in workers:
            os.kill(w, signal.SIGKILL)
        deadline = time.monotonic() + scaled(10)
        while os.path.exists(f"/proc/{pid1}") or os.path.exists(f"/proc/{grandchild}"):
            self.assertLess(time.monotonic(), deadline, "the call outlived its worker")
            time.sleep(0.05)
        # The killed idle workers are dead (zombies or reaped) before the next call: one that
        # still exits under load would take the call and die with it (seen once in CI).
        while any(alive(w) for w in workers):
            self.assertLess(time.monotonic(), deadline, "a killed worker did not exit")
            time.sleep(0.05)
        out = self.run_code(s, "print('next')\n")
        self.assertEqual(out["stdout"], "next\n", out)
        self.assertEqual(self.records(s)[-1]["sandbox"]["made_by"], "template")
        note(f"template: the call's worker killed, its pid 1 and processes gone within "
             f"{time.monotonic() - deadline + scaled(10):.2f} s; the next call forked from the same template")

    def test_another_language_runs_cold_and_says_why(self):
        s = self.server(["json"])
        out = self.run_code(s, "echo from sh", language="sh")
        self.assertEqual(out["stdout"], "from sh\n")
        rec = self.records(s)[-1]
        self.assertEqual(rec["sandbox"]["made_by"], "cold")
        self.assertIn("the template runs python; this call's language is 'sh'", rec["pool"]["reason"])

    def test_a_preload_missing_from_the_image_is_an_error_at_the_start(self):
        p = subprocess.run([SBX, "--state-dir", self.path("st"), "mcp", "--pool", "1", "--profile",
                            self.profile(["json", "no_such_module_sbx"])],
                           input=b"", capture_output=True, timeout=scaled(60))
        err = p.stderr.decode()
        self.assertEqual(p.returncode, 125, err)
        self.assertIn("no_such_module_sbx", err)
        self.assertIn("ModuleNotFoundError", err)
        # Its control directory (in $TMPDIR) is gone with it.
        self.assertEqual(leftover_control_dirs(), [])

    def test_a_server_killed_outright_leaves_no_control_directory(self):
        # The server removes a template's control directory as it reaps its host; killed
        # outright it never does, and $TMPDIR kept one per template. The host outlives it (its
        # parent-death signal is SIGTERM) and removes it as it ends. A TMPDIR of the test's own:
        # other servers' directories are not this one's.
        tmp = self.own_tmpdir()
        s = self.server_in(tmp, ["json"])
        made = [d for d in os.listdir(tmp) if d.startswith("sbx-template.")]
        self.assertEqual(len(made), 1, made)
        self.assertEqual(self.run_code(s, "print('x')\n")["stdout"], "x\n")
        host = template_hosts(s.p.pid)[0]
        os.kill(s.p.pid, signal.SIGKILL)
        s.p.wait()
        deadline = time.monotonic() + scaled(30)
        while alive(host) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertFalse(alive(host), "the template's host did not end after its server")
        self.assertEqual(os.listdir(tmp), [])
        # It ended its template's run as a stopped server's does: the run has its record.
        self.assertTrue(any(r.get("template") for r in self.records(s)), [r.get("sandbox") for r in self.records(s)])

    def first_cold_call(self, s):
        """The record of the first of up to 10 calls that ran cold (the forks made ahead were
        connected before whatever the test changed: they serve first)."""
        seen = []
        for _ in range(10):
            self.assertEqual(self.run_code(s, "print('x')\n")["stdout"], "x\n")
            seen.append(self.records(s)[-1])
            if seen[-1]["sandbox"]["made_by"] == "cold":
                return seen[-1]
        self.fail(f"no call ran cold: {[r['sandbox'] for r in seen]}")

    def test_a_worker_reaches_only_a_control_socket_of_its_own_user(self):
        # The socket's name is in $TMPDIR, where another user may take it once a dead template's
        # directory is removed: a worker that connected to theirs would send them the call's job.
        # Workers connect only through a directory and a socket of their own user's (root's
        # here, once sealed). Given to another user, the template is not reached: calls run cold
        # and say why, until it is root's again.
        if MODE != "root":
            self.skipTest("rootless: the test cannot give the socket to another user")
        tmp = self.own_tmpdir()
        s = self.server_in(tmp, ["json"], forked_ahead=True)
        (made,) = [d for d in os.listdir(tmp) if d.startswith("sbx-template.")]
        sock = os.path.join(tmp, made, "sock")
        self.assertEqual(os.lstat(sock).st_uid, 0)
        os.lchown(sock, 65534, 65534)
        self.assertIn("is not this user's", self.first_cold_call(s)["pool"]["reason"])
        os.lchown(sock, 0, 0)
        deadline = time.monotonic() + scaled(30)
        while self.records(s)[-1]["sandbox"]["made_by"] != "template":
            self.assertLess(time.monotonic(), deadline, self.records(s)[-1]["pool"])
            self.run_code(s, "pass\n")
            time.sleep(0.1)

    def test_a_call_is_sent_only_to_the_driver_found_listening_when_it_was_ready(self):
        # Whoever may write the control directory (rootless: the caller, so any sandbox of the
        # caller's whose profile binds the host's $TMPDIR), a worker sends its call only to the
        # driver the server found listening there (the kernel's record of its listener): a
        # socket put in its place, of the right owner and mode, gets no job, and the call runs
        # cold saying why.
        # Nor one whose listener has ended, whose pid another process may have by then.
        # The server compares the socket's file with the driver's at each tick: a new template
        # takes the next calls.
        for listener_ended in (False, True):
            with self.subTest(listener_ended=listener_ended):
                tmp = self.own_tmpdir()
                s = self.server_in(tmp, ["json"], forked_ahead=True)
                self.run_code(s, "pass\n")
                first = self.records(s)[-1]["sandbox"].get("template", {}).get("run_id")
                (made,) = [d for d in os.listdir(tmp) if d.startswith("sbx-template.")]
                imp = Impostor(os.path.join(tmp, made, "sock"), listener_ended)
                self.addCleanup(imp.close)
                # (Linux 6.5 to 6.15 refuse SO_PEERPIDFD for a listener that has ended.) The server
                # may have seen it first: its new template is not ready yet.
                self.assertRegex(self.first_cold_call(s)["pool"]["reason"],
                                 "is not its driver's|listener has ended|SO_PEERPIDFD|no template is ready")
                deadline = time.monotonic() + scaled(30)
                while True:
                    self.assertLess(time.monotonic(), deadline, "no new template served: " + s.stderr())
                    self.run_code(s, "pass\n")
                    made_by = self.records(s)[-1]["sandbox"]
                    if made_by["made_by"] == "template" and made_by["template"]["run_id"] != first:
                        break
                    time.sleep(0.2)
                self.assertRegex(s.stderr(), "its control socket .* is no longer its driver's \\(replaced\\): "
                                             "building a new one")
                self.assertEqual(imp.jobs(), [])
                s.close()

    def test_a_socket_put_in_the_driver_s_place_before_it_is_ready_stops_the_template(self):
        # Until its driver is ready the control directory is the template sandbox's (as root its
        # host uid, every default sandbox's; rootless the caller's): another sandbox that reaches
        # the path could rename a socket of its own over the driver's. As the server takes the
        # directory back it asks the kernel who listens there: not the template's driver, so
        # the template is stopped and the server says why, and the impostor gets no job.
        tmp = self.own_tmpdir()
        p = subprocess.Popen([SBX, "--state-dir", self.path("st-impostor"), "mcp", "--pool", "1", "--profile",
                              self.profile(*self.slow_preload())],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=dict(os.environ, TMPDIR=tmp))
        self.addCleanup(lambda: p.poll() is None and (p.kill(), p.wait()))
        imp = Impostor(self.control_socket_made(tmp, p.poll))
        self.addCleanup(imp.close)
        _, err = p.communicate(input=b"", timeout=scaled(60))
        err = err.decode(errors="replace")
        self.assertEqual(p.returncode, 125, err)
        self.assertIn("is not its driver's (it listens in process", err)
        self.assertEqual(imp.jobs(), [])
        self.assertEqual(os.listdir(tmp), [])  # its control directory (and the impostor) removed

    def slow_preload(self):
        """A preload that takes 3 s, and the profile keys that reach it: the time from the
        driver's socket to its "ready", held open. (preload, extra) for profile()."""
        mods = self.path("slow-preload")
        if not os.path.isdir(mods):
            os.makedirs(mods)
            os.chmod(mods, 0o755)
            with open(os.path.join(mods, "sbxit_slow.py"), "w") as f:
                f.write("import time\ntime.sleep(3)\n")
            os.chmod(os.path.join(mods, "sbxit_slow.py"), 0o644)
        return ["sbxit_slow"], {"binds": [{"src": mods, "dst": "/slowmods"}], "env": {"PYTHONPATH": "/slowmods"}}

    def control_socket_made(self, tmp, ended):
        """The path of the socket a template's driver made in `tmp`, as soon as it is there
        (`ended`() not None: the server ended first)."""
        deadline = time.monotonic() + scaled(30)
        while True:
            self.assertLess(time.monotonic(), deadline, "no template's control socket appeared")
            self.assertIsNone(ended(), "the server ended before its template made its socket")
            for d in os.listdir(tmp):
                if d.startswith("sbx-template.") and os.path.exists(os.path.join(tmp, d, "sock")):
                    return os.path.join(tmp, d, "sock")
            time.sleep(0.01)

    def test_a_job_the_sandbox_s_uid_queued_before_the_seal_is_never_run(self):
        # Until the seal the control directory is the template sandbox's host uid's, and that
        # uid is every default sandbox's (rootless: the caller's, every sandbox's of the caller's
        # and every call's worker's): one that reached it could connect then and queue a job of
        # its own, which the driver would fork once ready (its 'I', the call's pid 1's pidfd, on
        # the job's out socket). The driver forks only a job that carries the template's key,
        # which only the server's workers are given; as root it also drops, unread, any peer but
        # root (whom the template's user namespace does not map).
        tmp = self.own_tmpdir()
        started = []
        t = threading.Thread(target=lambda: started.append(self.server_in(tmp, *self.slow_preload())))
        t.start()
        sock = self.control_socket_made(tmp, lambda: None if t.is_alive() else "the server did not start")
        st = os.stat(os.path.dirname(sock))
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours2, theirs2 = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:  # the sandbox's host uid, as another default sandbox has it
            try:
                if os.geteuid() != st.st_uid:
                    os.setgroups([])
                    os.setresgid(st.st_gid, st.st_gid, st.st_gid)
                    os.setresuid(st.st_uid, st.st_uid, st.st_uid)
                # No key, then a wrong one: each with its own out socket.
                for tag, out_sock in ((b"call", theirs), (b"call" + b"0" * 64, theirs2)):
                    send_job(sock, tag, out_sock)
                os._exit(0)
            except BaseException:
                os._exit(1)
        self.assertEqual(os.waitpid(pid, 0)[1], 0, "the sandbox's uid could not queue its connection")
        theirs.close()
        theirs2.close()
        t.join(scaled(60))
        self.assertEqual(len(started), 1, "the server did not start")
        s = started[0]
        # The queued connections are the driver's first: by a call's answer they were taken.
        self.assertEqual(self.run_code(s, "print('x')\n")["stdout"], "x\n")
        self.assertEqual(self.records(s)[-1]["sandbox"]["made_by"], "template")
        for which, o in (("with no key", ours), ("with a wrong key", ours2)):
            o.settimeout(scaled(1))
            try:
                got = o.recv(64)
            except socket.timeout:
                got = b""
            self.assertEqual(got, b"", "the driver forked a call for the job the sandbox's uid queued " + which)

    def test_no_key_found_in_a_call_s_memory_gets_a_job_forked(self):
        # The template's memory is every call's (a fork's). Were the key each job must carry in
        # it (man sbx-mcp, Templates), a call could hand it to a sandbox that reaches the control
        # socket (rootless: any of the caller's whose profile binds $TMPDIR). Every 64-hex-digit
        # string in a call's readable memory, tried as the key, gets no job forked. (As root the
        # test connects as root, as the workers do: the driver's check of its peer's uid passes.)
        tmp = self.own_tmpdir()
        s = self.server_in(tmp, ["json"], forked_ahead=True)
        out = self.run_code(s, r"""
import json, re
found = set()
with open('/proc/self/maps') as m:
    regions = [l.split() for l in m]
with open('/proc/self/mem', 'rb', 0) as mem:
    for r in regions:
        if r[1][0] != 'r' or (len(r) > 5 and r[5] in ('[vvar]', '[vsyscall]')):
            continue
        a, b = (int(x, 16) for x in r[0].split('-'))
        try:
            mem.seek(a)
            data = mem.read(b - a)
        except (OSError, ValueError, OverflowError):
            continue
        found.update(re.findall(rb'(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])', data))
print(json.dumps(sorted(x.decode() for x in found)[:2000]))
""")
        self.assertEqual(out["status"], "ok", out)
        self.assertEqual(self.records(s)[-1]["sandbox"]["made_by"], "template")
        found = json.loads(out["stdout"])
        self.assertTrue(found, "no digest at all in a call's memory: the scan read nothing")
        (made,) = [d for d in os.listdir(tmp) if d.startswith("sbx-template.")]
        sock = os.path.join(tmp, made, "sock")
        forked = []
        for candidate in found:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            with ours:
                send_job(sock, b"call" + candidate.encode(), theirs)
                theirs.close()
                ours.settimeout(scaled(5))
                try:
                    if ours.recv(64):
                        forked.append(candidate)
                except socket.timeout:
                    forked.append(candidate + " (no answer)")
        self.assertEqual(forked, [], f"of {len(found)} strings found in a call's memory")
        note(f"template key: {len(found)} 64-hex-digit strings in a call's memory, none a key")

    def test_template_mode_is_refused_where_it_cannot_hold(self):
        for extra, want in (({"network": {"allow": ["example.com"]}}, "a template's calls have no network"),
                            ({"seccomp": "unconfined"}, "needs the default seccomp policy")):
            p = subprocess.run([SBX, "--state-dir", self.path("st2"), "mcp", "--pool", "1", "--profile",
                                self.profile(["json"], extra)], input=b"", capture_output=True, timeout=scaled(60))
            self.assertEqual(p.returncode, 125, p.stderr)
            self.assertIn(want, p.stderr.decode())

    def test_a_call_ends_as_python3_file_does(self):
        # The same cases as a prepared interpreter's (test_mcp_warm.py): the driver runs the call
        # with the prepared interpreter's own end (python_main.py): threads joined, atexit
        # handlers run, exit codes, a KeyboardInterrupt ending by SIGINT, as `python3 FILE`.
        cold = Server(self, ["--pool", "0", "--profile", self.profile(["json"])])
        self.addCleanup(cold.close)
        warm = self.server(["json"])
        for code in PYTHON_END_CASES:
            a, b = self.run_code(cold, code), self.run_code(warm, code)
            for k in ("status", "exit_code", "signal", "stdout", "stderr", "result"):
                self.assertEqual(a.get(k), b.get(k), f"{k} for {code!r}: cold {a.get(k)!r}, template {b.get(k)!r}")
        made = [r["sandbox"]["made_by"] for r in self.records(warm)]
        self.assertEqual(made, ["template"] * len(PYTHON_END_CASES), made)

    def test_sbx_probe_s_verdicts_through_a_template_are_a_cold_call_s(self):
        """The boundary probes of `sbx probe` (probe/sbx_probe.c, built beside sbx) run by a
        run_code call, cold and forked from a template, under one profile: the same verdicts."""
        helper = os.path.join(os.path.dirname(os.path.realpath(SBX)), "sbx-probe-helper")
        if not os.path.exists(helper):
            self.skipTest("no sbx-probe-helper beside " + SBX + " (it is built with sbx)")
        mine = self.path("sbx-probe")
        shutil.copy(helper, mine)
        os.chmod(mine, 0o755)
        marker = self.path("host-marker")
        with open(marker, "w") as f:
            f.write("host")
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        self.addCleanup(listener.close)
        extra = {"binds": [mine + ":/sbx-probe"]}
        cold = Server(self, ["--pool", "0", "--profile", self.profile(["json"], extra)])
        self.addCleanup(cold.close)
        warm = self.server(["json"], extra)
        code = ("import subprocess\nr = subprocess.run(['/sbx-probe', 'tok', %r, '%d', '%d', '64', '%d'], "
                "capture_output=True, text=True, timeout=20)\nprint(r.stdout)\n"
                % (marker, listener.getsockname()[1], os.getpid(), 512 << 20))
        verdicts = {}
        for name, s in (("cold", cold), ("template", warm)):
            out = self.run_code(s, code)
            lines = [l.split("\t") for l in out["stdout"].splitlines() if l.startswith("P\t")]
            verdicts[name] = {l[1]: l[2] for l in lines if len(l) >= 3}
            self.assertGreater(len(verdicts[name]), 15, out)
        self.assertEqual(self.records(warm)[-1]["sandbox"]["made_by"], "template")
        self.assertEqual(verdicts["cold"], verdicts["template"])
        breached = sorted(k for k, v in verdicts["template"].items() if v == "breached")
        # The canary secret is `sbx probe`'s own (passed by name only there): missing here, both ways.
        self.assertEqual(breached, ["secret.present"], verdicts["template"])
        note("sbx probe through a template: " + json.dumps(verdicts["template"], sort_keys=True))

    def test_a_cancelled_call_ends_and_is_recorded_as_a_cold_one_does(self):
        code = ("import signal, sys, time\n"
                "def h(signum, frame):\n    pass\n"
                "for n in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):\n    signal.signal(n, h)\n"
                "time.sleep(60)\ntime.sleep(60)\n")
        results = {}
        for name, s in (("cold", Server(self, ["--pool", "0", "--profile", self.profile(["json"])])),
                        ("template", self.server(["json"]))):
            self.addCleanup(s.close)
            id = s.start("tools/call", {"name": "run_code", "arguments": {"language": "python", "code": code}})
            time.sleep(scaled(1.5))
            t0 = time.monotonic()
            s.notify("notifications/cancelled", {"requestId": id, "reason": "test"})
            deadline = time.monotonic() + scaled(10)
            recs = []
            while time.monotonic() < deadline and not recs:
                recs = self.records(s)
                time.sleep(0.05)
            self.assertEqual(len(recs), 1, recs)
            results[name] = (recs[0]["result"].get("status"), recs[0]["result"].get("reason"))
            note(f"{name} call cancelled: recorded {time.monotonic() - t0:.2f} s later: {results[name]}")
            if name == "template":
                self.assertEqual(recs[0]["sandbox"]["made_by"], "template")
        # The first signal forwarded into the sandbox (the program ignores it), the second ends it
        # (which of SIGINT and SIGTERM the worker sees first varies, cold or not).
        for name in results:
            self.assertEqual(results[name][0], "signaled", results)
            self.assertRegex(results[name][1], r"^killed by sbx \(SIGKILL\) at a second signal \(SIG\w+\) after "
                                               r"forwarding SIG\w+$", results)


_DRIVER = []


def load_driver():
    """The template's driver as a module, loaded once (run.sh copies its parts beside the suite):
    its functions, not its main(); its text as sbx embeds it (CMakeLists.txt, sbx_embed_text),
    compiled as `python3 -c DRIVER` compiles it: its frames are '<string>', as a -c call's are."""
    if not _DRIVER:
        import types
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "driver")
        text = b"".join(open(os.path.join(here, name), "rb").read() for name in ("python_main.py", "warm_template.py"))
        mod = types.ModuleType("sbx_warm_template")
        exec(compile(text, "<string>", "exec"), mod.__dict__)
        _DRIVER.append(mod)
    return _DRIVER[0]


class DriverSignalCase(SbxTestCase):
    """A signal forwarded to a call before its program exists: the call's pid 1, a pid namespace's
    init, holds it (_hold; the kernel would drop it otherwise) and the program takes it as its
    code starts (_run_main), as a cold init holds it for its program."""

    def run_child(self, prepare, code):
        """The wait status of a child that runs prepare(driver), which returns the held signals,
        then the call's code through _run_main."""
        d = load_driver()
        pid = os.fork()
        if pid == 0:
            try:
                import atexit
                atexit._clear()  # the runner's handlers are not the call's to run (_sbx_main runs them)
                d._run_main(["python3", "-c", code], prepare(d))
            finally:
                os._exit(99)
        _, status = os.waitpid(pid, 0)
        return status

    def test_a_signal_held_before_the_program_ends_it_as_its_code_starts(self):
        def prepare(d, hold):
            signal.signal(signal.SIGTERM, d._hold)
            if hold:
                os.kill(os.getpid(), signal.SIGTERM)  # held, as pid 1 holds it
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the program's disposition
            return list(d._HELD)
        status = self.run_child(lambda d: prepare(d, True), "pass")
        self.assertTrue(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status)
        status = self.run_child(lambda d: prepare(d, False), "pass")
        self.assertTrue(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status)

    def test_a_c_call_s_traceback_is_python3_c_s(self):
        # Only the call's frames: the driver's are '<string>' too (python_main.py, _sbx_report).
        for code in ("def f():\n    raise ValueError('boom')\nf()\n", "x = (\n", "import sys\nsys.exit('bye')\n"):
            def prepare(d):
                os.dup2(os.open(self.path("stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
                return []
            status = self.run_child(prepare, code)
            with open(self.path("stderr")) as f:
                got = f.read()
            cold = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True, timeout=30)
            self.assertEqual((os.WEXITSTATUS(status), got), (cold.returncode, cold.stderr), code)

    def test_a_held_sigint_ends_the_program_by_sigint_as_python_does(self):
        # Taken as the code starts (the program's SIGINT handler: KeyboardInterrupt), then the
        # end of python3 at a KeyboardInterrupt (python_main.py, _sbx_main): death by SIGINT,
        # with the traceback of none of the driver's frames.
        def prepare(d):
            signal.signal(signal.SIGINT, d._hold)
            os.kill(os.getpid(), signal.SIGINT)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.dup2(os.open(self.path("stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
            return list(d._HELD)
        status = self.run_child(prepare, "pass")
        self.assertTrue(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGINT, status)
        with open(self.path("stderr")) as f:
            self.assertEqual(f.read(), "KeyboardInterrupt\n")

    def test_a_signal_blocked_since_the_fork_is_delivered_as_its_code_starts(self):
        # From its fork the program has the forwarded signals blocked (pid 1's mask, _call_pid1);
        # one that comes meanwhile (pid 1 forwards it, _reap) waits, and ends the program once
        # its code starts (_run_main empties the mask), never in the driver's own code.
        def prepare(d):
            signal.pthread_sigmask(signal.SIG_BLOCK, d._REAPED)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)  # pending: blocked
            return []
        status = self.run_child(prepare, "import os; os._exit(7)")
        self.assertTrue(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status)
