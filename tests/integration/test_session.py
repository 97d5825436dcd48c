"""sbx session (runtime/session/, man sbx-session): state kept across the calls of one session
(Python globals, /workspace files, processes), every way a session ends and what is left after
each (no process, no session directory, the records), limits per call and for the session as a
whole, one call at a time, interrupting a call without ending the session, and the refusal of an
unknown, ended or foreign id."""
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import time

from sbxtest import MODE, SBX, TIME_SCALE, SbxTestCase, find_procs, kill_tree_by_marker, ledger_lines, mountinfo, sbx, scaled, \
    sleep_marker, validate_trace, wait_for

ROOT = MODE == "root"


class SessionCase(SbxTestCase):
    def setUp(self):
        super().setUp()
        self.state = os.environ["SBX_STATE_DIR"]
        self.started = []

    def tearDown(self):
        for sid in self.started:
            sbx(["session", "stop", sid], timeout=60)
        super().tearDown()

    def start(self, *opts, env=None):
        r = sbx(["session", "start", "--json"] + list(opts), timeout=60, env=env)
        self.assertEqual(r.rc, 0, r.describe())
        info = json.loads(r.out)
        self.started.append(info["session"])
        return info

    def exec(self, sid, *args, env=None, timeout=60):
        return sbx(["session", "exec", sid] + list(args), timeout=timeout, env=env)

    def py(self, sid, code, *opts):
        return self.exec(sid, "--language", "python", "--code", code, *opts)

    def records(self, schema=None):
        out = []
        for line in ledger_lines(self.state):
            rec = line["record"]
            if schema is None or rec.get("schema") == schema:
                out.append(rec)
        return out

    def session_dir(self, sid):
        return os.path.join(self.state, "sessions", sid)

    def ended(self, sid, timeout=30):
        """Waits for the session's end; returns `session show`'s JSON of it."""
        ok = wait_for(lambda: not os.path.exists(self.session_dir(sid)), scaled(timeout))
        self.assertTrue(ok, f"session {sid} did not end within {timeout}s")
        r = sbx(["session", "show", sid])
        self.assertEqual(r.rc, 0, r.describe())
        meta = json.loads(r.out)
        self.assertEqual(meta["state"], "ended")
        return meta

    def end_record(self, info):
        runs = [r for r in self.records("sbx.trace/v1") if r["run_id"] == info["run_id"]]
        self.assertEqual(len(runs), 1, f"the session run's record {info['run_id']}")
        validate_trace(self, runs[0])
        return runs[0]

    def assertNothingLeft(self, sid, marker=None):
        self.assertFalse(os.path.exists(self.session_dir(sid)), "the session's directory is still there")
        meta = json.loads(sbx(["session", "show", sid]).out)
        self.assertEqual(meta["state"], "ended")
        # The server exits only after it reaped the runner, whose sandbox died with it.
        self.assertTrue(wait_for(lambda: not os.path.exists(f"/proc/{meta['server_pid']}"), scaled(10)),
                        "the session's server is still running")
        if marker:
            self.assertEqual(find_procs(marker), {}, "a process started inside the session is still running")


class State(SessionCase):
    def test_python_globals_files_and_processes_stay_between_calls(self):
        sid = self.start()["session"]
        r = self.py(sid, "x = 41")
        self.assertEqual(r.rc, 0, r.describe())
        r = self.py(sid, "print(x + 1)")
        self.assertEqual((r.rc, r.out), (0, "42\n"), r.describe())
        # A last bare expression is shown as a REPL shows it.
        r = self.py(sid, "x * 2")
        self.assertEqual(r.out, "82\n", r.describe())
        r = self.exec(sid, "--", "sh", "-c", "pwd; echo kept > note.txt")
        self.assertEqual((r.rc, r.out), (0, "/workspace\n"), r.describe())
        r = self.exec(sid, "--", "cat", "/workspace/note.txt")
        self.assertEqual(r.out, "kept\n", r.describe())
        m = sleep_marker()
        r = self.exec(sid, "--", "sh", "-c", f"sleep {m} >/dev/null 2>&1 &")
        self.assertEqual(r.rc, 0, r.describe())
        r = self.exec(sid, "--", "sh", "-c", "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done")
        self.assertIn(f"sleep {m}", r.out, "a process of an earlier call is gone")
        r = sbx(["session", "stop", sid], timeout=60)
        self.assertEqual(r.rc, 0, r.describe())
        self.assertIn("stopped after 7 calls", r.out)
        self.started.remove(sid)
        self.assertNothingLeft(sid, m)
        kill_tree_by_marker(m)

    def test_output_exit_status_and_streams_of_a_call(self):
        sid = self.start()["session"]
        r = self.exec(sid, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
        self.assertEqual((r.rc, r.out, r.err), (3, "out\n", "err\n"), r.describe())
        r = self.exec(sid, "--", "sh", "-c", "kill -TERM $$")
        self.assertEqual(r.rc, 128 + 15, r.describe())
        r = self.exec(sid, "--", "no-such-program-here")
        self.assertEqual(r.rc, 127, r.describe())
        r = self.exec(sid, "--json", "--", "sh", "-c", "echo to-stderr")
        done = json.loads(r.out)
        self.assertEqual(r.err, "to-stderr\n", "--json: the call's stdout goes to stderr")
        self.assertEqual(done["result"]["status"], "ok")
        self.assertEqual(done["stdout"]["bytes"], 10)
        self.assertIn("seq", done["record"])
        # sh and bash run a new process each call: only Python keeps interpreter state.
        r = self.exec(sid, "--language", "bash", "--code", "echo $((6 * 7))")
        self.assertEqual(r.out, "42\n", r.describe())

    def test_a_call_that_kills_the_interpreter_loses_its_state_and_the_next_starts_anew(self):
        sid = self.start()["session"]
        self.py(sid, "x = 1")
        r = self.py(sid, "import os; os._exit(7)")
        self.assertEqual(r.rc, 7, r.describe())
        self.assertIn("state is lost", r.err)
        r = self.exec(sid, "--json", "--language", "python", "--code", "print(globals().get('x'))")
        done = json.loads(r.out)
        self.assertEqual(r.err, "None\n", r.describe())
        self.assertEqual(done["interpreter"], "new")
        calls = [c for c in self.records("sbx.session-call/v1") if c["session"]["id"] == sid]
        self.assertEqual([c["session"].get("interpreter") for c in calls], ["new", "lost", "new"])

    def test_an_exception_is_the_call_s_error_and_the_session_goes_on(self):
        sid = self.start()["session"]
        self.py(sid, "y = 5")
        r = self.py(sid, "1/0")
        self.assertEqual(r.rc, 1, r.describe())
        self.assertIn("ZeroDivisionError", r.err)
        self.assertIn('File "<session>", line 1', r.err)
        self.assertNotIn('File "<string>"', r.err, "the driver's own frames are not the caller's")
        r = self.py(sid, "import sys; sys.exit(3)")
        self.assertEqual(r.rc, 3, "exit(N) ends the call with status N, not the interpreter\n" + r.describe())
        r = self.py(sid, "import sys; sys.exit(0)")
        self.assertEqual((r.rc, r.err), (0, ""), "exit(0) is a call that went well\n" + r.describe())
        r = self.py(sid, "print(y)")
        self.assertEqual(r.out, "5\n", r.describe())


class Ends(SessionCase):
    def test_stop_idle_max_and_a_dead_sandbox_each_end_it_and_leave_nothing(self):
        cases = [("stop", []), ("idle", ["--idle", "1s"]), ("max", ["--max", "2s"]), ("sandbox_ended", [])]
        for why, opts in cases:
            with self.subTest(why):
                m = sleep_marker()
                info = self.start(*opts)
                sid = info["session"]
                r = self.exec(sid, "--", "sh", "-c", f"sleep {m} >/dev/null 2>&1 &")
                self.assertEqual(r.rc, 0, r.describe())
                if why == "stop":
                    self.assertEqual(sbx(["session", "stop", sid], timeout=60).rc, 0)
                if why == "sandbox_ended":
                    # The call kills the agent (its parent): the sandbox's program is gone.
                    self.exec(sid, "--", "sh", "-c", "kill -KILL $PPID")
                meta = self.ended(sid)
                self.started.remove(sid)
                self.assertEqual(meta["ended_by"], why)
                self.assertNothingLeft(sid, m)
                end = self.end_record(info)
                self.assertEqual(end["session"]["id"], sid)
                self.assertEqual(end["session"]["ended_by"], why if why != "sandbox_ended" else "sandbox_ended")
                # The call that killed the agent counts: the runner waits for the server's count.
                self.assertEqual(end["session"]["calls"], 2 if why == "sandbox_ended" else 1, end["session"])
                r = self.exec(sid, "--", "true")
                self.assertEqual(r.rc, 125, r.describe())
                self.assertIn(f"session {sid} has ended ({why})", r.err)
                self.assertEqual(len(r.err.splitlines()), 1, r.describe())
                kill_tree_by_marker(m)

    def test_a_client_that_disappears_mid_call_interrupts_it_and_idle_still_ends_the_session(self):
        sid = self.start("--idle", "2s")["session"]
        p = subprocess.Popen([SBX, "session", "exec", sid, "--", "sleep", "30"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        time.sleep(scaled(0.5))
        p.kill()
        p.wait()
        meta = self.ended(sid, timeout=30)
        self.started.remove(sid)
        self.assertEqual(meta["ended_by"], "idle")
        calls = [c for c in self.records("sbx.session-call/v1") if c["session"]["id"] == sid]
        self.assertEqual(len(calls), 1, "the abandoned call is recorded")
        self.assertEqual(calls[0]["result"]["status"], "interrupted")

    def test_records_start_calls_and_end_and_the_ledger_verifies(self):
        info = self.start()
        sid = info["session"]
        self.exec(sid, "--", "true")
        self.py(sid, "print('hi')")
        sbx(["session", "stop", sid], timeout=60)
        self.started.remove(sid)
        start = [r for r in self.records("sbx.session-start/v1") if r["session"]["id"] == sid]
        self.assertEqual(len(start), 1)
        self.assertEqual(start[0]["session"]["run_id"], info["run_id"])
        self.assertEqual(start[0]["session"]["profile"], "untrusted")
        calls = [r for r in self.records("sbx.session-call/v1") if r["session"]["id"] == sid]
        self.assertEqual([c["session"]["call"] for c in calls], [1, 2])
        self.assertEqual(calls[0]["invocation"]["request"]["argv"], ["true"])
        self.assertEqual(calls[1]["invocation"]["request"]["language"], "python")
        self.assertEqual(calls[1]["invocation"]["request"]["code"], "print('hi')")
        self.assertEqual(calls[1]["stdout"]["bytes"], 3)
        for c in calls:
            self.assertEqual(c["session"]["run_id"], info["run_id"])
        end = self.end_record(info)
        self.assertEqual(end["session"]["calls"], 2)
        self.assertEqual(end["session"]["ended_by"], "stop")
        self.assertEqual(end["invocation"]["spec"]["workdir"], "/workspace")
        r = sbx(["trace", "verify"])
        self.assertEqual(r.rc, 0, r.describe())


class Limits(SessionCase):
    def test_per_call_timeout_and_output_limit(self):
        sid = self.start("--timeout", "1s", "--output-limit", "1000")["session"]
        r = self.exec(sid, "--", "sleep", "20", timeout=30)
        self.assertEqual(r.rc, 124, r.describe())
        self.assertLess(r.wall, scaled(10), "the call's timeout did not end it")
        r = self.exec(sid, "--json", "--", "sh", "-c", "head -c 5000 /dev/zero")
        done = json.loads(r.out)
        self.assertEqual(done["stdout"]["bytes"], 1000)
        self.assertEqual(done["stdout"]["dropped"], 4000)
        # A call may lower its limits, never raise them past the session's.
        r = self.exec(sid, "--timeout", "5s", "--", "true")
        self.assertEqual(r.rc, 125, r.describe())
        self.assertIn("timeout_ms must be from 1 to 1000", r.err)
        r = self.exec(sid, "--output-limit", "10", "--", "sh", "-c", "echo 0123456789abcdef")
        self.assertEqual(r.out, "0123456789", r.describe())
        r = self.py(sid, "import time; time.sleep(20)")
        self.assertEqual(r.rc, 124, r.describe())
        # A timed-out Python call kills the interpreter: the next one starts anew.
        r = self.py(sid, "print('again')")
        self.assertEqual(r.out, "again\n", r.describe())

    def test_the_session_s_limits_hold_for_the_session_as_a_whole(self):
        m = sleep_marker()
        sid = self.start("--pids", "12")["session"]
        try:
            # Processes that earlier calls left count against the session's pids limit.
            r = self.exec(sid, "--", "sh", "-c", f"for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep {m} & done; wait",
                          timeout=30)
            r = self.exec(sid, "--", "sh", "-c", "sleep 0")
            self.assertNotEqual(r.rc, 0, "a call forked past the session's pids limit\n" + r.describe())
        finally:
            kill_tree_by_marker(m)
        sid2 = self.start()["session"]
        # /workspace is a size-capped tmpfs (256 MiB).
        r = self.exec(sid2, "--", "sh", "-c", "head -c 300000000 /dev/zero > big; echo $?", timeout=60)
        self.assertIn("No space left", r.err, r.describe())

    def test_one_call_at_a_time_the_second_is_refused(self):
        sid = self.start()["session"]
        p = subprocess.Popen([SBX, "session", "exec", sid, "--", "sleep", "3"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        try:
            time.sleep(scaled(0.7))
            r = self.exec(sid, "--", "true")
            self.assertEqual(r.rc, 125, r.describe())
            self.assertIn("is busy with call 1", r.err)
        finally:
            p.communicate(timeout=30)
        self.assertEqual(p.returncode, 0)

    def test_interrupt_ends_the_call_not_the_session(self):
        sid = self.start()["session"]
        self.py(sid, "z = 'still here'")
        p = subprocess.Popen([SBX, "session", "exec", sid, "--language", "python", "--code",
                              "import time\nwhile True: time.sleep(0.1)"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(scaled(1.0))
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 130, err)
        self.assertIn(b"KeyboardInterrupt", err)
        r = self.py(sid, "print(z)")
        self.assertEqual(r.out, "still here\n", r.describe())

    def test_a_store_holds_at_most_its_maximum_of_running_sessions(self):
        env = dict(os.environ, SBX_MAX_SESSIONS="2")
        self.start(env=env)
        self.start(env=env)
        r = sbx(["session", "start"], env=env, timeout=60)
        self.assertEqual(r.rc, 125, r.describe())
        self.assertIn("2 sessions are running", r.err)
        self.assertIn("sbx session stop", r.err)
        self.assertEqual(len(r.err.splitlines()), 1)


class Secrets(SessionCase):
    def test_a_secret_is_the_session_s_only_never_recorded_and_gone_at_its_end(self):
        value = "s3cret-" + os.urandom(6).hex()
        env = dict(os.environ, SESSION_TOKEN=value)
        mounts_before = mountinfo()
        info = self.start("--secret", "token=env:SESSION_TOKEN", env=env)
        sid = info["session"]
        r = self.exec(sid, "--", "cat", "/run/secrets/token")
        self.assertEqual(r.out, value, r.describe())
        r = self.py(sid, "import hashlib; print(hashlib.sha256(open('/run/secrets/token', 'rb').read()).hexdigest())")
        self.assertEqual(r.out, hashlib.sha256(value.encode()).hexdigest() + "\n", r.describe())
        other = self.start()["session"]
        r = self.exec(other, "--", "sh", "-c", "ls /run/secrets 2>&1; true")
        self.assertNotIn("token", r.out, "another session sees the secret")
        sbx(["session", "stop", sid], timeout=60)
        self.started.remove(sid)
        with open(os.path.join(self.state, "traces", "ledger.jsonl")) as f:
            self.assertNotIn(value, f.read(), "the secret's value is in the ledger")
        self.assertEqual(mountinfo(), mounts_before, "a mount of the session is left on the host")


class Refusals(SessionCase):
    def test_a_session_that_cannot_start_says_why_in_one_line(self):
        r = sbx(["session", "start", "--bind", "/no/such/path:/data"], timeout=60)
        self.assertEqual(r.rc, 125, r.describe())
        self.assertEqual(len(r.err.splitlines()), 1, r.describe())
        self.assertIn("before it was ready: setup failed at mounts: --bind /no/such/path", r.err)
        self.assertIn("its record: sbx trace show", r.err)
        self.assertEqual([s for s in json.loads(sbx(["session", "ls", "--json"]).out)], [])

    def test_run_options_a_session_has_no_use_for_and_its_own_places_are_refused(self):
        for opts, words in ((["--output", self.path("o")], "--output is sbx run's"),
                            (["--workdir", "/tmp"], "--workdir is sbx run's"),
                            (["--keep-inputs"], "--keep-inputs is sbx run's"),
                            (["--bind", "/tmp:/workspace"], "a bind on /workspace is the session's own"),
                            (["--bind", "/tmp:/run/sbx-agent"], "a bind on /run/sbx-agent is the session's own"),
                            (["--tmpfs", "/workspace"], "--tmpfs /workspace is the session's own"),
                            (["-i"], "-i and -t are 'sbx run''s")):
            r = sbx(["session", "start"] + opts, timeout=60)
            self.assertEqual(r.rc, 125, r.describe())
            self.assertIn(words, r.err)
            self.assertEqual(len(r.err.splitlines()), 1, r.describe())

    def test_an_ending_session_is_not_taken_for_gone(self):
        # While the server waits for its runner, `ls` sees the session as running, not as one
        # whose server is gone (which would lose its end's reason).
        info = self.start()
        sid = info["session"]
        p = subprocess.Popen([SBX, "session", "stop", sid], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(20):
            sbx(["session", "ls", "--all"])
        p.communicate(timeout=60)
        self.started.remove(sid)
        meta = self.ended(sid)
        self.assertEqual(meta["ended_by"], "stop")
        self.assertEqual(self.end_record(info)["session"]["ended_by"], "stop")

    def test_a_server_s_own_end_stands_over_its_half_removed_directory(self):
        # An ending server writes its tombstone, then removes its directory, whose socket may go
        # before its session.json: `ls --all` meeting that moment took it for a server gone and
        # wrote "server_gone" over the server's own end (the test above, under load). That moment,
        # made by hand: the directory back with its session.json alone, beside the tombstone.
        info = self.start()
        sid = info["session"]
        with open(os.path.join(self.session_dir(sid), "session.json")) as f:
            running = f.read()
        r = sbx(["session", "stop", sid], timeout=60)
        self.assertEqual(r.rc, 0, r.describe())
        self.started.remove(sid)
        self.assertEqual(self.ended(sid)["ended_by"], "stop")
        os.mkdir(self.session_dir(sid), 0o700)
        with open(os.path.join(self.session_dir(sid), "session.json"), "w") as f:
            f.write(running)
        listed = {m["id"]: m for m in json.loads(sbx(["session", "ls", "--all", "--json"]).out)}
        self.assertEqual(listed[sid]["ended_by"], "stop", listed[sid])
        self.assertFalse(os.path.exists(self.session_dir(sid)), "the half-removed directory is still there")
        self.assertEqual(json.loads(sbx(["session", "show", sid]).out)["ended_by"], "stop")


class Ids(SessionCase):
    def test_unknown_malformed_and_foreign_ids_are_refused_naming_them(self):
        r = sbx(["session", "exec", "0123456789abcdef0123456789abcdef", "--", "true"])
        self.assertEqual(r.rc, 125)
        self.assertIn("no session 0123456789abcdef0123456789abcdef", r.err)
        r = sbx(["session", "exec", "../../etc", "--", "true"])
        self.assertEqual(r.rc, 125)
        self.assertIn("'../../etc' is no session id", r.err)
        sid = self.start()["session"]
        # Another store (another user's, or a tenant's) does not know the id.
        other = self.path("other-state")
        os.mkdir(other, 0o700)
        r = sbx(["session", "exec", sid, "--", "true"], env=dict(os.environ, SBX_STATE_DIR=other))
        self.assertEqual(r.rc, 125, r.describe())
        self.assertIn(f"no session {sid}", r.err)
        tenants = self.path("tenants")
        os.mkdir(tenants)
        with open(os.path.join(tenants, "A.json"), "w") as f:
            json.dump({"id_slot": 1, "separate_ids": "preferred"}, f)
        env = dict(os.environ, SBX_TENANTS_DIR=tenants)
        r = sbx(["session", "exec", "--tenant", "A", sid, "--", "true"], env=env)
        self.assertEqual(r.rc, 125, r.describe())
        self.assertIn(f"no session {sid}", r.err)
        # The tenant's own session is reachable only through the tenant.
        r = sbx(["session", "start", "--tenant", "A", "--json"], env=env, timeout=60)
        self.assertEqual(r.rc, 0, r.describe())
        tid = json.loads(r.out)["session"]
        try:
            r = sbx(["session", "exec", "--tenant", "A", tid, "--", "echo", "mine"], env=env)
            self.assertEqual(r.out, "mine\n", r.describe())
            r = sbx(["session", "exec", tid, "--", "true"], env=env)
            self.assertEqual(r.rc, 125, r.describe())
        finally:
            sbx(["session", "stop", "--tenant", "A", tid], env=env, timeout=60)

    def test_the_control_socket_is_the_owner_s_only(self):
        sid = self.start()["session"]
        d = os.stat(self.session_dir(sid))
        self.assertEqual(d.st_mode & 0o777, 0o700)
        self.assertEqual(d.st_uid, os.getuid())
        meta = json.loads(sbx(["session", "show", sid]).out)
        self.assertEqual(meta["state"], "running")
        self.assertEqual(meta["uid"], os.getuid())
        self.assertEqual(len(sid), 32)


def frame(obj, kind=b"J"):
    body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return struct.pack(">I", len(body)) + kind + body


class Hostile(SessionCase):
    """Attacks on a session that must fail: from its own calls, from a local client of its control
    socket, from a tenant asking for more than its ceiling."""

    def connect(self, sid):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(os.path.join(self.session_dir(sid), "ctl.sock"))
        return s

    def server_rss_kib(self, sid):
        pid = json.loads(sbx(["session", "show", sid]).out)["server_pid"]
        with open(f"/proc/{pid}/status") as f:
            return int(next(l for l in f if l.startswith("VmRSS:")).split()[1])

    def test_malformed_requests_are_refused_and_the_server_goes_on(self):
        sid = self.start()["session"]
        for bad in ({"op": 5}, {"op": "exec", "argv": [1, 2]}, {"op": "code", "language": 7, "code": "x"},
                    {"op": "exec", "argv": ["true"], "timeout_ms": "soon"}, {"op": []}):
            s = self.connect(sid)
            s.sendall(frame(bad))
            s.settimeout(scaled(10))
            answer = s.recv(65536)
            s.close()
            self.assertIn(b'"event":"error"', answer, f"{bad}: {answer!r}")
        r = self.exec(sid, "--", "echo", "alive")
        self.assertEqual(r.out, "alive\n", r.describe())

    def test_a_client_that_never_reads_cannot_grow_the_server_or_hold_up_stop(self):
        sid = self.start()["session"]
        before = self.server_rss_kib(sid)
        floods = []
        for _ in range(4):
            s = self.connect(sid)
            s.setblocking(False)
            sent = 0
            try:
                while sent < (8 << 20):
                    sent += s.send(frame({"op": "status"}) * 256)
            except BlockingIOError:
                pass
            floods.append(s)
        time.sleep(scaled(1.0))
        grown = self.server_rss_kib(sid) - before
        # A sanitizer build holds freed memory in ASan's quarantine (256 MiB by default) as well.
        bound = (64 << 10) + ((256 << 10) if TIME_SCALE > 1 else 0)
        self.assertLess(grown, bound, f"the server grew by {grown} KiB for clients that never read")
        # Idle connections past the server's maximum do not lock the owner out.
        idle = [self.connect(sid) for _ in range(20)]
        t0 = time.monotonic()
        r = sbx(["session", "stop", sid], timeout=60)
        self.assertEqual(r.rc, 0, r.describe())
        self.assertLess(time.monotonic() - t0, scaled(15), "stop waited for clients that never read")
        self.started.remove(sid)
        for s in floods + idle:
            s.close()

    def test_a_call_cannot_write_frames_in_the_agent_s_name(self):
        sid = self.start()["session"]
        # The agent is the call's parent and has its uid; it is not dumpable, so neither its memory
        # nor its fds open for the call (which could otherwise forge another call's result).
        r = self.exec(sid, "--", "sh", "-c",
                      "for f in /proc/$PPID/mem /proc/$PPID/fd/1; do (exec 3>>$f) 2>/dev/null && echo open $f; done; "
                      "echo checked")
        self.assertEqual(r.out, "checked\n", r.describe())

    def test_the_server_holds_none_of_the_caller_s_fds(self):
        leak = self.path("leak")
        with open(leak, "w") as f:
            r = subprocess.run([SBX, "session", "start"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               pass_fds=(f.fileno(),), timeout=60 * scaled(1))
        self.assertEqual(r.returncode, 0, r.stderr)
        sid = r.stdout.decode().strip()
        self.started.append(sid)
        pid = json.loads(sbx(["session", "show", sid]).out)["server_pid"]
        held = [os.readlink(f"/proc/{pid}/fd/{n}") for n in os.listdir(f"/proc/{pid}/fd")]
        self.assertNotIn(leak, held)

    def test_a_tenant_s_timeout_ceiling_bounds_the_whole_session(self):
        tenants = self.path("tenants")
        os.mkdir(tenants)
        with open(os.path.join(tenants, "A.json"), "w") as f:
            json.dump({"id_slot": 1, "separate_ids": "preferred", "limits": {"timeout": "20s", "output_limit": "1M"}}, f)
        env = dict(os.environ, SBX_TENANTS_DIR=tenants)
        r = sbx(["session", "start", "--tenant", "A", "--max", "5m"], env=env, timeout=60)
        self.assertEqual(r.rc, 125, r.describe())
        self.assertIn("passes tenant 'A''s timeout ceiling", r.err)
        r = sbx(["session", "start", "--tenant", "A", "--max", "15s", "--json"], env=env, timeout=60)
        self.assertEqual(r.rc, 0, r.describe())
        info = json.loads(r.out)
        try:
            store = os.path.join(self.state, "tenants", "A")
            r = sbx(["session", "exec", "--tenant", "A", info["session"], "--timeout", "30s", "--", "true"], env=env)
            self.assertEqual(r.rc, 125, "a call may not raise its timeout past the tenant's\n" + r.describe())
        finally:
            sbx(["session", "stop", "--tenant", "A", info["session"]], env=env, timeout=60)
        recs = [l["record"] for l in ledger_lines(store) if l["record"].get("run_id") == info["run_id"]]
        self.assertEqual(len(recs), 1)
        limits = recs[0]["invocation"]["spec"]["limits"]
        self.assertLessEqual(limits["timeout_ms"], 20000)
        self.assertLessEqual(limits["output_limit_bytes"], 1 << 20)


class FakeServer:
    """A listener at PATH that answers each connection with `answer` frames (once it read a
    request) and keeps what it was sent: another user's server, or one that lies."""

    def __init__(self, path, answers, uid=None):
        import threading
        self.got = b""
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        if uid is not None:
            # SO_PEERCRED is the listener's credentials at listen(): a child that listens as `uid`.
            # The parent returns once it listens (a connect before that was refused: seen in CI).
            listening_r, listening_w = os.pipe()
            self.pid = os.fork()
            if self.pid == 0:
                try:
                    os.close(listening_r)
                    os.setgid(uid)
                    os.setuid(uid)
                    self.sock.listen(8)
                    os.close(listening_w)
                    self.serve(answers)
                finally:
                    os._exit(0)
            os.close(listening_w)
            os.read(listening_r, 1)  # EOF: the child listens (or died)
            os.close(listening_r)
            self.sock.close()
            return
        self.pid = None
        self.sock.listen(8)
        self.thread = threading.Thread(target=self.serve, args=(answers,), daemon=True)
        self.thread.start()

    def serve(self, answers):
        self.sock.settimeout(scaled(30))
        try:
            while True:
                c, _ = self.sock.accept()
                c.settimeout(scaled(5))
                try:
                    data = c.recv(65536)
                    self.got += data
                    if data:
                        c.sendall(b"".join(frame(a) for a in answers))
                        self.got += c.recv(65536)
                except OSError:
                    pass
                c.close()
        except OSError:
            pass

    def close(self):
        if self.pid:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        else:
            self.sock.close()


class HostileStore(SessionCase):
    """What is read back from a store is hostile: another user's store or socket, a FIFO, a
    symlink or a file of the wrong shape planted there is refused or skipped, in one line, and
    never followed, waited on or trusted."""

    ID = "0123456789abcdef0123456789abcdef"

    def setUp(self):
        super().setUp()
        # A store of its own: what each test plants stays out of the others'.
        self.saved_state = os.environ["SBX_STATE_DIR"]
        self.state = self.path("state")
        os.mkdir(self.state, 0o700)
        os.environ["SBX_STATE_DIR"] = self.state

    def tearDown(self):
        super().tearDown()
        os.environ["SBX_STATE_DIR"] = self.saved_state

    def plant_session(self, state, sid=None, meta=None):
        d = os.path.join(state, "sessions", sid or self.ID)
        os.makedirs(os.path.join(state, "sessions", "ended"), exist_ok=True)
        os.mkdir(d, 0o700)
        with open(os.path.join(d, "session.json"), "w") as f:
            json.dump(meta or {"id": sid or self.ID, "started_at": "2026-01-01T00:00:00Z", "calls": 0}, f)
        return d

    def test_another_user_s_store_is_refused_and_nothing_is_sent_there(self):
        shared = self.path("shared")
        os.mkdir(shared, 0o755)
        d = self.plant_session(shared)
        done = {"event": "done", "result": {"status": "ok", "exit_code": 0}, "session": self.ID}
        fake = FakeServer(os.path.join(d, "ctl.sock"), [done, {"event": "stopped", "calls": 1}])
        # Root: the store is another user's; rootless: others may write it (the same hole).
        if ROOT:
            os.chown(shared, 65534, 65534)
        else:
            os.chmod(shared, 0o777)
        env = dict(os.environ, SBX_STATE_DIR=shared, SECRET="s3cret-value")
        try:
            for args in (["exec", self.ID, "--", "sh", "-c", "echo $SECRET"], ["stop", self.ID], ["ls", "--all"],
                         ["show", self.ID]):
                r = sbx(["session"] + args, env=env)
                self.assertEqual(r.rc, 125, f"{args}: {r.describe()}")
                self.assertIn("belongs to uid 65534" if ROOT else "world-writable", r.err, args)
                self.assertEqual(len(r.err.splitlines()), 1, r.describe())
            r = sbx(["session", "start"], env=env, timeout=60)
            self.assertEqual(r.rc, 125, r.describe())
        finally:
            fake.close()
        self.assertEqual(fake.got, b"", "a command went to the store's foreign server")

    def test_a_socket_another_user_listens_on_gets_nothing(self):
        if not ROOT:
            self.skipTest("needs a listener of another uid (root mode)")
        d = self.plant_session(self.state)
        done = {"event": "done", "result": {"status": "ok", "exit_code": 0}}
        fake = FakeServer(os.path.join(d, "ctl.sock"), [done, {"event": "stopped", "calls": 1}], uid=65534)
        try:
            r = sbx(["session", "exec", self.ID, "--", "echo", "s3cret-value"])
            self.assertEqual(r.rc, 125, r.describe())
            self.assertIn("served by uid 65534", r.err)
            self.assertEqual(len(r.err.splitlines()), 1, r.describe())
            r = sbx(["session", "stop", self.ID])
            self.assertEqual(r.rc, 125, r.describe())
            self.assertIn("served by uid 65534", r.err)
        finally:
            fake.close()

    def test_a_fifo_for_a_session_file_never_blocks(self):
        d = self.plant_session(self.state)
        os.unlink(os.path.join(d, "session.json"))
        os.mkfifo(os.path.join(d, "session.json"))
        tomb = os.path.join(self.state, "sessions", "ended", "1" * 32 + ".json")
        os.mkfifo(tomb)
        r = sbx(["session", "ls", "--all"], timeout=10)
        self.assertEqual(r.rc, 0, r.describe())
        self.assertIn("not a regular file", r.err)
        r = sbx(["session", "show", self.ID], timeout=10)
        self.assertEqual(r.rc, 125, r.describe())
        self.assertIn("session.json: a fifo, not a regular file", r.err)
        r = sbx(["session", "show", "1" * 32], timeout=10)
        self.assertEqual(r.rc, 125, r.describe())
        self.assertIn("not a regular file", r.err)
        info = self.start()  # its count of running sessions reads them all
        self.assertEqual(sbx(["session", "stop", info["session"]], timeout=60).rc, 0)
        self.started.remove(info["session"])

    def test_symlinks_in_the_store_are_never_followed_to_delete(self):
        victim = self.path("victim")
        os.mkdir(victim)
        for name in ("session.json", "keep"):
            with open(os.path.join(victim, name), "w") as f:
                json.dump({"id": self.ID, "started_at": "x"}, f)
        os.makedirs(os.path.join(self.state, "sessions", "ended"), exist_ok=True)
        os.symlink(victim, os.path.join(self.state, "sessions", self.ID))
        r = sbx(["session", "ls", "--all"])
        self.assertEqual(sorted(os.listdir(victim)), ["keep", "session.json"], "files behind a symlink were removed")
        self.assertEqual(r.rc, 0, r.describe())
        self.assertIn("symlink", r.err)
        r = sbx(["session", "show", self.ID])
        self.assertEqual(r.rc, 125, r.describe())
        self.assertEqual(sorted(os.listdir(victim)), ["keep", "session.json"])
        os.unlink(os.path.join(self.state, "sessions", self.ID))
        # ended/ a symlink to a directory of more files than a store keeps tombstones: a stale
        # session's burial would prune them.
        many = self.path("many")
        os.mkdir(many)
        for i in range(1030):
            open(os.path.join(many, "%032x.json" % i), "w").close()
        ended = os.path.join(self.state, "sessions", "ended")
        os.rmdir(ended)
        os.symlink(many, ended)
        self.plant_session(self.state, "f" * 32)
        r = sbx(["session", "ls", "--all"])
        self.assertEqual(r.rc, 0, r.describe())
        self.assertEqual(len(os.listdir(many)), 1030, "files behind a symlinked ended/ were removed")
        r = sbx(["session", "start"], timeout=60)
        self.assertEqual(r.rc, 125, r.describe())
        self.assertIn("ended is a symlink", r.err)
        self.assertEqual(len(os.listdir(many)), 1030)

    def test_wrong_typed_files_and_answers_are_skipped_or_refused_never_an_abort(self):
        os.makedirs(os.path.join(self.state, "sessions", "ended"), exist_ok=True)
        bad = os.path.join(self.state, "sessions", "ended", "2" * 32 + ".json")
        with open(bad, "w") as f:
            json.dump({"id": 5, "started_at": "x"}, f)
        odd = os.path.join(self.state, "sessions", "ended", "3" * 32 + ".json")
        with open(odd, "w") as f:
            json.dump({"id": "3" * 32, "started_at": 7, "calls": "x", "profile": [], "ended_by": {}}, f)
        for _ in range(2):
            r = sbx(["session", "ls", "--all"])
            self.assertEqual(r.rc, 0, r.describe())
            self.assertIn("3" * 32, r.out)
            self.assertIn("2" * 32, r.err)
        r = sbx(["session", "show", "3" * 32])
        self.assertEqual(r.rc, 0, r.describe())
        # A server of this user's that answers with the wrong types.
        d = self.plant_session(self.state)
        answers = [{"event": "done", "result": "x"}]
        for result in ({"status": 5, "exit_code": "3", "error": 1}, {"status": "ok", "exit_code": "3"},
                       {"status": "error", "error": "x"}, {"status": "killed", "signal": "9"}):
            answers.append({"event": "done", "result": result, "interpreter": 3, "timeout_ms": "x"})
        for a in answers:
            sock = os.path.join(d, "ctl.sock")
            fake = FakeServer(sock, [a, {"event": "stopped", "calls": "x", "run_id": 4}])
            try:
                r = sbx(["session", "exec", self.ID, "--", "true"], timeout=20)
                self.assertIn(r.rc, (1, 125), f"{a}: {r.describe()}")
                r = sbx(["session", "stop", self.ID], timeout=20)
                self.assertIn(r.rc, (0, 125), f"{a}: {r.describe()}")
            finally:
                fake.close()
                os.unlink(sock)

    def test_a_killed_server_s_session_record_and_tombstone_agree(self):
        info = self.start()
        sid = info["session"]
        self.assertEqual(self.exec(sid, "--", "true").rc, 0)
        # A FIFO where the server's end.json would be: the runner must not wait on it.
        os.mkfifo(os.path.join(self.session_dir(sid), "end.json"))
        pid = json.loads(sbx(["session", "show", sid]).out)["server_pid"]
        os.kill(pid, signal.SIGKILL)
        self.started.remove(sid)
        ok = wait_for(lambda: any(r["run_id"] == info["run_id"] for r in self.records("sbx.trace/v1")), scaled(30))
        self.assertTrue(ok, "the session run was not recorded")
        end = self.end_record(info)
        self.assertEqual(end["session"]["ended_by"], "server_gone")
        self.assertEqual(end["session"]["calls"], 1)
        meta = json.loads(sbx(["session", "show", sid]).out)
        self.assertEqual(meta["ended_by"], "server_gone")
