#include "runtime/record/trace_index.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include <memory>
#include <optional>

#include <spdlog/spdlog.h>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/progress_line.hpp"
#include "runtime/record/trace_ledger.hpp"

namespace sbx {
namespace {

constexpr const char* kStage = "trace index";
// PRAGMA user_version of the layout below; an index of another layout is dropped and rebuilt
// from the ledger (it is derived data). 2: pack and image columns (`trace ls --pack/--image`).
// 3: rows for lines that are not ledger lines or are over the size bound (run_id and hash '',
// the error says what), so that every listing names them, not only the first.
constexpr int kLayout = 3;
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

// Whole, NUL bytes included (a record's strings may hold \u0000): as bind_text_of stored it.
std::string column_text(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  return t ? std::string(reinterpret_cast<const char*>(t), static_cast<std::size_t>(sqlite3_column_bytes(s, i))) : "";
}

void bind_text_of(sqlite3_stmt* s, int i, const std::string& v) {
  sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
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
// byte hashed the same; otherwise the index is emptied and rebuilt. The check is made on the last
// row of a ledger line (hash != ''): rows of unreadable lines after it are dropped and scanned
// again (they cannot be checked that way, and are few).
Result<Resume> resume_point(sqlite3* db, const Dirs& dirs) {
  auto q = prepare(db, "SELECT line, off, len, hash FROM runs WHERE hash != '' ORDER BY line DESC LIMIT 1");
  if (!q) return q.error();
  if (sqlite3_step(q->get()) != SQLITE_ROW) {
    SBX_TRY(exec(db, "DELETE FROM runs"));
    return Resume{};
  }
  Resume r{static_cast<std::uint64_t>(sqlite3_column_int64(q->get(), 0)),
           static_cast<std::uint64_t>(sqlite3_column_int64(q->get(), 1))};
  auto len = static_cast<std::uint64_t>(sqlite3_column_int64(q->get(), 2));
  std::string hash = column_text(q->get(), 3);
  auto line = read_ledger_line(dirs, r.offset);
  auto e = line ? parse_ledger_line(*line) : Result<LedgerEntry>(line.error());
  if (line && e && line->size() == len && e->hash == hash) {
    SBX_TRY(exec(db, ("DELETE FROM runs WHERE line > " + std::to_string(r.line)).c_str()));
    return Resume{r.line, r.offset + len + 1};
  }
  spdlog::info("trace index: the ledger changed under the index at line {}: rebuilding it", r.line);
  SBX_TRY(exec(db, "DELETE FROM runs"));
  return Resume{};
}

// One row's values (trace_index.hpp's table).
struct Row {
  std::uint64_t line = 0, off = 0, len = 0;
  std::string run_id, hash, error;  // hash "": not a ledger line (error says why)
  TraceSummary sum;
};

Status insert_row(sqlite3* db, sqlite3_stmt* s, const Row& r) {
  sqlite3_reset(s);
  sqlite3_bind_int64(s, 1, static_cast<sqlite3_int64>(r.line));
  bind_text_of(s, 2, r.run_id);
  bind_text_of(s, 3, r.sum.started_at);
  bind_text_of(s, 4, r.sum.status);
  if (r.sum.exit_code) sqlite3_bind_int(s, 5, *r.sum.exit_code);
  else sqlite3_bind_null(s, 5);
  sqlite3_bind_int64(s, 6, r.sum.wall_ms);
  bind_text_of(s, 7, r.sum.command);
  sqlite3_bind_int64(s, 8, static_cast<sqlite3_int64>(r.off));
  sqlite3_bind_int64(s, 9, static_cast<sqlite3_int64>(r.len));
  bind_text_of(s, 10, r.hash);
  // A line or record that cannot be read is kept as a row with its error: listings skip it and
  // say so each time, as they do for a bad file of the previous store.
  if (r.error.empty()) sqlite3_bind_null(s, 11);
  else bind_text_of(s, 11, r.error);
  int col = 12;
  for (const std::string* v : {&r.sum.pack, &r.sum.pack_version, &r.sum.pack_digest, &r.sum.image, &r.sum.image_digest})
    bind_text_of(s, col++, *v);
  if (sqlite3_step(s) != SQLITE_DONE) return db_error(db, "cannot insert into the trace index");
  sqlite3_reset(s);  // not left active across a step's COMMIT
  return {};
}

// Catching up commits every kStepBytes of ledger, so that an interrupted catch-up (a ^C during
// the first listing of a large ledger) keeps what it did and the next reader resumes there, and
// the write lock is not held through the whole ledger.
constexpr std::uint64_t kStepBytes = 64u << 20;
// On a terminal, a catch-up that takes over a second (a first listing of a large ledger) says how
// far it got (progress_line.hpp), so that it does not look hung.
class Progress {
 public:
  Progress(std::uint64_t from, std::uint64_t size) : size_(size) {
    if (size > from && ::isatty(STDERR_FILENO) == 1)
      line_.emplace("sbx: indexing the trace ledger (once; later listings take in only new runs)", stderr, true);
  }
  void at(std::uint64_t off, std::uint64_t lines) {
    if (!line_) return;
    std::string phase =
        std::to_string(size_ ? off * 100 / size_ : 100) + "% of " + human_bytes(static_cast<std::int64_t>(size_));
    line_->update(phase.c_str(), static_cast<std::int64_t>(lines), static_cast<std::int64_t>(off));
  }

 private:
  std::uint64_t size_;
  std::optional<ProgressLine> line_;
};

std::uint64_t ledger_size(const Dirs& dirs) {
  struct stat st;
  return ::stat(ledger_path(dirs).c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
}

Status catch_up(sqlite3* db, const Dirs& dirs) {
  SBX_TRY(exec(db, "BEGIN IMMEDIATE"));
  auto body = [&]() -> Status {
    auto from = resume_point(db, dirs);
    if (!from) return from.error();
    auto ins = prepare(db, "INSERT OR REPLACE INTO runs VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    if (!ins) return ins.error();
    sqlite3_stmt* s = ins->get();
    Progress progress(from->offset, ledger_size(dirs));
    std::uint64_t step_end = from->offset + kStepBytes;
    Status failed;
    Row row;
    // After each row: the step's transaction is committed once it has taken in kStepBytes.
    auto put = [&](std::uint64_t next_off) {
      if (auto st = insert_row(db, s, row); !st) {
        failed = st;
        return false;
      }
      progress.at(next_off, row.line);
      if (next_off >= step_end) {
        step_end = next_off + kStepBytes;
        if (auto st = exec(db, "COMMIT"); !st) {
          failed = st;
          return false;
        }
        if (auto st = exec(db, "BEGIN IMMEDIATE"); !st) {
          failed = st;
          return false;
        }
      }
      return true;
    };
    auto st = scan_ledger(
        dirs,
        [&](const LedgerLine& l) {
      row = Row{l.line_no, l.offset, l.text.size()};
      auto e = parse_ledger_line(l.text);
      if (!e) {
        // `trace verify` says how the chain breaks; the listing goes on without it, naming it.
        row.error = "ledger line " + std::to_string(l.line_no) + " at byte " + std::to_string(l.offset) + ": " +
                    e.error().message;
        row.sum.status = "?";
        return put(l.offset + l.text.size() + 1);
      }
      row.run_id = e->run_id;
      row.hash = e->hash;
      auto summary = summarize_record_text(e->run_id, e->record);
      if (summary) {
        row.sum = std::move(*summary);
      } else {
        row.error = summary.error().describe();
        row.sum.status = "?";
      }
      return put(l.offset + l.text.size() + 1);
        },
        nullptr, from->offset, from->line + 1,
        [&](const OversizeLine& l) {
      row = Row{l.line_no, l.offset, l.size};
      auto e = parse_ledger_tail(l.tail);
      if (e) row.run_id = e->run_id;  // for `trace show` of it, which says why it cannot show it
      row.error = describe_oversize(l) + ": its record is not read";
      row.sum.status = "?";
      return put(l.offset + l.size + 1);
    });
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

namespace {

// The rows a filter selects, as the index holds them (not yet checked), with each row's hash.
struct QueriedRow {
  IndexedRun run;
  std::string hash;
  std::uint64_t len = 0;  // of its line, without the newline
};

Result<std::vector<QueriedRow>> select_rows(sqlite3* db, const TraceFilter& f) {
  auto q = prepare(
      db,
      "SELECT run_id, started_at, status, exit_code, wall_ms, command, off,"
      " pack, pack_version, pack_digest, image, image_digest, hash, len FROM runs"
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
  std::vector<QueriedRow> out;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    IndexedRun r;
    r.summary.run_id = column_text(s, 0);
    if (!out.empty() && out.back().run.summary.run_id == r.summary.run_id) continue;  // a run id recorded again
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
    out.push_back({std::move(r), column_text(s, 12), static_cast<std::uint64_t>(sqlite3_column_int64(s, 13))});
  }
  if (rc != SQLITE_DONE) return db_error(db, "cannot query the trace index");
  return out;
}

bool same_summary(const TraceSummary& a, const TraceSummary& b) {
  return a.run_id == b.run_id && a.started_at == b.started_at && a.status == b.status && a.exit_code == b.exit_code &&
         a.wall_ms == b.wall_ms && a.command == b.command && a.pack == b.pack && a.pack_version == b.pack_version &&
         a.pack_digest == b.pack_digest && a.image == b.image && a.image_digest == b.image_digest;
}

// The ledger line the row names, into `buf`: read whole with the newline before it and after it
// in one pread (the row's length, bounded), so that a row cannot name text inside a record or a
// line's part; nullopt when the bytes there are not such a line.
std::optional<std::string_view> read_line_at(int fd, const QueriedRow& r, std::string& buf) {
  if (r.len > kMaxLedgerLine) return std::nullopt;
  const std::uint64_t from = r.run.offset > 0 ? r.run.offset - 1 : 0;
  const std::size_t want = static_cast<std::size_t>(r.run.offset - from + r.len + 1);
  buf.resize(want);
  std::size_t got = 0;
  while (got < want) {
    ssize_t n = ::pread(fd, buf.data() + got, want - got, static_cast<off_t>(from + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    got += static_cast<std::size_t>(n);
  }
  if ((r.run.offset > 0 && buf.front() != '\n') || buf.back() != '\n') return std::nullopt;
  return std::string_view(buf).substr(r.run.offset - from, r.len);
}

// The rows read back from the ledger lines they name, each summary the line's record's: an error
// (naming the first row that does not match) when one disagrees with its line. Bounded work per
// row shown, on one open ledger: the bytes at the row's offset and length must be a whole line
// carrying the row's run id and hash, and the row must say what its record says. The record is not hashed
// again (that the line is the chain's is `trace verify`'s to say; what a listing prints is what
// the line says): ~2x faster than read_indexed_line's full check, which show and export make.
Result<std::vector<IndexedRun>> checked_rows(const Dirs& dirs, std::vector<QueriedRow> rows) {
  std::vector<IndexedRun> out;
  if (rows.empty()) return out;
  UniqueFd fd(::open(ledger_path(dirs).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.ok()) return sys_error(kStage, "cannot open the trace ledger " + ledger_path(dirs));
  std::string buf;
  for (auto& r : rows) {
    auto mismatch = [&] {
      return make_error(kStage,
                        "its row for run " + r.run.summary.run_id + " does not say what the ledger line it names says");
    };
    auto line = read_line_at(fd.get(), r, buf);
    if (!line) return mismatch();
    auto e = parse_ledger_line(*line);
    if (!e || e->run_id != r.run.summary.run_id || e->hash != r.hash) return mismatch();
    auto sum = summarize_record_text(e->run_id, e->record);
    if (!sum || !same_summary(*sum, r.run.summary)) return mismatch();
    r.run.summary = std::move(*sum);
    out.push_back(std::move(r.run));
  }
  return out;
}

// Names (and counts in `skipped`) the lines and records the index could not read.
Status warn_unreadable(sqlite3* db, std::uint64_t* skipped) {
  // Every listing names what it left out (the first kNamed), and counts it.
  constexpr int kNamed = 100;
  auto bad = prepare(db, "SELECT run_id, error FROM runs WHERE error IS NOT NULL ORDER BY line");
  if (!bad) return bad.error();
  std::uint64_t n = 0;
  int rc;
  while ((rc = sqlite3_step(bad->get())) == SQLITE_ROW) {
    if (++n > kNamed) continue;
    std::string id = column_text(bad->get(), 0), error = column_text(bad->get(), 1);
    // (the log sink makes text of outside origin printable)
    if (id.empty()) spdlog::warn("skipping {}", error);
    else spdlog::warn("skipping trace {}: {}", id, error);
  }
  if (rc != SQLITE_DONE) return db_error(db, "cannot query the trace index");
  if (n > kNamed) spdlog::warn("... and {} more unreadable ledger line(s) or record(s)", n - kNamed);
  if (skipped) *skipped += n;
  return {};
}

}  // namespace

Result<std::string> read_indexed_line(const Dirs& dirs, const IndexedLine& l) {
  auto stale = [&](const std::string& why) {
    return make_error(kStage, "its row for run " + l.run_id + " names the ledger line at byte " +
                                  std::to_string(l.offset) + ", which " + why);
  };
  auto line = read_ledger_line(dirs, l.offset);
  if (!line) {
    if (l.hash.empty()) return line.error();  // a line over the bound: the row says so, and the error why
    return stale("cannot be read (" + line.error().message + ")");
  }
  auto e = parse_ledger_line(*line);
  if (!e) return stale("is not a ledger line");
  if (e->run_id != l.run_id) return stale("is run " + e->run_id + "'s");
  if (e->hash != l.hash) return stale("carries another hash");
  if (ledger_hash(e->seq, e->run_id, e->prev, e->record) == l.hash) return line;
  // Its bytes do not hash to the hash it carries: the ledger itself is broken there (verify names
  // it) and the index is faithful to it, if the row names a line's start and not text inside one.
  if (l.offset == 0) return line;
  UniqueFd fd(::open(ledger_path(dirs).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  char before = 0;
  if (fd.ok() && ::pread(fd.get(), &before, 1, static_cast<off_t>(l.offset - 1)) == 1 && before == '\n') return line;
  return stale("does not hash to that hash and is not where a line begins");
}

Result<std::vector<IndexedRun>> query_index(const Dirs& dirs, const TraceFilter& f, std::uint64_t* skipped) {
  auto db = ready_index(dirs);
  if (!db) return db.error();
  auto rows = select_rows(db->get(), f);
  if (!rows) return rows.error();
  auto out = checked_rows(dirs, std::move(*rows));
  if (!out) {
    // The index was edited or is stale in a way its catch-up does not see: it is derived data,
    // built again from the ledger, and the query answered from that.
    spdlog::warn("trace index {}: {}; rebuilding it from the ledger", index_path(dirs), out.error().message);
    SBX_TRY(exec(db->get(), "DELETE FROM runs"));
    SBX_TRY(catch_up(db->get(), dirs));
    rows = select_rows(db->get(), f);
    if (!rows) return rows.error();
    out = checked_rows(dirs, std::move(*rows));
    if (!out) return out.error();
  }
  SBX_TRY(warn_unreadable(db->get(), skipped));
  return out;
}

Result<std::vector<IndexedLine>> index_run_ids(const Dirs& dirs) {
  auto db = ready_index(dirs);
  if (!db) return db.error();
  auto q = prepare(db->get(), "SELECT run_id, off, hash FROM runs WHERE run_id != '' ORDER BY run_id, line");
  if (!q) return q.error();
  std::vector<IndexedLine> out;
  int rc;
  while ((rc = sqlite3_step(q->get())) == SQLITE_ROW)
    out.push_back({column_text(q->get(), 0), static_cast<std::uint64_t>(sqlite3_column_int64(q->get(), 1)),
                   column_text(q->get(), 2)});
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
