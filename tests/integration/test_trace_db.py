"""The trace database (runtime/record/trace_mirror.hpp): records mirrored into a real PostgreSQL 15
server that this test starts itself (initdb in a temporary directory, a unix socket there, never
a TCP port; Debian's postgresql-15 package), verified and queried from it.

PostgreSQL refuses to run as root: as root the server runs as the suite's test user (sbxtest,
made by run.sh), rootless as the suite's own user. Roles that stand for tenants' auditors log in
with a password (scram-sha-256), which sbx takes from PGPASSWORD or a password file, never argv.
"""
import glob
import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from sbxtest import MODE, SBX, TIME_SCALE, SbxTestCase, ledger_lines, sbx, wait_for

# Debian 12's PostgreSQL is 15; a newer one is found the same way (the newest installed).
PG_BIN = next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2])
                          if p.split("/")[-2].isdigit() else 0, reverse=True)), "/usr/lib/postgresql/15/bin")
ROOT = MODE == "root"
SERVER_USER = "sbxtest"


class PgServer:
    """A PostgreSQL server of this test's own: started in setUpClass, stopped and removed in
    tearDownClass (and by `stop` mid-test for the outage test)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sbxit-pg-")
        os.chmod(self.dir, 0o755)
        self.data = os.path.join(self.dir, "data")
        self.owner = SERVER_USER if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        if os.geteuid() == 0:
            shutil.chown(self.dir, self.owner)
        self.pg(["initdb", "-D", self.data, "-U", "postgres", "--auth-local=trust", "-E", "UTF8", "--no-sync"])
        with open(os.path.join(self.data, "pg_hba.conf"), "w") as f:
            # The superuser of the test logs in without a password; every other role with one.
            f.write("local all postgres trust\nlocal all all scram-sha-256\n")
        self.start()

    def pg(self, argv, check=True):
        cmd = [os.path.join(PG_BIN, argv[0])] + argv[1:]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", self.owner, "--"] + cmd
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
                           cwd=self.dir)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stdout[-3000:]}")
        return r

    def start(self):
        self.pg(["pg_ctl", "-D", self.data, "-w", "-l", os.path.join(self.dir, "log"), "-o",
                 f"-k {self.dir} -c listen_addresses='' -c fsync=off", "start"])

    def stop(self):
        self.pg(["pg_ctl", "-D", self.data, "-w", "-m", "fast", "stop"], check=False)

    def remove(self):
        self.stop()
        subprocess.run(["rm", "-rf", "--one-file-system", self.dir], check=False)

    def url(self, user="postgres"):
        return f"postgresql://{user}@/postgres?host={self.dir}"

    def sql(self, text, user="postgres", password=None, check=True):
        env = dict(os.environ, PGPASSWORD=password) if password else None
        r = subprocess.run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", self.dir, "-U", user,
                            "-d", "postgres", "-c", text], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=env, timeout=60)
        if check and r.returncode != 0:
            raise AssertionError(f"psql: {text}: {r.stderr}")
        return r


@unittest.skipUnless(os.path.exists(os.path.join(PG_BIN, "initdb")) and shutil.which("psql"),
                     "PostgreSQL's server is needed (make deps-test installs postgresql-15)")
class TraceDb(SbxTestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = PgServer()

    @classmethod
    def tearDownClass(cls):
        cls.server.remove()

    def setUp(self):
        super().setUp()
        # Each test mirrors into a database of its own: one test's rows never meet another's.
        self.db = "t_" + self.id().rsplit(".", 1)[-1][5:40].lower()
        self.server.sql(f'DROP DATABASE IF EXISTS "{self.db}"')
        self.server.sql(f'CREATE DATABASE "{self.db}"')

    def url(self, user="postgres"):
        return f"postgresql://{user}@/{self.db}?host={self.server.dir}"

    def sql(self, text, **kw):
        kw.setdefault("check", True)
        r = subprocess.run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", self.server.dir, "-U",
                            kw.get("user", "postgres"), "-d", self.db, "-c", text], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60,
                           env=dict(os.environ, PGPASSWORD=kw["password"]) if kw.get("password") else None)
        if kw["check"] and r.returncode != 0:
            raise AssertionError(f"psql: {text}: {r.stderr}")
        return r

    def node_env(self, node, **extra):
        return dict(os.environ, SBX_NODE=node, **extra)

    def local_hashes(self, state):
        return {l["seq"]: l["hash"] for l in ledger_lines(state)}

    def db_hashes(self, node, schema="sbx"):
        """The node's rows, seq -> hash; none while the schema is not there yet (a shipper still starting)."""
        r = self.sql(f"SELECT seq, hash FROM {schema}.records WHERE node = '{node}' ORDER BY seq", check=False)
        if r.returncode != 0:
            self.assertIn("does not exist", r.stderr)
            return {}
        rows = r.stdout.split()
        return {int(r.split("|")[0]): r.split("|")[1] for r in rows}

    def swap_seqs(self, node, a, b):
        self.sql(f"UPDATE sbx.records SET seq = -1 WHERE node = '{node}' AND seq = {a};"
                 f" UPDATE sbx.records SET seq = {a} WHERE node = '{node}' AND seq = {b};"
                 f" UPDATE sbx.records SET seq = {b} WHERE node = '{node}' AND seq = -1")

    def ship(self, state, env=None, extra=()):
        r = sbx(["--state-dir", state, "trace", "ship", "--db", self.url(), "--json"] + list(extra), env=env,
                timeout=120)
        self.assertExit(r, 0, "trace ship")
        return json.loads(r.out)

    def test_two_nodes_with_concurrent_runs_each_record_once(self):
        states = {n: self.path(n) for n in ("node-a", "node-b")}
        failures = []

        def runs(node):
            for i in range(8):
                r = sbx(["--state-dir", states[node], "run", "--trace-db", self.url(), "--", "/bin/echo", f"{node}-{i}"],
                        env=self.node_env(node), timeout=60)
                if r.rc != 0:
                    failures.append(r.describe())

        threads = [threading.Thread(target=runs, args=(n,)) for n in states for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(failures, [])
        for node, state in states.items():
            local = self.local_hashes(state)
            self.assertEqual(len(local), 16)
            # The detached shippers the runs started send everything; a ship by hand after them finds
            # nothing new, or the last lines a shipper had not reached yet, and never sends a line twice.
            wait_for(lambda: len(self.db_hashes(node)) == 16, 30, 0.2)
            rep = self.ship(state, env=self.node_env(node))
            self.assertEqual(rep["node"], node)
            self.assertEqual(rep["shipped"], 0, rep)
            self.assertEqual(self.db_hashes(node), local)
            r = sbx(["--state-dir", state, "trace", "verify", "--db", self.url(), "--against-ledger"],
                    env=self.node_env(node))
            self.assertExit(r, 0)
            self.assertIn("16 in the database with the same hashes", r.out)
        r = sbx(["trace", "verify", "--db", self.url(), "--json"])
        self.assertExit(r, 0)
        report = json.loads(r.out)
        self.assertTrue(report["intact"])
        self.assertEqual(sorted((n["node"], n["records"]) for n in report["nodes"]), [("node-a", 16), ("node-b", 16)])
        # Queried across nodes, and by node.
        r = sbx(["trace", "ls", "--db", self.url(), "--json", "-n", "100"])
        self.assertExit(r, 0)
        rows = json.loads(r.out)
        self.assertEqual(len(rows), 32)
        self.assertEqual({x["node"] for x in rows}, {"node-a", "node-b"})
        started = [x["started_at"] for x in rows]
        self.assertEqual(started, sorted(started, reverse=True))
        r = sbx(["trace", "ls", "--db", self.url(), "--json", "--node", "node-b", "--status", "ok"])
        self.assertEqual({x["node"] for x in json.loads(r.out)}, {"node-b"})
        self.assertEqual(len(json.loads(r.out)), 16)
        # show --db prints the record exactly as the node stored it.
        run_id = rows[0]["run_id"]
        node = rows[0]["node"]
        r = sbx(["trace", "show", "--db", self.url(), run_id])
        self.assertExit(r, 0)
        local = sbx(["--state-dir", states[node], "trace", "show", run_id])
        self.assertEqual(json.loads(r.out), json.loads(local.out))
        r = sbx(["trace", "show", "--db", self.url(), run_id[:24], "--node", node])
        self.assertExit(r, 0)
        self.assertEqual(json.loads(r.out)["run_id"], run_id)

    def test_database_down_during_100_runs_then_back(self):
        state = self.path("s")
        env = self.node_env("outage")
        # The first runs ship, so the node is registered before the outage.
        for i in range(3):
            self.assertExit(sbx(["--state-dir", state, "run", "--trace-db", self.url(), "--", "/bin/true"], env=env), 0)
        wait_for(lambda: len(self.db_hashes("outage")) == 3, 30, 0.2)
        self.server.stop()
        try:
            started = time.monotonic()
            for i in range(100):
                r = sbx(["--state-dir", state, "run", "--trace-db", self.url(), "--", "/bin/echo", str(i)], env=env)
                self.assertExit(r, 0, "a run while the trace database is down")
                self.assertEqual(r.out, f"{i}\n")
            note_s = time.monotonic() - started
            r = sbx(["--state-dir", state, "trace", "ship", "--db", self.url()], env=env)
            self.assertExit(r, 1, "trace ship while the database is down")
            self.assertIn("cannot connect to the trace database", r.err)
        finally:
            self.server.start()
        self.assertLess(note_s, 100 * 2.0, "runs slowed down by the database's absence")
        rep = self.ship(state, env=env)
        local = self.local_hashes(state)
        self.assertEqual(len(local), 103)
        # Every line arrived (by this ship, or by a shipper a last run left waiting), each once and in order.
        self.assertLessEqual(rep["shipped"], 100, rep)
        self.assertEqual(self.db_hashes("outage"), local)
        order = self.sql("SELECT string_agg(seq::text, ',' ORDER BY shipped_at, seq) FROM sbx.records"
                         " WHERE node = 'outage'").stdout.strip()
        self.assertEqual([int(s) for s in order.split(",")], list(range(1, 104)))
        self.assertEqual(self.ship(state, env=env)["shipped"], 0, "a second ship sends nothing again")
        r = sbx(["trace", "verify", "--db", self.url()])
        self.assertExit(r, 0)
        self.assertIn("intact: node outage: 103 record(s)", r.out)

    def test_a_record_edited_or_deleted_in_the_database_is_named(self):
        state = self.path("s")
        env = self.node_env("victim")
        for word in ("alpha", "bravo", "charlie", "delta"):
            self.assertExit(sbx(["--state-dir", state, "run", "--", "/bin/echo", word], env=env), 0)
        self.ship(state, env=env)
        self.assertExit(sbx(["trace", "verify", "--db", self.url()]), 0)
        # An auditor's nightmare: a row's record rewritten in place, its hash column untouched.
        self.sql("UPDATE sbx.records SET record = replace(record, 'bravo', 'BRAVO') WHERE node = 'victim' AND seq = 2")
        r = sbx(["trace", "verify", "--db", self.url()])
        self.assertExit(r, 1)
        self.assertIn("node victim", r.err)
        self.assertIn("seq 2: edited", r.err)
        r = sbx(["--state-dir", state, "trace", "verify", "--db", self.url(), "--against-ledger"], env=env)
        self.assertExit(r, 1)
        self.assertIn("seq 2", r.err)
        self.assertIn("edited in the database", r.err)
        self.sql("UPDATE sbx.records SET record = replace(record, 'BRAVO', 'bravo') WHERE node = 'victim' AND seq = 2")
        self.assertExit(sbx(["trace", "verify", "--db", self.url()]), 0)
        # show --db shows only a row that hashes to its hash.
        run2 = self.sql("SELECT run_id FROM sbx.records WHERE node = 'victim' AND seq = 2").stdout.strip()
        self.sql("UPDATE sbx.records SET record = replace(record, 'bravo', 'BRAVO') WHERE node = 'victim' AND seq = 2")
        r = sbx(["trace", "show", "--db", self.url(), run2])
        self.assertExit(r, 1)
        self.assertIn("edited in the database", r.err)
        self.assertNotIn("BRAVO", r.out)
        self.sql("UPDATE sbx.records SET record = replace(record, 'BRAVO', 'bravo') WHERE node = 'victim' AND seq = 2")
        # The columns trace ls filters on are checked against the record: a status changed, record untouched.
        self.sql("UPDATE sbx.records SET status = 'oom' WHERE node = 'victim' AND seq = 4")
        r = sbx(["trace", "verify", "--db", self.url()])
        self.assertExit(r, 1)
        self.assertIn("seq 4", r.err)
        self.assertIn("status column differs from its record's", r.err)
        self.sql("UPDATE sbx.records SET status = 'ok' WHERE node = 'victim' AND seq = 4")
        self.assertExit(sbx(["trace", "verify", "--db", self.url()]), 0)
        # Deleted, and reordered (two rows' seqs swapped: each hash covers its seq).
        self.sql("DELETE FROM sbx.records WHERE node = 'victim' AND seq = 3")
        r = sbx(["trace", "verify", "--db", self.url()])
        self.assertExit(r, 1)
        self.assertIn("record seq 3 is missing", r.err)
        r = sbx(["--state-dir", state, "trace", "verify", "--db", self.url(), "--against-ledger"], env=env)
        self.assertIn("seq 3", r.err)
        self.assertIn("deleted from the database", r.err)
        self.swap_seqs("victim", 1, 2)
        r = sbx(["trace", "verify", "--db", self.url()])
        self.assertExit(r, 1)
        self.assertIn("seq 1: edited", r.err)
        # A row inserted for a seq the node never wrote is found as well (its hash does not chain).
        self.swap_seqs("victim", 1, 2)
        self.sql("INSERT INTO sbx.records(node, seq, run_id, prev, hash, record, record_bytes)"
                 " SELECT node, 3, run_id, hash, repeat('ab', 32), record, record_bytes FROM sbx.records"
                 " WHERE node = 'victim' AND seq = 2")
        r = sbx(["trace", "verify", "--db", self.url()])
        self.assertExit(r, 1)
        self.assertIn("seq 3", r.err)

    def test_signed_node_a_hash_recomputed_in_the_database_fails_its_signature(self):
        state = self.path("s")
        config = self.path("config")
        os.mkdir(config, 0o700)
        env = self.node_env("signer", XDG_CONFIG_HOME=config)
        made = sbx(["key", "init", "--json"], env=env)
        self.assertExit(made, 0)
        fingerprint = json.loads(made.out)["fingerprint"]
        for word in ("one", "two", "three"):
            self.assertExit(sbx(["--state-dir", state, "run", "--", "/bin/echo", word], env=env), 0)
        self.ship(state, env=env)
        self.assertIn("BEGIN PUBLIC KEY", self.sql("SELECT pubkey FROM sbx.nodes WHERE node = 'signer'").stdout)
        r = sbx(["trace", "verify", "--db", self.url()])
        self.assertExit(r, 0)
        # The key's fingerprint, as `key init` printed it, for an auditor to compare with one kept elsewhere.
        self.assertIn("3 signed by key " + fingerprint[:23] + "...", r.out)
        r = sbx(["trace", "verify", "--db", self.url(), "--json"])
        self.assertEqual(json.loads(r.out)["nodes"][0]["signatures"]["key_fingerprint"], fingerprint)
        # The forger edits the last record and recomputes its hash the way sbx does: the chain is
        # whole again; only the node's signature, checked with the key registered at its first ship, says no.
        seq, run_id, prev, record = self.sql(
            "SELECT seq, run_id, prev, record FROM sbx.records WHERE node = 'signer' AND seq = 3").stdout.rstrip(
                "\n").split("|", 3)
        forged = record.replace("three", "THREE")
        h = hashlib.sha256(f"sbx.ledger/v1\n{seq}\n{run_id}\n{prev}\n{forged}".encode()).hexdigest()
        self.sql(f"UPDATE sbx.records SET record = $q${forged}$q$, hash = '{h}' WHERE node = 'signer' AND seq = 3")
        r = sbx(["trace", "verify", "--db", self.url()])
        self.assertExit(r, 1)
        self.assertIn("signature does not verify", r.err)

    def test_signed_node_columns_bloat_and_a_cut_start(self):
        state = self.path("s")
        config = self.path("config")
        os.mkdir(config, 0o700)
        env = self.node_env("signer", XDG_CONFIG_HOME=config)
        self.assertExit(sbx(["key", "init", "--json"], env=env), 0)
        for word in ("one", "two", "three", "four"):
            self.assertExit(sbx(["--state-dir", state, "run", "--", "/bin/echo", word], env=env), 0)
        self.ship(state, env=env)
        self.assertExit(sbx(["trace", "verify", "--db", self.url()]), 0)
        # The command column, which `trace ls --db` prints, is checked against the record like the
        # others (the chain and the signature cover only the record).
        self.sql("UPDATE sbx.records SET command = 'echo harmless' WHERE node = 'signer' AND seq = 2")
        self.assertIn("echo harmless", sbx(["trace", "ls", "--db", self.url()]).out)
        r = sbx(["trace", "verify", "--db", self.url()])
        self.assertExit(r, 1)
        self.assertIn("seq 2", r.err)
        self.assertIn("command column differs from its record's", r.err)
        # A column that only begins with the record's value differs too.
        self.sql("UPDATE sbx.records SET command = '/bin/echo two' || repeat(' ', 5000) WHERE node = 'signer' AND seq = 2")
        r = sbx(["trace", "verify", "--db", self.url()])
        self.assertExit(r, 1)
        self.assertIn("command column differs", r.err)
        self.sql("UPDATE sbx.records SET command = '/bin/echo two' WHERE node = 'signer' AND seq = 2")
        self.assertExit(sbx(["trace", "verify", "--db", self.url()]), 0)
        self.sql("UPDATE sbx.records SET record_bytes = record_bytes + 1 WHERE node = 'signer' AND seq = 3")
        r = sbx(["trace", "verify", "--db", self.url()])
        self.assertExit(r, 1)
        self.assertIn("record_bytes column differs", r.err)
        self.sql("UPDATE sbx.records SET record_bytes = record_bytes - 1 WHERE node = 'signer' AND seq = 3")
        # A bloated public key is refused without sbx buffering it (bounded in the SQL).
        key = self.sql("SELECT pubkey FROM sbx.nodes WHERE node = 'signer'").stdout.rstrip("\n")
        self.sql("UPDATE sbx.nodes SET pubkey = repeat('A', 100000000) WHERE node = 'signer'")
        # Its peak memory is the verify's own, not an address-space limit: a sanitizer build
        # reserves terabytes of shadow address space and would not start under one. A child's
        # ru_maxrss starts from the memory of the process it was forked (or vforked) from, and
        # this test process holds the 100 MB key: a fresh small interpreter starts the verify and
        # reports its children's peak.
        peak_of_child = ("import resource, subprocess, sys\n"
                         "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
                         "print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
        p = subprocess.run([sys.executable, "-c", peak_of_child, SBX, "trace", "verify", "--db", self.url()],
                           capture_output=True, text=True, timeout=120 * TIME_SCALE)
        rc, maxrss = (int(x) for x in p.stdout.split())
        err = p.stderr
        p.returncode = rc
        self.assertEqual(p.returncode, 125, err)
        self.assertIn("public key in the trace database is 100000000 bytes, over the", err)
        if TIME_SCALE == 1:  # ASan's allocator keeps what was freed (its quarantine): no bound there
            self.assertLess(maxrss, 100 * 1024, f"verify buffered the bloated key: {maxrss} KiB")
        self.sql(f"UPDATE sbx.nodes SET pubkey = $q${key}$q$ WHERE node = 'signer'")
        self.assertExit(sbx(["trace", "verify", "--db", self.url()]), 0)
        # The first rows deleted and the node's start rewritten: the chain verifies from there, and
        # the verdict says only what the database can tell.
        seq2 = self.sql("SELECT prev, hash FROM sbx.records WHERE node = 'signer' AND seq = 2").stdout.strip().split("|")
        self.sql("DELETE FROM sbx.records WHERE node = 'signer' AND seq = 1;"
                 f" UPDATE sbx.nodes SET first_seq = 2, first_prev = '{seq2[0]}', first_hash = '{seq2[1]}'"
                 " WHERE node = 'signer'")
        r = sbx(["trace", "verify", "--db", self.url()])
        self.assertExit(r, 0)
        self.assertIn("its chain starts at seq 2 in the database; earlier records are not there: only "
                      "--against-ledger can tell whether they were pruned or deleted", r.out)
        self.assertNotIn("pruned before", r.out)
        r = sbx(["--state-dir", state, "trace", "verify", "--db", self.url(), "--against-ledger"], env=env)
        self.assertExit(r, 1)

    def test_tenants_schemas_and_roles(self):
        tenants = self.path("tenants")
        os.mkdir(tenants)
        for name, slot in (("alpha", 1), ("beta", 2)):
            with open(os.path.join(tenants, name + ".json"), "w") as f:
                json.dump({"id_slot": slot, "separate_ids": "preferred", "images": ["host"]}, f)
        # The layout man sbx-trace(1) gives: the nodes' role writes every tenant's schema; each
        # tenant's auditor role may read its own schema only.
        self.sql("DROP ROLE IF EXISTS sbx_node; DROP ROLE IF EXISTS alpha_audit; DROP ROLE IF EXISTS beta_audit")
        self.sql("CREATE ROLE sbx_node LOGIN PASSWORD 'node-pw'; CREATE ROLE alpha_audit LOGIN PASSWORD 'alpha-pw';"
                 " CREATE ROLE beta_audit LOGIN PASSWORD 'beta-pw'")
        for t in ("alpha", "beta"):
            self.sql(f"CREATE SCHEMA sbx_tenant_{t} AUTHORIZATION sbx_node;"
                     f" GRANT USAGE ON SCHEMA sbx_tenant_{t} TO {t}_audit;"
                     f" ALTER DEFAULT PRIVILEGES FOR ROLE sbx_node IN SCHEMA sbx_tenant_{t}"
                     f" GRANT SELECT ON TABLES TO {t}_audit")
        state = self.path("s")
        env = dict(os.environ, SBX_TENANTS_DIR=tenants, SBX_NODE="shared-node", PGPASSWORD="node-pw")
        for t in ("alpha", "beta"):
            r = sbx(["--state-dir", state, "run", "--tenant", t, "--trace-db", self.url("sbx_node"), "--",
                     "/bin/echo", f"secret-of-{t}"], env=env)
            self.assertExit(r, 0)
            r = sbx(["--state-dir", state, "trace", "ship", "--tenant", t, "--db", self.url("sbx_node")], env=env)
            self.assertExit(r, 0)
            self.assertIn(f"schema sbx_tenant_{t}", r.out)
        # Each tenant's records are in its own schema, and only there.
        self.assertEqual(self.sql("SELECT count(*) FROM sbx_tenant_alpha.records").stdout.strip(), "1")
        self.assertIn("secret-of-alpha", self.sql("SELECT record FROM sbx_tenant_alpha.records").stdout)
        self.assertNotIn("secret-of-beta", self.sql("SELECT record FROM sbx_tenant_alpha.records").stdout)
        self.assertEqual(self.sql("SELECT count(*) FROM pg_tables WHERE schemaname = 'sbx'").stdout.strip(), "0")
        # alpha's auditor reads alpha's records ...
        audit = dict(os.environ, PGPASSWORD="alpha-pw")
        r = sbx(["trace", "ls", "--db", self.url("alpha_audit"), "--tenant", "alpha", "--json"], env=audit)
        self.assertExit(r, 0)
        self.assertEqual(len(json.loads(r.out)), 1)
        self.assertExit(sbx(["trace", "verify", "--db", self.url("alpha_audit"), "--tenant", "alpha"], env=audit), 0)
        # ... and cannot read beta's: not through sbx, not with SQL.
        r = sbx(["trace", "ls", "--db", self.url("alpha_audit"), "--tenant", "beta"], env=audit)
        self.assertRefused(r, "permission denied")
        r = self.sql("SELECT record FROM sbx_tenant_beta.records", user="alpha_audit", password="alpha-pw", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("permission denied for schema sbx_tenant_beta", r.stderr)
        # Without its password a role is not let in; the password never goes in the URL.
        r = sbx(["trace", "ls", "--db", self.url("alpha_audit"), "--tenant", "alpha"],
                env={k: v for k, v in os.environ.items() if k != "PGPASSWORD"})
        self.assertRefused(r, "cannot connect to the trace database")
        r = sbx(["trace", "ls", "--db", f"postgresql://alpha_audit:alpha-pw@/{self.db}?host={self.server.dir}",
                 "--tenant", "alpha"])
        line = self.assertRefused(r, "PGPASSWORD")
        self.assertNotIn("alpha-pw", line)
        # A password file (PGPASSFILE) serves as well.
        passfile = self.path("pgpass")
        with open(passfile, "w") as f:
            f.write(f"*:*:*:alpha_audit:alpha-pw\n")
        os.chmod(passfile, 0o600)
        r = sbx(["trace", "ls", "--db", self.url("alpha_audit"), "--tenant", "alpha"],
                env=dict({k: v for k, v in os.environ.items() if k != "PGPASSWORD"}, PGPASSFILE=passfile))
        self.assertExit(r, 0)

    def test_a_password_in_the_url_refuses_the_run_and_none_reaches_the_sandbox(self):
        r = sbx(["--state-dir", self.path("s"), "run", "--trace-db", "postgresql://u:hunter2@/db?host=/nowhere", "--",
                 "/bin/true"])
        line = self.assertRefused(r, "password", "PGPASSWORD")
        self.assertNotIn("hunter2", line)
        r = sbx(["--state-dir", self.path("s"), "run", "--trace-db", "not a url", "--", "/bin/true"])
        self.assertRefused(r, "trace_db")
        # The database's password is the operator's, never the sandbox's.
        r = sbx(["--state-dir", self.path("s"), "run", "--trace-db", self.url(), "--", "/usr/bin/env"],
                env=dict(os.environ, PGPASSWORD="s3cret-pw", SBX_NODE="envcheck"))
        self.assertExit(r, 0)
        self.assertNotIn("s3cret-pw", r.out)
        self.assertNotIn("PGPASSWORD", r.out)

    def test_the_shipper_holds_none_of_the_callers_descriptors(self):
        # A caller waits for EOF on a pipe it handed sbx (a make jobserver, a lock, --events fd:N):
        # the detached shipper must not keep it open. The ship lock is held here, so the shipper
        # waits (up to 120 s) while the caller reads.
        import fcntl
        state = self.path("s")
        env = self.node_env("fds")
        self.assertExit(sbx(["--state-dir", state, "run", "--", "/bin/true"], env=env), 0)
        lock = open(os.path.join(state, "traces", "ship.lock"), "a")
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            rd, wr = os.pipe()
            r = sbx(["--state-dir", state, "run", "--trace-db", self.url(), "--", "/bin/true"], env=env, pass_fds=(wr,))
            os.close(wr)
            self.assertExit(r, 0)
            wait_for(lambda: subprocess.run(["pgrep", "-f", "trace ship --background"], stdout=subprocess.DEVNULL)
                     .returncode == 0, 10, 0.05)
            os.set_blocking(rd, False)
            eof = wait_for(lambda: self._eof(rd), 5, 0.05)
            self.assertTrue(eof, "the pipe stayed open: the shipper inherited its write end")
            os.close(rd)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            lock.close()
        wait_for(lambda: len(self.db_hashes("fds")) == 2, 30, 0.2)
        self.assertEqual(len(self.db_hashes("fds")), 2)

    @staticmethod
    def _eof(fd):
        try:
            return os.read(fd, 1) == b""
        except BlockingIOError:
            return False

    def test_schema_versions_upgrade_and_refusal(self):
        state = self.path("s")
        env = self.node_env("versions")
        self.assertExit(sbx(["--state-dir", state, "run", "--", "/bin/true"], env=env), 0)
        self.ship(state, env=env)
        self.assertEqual(self.sql("SELECT value FROM sbx.meta WHERE key = 'schema_version'").stdout.strip(), "2")
        # A database of version 1 (before the query indexes): a newer sbx upgrades it when it ships.
        self.sql("DROP INDEX sbx.records_by_time, sbx.records_by_status, sbx.records_limit_events;"
                 " UPDATE sbx.meta SET value = '1' WHERE key = 'schema_version'")
        self.assertExit(sbx(["--state-dir", state, "run", "--", "/bin/true"], env=env), 0)
        rep = self.ship(state, env=env)
        self.assertEqual(rep["shipped"], 1)
        self.assertEqual(self.sql("SELECT value FROM sbx.meta WHERE key = 'schema_version'").stdout.strip(), "2")
        self.assertEqual(self.sql("SELECT count(*) FROM pg_indexes WHERE schemaname = 'sbx' AND indexname IN"
                                  " ('records_by_time', 'records_by_status', 'records_limit_events')").stdout.strip(),
                         "3")
        # A database a newer sbx wrote: this one refuses to ship to it or read it, saying why.
        self.sql("UPDATE sbx.meta SET value = '99' WHERE key = 'schema_version'")
        r = sbx(["--state-dir", state, "trace", "ship", "--db", self.url()], env=env)
        self.assertExit(r, 1)
        self.assertIn("version 99, newer than this sbx writes (2)", r.err)
        r = sbx(["trace", "ls", "--db", self.url()])
        self.assertRefused(r, "version 99, newer than this sbx writes (2)")
        self.sql("UPDATE sbx.meta SET value = '2' WHERE key = 'schema_version'")

    def test_limit_events_status_and_image_filters(self):
        state = self.path("s")
        env = self.node_env("filters")
        self.assertExit(sbx(["--state-dir", state, "run", "--timeout", "200ms", "--", "/bin/sleep", "5"], env=env), 124)
        self.assertExit(sbx(["--state-dir", state, "run", "--", "/bin/true"], env=env), 0)
        self.assertExit(sbx(["--state-dir", state, "run", "--", "/bin/false"], env=env), 1)
        self.ship(state, env=env)
        r = sbx(["trace", "ls", "--db", self.url(), "--limit-events", "--json"])
        self.assertExit(r, 0)
        self.assertEqual([x["status"] for x in json.loads(r.out)], ["timeout"])
        r = sbx(["trace", "ls", "--db", self.url(), "--status", "exit_nonzero", "--json"])
        self.assertEqual([x["exit_code"] for x in json.loads(r.out)], [1])
        r = sbx(["trace", "ls", "--db", self.url(), "--image", "host", "--json", "--since", "1h"])
        self.assertEqual(len(json.loads(r.out)), 3)
        r = sbx(["trace", "ls", "--db", self.url(), "-n", "2"])
        self.assertExit(r, 0)
        self.assertEqual(len(r.out.splitlines()), 3)  # the header and two runs
        self.assertIn("only the newest 2", r.err)
        self.assertRefused(sbx(["trace", "ls", "--node", "x"]), "--db")


if __name__ == "__main__":
    unittest.main()
