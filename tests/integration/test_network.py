"""Network egress through sbx's filtering proxy.

Every server here listens on the host's loopback (127.0.0.1 or ::1), inside this test process;
nothing talks to any other address. Inside the sandbox "127.0.0.1" is the sandbox's *own*
loopback, so a program reaches the host's 127.0.0.1:PORT only through the proxy, which runs in
the supervisor outside the sandbox: the tests allow `127.0.0.1:PORT` and clear NO_PROXY (which
by default keeps the sandbox's own loopback direct).
"""
import http.server
import json
import os
import socket
import socketserver
import subprocess
import threading
import time
import unittest

from sbxtest import MODE, SBX, Result, SbxTestCase, note, sbx

PY = "/usr/bin/python3"
CURL = "/usr/bin/curl"
PROXY_ENV = ["--env", "NO_PROXY=", "--env", "no_proxy="]
CHUNK = b"x" * (1 << 20)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        self.server.hits.append(self.path)
        if self.path.startswith("/bytes/"):
            n = int(self.path.split("/")[2])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            left = n
            try:
                while left > 0:
                    k = min(left, len(CHUNK))
                    self.wfile.write(CHUNK[:k])
                    left -= k
            except OSError:
                pass
            return
        body = f"hello from {self.server.tag} path={self.path} host={self.headers.get('Host')}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True

    def __init__(self, family, tag):
        self.address_family = family
        self.tag = tag
        self.hits = []
        super().__init__(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0), Handler)


def start_server(family=socket.AF_INET, tag="host"):
    s = Server(family, tag)
    threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return s


class Network(SbxTestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = start_server(tag="allowed")
        cls.port = cls.srv.server_address[1]
        cls.other = start_server(tag="other")
        cls.other_port = cls.other.server_address[1]

    @classmethod
    def tearDownClass(cls):
        for s in (cls.srv, cls.other):
            s.shutdown()
            s.server_close()

    def allow(self, *rules):
        opts = list(PROXY_ENV)
        for r in rules:
            opts += ["--allow-host", r]
        return opts

    def violations(self, r):
        return [v for v in self.need_trace(r)["violations"] if v.get("kind") == "network"]

    # -- allowed -----------------------------------------------------------------------------
    def test_curl_through_the_proxy(self):
        url = f"http://127.0.0.1:{self.port}/curl"
        r = self.run_sbx([CURL, "-sS", "--max-time", "10", url], self.allow(f"127.0.0.1:{self.port}"))
        self.assertExit(r, 0)
        self.assertIn("hello from allowed path=/curl", r.out, r.describe())
        note(f"allowed: curl {url} -> {r.out.strip()!r}")
        t = self.need_trace(r)
        net = t["enforcement"]["network"]
        self.assertEqual(net["mode"], "proxy")
        self.assertEqual(net["allow"], [f"127.0.0.1:{self.port}"])
        hosts = {h["host"]: h for h in t["usage"]["network"]["hosts"]}
        self.assertEqual(hosts[f"127.0.0.1:{self.port}"]["connections"], 1, t["usage"]["network"])
        self.assertGreater(hosts[f"127.0.0.1:{self.port}"]["bytes_in"], 0)
        self.assertGreater(hosts[f"127.0.0.1:{self.port}"]["bytes_out"], 0)
        self.assertEqual(self.violations(r), [])

    def test_exec_allow_host_reaches_the_proxy(self):
        """`sbx exec --allow-host` (issue 32): the operator's rule reaches exec's proxy as it does
        `sbx run`'s (the same parser); without it an exec request has no network at all."""
        code = f"NO_PROXY= no_proxy= {CURL} -sS --max-time 10 http://127.0.0.1:{self.port}/exec"
        req = json.dumps({"language": "sh", "code": code}).encode()
        tf = os.path.join(self.tmp, "exec-trace.json")
        r = sbx(["exec", "--allow-host", f"127.0.0.1:{self.port}", "--trace-file", tf], input=req, timeout=60)
        self.assertExit(r, 0)
        resp = json.loads(r.out)
        self.assertEqual(resp["status"], "ok", resp)
        self.assertIn("hello from allowed path=/exec", resp["stdout"])
        with open(tf) as f:
            net = json.load(f)["enforcement"]["network"]
        self.assertEqual((net["mode"], net["allow"]), ("proxy", [f"127.0.0.1:{self.port}"]))
        hits = len(self.srv.hits)
        r = sbx(["exec"], input=req, timeout=60)
        self.assertExit(r, 0)
        self.assertNotEqual(json.loads(r.out)["status"], "ok", "no --allow-host: no network")
        self.assertEqual(len(self.srv.hits), hits)
        r = sbx(["exec", "--allow-host", "localhost:8080"], input=req)
        self.assertExit(r, 125)
        self.assertIn("can never allow anything", json.loads(r.out)["error"]["message"])

    def test_python_urllib_through_the_proxy_variables(self):
        code = ("import os, urllib.request; print(os.environ['http_proxy']);"
                f"print(urllib.request.urlopen('http://127.0.0.1:{self.port}/urllib', timeout=10).read().decode())")
        r = self.run_sbx([PY, "-c", code], self.allow(f"127.0.0.1:{self.port}"))
        self.assertExit(r, 0)
        self.assertIn("http://127.0.0.1:3128", r.out)
        self.assertIn("hello from allowed path=/urllib", r.out, r.describe())

    def test_host_header_is_the_allowed_authority(self):
        # A different Host header must not reach another virtual host behind an allowed address.
        r = self.run_sbx([CURL, "-sS", "--max-time", "10", "-H", "Host: evil.example", f"http://127.0.0.1:{self.port}/vh"],
                         self.allow(f"127.0.0.1:{self.port}"))
        self.assertExit(r, 0)
        self.assertIn(f"host=127.0.0.1:{self.port}", r.out, r.describe())

    def test_connect_tunnel(self):
        # What HTTPS clients do: CONNECT, then their own bytes through the tunnel.
        url = f"http://127.0.0.1:{self.port}/tunnel"
        r = self.run_sbx([CURL, "-sS", "--max-time", "10", "--proxytunnel", url], self.allow(f"127.0.0.1:{self.port}"))
        self.assertExit(r, 0)
        self.assertIn("hello from allowed path=/tunnel", r.out, r.describe())

    def test_proxy_variables_are_set_and_default_no_proxy_keeps_loopback_direct(self):
        r = self.run_sbx(["sh", "-c", "echo $HTTP_PROXY $HTTPS_PROXY $http_proxy $https_proxy $NO_PROXY"],
                         ["--allow-host", "example.invalid"])
        self.assertExit(r, 0)
        self.assertEqual(r.out.split(), ["http://127.0.0.1:3128"] * 4 + ["localhost,127.0.0.1,::1"], r.describe())
        r = self.run_sbx(["sh", "-c", "echo ${HTTP_PROXY:-unset}"])
        self.assertEqual(r.out.strip(), "unset", "no proxy variables without --allow-host")

    # -- denied ------------------------------------------------------------------------------
    def test_text_record_shows_usage_and_why_connections_failed(self):
        """trace show --format text: the network mode, connections and bytes per host, and why a
        connection to an allowed host failed (the record keeps the reason as last_failure)."""
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        dead_port = closed.getsockname()[1]
        closed.close()  # bound then closed: nothing listens there
        script = (f"{CURL} -sS --max-time 10 -o /dev/null http://127.0.0.1:{self.port}/a; "
                  f"{CURL} -sS --max-time 10 -o /dev/null http://127.0.0.1:{dead_port}/b; "
                  f"{CURL} -sS --max-time 10 -o /dev/null http://127.0.0.1:{self.other_port}/c; true")
        state = self.path("state")
        r = sbx(["--state-dir", state, "run"] + self.allow(f"127.0.0.1:{self.port}", f"127.0.0.1:{dead_port}")
                + ["--", "sh", "-c", script], timeout=60)
        self.assertExit(r, 0)
        r = sbx(["--state-dir", state, "trace", "show", "last", "--format", "text"])
        self.assertExit(r, 0)
        note(r.out)
        lines = r.out.splitlines()
        net = [l for l in lines if l.startswith("network ")]
        self.assertEqual(len(net), 1, r.out)
        self.assertIn(f"proxy (allow 127.0.0.1:{self.port}, 127.0.0.1:{dead_port})", net[0])
        self.assertTrue(any(f"127.0.0.1:{self.port}: 1 connection(s)" in l and "bytes in" in l for l in lines), r.out)
        dead = [l for l in lines if f"127.0.0.1:{dead_port}: " in l]
        self.assertEqual(len(dead), 1, r.out)
        self.assertIn("1 failed", dead[0])
        self.assertIn(f"last failure: cannot connect to 127.0.0.1:{dead_port}: Connection refused", dead[0])
        denied = [l for l in lines if f"denied 127.0.0.1:{self.other_port} at " in l]
        self.assertEqual(len(denied), 1, "the denial is listed with its reason: " + r.out)
        self.assertIn("is not allowed", denied[0])

    def test_denied_host_gets_403_and_is_recorded(self):
        before = len(self.other.hits)
        url = f"http://127.0.0.1:{self.other_port}/secret"
        r = self.run_sbx(["sh", "-c", f"{CURL} -sS --max-time 10 -o /tmp/body -w '%{{http_code}}\\n' {url}; cat /tmp/body >&2"],
                         self.allow(f"[::1]:{self.port}", f"localhost:{self.port}"))
        self.assertEqual(r.out.strip(), "403", r.describe())
        self.assertIn("not in the allowlist", r.err)
        self.assertEqual(len(self.other.hits), before, "the denied server must not have been contacted")
        v = self.violations(r)
        self.assertEqual(len(v), 1, v)
        self.assertEqual((v[0]["host"], v[0]["port"]), ("127.0.0.1", self.other_port))
        self.assertIn("not in the allowlist", v[0]["reason"])
        self.assertGreaterEqual(v[0]["time_ms"], 0)
        note(f"denied: curl {url} -> HTTP {r.out.strip()}; trace violation: {json.dumps(v[0])}")

    def test_a_flood_of_distinct_denied_hosts_keeps_the_usage_table_bounded(self):
        # Each distinct destination used to get its own usage entry, in memory and in the record
        # (78 MB of record). Loopback only: the proxy is the sandbox's 127.0.0.1:3128, and denied
        # names are never looked up.
        n = 2500
        flood = ("import socket, sys\nn = int(sys.argv[1]); ok = 0\n"
                 "for i in range(n):\n"
                 "    s = socket.create_connection(('127.0.0.1', 3128))\n"
                 "    s.sendall(b'CONNECT h%d.flood.invalid:443 HTTP/1.1\\r\\nHost: h%d.flood.invalid:443\\r\\n\\r\\n' % (i, i))\n"
                 "    ok += s.recv(64).startswith(b'HTTP/1.1 403')\n"
                 "    s.close()\n"
                 "print(ok)\n")
        r = self.run_sbx([PY, "-c", flood, str(n)], self.allow(f"127.0.0.1:{self.port}"), timeout=180)
        self.assertExit(r, 0)
        self.assertEqual(r.out.strip(), str(n), r.describe())
        net = self.need_trace(r)["usage"]["network"]
        hs = net["hosts_summary"]
        self.assertEqual(len(net["hosts"]), hs["listed"])
        self.assertEqual(hs["listed"], hs["listed_cap"], json.dumps(hs))
        self.assertLess(hs["listed_cap"], n)
        self.assertTrue(hs["truncated"])
        self.assertEqual(hs["unlisted_requests"], n - hs["listed"])
        self.assertEqual(hs["unlisted_denied"], n - hs["listed"])
        self.assertEqual(sum(h["denied"] for h in net["hosts"]) + hs["unlisted_denied"], n)
        self.assertEqual(net["denied"], n)
        note(f"{n} distinct denied hosts: usage.network.hosts lists {hs['listed']}, "
             f"{hs['unlisted_requests']} requests added up in hosts_summary")

    def test_denied_connect_gets_403(self):
        r = self.run_sbx([CURL, "-sS", "--max-time", "10", "--proxytunnel", f"http://127.0.0.1:{self.other_port}/"],
                         self.allow(f"127.0.0.1:{self.port}"))
        self.assertNotEqual(r.rc, 0)
        self.assertIn("403", r.err, r.describe())
        self.assertEqual(len(self.violations(r)), 1)

    def test_no_allowlist_means_no_proxy_and_no_network(self):
        r = self.run_sbx([CURL, "-sS", "--max-time", "5", "-x", "http://127.0.0.1:3128", f"http://127.0.0.1:{self.port}/"])
        self.assertNotEqual(r.rc, 0, r.describe())
        self.assertEqual(self.need_trace(r)["enforcement"]["network"]["mode"], "none")

    def test_direct_connection_bypassing_the_proxy_fails(self):
        before = len(self.srv.hits)
        code = ("import socket\n"
                "for fam, addr in ((socket.AF_INET, ('127.0.0.1', %d)), (socket.AF_INET6, ('::1', %d))):\n"
                "    s = socket.socket(fam)\n"
                "    s.settimeout(3)\n"
                "    try:\n"
                "        s.connect(addr); print('CONNECTED', addr)\n"
                "    except OSError as e:\n"
                "        print('refused', addr, e.errno)\n") % (self.port, self.port)
        r = self.run_sbx([PY, "-c", code], self.allow(f"127.0.0.1:{self.port}"))
        self.assertExit(r, 0)
        self.assertNotIn("CONNECTED", r.out, r.describe())
        self.assertEqual(r.out.count("refused"), 2, r.describe())
        # Nor does curl when told to skip the proxy.
        r = self.run_sbx([CURL, "-sS", "--max-time", "5", "--noproxy", "*", f"http://127.0.0.1:{self.port}/direct"],
                         self.allow(f"127.0.0.1:{self.port}"))
        self.assertNotEqual(r.rc, 0, r.describe())
        self.assertEqual(len(self.srv.hits), before)

    # -- rules -------------------------------------------------------------------------------
    def fetch_codes(self, urls, rules, extra=()):
        script = "; ".join(f"{CURL} -s -g --max-time 10 -o /dev/null -w '%{{http_code}}\\n' '{u}'" for u in urls)
        r = self.run_sbx(["sh", "-c", script], self.allow(*rules) + list(extra))
        self.assertExit(r, 0)
        return r, r.out.split()

    def test_port_rules(self):
        p, o = self.port, self.other_port
        r, codes = self.fetch_codes([f"http://127.0.0.1:{p}/", f"http://127.0.0.1:{o}/"], [f"127.0.0.1:{p}"])
        self.assertEqual(codes, ["200", "403"], r.describe())
        self.assertIn(f"port {o} is not allowed for 127.0.0.1", self.violations(r)[0]["reason"])
        # Without a port a rule allows 80 and 443 only.
        r, codes = self.fetch_codes([f"http://127.0.0.1:{p}/"], ["127.0.0.1"])
        self.assertEqual(codes, ["403"])
        self.assertIn("allows 80, 443", self.violations(r)[0]["reason"])
        r, codes = self.fetch_codes([f"http://127.0.0.1:{p}/", f"http://127.0.0.1:{o}/"], ["127.0.0.1:*"])
        self.assertEqual(codes, ["200", "200"])

    def test_names_wildcards_literals_and_cidrs(self):
        p = self.port
        # An exact name is resolved by the proxy, outside (localhost -> the host's loopback), and
        # a name rule alone never reaches loopback: that takes the address rule as well, so the
        # name rule alone is refused before the run, with the rule to add.
        r = self.run_sbx(["true"], self.allow(f"localhost:{p}"), trace=False)
        self.assertExit(r, 125)
        self.assertIn(f"can never allow anything", r.err)
        self.assertIn(f"--allow-host 127.0.0.1:{p}", r.err)
        r, codes = self.fetch_codes([f"http://localhost:{p}/"], [f"localhost:{p}", f"127.0.0.1:{p}"])
        self.assertEqual(codes, ["200"], r.describe())
        # *.localhost covers names below it, not localhost itself. (a.localhost need not resolve:
        # 502 from the resolver still shows the policy let it through.)
        r, codes = self.fetch_codes([f"http://localhost:{p}/", f"http://a.localhost:{p}/"],
                                    [f"*.localhost:{p}", f"127.0.0.1:{p}"])
        self.assertEqual(codes[0], "403")
        self.assertIn(codes[1], ("200", "502"))
        self.assertEqual([v["host"] for v in self.violations(r)], ["localhost"])
        # CIDR and literal: allowed; a literal does not allow its names.
        r, codes = self.fetch_codes([f"http://127.0.0.1:{p}/", f"http://localhost:{p}/"], [f"127.0.0.0/8:{p}"])
        self.assertEqual(codes, ["200", "403"])

    def test_ipv6_literal(self):
        s6 = start_server(socket.AF_INET6, tag="v6")
        try:
            p6 = s6.server_address[1]
            r, codes = self.fetch_codes([f"http://[::1]:{p6}/v6", f"http://127.0.0.1:{p6}/"], [f"[::1]:{p6}"])
            self.assertEqual(codes, ["200", "403"], r.describe())
            self.assertEqual(s6.hits, ["/v6"])
            hosts = [h["host"] for h in self.need_trace(r)["usage"]["network"]["hosts"]]
            self.assertIn(f"[::1]:{p6}", hosts)
        finally:
            s6.shutdown()
            s6.server_close()

    def test_bad_rule_is_a_usage_error(self):
        r = sbx(["run", "--allow-host", "bad host!", "--", "true"])
        self.assertExit(r, 125)
        self.assertOneSbxLine(r)
        r = sbx(["run", "--dry-run", "--allow-host", "*.example.com", "--allow-host", "[::1]:8080", "--", "true"])
        self.assertExit(r, 0)
        spec = json.loads(r.out)
        self.assertEqual(spec["network"]["allow"], ["*.example.com", "[::1]:8080"])
        self.assertEqual(spec["network"]["mode"], "proxy")

    # -- behaviour under load ------------------------------------------------------------------
    def test_slow_clients_do_not_block_others(self):
        code = f"""
import socket, time, urllib.request
# One client sends half a request and stops; another opens a big download and never reads it.
a = socket.create_connection(('127.0.0.1', 3128)); a.sendall(b'GET http://127.0.0.1:{self.port}/ HTT')
b = socket.create_connection(('127.0.0.1', 3128))
b.sendall(b'GET http://127.0.0.1:{self.port}/bytes/50000000 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')
time.sleep(0.3)
t = time.monotonic()
for i in range(5):
    assert b'hello' in urllib.request.urlopen('http://127.0.0.1:{self.port}/fast', timeout=5).read()
print('fast ms', int((time.monotonic() - t) * 1000))
"""
        r = self.run_sbx([PY, "-c", code], self.allow(f"127.0.0.1:{self.port}"))
        self.assertExit(r, 0)
        ms = int(r.out.split()[-1])
        self.assertLess(ms, 3000, r.describe())
        note(f"5 requests while two slow clients hold connections: {ms} ms")

    def test_fifty_concurrent_connections(self):
        code = f"""
import threading, urllib.request
threading.stack_size(256 * 1024)  # the default 8 MiB stacks x 50 would hit the profile's RLIMIT_AS fallback
ok = []
def get(i):
    d = urllib.request.urlopen('http://127.0.0.1:{self.port}/c%d' % i, timeout=20).read()
    if b'path=/c%d' % i in d: ok.append(i)
ts = [threading.Thread(target=get, args=(i,)) for i in range(50)]
[t.start() for t in ts]; [t.join() for t in ts]
print(len(ok))
"""
        # 50 client threads: more than the default profile's process limit.
        r = self.run_sbx([PY, "-c", code], self.allow(f"127.0.0.1:{self.port}") + ["--pids", "256"], timeout=60)
        self.assertExit(r, 0)
        self.assertEqual(r.out.strip(), "50", r.describe())
        u = self.need_trace(r)["usage"]["network"]
        self.assertEqual(u["connections"], 50)
        note(f"50 concurrent: all ok, peak concurrent proxied connections {u['peak_concurrent']}")

    def test_throughput_100mb_proxy_vs_direct(self):
        n = 100 * 1000 * 1000
        url = f"http://127.0.0.1:{self.port}/bytes/{n}"
        fmt = "%{size_download} %{time_total}\n"

        def best(times):
            return min(times)

        # Alternating, best of 5 each: this measures the proxy, not the neighbours on a shared host.
        direct, proxied = [], []
        for _ in range(5):
            d = subprocess.run([CURL, "-s", "--noproxy", "*", "-o", "/dev/null", "-w", fmt, url],
                               capture_output=True, timeout=60)
            size, secs = d.stdout.split()
            self.assertEqual(int(float(size)), n)
            direct.append(float(secs))
            r = self.run_sbx([CURL, "-s", "-o", "/dev/null", "-w", fmt, url], self.allow(f"127.0.0.1:{self.port}"),
                             timeout=90)
            self.assertExit(r, 0)
            size, secs = r.out.split()
            self.assertEqual(int(float(size)), n, r.describe())
            proxied.append(float(secs))
        ratio = best(direct) / best(proxied)
        note(f"100 MB: direct loopback {n / best(direct) / 1e6:.0f} MB/s, through the proxy "
             f"{n / best(proxied) / 1e6:.0f} MB/s, throughput ratio {ratio:.2f} (target >= 0.8)")
        # On a shared 2-core host under load the proxy's extra TCP hop competes for CPU and the ratio
        # swings between 0.4 and 0.9 from run to run: fail only on a gross regression (a stalled or
        # byte-at-a-time relay). SBX_NET_MIN_RATIO raises the bar on a quiet machine (e.g. 0.8).
        self.assertGreater(ratio, float(os.environ.get("SBX_NET_MIN_RATIO", "0.15")))

    # -- limits and lifetime -----------------------------------------------------------------
    def profile(self, network):
        path = self.path("net-profile.json")
        with open(path, "w") as f:
            json.dump({"network": network, "limits": {"timeout_ms": "30s"}}, f)
        return path

    def test_idle_connections_are_closed(self):
        # A silent upstream: accepts, never answers.
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        sport = silent.getsockname()[1]
        prof = self.profile({"allow": [f"127.0.0.1:{sport}"], "idle_timeout_ms": "1s"})
        code = f"""
import socket, time
# 1. a request that never completes: 408 after the idle timeout
a = socket.create_connection(('127.0.0.1', 3128)); a.sendall(b'GET http://127.0.0.1:{sport}/ HTT')
t = time.monotonic(); data = a.recv(4096)
print('partial', data.split(b' ')[1].decode(), round(time.monotonic() - t, 1))
# 2. a relay where nothing moves: closed after the idle timeout
b = socket.create_connection(('127.0.0.1', 3128)); b.sendall(b'CONNECT 127.0.0.1:{sport} HTTP/1.1\\r\\n\\r\\n')
assert b'200' in b.recv(4096)
t = time.monotonic(); rest = b.recv(4096)
print('silent', len(rest), round(time.monotonic() - t, 1))
"""
        try:
            r = self.run_sbx([PY, "-c", code], ["--profile", prof] + PROXY_ENV, timeout=30)
        finally:
            silent.close()
        self.assertExit(r, 0)
        lines = dict(l.split(" ", 1) for l in r.out.strip().splitlines())
        code408, waited = lines["partial"].split()
        self.assertEqual(code408, "408")
        self.assertTrue(0.8 <= float(waited) <= 5, r.out)
        n, waited = lines["silent"].split()
        self.assertEqual(n, "0", "the silent relay was closed")
        self.assertTrue(0.8 <= float(waited) <= 5, r.out)
        u = self.need_trace(r)["usage"]["network"]
        self.assertEqual(u["idle_closed"], 2)
        self.assertEqual(self.need_trace(r)["enforcement"]["network"]["proxy"]["idle_timeout_ms"], 1000)
        note(f"idle timeout 1 s: {r.out.strip()}")

    def test_max_connections(self):
        prof = self.profile({"allow": [f"127.0.0.1:{self.port}"], "max_connections": 2})
        code = """
import socket, time
held = [socket.create_connection(('127.0.0.1', 3128)) for _ in range(2)]
time.sleep(0.3)
c = socket.create_connection(('127.0.0.1', 3128))
c.settimeout(5)
print(c.recv(200).split(b'\\r\\n')[0].decode())
"""
        r = self.run_sbx([PY, "-c", code], ["--profile", prof] + PROXY_ENV)
        self.assertExit(r, 0)
        self.assertEqual(r.out.strip(), "HTTP/1.1 503 Service Unavailable", r.describe())
        self.assertIn("max_connections", self.violations(r)[0]["reason"])

    def test_max_bytes(self):
        prof = self.profile({"allow": [f"127.0.0.1:{self.port}"], "max_bytes": "1M"})
        r = self.run_sbx([CURL, "-s", "-o", "/dev/null", "-w", "%{size_download}\n",
                          f"http://127.0.0.1:{self.port}/bytes/5000000"], ["--profile", prof] + PROXY_ENV)
        got = int(float(r.out.split()[0]))
        self.assertLess(got, 1 << 20, r.describe())
        u = self.need_trace(r)["usage"]["network"]
        self.assertTrue(u["byte_budget_spent"])
        self.assertLessEqual(u["bytes_in"] + u["bytes_out"], 1 << 20)
        self.assertIn("byte budget", self.violations(r)[0]["reason"])

    def test_connections_are_closed_when_the_run_ends(self):
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(4)
        lsock.settimeout(20)
        port = lsock.getsockname()[1]
        code = f"""
import socket, subprocess
s = socket.create_connection(('127.0.0.1', 3128))
s.sendall(b'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n')
print(s.recv(100).split(b'\\r\\n')[0].decode(), flush=True)
s.sendall(b'ping')
subprocess.Popen(['sleep', '30'])  # left behind, holding nothing of ours
"""
        result = {}

        def serve():
            c, _ = lsock.accept()
            c.settimeout(20)
            result["first"] = c.recv(4)
            t = time.monotonic()
            result["eof"] = c.recv(10)
            result["eof_at"] = time.monotonic()
            c.close()

        th = threading.Thread(target=serve)
        th.start()
        r = self.run_sbx([PY, "-c", code], self.allow(f"127.0.0.1:{port}"))
        ended = time.monotonic()
        th.join(25)
        lsock.close()
        self.assertExit(r, 0)
        self.assertIn("200", r.out)
        self.assertEqual(result.get("first"), b"ping")
        self.assertEqual(result.get("eof"), b"", "upstream connection closed when the run ended")
        self.assertLess(result["eof_at"] - ended, 2.0)


# Runs a command in a mount namespace (and with --net a network namespace) that this helper
# creates, with files bound over host paths (SRC=DST): the test's own /etc/resolv.conf and
# /etc/hosts, seen by sbx's supervisor and nobody else. Rootless, a user namespace that maps only
# the caller's own uid and gid comes first: the mounts need CAP_SYS_ADMIN, which the creator of a
# user namespace holds in it until its next execve, so they are made here, in this process, before
# the command is executed; the command keeps the caller's uid (sbx stays rootless). With --net,
# lo is brought up and a UDP socket is bound on 127.0.0.1:53 and never read: a name server that
# never answers (its queries queue in the socket instead of getting ICMP port unreachable). The
# helper forks so that the parent can keep that socket open while the command runs.
NS_HELPER = r"""
import ctypes, fcntl, os, socket, struct, sys
CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWUSER = 0x00020000, 0x40000000, 0x10000000
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
libc = ctypes.CDLL(None, use_errno=True)
def check(rc, what):
    if rc != 0:
        e = ctypes.get_errno()
        sys.exit(f"ns helper: {what}: {os.strerror(e)}")
args = sys.argv[1:]
net = args[0] == "--net"
if net:
    args = args[1:]
uid, gid = os.geteuid(), os.getegid()
check(libc.unshare(CLONE_NEWNS | (CLONE_NEWNET if net else 0) | (CLONE_NEWUSER if uid else 0)), "unshare")
if uid:
    open("/proc/self/uid_map", "w").write(f"{uid} {uid} 1")
    open("/proc/self/setgroups", "w").write("deny")
    open("/proc/self/gid_map", "w").write(f"{gid} {gid} 1")
check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
while args[0] != "--":
    src, dst = args.pop(0).split("=", 1)
    check(libc.mount(src.encode(), dst.encode(), None, MS_BIND, None), f"bind {src} over {dst}")
args = args[1:]
silent = None
if net:
    s = socket.socket()
    fcntl.ioctl(s, 0x8914, struct.pack("16sh", b"lo", 1))  # SIOCSIFFLAGS: IFF_UP
    s.close()
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 53))
pid = os.fork()
if pid == 0:
    if silent:
        silent.close()
    os.execvp(args[0], args)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


class Resolution(SbxTestCase):
    """Name resolution in the proxy, against a resolv.conf and /etc/hosts that the test binds over
    the host's in namespaces it creates (NS_HELPER): the host's own files are never touched."""

    def run_in_ns(self, files, sbx_opts, cmd, net=False, timeout=30, beside=None):
        """`beside`: a shell command run in the background in the same namespaces while sbx runs."""
        binds = []
        for dst, text in files.items():
            src = self.path(os.path.basename(dst))
            with open(src, "w") as f:
                f.write(text)
            os.chmod(src, 0o644)
            binds.append(f"{src}={dst}")
        trace = self.path("ns-trace.json")
        argv = [PY, "-c", NS_HELPER] + (["--net"] if net else []) + binds + \
            ["--"] + (["sh", "-c", f"{beside} & b=$!; sleep 0.5; \"$@\"; rc=$?; kill $b; exit $rc", "sh"] if beside else []) + \
            [SBX, "run", "--trace-file", trace] + list(sbx_opts) + PROXY_ENV + ["--"] + list(cmd)
        start = time.monotonic()
        try:
            p = subprocess.run(argv, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            self.fail(f"sbx did not finish within {timeout} s (wall-time limit not held): {e}")
        wall = time.monotonic() - start
        r = Result(argv, p.returncode, p.stdout, p.stderr, wall)
        self.assertNotIn(b"ns helper:", p.stderr, r.describe())
        if os.path.exists(trace):
            with open(trace) as f:
                r.trace = json.load(f)
        return r

    SILENT_DNS = "nameserver 127.0.0.1\noptions timeout:5 attempts:2\n"

    def test_a_resolver_that_never_answers_does_not_stall_the_wall_time_limit(self):
        # Four concurrent requests for allowed names; the name server never answers. The run's
        # wall-time limit is 1 s and must hold (a lookup that blocked the supervisor would hold
        # it for timeout x attempts per name: about 40 s here).
        script = " ".join(f"{CURL} -s -m 60 -o /dev/null http://n{i}.example.com/ &" for i in range(4)) + " wait"
        r = self.run_in_ns({"/etc/resolv.conf": self.SILENT_DNS}, ["--timeout", "1s", "--allow-host", "*.example.com"],
                           ["sh", "-c", script], net=True, timeout=90)
        note(f"4 lookups against a silent name server, --timeout 1s: sbx ended after {r.wall:.2f} s")
        self.assertIsNotNone(r.trace, r.describe())
        self.assertEqual(r.trace["result"]["status"], "timeout", r.describe())
        self.assertLess(r.wall, 4.0, r.describe())

    def test_a_lookup_that_times_out_answers_504_and_is_recorded(self):
        # While the lookup hangs, a request to an allowed literal (a server beside sbx in the
        # test's network namespace) is served at once: the hung lookup holds up nobody else.
        port, log = 18081, self.path("upstream.log")
        beside = f"{PY} -m http.server {port} --bind 127.0.0.1 --directory {self.tmp} >/dev/null 2>{log}"
        prof = self.path("prof.json")
        with open(prof, "w") as f:
            json.dump({"network": {"allow": ["*.example.com", f"127.0.0.1:{port}"], "idle_timeout_ms": "1s"},
                       "limits": {"timeout_ms": "30s"}}, f)
        script = (f"{CURL} -s -m 20 -o /dev/null -w 'slow %{{http_code}} %{{time_total}}\\n' http://slow.example.com/ & "
                  f"sleep 0.2; {CURL} -s -m 20 -o /dev/null -w 'fast %{{http_code}} %{{time_total}}\\n' "
                  f"http://127.0.0.1:{port}/; wait")
        r = self.run_in_ns({"/etc/resolv.conf": self.SILENT_DNS}, ["--profile", prof], ["sh", "-c", script],
                           net=True, timeout=60, beside=beside)
        got = {line.split()[0]: line.split()[1:] for line in r.out.strip().splitlines()}
        note(f"lookup against a silent name server, idle_timeout_ms 1s: {got}")
        self.assertEqual(got["slow"][0], "504", r.describe())
        self.assertLess(float(got["slow"][1]), 4.0, r.describe())
        self.assertEqual(got["fast"][0], "200", r.describe())
        self.assertLess(float(got["fast"][1]), 0.7, "served while the lookup hung\n" + r.describe())
        u = r.trace["usage"]["network"]
        self.assertEqual(u["lookups_timed_out"], 1, u)
        host = {h["host"]: h for h in u["hosts"]}["slow.example.com:80"]
        self.assertEqual((host["failed"], host["lookups_timed_out"]), (1, 1), host)

    def test_names_from_the_hosts_file(self):
        srv = start_server(tag="hosts")
        try:
            port = srv.server_address[1]
            files = {"/etc/hosts": "127.0.0.1 api.hosts-file.test\n",
                     "/etc/resolv.conf": "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"}
            # The explicit address rule: a name rule alone never reaches loopback.
            opts = ["--allow-host", f"api.hosts-file.test:{port}", "--allow-host", f"127.0.0.1:{port}"]
            r = self.run_in_ns(files, opts, [CURL, "-sS", "-m", "10", f"http://api.hosts-file.test:{port}/h"])
        finally:
            srv.shutdown()
            srv.server_close()
        self.assertEqual(r.rc, 0, r.describe())
        self.assertIn(f"hello from hosts path=/h host=api.hosts-file.test:{port}", r.out, r.describe())


class RawUpstream:
    """An upstream that records every byte each connection sent it (for 2 s, or until EOF) and
    answers the first request head with a short 200: what reached it is exactly what the proxy
    passed on, pipelined leftovers included."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.received = []
        self.closed = False
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if self.closed:  # the descriptor number may already belong to another test's server
                c.close()
                return
            threading.Thread(target=self.handle, args=(c,), daemon=True).start()

    def handle(self, c):
        data, answered, end = b"", False, time.monotonic() + 2
        c.settimeout(0.2)
        while time.monotonic() < end:
            try:
                k = c.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                break
            if not k:
                break
            data += k
            if not answered and b"\r\n\r\n" in data:
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                answered = True
        self.received.append(data)
        c.close()

    def close(self):
        # shutdown first: it wakes the accept() above, which would otherwise go on accepting on
        # whatever socket reuses the descriptor number after close().
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


# Each case: raw bytes sent to the proxy (in one or two writes), then what came back within 5 s.
STRICT_CLIENT = r"""
import socket, sys, time
cases = eval(sys.argv[1])
for name, parts in cases:
    s = socket.create_connection(('127.0.0.1', 3128))
    s.settimeout(5)
    t = time.monotonic()
    try:
        for i, part in enumerate(parts):
            if i:
                time.sleep(0.3)
            s.sendall(part)
        resp = b''
        while True:
            k = s.recv(4096)
            if not k:
                break
            resp += k
        head = resp.split(b'\r\n')[0].decode(errors='replace') or 'EOF'
    except socket.timeout:
        head = 'TIMEOUT'
    except OSError as e:
        head = 'ERROR ' + str(e.errno)
    denied = b'X-Sbx-Deny-Reason' in resp if head not in ('TIMEOUT',) else False
    print(name, '|', head, '|', 'proxy' if denied else 'upstream', '|', round(time.monotonic() - t, 1), flush=True)
"""


class Egress(SbxTestCase):
    """The egress rules reach what was meant: not what a name resolves to, not an address spelt
    another way, not a second request hidden in the first."""

    def test_a_name_never_rebinds_to_loopback_or_link_local(self):
        # In a network namespace of the test's own (only lo): the upstream on its loopback is the
        # "internal service"; 169.254.169.254 (cloud metadata) is unreachable there whatever sbx
        # does, so even a broken proxy never touches the host's real one.
        port, log = 18080, self.path("upstream.log")
        beside = f"{PY} -m http.server {port} --bind 127.0.0.1 --directory {self.tmp} >/dev/null 2>{log}"
        files = {"/etc/hosts": "127.0.0.1 loop.rebind.test\n169.254.169.254 meta.rebind.test\n",
                 "/etc/resolv.conf": "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"}
        script = "; ".join(f"{CURL} -s -m 5 -o /dev/null -w '%{{http_code}}\\n' {u}" for u in
                           (f"http://loop.rebind.test:{port}/loop", "http://meta.rebind.test/latest/meta-data/"))
        r = Resolution.run_in_ns(self, files, ["--allow-host", "*.rebind.test:*"], ["sh", "-c", script], net=True, beside=beside)
        hits = open(log).read()
        # The same name with the address allowed explicitly: reached.
        r2 = Resolution.run_in_ns(self, files, ["--allow-host", "*.rebind.test:*", "--allow-host", f"127.0.0.0/8:{port}"],
                            [CURL, "-s", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}", f"http://loop.rebind.test:{port}/explicit"],
                            net=True, beside=beside)
        hits2 = open(log).read()
        note(f"names resolving to internal addresses: HTTP {r.out.split()}; with the address rule: HTTP {r2.out}")
        self.assertEqual(r.out.split(), ["403", "403"], r.describe())
        self.assertNotIn("/loop", hits)
        v = [x for x in r.trace["violations"] if x.get("kind") == "network"]
        self.assertEqual([(x["host"], x.get("address")) for x in v],
                         [("loop.rebind.test", "127.0.0.1"), ("meta.rebind.test", "169.254.169.254")], v)
        self.assertIn("loopback", v[0]["reason"])
        self.assertIn("link-local", v[1]["reason"])
        self.assertIn("/explicit", hits2, r2.describe())

    def test_ipv4_mapped_ipv6_does_not_escape_an_ipv6_rule(self):
        srv = start_server(tag="v4-behind-mapped")
        try:
            port = srv.server_address[1]
            script = "; ".join([
                f"{CURL} -s -g -m 5 -o /dev/null -w '%{{http_code}}\\n' 'http://[::ffff:127.0.0.1]:{port}/mapped'",
                f"{CURL} -s -g -m 5 -o /dev/null -w '%{{http_code}}\\n' 'http://[::ffff:7f00:1]:{port}/hex'",
                f"{CURL} -s -g -m 5 -o /dev/null -w '%{{http_code}}\\n' -p 'http://[::ffff:127.0.0.1]:{port}/tunnel'"])
            r = self.run_sbx(["sh", "-c", script], PROXY_ENV + ["--allow-host", f"[::/0]:{port}"])
            hits = list(srv.hits)
        finally:
            srv.shutdown()
            srv.server_close()
        note(f"[::/0]:{port} against ::ffff:127.0.0.1: HTTP {r.out.split()}; upstream saw {hits}")
        self.assertEqual(hits, [], r.describe())
        self.assertEqual(r.out.split()[:2], ["403", "403"], r.describe())
        v = [x for x in r.trace["violations"] if x.get("kind") == "network"]
        self.assertEqual({x["host"] for x in v}, {"127.0.0.1"}, v)

    def strict_cases(self, cases):
        up = RawUpstream()
        try:
            cases = [(n, [p.replace(b"PORT", str(up.port).encode()) for p in parts]) for n, parts in cases]
            r = self.run_sbx([PY, "-c", STRICT_CLIENT, repr(cases)], PROXY_ENV + ["--allow-host", f"127.0.0.1:{up.port}"],
                             timeout=60)
            time.sleep(0.3)
            received = b"\n".join(up.received)
        finally:
            up.close()
        self.assertExit(r, 0)
        got = {}
        for line in r.out.strip().splitlines():
            name, head, who, secs = [x.strip() for x in line.split("|")]
            got[name] = (head.split(" ")[1] if head.startswith("HTTP/") else head, who, float(secs))
        return r, got, received

    def test_requests_are_parsed_strictly(self):
        base = b"GET http://127.0.0.1:PORT/"
        cases = [
            ("bare-lf", [base + b"lf HTTP/1.1\nHost: x\n\n"]),
            ("no-colon", [base + b"nocolon HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n"]),
            ("ctl-in-header", [base + b"ctl HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n"]),
            ("nul-in-host", [b"CONNECT 127.0.0.1\x00.evil:PORT HTTP/1.1\r\n\r\n"]),
            ("cl-and-te", [b"POST http://127.0.0.1:PORT/clte HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
                           b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"]),
            ("te-plain", [b"POST http://127.0.0.1:PORT/te HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                          b"0\r\n\r\n"]),
            ("ok", [base + b"fine HTTP/1.1\r\nHost: x\r\n\r\n"]),
        ]
        r, got, received = self.strict_cases(cases)
        note("strict parsing: " + "; ".join(f"{n} -> {c} from {w} in {s} s" for n, (c, w, s) in got.items()))
        for name in ("bare-lf", "no-colon", "ctl-in-header", "nul-in-host", "cl-and-te"):
            self.assertEqual(got[name][:2], ("400", "proxy"), f"{name}: {got[name]}\n{r.describe()}")
            self.assertLess(got[name][2], 2.0, f"{name}: answered at once, not after a timeout")
        self.assertEqual(got["te-plain"][:2], ("501", "proxy"), r.describe())
        self.assertEqual(got["ok"][:2], ("200", "upstream"), r.describe())
        for marker in (b"/lf", b"/nocolon", b"/ctl", b"/clte", b"/te "):
            self.assertNotIn(marker, received, f"{marker} reached the upstream: {received!r}")

    def test_a_pipelined_second_request_never_reaches_the_upstream(self):
        first = b"GET http://127.0.0.1:PORT/first HTTP/1.1\r\nHost: x\r\n\r\n"
        second = b"GET /second HTTP/1.1\r\nHost: evil.example\r\n\r\n"
        body = b"POST http://127.0.0.1:PORT/post HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
        cases = [("together", [first + second]), ("later", [first, second]), ("after-body", [body, second])]
        r, got, received = self.strict_cases(cases)
        note("pipelining: " + "; ".join(f"{n} -> {c} from {w}" for n, (c, w, s) in got.items()) +
             f"; upstream received {received!r}")
        self.assertEqual(got["together"][:2], ("400", "proxy"), r.describe())
        self.assertEqual(got["later"][:2], ("200", "upstream"), r.describe())
        self.assertEqual(got["after-body"][:2], ("200", "upstream"), r.describe())
        self.assertIn(b"/first", received)
        self.assertIn(b"hello", received)
        self.assertNotIn(b"evil.example", received, received)
        self.assertNotIn(b"/second", received, received)


UPSTREAM_SERVER = """
import http.server, socketserver, sys
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        body = ('upstream in its own netns: path=%s host=%s\\n' % (self.path, self.headers.get('Host'))).encode()
        self.send_response(200); self.send_header('Content-Length', str(len(body))); self.end_headers()
        self.wfile.write(body)
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
s = S(('0.0.0.0', 8080), H)
print('ready', flush=True)
s.serve_forever()
"""


@unittest.skipUnless(MODE == "root", "creating network namespaces joined by a veth pair needs root; "
                                     "the rootless suite reaches upstreams on the host's loopback (class Network)")
class UpstreamInTestNamespace(SbxTestCase):
    """An upstream that is not on loopback: a server in a network namespace this test creates,
    reached over a veth pair from a second test namespace in which sbx itself runs. Nothing of the
    host's network is touched: both namespaces and the veth pair vanish with their processes."""

    def test_allowed_denied_and_bypass(self):
        server = subprocess.Popen(["unshare", "-n", "--", PY, "-c", UPSTREAM_SERVER], stdout=subprocess.PIPE)
        try:
            self.assertEqual(server.stdout.readline().strip(), b"ready")
            hosts = self.path("hosts")
            with open(hosts, "w") as f:
                f.write("10.203.0.2 api.upstream.test\n10.203.0.2 other.example\n")
            out = {n: self.path(n) for n in ("allowed", "literal", "denied", "bypass")}
            traces = {n: self.path(n + ".json") for n in out}
            env = " ".join(["--env NO_PROXY=", "--env no_proxy="])
            script = f"""
set -eu
ip link set lo up
ip link add sbxt-a type veth peer name sbxt-b netns {server.pid}
ip addr add 10.203.0.1/24 dev sbxt-a
ip link set sbxt-a up
nsenter -t {server.pid} -n sh -c 'ip link set lo up; ip addr add 10.203.0.2/24 dev sbxt-b; ip link set sbxt-b up'
mount --bind {hosts} /etc/hosts
curl -s --noproxy '*' -m 5 http://10.203.0.2:8080/probe >/dev/null   # the path works outside the sandbox
{SBX} run --allow-host '*.upstream.test:8080' --allow-host 10.203.0.0/24:8080 {env} --trace-file {traces['allowed']} -- \
  curl -sS -m 10 http://api.upstream.test:8080/by-name > {out['allowed']} 2>&1 || true
{SBX} run --allow-host 10.203.0.0/24:8080 {env} --trace-file {traces['literal']} -- \
  curl -sS -m 10 http://10.203.0.2:8080/by-cidr > {out['literal']} 2>&1 || true
{SBX} run --allow-host '*.upstream.test:8080' {env} --trace-file {traces['denied']} -- \
  curl -s -m 10 -o /dev/null -w '%{{http_code}}' http://other.example:8080/ > {out['denied']} 2>&1 || true
{SBX} run --allow-host '*.upstream.test:8080' {env} --trace-file {traces['bypass']} -- \
  curl -sS -m 5 --noproxy '*' http://10.203.0.2:8080/direct > {out['bypass']} 2>&1 || true
"""
            r = subprocess.run(["unshare", "-n", "-m", "--propagation", "private", "--", "sh", "-c", script],
                               capture_output=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr.decode())
            got = {n: open(p).read() for n, p in out.items()}
            t = {n: json.load(open(p)) for n, p in traces.items()}
        finally:
            server.kill()
            server.wait()
        self.assertIn("upstream in its own netns: path=/by-name host=api.upstream.test:8080", got["allowed"])
        self.assertIn("path=/by-cidr", got["literal"])
        # curl's code, then (sbx's stderr in the same file) the run's summary naming the denied host.
        self.assertTrue(got["denied"].startswith("403"), got["denied"])
        self.assertRegex(got["denied"], r"sbx: warning: 1 connection denied \(other\.example\): see 'sbx trace show \S+ --format text'")
        v = [x for x in t["denied"]["violations"] if x.get("kind") == "network"]
        self.assertEqual(v[0]["host"], "other.example")
        self.assertNotIn("upstream in its own netns", got["bypass"])
        self.assertEqual(t["bypass"]["usage"]["network"]["connections"], 0, "nothing reached the proxy")
        hosts_used = {h["host"] for h in t["allowed"]["usage"]["network"]["hosts"]}
        self.assertEqual(hosts_used, {"api.upstream.test:8080"})
        note(f"upstream in a test netns: allowed by name -> {got['allowed'].strip()!r}; "
             f"denied other.example -> {got['denied'].strip()}; bypass -> {got['bypass'].strip()[:80]!r}")


class AllowedLoopback(SbxTestCase):
    """An allowed loopback host is reached the documented way: no --env NO_PROXY= needed. The
    default NO_PROXY keeps the sandbox's own loopback direct, which would send a client for an
    allowed host:port to the sandbox's empty loopback (ECONNREFUSED) instead of the proxy."""

    @classmethod
    def setUpClass(cls):
        cls.v4 = start_server(socket.AF_INET, tag="v4")
        cls.v6 = start_server(socket.AF_INET6, tag="v6")

    @classmethod
    def tearDownClass(cls):
        for s in (cls.v4, cls.v6):
            s.shutdown()
            s.server_close()

    def fetch(self, rule, url, client):
        if client == "curl":
            cmd = [CURL, "-sS", "--max-time", "10", url]
        else:
            cmd = [PY, "-c", f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=10).read().decode())"]
        return self.run_sbx(cmd, ["--allow-host", rule])

    def check(self, rule, url, tag, client):
        r = self.fetch(rule, url, client)
        self.assertExit(r, 0, f"{client} {url} with --allow-host {rule} and the default NO_PROXY")
        self.assertIn(f"hello from {tag}", r.out, r.describe())
        hosts = [h["host"] for h in self.need_trace(r)["usage"]["network"]["hosts"]]
        self.assertEqual(len(hosts), 1, f"went through the proxy: {hosts}")
        note(f"--allow-host {rule}: {client} {url} -> {r.out.strip()!r}")

    def test_ipv4_loopback_with_python(self):
        port = self.v4.server_address[1]
        self.check(f"127.0.0.1:{port}", f"http://127.0.0.1:{port}/py", "v4", "python")

    def test_ipv6_loopback_as_in_the_readme(self):
        port = self.v6.server_address[1]
        self.check(f"[::1]:{port}", f"http://[::1]:{port}/py", "v6", "python")
        if os.access(CURL, os.X_OK):
            self.check(f"[::1]:{port}", f"http://[::1]:{port}/curl", "v6", "curl")

    def test_localhost_goes_through_the_proxy_when_its_address_is_allowed(self):
        port = self.v4.server_address[1]
        r = self.run_sbx(["sh", "-c", "echo NO_PROXY=$NO_PROXY"], ["--allow-host", f"127.0.0.1:{port}"])
        self.assertExit(r, 0)
        self.assertIn("NO_PROXY=::1\n", r.out)
        r = self.run_sbx(["sh", "-c", "echo NO_PROXY=$NO_PROXY"], ["--allow-host", "example.com"])
        self.assertIn("NO_PROXY=localhost,127.0.0.1,::1\n", r.out, "other rules keep the loopback direct")


if __name__ == "__main__":
    unittest.main()
