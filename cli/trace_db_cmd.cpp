// The trace database's side of `sbx trace` (runtime/record/trace_mirror.hpp): trace ship, and
// ls, show and verify with --db URL.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/record/ledger_key.hpp"
#include "runtime/record/pg_client.hpp"
#include "runtime/record/trace_mirror.hpp"
#include "runtime/record/trace_show.hpp"

namespace sbx::cli {
namespace {

using nlohmann::json;

struct ShipOptions {
  std::string db, profile = "untrusted";
  bool as_json = false;
  // The detached shipper a run starts (kick_trace_shipper): the store and schema directly.
  bool background = false;
  std::string traces_dir, schema;
};

// --db, else the profile's trace_db: where `trace ship` sends.
Result<std::string> ship_url(const ShipOptions& o) {
  if (!o.db.empty()) return o.db;
  auto p = load_profile(o.profile);
  if (!p) return p.error();
  auto spec = spec_from_layers(*p, nullptr, "");
  if (!spec) return spec.error();
  if (spec->trace_db.empty())
    return make_error("usage", "trace ship: no trace database: give --db URL, or set trace_db in profile '" +
                                   o.profile + "' (or the one --profile names)");
  return spec->trace_db;
}

int run_ship(const GlobalOptions& g, const std::string& tenant, const Dirs& store, const ShipOptions& o) {
  if (o.background) {
    // No terminal, no caller: what it came to goes to <traces>/ship.status, which the next run
    // that starts a shipper reads (and warns of a failure).
    if (o.db.empty() || o.schema.empty() || o.traces_dir.empty() || o.traces_dir[0] != '/')
      return usage_error(
          "trace ship --background is what a run starts: it needs --db, --schema and an absolute "
          "--traces-dir");
    Dirs d;
    d.traces = o.traces_dir;
    auto r = ship_in_background(d, TraceDb{o.db, o.schema});
    return r ? 0 : 1;
  }
  (void)g;
  auto url = ship_url(o);
  if (!url) return usage_error(url.error().describe());
  if (auto why = check_trace_db_url(*url); !why.empty()) return usage_error("trace ship: --db: " + why);
  TraceDb db{*url, trace_db_schema(tenant)};
  bool tty = !o.as_json && ::isatty(STDERR_FILENO);
  auto r = ship_ledger(store, db, 60000, [&](std::uint64_t n) {
    if (tty) std::fprintf(stderr, "\rsbx: trace ship: %llu record(s) sent", static_cast<unsigned long long>(n));
  });
  if (tty) std::fprintf(stderr, "\r\033[K");
  if (!r) {
    std::fprintf(stderr, "sbx: trace ship: %s\n", printable(r.error().describe()).c_str());
    return 1;
  }
  if (o.as_json) {
    json j = {{"node", r->node},       {"schema", db.schema},       {"shipped", r->shipped},
              {"already", r->already}, {"db_head_seq", r->db_head}, {"local_head_seq", r->local_head}};
    std::printf("%s\n", dump_ascii_json(j, 2).c_str());
  } else {
    std::printf(
        "shipped %llu record(s) of node %s to schema %s (%llu already there); the database holds it through "
        "seq %llu\n",
        static_cast<unsigned long long>(r->shipped), r->node.c_str(), db.schema.c_str(),
        static_cast<unsigned long long>(r->already), static_cast<unsigned long long>(r->db_head));
  }
  return 0;
}

}  // namespace

TraceDbCommands add_trace_db_commands(CLI::App* trace, CLI::App* ls, CLI::App* show, CLI::App* verify) {
  TraceDbCommands c;
  c.opts = std::make_shared<TraceDbOptions>();
  auto& o = *c.opts;
  const char* url_help =
      "The trace database (a libpq URL, postgresql://[USER@]HOST[:PORT]/DB; the password from "
      "PGPASSWORD or a password file, never the URL)";
  ls->add_option("--db", o.db, std::string(url_help) + ": list the runs it holds, across nodes");
  show->add_option("--db", o.db, std::string(url_help) + ": show a run it holds");
  verify->add_option("--db", o.db, std::string(url_help) + ": verify every node's chain from it alone");
  for (auto* sub : {ls, show, verify})
    sub->add_option("--node", o.node, "With --db: only the records of node NAME (trace ship names it)");
  ls->add_flag("--limit-events", o.limit_events, "With --db: only runs ended by a limit (timeout, oom, output_limit)");
  verify->add_flag("--against-ledger", o.against_ledger,
                   "With --db: compare this store's ledger with what the database holds for its node");
  auto so = std::make_shared<ShipOptions>();
  c.ship = trace->add_subcommand("ship", "Send this store's records the trace database lacks, in order");
  c.ship->add_option("--db", so->db, std::string(url_help) + " (default: the profile's trace_db)");
  c.ship->add_option("--profile", so->profile, "Take the database from this profile's trace_db (default: untrusted)");
  c.ship->add_flag("--json", so->as_json,
                   "Print one JSON object: node, schema, shipped, already, db_head_seq, local_head_seq");
  // What a run's kick_trace_shipper passes: not for people.
  c.ship->add_flag("--background", so->background, "")->group("");
  c.ship->add_option("--traces-dir", so->traces_dir, "")->group("");
  c.ship->add_option("--schema", so->schema, "")->group("");
  c.run_ship = [so](const GlobalOptions& g, const std::string& tenant, const Dirs& store) {
    return run_ship(g, tenant, store, *so);
  };
  return c;
}

int trace_ls_db(const TraceDbOptions& o, const std::string& tenant, const TraceFilter& f, bool as_json) {
  DbTraceFilter df;
  df.base = f;
  df.node = o.node;
  df.limit_events = o.limit_events;
  // Without -n a listing from the database stops at 1000 rows, and says so: a fleet's history is
  // not for one terminal.
  df.limit = f.newest ? f.newest : 1000;
  bool more = false;
  // Printed as the rows arrive: a listing of any length in bounded memory.
  std::size_t n = 0;
  if (as_json) std::printf("[");
  else
    std::printf("%-20s  %-29s  %-24s  %-17s  %4s  %8s  %s\n", "NODE", "RUN ID", "STARTED", "STATUS", "EXIT", "WALL MS",
                "COMMAND");
  auto st = query_trace_db(
      TraceDb{o.db, trace_db_schema(tenant)}, df,
      [&](const DbRun& r) {
    const TraceSummary& t = r.summary;
    if (as_json) {
      json j = {{"node", r.node}, {"seq", r.seq}};
      j.update(ls_row_json(t));
      std::printf("%s\n  %s", n ? "," : "", dump_ascii_json(j, -1).c_str());
    } else {
      std::string exit_code = t.exit_code ? std::to_string(*t.exit_code) : "-";
      std::printf("%-20s  %-29s  %-24s  %-17s  %4s  %8lld  %s\n", printable(r.node).c_str(),
                  printable(t.run_id).c_str(), printable(t.started_at).c_str(), printable(t.status).c_str(),
                  exit_code.c_str(), static_cast<long long>(t.wall_ms), printable(t.command).c_str());
    }
    ++n;
      },
      &more);
  if (as_json) std::printf("%s]\n", n ? "\n" : "");
  std::fflush(stdout);
  if (!st) return usage_error("trace ls --db: " + st.error().describe());
  if (more)
    std::fprintf(stderr, "sbx: trace ls --db: only the newest %zu matching runs are listed; give -n N for more\n",
                 df.limit);
  return 0;
}

int trace_show_db(const TraceDbOptions& o, const std::string& tenant, const std::string& id, bool text,
                  const std::function<std::string(const json&)>& pretty) {
  auto r = load_trace_db_record(TraceDb{o.db, trace_db_schema(tenant)}, id, o.node);
  if (!r) return usage_error("trace show --db: " + r.error().describe());
  // What is shown is what was checked: a row that does not hash to its hash, or whose node's
  // registered key does not verify it, is refused (exit 1), not shown.
  if (!r->problem.empty()) {
    std::fprintf(stderr,
                 "sbx: trace show --db: run %s on node %s, seq %llu: %s (sbx trace verify --db names the break)\n",
                 printable(r->run.summary.run_id).c_str(), printable(r->run.node).c_str(),
                 static_cast<unsigned long long>(r->run.seq), printable(r->problem).c_str());
    return 1;
  }
  auto rec = parse_json_doc(r->record, {kMaxTraceBytes}, "trace db", "the record of run " + r->run.summary.run_id);
  if (!rec) return usage_error("trace show --db: " + rec.error().describe());
  if (text) std::fputs(trace_show_text(*rec).c_str(), stdout);
  else std::printf("%s\n", pretty(*rec).c_str());
  std::fprintf(stderr, "sbx: run %s: node %s, seq %llu, hash %s: the row hashes to it%s\n",
               printable(r->run.summary.run_id).c_str(), printable(r->run.node).c_str(),
               static_cast<unsigned long long>(r->run.seq), printable(r->hash).c_str(),
               r->signed_by_node ? ", signed by its node's registered key" : "");
  return 0;
}

namespace {

int compare_to_ledger(const TraceDbOptions& o, const std::string& tenant, const Dirs& store, bool as_json) {
  auto c = compare_ledger_with_db(store, TraceDb{o.db, trace_db_schema(tenant)});
  if (!c) return usage_error("trace verify --against-ledger: " + c.error().describe());
  if (as_json) {
    json j = {{"node", c->node},
              {"local", c->local},
              {"in_db", c->in_db},
              {"matching", c->matching},
              {"not_shipped", c->not_shipped},
              {"agree", c->problem.empty()},
              {"problem", c->problem.empty() ? json(nullptr) : json(c->problem)}};
    std::printf("%s\n", dump_ascii_json(j, 2).c_str());
  } else if (c->problem.empty()) {
    std::printf(
        "agree: node %s: %llu local record(s), %llu in the database with the same hashes, %llu not shipped "
        "yet\n",
        c->node.c_str(), static_cast<unsigned long long>(c->local), static_cast<unsigned long long>(c->matching),
        static_cast<unsigned long long>(c->not_shipped));
  }
  if (!c->problem.empty())
    std::fprintf(stderr, "sbx: the ledger and the trace database differ: node %s: %s\n", c->node.c_str(),
                 printable(c->problem).c_str());
  return c->problem.empty() ? 0 : 1;
}

}  // namespace

int trace_verify_db(const TraceDbOptions& o, const std::string& tenant, const std::string& pubkey, bool as_json,
                    const std::function<Dirs()>& store) {
  if (o.against_ledger) return compare_to_ledger(o, tenant, store(), as_json);
  std::optional<LedgerVerifier> key;
  if (!pubkey.empty()) {
    if (o.node.empty())
      return usage_error(
          "trace verify --db: --pubkey is one node's key: give --node NAME with it (without it, each "
          "node's registered key is used)");
    auto v = LedgerVerifier::load(pubkey);
    if (!v) return usage_error("trace verify: --pubkey: " + v.error().describe());
    key = std::move(*v);
  }
  auto r = verify_trace_db(TraceDb{o.db, trace_db_schema(tenant)}, o.node, key ? &*key : nullptr);
  if (!r) return usage_error("trace verify --db: " + r.error().describe());
  bool intact = true;
  json nodes = json::array();
  for (auto& n : *r) {
    const LedgerVerifyReport& v = n.report;
    intact = intact && v.intact;
    if (!v.intact)
      std::fprintf(stderr, "sbx: node %s: chain broken: %s\n", printable(n.node).c_str(), printable(v.problem).c_str());
    if (as_json) {
      nodes.push_back({{"node", n.node},
                       {"intact", v.intact},
                       {"records", v.records},
                       {"problem", v.intact ? json(nullptr) : json(v.problem)},
                       {"head", v.records ? json{{"seq", v.head_seq}, {"hash", v.head_hash}, {"run_id", v.head_run_id}}
                                          : json(nullptr)},
                       {"shipped_from_seq", v.pruned_through + 1},
                       {"signatures", n.signatures ? json{{"signed", v.signed_records},
                                                          {"unsigned_before_signing", v.unsigned_before_signing},
                                                          {"key_fingerprint", "sha256:" + n.key_fingerprint}}
                                                   : json(nullptr)}});
    } else if (v.intact) {
      // What the verdict rests on, said where an auditor reads it: the key (its fingerprint, to
      // compare with one kept elsewhere), or that there is none; a chain that starts after seq 1.
      std::string basis = n.signatures ? "; " + std::to_string(v.signed_records) +
                                             " signed by key sha256:" + n.key_fingerprint.substr(0, 16) + "..."
                                       : "; no key registered: signatures not checked";
      if (v.pruned_through)
        basis += "; its chain starts at seq " + std::to_string(v.pruned_through + 1) +
                 " in the database; earlier records are not there: only --against-ledger can tell whether they "
                 "were pruned or deleted";
      std::printf("intact: node %s: %llu record(s); head seq %llu %s%s\n", printable(n.node).c_str(),
                  static_cast<unsigned long long>(v.records), static_cast<unsigned long long>(v.head_seq),
                  v.head_hash.c_str(), basis.c_str());
    } else {
      std::printf("broken: node %s after %llu intact record(s)\n", printable(n.node).c_str(),
                  static_cast<unsigned long long>(v.records));
    }
  }
  if (as_json) std::printf("%s\n", dump_ascii_json({{"intact", intact}, {"nodes", nodes}}, 2).c_str());
  else if (r->empty()) std::printf("intact: no node has shipped records to this schema\n");
  return intact ? 0 : 1;
}

}  // namespace sbx::cli
