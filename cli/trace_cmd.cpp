// sbx trace ls [-n|--limit N] [--status S] [--since T] [--pack P] [--image I] [--json] | export RUN (trace_export_cmd.cpp) | show RUN_ID|last|-N [--format json|text] [--json] | verify | head [--json] | prune --keep N|--before T
// | ship, and --db URL on ls, show and verify (trace_db_cmd.cpp)
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/launch/outcome.hpp"
#include "runtime/launch/tenant.hpp"
#include "runtime/base/clock.hpp"
#include "runtime/record/ledger_key.hpp"
#include "runtime/record/ledger_prune.hpp"
#include "runtime/base/paths.hpp"
#include "runtime/base/shell_quote.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/record/trace_index.hpp"
#include "runtime/record/trace_ledger.hpp"
#include "runtime/record/trace_store.hpp"
#include "runtime/record/trace_show.hpp"
#include "runtime/record/trace_summary.hpp"

namespace sbx::cli {
namespace {
// --tenant NAME on ls, show, export, verify, head and reindex: the tenant's own store (tenant.hpp), set
// once by the dispatcher below before any subcommand runs.
std::optional<Dirs> g_tenant_dirs;
Dirs store_dirs(const GlobalOptions& g) { return g_tenant_dirs ? *g_tenant_dirs : resolve_dirs(g.state_dir); }

using nlohmann::json;

// nlohmann::json keeps members sorted by name; print the record's top level in the schema's order
// (schema and run_id first, as the runtime writes it) so `show` reads top-down like the record.
std::string pretty(const json& r) {
  static const char* const kOrder[] = {"schema",     "run_id", "started_at",  "ended_at", "sbx",       "host",
                                       "invocation", "image",  "enforcement", "inputs",   "outputs",   "stdin",
                                       "stdout",     "stderr", "result",      "usage",    "violations"};
  if (!r.is_object()) return dump_ascii_json(r, 2);
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const char* k : kOrder)
    if (auto it = r.find(k); it != r.end()) out[k] = *it;
  for (auto& [k, v] : r.items())
    if (!out.contains(k)) out[k] = v;  // members a later schema version added
  return out.dump(2, ' ', true, nlohmann::ordered_json::error_handler_t::replace);
}

struct LsOptions {
  std::size_t newest = 0;  // -n: at most this many runs, newest first (0: all)
  bool as_json = false;
  std::string status, since, pack, image;  // filters (trace_store.hpp: TraceFilter)
};

}  // namespace

nlohmann::json ls_row_json(const TraceSummary& t) {
  return {{"run_id", t.run_id},
          {"started_at", t.started_at},
          {"status", t.status},
          {"exit_code", t.exit_code ? json(*t.exit_code) : json(nullptr)},
          {"wall_ms", t.wall_ms},
          {"command", t.command},
          {"pack", t.pack.empty() ? json(nullptr)
                                  : json{{"name", t.pack}, {"version", t.pack_version}, {"digest", t.pack_digest}}},
          {"image", {{"name", t.image}, {"digest", t.image_digest.empty() ? json(nullptr) : json(t.image_digest)}}}};
}

namespace {

int run_ls(const GlobalOptions& g, const LsOptions& o, const TraceDbOptions& db, const std::string& tenant) {
  TraceFilter f;
  f.newest = o.newest;
  if (!o.status.empty())
    if (auto st = parse_run_status(o.status); !st) return usage_error("trace ls: --status: " + st.error().message);
  f.status = o.status;
  if (!o.since.empty()) {
    auto now_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    auto bound = since_bound(o.since, static_cast<std::int64_t>(now_ms));
    if (!bound) return usage_error("trace ls: " + bound.error().message);
    f.since = *bound;
  }
  f.pack = o.pack;
  f.image = o.image;
  if (!db.db.empty()) return trace_ls_db(db, tenant, f, o.as_json);
  if (!db.node.empty() || db.limit_events)
    return usage_error("trace ls: --node and --limit-events filter a trace database's runs: give --db URL with them");
  std::uint64_t skipped = 0;
  auto traces = list_traces(store_dirs(g), f, &skipped);
  if (!traces) return usage_error(traces.error().describe());
  // Exit 1 (after the whole listing) when something of the store could not be read: each is named
  // above; a script that must see every run checks the status, one that lists what it can goes on.
  std::size_t legacy = 0;
  for (auto& t : *traces) legacy += t.in_ledger ? 0 : 1;
  auto done = [&] {
    if (legacy)
      std::fprintf(stderr,
                   "sbx: trace ls: %zu run(s) %s are files of the previous store format (%s/RUN_ID.json), outside the "
                   "hash-chained ledger: 'sbx trace verify' does not cover them ('sbx trace import' appends them)\n",
                   legacy, o.as_json ? "with \"in_ledger\": false" : "marked [not in ledger]",
                   printable(store_dirs(g).traces).c_str());
    if (skipped == 0) return 0;
    std::fprintf(
        stderr,
        "sbx: trace ls: %llu ledger line(s) or record(s) could not be read and are not listed (exit 1; 'sbx trace verify' checks the ledger)\n",
        static_cast<unsigned long long>(skipped));
    return 1;
  };
  if (o.as_json) {
    // For scripts: one array, newest first; text of outside origin stays JSON-escaped (ASCII).
    json a = json::array();
    for (auto& t : *traces) {
      a.push_back(ls_row_json(t));
      a.back()["in_ledger"] = t.in_ledger;
    }
    std::printf("%s\n", dump_ascii_json(a, 2).c_str());
    std::fflush(stdout);
    return done();
  }
  // Run ids are 29 characters and RFC 3339 times with ms 24, so the columns line up for sbx's own
  // records; longer values just push the line to the right.
  std::printf("%-29s  %-24s  %-17s  %4s  %8s  %s\n", "RUN ID", "STARTED", "STATUS", "EXIT", "WALL MS", "COMMAND");
  for (auto& t : *traces) {
    std::string exit_code = t.exit_code ? std::to_string(*t.exit_code) : "-";
    // A record outside the ledger says so at the end of its line (after the command, so that the
    // columns stay where scripts cut them).
    std::printf("%-29s  %-24s  %-17s  %4s  %8lld  %s%s\n", printable(t.run_id).c_str(), printable(t.started_at).c_str(),
                printable(t.status).c_str(), exit_code.c_str(), static_cast<long long>(t.wall_ms),
                printable(t.command).c_str(), t.in_ledger ? "" : "  [not in ledger]");
  }
  std::fflush(stdout);
  return done();
}

// Exit 0 when the chain is intact, 1 when broken (the first break on stderr, one line), 125
// when the ledger cannot be read at all. --json: one object on stdout in both first cases.
struct VerifyOptions {
  std::string anchor, pubkey;
  bool as_json = false;
};

int print_verify_json(const LedgerVerifyReport& r, bool signatures) {
  json j = {{"intact", r.intact},
            {"records", r.records},
            {"oversize_lines", r.oversize_lines},
            {"problem", r.intact ? json(nullptr) : json(r.problem)},
            {"head", r.records || r.pruned_through
                         ? json{{"seq", r.head_seq}, {"hash", r.head_hash}, {"run_id", r.head_run_id}}
                         : json(nullptr)},
            {"pruned", r.pruned_through
                           ? json{{"through_seq", r.pruned_through}, {"hash", r.pruned_hash}, {"at", r.pruned_at}}
                           : json(nullptr)},
            {"signatures",
             signatures ? json{{"signed", r.signed_records}, {"unsigned_before_signing", r.unsigned_before_signing}}
                        : json(nullptr)}};
  std::printf("%s\n", dump_ascii_json(j, 2).c_str());
  return r.intact ? 0 : 1;
}

int run_verify(const GlobalOptions& g, const VerifyOptions& o, const TraceDbOptions& db, const std::string& tenant) {
  if (!db.db.empty()) {
    if (!o.anchor.empty())
      return usage_error("trace verify: --anchor is for a local ledger; with --db each node's chain is checked whole");
    return trace_verify_db(db, tenant, o.pubkey, o.as_json, [&g] { return store_dirs(g); });
  }
  if (!db.node.empty() || db.against_ledger)
    return usage_error("trace verify: --node and --against-ledger are for a trace database: give --db URL with them");
  std::optional<LedgerVerifier> verifier;
  if (!o.pubkey.empty()) {
    auto v = LedgerVerifier::load(o.pubkey);
    if (!v) return usage_error("trace verify: --pubkey: " + v.error().describe());
    verifier = std::move(*v);
  }
  std::optional<LedgerAnchor> anchor;
  const std::string& anchor_text = o.anchor;
  if (!anchor_text.empty()) {
    // "SEQ:HASH" or "SEQ HASH ..." (what `trace head` prints).
    auto sep = anchor_text.find_first_of(": ");
    std::string seq = anchor_text.substr(0, sep);
    std::string hash = sep == std::string::npos ? "" : anchor_text.substr(sep + 1, 64);
    if (seq.empty() || seq.size() > 19 || seq.find_first_not_of("0123456789") != std::string::npos ||
        hash.size() != 64 || hash.find_first_not_of("0123456789abcdef") != std::string::npos || std::stoull(seq) == 0)
      return usage_error("trace verify: --anchor wants SEQ:HASH (as 'sbx trace head' prints it), got '" + anchor_text +
                         "'");
    anchor = LedgerAnchor{std::stoull(seq), hash};
  }
  auto r = verify_ledger(store_dirs(g), anchor, verifier ? &*verifier : nullptr);
  if (!r) return usage_error(r.error().describe());
  if (!r->intact) std::fprintf(stderr, "sbx: trace ledger broken: %s\n", printable(r->problem).c_str());
  if (o.as_json) return print_verify_json(*r, verifier.has_value());
  if (!r->intact) {
    if (r->oversize_lines)  // the walk went on past them: what it checked is not "before the break"
      std::printf("broken: %llu record(s) verified, %llu line(s) over the size bound not checked\n",
                  static_cast<unsigned long long>(r->records), static_cast<unsigned long long>(r->oversize_lines));
    else std::printf("broken after %llu intact record(s)\n", static_cast<unsigned long long>(r->records));
    return 1;
  }
  // A pruned ledger: said first, as what the walk started from (not a break).
  if (r->pruned_through)
    std::printf(
        "pruned before seq %llu: records through seq %llu were removed at %s; the chain is verified from "
        "the last one's hash %s\n",
        static_cast<unsigned long long>(r->pruned_through + 1), static_cast<unsigned long long>(r->pruned_through),
        printable(r->pruned_at).c_str(), r->pruned_hash.c_str());
  if (r->records == 0) {
    std::printf("intact: the ledger holds no records\n");
    return 0;
  }
  if (verifier && r->unsigned_before_signing)
    std::printf(
        "signatures: %llu record(s) signed by the key in %s; the %llu before signing began are not signed (the first "
        "signed record's chain covers them)\n",
        static_cast<unsigned long long>(r->signed_records), printable(o.pubkey).c_str(),
        static_cast<unsigned long long>(r->unsigned_before_signing));
  else if (verifier) std::printf("signatures: every record signed by the key in %s\n", printable(o.pubkey).c_str());
  std::printf("intact: %llu record(s); head seq %llu %s (run %s)\n", static_cast<unsigned long long>(r->records),
              static_cast<unsigned long long>(r->head_seq), r->head_hash.c_str(), r->head_run_id.c_str());
  return 0;
}

// sbx trace prune: here rather than in `sbx gc`, which collects the blob store by what the
// records need; this removes records themselves, verified and reported like the other ledger
// commands (verify, head, reindex) and tenant-aware like them. A `sbx gc` after it frees the blobs
// only the pruned records needed.
struct PruneOptions {
  std::optional<std::string> keep, before;
  bool dry_run = false, as_json = false;
};

int print_prune(const PruneReport& r, const PruneOptions& o) {
  if (!r.index_warning.empty())
    std::fprintf(stderr,
                 "sbx: warning: trace prune: the query index was not rebuilt (%s); the next 'trace ls' does it\n",
                 printable(r.index_warning).c_str());
  if (o.as_json) {
    json j = {{"dry_run", o.dry_run},
              {"pruned", r.pruned},
              {"kept", r.kept},
              {"pruned_through",
               r.through_seq ? json{{"seq", r.through_seq}, {"run_id", r.through_run_id}, {"hash", r.through_hash}}
                             : json(nullptr)},
              {"pruned_before", r.pruned_before ? json(r.pruned_before) : json(nullptr)},
              {"bytes_before", r.bytes_before},
              {"bytes_after", r.bytes_after}};
    std::printf("%s\n", dump_ascii_json(j, 2).c_str());
    return 0;
  }
  auto u = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
  if (r.pruned == 0) {
    std::printf("nothing to prune: %llu record(s), none matches --keep/--before\n", u(r.kept));
    return 0;
  }
  std::printf("%s %llu record(s) through seq %llu (run %s); %llu kept; the ledger %s from %llu to %llu bytes\n",
              o.dry_run ? "would prune" : "pruned", u(r.pruned), u(r.through_seq), r.through_run_id.c_str(), u(r.kept),
              o.dry_run ? "would go" : "went", u(r.bytes_before), u(r.bytes_after));
  if (!o.dry_run)
    std::printf("'sbx trace verify' now starts after seq %llu; 'sbx gc' frees the blobs only pruned records needed\n",
                u(r.through_seq));
  return 0;
}

int run_prune(const GlobalOptions& g, const PruneOptions& o) {
  if (!o.keep && !o.before)
    return usage_error(
        "trace prune: give --keep N (keep the newest N records) and/or --before TIME (prune records "
        "started before it, e.g. 30d or 2026-12-01)");
  PruneRequest req;
  if (o.keep) {
    const std::string& v = *o.keep;
    if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos)
      return usage_error("trace prune: --keep wants a count of records (0 or more), got '" + v + "'");
    req.keep = std::stoull(v);
  }
  if (o.before) {
    auto now_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    auto bound = since_bound(*o.before, static_cast<std::int64_t>(now_ms), "--before");
    if (!bound) return usage_error("trace prune: " + bound.error().message);
    req.before = *bound;
  }
  req.dry_run = o.dry_run;
  req.now = rfc3339_now();
  auto r = prune_ledger(store_dirs(g), req);
  if (!r) return usage_error("trace prune: " + r.error().describe());
  return print_prune(*r, o);
}

CLI::App* add_prune(CLI::App* trace, PruneOptions& o) {
  auto* prune = trace->add_subcommand(
      "prune", "Remove the oldest records from the ledger, leaving an anchor that 'trace verify' starts from");
  prune->add_option("--keep", o.keep, "Keep the newest N records (N >= 0)");
  prune->add_option("--before", o.before,
                    "Prune records started before this: a duration before now (30d, 12h, 1w) or a UTC RFC 3339 time "
                    "or prefix (2026-12-01); with --keep, a record goes only when both allow it");
  prune->add_flag("--dry-run", o.dry_run, "Say what would be pruned; change nothing");
  prune->add_flag("--json", o.as_json,
                  "Print one JSON object: dry_run, pruned, kept, pruned_through {seq, run_id, hash}, pruned_before, "
                  "bytes_before, bytes_after");
  return prune;
}

int run_import(const GlobalOptions& g) {
  auto rep = import_legacy_traces(store_dirs(g));
  if (!rep) return usage_error(rep.error().describe());
  for (auto& s : rep->skipped) std::fprintf(stderr, "sbx: trace import: skipped %s\n", printable(s).c_str());
  std::printf("imported %zu record(s) into the ledger; %zu already there; %zu skipped\n", rep->imported, rep->already,
              rep->skipped.size());
  return rep->skipped.empty() ? 0 : 1;
}

// "SEQ HASH RUN_ID": what another system stores to anchor the chain (a later ledger that does not
// reach this head with this hash has been rewritten or cut).
int run_head(const GlobalOptions& g, bool as_json) {
  auto h = ledger_head(store_dirs(g));
  if (!h) return usage_error(h.error().describe());
  if (h->torn_bytes)
    std::fprintf(stderr, "sbx: warning: the ledger ends in %llu bytes of an interrupted append (sbx trace verify)\n",
                 static_cast<unsigned long long>(h->torn_bytes));
  if (as_json) {
    json j = {{"seq", h->seq},
              {"hash", h->seq ? json(h->hash) : json(nullptr)},
              {"run_id", h->seq ? json(h->run_id) : json(nullptr)}};
    std::printf("%s\n", j.dump().c_str());
  } else if (h->seq == 0) {
    std::printf("0 - -\n");
  } else {
    std::printf("%llu %s %s\n", static_cast<unsigned long long>(h->seq), h->hash.c_str(), h->run_id.c_str());
  }
  return 0;
}

struct ShowOptions {
  std::string run_id;
  std::string format = "json";
  bool as_json = false;
};

// trace show: the selector may be -N, which CLI11 leaves among the extras (see allow_extras below).
int run_show(GlobalOptions& g, CLI::App& show, ShowOptions& opts, const TraceDbOptions& db, const std::string& tenant) {
  for (auto& extra : show.remaining()) {
    bool selector =
        extra.size() > 1 && extra[0] == '-' && extra.find_first_not_of("0123456789", 1) == std::string::npos;
    if (!selector || !opts.run_id.empty())
      return usage_error("trace show: unexpected argument '" + extra + "' (see 'sbx trace show --help')");
    opts.run_id = extra;
  }
  if (opts.run_id.empty()) return usage_error("trace show: RUN_ID is required (a run id, a prefix, 'last' or -N)");
  if (opts.as_json && show.count("--format") && opts.format != "json")
    return usage_error("trace show: --json and --format " + opts.format + " contradict each other");
  if (!db.db.empty()) return trace_show_db(db, tenant, opts.run_id, opts.format == "text" && !opts.as_json, pretty);
  if (!db.node.empty()) return usage_error("trace show: --node picks a run in a trace database: give --db URL with it");
  std::string legacy_file;
  auto rec = load_trace(store_dirs(g), opts.run_id, &legacy_file);
  if (!rec) return usage_error(rec.error().describe());
  if (!legacy_file.empty())
    std::fprintf(stderr,
                 "sbx: warning: trace show: this record is the file %s of the previous store format, outside the "
                 "hash-chained ledger: 'sbx trace verify' does not cover it ('sbx trace import' appends it)\n",
                 printable(legacy_file).c_str());
  if (opts.format == "text" && !opts.as_json) std::fputs(trace_show_text(*rec).c_str(), stdout);
  else std::printf("%s\n", pretty(*rec).c_str());
  return 0;
}

int run_reindex(GlobalOptions& g) {
  auto n = rebuild_index(store_dirs(g));
  if (!n) return usage_error(n.error().describe());
  std::printf("indexed %llu ledger line(s)\n", static_cast<unsigned long long>(*n));
  return 0;
}

CLI::App* add_ls(CLI::App* trace, LsOptions& o) {
  auto* ls = trace->add_subcommand("ls", "List stored runs, newest first");
  // 0 is refused rather than read as "all" or "none": a script that computed 0 has a bug to see.
  ls->add_option("-n,--newest,--limit", o.newest, "List only the N newest (matching) runs (N >= 1)")
      ->check(CLI::Validator(
          [](const std::string& v) -> std::string {
            if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos ||
                std::stoul(v) == 0)
              return "-n wants a count of runs from 1 to 999999999, got '" + v + "' (leave -n out to list all runs)";
            return "";
          },
          "N"));
  ls->add_flag("--json", o.as_json,
               "Print a JSON array (run_id, started_at, status, exit_code, wall_ms, command, pack, image)");
  ls->add_option("--pack", o.pack, "Only runs of this pack: NAME, NAME@VERSION or its digest");
  ls->add_option("--image", o.image, "Only runs on this image: the name the run gave (host, NAME[:TAG]) or its digest");
  ls->add_option(
      "--status", o.status,
      "Only runs with this status (ok, exit_nonzero, signaled, timeout, oom, seccomp_violation, output_limit, input_invalid, output_invalid, setup_error)");
  ls->add_option(
      "--since", o.since,
      "Only runs started at or after this time: a duration before now (30m, 1h, 2d, 1w) or a UTC RFC 3339 time or prefix (2026-12-01, 2026-12-01T08:30)");
  return ls;
}

}  // namespace

void add_trace_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out) {
  auto* trace = app.add_subcommand("trace", "List and show trace records of past runs");
  trace->require_subcommand(1);
  auto ls_opts = std::make_shared<LsOptions>();
  auto* ls = add_ls(trace, *ls_opts);
  auto tenant = std::make_shared<std::optional<std::string>>();
  auto* reindex = trace->add_subcommand("reindex", "Rebuild the query index (traces/index.sqlite) from the ledger");
  auto* verify = trace->add_subcommand("verify", "Check the trace ledger's hash chain; name the first break");
  auto* import = trace->add_subcommand(
      "import", "Append records of the previous store format (one <run_id>.json per run) to the ledger");
  auto vopts = std::make_shared<VerifyOptions>();
  verify->add_option(
      "--pubkey", vopts->pubkey,
      "Ed25519 public key (PEM, from 'sbx key init'): every record from the first signed one on must carry a valid signature");
  verify->add_option("--anchor", vopts->anchor,
                     "SEQ:HASH of a head printed earlier by 'trace head': the chain must still reach it");
  verify->add_flag("--json", vopts->as_json,
                   "Print one JSON object: intact, records, oversize_lines, problem, head, signatures");
  auto* head = trace->add_subcommand("head", "Print the ledger's head (seq, hash, run id) for anchoring elsewhere");
  auto head_json = std::make_shared<bool>(false);
  head->add_flag("--json", *head_json, "Print {\"seq\", \"hash\", \"run_id\"}");
  auto popts = std::make_shared<PruneOptions>();
  auto* prune = add_prune(trace, *popts);
  auto exported = add_trace_export_command(trace, [&g] { return store_dirs(g); });
  auto* show = trace->add_subcommand("show", "Print one run's trace record");
  auto opts = std::make_shared<ShowOptions>();
  show->add_option("run_id", opts->run_id,
                   "Run id, a unique prefix of one, 'last' (the newest run) or -N (the Nth newest: -1 is 'last')");
  // CLI11 reads "-1" as an unknown short option: extras are collected and the selector is taken
  // from them below; anything else left over is still an error.
  show->allow_extras();
  show->add_option("--format", opts->format, "json (the record, pretty-printed) or text (a summary)")
      ->check(CLI::IsMember({"json", "text"}));
  show->add_flag("--json", opts->as_json, "The same as --format json");
  auto dbc = add_trace_db_commands(trace, ls, show, verify);
  for (auto* sub : {ls, show, exported.app, verify, head, reindex, prune, dbc.ship})
    sub->add_option("--tenant", *tenant, "The records of tenant NAME (its own store, see --tenant of sbx run)")
        ->check(tenant_option_check, "NAME");

  out.push_back(
      {trace,
       [ls, show, verify, vopts, import, reindex, head, head_json, opts, ls_opts, exported, tenant, prune, popts, dbc,
        &g]() -> int {
         const TraceDbOptions& db = *dbc.opts;
         const std::string tenant_name = tenant->value_or("");
         // Reading a trace database needs no local store: an auditor's machine has no tenant files.
         bool db_only = !db.db.empty() && (ls->parsed() || show->parsed() || (verify->parsed() && !db.against_ledger));
         if (*tenant && !db_only) {
           auto d = tenant_store_of(**tenant, resolve_dirs(g.state_dir));
           if (!d) return usage_error(d.error().message);
           g_tenant_dirs = std::move(*d);
         }
         if (ls->parsed()) return run_ls(g, *ls_opts, db, tenant_name);
         if (dbc.ship->parsed()) return dbc.run_ship(g, tenant_name, store_dirs(g));
         if (exported.app->parsed()) return exported.run();
         if (verify->parsed()) return run_verify(g, *vopts, db, tenant_name);
         if (import->parsed()) return run_import(g);
         if (reindex->parsed()) return run_reindex(g);
         if (head->parsed()) return run_head(g, *head_json);
         if (prune->parsed()) return run_prune(g, *popts);
         if (show->parsed()) return run_show(g, *show, *opts, db, tenant_name);
         return usage_error(
             "trace: expected 'ls', 'show RUN_ID', 'export RUN_ID', 'verify', 'head', 'prune', 'ship', 'import' or "
             "'reindex'");
       }});
}

}  // namespace sbx::cli
