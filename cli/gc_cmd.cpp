// sbx gc: retention of the blob store (runtime/image/blob_store.hpp). Says what it kept and why, and
// what it deleted; a blob a kept record needs goes only over --max-bytes, and is said to.
#include <cstdio>

#include "cli/commands.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/base/units.hpp"
#include "runtime/image/blob_store.hpp"
#include "runtime/launch/tenant.hpp"
#include "runtime/typed/pack_tree.hpp"

namespace sbx::cli {

namespace {

// gc --json: the report as one object on stdout (warnings also go there, not to stderr).
int print_gc_json(const GcReport& rep, bool dry_run, const GlobalOptions& g) {
  auto items = [](const std::vector<GcItem>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (auto& i : v)
      a.push_back(
          {{"sha256", "sha256:" + i.sha256}, {"bytes", i.bytes}, {"why", i.why}, {"needed_by_kept", i.needed_by_kept}});
    return a;
  };
  std::size_t copies = dry_run ? 0 : sweep_stale_copies(resolve_dirs(g.state_dir).state);
  nlohmann::json j = {{"dry_run", dry_run},
                      {"deleted", items(rep.deleted)},
                      {"deleted_bytes", rep.deleted_bytes},
                      {"kept", items(rep.kept)},
                      {"kept_bytes", rep.kept_bytes},
                      {"records", rep.records},
                      {"kept_records", rep.kept_records},
                      {"live_pins", rep.live_pins},
                      {"stale_pins", rep.stale_pins},
                      {"tmp_removed", rep.tmp_removed},
                      {"tmp_bytes", rep.tmp_bytes},
                      {"private_copies_removed", copies},
                      {"warnings", rep.warnings}};
  std::printf("%s\n", dump_json(j, 2, {}, true).c_str());  // ASCII (json_io.hpp)
  return 0;
}

}  // namespace

void add_gc_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out) {
  static int keep_days = -1;
  static std::string max_bytes;
  static bool dry_run = false;
  static std::optional<std::string> tenant;  // --tenant '' is a bad name, not "none"
  auto* gc = app.add_subcommand("gc", "Delete kept blobs no kept record needs (and, over --max-bytes, the oldest)");
  gc->add_option("--keep-days", keep_days, "Keep the blobs of records from the last N days (default: every record)");
  gc->add_option("--max-bytes", max_bytes,
                 "Keep the blob store under SIZE, deleting the oldest runs' blobs first (and saying so)");
  gc->add_flag("--dry-run", dry_run, "Say what would be deleted; delete nothing");
  static bool as_json = false;
  gc->add_flag("--json", as_json,
               "Print one JSON object: dry_run, deleted and kept ({sha256, bytes, why, needed_by_kept}), their byte "
               "totals, records, kept_records, pins, temporary files, private copies, warnings");
  gc->add_option("--tenant", tenant, "The blob store of tenant NAME (its own store, see --tenant of sbx run)")
      ->check(tenant_option_check, "NAME");
  out.push_back({gc, [gc, &g]() -> int {
                   if (keep_days < -1 || (keep_days == -1 && gc->count("--keep-days")))
                     return usage_error("gc: --keep-days must be 0 or more");
                   std::int64_t max = -1;
                   if (!max_bytes.empty()) {
                     auto n = parse_size_bytes(max_bytes);
                     if (!n) return usage_error("gc: --max-bytes: " + n.error().message);
                     max = *n;
                   }
                   // A tenant's blobs are kept for, and only for, the records of its own ledger: gc reads both
                   // from the tenant's store and never touches another's (check_tenant_store refuses a store
                   // that overlaps the untenanted one or another tenant's).
                   Dirs dirs = resolve_dirs(g.state_dir);
                   if (tenant) {
                     auto d = tenant_store_of(*tenant, dirs);
                     if (!d) return usage_error("gc: " + d.error().message);
                     dirs = std::move(*d);
                   }
                   auto rep = gc_blobs(dirs, keep_days, max, dry_run);
                   if (!rep) return usage_error("gc: " + rep.error().describe());
                   if (as_json) return print_gc_json(*rep, dry_run, g);
                   const char* verb = dry_run ? "would delete" : "deleted";
                   for (auto& d : rep->deleted)
                     std::printf("%s%s sha256:%s (%s): %s\n", d.needed_by_kept ? "WARNING " : "", verb,
                                 d.sha256.c_str(), format_size(d.bytes).c_str(), printable(d.why).c_str());
                   for (auto& k : rep->kept)
                     std::printf("kept sha256:%s (%s): %s\n", k.sha256.c_str(), format_size(k.bytes).c_str(),
                                 printable(k.why).c_str());
                   if (rep->tmp_removed)
                     std::printf("deleted %zu temporary file(s) of writers that were killed, %s\n", rep->tmp_removed,
                                 format_size(rep->tmp_bytes).c_str());
                   if (rep->live_pins || rep->stale_pins)
                     std::printf("%zu running sandbox(es) pin blobs; %zu pin(s) of ended processes %s\n",
                                 rep->live_pins, rep->stale_pins, dry_run ? "would be removed" : "removed");
                   // The private copies of packs, contexts and replays (pack_tree.hpp, PrivateDir) that killed
                   // runs left: swept by the next pack run or replay, and here, so that no copy outlives a gc.
                   // They live in the untenanted state dir whatever the tenant.
                   if (!dry_run)
                     if (std::size_t n = sweep_stale_copies(resolve_dirs(g.state_dir).state))
                       std::printf("deleted %zu private copy dir(s) of runs that were killed\n", n);
                   for (auto& w : rep->warnings) std::fprintf(stderr, "sbx: gc: %s\n", printable(w).c_str());
                   std::printf("%s %zu blob(s), %s; kept %zu blob(s), %s; %zu of %zu record(s) kept\n", verb,
                               rep->deleted.size(), format_size(rep->deleted_bytes).c_str(), rep->kept.size(),
                               format_size(rep->kept_bytes).c_str(), rep->kept_records, rep->records);
                   return 0;
                 }});
}

}  // namespace sbx::cli
