#include "runtime/record/trace_index.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <memory>

#include <spdlog/spdlog.h>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/record/trace_ledger.hpp"

namespace sbx {
namespace {

constexpr const char* kStage = "trace index";
// PRAGMA user_version of the layout below; an index of another layout is dropped and rebuilt
// from the ledger (it is derived data). 2: pack and image columns (`trace ls --pack/--image`).
constexpr int kLayout = 2;
constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS runs(line INTEGER PRIMARY KEY, run_id TEXT NOT NULL, started_at TEXT NOT NULL,"
    " status TEXT NOT NULL, exit_code INTEGER, wall_ms INTEGER NOT NULL, command TEXT NOT NULL,"
    " off INTEGER NOT NULL, len INTEGER NOT NULL, hash TEXT NOT NULL, error TEXT,"
    " pack TEXT NOT NULL DEFAULT '', pack_version TEXT NOT NULL DEFAULT '', pack_digest TEXT NOT NULL DEFAULT '',"
    " image TEXT NOT NULL DEFAULT '', image_digest TEXT NOT NULL DEFAULT '');"
    "CREATE INDEX IF NOT EXISTS runs_by_id ON runs(run_id);"
    "CREATE INDEX IF NOT EXISTS runs_by_status ON runs(status, run_id);"
    // Partial: the rows whose record did not parse, looked up on every listing, are few.
    "CREATE INDEX IF NOT EXISTS runs_unreadable ON runs(line) WHERE error IS NOT NULL;";

std::string index_path(const Dirs& dirs) { return dirs.traces + "/index.sqlite"; }

struct DbClose {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalize {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using Db = std::unique_ptr<sqlite3, DbClose>;
using Stmt = std::unique_ptr<sqlite3_stmt, StmtFinalize>;

Error db_error(sqlite3* db, const std::string& what) {
  return make_error(kStage, what + ": " + (db ? sqlite3_errmsg(db) : "out of memory"));
}

Status exec(sqlite3* db, const char* sql) {
  char* msg = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &msg) != SQLITE_OK) {
    std::string m = msg ? msg : "?";
    sqlite3_free(msg);
    return make_error(kStage, std::string("cannot run '") + sql + "': " + m);
  }
  return {};
}

Result<Stmt> prepare(sqlite3* db, const char* sql) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &s, nullptr) != SQLITE_OK) return db_error(db, "cannot prepare a query");
  return Stmt(s);
}

std::string column_text(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  return t ? reinterpret_cast<const char*>(t) : "";
}

// Opens (creating, 0600 like the ledger: it holds the commands of runs) the index. The file is
// made here rather than by SQLite, whose default mode is 0644; its journal inherits the mode.
Result<Db> open_index(const Dirs& dirs) {
  const std::string path = index_path(dirs);
  UniqueFd made(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!made.ok()) return sys_error(kStage, "cannot open " + path);
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, nullptr);
  Db db(raw);
  if (rc != SQLITE_OK) return db_error(raw, "cannot open " + path);
  sqlite3_busy_timeout(db.get(), 5000);
  // Derived data, rebuilt on any doubt: no syncs (a crash may lose or corrupt it; the next
  // reader that finds it unusable rebuilds it).
  SBX_TRY(exec(db.get(), "PRAGMA synchronous=OFF"));
  auto layout = [&]() -> int {
    auto q = prepare(db.get(), "PRAGMA user_version");
    return q && sqlite3_step(q->get()) == SQLITE_ROW ? sqlite3_column_int(q->get(), 0) : -1;
  };
  if (layout() != kLayout) {
    SBX_TRY(exec(db.get(), "BEGIN IMMEDIATE"));  // another sbx may be migrating it too
    if (layout() != kLayout) {
      spdlog::info("trace index: layout {} is not {}: rebuilding it from the ledger", layout(), kLayout);
      if (auto st = exec(db.get(), "DROP TABLE IF EXISTS runs"); !st) {
        (void)exec(db.get(), "ROLLBACK");
        return st.error();
      }
      if (auto st = exec(db.get(), ("PRAGMA user_version = " + std::to_string(kLayout)).c_str()); !st) {
        (void)exec(db.get(), "ROLLBACK");
        return st.error();
      }
    }
    SBX_TRY(exec(db.get(), kSchema));
    SBX_TRY(exec(db.get(), "COMMIT"));
  } else {
    SBX_TRY(exec(db.get(), kSchema));
  }
  return db;
}

struct Resume {
  std::uint64_t line = 0, offset = 0;
};

// Where the index stopped, after checking that the ledger still has that line there, byte for
// byte hashed the same; otherwise the index is emptied and rebuilt.
Result<Resume> resume_point(sqlite3* db, const Dirs& dirs) {
  auto q = prepare(db, "SELECT line, off, len, hash FROM runs ORDER BY line DESC LIMIT 1");
  if (!q) return q.error();
  if (sqlite3_step(q->get()) != SQLITE_ROW) return Resume{};
  Resume r{static_cast<std::uint64_t>(sqlite3_column_int64(q->get(), 0)),
           static_cast<std::uint64_t>(sqlite3_column_int64(q->get(), 1))};
  auto len = static_cast<std::uint64_t>(sqlite3_column_int64(q->get(), 2));
  std::string hash = column_text(q->get(), 3);
  auto line = read_ledger_line(dirs, r.offset);
  auto e = line ? parse_ledger_line(*line) : Result<LedgerEntry>(line.error());
  if (line && e && line->size() == len && e->hash == hash) return Resume{r.line, r.offset + len + 1};
  spdlog::info("trace index: the ledger changed under the index at line {}: rebuilding it", r.line);
  SBX_TRY(exec(db, "DELETE FROM runs"));
  return Resume{};
}

Status catch_up(sqlite3* db, const Dirs& dirs) {
  SBX_TRY(exec(db, "BEGIN IMMEDIATE"));
  auto body = [&]() -> Status {
    auto from = resume_point(db, dirs);
    if (!from) return from.error();
    auto ins = prepare(db, "INSERT OR REPLACE INTO runs VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    if (!ins) return ins.error();
    sqlite3_stmt* s = ins->get();
    Status failed;
    auto st = scan_ledger(
        dirs,
        [&](const LedgerLine& l) {
          auto e = parse_ledger_line(l.text);
          if (!e) return true;  // `trace verify` names it; the listing goes on without it
          auto rec = parse_json_doc(std::string(e->record), {kMaxTraceBytes}, "trace", "record");
          TraceSummary sum = summarize_record(e->run_id, rec && rec->is_object() ? *rec : nlohmann::json::object());
          std::string error = !rec ? rec.error().describe() : !rec->is_object() ? "not a JSON object" : "";
          sqlite3_reset(s);
          sqlite3_bind_int64(s, 1, static_cast<sqlite3_int64>(l.line_no));
          sqlite3_bind_text(s, 2, e->run_id.c_str(), -1, SQLITE_TRANSIENT);
          sqlite3_bind_text(s, 3, sum.started_at.c_str(), -1, SQLITE_TRANSIENT);
          sqlite3_bind_text(s, 4, sum.status.c_str(), -1, SQLITE_TRANSIENT);
          if (sum.exit_code) sqlite3_bind_int(s, 5, *sum.exit_code);
          else sqlite3_bind_null(s, 5);
          sqlite3_bind_int64(s, 6, sum.wall_ms);
          sqlite3_bind_text(s, 7, sum.command.c_str(), -1, SQLITE_TRANSIENT);
          sqlite3_bind_int64(s, 8, static_cast<sqlite3_int64>(l.offset));
          sqlite3_bind_int64(s, 9, static_cast<sqlite3_int64>(l.text.size()));
          sqlite3_bind_text(s, 10, e->hash.c_str(), -1, SQLITE_TRANSIENT);
          // A record that does not parse is kept as a row with its error: listings skip it and
          // say so each time, as they do for a bad file of the previous store.
          if (error.empty()) sqlite3_bind_null(s, 11);
          else sqlite3_bind_text(s, 11, error.c_str(), -1, SQLITE_TRANSIENT);
          int col = 12;
          for (const std::string* v : {&sum.pack, &sum.pack_version, &sum.pack_digest, &sum.image, &sum.image_digest})
            sqlite3_bind_text(s, col++, v->c_str(), -1, SQLITE_TRANSIENT);
          if (sqlite3_step(s) != SQLITE_DONE) {
            failed = db_error(db, "cannot insert into the trace index");
            return false;
          }
          return true;
        },
        nullptr, from->offset, from->line + 1);
    if (!st) return st;
    return failed;
  };
  if (auto st = body(); !st) {
    (void)exec(db, "ROLLBACK");
    return st;
  }
  return exec(db, "COMMIT");
}

Result<Db> ready_index(const Dirs& dirs) {
  auto db = open_index(dirs);
  if (!db) return db.error();
  SBX_TRY(catch_up(db->get(), dirs));
  return db;
}

}  // namespace

Result<std::vector<IndexedRun>> query_index(const Dirs& dirs, const TraceFilter& f) {
  auto db = ready_index(dirs);
  if (!db) return db.error();
  auto q = prepare(db->get(),
                   "SELECT run_id, started_at, status, exit_code, wall_ms, command, off,"
                   " pack, pack_version, pack_digest, image, image_digest FROM runs"
                   " WHERE error IS NULL AND (?1 = '' OR status = ?1) AND (?2 = '' OR started_at >= ?2)"
                   " AND (?4 = '' OR pack = ?4 OR (pack != '' AND pack || '@' || pack_version = ?4) OR (pack_digest != '' AND pack_digest = ?5))"
                   " AND (?6 = '' OR image = ?6 OR (image_digest != '' AND image_digest = ?7))"
                   " ORDER BY run_id DESC, line DESC LIMIT ?3");
  if (!q) return q.error();
  sqlite3_stmt* s = q->get();
  sqlite3_bind_text(s, 1, f.status.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 2, f.since.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(s, 3, f.newest ? static_cast<sqlite3_int64>(f.newest) : -1);
  const std::string pack_digest = TraceFilter::digest_form(f.pack), image_digest = TraceFilter::digest_form(f.image);
  sqlite3_bind_text(s, 4, f.pack.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 5, pack_digest.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 6, f.image.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 7, image_digest.c_str(), -1, SQLITE_TRANSIENT);
  std::vector<IndexedRun> out;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    IndexedRun r;
    r.summary.run_id = column_text(s, 0);
    if (!out.empty() && out.back().summary.run_id == r.summary.run_id) continue;  // a run id recorded again
    r.summary.started_at = column_text(s, 1);
    r.summary.status = column_text(s, 2);
    if (sqlite3_column_type(s, 3) != SQLITE_NULL) r.summary.exit_code = sqlite3_column_int(s, 3);
    r.summary.wall_ms = sqlite3_column_int64(s, 4);
    r.summary.command = column_text(s, 5);
    r.offset = static_cast<std::uint64_t>(sqlite3_column_int64(s, 6));
    r.summary.pack = column_text(s, 7);
    r.summary.pack_version = column_text(s, 8);
    r.summary.pack_digest = column_text(s, 9);
    r.summary.image = column_text(s, 10);
    r.summary.image_digest = column_text(s, 11);
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return db_error(db->get(), "cannot query the trace index");
  auto bad = prepare(db->get(), "SELECT run_id, error FROM runs WHERE error IS NOT NULL ORDER BY line LIMIT 100");
  if (!bad) return bad.error();
  while (sqlite3_step(bad->get()) == SQLITE_ROW)
    spdlog::warn("skipping trace {}: {}", column_text(bad->get(), 0), column_text(bad->get(), 1));
  return out;
}

Result<std::vector<std::pair<std::string, std::uint64_t>>> index_run_ids(const Dirs& dirs) {
  auto db = ready_index(dirs);
  if (!db) return db.error();
  auto q = prepare(db->get(), "SELECT run_id, off FROM runs ORDER BY run_id, line");
  if (!q) return q.error();
  std::vector<std::pair<std::string, std::uint64_t>> out;
  int rc;
  while ((rc = sqlite3_step(q->get())) == SQLITE_ROW)
    out.emplace_back(column_text(q->get(), 0), static_cast<std::uint64_t>(sqlite3_column_int64(q->get(), 1)));
  if (rc != SQLITE_DONE) return db_error(db->get(), "cannot query the trace index");
  return out;
}

Result<std::uint64_t> rebuild_index(const Dirs& dirs) {
  SBX_TRY(ensure_dir(dirs.traces, 0700));
  // Removed, not emptied: a corrupt file is replaced whatever state it is in.
  for (const char* suffix : {"", "-journal"}) {
    std::string p = index_path(dirs) + suffix;
    if (::unlink(p.c_str()) != 0 && errno != ENOENT) return sys_error(kStage, "cannot remove " + p);
  }
  auto db = ready_index(dirs);
  if (!db) return db.error();
  auto q = prepare(db->get(), "SELECT count(*) FROM runs");
  if (!q) return q.error();
  if (sqlite3_step(q->get()) != SQLITE_ROW) return db_error(db->get(), "cannot count the trace index");
  return static_cast<std::uint64_t>(sqlite3_column_int64(q->get(), 0));
}

}  // namespace sbx
