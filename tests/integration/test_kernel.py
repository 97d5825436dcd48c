"""Jupyter kernels inside sbx (sbx kernel install|run, runtime/session/kernel_relay.cpp and
session_tunnel.cpp), driven by the real jupyter_client (Debian's python3-jupyter-client and
python3-ipykernel): a kernelspec that Jupyter finds, cells that keep state, a kernel that is
sandboxed (no network, the sandbox's own host name and root), an interrupted cell, a restart, a
shutdown that leaves nothing, and the session records of each kernel."""
import json
import os
import subprocess
import sys
import time
import unittest

from sbxtest import MODE, SBX, SbxTestCase, find_procs, ledger_lines, note, sbx, scaled, wait_for

try:
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager
    import ipykernel  # noqa: F401 (the kernel runs inside the sandbox from the same /usr)
    MISSING = None
except ImportError as e:  # pragma: no cover - the Makefile's test packages install both
    MISSING = f"python3-jupyter-client and python3-ipykernel are needed ({e}): make deps-test installs them"


# Run as another user: opens 40 connections to each port given (half of them bound to the loopback
# device) and reports, once every one has
# been closed by the far end or the wait is over, how many were closed; then holds the rest until
# its stdin closes.
HOLD = r"""
import select, socket, sys, time
ip, wait, ports = sys.argv[1], float(sys.argv[2]), [int(p) for p in sys.argv[3:]]
def connect(port, bound):
    s = socket.socket()
    if bound:  # bound to a device: an exact socket lookup without an interface misses it
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"lo")
    s.connect((ip, port))
    return s
socks = [connect(p, i % 2) for p in ports for i in range(40)]
closed, deadline = set(), time.monotonic() + wait
while len(closed) < len(socks) and time.monotonic() < deadline:
    ready, _, _ = select.select([s for s in socks if s not in closed], [], [], 0.2)
    for s in ready:
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        if not data:
            closed.add(s)
print(len(closed), len(socks), flush=True)
sys.stdin.read()
"""


def kernels_of(uid):
    """ipykernel processes running as host uid `uid` (one test's sandboxes)."""
    out = []
    for pid, argv in find_procs("ipykernel_launcher").items():
        try:
            with open(f"/proc/{pid}/status") as f:
                if any(l.startswith("Uid:") and int(l.split()[1]) == uid for l in f):
                    out.append(pid)
        except OSError:
            pass
    return out


@unittest.skipIf(MISSING, MISSING or "")
class Kernel(SbxTestCase):
    def setUp(self):
        super().setUp()
        # A state dir of each test's own: a kernel's sbx inherits it from this process's environment.
        self.saved_state = os.environ["SBX_STATE_DIR"]
        self.state = self.path("state")
        os.mkdir(self.state, 0o700)
        self.jupyter = self.path("jupyter")
        os.mkdir(self.jupyter)
        os.environ.update(JUPYTER_DATA_DIR=self.jupyter, JUPYTER_RUNTIME_DIR=self.path("runtime"),
                          SBX_STATE_DIR=self.state)
        self.env = dict(os.environ)
        self.km = None

    def tearDown(self):
        if self.km is not None and self.km.has_kernel:
            self.km.shutdown_kernel(now=True)
        for k in ("JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR"):
            os.environ.pop(k, None)
        os.environ["SBX_STATE_DIR"] = self.saved_state
        super().tearDown()

    def install(self, *opts):
        r = sbx(["kernel", "install", "--user", "--name", "sbx-python3"] + list(opts), env=self.env)
        self.assertEqual(r.rc, 0, r.describe())
        return os.path.join(self.jupyter, "kernels", "sbx-python3", "kernel.json")

    def start_kernel(self, **launch):
        self.install()
        ksm = KernelSpecManager(data_dir=self.jupyter)
        self.assertIn("sbx-python3", ksm.find_kernel_specs())
        self.km = KernelManager(kernel_name="sbx-python3", kernel_spec_manager=ksm)
        # jupyter_client SIGTERMs a kernel that has not exited half of this after a shutdown or
        # restart request (5 s by default): under CI's load (a TCG guest beside the suite) a
        # kernel's sbx, which records its session as it ends, took longer once, and its session
        # then ended by `signal`, not `kernel_exited`.
        self.km.shutdown_wait_time = scaled(60)
        self.km.start_kernel(**launch)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=scaled(60))

    def cell(self, code, timeout=30):
        """Runs a cell; returns (its text output, the error's name or None)."""
        # stop_on_error=False: each cell stands alone. Otherwise the kernel aborts what arrives
        # before it has dealt with a cell's error (ipykernel's _abort_queues): under load, the cell
        # after an interrupted one came back "aborted", with no output.
        msg_id = self.kc.execute(code, stop_on_error=False)
        out, err = [], None
        deadline = time.monotonic() + scaled(timeout)
        while time.monotonic() < deadline:
            m = self.kc.get_iopub_msg(timeout=scaled(timeout))
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            t = m["msg_type"]
            if t == "stream":
                out.append(m["content"]["text"])
            elif t == "execute_result":
                out.append(m["content"]["data"]["text/plain"])
            elif t == "error":
                err = m["content"]["ename"]
            elif t == "status" and m["content"]["execution_state"] == "idle":
                break
        else:
            self.fail(f"cell did not finish within {timeout}s: {code!r}")
        # The shell channel's reply is the cell's verdict (iopub is a broadcast, and an error
        # published on it can come after idle under load: seen once in CI).
        while True:
            reply = self.kc.get_shell_msg(timeout=scaled(timeout))
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        self.assertNotEqual(reply["content"]["status"], "aborted", f"the kernel aborted {code!r}")
        if reply["content"]["status"] == "error" and err is None:
            note(f"kernel: {code!r}: the error came in the shell reply only ({reply['content']['ename']})")
            err = reply["content"]["ename"]
        return "".join(out), err

    def sessions(self):
        r = sbx(["session", "ls", "--all", "--json"])
        self.assertEqual(r.rc, 0, r.describe())
        return [s for s in json.loads(r.out) if "kernel" in s]

    def test_the_kernelspec_names_sbx_and_interrupts_by_message(self):
        path = self.install("--profile", "untrusted", "--idle", "5m")
        with open(path) as f:
            spec = json.load(f)
        self.assertEqual(spec["argv"][1:3], ["kernel", "run"])
        self.assertTrue(os.path.samefile(spec["argv"][0], SBX))
        self.assertIn("{connection_file}", spec["argv"])
        self.assertEqual(spec["argv"][spec["argv"].index("--idle") + 1], "5m")
        self.assertEqual(spec["interrupt_mode"], "message")
        self.assertEqual(spec["language"], "python")
        r = sbx(["kernel", "install", "--user", "--name", "../evil"], env=self.env)
        self.assertEqual(r.rc, 125, r.describe())
        self.assertIn("--name '../evil'", r.err)

    def test_cells_keep_state_interrupt_restart_and_shutdown_leave_nothing(self):
        self.start_kernel()
        self.assertEqual(self.cell("x = 41"), ("", None))
        self.assertEqual(self.cell("print(x + 1)"), ("42\n", None))
        # Sandboxed: the sandbox's own host name, no network, none of the host's /etc.
        out, _ = self.cell("import socket; socket.gethostname()")
        self.assertEqual(out, "'sbx'")
        out, err = self.cell("import socket; s = socket.create_connection(('1.1.1.1', 80), timeout=2)")
        self.assertEqual(err, "OSError", out)
        out, err = self.cell("open('/etc/shadow').read()")
        self.assertEqual(err, "FileNotFoundError", out)
        first = [s for s in self.sessions() if s["state"] == "running"]
        self.assertEqual(len(first), 1, "one running session for the kernel")
        # Interrupt (a message on the control channel): the cell ends, the state stays.
        msg_id = self.kc.execute("import time; time.sleep(60)", stop_on_error=False)
        # Interrupted once it runs (its execute_input is on iopub), not while it is still queued.
        while True:
            m = self.kc.get_iopub_msg(timeout=scaled(20))
            if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "execute_input":
                break
        time.sleep(0.5)
        t0 = time.monotonic()
        self.km.interrupt_kernel()
        ename = None
        while True:
            m = self.kc.get_iopub_msg(timeout=scaled(20))
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            if m["msg_type"] == "error":
                ename = m["content"]["ename"]
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                break
        self.assertEqual(ename, "KeyboardInterrupt")
        self.assertLess(time.monotonic() - t0, scaled(10))
        self.assertEqual(self.cell("print(x)"), ("41\n", None))
        # Restart: a new kernel in a new session; the old one ended with the kernel.
        self.km.restart_kernel(now=False)
        self.kc.wait_for_ready(timeout=scaled(60))
        self.assertEqual(self.cell("print(globals().get('x'))"), ("None\n", None))
        old = [s for s in self.sessions() if s["id"] == first[0]["id"]]
        self.assertEqual(old[0]["state"], "ended")
        self.assertEqual(old[0]["ended_by"], "kernel_exited")
        self.assertTrue(wait_for(lambda: not os.path.exists(f"/proc/{first[0]['server_pid']}"), scaled(10)),
                        "the first kernel's sbx is still running after the restart")
        # Shutdown: nothing is left, and every kernel's session has its records.
        self.km.shutdown_kernel(now=False)
        self.kc.stop_channels()
        self.assertFalse(self.km.is_alive())
        self.km = None
        self.assertTrue(wait_for(lambda: all(s["state"] == "ended" for s in self.sessions()), scaled(20)))
        ended = self.sessions()
        self.assertEqual(len(ended), 2)
        self.assertEqual({s["ended_by"] for s in ended}, {"kernel_exited"})
        for s in ended:
            self.assertFalse(os.path.exists(os.path.join(self.state, "sessions", s["id"])))
            self.assertTrue(wait_for(lambda: not os.path.exists(f"/proc/{s['server_pid']}"), scaled(10)))
        records = [l["record"] for l in ledger_lines(self.state)]
        runs = [r for r in records if r.get("schema") == "sbx.trace/v1" and "session" in r]
        self.assertEqual(len(runs), 2)
        for run in runs:
            self.assertEqual(run["session"]["kernel"], self.km_name())
            self.assertEqual(run["session"]["ended_by"], "kernel_exited")
        # The kernels of this test's own sandboxes (their host uid): a sanitizer pass runs the root
        # and rootless suites side by side, each with kernels of its own.
        uid = runs[0]["enforcement"]["identity"]["uid_map"][0]["outside"]
        self.assertTrue(wait_for(lambda: kernels_of(uid) == [], scaled(10)), f"a kernel process is left: {kernels_of(uid)}")
        starts = [r for r in records if r.get("schema") == "sbx.session-start/v1"]
        self.assertEqual([s["invocation"]["spec"]["argv"] for s in starts], [["sbx", "kernel", "run"]] * 2)
        self.assertEqual(sbx(["trace", "verify"]).rc, 0)

    def test_a_hard_shutdown_still_records_the_kernel_s_session(self):
        # jupyter_client's shutdown(now=True) SIGKILLs the kernel's process group: the runner has
        # a group of its own and records the session when its server is gone.
        self.start_kernel()
        self.assertEqual(self.cell("print(6 * 7)"), ("42\n", None))
        self.km.shutdown_kernel(now=True)
        self.kc.stop_channels()
        self.km = None

        def recorded():
            return [l["record"] for l in ledger_lines(self.state)
                    if l["record"].get("schema") == "sbx.trace/v1" and "kernel" in l["record"].get("session", {})]
        self.assertTrue(wait_for(lambda: len(recorded()) == 1, scaled(30)), "no record of the killed kernel's session")
        uid = recorded()[0]["enforcement"]["identity"]["uid_map"][0]["outside"]
        self.assertTrue(wait_for(lambda: kernels_of(uid) == [], scaled(20)), "a kernel process is left")

    def test_a_kernel_that_cannot_start_says_why_on_stderr(self):
        import socket
        ports = []
        for _ in range(5):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
            s.close()
        conn = self.path("conn.json")
        with open(conn, "w") as f:
            json.dump({"transport": "tcp", "ip": "127.0.0.1", "shell_port": ports[0], "iopub_port": ports[1],
                       "stdin_port": ports[2], "control_port": ports[3], "hb_port": ports[4], "key": "k"}, f)
        r = sbx(["kernel", "run", "--connection-file", conn, "--bind", "/no/such/path:/data"], timeout=60)
        self.assertEqual(r.rc, 125, r.describe())
        self.assertIn("before it was ready: setup failed at mounts", r.err)

    def km_name(self):
        return "sbx-python3"

    def test_another_user_s_connections_cannot_lock_the_owner_out(self):
        if MODE != "root":
            self.skipTest("needs a client of another uid (root mode)")
        with open(self.path("kernel.err"), "w+") as err:
            self.start_kernel(stderr=err)
            info = self.km.get_connection_info()
            ports = [str(info[k]) for k in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")]
            # uid 65534 opens 40 connections on each port (the relay serves 32 at once) and holds
            # them: before the relay asked whose they were, the first 32 stayed and every later
            # client of the kernel's owner was closed at its accept.
            hold = subprocess.Popen([sys.executable, "-c", HOLD, info["ip"], str(scaled(10))] + ports,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                    preexec_fn=lambda: (os.setgroups([]), os.setgid(65534), os.setuid(65534)))
            try:
                closed, opened = (int(x) for x in hold.stdout.readline().split())
                self.assertEqual((closed, opened), (200, 200), "another user's connections were kept")
                kc = self.km.client()  # a new client of the owner's, while the others are held
                kc.start_channels()
                kc.wait_for_ready(timeout=scaled(60))
                self.kc.stop_channels()
                self.kc = kc
                self.assertEqual(self.cell("print(6 * 7)"), ("42\n", None))
            finally:
                hold.stdin.close()
                hold.wait(timeout=scaled(30))
            err.seek(0)
            self.assertIn("refused a connection to shell_port (from uid 65534; only uid 0", err.read())

    def test_a_bad_connection_file_or_a_taken_port_is_one_line_and_125(self):
        bad = self.path("conn.json")
        with open(bad, "w") as f:
            json.dump({"transport": "ipc", "ip": "/tmp/x"}, f)
        r = sbx(["kernel", "run", "--connection-file", bad])
        self.assertEqual(r.rc, 125, r.describe())
        self.assertIn("sbx relays tcp only", r.err)
        self.assertEqual(len(r.err.splitlines()), 1)
        import socket
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        try:
            with open(bad, "w") as f:
                json.dump({"transport": "tcp", "ip": "127.0.0.1", "shell_port": port, "iopub_port": port + 1,
                           "stdin_port": port + 2, "control_port": port + 3, "hb_port": port + 4, "key": "k"}, f)
            r = sbx(["kernel", "run", "--connection-file", bad])
            self.assertEqual(r.rc, 125, r.describe())
            self.assertIn(f"cannot listen on 127.0.0.1:{port} (shell_port)", r.err)
        finally:
            taken.close()
        self.assertEqual([s for s in self.sessions() if s["state"] == "running"], [])
