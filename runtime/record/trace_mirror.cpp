// The trace database (trace_mirror.hpp): schema, shipping, verifying and querying.
#include "runtime/record/trace_mirror.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/base/strings.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/record/ledger_key.hpp"
#include "runtime/record/pg_client.hpp"

extern char** environ;

namespace sbx {
namespace {

constexpr const char* kStage = "trace db";
constexpr std::size_t kShipBatch = 500;
constexpr std::size_t kShipBatchBytes = 16u << 20;
constexpr std::size_t kVerifyBatch = 5000;
constexpr std::size_t kMaxNodeName = 128;
constexpr std::size_t kMaxIdentifier = 63;     // PostgreSQL's NAMEDATALEN - 1
constexpr std::size_t kMaxNodes = 100000;      // nodes one verify walks
constexpr std::size_t kMaxShownColumn = 4096;  // characters of a text column `trace ls --db` shows
constexpr std::size_t kMaxPubkeyPem = 4096;    // bytes of a node's registered public key (PEM)
// A background shipper's whole life: past it SIGALRM ends it (the ledger keeps what it did not send).
constexpr unsigned kBackgroundDeadlineS = 900;
// What a background shipper waits for the store's ship lock (another shipper sending).
constexpr long kBackgroundLockWaitMs = 120000;

bool node_name_ok(std::string_view n) {
  if (n.empty() || n.size() > kMaxNodeName) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' || c == '-')) return false;
  return true;
}

// The migrations, in order: kMigrations[v - 1] takes a schema from version v - 1 to v. "{s}" is the
// schema's quoted name. Each runs in the transaction that takes the schema's advisory lock, and
// each is idempotent (IF NOT EXISTS): a schema an administrator half-made, or one whose version
// row was set back, is brought to the version without failing on what is already there.
const char* const kMigrations[] = {
    // 1: the tables.
    "CREATE TABLE IF NOT EXISTS {s}.nodes(node text PRIMARY KEY, first_seq bigint NOT NULL, first_prev text NOT NULL,"
    " first_hash text NOT NULL, pubkey text, registered_at timestamptz NOT NULL DEFAULT now(),"
    " last_shipped_at timestamptz);"
    "CREATE TABLE IF NOT EXISTS {s}.records(node text NOT NULL REFERENCES {s}.nodes(node), seq bigint NOT NULL,"
    " run_id text NOT NULL, prev text NOT NULL, hash text NOT NULL, sig text, record text,"
    " record_bytes bigint NOT NULL, started_at text NOT NULL DEFAULT '', status text NOT NULL DEFAULT '',"
    " exit_code integer, wall_ms bigint NOT NULL DEFAULT 0, command text NOT NULL DEFAULT '',"
    " pack text NOT NULL DEFAULT '', pack_version text NOT NULL DEFAULT '', pack_digest text NOT NULL DEFAULT '',"
    " image text NOT NULL DEFAULT '', image_digest text NOT NULL DEFAULT '',"
    " shipped_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY(node, seq), UNIQUE(node, hash));",
    // 2: what `trace ls --db` and `trace show --db` look up, newest first.
    "CREATE INDEX IF NOT EXISTS records_by_time ON {s}.records(started_at DESC, node, seq);"
    "CREATE INDEX IF NOT EXISTS records_by_status ON {s}.records(status, started_at DESC);"
    "CREATE INDEX IF NOT EXISTS records_by_pack ON {s}.records(pack, started_at DESC);"
    "CREATE INDEX IF NOT EXISTS records_by_pack_version ON {s}.records(pack, pack_version, started_at DESC);"
    "CREATE INDEX IF NOT EXISTS records_by_pack_digest ON {s}.records(pack_digest, started_at DESC);"
    "CREATE INDEX IF NOT EXISTS records_by_image ON {s}.records(image, started_at DESC);"
    "CREATE INDEX IF NOT EXISTS records_by_image_digest ON {s}.records(image_digest, started_at DESC);"
    "CREATE INDEX IF NOT EXISTS records_by_node ON {s}.records(node, started_at DESC);"
    "CREATE INDEX IF NOT EXISTS records_by_run_id ON {s}.records(run_id text_pattern_ops);"
    "CREATE INDEX IF NOT EXISTS records_limit_events ON {s}.records(started_at DESC)"
    " WHERE status IN ('timeout', 'oom', 'output_limit');",
};
static_assert(sizeof kMigrations / sizeof kMigrations[0] == kTraceDbVersion);

std::string with_schema(std::string sql, const std::string& schema) {
  const std::string q = sql_ident(schema);
  for (auto at = sql.find("{s}"); at != std::string::npos; at = sql.find("{s}", at + q.size())) sql.replace(at, 3, q);
  return sql;
}

// The schema's version: 0 when it has no meta table (or no schema at all).
Result<int> schema_version(PgConn& c, const std::string& schema) {
  auto has = c.query_one("SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = 'meta'", {schema});
  if (!has) return has.error();
  if (!*has) return 0;
  auto v = c.query_one(with_schema("SELECT left(value, 16) FROM {s}.meta WHERE key = 'schema_version'", schema));
  if (!v) return v.error();
  if (!*v) return 0;
  const std::string& text = (*v)->at(0);
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos)
    return make_error(kStage,
                      "schema " + schema + ": its meta.schema_version '" + printable(text) + "' is not a number");
  return std::stoi(text);
}

Error newer_schema(const std::string& schema, int v) {
  return make_error(kStage, "schema " + schema + " of the trace database is at version " + std::to_string(v) +
                                ", newer than this sbx writes (" + std::to_string(kTraceDbVersion) +
                                "): a newer sbx upgraded it; use that sbx (or one as new) for this database");
}

// Creates the schema's tables or brings them to kTraceDbVersion, under an advisory lock held for
// the transaction (two shippers starting at once: one migrates, the other then finds it done).
Status ensure_schema(PgConn& c, const std::string& schema) {
  SBX_TRY(c.exec("BEGIN"));
  auto rollback = [&](Error e) {
    (void)c.exec("ROLLBACK");
    return e;
  };
  if (auto st = c.exec("SELECT pg_advisory_xact_lock(hashtext('sbx.trace_db:' || $1))", {schema}); !st)
    return rollback(st.error());
  // The schema may be the administrator's, made for this tenant's role (no CREATE on the database).
  auto exists = c.query_one("SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1", {schema});
  if (!exists) return rollback(exists.error());
  if (!*exists)
    if (auto st = c.exec("CREATE SCHEMA " + sql_ident(schema)); !st) return rollback(st.error());
  auto v = schema_version(c, schema);
  if (!v) return rollback(v.error());
  if (*v > kTraceDbVersion) return rollback(newer_schema(schema, *v));
  if (*v == 0)
    if (auto st = c.exec(
            with_schema("CREATE TABLE IF NOT EXISTS {s}.meta(key text PRIMARY KEY, value text NOT NULL)", schema));
        !st)
      return rollback(st.error());
  for (int to = *v + 1; to <= kTraceDbVersion; ++to)
    if (auto st = c.exec(with_schema(kMigrations[to - 1], schema)); !st) return rollback(st.error());
  if (*v < kTraceDbVersion) {
    auto st = c.exec(with_schema("INSERT INTO {s}.meta VALUES ('schema_version', $1) ON CONFLICT (key) DO UPDATE"
                                 " SET value = EXCLUDED.value",
                                 schema),
                     {std::to_string(kTraceDbVersion)});
    if (!st) return rollback(st.error());
  }
  return c.exec("COMMIT");
}

// Readers: a schema this sbx can read (not newer), or a clear error when there is none.
Status check_readable(PgConn& c, const std::string& schema) {
  auto v = schema_version(c, schema);
  if (!v) {
    if (c.last_sqlstate() == "42501")
      return make_error(kStage, "schema " + schema + ": permission denied (" + v.error().message +
                                    "): this role may not read that store's records");
    return v.error();
  }
  if (*v == 0)
    return make_error(
        kStage, "schema " + schema + " holds no trace records (nothing was shipped to it, or this role cannot see it)");
  if (*v > kTraceDbVersion) return newer_schema(schema, *v);
  return {};
}

Result<PgConn> open_db(const TraceDb& db) { return PgConn::open(db.url); }

}  // namespace

std::string trace_db_schema(const std::string& tenant) {
  if (tenant.empty()) return "sbx";
  // PostgreSQL cuts identifiers at 63 bytes, silently: two long tenant names that share their
  // first 52 bytes would share a schema. A name that does not fit keeps its start and gains a
  // digest of the whole name instead.
  std::string schema = "sbx_tenant_" + tenant;
  if (schema.size() <= kMaxIdentifier) return schema;
  return "sbx_tenant_" + tenant.substr(0, 35) + "_" + sha256_hex(tenant).substr(0, 16);
}

// ---------------------------------------------------------------------------------------------
// The node name

namespace {
std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  if (::getrandom(raw.data(), raw.size(), 0) != static_cast<ssize_t>(raw.size())) return "00000000";
  return hex_lower(raw);
}
std::string host_name() {
  char h[256] = {};
  if (::gethostname(h, sizeof h - 1) != 0 || !node_name_ok(h)) return "node";
  return std::string(h).substr(0, kMaxNodeName - 9);
}
}  // namespace

Result<std::string> ledger_node_name(const Dirs& dirs, bool create) {
  const std::string path = dirs.traces + "/node";
  const char* env = std::getenv("SBX_NODE");
  std::string wanted = env ? env : "";
  if (!wanted.empty() && !node_name_ok(wanted))
    return make_error("usage",
                      "SBX_NODE '" + printable(wanted) + "' is not a node name: 1 to 128 of A-Z a-z 0-9 . _ : -");
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    auto text = read_regular_bounded(path, kMaxNodeName + 2, kStage, "the store's node name " + path);
    if (!text) return text.error();
    std::string name = *text;
    if (!name.empty() && name.back() == '\n') name.pop_back();
    if (!node_name_ok(name)) return make_error(kStage, path + " does not hold a node name: remove it to make one anew");
    if (!wanted.empty() && wanted != name)
      return make_error("usage", "SBX_NODE is '" + wanted + "' but this store ships as '" + name + "' (" + path +
                                     "): unset SBX_NODE, or remove that file to ship the whole ledger again as '" +
                                     wanted + "'");
    return name;
  }
  if (!create) return make_error(kStage, "this store has no node name yet (" + path + "): it has never shipped");
  std::string name = !wanted.empty() ? wanted : host_name() + "-" + random_hex(4);
  SBX_TRY(ensure_dir(dirs.traces, 0700));
  // Made aside and linked into place: of two first ships at once, one name wins and both use it.
  const std::string tmp = path + "." + random_hex(8) + ".tmp";
  SBX_TRY(write_file_durable(tmp, name + "\n", 0600));
  int linked = ::link(tmp.c_str(), path.c_str());
  int err = errno;
  ::unlink(tmp.c_str());
  if (linked != 0 && err == EEXIST) return ledger_node_name(dirs, false);
  if (linked != 0) return make_error(kStage, "cannot create " + path, err);
  return name;
}

// ---------------------------------------------------------------------------------------------
// Shipping

namespace {

struct Cursor {  // <traces>/ship-<key>.cursor: where the last ship stopped (a hint, checked)
  std::uint64_t seq = 0, offset = 0;
  std::string hash;
};

std::string cursor_path(const Dirs& dirs, const TraceDb& db) {
  return dirs.traces + "/ship-" + sha256_hex(db.url + "\n" + db.schema).substr(0, 16) + ".cursor";
}

Result<Cursor> read_cursor(const std::string& path) {
  auto text = read_regular_bounded(path, 512, kStage, "the ship cursor " + path);
  if (!text) return text.error();
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || !j["seq"].is_number_unsigned() || !j["offset"].is_number_unsigned() || !j["hash"].is_string())
    return make_error(kStage, path + " is not a ship cursor");
  return Cursor{j["seq"].get<std::uint64_t>(), j["offset"].get<std::uint64_t>(), j["hash"].get<std::string>()};
}

struct NodeRow {
  bool exists = false;
  std::uint64_t first_seq = 0;
  std::string first_prev, first_hash, pubkey;
};

Result<NodeRow> read_node(PgConn& c, const std::string& schema, const std::string& node) {
  auto r =
      c.query_one(with_schema("SELECT first_seq, left(first_prev, 257), left(first_hash, 257),"
                              " CASE WHEN octet_length(pubkey) <= $2 THEN pubkey END, coalesce(octet_length(pubkey), 0)"
                              " FROM {s}.nodes WHERE node = $1",
                              schema),
                  {node, std::to_string(kMaxPubkeyPem)}, 64 * 1024);
  if (!r) return r.error();
  NodeRow n;
  if (!*r) return n;
  // Cut in the SQL: libpq holds a whole row before sbx sees it, so a bound checked here would
  // come after a hostile database made sbx buffer whatever it stored there.
  if ((*r)->null(3) && (*r)->at(4) != "0")
    return make_error(kStage, "node " + printable(node) + "'s public key in the trace database is " + (*r)->at(4) +
                                  " bytes, over the " + std::to_string(kMaxPubkeyPem) +
                                  "-byte bound of a key: not a key sbx registered");
  n.exists = true;
  n.first_seq = std::strtoull((*r)->at(0).c_str(), nullptr, 10);
  n.first_prev = (*r)->at(1);
  n.first_hash = (*r)->at(2);
  n.pubkey = (*r)->at(3);
  return n;
}

// One line to send: the envelope, the record (nullopt: over the line bound, its envelope alone
// is shipped, as verify skips such a line) and where it lies in the file.
struct ShipLine {
  LedgerEntry e;
  std::optional<std::string> record;
  std::uint64_t record_bytes = 0, offset = 0;
};

// The public key of the ledger key this user signs with (none: pem ""). It is registered for the
// node only once it verifies a signed line of the ledger being shipped: the key of whoever runs
// the ship (root shipping another user's store, a key made anew) is not the ledger's.
struct OwnKey {
  std::string pem;
  std::optional<LedgerVerifier> verifier;
  bool signs(const LedgerEntry& e) const { return verifier && !e.sig.empty() && verifier->verify(e.hash, e.sig); }
};
OwnKey own_key() {
  OwnKey k;
  if (auto signer = LedgerSigner::load_default(); signer && *signer)
    if (auto pem = (*signer)->public_pem())
      if (auto v = LedgerVerifier::from_pem(*pem, "this user's ledger key")) {
        k.pem = *pem;
        k.verifier = std::move(*v);
      }
  return k;
}

class Shipper {
 public:
  Shipper(PgConn& c, const Dirs& dirs, const TraceDb& db, std::string node)
      : c_(c), dirs_(dirs), db_(db), node_(std::move(node)) {
    rep_.node = node_;
  }

  Status start() {
    auto n = read_node(c_, db_.schema, node_);
    if (!n) return n.error();
    n_ = *n;
    auto head = c_.query_one(
        with_schema("SELECT seq, left(hash, 257) FROM {s}.records WHERE node = $1 ORDER BY seq DESC LIMIT 1",
                    db_.schema),
        {node_});
    if (!head) return head.error();
    if (*head) {
      db_seq_ = std::strtoull((*head)->at(0).c_str(), nullptr, 10);
      db_hash_ = (*head)->at(1);
    }
    return {};
  }

  // Where to start reading the ledger: after the cursor's line when it still says what the
  // database says (its line read back and compared), else from the start.
  std::uint64_t resume_offset() const {
    auto cur = read_cursor(cursor_path(dirs_, db_));
    if (!cur || cur->seq != db_seq_ || cur->hash != db_hash_ || db_seq_ == 0) return 0;
    auto line = read_ledger_line(dirs_, cur->offset);
    if (!line) return 0;
    auto e = parse_ledger_line(*line);
    if (!e || e->seq != cur->seq || e->hash != cur->hash) return 0;
    return cur->offset;
  }

  // Each line in file order (`anchor`: the prune anchor, when the ledger starts with one).
  Status line(ShipLine l, const std::optional<PruneAnchorLine>& anchor) {
    rep_.local_head = l.e.seq;
    if (!n_.exists) SBX_TRY(register_node(l.e, anchor));
    // A node that signs now but did not when it was registered (sbx key init came later): its key
    // is added at its first signed line, never replaced (what the database holds is what its
    // signatures are checked against).
    if (n_.pubkey.empty() && !l.e.sig.empty() && !key_tried_) {
      key_tried_ = true;
      if (key_.signs(l.e)) {
        SBX_TRY(c_.exec(with_schema("UPDATE {s}.nodes SET pubkey = $2 WHERE node = $1 AND pubkey IS NULL", db_.schema),
                        {node_, key_.pem}));
        n_.pubkey = key_.pem;
      }
    }
    if (l.e.seq == n_.first_seq && l.e.hash != n_.first_hash)
      return make_error(kStage, "node '" + node_ + "' in schema " + db_.schema +
                                    " belongs to another ledger (its first shipped record, seq " +
                                    std::to_string(n_.first_seq) +
                                    ", differs from this store's): give this store a node name of its own "
                                    "(SBX_NODE, before its first ship) or ship it to another database");
    if (l.e.seq <= db_seq_) {
      if (l.e.seq == db_seq_ && l.e.hash != db_hash_) return diverged(l.e.seq, db_hash_, l.e.hash);
      return {};
    }
    if (!anchor_warned_ && anchor && db_seq_ && anchor->entry.seq > db_seq_) {
      anchor_warned_ = true;
      spdlog::warn(
          "trace ship: records seq {}..{} of node {} were pruned before they were shipped: the database "
          "will show them missing",
          db_seq_ + 1, anchor->entry.seq, node_);
    }
    batch_bytes_ += l.record ? l.record->size() : 0;
    batch_.push_back(std::move(l));
    // At most 500 lines or 16 MiB of records a transaction: a batch of large records stays bounded.
    if (batch_.size() >= kShipBatch || batch_bytes_ >= kShipBatchBytes) return flush();
    return {};
  }

  Status flush() {
    if (batch_.empty()) return {};
    SBX_TRY(c_.exec("BEGIN"));
    for (auto& l : batch_)
      if (auto st = insert(l); !st) {
        (void)c_.exec("ROLLBACK");
        return st;
      }
    SBX_TRY(c_.exec(with_schema("UPDATE {s}.nodes SET last_shipped_at = now() WHERE node = $1", db_.schema), {node_}));
    SBX_TRY(c_.exec("COMMIT"));
    const ShipLine& last = batch_.back();
    db_seq_ = last.e.seq;
    db_hash_ = last.e.hash;
    nlohmann::json cur = {{"seq", last.e.seq}, {"offset", last.offset}, {"hash", last.e.hash}};
    (void)write_file_durable(cursor_path(dirs_, db_), cur.dump(), 0600);  // a hint: a lost one costs a rescan
    batch_.clear();
    batch_bytes_ = 0;
    if (progress_) progress_(rep_.shipped);
    return {};
  }

  ShipReport report() const {
    ShipReport r = rep_;
    r.db_head = db_seq_;
    return r;
  }
  std::function<void(std::uint64_t)> progress_;

 private:
  Error diverged(std::uint64_t seq, const std::string& theirs, const std::string& ours) const {
    return make_error(kStage, "node '" + node_ + "' seq " + std::to_string(seq) + ": the database holds hash " +
                                  theirs.substr(0, 16) + "..., this store's ledger " + ours.substr(0, 16) +
                                  "...: the ledger was rewritten after it was shipped, or another store ships "
                                  "as this node (sbx trace verify --db ... --against-ledger)");
  }

  Status register_node(const LedgerEntry& first, const std::optional<PruneAnchorLine>&) {
    std::string pub = key_.signs(first) ? key_.pem : "";
    SBX_TRY(
        c_.exec(with_schema("INSERT INTO {s}.nodes(node, first_seq, first_prev, first_hash, pubkey)"
                            " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (node) DO NOTHING",
                            db_.schema),
                {node_, std::to_string(first.seq), first.prev, first.hash, pub.empty() ? PgParam{} : PgParam{pub}}));
    auto n = read_node(c_, db_.schema, node_);
    if (!n) return n.error();
    n_ = *n;
    return {};
  }

  Status insert(const ShipLine& l) {
    TraceSummary s;
    if (l.record)
      if (auto sum = summarize_record_text(l.e.run_id, *l.record)) s = *sum;
    auto opt = [](const std::string& v) { return v.empty() ? PgParam{} : PgParam{v}; };
    auto r = c_.query_one(
        with_schema("INSERT INTO {s}.records(node, seq, run_id, prev, hash, sig, record, record_bytes, started_at,"
                    " status, exit_code, wall_ms, command, pack, pack_version, pack_digest, image, image_digest)"
                    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)"
                    " ON CONFLICT DO NOTHING RETURNING 1",
                    db_.schema),
        {node_, std::to_string(l.e.seq), l.e.run_id, l.e.prev, l.e.hash, opt(l.e.sig), l.record,
         std::to_string(l.record_bytes), s.started_at, s.status,
         s.exit_code ? PgParam{std::to_string(*s.exit_code)} : PgParam{}, std::to_string(s.wall_ms), s.command, s.pack,
         s.pack_version, s.pack_digest, s.image, s.image_digest});
    if (!r) return r.error();
    if (*r) {
      ++rep_.shipped;
      return {};
    }
    // Another shipper sent it first (or it is a rewrite): the same hash is the same line.
    auto held =
        c_.query_one(with_schema("SELECT left(hash, 257) FROM {s}.records WHERE node = $1 AND seq = $2", db_.schema),
                     {node_, std::to_string(l.e.seq)});
    if (!held) return held.error();
    if (!*held || (*held)->at(0) != l.e.hash) return diverged(l.e.seq, *held ? (*held)->at(0) : "(none)", l.e.hash);
    ++rep_.already;
    return {};
  }

  PgConn& c_;
  const Dirs& dirs_;
  const TraceDb& db_;
  std::string node_;
  NodeRow n_;
  std::uint64_t db_seq_ = 0;
  std::string db_hash_;
  std::vector<ShipLine> batch_;
  std::size_t batch_bytes_ = 0;
  ShipReport rep_;
  bool anchor_warned_ = false;
  OwnKey key_ = own_key();
  bool key_tried_ = false;
};

// The ship itself, with the store's ship lock held.
Result<ShipReport> ship_locked(const Dirs& dirs, const TraceDb& db,
                               const std::function<void(std::uint64_t)>& progress) {
  auto node = ledger_node_name(dirs, true);
  if (!node) return node.error();
  auto c = open_db(db);
  if (!c) return c.error();
  SBX_TRY(ensure_schema(*c, db.schema));
  Shipper sh(*c, dirs, db, *node);
  sh.progress_ = progress;
  SBX_TRY(sh.start());
  // Only lines already on disk are sent (ledger_durable_size): a row whose line a crash could
  // still take back would read as a divergence. Lines past it are the next ship's.
  auto durable = ledger_durable_size(dirs);
  if (!durable) return durable.error();
  auto on_disk = [&](std::uint64_t offset, std::uint64_t size) { return offset + size + 1 <= durable->size; };
  std::optional<Error> error;
  std::optional<PruneAnchorLine> anchor;
  auto fail = [&](Error e) {
    error = std::move(e);
    return false;
  };
  auto st = scan_ledger(
      dirs,
      [&](const LedgerLine& l) {
    if (!on_disk(l.offset, l.text.size())) return false;
    auto e = parse_ledger_line(l.text);
    if (!e)
      return fail(make_error(kStage, "the ledger's line " + std::to_string(l.line_no) + " cannot be shipped: " +
                                         e.error().message + " (sbx trace verify names the break)"));
    ShipLine sl{*e, std::string(e->record), e->record.size(), l.offset};
    sl.e.record = {};
    auto s = sh.line(std::move(sl), anchor);
    return s ? true : fail(s.error());
      },
      nullptr, sh.resume_offset(), 1,
      [&](const OversizeLine& l) {
    if (!on_disk(l.offset, l.size)) return false;
    auto e = parse_ledger_tail(l.tail);
    if (!e)
      return fail(make_error(kStage, "the ledger's line " + std::to_string(l.line_no) +
                                         " is over the size bound and its envelope unreadable: it cannot be shipped"));
    auto s = sh.line(ShipLine{*e, std::nullopt, l.size, l.offset}, anchor);
    return s ? true : fail(s.error());
  },
       0, &anchor, &*durable);
  if (!st) return st.error();
  if (error) return *error;
  SBX_TRY(sh.flush());
  return sh.report();
}

Result<UniqueFd> open_lock(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.ok()) return sys_error(kStage, "cannot open " + path);
  return fd;
}

}  // namespace

namespace {

// <traces>/ship.status: what the last background ship came to, for the runs that start the next
// one (kick_trace_shipper warns while it says "failed") and for whoever looks.
std::string status_path(const Dirs& dirs) { return dirs.traces + "/ship.status"; }

void write_status(const Dirs& dirs, const Result<ShipReport>& r) {
  nlohmann::json j = {{"at", static_cast<long long>(::time(nullptr))}, {"ok", r.ok()}};
  if (r) j["db_head_seq"] = r->db_head;
  else j["error"] = r.error().describe();
  (void)write_file_durable(status_path(dirs), j.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace), 0600);
}

}  // namespace

Result<ShipReport> ship_ledger(const Dirs& dirs, const TraceDb& db, long lock_wait_ms,
                               const std::function<void(std::uint64_t)>& progress) {
  SBX_TRY(ensure_dir(dirs.traces, 0700));
  auto lock = open_lock(dirs.traces + "/ship.lock");
  if (!lock) return lock.error();
  if (int e = flock_waiting(lock->get(), LOCK_EX, lock_wait_ms); e != 0)
    return make_error(kStage,
                      e == EWOULDBLOCK ? "another sbx is shipping this store (" + dirs.traces + "/ship.lock held for " +
                                             std::to_string(lock_wait_ms / 1000) + " s): try again when it is done"
                                       : "cannot lock " + dirs.traces + "/ship.lock",
                      e == EWOULDBLOCK ? 0 : e);
  auto r = ship_locked(dirs, db, progress);
  write_status(dirs, r);
  return r;
}

Result<ShipReport> ship_in_background(const Dirs& dirs, const TraceDb& db) {
  // A bound on the whole: a database that accepts and then stalls must not keep this process (and
  // the ship lock) for good. SIGALRM's default action ends it; what it did not send stays queued.
  ::alarm(kBackgroundDeadlineS);
  auto wait = open_lock(dirs.traces + "/ship.wait");
  if (!wait) return wait.error();
  if (::flock(wait->get(), LOCK_EX | LOCK_NB) != 0) return ShipReport{};  // a waiting shipper sends our line too
  auto lock = open_lock(dirs.traces + "/ship.lock");
  if (!lock) return lock.error();
  if (int e = flock_waiting(lock->get(), LOCK_EX, kBackgroundLockWaitMs); e != 0) {
    Result<ShipReport> r =
        make_error(kStage, "the ship lock " + dirs.traces + "/ship.lock stayed held", e == EWOULDBLOCK ? 0 : e);
    write_status(dirs, r);
    return r;
  }
  // From here on a new line needs a new shipper: this one may have read past the ledger's end.
  wait = UniqueFd();
  // Lines appended while this one ships found no waiter and started shippers that wait on the
  // lock; while the ledger still grew past what was sent, it ships again rather than leave them
  // to a waiter that may give up.
  Result<ShipReport> r = ship_locked(dirs, db, nullptr);
  for (int round = 0; r && round < 8; ++round) {
    auto head = ledger_head(dirs);
    if (!head || head->seq <= r->local_head) break;
    auto more = ship_locked(dirs, db, nullptr);
    if (!more) {
      r = more;
      break;
    }
    more->shipped += r->shipped;
    r = more;
  }
  write_status(dirs, r);
  return r;
}

namespace {
std::string& trace_db_flag() {
  static std::string url;
  return url;
}
}  // namespace

void set_trace_db_flag(std::string url) { trace_db_flag() = std::move(url); }
std::string effective_trace_db(const std::string& from_profile) {
  return trace_db_flag().empty() ? from_profile : trace_db_flag();
}

namespace {
// The run that starts a shipper says so when the last one failed (the database refused, a node
// name clash, a diverged line): its records are safe in the ledger, but nobody else would be told.
void warn_if_last_ship_failed(const Dirs& dirs) {
  auto text = read_regular_bounded(status_path(dirs), 8192, kStage, "ship.status");
  if (!text) return;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || j.value("ok", true) || !j["error"].is_string()) return;
  spdlog::warn(
      "the trace database's last ship from {} failed: {}; the records wait in the ledger (sbx trace ship "
      "says more)",
      dirs.traces, printable(j["error"].get<std::string>()));
}
}  // namespace

void kick_trace_shipper(const Dirs& dirs, const TraceDb& db) {
  // Shippers started earlier by this process (a long-lived one: sbx mcp) are reaped here; each
  // exits within its lock wait, so the list stays short.
  static std::vector<pid_t> started;
  std::erase_if(started, [](pid_t p) { return ::waitpid(p, nullptr, WNOHANG) != 0; });
  warn_if_last_ship_failed(dirs);
  // A shipper waiting for the lock sends this line too: starting another would only queue up.
  UniqueFd wait(::open((dirs.traces + "/ship.wait").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (wait.ok() && ::flock(wait.get(), LOCK_EX | LOCK_NB) != 0) return;
  wait = UniqueFd();
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  for (int fd = 0; fd <= 2; ++fd) posix_spawn_file_actions_addopen(&fa, fd, "/dev/null", fd ? O_WRONLY : O_RDONLY, 0);
  // Nothing else of the caller's goes with it (an --events fd:N, a caller's lock or jobserver
  // pipe that is not close-on-exec): a shipper that waits on the lock must not hold them.
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawn_file_actions_addchdir_np(&fa, "/");
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  std::vector<std::string> args = {"sbx",  "trace",        "ship",      "--background", "--db",
                                   db.url, "--traces-dir", dirs.traces, "--schema",     db.schema};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, "/proc/self/exe", &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    spdlog::warn("cannot start the trace shipper for {}: {} (the record stays queued in the ledger: sbx trace ship)",
                 dirs.traces, std::strerror(rc));
    return;
  }
  started.push_back(pid);
}

// ---------------------------------------------------------------------------------------------
// Verifying, comparing, querying

namespace {

Result<std::vector<std::string>> node_names(PgConn& c, const std::string& schema, const std::string& only) {
  std::vector<std::string> out;
  auto st = c.query(
      with_schema("SELECT left(node, " + std::to_string(kMaxNodeName + 1) +
                      ") FROM {s}.nodes WHERE $1 = '' OR node = $1"
                      " ORDER BY node LIMIT " +
                      std::to_string(kMaxNodes + 1),
                  schema),
      {only},
      [&](const PgRow& r) {
    out.push_back(r.at(0));
    return true;
      },
      kMaxNodeName * 4 + 4);
  if (!st) return st.error();
  for (auto& n : out)
    if (!node_name_ok(n))
      return make_error(kStage, "schema " + schema + " holds a node named '" + printable(n.substr(0, 64)) +
                                    (n.size() > 64 ? "...'" : "'") + ": not a node name sbx ships under");
  if (out.size() > kMaxNodes)
    return make_error(kStage, "schema " + schema + " has over " + std::to_string(kMaxNodes) +
                                  " nodes: verify them a node at a time (--node)");
  if (!only.empty() && out.empty())
    return make_error("usage", "no node '" + printable(only) + "' in schema " + schema + " of the trace database");
  return out;
}

// A node's rows as ledger lines, in seq order, in batches (memory: one batch of rows at a time, a
// record at most the ledger's bound; a larger one is handed on as a line over the bound).
// The columns `trace ls --db` filters on and shows must be what the row's record says: a row whose
// status was changed from oom to ok, record untouched, is found here (the chain covers only the
// record). "" when they agree.
std::string mismatch_words(const LedgerEntry& e, const char* what) {
  return "seq " + std::to_string(e.seq) + " (run " + e.run_id + "): its " + what +
         " column differs from its record's: edited in the database (trace ls --db filters and shows the columns)";
}

std::string summary_mismatch(const PgRow& r, const LedgerEntry& e) {
  if (r.at(17) != std::to_string(e.record.size())) return mismatch_words(e, "record_bytes");
  auto s = summarize_record_text(e.run_id, e.record);
  if (!s) return "";  // not a readable record: the walk names it
  // Each column is read cut one character past its bound (node_lines), so that a column that
  // only begins with the record's value differs too; a value over the bound is not compared.
  auto differs = [&](std::size_t col, const std::string& want, std::size_t cut) {
    return want.size() <= cut && r.at(col) != want;
  };
  const char* what = differs(7, s->started_at, 256)                                   ? "started_at"
                     : differs(8, s->status, 256)                                     ? "status"
                     : r.at(9) != (s->exit_code ? std::to_string(*s->exit_code) : "") ? "exit_code"
                     : r.at(10) != std::to_string(s->wall_ms)                         ? "wall_ms"
                     : differs(11, s->pack, kMaxShownColumn)                          ? "pack"
                     : differs(12, s->pack_version, kMaxShownColumn)                  ? "pack_version"
                     : differs(13, s->pack_digest, kMaxShownColumn)                   ? "pack_digest"
                     : differs(14, s->image, kMaxShownColumn)                         ? "image"
                     : differs(15, s->image_digest, kMaxShownColumn)                  ? "image_digest"
                     : differs(16, s->command, kMaxShownColumn)                       ? "command"
                                                                                      : nullptr;
  return what ? mismatch_words(e, what) : "";
}

Status node_lines(PgConn& c, const std::string& schema, const std::string& node, const NodeRow& n,
                  const LedgerSourceSink& sink, std::string& mismatch) {
  if (n.first_seq > 1 && sink.start) {
    PruneAnchorLine a;
    a.entry.seq = n.first_seq - 1;
    a.entry.hash = n.first_prev;
    a.entry.run_id = "?";
    a.pruned_at = "?";  // the database cannot say whether they were pruned or deleted
    *sink.start = a;
  }
  std::uint64_t after = 0, line_no = 0;
  const std::string sql = with_schema(
      "SELECT seq, left(run_id, 256), left(prev, 256), left(hash, 256), left(coalesce(sig, ''), 256),"
      " CASE WHEN octet_length(record) <= $3 THEN record END, coalesce(octet_length(record), record_bytes),"
      " left(started_at, 257), left(status, 257), exit_code, wall_ms, " +
          [] {
    std::string cols;
    for (const char* col : {"pack", "pack_version", "pack_digest", "image", "image_digest", "command"})
      cols += std::string(cols.empty() ? "" : ", ") + "left(" + col + ", " + std::to_string(kMaxShownColumn + 1) + ")";
    return cols;
      }() +
      ", record_bytes FROM {s}.records WHERE node = $1 AND seq > $2 ORDER BY seq LIMIT " + std::to_string(kVerifyBatch),
      schema);
  for (bool more = true; more;) {
    std::uint64_t rows = 0;
    bool stop = false, bad_order = false;
    SBX_TRY(c.query(
        sql, {node, std::to_string(after), std::to_string(kMaxTraceBytes)},
        [&](const PgRow& r) {
      ++rows;
      ++line_no;
      LedgerEntry e;
      e.seq = std::strtoull(r.at(0).c_str(), nullptr, 10);
      if (e.seq <= after) {  // ORDER BY seq, seq > after: only a server that lies answers this
        bad_order = true;
        return false;
      }
      after = e.seq;
      e.run_id = r.at(1);
      e.prev = r.at(2);
      e.hash = r.at(3);
      e.sig = r.at(4);
      if (r.null(5)) {  // over the bound: its envelope alone, as a file's reader keeps a long line's tail
        std::string env = ledger_line(e);
        OversizeLine o{line_no, 0, std::strtoull(r.at(6).c_str(), nullptr, 10), env};
        stop = !sink.oversize(o);
        return !stop;
      }
      e.record = r.at(5);
      if (mismatch.empty()) mismatch = summary_mismatch(r, e);
      std::string text = ledger_line(e);
      stop = !sink.line(LedgerLine{line_no, 0, text});
      return !stop;
        },
        kMaxTraceBytes + 4096));
    if (bad_order)
      return make_error(kStage, "node " + node +
                                    ": the database returned rows out of sequence order: not an answer to "
                                    "sbx's query");
    more = !stop && rows == kVerifyBatch;
  }
  return {};
}

}  // namespace

Result<std::vector<DbNodeVerify>> verify_trace_db(const TraceDb& db, const std::string& node,
                                                  const LedgerVerifier* key) {
  auto c = open_db(db);
  if (!c) return c.error();
  SBX_TRY(check_readable(*c, db.schema));
  auto names = node_names(*c, db.schema, node);
  if (!names) return names.error();
  std::vector<DbNodeVerify> out;
  for (auto& name : *names) {
    auto n = read_node(*c, db.schema, name);
    if (!n) return n.error();
    std::optional<LedgerVerifier> registered;
    if (!key && !n->pubkey.empty()) {
      auto v = LedgerVerifier::from_pem(n->pubkey, "node " + name + "'s public key in the trace database");
      if (!v) return v.error();
      registered = std::move(*v);
    }
    const LedgerVerifier* use = key ? key : registered ? &*registered : nullptr;
    std::string mismatch;
    auto r = verify_ledger_lines(
        [&](const LedgerSourceSink& s) { return node_lines(*c, db.schema, name, *n, s, mismatch); }, std::nullopt, use);
    if (!r) return r.error();
    if (!mismatch.empty()) {
      r->problem = r->problem.empty() ? mismatch : r->problem + "; then " + mismatch;
      r->intact = false;
      r->other_break = true;
    }
    out.push_back({name, use != nullptr, use ? use->fingerprint() : "", std::move(*r)});
  }
  return out;
}

namespace {
// How many of the node's rows are at or before `seq`.
Result<std::uint64_t> rows_through(PgConn& c, const std::string& schema, const std::string& node, std::uint64_t seq) {
  auto n = c.query_one(with_schema("SELECT count(*) FROM {s}.records WHERE node = $1 AND seq <= $2", schema),
                       {node, std::to_string(seq)});
  if (!n) return n.error();
  return *n ? std::strtoull((*n)->at(0).c_str(), nullptr, 10) : 0;
}
}  // namespace

Result<LedgerDbComparison> compare_ledger_with_db(const Dirs& dirs, const TraceDb& db) {
  LedgerDbComparison cmp;
  auto node = ledger_node_name(dirs, false);
  if (!node) return node.error();
  cmp.node = *node;
  auto c = open_db(db);
  if (!c) return c.error();
  SBX_TRY(check_readable(*c, db.schema));
  // seq -> the hash its row's parts hash to (not the hash column: a row edited in the database
  // differs there), "" for a row whose record is over the bound; a batch of rows at a time.
  std::map<std::uint64_t, std::string> held;
  auto load = [&](std::uint64_t after) -> Status {
    held.clear();
    return c->query(
        with_schema("SELECT seq, left(run_id, 257), left(prev, 257), CASE WHEN octet_length(record) <= $3 THEN record"
                    " END FROM {s}.records"
                    " WHERE node = $1 AND seq > $2 ORDER BY seq LIMIT " +
                        std::to_string(kVerifyBatch),
                    db.schema),
        {*node, std::to_string(after), std::to_string(kMaxTraceBytes)},
        [&](const PgRow& r) {
      std::uint64_t seq = std::strtoull(r.at(0).c_str(), nullptr, 10);
      held[seq] = r.null(3) ? "" : ledger_hash(seq, r.at(1), r.at(2), r.at(3));
      return true;
        },
        kMaxTraceBytes + 4096);
  };
  auto total = c->query_one(
      with_schema("SELECT count(*), coalesce(max(seq), 0) FROM {s}.records WHERE node = $1", db.schema), {*node});
  if (!total) return total.error();
  if (!*total) return make_error(kStage, "the database answered no row to a count");
  const std::uint64_t db_rows = std::strtoull((*total)->at(0).c_str(), nullptr, 10);
  const std::uint64_t db_max = std::strtoull((*total)->at(1).c_str(), nullptr, 10);
  SBX_TRY(load(0));
  std::optional<Error> error;
  std::optional<PruneAnchorLine> pruned;
  auto st = scan_ledger(
      dirs,
      [&](const LedgerLine& l) {
    auto e = parse_ledger_line(l.text);
    if (!e) return true;  // `trace verify` names it; the comparison is of lines that parse
    ++cmp.local;
    while (!held.empty() && held.rbegin()->first < e->seq && held.size() == kVerifyBatch)
      if (auto s = load(held.rbegin()->first); !s) {
        error = s.error();
        return false;
      }
    auto it = held.find(e->seq);
    if (it == held.end()) {
      ++cmp.not_shipped;
      if (e->seq < db_max && cmp.problem.empty())
        cmp.problem = "seq " + std::to_string(e->seq) + " (run " + e->run_id +
                      ") is in the ledger but not in the database, which holds records after it (through seq " +
                      std::to_string(db_max) + "): it was deleted from the database";
      return true;
    }
    ++cmp.in_db;
    if (it->second == e->hash) ++cmp.matching;
    else if (cmp.problem.empty())
      cmp.problem = "seq " + std::to_string(e->seq) + " (run " + e->run_id + "): the database's row hashes to " +
                    (it->second.empty() ? std::string("(a record over the bound)") : it->second.substr(0, 16) + "...") +
                    ", the local line to " + e->hash.substr(0, 16) +
                    "...: the row was edited in the database, or the ledger after it was shipped";
    return true;
      },
      nullptr, 0, 1, nullptr, 0, &pruned);
  if (!st) return st.error();
  if (error) return *error;
  // Rows of records pruned from the ledger after they were shipped are the database's to keep.
  auto below = pruned ? rows_through(*c, db.schema, *node, pruned->entry.seq) : Result<std::uint64_t>(0);
  if (!below) return below.error();
  if (cmp.problem.empty() && db_rows > cmp.in_db + *below)
    cmp.problem = std::to_string(db_rows - cmp.in_db - *below) +
                  " record(s) in the database are not in the local ledger (up to seq " + (*total)->at(1) +
                  "): the local ledger was cut, or records were inserted into the database";
  return cmp;
}

namespace {

// The WHERE clause and its parameters for a filter ($1.. in order).
std::string where_of(const DbTraceFilter& f, std::vector<PgParam>& params) {
  std::vector<std::string> terms;
  auto param = [&](std::string v) {
    params.emplace_back(std::move(v));
    std::string ref = "$";
    return ref += std::to_string(params.size());
  };
  if (!f.base.status.empty()) terms.push_back("status = " + param(f.base.status));
  if (!f.base.since.empty()) terms.push_back("started_at >= " + param(f.base.since));
  if (!f.node.empty()) terms.push_back("node = " + param(f.node));
  if (f.limit_events) terms.push_back("status IN ('timeout', 'oom', 'output_limit')");
  // A name, NAME@VERSION or a digest: each form is one condition that an index serves in
  // started_at order (an OR of two columns is served by neither: measured in bench/README.md).
  // A digest names what the run resolved (a run that gave a digest as its image resolved to it).
  auto by = [&](const std::string& v, const char* name, const char* digest, const char* version) {
    std::string d = TraceFilter::digest_form(v);
    if (d.starts_with("sha256:") && is_sha256_hex(d.substr(7)))
      return terms.push_back(std::string(digest) + " = " + param(d));
    if (auto at = v.rfind('@'); version && at != std::string::npos && at > 0)
      return terms.push_back(std::string(name) + " = " + param(v.substr(0, at)) + " AND " + version + " = " +
                             param(v.substr(at + 1)));
    terms.push_back(std::string(name) + " = " + param(v));
  };
  if (!f.base.pack.empty()) by(f.base.pack, "pack", "pack_digest", "pack_version");
  if (!f.base.image.empty()) by(f.base.image, "image", "image_digest", nullptr);
  std::string w;
  for (auto& t : terms) w += (w.empty() ? " WHERE " : " AND ") + t;
  return w;
}

// What a listing reads of a row, each text column cut in the SQL (a hostile or damaged row cannot
// make a listing's memory grow with it): kMaxShownColumn characters.
std::string run_columns() {
  std::string cols = "left(node, " + std::to_string(kMaxNodeName + 1) + "), seq";
  for (const char* c : {"run_id", "started_at", "status"}) cols += std::string(", left(") + c + ", 256)";
  cols += ", exit_code, wall_ms";
  for (const char* c : {"command", "pack", "pack_version", "pack_digest", "image", "image_digest"})
    cols += std::string(", left(") + c + ", " + std::to_string(kMaxShownColumn) + ")";
  return cols;
}

DbRun run_of(const PgRow& r) {
  DbRun d;
  d.node = r.at(0);
  d.seq = std::strtoull(r.at(1).c_str(), nullptr, 10);
  TraceSummary& s = d.summary;
  s.run_id = r.at(2);
  s.started_at = r.at(3);
  s.status = r.at(4);
  if (!r.null(5)) s.exit_code = std::atoi(r.at(5).c_str());
  s.wall_ms = std::strtoll(r.at(6).c_str(), nullptr, 10);
  s.command = r.at(7);
  s.pack = r.at(8);
  s.pack_version = r.at(9);
  s.pack_digest = r.at(10);
  s.image = r.at(11);
  s.image_digest = r.at(12);
  return d;
}

}  // namespace

Status query_trace_db(const TraceDb& db, const DbTraceFilter& f, const std::function<void(const DbRun&)>& fn,
                      bool* more) {
  auto c = open_db(db);
  if (!c) return c.error();
  SBX_TRY(check_readable(*c, db.schema));
  std::vector<PgParam> params;
  std::string sql = with_schema("SELECT " + run_columns() + " FROM {s}.records" + where_of(f, params) +
                                    " ORDER BY started_at DESC, node, seq DESC LIMIT " + std::to_string(f.limit + 1),
                                db.schema);
  std::size_t n = 0;
  if (more) *more = false;
  return c->query(
      sql, params,
      [&](const PgRow& r) {
    if (n++ == f.limit) {
      if (more) *more = true;
      return false;
    }
    fn(run_of(r));
    return true;
      },
      4 * kMaxShownColumn + 64);
}

Result<DbRecord> load_trace_db_record(const TraceDb& db, const std::string& id, const std::string& node) {
  if (id.empty() || id.size() > kMaxLedgerRunId) return make_error("usage", "trace show --db: a run id is needed");
  auto c = open_db(db);
  if (!c) return c.error();
  SBX_TRY(check_readable(*c, db.schema));
  // Exact first; else a prefix (the index on run_id serves LIKE with its pattern ops).
  std::string pattern;
  for (char ch : id) {
    if (ch == '%' || ch == '_' || ch == '\\') pattern += '\\';
    pattern += ch;
  }
  std::vector<DbRecord> found;
  for (bool exact : {true, false}) {
    std::string sql =
        with_schema("SELECT " + run_columns() +
                        ", CASE WHEN octet_length(record) <= $3 THEN record END, left(hash, 64), left(prev, 64),"
                        " left(coalesce(sig, ''), 128), left(run_id, 256) FROM {s}.records WHERE run_id " +
                        (exact ? "=" : "LIKE") + " $1 AND ($2 = '' OR node = $2) ORDER BY node, seq LIMIT 2",
                    db.schema);
    SBX_TRY(c->query(
        sql, {exact ? id : pattern + "%", node, std::to_string(kMaxTraceBytes)},
        [&](const PgRow& r) {
      DbRecord d{run_of(r), r.at(13), r.at(14), {}, r.at(16), false};
      // What is shown is what was checked: the row's parts must hash to its hash, and a node with
      // a registered key must have signed it (below).
      if (r.null(13)) d.problem = "its record is over the " + std::to_string(kMaxTraceBytes) + "-byte bound";
      else if (ledger_hash(d.run.seq, r.at(17), r.at(15), d.record) != d.hash)
        d.problem = "the row does not hash to its hash: edited in the database";
      found.push_back(std::move(d));
      return true;
        },
        kMaxTraceBytes + 4096));
    if (!found.empty()) break;
  }
  if (found.empty())
    return make_error("usage", "no run '" + printable(id) + "' in schema " + db.schema + " of the trace database" +
                                   (node.empty() ? "" : " on node " + printable(node)));
  if (found.size() > 1)
    return make_error("usage", "'" + printable(id) + "' names more than one run in the trace database (" +
                                   printable(found[0].run.summary.run_id) + " on " + printable(found[0].run.node) +
                                   ", " + printable(found[1].run.summary.run_id) + " on " +
                                   printable(found[1].run.node) + "): give more of the id, or --node");
  DbRecord& d = found[0];
  if (d.problem.empty()) {
    auto n = read_node(*c, db.schema, d.run.node);
    if (!n) return n.error();
    if (!n->pubkey.empty()) {
      auto v = LedgerVerifier::from_pem(n->pubkey, "node " + d.run.node + "'s public key in the trace database");
      if (!v) return v.error();
      if (!v->verify(d.hash, d.sig)) d.problem = "its signature does not verify with its node's registered key";
      else d.signed_by_node = true;
    }
  }
  return std::move(d);
}

}  // namespace sbx
