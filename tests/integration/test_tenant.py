"""Tenants (--tenant NAME, runtime/launch/tenant.hpp): a ceiling no layer raises (flag, manifest, exec
request), image and pack allowlists, a host id slice of each tenant's own (disjoint while two run),
files one tenant writes into a shared bind unreadable by the other, records in each tenant's own
store, and `sbx probe --tenant A` reporting B's resources unreachable (and breached when a weak
setup makes them reachable, so the probe cannot pass vacuously)."""
import hashlib
import json
import os
import shutil
import subprocess
import time
import unittest

from sbxtest import MODE, SbxTestCase, busybox_digest, find_program, ledger_lines, sbx, wait_for

ROOT = MODE == "root"
ROOTLESS_IDS = ("rootless sbx has no subordinate range to slice: every sandbox runs as the caller's uid, "
                "so tenants' host ids cannot differ (man sbx TENANTS says what holds rootless)")


class Tenant(SbxTestCase):
    def setUp(self):
        super().setUp()
        self.tenants = self.path("tenants")
        os.mkdir(self.tenants)
        self.state = os.environ["SBX_STATE_DIR"]
        self.env = dict(os.environ, SBX_TENANTS_DIR=self.tenants)
        # Rootless, a tenant that requires separate ids is refused (test_rootless_requires_ids):
        # the other rootless tests use "preferred", which keeps ceilings and stores.
        ids = "required" if ROOT else "preferred"
        self.write_tenant("A", {"id_slot": 1, "separate_ids": ids, "images": ["host"], "packs": [],
                                "limits": {"memory": "128M", "timeout": "20s", "pids": 32},
                                "network": {"allow": ["*.example.com"]}, "gpu": {"max": 0}})
        self.write_tenant("B", {"id_slot": 2, "separate_ids": ids, "limits": {"timeout": "20s"}})

    def write_tenant(self, name, doc):
        with open(os.path.join(self.tenants, name + ".json"), "w") as f:
            json.dump(doc, f)

    def sbx(self, args, **kw):
        return sbx(args, env=self.env, **kw)


    def store(self, name):
        return os.path.join(self.state, "tenants", name)

    # -- ceilings ---------------------------------------------------------------------------------

    def test_flag_above_ceiling_is_refused(self):
        line = self.assertRefused(self.sbx(["run", "--tenant", "A", "--memory", "1G", "--", "true"]),
                            "tenant 'A'", "memory", "1G", "flag --memory", "128M")
        print(f"\n  refused: {line}")
        self.assertRefused(self.sbx(["run", "--tenant", "A", "--timeout", "none", "--", "true"]), "tenant 'A'", "timeout")
        self.assertRefused(self.sbx(["run", "--tenant", "A", "--allow-host", "evil.org", "--", "true"]),
                     "tenant 'A'", "evil.org", "*.example.com")
        self.assertRefused(self.sbx(["run", "--tenant", "A", "--gpu", "0", "--", "true"]), "tenant 'A'", "quota")
        # Below the ceiling: runs; the profile's larger defaults are lowered to the tenant's.
        r = self.sbx(["run", "--tenant", "A", "--pids", "16", "--allow-host", "api.example.com", "--dry-run", "--", "true"])
        self.assertExit(r, 0)
        plan = json.loads(r.out)
        spec = plan.get("spec", plan)
        self.assertLessEqual(spec["limits"]["memory_bytes"], 128 << 20)
        self.assertLessEqual(spec["limits"]["timeout_ms"], 20000)
        self.assertEqual(spec["limits"]["pids"], 16)

    def test_manifest_above_ceiling_and_pack_not_allowed(self):
        pk = self.path("pk")
        self.assertExit(sbx(["pack", "init", pk]), 0)
        records = self.path("records.json")
        with open(records, "w") as f:
            f.write("[{\"id\": \"r1\"}]")
        with open(os.path.join(pk, "pack.json")) as f:
            manifest = json.load(f)
        manifest["limits"]["timeout"] = "10s"
        manifest["limits"]["memory"] = "64M"
        manifest["limits"]["pids"] = 16
        with open(os.path.join(pk, "pack.json"), "w") as f:
            json.dump(manifest, f)
        # A pack is allowed by its full digest, never by the name its own manifest claims.
        v = sbx(["pack", "validate", pk])
        self.assertExit(v, 0)
        digest = v.out.split("(digest ")[1].split(")")[0]
        r = self.sbx(["pack", "run", pk, "--tenant", "A", "--input", records], timeout=60)
        self.assertRefused(r, "tenant 'A'", "pack 'pk'", "not among the tenant's packs")
        tenant_a = {"id_slot": 1, "separate_ids": "required" if ROOT else "preferred", "images": ["host"], "packs": [digest],
                    "limits": {"memory": "128M", "timeout": "20s", "pids": 32}}
        self.write_tenant("A", tenant_a)
        r = self.sbx(["pack", "run", pk, "--tenant", "A", "--input", records], timeout=60)
        self.assertExit(r, 0)
        # The manifest asks for 200M of memory (within the profile's ceiling): above tenant A's
        # 128M it is refused...
        manifest["limits"]["memory"] = "200M"
        with open(os.path.join(pk, "pack.json"), "w") as f:
            json.dump(manifest, f)
        self.assertRefused(self.sbx(["pack", "run", pk, "--tenant", "A", "--input", records]),
                     "tenant 'A'", "memory", "pack.json")
        # ...and B may run no pack at all.
        manifest["limits"]["memory"] = "64M"
        with open(os.path.join(pk, "pack.json"), "w") as f:
            json.dump(manifest, f)
        self.assertRefused(self.sbx(["pack", "run", pk, "--tenant", "B", "--input", records]),
                     "tenant 'B'", "pack 'pk'", "not among the tenant's packs")

    def test_exec_request_above_ceiling_is_refused(self):
        # 25s: within the profile's ceiling (30s), above tenant A's (20s).
        req = {"language": "sh", "code": "echo ok", "limits": {"timeout": "25s"}}
        r = self.sbx(["exec", "--tenant", "A"], input=json.dumps(req).encode())
        self.assertExit(r, 125)
        err = json.loads(r.out)["error"]
        self.assertIn("tenant 'A'", err["message"])
        self.assertIn("exec request", err["message"])
        req["limits"] = {"timeout": "5s"}
        r = self.sbx(["exec", "--tenant", "A"], input=json.dumps(req).encode(), timeout=60)
        self.assertExit(r, 0)
        resp = json.loads(r.out)
        self.assertEqual(resp["stdout"], "ok\n", resp)
        self.assertTrue(resp["trace"].startswith(self.store("A") + "/"), resp["trace"])

    def test_image_not_allowed_is_refused(self):
        digest = busybox_digest(self)
        self.assertRefused(self.sbx(["run", "--tenant", "A", "--image", "busybox", "--", "true"]),
                     "tenant 'A'", "image 'busybox'", "not among the tenant's images")
        self.assertRefused(self.sbx(["run", "--tenant", "A", "--image", digest[:19], "--", "true"]), "tenant 'A'", "image")
        self.write_tenant("C", {"id_slot": 3, "separate_ids": "required" if ROOT else "preferred", "images": [digest]})
        r = self.sbx(["run", "--tenant", "C", "--image", "busybox", "--", "true"], timeout=60)
        self.assertExit(r, 0)

    def test_packs_by_full_digest_and_images_by_whole_digests_only(self):
        # A pack's name is its own manifest's claim, and a digest prefix can be searched for.
        self.write_tenant("N", {"id_slot": 9, "packs": ["pk"]})
        self.assertRefused(self.sbx(["run", "--tenant", "N", "--", "true"]), "/packs/0", "full digest")
        self.write_tenant("N", {"id_slot": 9, "images": ["sha256:" + "ab" * 6]})
        self.assertRefused(self.sbx(["run", "--tenant", "N", "--", "true"]), "/images/0", "64")
        # Another tenant file naming A's store is refused before anything runs.
        self.write_tenant("N", {"id_slot": 9, "store": os.path.join(self.state, "tenants", "A")})
        self.assertRefused(self.sbx(["run", "--tenant", "N", "--", "true"]), "store", "tenant 'A'")

    def test_bad_names_and_files(self):
        for bad in ["../x", "a/b", "", ".hidden", "x" * 65, "a\x01b"]:
            self.assertRefused(self.sbx(["run", "--tenant", bad, "--", "true"]), "tenant")
        self.assertRefused(self.sbx(["run", "--tenant", "nobody", "--", "true"]), "no tenant file nobody.json")
        self.write_tenant("D", {"id_slot": 4, "limts": {}})
        self.assertRefused(self.sbx(["run", "--tenant", "D", "--", "true"]), "/limts: unknown key", "did you mean 'limits'")
        self.write_tenant("E", {"id_slot": 1})
        self.assertRefused(self.sbx(["run", "--tenant", "E", "--", "true"]), "id_slot 1", "tenant 'A'")
        self.write_tenant("F", {"images": ["host"]})
        self.assertRefused(self.sbx(["run", "--tenant", "F", "--", "true"]), "/id_slot: required")
        with open(os.path.join(self.tenants, "G.json"), "w") as f:
            f.write("[" * 100000)
        self.assertRefused(self.sbx(["run", "--tenant", "G", "--", "true"]), "G.json")

    # -- stores -----------------------------------------------------------------------------------

    def test_records_land_in_each_tenants_own_store(self):
        ra = self.run_sbx(["true"], ["--tenant", "A"], env=self.env)
        rb = self.run_sbx(["true"], ["--tenant", "B"], env=self.env)
        self.assertExit(ra, 0)
        self.assertExit(rb, 0)
        ta, tb = self.need_trace(ra), self.need_trace(rb)
        self.assertEqual(ta["tenant"]["name"], "A")
        self.assertEqual(ta["tenant"]["store"], self.store("A"))
        a_ids = {e["run_id"] for e in ledger_lines(self.store("A"))}
        b_ids = {e["run_id"] for e in ledger_lines(self.store("B"))}
        main_ids = {e["run_id"] for e in ledger_lines(self.state)}
        self.assertIn(ta["run_id"], a_ids)
        self.assertNotIn(ta["run_id"], b_ids | main_ids)
        self.assertIn(tb["run_id"], b_ids)
        self.assertNotIn(tb["run_id"], a_ids | main_ids)
        ls = self.sbx(["trace", "ls", "--tenant", "A", "--json"])
        self.assertExit(ls, 0)
        self.assertEqual({x["run_id"] for x in json.loads(ls.out)}, a_ids)
        self.assertExit(self.sbx(["trace", "show", "--tenant", "A", ta["run_id"]]), 0)
        self.assertRefused(self.sbx(["trace", "show", "--tenant", "B", ta["run_id"]]), "no trace")
        self.assertExit(self.sbx(["trace", "verify", "--tenant", "B"]), 0)
        # `trace export` reads the tenant's store like the others (on the previous main it had no
        # --tenant: exit 125, "The following argument was not expected").
        ex = self.sbx(["trace", "export", "--tenant", "A", ta["run_id"]])
        self.assertExit(ex, 0)
        self.assertIn(ta["run_id"], json.dumps(json.loads(ex.out)))
        self.assertRefused(self.sbx(["trace", "export", "--tenant", "B", ta["run_id"]]), "no trace")
        self.assertRefused(self.sbx(["trace", "export", ta["run_id"]]), "no trace")
        st = os.stat(self.store("A") + "/traces")
        self.assertEqual(st.st_mode & 0o077, 0, "a tenant's store is its owner's alone")
        print(f"\n  A: {json.dumps(ta['tenant'])}\n  B: {json.dumps(tb['tenant'])}")

    def test_store_naming_the_untenanted_state_or_another_tenants_is_refused(self):
        parent = os.path.dirname(self.state.rstrip("/"))
        link = self.path("state-link")
        os.symlink(self.state, link)
        for store, words in ((self.state, ["is sbx's untenanted state directory"]),
                             (self.state + "/traces", ["is inside sbx's untenanted state directory"]),
                             (self.state + "/", ["untenanted state directory"]),
                             (parent, ["holds sbx's untenanted state directory"]),
                             (link, ["is sbx's untenanted state directory"]),
                             (self.store("A"), ["tenant 'A'"]),
                             (self.store("A") + "/sub", ["is inside sbx's untenanted state directory"])):
            self.write_tenant("S", {"id_slot": 7, "separate_ids": "preferred", "images": ["host"], "store": store})
            for args in (["run", "--tenant", "S", "--", "true"], ["gc", "--tenant", "S"], ["replay", "--tenant", "S", "last"],
                         ["trace", "ls", "--tenant", "S"]):
                line = self.assertRefused(self.sbx(args), "S.json", "/store", *words)
            print(f"\n  /store {store}: {line}")
        # A tenant whose store holds another's: refused naming the other's file too.
        self.write_tenant("S", {"id_slot": 7, "separate_ids": "preferred", "images": ["host"],
                                "store": self.path("outer")})
        self.write_tenant("T", {"id_slot": 8, "separate_ids": "preferred", "images": ["host"],
                                "store": self.path("outer") + "/t"})
        self.assertRefused(self.sbx(["gc", "--tenant", "S"]), "S.json", "/store", "holds tenant 'T'")
        self.assertRefused(self.sbx(["gc", "--tenant", "T"]), "T.json", "/store", "is inside tenant 'S'")
        os.unlink(os.path.join(self.tenants, "T.json"))
        # Its own default place, named explicitly, and a place of its own are fine.
        for store in (self.store("S"), self.path("elsewhere")):
            self.write_tenant("S", {"id_slot": 7, "separate_ids": "preferred", "images": ["host"], "store": store})
            self.assertExit(self.sbx(["run", "--tenant", "S", "--", "true"]), 0)
            self.assertTrue(os.path.exists(store + "/traces/ledger.jsonl"))

    def test_a_tenant_run_binds_neither_the_untenanted_state_nor_another_tenants_store_rw(self):
        # Under a tenant the run's state dir is the tenant's store, and so was all that the guard
        # on read-write binds kept out of reach: on the previous binary `--tenant A --bind
        # STATE/traces:/x:rw` let A's program rewrite the untenanted ledger (and cache), and a
        # bind of B's /store let it rewrite B's records and seccomp cache.
        self.assertExit(sbx(["run", "--", "true"]), 0)  # the untenanted traces and cache exist
        bstore = self.path("b-store")
        self.write_tenant("B", {"id_slot": 2, "separate_ids": "required" if ROOT else "preferred",
                                "limits": {"timeout": "20s"}, "store": bstore})
        self.assertExit(self.sbx(["run", "--tenant", "B", "--", "true"]), 0)
        for src, words in ((self.state + "/traces", ["is inside sbx's untenanted state dir " + self.state]),
                           (self.state + "/cache", ["is inside sbx's untenanted state dir"]),
                           (bstore, ["is tenant 'B''s store " + bstore]),
                           (bstore + "/traces", ["is inside tenant 'B''s store"]),
                           (self.store("B"), ["is inside sbx's untenanted state dir"])):
            os.makedirs(src, exist_ok=True)
            line = self.assertRefused(self.sbx(["run", "--tenant", "A", "--bind", f"{src}:/x:rw", "--", "true"]),
                                "--bind " + src, "read-only", *words)
            print(f"\n  --tenant A --bind {src}:/x:rw: {line}")
        # Read-only, the program can write nothing there: allowed as before.
        self.assertExit(self.sbx(["run", "--tenant", "A", "--bind", f"{self.state}/traces:/x", "--", "true"]), 0)

    def test_gc_and_replay_work_on_the_tenants_own_store(self):
        inp = self.path("in.txt")
        with open(inp, "w") as f:
            f.write(f"tenant input {os.getpid()} {time.time()}\n")  # a blob no other test keeps
        os.chmod(inp, 0o644)
        r = self.sbx(["run", "--tenant", "A", "--keep-inputs", "--input", inp, "--", "cat", "/in/in.txt"])
        self.assertExit(r, 0)
        rec = ledger_lines(self.store("A"))[-1]["record"]
        kept = {b["sha256"] for b in rec["blobs"] if "sha256" in b and "skipped" not in b}
        self.assertTrue(kept)

        def blob(state, sha):
            return os.path.join(state, "blobs", "sha256", sha[:2], sha)

        for sha in kept:
            self.assertTrue(os.path.exists(blob(self.store("A"), sha)), "kept in the tenant's store")
        # (The profile's text is the same blob in every store that keeps it; the input is A's alone.)
        mine = [b["sha256"] for b in rec["blobs"] if b.get("role") == "input_file"]
        self.assertEqual(len(mine), 1, rec["blobs"])
        self.assertFalse(os.path.exists(blob(self.state, mine[0])), "not in the untenanted store")
        # An old orphan in each store: gc --tenant A deletes A's only, plain gc the untenanted one only.
        orphans = {}
        for where in (self.store("A"), self.state):
            data = f"orphan of {where}".encode()
            sha = hashlib.sha256(data).hexdigest()
            os.makedirs(os.path.dirname(blob(where, sha)), exist_ok=True)
            with open(blob(where, sha), "wb") as f:
                f.write(data)
            os.utime(blob(where, sha), (time.time() - 7200, time.time() - 7200))
            orphans[where] = sha
        g = self.sbx(["gc", "--tenant", "A"])
        self.assertExit(g, 0)
        print(f"\n  sbx gc --tenant A:\n{g.out}")
        self.assertIn(f"deleted sha256:{orphans[self.store('A')]}", g.out)
        self.assertNotIn(orphans[self.state], g.out)
        for sha in kept:
            self.assertIn(f"kept sha256:{sha}", g.out)
            self.assertTrue(os.path.exists(blob(self.store("A"), sha)))
        self.assertTrue(os.path.exists(blob(self.state, orphans[self.state])), "gc --tenant A left the untenanted store alone")
        g = self.sbx(["gc"])
        self.assertExit(g, 0)
        self.assertIn(f"deleted sha256:{orphans[self.state]}", g.out)
        for sha in kept:
            self.assertTrue(os.path.exists(blob(self.store("A"), sha)), "plain gc left the tenant's store alone")

        # replay --tenant A: found in A's store, run again under A, recorded in A's store.
        before = len(ledger_lines(self.store("A")))
        rp = self.sbx(["replay", "--tenant", "A", rec["run_id"]])
        print(f"  sbx replay --tenant A {rec['run_id']}: rc {rp.rc}, {rp.out.strip()!r}")
        self.assertExit(rp, 0)
        self.assertEqual(rp.out, "identical\n")
        after = ledger_lines(self.store("A"))
        self.assertEqual(len(after), before + 1)
        again = after[-1]["record"]
        self.assertEqual(again["tenant"]["name"], "A")
        self.assertEqual(again["replay_of"]["run_id"], rec["run_id"])
        self.assertLessEqual(again["invocation"]["spec"]["limits"]["memory_bytes"], 128 << 20)
        self.assertNotIn(again["run_id"], {e["run_id"] for e in ledger_lines(self.state)})
        # Not in B's store. (Nor in the untenanted one, asserted on its ledger above: a replay there
        # would build the untenanted store's query index, which test_trace expects absent.)
        self.assertRefused(self.sbx(["replay", "--tenant", "B", rec["run_id"]]), "cannot replay")

    # -- identity ---------------------------------------------------------------------------------

    def test_rootless_requires_ids(self):
        if ROOT:
            self.skipTest("rootless only: as root every tenant gets its own slice")
        self.write_tenant("R", {"id_slot": 5})
        self.assertRefused(self.sbx(["run", "--tenant", "R", "--", "true"]), "tenant 'R'", "separate host ids", "rootless")
        r = self.run_sbx(["true"], ["--tenant", "A"], env=self.env)
        self.assertExit(r, 0)
        self.assertEqual(r.trace["tenant"]["uid_range"], None)
        self.assertFalse(r.trace["tenant"]["separation"]["ids"])

    def test_concurrent_tenants_map_to_disjoint_host_ids(self):
        if not ROOT:
            self.skipTest(ROOTLESS_IDS)
        tag = "29.%06d" % (os.getpid() % 1000000)  # a sleep length no other test uses: finds ours
        procs = {}
        for name in ["A", "B"]:
            tpath = self.path(f"trace-{name}.json")
            procs[name] = (subprocess.Popen([os.environ["SBX_BIN"], "run", "--tenant", name, "--trace-file", tpath, "--",
                                             "sleep", tag],
                                            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE), tpath)
        try:
            pids = wait_for(lambda: len(find_program(tag, "sleep")) >= 2 and find_program(tag, "sleep"), 20)
            self.assertTrue(pids, "both sleepers never showed up")
            maps = {}
            for pid in pids:
                with open(f"/proc/{pid}/uid_map") as f:
                    um = [tuple(map(int, l.split())) for l in f.read().splitlines()]
                with open(f"/proc/{pid}/gid_map") as f:
                    gm = [tuple(map(int, l.split())) for l in f.read().splitlines()]
                with open(f"/proc/{pid}/status") as f:
                    uid_line = next(l for l in f.read().splitlines() if l.startswith("Uid:"))
                maps[pid] = (um, gm, uid_line)
        finally:
            for p, _ in procs.values():
                p.kill()
                p.wait()
        ranges = sorted((m[0][0][1], m[0][0][1] + m[0][0][2]) for m in maps.values())
        self.assertGreaterEqual(len(ranges), 2)
        for (s1, e1), (s2, e2) in zip(ranges, ranges[1:]):
            self.assertLessEqual(e1, s2, f"overlapping host uid ranges: {maps}")
        for pid, m in maps.items():
            print(f"\n  pid {pid}: uid_map {m[0]} gid_map {m[1]} ({m[2]})")

    def test_file_written_into_a_shared_bind_is_unreadable_to_the_other_tenant(self):
        if not ROOT:
            self.skipTest(ROOTLESS_IDS)
        shared = self.path("shared")
        os.mkdir(shared)
        os.chmod(shared, 0o777)  # a shared rw directory both tenants' sandboxes may write
        bind = ["--bind", f"{shared}:/shared:rw"]
        ra = self.run_sbx(["sh", "-c", "echo secret-of-A > /shared/a.txt"], ["--tenant", "A"] + bind, env=self.env)
        self.assertExit(ra, 0)
        st = os.stat(os.path.join(shared, "a.txt"))
        self.assertEqual(st.st_mode & 0o777, 0o600, "a tenant's files are 0600 (umask 077), whatever the caller's umask")
        self.assertEqual(st.st_uid, ra.trace["tenant"]["uid_range"][0])
        rb = self.run_sbx(["cat", "/shared/a.txt"], ["--tenant", "B"] + bind, env=self.env)
        self.assertExit(rb, 1)
        self.assertIn(b"Permission denied", rb.stderr)
        self.assertNotIn(b"secret-of-A", rb.stdout)
        # Without tenants (the caller's umask 022 applies) the same file would be readable: the
        # 0600 above is the tenant's doing, not an accident of the test.
        r0 = self.run_sbx(["sh", "-c", "echo plain > /shared/p.txt"], bind, env=self.env)
        self.assertExit(r0, 0)
        self.assertEqual(os.stat(os.path.join(shared, "p.txt")).st_mode & 0o044, 0o044)
        print(f"\n  A wrote /shared/a.txt: mode {oct(st.st_mode & 0o777)} uid {st.st_uid}; "
              f"B: {rb.stderr.decode().strip()}")

    # -- probe --------------------------------------------------------------------------------------

    def probe(self, tenant, opts):
        r = self.sbx(["probe", "--json", "--tenant", tenant] + list(opts), timeout=180)
        try:
            report = json.loads(r.out)
        except ValueError:
            self.fail("sbx probe --json printed no JSON\n" + r.describe())
        return {p["probe"]: p for p in report["probes"] if p["probe"].startswith("tenant.")}

    def test_probe_reports_the_other_tenants_resources_unreachable(self):
        shared = self.path("shared")
        os.mkdir(shared)
        os.chmod(shared, 0o777)
        # B's store under this test's (traversable) directory, so that the weak setup below can
        # bind it into A's sandbox as root; sbx still makes it 0700.
        self.write_tenant("B", {"id_slot": 2, "separate_ids": "required" if ROOT else "preferred",
                                "store": self.path("store-B")})
        # B runs first: its store exists, and (as root) it leaves a file in the shared directory.
        rb = self.run_sbx(["sh", "-c", "echo secret-of-B > /shared/b.txt"],
                          ["--tenant", "B", "--bind", f"{shared}:/shared:rw"], env=self.env)
        self.assertExit(rb, 0)
        store_b = self.path("store-B")
        self.assertTrue(os.path.exists(store_b + "/traces/ledger.jsonl"))
        held = self.probe("A", ["--bind", f"{shared}:/shared"])
        want = {"tenant.b.store", "tenant.b.ledger"} | ({"tenant.b.file1"} if ROOT else set())
        self.assertEqual(set(held) & want, want, held)
        for name in want:
            self.assertEqual(held[name]["result"], "held", held[name])
        if ROOT:
            self.assertIn("/shared/b.txt: Permission denied", held["tenant.b.file1"]["evidence"])
        # A deliberately weak setup: B's store bound into A's sandbox and made readable, B's file
        # made world-readable. The same probes now report breached: they are not vacuous.
        subprocess.run(["chmod", "-R", "go+rX", store_b], check=True)
        os.chmod(os.path.join(shared, "b.txt"), 0o644)
        weak = self.probe("A", ["--bind", f"{shared}:/shared", "--bind", f"{store_b}:/mnt/b"])
        for name in want:
            self.assertEqual(weak[name]["result"], "breached", weak)
        self.assertIn("/mnt/b", weak["tenant.b.store"]["evidence"])
        print("\n  held:     " + "; ".join(f"{n} {p['result']} ({p['evidence']})" for n, p in sorted(held.items())))
        print("  weak:     " + "; ".join(f"{n} {p['result']} ({p['evidence']})" for n, p in sorted(weak.items())))


if __name__ == "__main__":
    unittest.main()
