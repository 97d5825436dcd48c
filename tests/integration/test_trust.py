"""What sbx reads back and trusts (issue 30, items 5 and 6): the seccomp cache, the state dir and
tenant stores it lives in, the binds that could reach them, the records `sbx replay` rebuilds a run
from, and the private key that signs them. Runs as root and rootless.

On the previous binary: a program given `--bind STATE:STATE:rw` wrote SECCOMP_RET_ALLOW over the
cached default policy and every later run ran unfiltered (its record still naming the default
policy with no violation); a state dir or tenant store another user can write was used; after
`sbx key init` a rechained, unsigned record binding a host directory read-write with seccomp
unconfined was replayed and wrote on the host; a world-writable signing key was used quietly."""
import glob
import json
import os
import stat
import subprocess
import unittest

from sbxtest import MODE, SbxTestCase, ledger_lines, note, sbx
from test_ledger import make_line, split_line
from test_seccomp import _attack_error, attack_dir

ROOT = MODE == "root"
# One sock_filter {code BPF_RET|BPF_K, jt 0, jf 0, k SECCOMP_RET_ALLOW}: "allow everything".
RET_ALLOW = bytes([0x06, 0, 0, 0, 0, 0, 0xff, 0x7f])


class TrustCase(SbxTestCase):
    def setUp(self):
        super().setUp()
        self.state = self.path("state")
        os.mkdir(self.state, 0o700)
        self.cfg = self.path("cfg")
        self.env = dict(os.environ, SBX_STATE_DIR=self.state, XDG_CONFIG_HOME=self.cfg)

    def sbx(self, args, **kw):
        kw.setdefault("env", self.env)
        kw.setdefault("timeout", 60)
        return sbx(args, **kw)


    def attack(self, name, opts=()):
        d = attack_dir()
        if not d:
            self.fail(_attack_error)
        return self.run_sbx(["/attack/attack", name], ["--bind", f"{d}:/attack"] + list(opts), env=self.env)


class SeccompCache(TrustCase):
    def overwrite_cache(self):
        n = 0
        for f in glob.glob(os.path.join(self.state, "cache", "seccomp", "*.bpf")):
            with open(f, "wb") as out:
                out.write(RET_ALLOW)
            n += 1
        return n

    def assertStillFiltered(self):
        r = self.attack("unshare")
        note(f"after RET_ALLOW over the cache: rc {r.rc}, {r.out.strip()!r}")
        self.assertExit(r, 0)
        self.assertIn("blocked", r.out, r.describe())
        self.assertNotIn("SUCCEEDED", r.out, r.describe())
        vs = [v["name"] for v in self.need_trace(r).get("violations", [])]
        self.assertIn("unshare", vs, "the refused call must be recorded")
        s = self.need_trace(r)["enforcement"]["seccomp"]
        self.assertEqual(s["profile"], "default")
        self.assertRegex(s.get("program_sha256", ""), r"^[0-9a-f]{64}$", "the record names the program installed")
        return s

    def test_a_program_cannot_overwrite_the_cache_through_a_bind_of_the_state_dir(self):
        self.assertExit(self.run_sbx(["true"], env=self.env), 0)
        script = ("for f in " + self.state + "/cache/seccomp/*.bpf; do "
                  "printf '\\006\\000\\000\\000\\000\\000\\377\\177' > \"$f\"; done; echo wrote")
        for src in (self.state, os.path.dirname(self.state), self.state + "/cache"):
            with self.subTest(bind=src):
                r = self.run_sbx(["sh", "-c", script], ["--bind", f"{src}:{src}:rw"], env=self.env)
                note(f"--bind {src}:rw: rc {r.rc}, {r.err.strip()[-200:]!r}")
                line = self.assertRefused(r, "--bind", "sbx's state dir")
                self.assertIn("read-only", line)
        # Read-only it is fine: the program cannot write through it.
        r = self.run_sbx(["true"], ["--bind", f"{self.state}:/st"], env=self.env)
        self.assertExit(r, 0)
        self.assertStillFiltered()

    def test_a_cache_written_over_does_not_disable_the_filter(self):
        """Whoever writes the cache (a store another way writable, a bug): the program installed is
        the policy compiled now, never the file, and the record names the program installed."""
        first = self.run_sbx(["true"], env=self.env)
        self.assertExit(first, 0)
        want = self.need_trace(first)["enforcement"]["seccomp"].get("program_sha256")
        n = self.overwrite_cache()
        note(f"{n} cached program(s) overwritten with RET_ALLOW")
        s = self.assertStillFiltered()
        self.assertEqual(s["program_sha256"], want)
        self.assertFalse(s["cached"])


class PrivateStore(TrustCase):
    def test_a_state_dir_others_can_write_is_refused(self):
        shared = self.path("shared")
        os.mkdir(shared)
        os.chmod(shared, 0o777)  # no sticky bit: anyone may rename or replace what is inside
        for state, words in ((shared + "/state", ["world-writable", "chmod go-w " + shared]),
                             (shared, ["world-writable", "chmod go-w " + shared])):
            with self.subTest(state=state):
                env = dict(self.env, SBX_STATE_DIR=state)
                r = sbx(["run", "--", "true"], env=env, timeout=30)
                note(f"state dir {state}: rc {r.rc}, {r.err.strip()[-240:]!r}")
                self.assertRefused(r, "sbx's state dir", *words)
        os.chmod(shared, 0o775)
        r = sbx(["run", "--", "true"], env=dict(self.env, SBX_STATE_DIR=shared + "/state"), timeout=30)
        self.assertRefused(r, "group-writable")
        # A sticky world-writable parent (like /tmp) with a private dir of one's own is fine.
        os.chmod(shared, 0o1777)
        r = sbx(["run", "--", "true"], env=dict(self.env, SBX_STATE_DIR=shared + "/state"), timeout=30)
        self.assertExit(r, 0)
        # So is a private state dir reached through a symlink of one's own.
        os.symlink(shared + "/state", self.path("link"))
        self.assertExit(sbx(["run", "--", "true"], env=dict(self.env, SBX_STATE_DIR=self.path("link")), timeout=30), 0)

    @unittest.skipUnless(ROOT, "only root can make a directory another user owns")
    def test_a_tenant_store_its_tenant_can_write_is_refused(self):
        tenants = self.path("tenants")
        os.mkdir(tenants)
        env = dict(self.env, SBX_TENANTS_DIR=tenants)
        doc = {"id_slot": 3, "separate_ids": "required", "images": ["host"], "limits": {"timeout": "20s"}}
        with open(os.path.join(tenants, "T.json"), "w") as f:
            json.dump(doc, f)
        # The tenant's host uid, as a run under it records it.
        r = sbx(["run", "--tenant", "T", "--dry-run", "--", "true"], env=env, timeout=30)
        self.assertExit(r, 0)
        plan = json.loads(r.out)
        uid = plan["enforcement"]["identity"]["uid_map"][0]["outside"]
        owned = self.path("tenant-owned")
        os.mkdir(owned, 0o755)
        os.chown(owned, uid, uid)
        doc["store"] = owned + "/store"
        with open(os.path.join(tenants, "T.json"), "w") as f:
            json.dump(doc, f)
        r = sbx(["run", "--tenant", "T", "--", "true"], env=env, timeout=30)
        note(f"tenant store in a dir its uid owns: rc {r.rc}, {r.err.strip()[-240:]!r}")
        self.assertRefused(r, "tenant 'T'", "store", "belongs to uid " + str(uid))
        self.assertFalse(os.path.exists(owned + "/store"), "nothing is written into a refused store")


class SignedReplay(TrustCase):
    def setUp(self):
        super().setUp()
        self.assertExit(self.sbx(["key", "init"]), 0)
        self.priv = os.path.join(self.cfg, "sbx", "ledger-key.pem")
        self.host = self.path("host")
        os.mkdir(self.host, 0o777)
        os.chmod(self.host, 0o777)
        self.ledger = os.path.join(self.state, "traces", "ledger.jsonl")

    def forge_last(self, edit):
        """The last record edited by `edit`, its line rechained without a signature, as anyone who
        can write the ledger could: `sbx trace verify` without --pubkey still passes."""
        with open(self.ledger, "rb") as f:
            lines = [l for l in f.read().split(b"\n") if l]
        record_bytes, env = split_line(lines[-1])
        record = json.loads(record_bytes)
        edit(record)
        forged = json.dumps(record, separators=(",", ":")).encode()
        line, _ = make_line(forged, env["seq"], env["run_id"], env["prev"])
        with open(self.ledger, "wb") as f:
            f.write(b"\n".join(lines[:-1] + [line]) + b"\n")
        self.assertExit(self.sbx(["trace", "verify"]), 0)

    def escape(self, record):
        spec = record["invocation"]["spec"]
        spec["binds"].append({"src": self.host, "dst": "/h", "rw": True})
        spec["seccomp"] = "unconfined"
        spec["argv"] = ["sh", "-c", "echo pwned > /h/pwned"]

    def test_a_genuine_signed_record_replays(self):
        r = self.sbx(["run", "--keep-inputs", "--", "sh", "-c", "echo same"])
        self.assertExit(r, 0)
        self.assertIn("sig", ledger_lines(self.state)[-1])
        rp = self.sbx(["replay", "last"])
        note(f"replay of a signed record: rc {rp.rc}, {rp.out!r}")
        self.assertExit(rp, 0)
        self.assertEqual(rp.out, "identical\n")

    def test_a_forged_unsigned_record_is_not_replayed(self):
        self.assertExit(self.sbx(["run", "--keep-inputs", "--", "true"]), 0)
        self.forge_last(self.escape)
        rp = self.sbx(["replay", "last"])
        note(f"replay of a rechained unsigned record: rc {rp.rc}, {rp.err.strip()[-300:]!r}")
        self.assertRefused(rp, "not signed", "ledger-key.pub.pem")
        self.assertFalse(os.path.exists(self.host + "/pwned"), "the forged replay wrote on the host")

    def test_a_record_with_a_forged_signature_is_not_replayed(self):
        self.assertExit(self.sbx(["run", "--keep-inputs", "--", "true"]), 0)
        sig = ledger_lines(self.state)[-1]["sig"]

        def keep_old_sig(record):
            self.escape(record)
        self.forge_last(keep_old_sig)
        with open(self.ledger, "rb") as f:
            data = f.read().rstrip(b"\n")
        with open(self.ledger, "wb") as f:
            f.write(data[:-1] + b',"sig":"' + sig.encode() + b'"}\n')
        rp = self.sbx(["replay", "last"])
        self.assertExit(rp, 125)
        self.assertFalse(os.path.exists(self.host + "/pwned"))

    def test_a_public_key_others_can_replace_is_not_trusted(self):
        """Whoever can write the public key file swaps in a key of their own and signs a forged
        record with it: a group- or world-writable public key is refused, naming the fix."""
        self.assertExit(self.sbx(["run", "--keep-inputs", "--", "true"]), 0)
        pub = os.path.join(self.cfg, "sbx", "ledger-key.pub.pem")
        os.chmod(pub, 0o666)
        rp = self.sbx(["replay", "last"])
        note(f"replay with a world-writable public key: rc {rp.rc}, {rp.err.strip()[-300:]!r}")
        self.assertRefused(rp, "chmod 644", pub)
        os.chmod(pub, 0o644)
        self.assertExit(self.sbx(["replay", "last"]), 0)

    def test_a_replay_never_runs_with_more_than_its_profile_allows_now(self):
        """Signed or not (no key here), the spec a record holds is held to its profile as installed
        now: a host bind, unconfined seccomp, a raised limit, an allowed host are refused."""
        os.remove(self.priv)
        os.remove(os.path.join(self.cfg, "sbx", "ledger-key.pub.pem"))
        self.assertExit(self.sbx(["run", "--keep-inputs", "--", "true"]), 0)
        self.forge_last(self.escape)
        rp = self.sbx(["replay", "last"])
        note(f"replay of a rechained record over its profile (no key): rc {rp.rc}, {rp.err.strip()[-300:]!r}")
        self.assertRefused(rp, "more than its profile 'untrusted' allows now", self.host)
        self.assertFalse(os.path.exists(self.host + "/pwned"))
        for field, value, word in (("seccomp", "unconfined", "seccomp 'unconfined'"),
                                   ("network", {"mode": "proxy", "allow": ["evil.example"], "max_connections": 64,
                                                "idle_timeout_ms": 60000, "max_bytes": None}, "evil.example"),
                                   ("limits", "timeout", "timeout")):
            with self.subTest(field=field):
                self.assertExit(self.sbx(["run", "--keep-inputs", "--", "true"]), 0)

                def edit(record, field=field, value=value):
                    spec = record["invocation"]["spec"]
                    if field == "limits":
                        spec["limits"]["timeout_ms"] = None
                    elif field == "network":
                        spec["network"].update(value)
                    else:
                        spec[field] = value
                self.forge_last(edit)
                self.assertRefused(self.sbx(["replay", "last"]), word)
        # A genuine operator choice over the profile is held to it too: run it again instead.
        self.assertExit(self.sbx(["run", "--keep-inputs", "--bind", f"{self.host}:/h:rw", "--", "true"]), 0)
        self.assertRefused(self.sbx(["replay", "last"]), "binds " + self.host + ":/h:rw")


class SigningKey(TrustCase):
    def test_a_private_key_others_can_write_or_read_is_refused(self):
        self.assertExit(self.sbx(["key", "init"]), 0)
        priv = os.path.join(self.cfg, "sbx", "ledger-key.pem")
        for mode, word in ((0o666, "replace"), (0o620, "replace"), (0o640, "read")):
            with self.subTest(mode=oct(mode)):
                os.chmod(priv, mode)
                r = self.sbx(["run", "--", "sh", "-c", "echo ran"])
                note(f"key mode {oct(mode)}: rc {r.rc}, {r.err.strip()[-240:]!r}")
                line = self.assertRefused(r, priv, word, "chmod 600 " + priv)
                self.assertNotIn("ran", r.out, "the program must not run under a key nobody may trust: " + line)
        os.chmod(priv, 0o600)
        self.assertExit(self.sbx(["run", "--", "true"]), 0)
        self.assertIn("sig", ledger_lines(self.state)[-1])

    @unittest.skipUnless(ROOT, "only root can give a file to another user")
    def test_a_private_key_of_another_user_is_refused(self):
        self.assertExit(self.sbx(["key", "init"]), 0)
        priv = os.path.join(self.cfg, "sbx", "ledger-key.pem")
        os.chown(priv, 65534, 65534)
        self.assertRefused(self.sbx(["run", "--", "true"]), priv, "belongs to uid 65534")


if __name__ == "__main__":
    unittest.main()
