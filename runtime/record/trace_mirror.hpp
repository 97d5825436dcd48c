#pragma once
// The trace database: a store's ledger (trace_ledger.hpp) mirrored into PostgreSQL, so that an
// auditor can verify and query many nodes' records in one place. The local ledger stays the
// record of truth: a run is acknowledged when its line is durable there; shipping comes after,
// from the ledger itself, which is the queue (nothing is lost while the database is away: the
// next ship sends every line after what the database holds, in order).
//
// Layout (docs/ARCHITECTURE.md, "The trace database"; man sbx-trace(1)): one schema per store --
// "sbx" for the untenanted store, "sbx_tenant_<NAME>" for a tenant's -- each with
//   meta(key, value)          schema_version: kTraceDbVersion when sbx last upgraded it
//   nodes(node, first_seq, first_prev, first_hash, pubkey, ...)
//                             one row per ledger shipped here: where its shipped chain begins
//                             (after a prune, not at 1) and its Ed25519 public key, if it signs
//   records(node, seq, run_id, prev, hash, sig, record, record_bytes, <summary columns>, shipped_at)
//                             one row per ledger line, keyed (node, seq), (node, hash) unique:
//                             the exact record bytes and the chain envelope, so that a row is
//                             put back into its ledger line and verified as the file's lines are.
// Tenant separation is the database's: a tenant's readers get USAGE on its schema only.
//
// Nothing here runs on a run's path: ship_ledger runs in `sbx trace ship`, by hand or in the
// background (kick_trace_shipper, after a run's record is durable).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/base/paths.hpp"
#include "runtime/record/trace_ledger.hpp"
#include "runtime/record/trace_summary.hpp"

namespace sbx {

class LedgerVerifier;

// The schema layout this sbx writes. 1: the tables; 2: the query indexes (`trace ls --db`).
// A database at a newer version is refused (an older sbx does not write a layout it does not
// know); an older one is upgraded by the first `trace ship` of a newer sbx.
inline constexpr int kTraceDbVersion = 2;

// Where a store's records go: the database (a libpq URL without a password) and the schema.
struct TraceDb {
  std::string url;
  std::string schema;
};
// "sbx" for the untenanted store, "sbx_tenant_<tenant>" for a tenant's; a tenant name too long for
// PostgreSQL's 63-byte identifiers keeps its first 35 bytes and gains 16 hex of its SHA-256.
std::string trace_db_schema(const std::string& tenant);

// The store's node name: <traces>/node, made on first use from $SBX_NODE, else the host name and
// 8 random hex digits (two stores on one host are two nodes). 1..128 of [A-Za-z0-9._:-]. A
// $SBX_NODE that differs from the file is an error: a node renamed would ship its ledger again
// under the new name. Without `create`, a store that has none is an error (readers never make one).
Result<std::string> ledger_node_name(const Dirs& dirs, bool create);

struct ShipReport {
  std::string node;
  std::uint64_t shipped = 0;  // rows inserted now
  std::uint64_t already = 0;  // lines the database held already (a ship that raced another)
  std::uint64_t db_head = 0;  // the node's last seq in the database, after shipping
  std::uint64_t local_head = 0;
};
// Sends every ledger line after the database's head for this node, in order, in transactions of
// up to 500 rows or 16 MiB; creates or upgrades the schema first. Holds <traces>/ship.lock (waiting at most
// `lock_wait_ms`) so that one shipper per store runs at a time. A line whose seq the database
// holds with another hash is an error (the ledger was rewritten, or two stores share the node
// name). `progress` is told the count shipped after each transaction.
Result<ShipReport> ship_ledger(const Dirs& dirs, const TraceDb& db, long lock_wait_ms,
                               const std::function<void(std::uint64_t)>& progress = nullptr);

// After a run's record is durable: starts `sbx trace ship --background` for the store, detached
// (its own session; stdio /dev/null), unless one is already waiting to ship it (it will send this
// line too). Never blocks and never fails the caller: a failure to start is a warning, and the
// line is shipped by the next ship. `self` is the sbx binary (/proc/self/exe).
void kick_trace_shipper(const Dirs& dirs, const TraceDb& db);
// What the background shipper does: takes <traces>/ship.wait (or exits, when another holds it:
// that one ships this store's new lines too), then the ship lock, then lets go of the first and
// ships. Errors are the caller's to log.
Result<ShipReport> ship_in_background(const Dirs& dirs, const TraceDb& db);

// --trace-db of run, pack run, exec and mcp (and mcp's workers, which are handed it): it replaces
// the profile's trace_db for every run of this process. Set once, by the CLI, before any run.
void set_trace_db_flag(std::string url);
// The database a run's record is mirrored to: the flag's, else the profile's; "" for none.
std::string effective_trace_db(const std::string& from_profile);

// Verifies each node's chain from the database alone, as `trace verify` does a file: the same
// walk (verify_ledger_lines). `node` limits it to one; `key` (with one node) replaces the
// registered public key. Nodes with a registered key are checked for signatures.
struct DbNodeVerify {
  std::string node;
  bool signatures = false;      // a key was used
  std::string key_fingerprint;  // of that key (sha256 of its raw bytes, as `sbx key init` prints)
  LedgerVerifyReport report;
};
Result<std::vector<DbNodeVerify>> verify_trace_db(const TraceDb& db, const std::string& node,
                                                  const LedgerVerifier* key = nullptr);

// The store's ledger against what the database holds for its node: every line the database has
// must be the ledger's line of that seq (same hash); lines not shipped yet are counted.
struct LedgerDbComparison {
  std::string node;
  std::uint64_t local = 0, in_db = 0, matching = 0, not_shipped = 0;
  std::string problem;  // "" when they agree
};
Result<LedgerDbComparison> compare_ledger_with_db(const Dirs& dirs, const TraceDb& db);

// `trace ls --db`: the local filters, plus node and limit events (status timeout, oom or
// output_limit). Newest first (started_at, then node and seq); at most `limit` rows (>= 1), and
// *more says whether there were more.
struct DbTraceFilter {
  TraceFilter base;
  std::string node;
  bool limit_events = false;
  std::size_t limit = 1000;
};
struct DbRun {
  std::string node;
  std::uint64_t seq = 0;
  TraceSummary summary;
};
// Each run is handed to `fn` as it is read (a listing of any length in bounded memory).
Status query_trace_db(const TraceDb& db, const DbTraceFilter& f, const std::function<void(const DbRun&)>& fn,
                      bool* more = nullptr);

// `trace show --db`: the record of a run id or a unique prefix of one (on `node` when given).
// The row is checked before it is shown: its parts hash to its hash and, for a node with a
// registered key, its signature verifies; `problem` says what failed ("" when it holds).
struct DbRecord {
  DbRun run;
  std::string record;  // the exact bytes shipped
  std::string hash;
  std::string problem;
  std::string sig;
  bool signed_by_node = false;
};
Result<DbRecord> load_trace_db_record(const TraceDb& db, const std::string& run_id_or_prefix, const std::string& node);

}  // namespace sbx
