#!/usr/bin/env python3
"""The trace database (PostgreSQL) at scale: queries over 1,000,000 records, and what shipping costs.

Usage:
    python3 bench/trace_db.py [--sbx build/sbx] [--records 1000000] [--nodes 20] [--runs 7]
                              [--overhead-runs 40] [--ship-records 1000] [--json OUT]

Needs PostgreSQL 15's server binaries (Debian: postgresql-15, /usr/lib/postgresql/15/bin; another
directory with --pg-bin) and python3; no Python packages. It touches no existing cluster: it makes
its own in a temporary directory (initdb, trust auth, superuser postgres), listening only on a unix
socket in that directory (listen_addresses=''). PostgreSQL refuses to run as root, so as root the
cluster is made and run by the unprivileged user sbxtest (--pg-user) through `runuser`. The server
is stopped and the directory removed at the end, also after an error or Ctrl-C.

1. The schema: `sbx run --trace-db URL -- /bin/true` a few times in a state dir, then `sbx trace
   ship --db URL` (sbx creates schema "sbx" on its first ship).
2. N records made by SQL (INSERT ... SELECT FROM generate_series, in batches), spread over --nodes
   nodes and 60 days ending now: mostly ok, a few percent exit_nonzero, timeout, oom, output_limit
   and seccomp_violation; half with one of 30 packs (3 versions each, sha256 digests, a skewed
   popularity), 9 images and host; and one pack and one image that only the oldest 5 days used. Run
   ids, started_at and a ~450-byte JSON record as sbx writes them. Each row hashes to its hash as
   sbx computes it (runtime/record/trace_ledger.cpp, ledger_hash: `trace show --db` checks it), but
   the chains do not link (prev is made up): only the queries are timed, not a verify.
   Then VACUUM (ANALYZE) and a CHECKPOINT, so that autovacuum and the checkpointer stay out of the
   timings.
3. Each query through the real CLI (`sbx trace ls/show --db URL ...`: the wall time of the whole
   process, connecting included), one warm-up then --runs timed runs, p50 and max; and the same
   SELECT that sbx sends (runtime/record/trace_mirror.cpp, where_of and query_trace_db) under
   EXPLAIN (ANALYZE, FORMAT JSON) through psql: the server's planning + execution time and the
   plan's node types. Packs and images: the most used (NAME), the least used pack version (RARE)
   and the old ones (OLD), in the forms sbx accepts (NAME, NAME@VERSION, sha256:DIGEST). Target: every query under 100 ms at 1,000,000
   records.
4. What --trace-db adds to a run: `sbx run -- /bin/true` against `sbx run --trace-db URL --
   /bin/true` (hyperfine -N in one session if installed, else an interleaved loop), and how fast
   `sbx trace ship` catches up --ship-records unshipped records of one store.
"""
import argparse
import hashlib
import json
import os
import pwd
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone

TARGET_MS = 100.0
# runtime/record/trace_mirror.cpp's run_columns(): text columns cut in the SQL.
KRUN_COLUMNS = ("node, seq, left(run_id, 256), left(started_at, 256), left(status, 256), exit_code, wall_ms, "
                "left(command, 4096), left(pack, 4096), left(pack_version, 4096), left(pack_digest, 4096), "
                "left(image, 4096), left(image_digest, 4096)")
PACKS = ["invoice-extract", "pii-redact", "csv-validate", "log-triage", "contract-clauses", "sql-lint",
         "resume-parse", "email-classify", "receipt-ocr", "address-normalize", "sentiment", "translate-check",
         "json-schema-fix", "code-review", "license-scan", "dep-audit", "sbom-diff", "unit-test-gen",
         "markdown-toc", "table-extract", "kyc-check", "fraud-score", "geo-tag", "phone-format",
         "date-normalize", "dedupe", "entity-link", "summary", "spell-check", "price-compare"]
OLD_PACK, OLD_IMAGE = "legacy-import", "centos:7"  # used only in the oldest 5 days (the last two entries)
PACKS.append(OLD_PACK)
VERSIONS = ["1.0.0", "1.1.0", "2.0.3"]
IMAGES = ["debian-bookworm-python3:2026-11", "python:3.12-slim", "busybox:1.36", "node:22-slim",
          "ubuntu:24.04", "alpine:3.20", "rust:1.83", "golang:1.23", "r-base:4.4", OLD_IMAGE]  # and "host"
COMMANDS = ["/bin/true", "python3 main.py", "sh -c make test", "node index.js", "python3 -c print(1)",
            "bash run.sh", "pytest -q", "cargo test", "go test ./...", "Rscript analysis.R",
            "sh -c ./configure && make", "ls -la /in"]


def q(s):
    """A SQL string literal."""
    return "'" + str(s).replace("'", "''") + "'"


def arr(xs):
    return "ARRAY[" + ", ".join(q(x) for x in xs) + "]"


def is_sha256_hex(s):
    return len(s) == 64 and all(c in "0123456789abcdef" for c in s)


class Bench:
    def __init__(self, a):
        self.a = a
        self.sbx = os.path.abspath(a.sbx)
        self.pg_bin = a.pg_bin
        self.tmp = None
        self.pgdir = None
        self.started = False
        self.as_user = None
        self.url = None
        self.out = {"records": a.records, "nodes": a.nodes}

    # ---- the cluster -------------------------------------------------------------------------
    def pg_cmd(self, args):
        cmd = [os.path.join(self.pg_bin, args[0])] + args[1:]
        return (["runuser", "-u", self.as_user, "--"] + cmd) if self.as_user else cmd

    def start_cluster(self):
        # The state dirs must be the invoking user's (sbx refuses a directory below another user's):
        # tmp stays ours (0711, so the server's user can pass), tmp/pg is the server's.
        self.tmp = tempfile.mkdtemp(prefix="sbx-trace-db.")
        os.chmod(self.tmp, 0o711)
        # A copy is timed: a rebuild of build/sbx during the run must not change the binary under it.
        shutil.copy2(self.sbx, os.path.join(self.tmp, "sbx"))
        self.sbx = os.path.join(self.tmp, "sbx")
        with open(self.sbx, "rb") as f:
            self.out["sbx_sha256"] = hashlib.sha256(f.read()).hexdigest()
        print(f"sbx: {self.a.sbx} (sha256 {self.out['sbx_sha256'][:12]}, copied), {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.2f}")
        self.pgdir = os.path.join(self.tmp, "pg")
        os.mkdir(self.pgdir, 0o700)
        if os.geteuid() == 0:
            self.as_user = self.a.pg_user
            pw = pwd.getpwnam(self.as_user)
            os.chown(self.pgdir, pw.pw_uid, pw.pw_gid)
        data = os.path.join(self.pgdir, "data")
        subprocess.run(self.pg_cmd(["initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
                                    "--locale", self.a.locale, "--no-sync"]),
                       cwd=self.pgdir, check=True, stdout=subprocess.DEVNULL, start_new_session=True)
        self.started = True  # from here on, stop it whatever happens
        # Its own session: a Ctrl-C reaches this script, whose finally stops the server.
        subprocess.run(self.pg_cmd(["pg_ctl", "-D", data, "-l", os.path.join(self.pgdir, "log"), "-w", "-t", "60",
                                    "-o", f"-c listen_addresses='' -k {self.pgdir} -p {self.a.port}", "start"]),
                       cwd=self.pgdir, check=True, stdout=subprocess.DEVNULL, start_new_session=True)
        self.url = f"postgresql://postgres@/postgres?host={self.pgdir}&port={self.a.port}"
        ver = self.psql("SHOW server_version").strip()
        print(f"PostgreSQL {ver} in {self.pgdir} (unix socket only, locale {self.a.locale}), URL {self.url}")
        self.out["postgres"] = ver

    def stop_cluster(self):
        if self.started:
            data = os.path.join(self.pgdir, "data")
            r = subprocess.run(self.pg_cmd(["pg_ctl", "-D", data, "-m", "fast", "-w", "-t", "60", "stop"]),
                               cwd=self.pgdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
            if r.returncode != 0 and os.path.exists(os.path.join(data, "postmaster.pid")):
                subprocess.run(self.pg_cmd(["pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"]), cwd=self.pgdir,
                               stdout=subprocess.DEVNULL, start_new_session=True)
            self.started = False
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def psql(self, sql, quiet=True):
        r = subprocess.run([os.path.join(self.pg_bin, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                            "-d", self.url], input=sql, text=True, capture_output=True)
        if r.returncode != 0:
            raise RuntimeError(f"psql failed ({r.returncode}): {r.stderr.strip()}\nSQL: {sql[:500]}")
        return r.stdout

    # ---- sbx ---------------------------------------------------------------------------------
    def state(self, name):
        d = os.path.join(self.tmp, name)
        os.makedirs(d, mode=0o700, exist_ok=True)
        return d

    def sbx_run(self, args, check=True):
        r = subprocess.run([self.sbx] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"sbx {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
        return r

    def shippers(self):
        """The detached shippers (`sbx trace ship --background`) of this script's state dirs."""
        pids = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if b"--background" in argv and any(x.startswith(self.tmp.encode() + b"/") for x in argv):
                pids.append(int(p))
        return pids

    def wait_shippers(self, timeout=60.0):
        end = time.monotonic() + timeout
        while self.shippers():
            if time.monotonic() > end:
                return False
            time.sleep(0.05)
        return True

    def end_shippers(self):
        if self.tmp and not self.wait_shippers(30):
            for pid in self.shippers():
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            self.wait_shippers(10)

    # ---- 1. schema ---------------------------------------------------------------------------
    def make_schema(self):
        s = self.state("state-db")
        for _ in range(3):
            self.sbx_run(["--state-dir", s, "run", "--trace-db", self.url, "--", "/bin/true"])
        self.wait_shippers()
        r = self.sbx_run(["--state-dir", s, "trace", "ship", "--db", self.url])
        print(r.stdout.strip())
        v = self.psql("SELECT value FROM sbx.meta WHERE key = 'schema_version'").strip()
        print(f"schema sbx at version {v}")

    # ---- 2. the records ----------------------------------------------------------------------
    def generate(self):
        n, nodes = self.a.records, self.a.nodes
        end = datetime.now(timezone.utc).replace(microsecond=0, tzinfo=None) - timedelta(minutes=1)
        span_ms = 60 * 86_400_000
        start = end - timedelta(milliseconds=span_ms)
        step = max(1, span_ms // n)
        nodes_sql = "".join(
            f"('node-{i:02d}', 1, repeat('0', 64), md5('h:node-{i:02d}:1') || md5('H:node-{i:02d}:1')),"
            for i in range(1, nodes + 1)).rstrip(",")
        self.psql(f"INSERT INTO sbx.nodes(node, first_seq, first_prev, first_hash) VALUES {nodes_sql}")

        def u(salt, m):  # a deterministic draw in [0, m) per row
            return f"mod(hashtext('{salt}' || g)::bigint + 2147483648, {m})"

        old = f"(g - 1) * {step}::bigint < {5 * 86_400_000}"

        def batch(lo, hi):
            return f"""
SET TimeZone = 'UTC';
SET synchronous_commit = off;
INSERT INTO sbx.records(node, seq, run_id, prev, hash, sig, record, record_bytes, started_at, status, exit_code,
                        wall_ms, command, pack, pack_version, pack_digest, image, image_digest)
SELECT node, seq, run_id, prev,
       encode(sha256(convert_to('sbx.ledger/v1' || chr(10) || seq || chr(10) || run_id || chr(10) || prev || chr(10)
                                || rec, 'UTF8')), 'hex'),
       NULL, rec, octet_length(rec), started_at, status, exit_code, wall_ms,
       command, pack, pack_version, pack_digest, image, image_digest
FROM (
  SELECT b.*, json_build_object(
      'schema', 'sbx.trace/v1', 'run_id', run_id, 'started_at', started_at,
      'invocation', json_build_object('spec', json_build_object('argv', string_to_array(command, ' ')),
        'pack', CASE WHEN pack = '' THEN NULL
                ELSE json_build_object('name', pack, 'version', pack_version, 'digest', pack_digest) END),
      'image', json_build_object('name', image, 'digest', NULLIF(image_digest, '')),
      'result', json_build_object('status', status, 'exit_code', exit_code),
      'usage', json_build_object('wall_ms', wall_ms, 'cpu_user_ms', wall_ms / 3))::text AS rec
  FROM (
    SELECT a.*,
      to_char(ts, 'YYYYMMDD"T"HH24MISS.MS"Z"') || '-' || substr(md5('r' || g), 1, 8) AS run_id,
      to_char(ts, 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS started_at,
      md5('h:' || node || ':' || seq) || md5('H:' || node || ':' || seq) AS hash,
      CASE WHEN seq = 1 THEN repeat('0', 64)
           ELSE md5('h:' || node || ':' || (seq - 1)) || md5('H:' || node || ':' || (seq - 1)) END AS prev,
      CASE WHEN rs < 9300 THEN 'ok' WHEN rs < 9650 THEN 'exit_nonzero' WHEN rs < 9800 THEN 'timeout'
           WHEN rs < 9880 THEN 'oom' WHEN rs < 9940 THEN 'output_limit' ELSE 'seccomp_violation' END AS status,
      CASE WHEN rs < 9300 THEN 0 WHEN rs < 9650 THEN 1 + rw % 2 ELSE NULL END AS exit_code,
      CASE WHEN rs < 9300 THEN 3 + floor(power(rw / 100000.0, 3) * 20000)::bigint
           WHEN rs < 9650 THEN 5 + rw % 3000 WHEN rs < 9800 THEN 30000 + rw % 40
           ELSE 50 + rw % 8000 END AS wall_ms,
      CASE WHEN pk IS NULL THEN ({arr(COMMANDS)})[1 + rc] ELSE 'python3 /pack/main.py' END AS command,
      coalesce(({arr(PACKS)})[pk], '') AS pack,
      CASE WHEN pk IS NULL THEN '' ELSE ({arr(VERSIONS)})[1 + rv] END AS pack_version,
      CASE WHEN pk IS NULL THEN ''
           ELSE 'sha256:' || md5('pack:' || pk || ':' || rv) || md5('PACK:' || pk || ':' || rv) END AS pack_digest,
      CASE WHEN im IS NULL THEN 'host' ELSE ({arr(IMAGES)})[im] END AS image,
      CASE WHEN im IS NULL THEN '' ELSE 'sha256:' || md5('image:' || im) || md5('IMAGE:' || im) END AS image_digest
    FROM (
      SELECT g, 'node-' || lpad(((g - 1) % {nodes} + 1)::text, 2, '0') AS node, (g - 1) / {nodes} + 1 AS seq,
        timestamp {q(start.strftime('%Y-%m-%d %H:%M:%S'))}
          + ((g - 1) * {step}::bigint + {u('j', step)}) * interval '1 millisecond' AS ts,
        {u('s', 10000)} AS rs, {u('w', 100000)} AS rw, {u('c', len(COMMANDS))} AS rc, {u('v', 3)} AS rv,
        -- half the runs with a pack, the popular ones far more often (pack 1 ~9% of all runs, pack 30 ~0.8%)
        -- and a pack and an image that only the oldest 5 days used (their newest runs are 55 days old)
        CASE WHEN {u('p', 10000)} < 5000 THEN NULL WHEN {old} AND {u('l', 50)} = 0 THEN {len(PACKS)}
             ELSE 1 + floor({len(PACKS) - 1} * power(({u('p', 10000)} - 5000) / 5000.0, 2))::int END AS pk,
        CASE WHEN {old} AND {u('m', 50)} = 0 THEN {len(IMAGES)} WHEN {u('i', 10000)} < 4000 THEN NULL
             ELSE 1 + floor({len(IMAGES) - 1} * power(({u('i', 10000)} - 4000) / 6000.0, 2))::int END AS im
      FROM generate_series({lo}, {hi}) g) a) b) c;
"""

        t0 = time.monotonic()
        per = 100_000
        for lo in range(1, n + 1, per):
            hi = min(n, lo + per - 1)
            self.psql(batch(lo, hi))
            print(f"\r  generated {hi:,} of {n:,} records ({time.monotonic() - t0:.0f} s)", end="", flush=True)
        gen_s = time.monotonic() - t0
        print()
        t1 = time.monotonic()
        self.psql("VACUUM (ANALYZE) sbx.records; CHECKPOINT;")
        vac_s = time.monotonic() - t1
        stats = self.psql("""SELECT count(*), round(avg(record_bytes)),
            pg_size_pretty(pg_table_size('sbx.records')), pg_size_pretty(pg_indexes_size('sbx.records')),
            min(started_at), max(started_at) FROM sbx.records""").strip().split("|")
        by_status = self.psql("SELECT status, count(*) FROM sbx.records GROUP BY 1 ORDER BY 2 DESC").split()
        print(f"generated {n:,} records in {gen_s:.1f} s ({n / gen_s:,.0f}/s, 11 indexes maintained); "
              f"VACUUM (ANALYZE) + CHECKPOINT {vac_s:.1f} s")
        print(f"  rows {int(stats[0]):,}, record {stats[1]} bytes avg, table {stats[2]}, indexes {stats[3]}, "
              f"started_at {stats[4]} .. {stats[5]}")
        print("  by status: " + ", ".join(x.replace("|", " ") for x in by_status))
        self.out["generate"] = {"seconds": round(gen_s, 2), "rows_per_s": round(n / gen_s), "vacuum_analyze_s":
                                round(vac_s, 2), "rows": int(stats[0]), "record_bytes_avg": int(stats[1]),
                                "table_size": stats[2], "indexes_size": stats[3], "oldest": stats[4],
                                "newest": stats[5]}
        self.newest = stats[5]

    # ---- 3. the queries ----------------------------------------------------------------------
    @staticmethod
    def where_of(status="", since="", node="", limit_events=False, pack="", image=""):
        """runtime/record/trace_mirror.cpp's where_of, with the parameters as literals."""
        terms = []
        if status:
            terms.append(f"status = {q(status)}")
        if since:
            terms.append(f"started_at >= {q(since)}")
        if node:
            terms.append(f"node = {q(node)}")
        if limit_events:
            terms.append("status IN ('timeout', 'oom', 'output_limit')")

        def by(v, name, digest, version):
            d = "sha256:" + v if is_sha256_hex(v) else v
            if d.startswith("sha256:") and is_sha256_hex(d[7:]):
                terms.append(f"{digest} = {q(d)}")
                return
            at = v.rfind("@")
            if version and at > 0:
                terms.append(f"{name} = {q(v[:at])} AND {version} = {q(v[at + 1:])}")
                return
            terms.append(f"{name} = {q(v)}")

        if pack:
            by(pack, "pack", "pack_digest", "pack_version")
        if image:
            by(image, "image", "image_digest", None)
        return "".join((" AND " if i else " WHERE ") + t for i, t in enumerate(terms))

    @staticmethod
    def since_bound(text):
        """cli since_bound: '2d' -> now - 2 days in started_at's form; an RFC 3339 prefix without its Z."""
        m = re.fullmatch(r"(\d+)([dw])", text)
        if m:
            t = datetime.now(timezone.utc) - timedelta(days=int(m.group(1)) * (7 if m.group(2) == "w" else 1))
            return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"
        return text.rstrip("Zz")

    def ls_sql(self, f, limit):
        sql = f'SELECT {KRUN_COLUMNS} FROM "sbx".records'
        sql += self.where_of(**{k: (self.since_bound(v) if k == "since" else v) for k, v in f.items()})
        return [sql + f" ORDER BY started_at DESC, node, seq DESC LIMIT {limit + 1}"]

    @staticmethod
    def show_sql(id_, exact):
        pattern = "".join("\\" + c if c in "%_\\" else c for c in id_) + "%"
        return (f'SELECT {KRUN_COLUMNS}, CASE WHEN octet_length(record) <= 67108864 THEN record END, left(hash, 64), '
                "left(prev, 64), left(coalesce(sig, ''), 128), left(run_id, 256) FROM \"sbx\".records WHERE run_id "
                f"{'=' if exact else 'LIKE'} {q(id_ if exact else pattern)} AND ('' = '' OR node = '') "
                "ORDER BY node, seq LIMIT 2")

    @staticmethod
    def plan_shape(node):
        name = node["Node Type"]
        if node.get("Index Name"):
            name += f" ({node['Index Name']})"
        for k in ("Rows Removed by Filter", "Rows Removed by Index Recheck"):
            if node.get(k):
                name += f" [{k.lower().replace('rows ', '')} {node[k]}]"
        if node.get("Exact Heap Blocks") or node.get("Lossy Heap Blocks"):
            name += f" [heap blocks {node.get('Exact Heap Blocks', 0)} exact, {node.get('Lossy Heap Blocks', 0)} lossy]"
        if node.get("Sort Method"):
            name += f" [{node['Sort Method']}]"
        kids = [Bench.plan_shape(k) for k in node.get("Plans", [])]
        if not kids:
            return name
        if len(kids) == 1:
            return f"{name} > {kids[0]}"
        return f"{name} [{'; '.join(kids)}]"

    def explain(self, sqls):
        """Planning + execution ms of the statements together (as sbx sends them, in order)."""
        total, shapes, rows = 0.0, [], 0
        for sql in sqls:
            j = json.loads(self.psql("EXPLAIN (ANALYZE, FORMAT JSON) " + sql))[0]
            total += j["Planning Time"] + j["Execution Time"]
            shapes.append(self.plan_shape(j["Plan"]))
            rows = j["Plan"].get("Actual Rows", 0)
        return total, " / then: ".join(shapes), rows

    def queries(self):
        popular = self.psql("SELECT pack, pack_version, pack_digest, count(*) FROM sbx.records WHERE pack <> '' "
                            "GROUP BY 1, 2, 3 ORDER BY 4 DESC LIMIT 1").strip().split("|")
        pack, version, digest = popular[0], popular[1], popular[2]
        pack_rows = int(self.psql(f"SELECT count(*) FROM sbx.records WHERE pack = {q(pack)}"))
        rare = self.psql("SELECT pack, pack_version, pack_digest, count(*) FROM sbx.records WHERE pack <> '' "
                         f"AND pack <> {q(OLD_PACK)} GROUP BY 1, 2, 3 ORDER BY 4, 1, 2 LIMIT 1").strip().split("|")
        old_version = self.psql(f"SELECT pack_version FROM sbx.records WHERE pack = {q(OLD_PACK)} "
                                "GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1").strip()
        old_image_digest = self.psql(f"SELECT image_digest FROM sbx.records WHERE image = {q(OLD_IMAGE)} "
                                     "LIMIT 1").strip()
        old_range = self.psql(f"SELECT count(*), max(started_at) FROM sbx.records WHERE pack = {q(OLD_PACK)} "
                              f"AND pack_version = {q(old_version)}").strip().split("|")
        image = self.psql("SELECT image FROM sbx.records WHERE image <> 'host' GROUP BY 1 "
                          "ORDER BY count(*) DESC LIMIT 1").strip()
        node = "node-07" if self.a.nodes >= 7 else "node-01"
        newest = datetime.strptime(self.newest[:10], "%Y-%m-%d")
        since_date = (newest - timedelta(days=3)).strftime("%Y-%m-%d")
        mid = self.psql(f"SELECT run_id FROM sbx.records WHERE node = 'node-01' "
                        f"AND seq = {max(1, self.a.records // self.a.nodes // 2)}").strip()
        print(f"pack {pack} ({pack_rows:,} runs, the most used; version {version}, "
              f"digest {digest[:19]}...), image {image}, node {node}, since {since_date}, run {mid}")
        print(f"rare: pack {rare[0]}@{rare[1]} ({int(rare[3]):,} runs, the least used version), digest {rare[2][:19]}...")
        print(f"old: pack {OLD_PACK}@{old_version} ({int(old_range[0]):,} runs, the newest {old_range[1]}), "
              f"image {OLD_IMAGE} {old_image_digest[:19]}...")
        self.out["query_values"] = {"old_pack": f"{OLD_PACK}@{old_version}", "old_pack_runs": int(old_range[0]),
                                    "old_pack_newest": old_range[1], "old_image_digest": old_image_digest,"pack": pack, "pack_runs": pack_rows, "version": version, "digest": digest,
                                    "rare_pack": rare[0], "rare_version": rare[1], "rare_digest": rare[2],
                                    "rare_runs": int(rare[3]),
                                    "image": image, "node": node, "since": since_date, "run_id": mid}
        L = lambda n, **f: (["trace", "ls", "--db", self.url, "-n", str(n)] + sum(
            ([f"--{k.replace('_', '-')}"] + ([] if v is True else [v]) for k, v in f.items()), []),
            self.ls_sql(f, n), n)
        cases = [
            ("ls -n 20", *L(20)),
            ("ls --status timeout -n 20", *L(20, status="timeout")),
            ("ls --limit-events -n 20", *L(20, limit_events=True)),
            ("ls --pack NAME -n 20", *L(20, pack=pack)),
            ("ls --pack NAME@VERSION -n 20", *L(20, pack=f"{pack}@{version}")),
            ("ls --pack sha256:DIGEST -n 20", *L(20, pack=digest)),
            ("ls --pack RARE@VERSION -n 20", *L(20, pack=f"{rare[0]}@{rare[1]}")),
            ("ls --pack sha256:RARE -n 20", *L(20, pack=rare[2])),
            ("ls --image NAME -n 20", *L(20, image=image)),
            ("ls --pack OLD@VERSION -n 20", *L(20, pack=f"{OLD_PACK}@{old_version}")),
            ("ls --image sha256:OLD -n 20", *L(20, image=old_image_digest)),
            ("ls --node NODE -n 20", *L(20, node=node)),
            ("ls --since DATE-3d -n 50", *L(50, since=since_date)),
            ("ls --status ok --since 2d -n 100", *L(100, status="ok", since="2d")),
            ("show RUN_ID", ["trace", "show", "--db", self.url, mid], [self.show_sql(mid, True)], None),
            ("show PREFIX (24 chars)", ["trace", "show", "--db", self.url, mid[:24]],
             [self.show_sql(mid[:24], True), self.show_sql(mid[:24], False)], None),
            ("ls (default: 1000 rows)", ["trace", "ls", "--db", self.url], self.ls_sql({}, 1000), 1000),
        ]
        rows = []
        for label, args, sqls, expect in cases:
            self.explain(sqls)  # warm-up, and how many rows the listing has
            sql_ms = []
            for _ in range(self.a.runs):
                ms, shape, n = self.explain(sqls)
                sql_ms.append(ms)
            times = []
            for i in range(self.a.runs + 1):
                t = time.perf_counter()
                r = self.sbx_run(args)
                ms = (time.perf_counter() - t) * 1000
                if i:
                    times.append(ms)
            if expect is not None:  # a listing that returned too little would be timed as a fast one
                got, want = len(r.stdout.splitlines()) - 1, min(expect, n)
                if got != want:
                    raise RuntimeError(f"{label}: {got} rows, the SQL has {want}: {r.stdout[:300]} {r.stderr}")
            elif mid[:24] not in r.stderr:
                raise RuntimeError(f"{label}: unexpected output: {r.stderr}")
            row = {"query": label, "args": " ".join(a if a != self.url else "URL" for a in args),
                   "cli_p50_ms": round(statistics.median(times), 1), "cli_max_ms": round(max(times), 1),
                   "sql_p50_ms": round(statistics.median(sql_ms), 2), "sql_max_ms": round(max(sql_ms), 2),
                   "rows": n, "plan": shape}
            row["under_100ms"] = row["cli_p50_ms"] < TARGET_MS
            row["max_under_100ms"] = row["cli_max_ms"] < TARGET_MS
            rows.append(row)
            print(f"  {label:34s} cli p50 {row['cli_p50_ms']:7.1f}  max {row['cli_max_ms']:7.1f}   "
                  f"sql p50 {row['sql_p50_ms']:7.2f}  max {row['sql_max_ms']:7.2f}   "
                  f"{'yes' if row['under_100ms'] else 'NO'}", flush=True)
        self.out["queries"] = rows

    # ---- 4. shipping -------------------------------------------------------------------------
    def overhead(self):
        s1, s2 = self.state("state-plain"), self.state("state-db")
        a = [self.sbx, "--state-dir", s1, "run", "--", "/bin/true"]
        b = [self.sbx, "--state-dir", s2, "run", "--trace-db", self.url, "--", "/bin/true"]
        n = self.a.overhead_runs
        res = {}
        hf = shutil.which("hyperfine")
        if hf:
            exp = os.path.join(self.tmp, "hyperfine.json")
            subprocess.run([hf, "-N", "--warmup", "5", "--runs", str(n), "--export-json", exp,
                            "-n", "plain", " ".join(a), "-n", "trace-db", " ".join(b)],
                           check=True, stdout=subprocess.DEVNULL)
            with open(exp) as f:
                results = json.load(f)["results"]  # in the order given
            for name, r in zip(("plain", "trace-db"), results):
                res[name] = [t * 1000 for t in r["times"]]
            how = f"hyperfine -N --warmup 5 --runs {n}, both in one session"
        else:
            res = {"plain": [], "trace-db": []}
            for _ in range(5):
                for c in (a, b):
                    subprocess.run(c, check=True, stdout=subprocess.DEVNULL)
            for i in range(n):  # interleaved, alternating which goes first
                for name, c in ((("plain", a), ("trace-db", b)) if i % 2 == 0 else (("trace-db", b), ("plain", a))):
                    t = time.perf_counter()
                    subprocess.run(c, check=True, stdout=subprocess.DEVNULL)
                    res[name].append((time.perf_counter() - t) * 1000)
            how = f"own loop, {n} runs each after 5 warm-ups, interleaved (hyperfine not installed)"
        self.wait_shippers()
        o = {"how": how}
        for k in ("plain", "trace-db"):
            o[k] = {"mean_ms": round(statistics.mean(res[k]), 2), "p50_ms": round(statistics.median(res[k]), 2),
                    "max_ms": round(max(res[k]), 2)}
        o["diff_mean_ms"] = round(o["trace-db"]["mean_ms"] - o["plain"]["mean_ms"], 2)
        o["diff_p50_ms"] = round(o["trace-db"]["p50_ms"] - o["plain"]["p50_ms"], 2)
        v = self.sbx_run(["--state-dir", s2, "trace", "verify", "--db", self.url, "--against-ledger", "--json"])
        o["trace_db_store"] = {k: json.loads(v.stdout)[k] for k in ("local", "in_db", "not_shipped", "agree")}
        print(f"run overhead ({how}):")
        for k in ("plain", "trace-db"):
            print(f"  {k:9s} mean {o[k]['mean_ms']:6.2f} ms  p50 {o[k]['p50_ms']:6.2f} ms  max {o[k]['max_ms']:6.2f}")
        print(f"  trace-db - plain: mean {o['diff_mean_ms']:+.2f} ms, p50 {o['diff_p50_ms']:+.2f} ms")
        self.out["run_overhead"] = o

    def ship_catch_up(self):
        n = self.a.ship_records
        s = self.state("state-backlog")
        t0 = time.monotonic()
        for _ in range(n):
            subprocess.run([self.sbx, "--state-dir", s, "run", "--", "/bin/true"], check=True,
                           stdout=subprocess.DEVNULL)
        runs_s = time.monotonic() - t0
        t = time.perf_counter()
        r = self.sbx_run(["--state-dir", s, "trace", "ship", "--db", self.url, "--json"])
        ship_s = time.perf_counter() - t
        shipped = json.loads(r.stdout)["shipped"]
        if shipped != n:
            raise RuntimeError(f"trace ship sent {shipped} records, expected {n}")
        v = self.sbx_run(["--state-dir", s, "trace", "verify", "--db", self.url, "--against-ledger", "--json"])
        agree = json.loads(v.stdout)["agree"]
        size = os.path.getsize(os.path.join(s, "traces", "ledger.jsonl"))
        o = {"records": n, "ledger_mib": round(size / 2**20, 1), "runs_s": round(runs_s, 1),
             "ship_s": round(ship_s, 3), "records_per_s": round(n / ship_s), "verify_against_ledger_agree": agree}
        print(f"trace ship catch-up: {n} unshipped records ({o['ledger_mib']} MiB of ledger, made in "
              f"{runs_s:.1f} s of runs) shipped in {ship_s:.2f} s: {o['records_per_s']:,} records/s "
              f"(verify --against-ledger: {'agree' if agree else 'DIFFER'})")
        self.out["ship_catch_up"] = o

    def summary(self):
        g = self.out["generate"]
        lines = [f"sbx trace database, PostgreSQL {self.out['postgres']}, {g['rows']:,} records over "
                 f"{self.a.nodes} nodes (record {g['record_bytes_avg']} B avg, table {g['table_size']}, "
                 f"indexes {g['indexes_size']})",
                 f"generation {g['seconds']} s ({g['rows_per_s']:,} rows/s), VACUUM (ANALYZE) {g['vacuum_analyze_s']} s",
                 f"queries: wall time of the sbx process (p50/max of {self.a.runs}, ms) | the SQL under EXPLAIN "
                 f"ANALYZE (planning + execution, p50/max, ms) | p50 under {TARGET_MS:.0f} ms"]
        for r in self.out["queries"]:
            lines.append(f"  {r['query']:34s} {r['cli_p50_ms']:7.1f} {r['cli_max_ms']:7.1f} | "
                         f"{r['sql_p50_ms']:7.2f} {r['sql_max_ms']:7.2f} | {'yes' if r['under_100ms'] else 'NO'}")
        slow = [r for r in self.out["queries"] if not r["under_100ms"] or not r["max_under_100ms"]]
        for r in slow:
            lines.append(f"  over {TARGET_MS:.0f} ms ({'p50' if not r['under_100ms'] else 'max only'}): "
                         f"{r['query']}: {r['plan']}")
        o = self.out["run_overhead"]
        lines.append(f"run -- /bin/true: plain mean {o['plain']['mean_ms']} p50 {o['plain']['p50_ms']} ms, "
                     f"--trace-db mean {o['trace-db']['mean_ms']} p50 {o['trace-db']['p50_ms']} ms: "
                     f"{o['diff_mean_ms']:+} / {o['diff_p50_ms']:+} ms ({o['how']})")
        c = self.out["ship_catch_up"]
        lines.append(f"trace ship of {c['records']} unshipped records: {c['ship_s']} s, {c['records_per_s']:,} records/s")
        print("\n" + "\n".join(lines))
        self.out["summary"] = lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sbx", default=os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "sbx")))
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--nodes", type=int, default=20)
    p.add_argument("--runs", type=int, default=7, help="timed runs per query, after one warm-up")
    p.add_argument("--overhead-runs", type=int, default=40)
    p.add_argument("--ship-records", type=int, default=1000)
    p.add_argument("--pg-bin", default="/usr/lib/postgresql/15/bin")
    p.add_argument("--pg-user", default="sbxtest", help="runs the server when this script runs as root")
    p.add_argument("--port", type=int, default=5432, help="only names the socket file: no TCP")
    p.add_argument("--locale", default="C.UTF-8")
    p.add_argument("--json", metavar="OUT")
    a = p.parse_args()
    if a.nodes < 1 or a.nodes > 99 or a.records < a.nodes:
        p.error("--nodes 1..99 and --records >= --nodes")
    for tool in ("initdb", "pg_ctl", "psql"):
        if not os.access(os.path.join(a.pg_bin, tool), os.X_OK):
            sys.exit(f"trace_db.py: no {tool} in {a.pg_bin} (Debian: apt install postgresql-15, or --pg-bin)")
    # SIGTERM as well as Ctrl-C ends in the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    b = Bench(a)
    t0 = time.monotonic()
    try:
        b.start_cluster()
        b.make_schema()
        b.generate()
        b.queries()
        b.overhead()
        b.ship_catch_up()
        b.summary()
        b.out["total_s"] = round(time.monotonic() - t0, 1)
        b.out["load_average_end"] = round(os.getloadavg()[0], 2)
        print(f"total {b.out['total_s']} s, load average at the end {b.out['load_average_end']}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(b.out, f, indent=2)
                f.write("\n")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not skip the clean-up
        b.end_shippers()
        b.stop_cluster()
        signal.signal(signal.SIGINT, signal.SIG_DFL)


if __name__ == "__main__":
    main()
