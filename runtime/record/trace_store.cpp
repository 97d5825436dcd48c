#include "runtime/record/trace_store.hpp"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <memory>
#include <set>
#include <vector>

#include <spdlog/spdlog.h>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/json_scan.hpp"
#include "runtime/record/ledger_key.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/base/shell_quote.hpp"
#include "runtime/record/trace_index.hpp"
#include "runtime/record/trace_ledger.hpp"

namespace sbx {
namespace {

constexpr const char* kStage = "trace";
constexpr std::string_view kSuffix = ".json";

// A run id becomes a file name: it must not climb out of the store or hide as a dot file (dot
// files are write_file_durable's temporaries, and listings skip them).
Status check_run_id(const std::string& id) {
  if (id.empty()) return make_error(kStage, "empty run id");
  if (id.front() == '.' || id.find('/') != std::string::npos || id.find('\0') != std::string::npos)
    return make_error(kStage, "invalid run id '" + id + "': must not start with '.' or contain '/'");
  return {};
}

std::string trace_path(const Dirs& dirs, const std::string& id) {
  return dirs.traces + "/" + id + std::string(kSuffix);
}

// Run ids of the stored records, in name order (which is time order, see trace_store.hpp).
// A missing store is an empty one: nothing has run yet.
Result<std::vector<std::string>> stored_ids(const Dirs& dirs) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dirs.traces.c_str()), ::closedir);
  if (!d) {
    if (errno == ENOENT) return std::vector<std::string>{};
    return sys_error(kStage, "cannot open trace store " + dirs.traces);
  }
  std::vector<std::string> ids;
  errno = 0;
  while (struct dirent* e = ::readdir(d.get())) {
    std::string_view name = e->d_name;
    if (name.empty() || name.front() == '.') continue;
    if (name.size() <= kSuffix.size() || name.substr(name.size() - kSuffix.size()) != kSuffix) continue;
    ids.emplace_back(name.substr(0, name.size() - kSuffix.size()));
  }
  if (errno != 0) return sys_error(kStage, "cannot read trace store " + dirs.traces);
  std::sort(ids.begin(), ids.end());
  return ids;
}

// A file of the previous store format, read once: a regular file (not a link: a FIFO planted there
// must not hang every listing), bounded.
Result<std::string> read_legacy(const std::string& path) {
  return read_regular_bounded(path, kMaxTraceBytes, kStage, "trace " + path, true);
}

Result<nlohmann::json> parse_record_text(const std::string& text, const std::string& path) {
  // Bounded (json_io.hpp): a record in the store may have been replaced by anything, and one
  // nested 100,000 deep must be a skipped file in `trace ls`, not a crash.
  auto parsed = parse_json_doc(text, {kMaxTraceBytes}, kStage, "corrupt trace " + path);
  if (!parsed) return parsed.error();
  nlohmann::json j = std::move(*parsed);
  if (!j.is_object()) return make_error(kStage, "corrupt trace " + path + ": not a JSON object");
  // Accept any sbx.trace/ version: readers ignore what they do not know.
  auto s = j.find("schema");
  if (s == j.end() || !s->is_string() || s->get<std::string>().rfind("sbx.trace/", 0) != 0)
    return make_error(kStage, "corrupt trace " + path + ": no \"schema\": \"sbx.trace/...\" member");
  return j;
}

Result<nlohmann::json> parse_record(const std::string& path) {
  auto text = read_legacy(path);
  if (!text) return text.error();
  return parse_record_text(*text, path);
}

}  // namespace

namespace {

// Where a run's record lies: a ledger line (offset into ledger.jsonl) or, for records of the
// previous store format, its own <run_id>.json file.
struct Stored {
  std::string id;
  std::int64_t ledger_offset = -1;  // -1: a legacy file
  // From the query index: the hash its row says the line carries, checked when the line is read
  // (read_indexed_line). Offsets from a scan of the ledger are where its lines begin.
  std::optional<std::string> index_hash;
};

// Every stored run, sorted by id (time order). A run id found in the ledger more than once (the
// ledger is append-only: a run id recorded again) is its last line; one found both in the ledger
// and as a legacy file (imported) is the ledger's.
bool ledger_exists(const Dirs& dirs) { return ::access(ledger_path(dirs).c_str(), F_OK) == 0; }

Status scan_runs(const Dirs& dirs, std::vector<Stored>& all, std::uint64_t* skipped = nullptr) {
  return scan_ledger(
      dirs,
      [&](const LedgerLine& l) {
    auto e = parse_ledger_line(l.text);
    if (!e) {
      spdlog::warn("skipping trace ledger line {} (at byte {}): {}", l.line_no, l.offset, e.error().describe());
      if (skipped) ++*skipped;
    } else {
      all.push_back({e->run_id, static_cast<std::int64_t>(l.offset)});
    }
    return true;
      },
      nullptr, 0, 1,
      [&](const OversizeLine& l) {
    // Kept under its run id, so that reading it (`trace show`, a listing) says why it cannot
    // be read; without one it is named here.
    if (auto e = parse_ledger_tail(l.tail)) {
      all.push_back({e->run_id, static_cast<std::int64_t>(l.offset)});
    } else {
      spdlog::warn("skipping trace ledger {}", describe_oversize(l));
      if (skipped) ++*skipped;
    }
    return true;
  });
}

Result<std::vector<Stored>> stored_runs(const Dirs& dirs, std::uint64_t* skipped = nullptr, bool use_index = true) {
  std::vector<Stored> all;
  // The index when it can be used (a read-only state dir cannot hold one): else the ledger, read
  // line by line.
  auto indexed = !use_index            ? Result<std::vector<IndexedLine>>(make_error(kStage, "not asked for"))
                 : ledger_exists(dirs) ? index_run_ids(dirs)
                                       : Result<std::vector<IndexedLine>>(std::vector<IndexedLine>{});
  if (indexed) {
    for (auto& l : *indexed) all.push_back({l.run_id, static_cast<std::int64_t>(l.offset), l.hash});
  } else {
    spdlog::debug("trace index unusable ({}): reading the ledger", indexed.error().describe());
    SBX_TRY(scan_runs(dirs, all, skipped));
  }
  auto legacy = stored_ids(dirs);
  if (!legacy) return legacy.error();
  for (auto& id : *legacy) all.push_back({id, -1});
  // Stable: among equal ids the ledger's lines come first, in file order; keep the last of those.
  std::stable_sort(all.begin(), all.end(), [](const Stored& a, const Stored& b) { return a.id < b.id; });
  std::vector<Stored> out;
  for (auto& s : all) {
    if (!out.empty() && out.back().id == s.id) {
      if (s.ledger_offset >= 0) out.back() = s;  // a later ledger line of the same run id
      continue;
    }
    out.push_back(s);
  }
  return out;
}

// `stale` (when given) is set when the index named a line that is not the run's (read_indexed_line).
Result<nlohmann::json> load_stored(const Dirs& dirs, const Stored& s, bool* stale = nullptr,
                                   std::string* legacy_file = nullptr) {
  if (legacy_file) legacy_file->clear();
  if (s.ledger_offset < 0) {
    if (legacy_file) *legacy_file = trace_path(dirs, s.id);
    return parse_record(trace_path(dirs, s.id));
  }
  const auto off = static_cast<std::uint64_t>(s.ledger_offset);
  auto line = s.index_hash ? read_indexed_line(dirs, {s.id, off, *s.index_hash}) : read_ledger_line(dirs, off);
  if (!line) {
    if (stale && s.index_hash && !s.index_hash->empty()) *stale = true;
    return line.error();
  }
  auto e = parse_ledger_line(*line);
  if (!e) return e.error();
  if (e->run_id != s.id)  // a scan's offset: only a ledger replaced between scan and read gets here
    return make_error(kStage, "the ledger line at byte " + std::to_string(off) + " is run " + e->run_id + "'s, not " +
                                  s.id + "'s: the ledger changed while it was read; try again");
  const std::string what = "ledger record of run " + s.id;
  auto parsed = parse_json_doc(std::string(e->record), {kMaxTraceBytes}, kStage, "corrupt trace " + what);
  if (!parsed) return parsed.error();
  if (!parsed->is_object()) return make_error(kStage, "corrupt trace " + what + ": not a JSON object");
  return std::move(*parsed);
}

}  // namespace

Result<AppendInfo> store_trace(const Dirs& dirs, const std::string& run_id, std::string_view json_text) {
  SBX_TRY(check_run_id(run_id));
  // A ledger record is one line. A raw newline in valid JSON is whitespace between tokens (inside
  // strings it is escaped), so a pretty-printed record becomes one line without changing meaning.
  std::string one_line(json_text);
  std::replace(one_line.begin(), one_line.end(), '\n', ' ');
  while (!one_line.empty() && one_line.back() == ' ') one_line.pop_back();
  // Signed while `sbx key init` has made a key (ledger_key.hpp); a key that exists but cannot be
  // used fails the store rather than leave the run quietly unsigned.
  auto signer = LedgerSigner::load_default();
  if (!signer) return make_error(kStage, "cannot store trace " + run_id + ": " + signer.error().describe());
  auto r = ledger_append(dirs, run_id, one_line, *signer ? &**signer : nullptr);
  if (!r) return make_error(kStage, "cannot store trace " + run_id + ": " + r.error().message, r.error().err);
  return r;
}

namespace {

// The legacy record as one compact line with "ledger_import" as its first member.
Result<std::string> import_line(const Dirs& dirs, const std::string& id) {
  const std::string path = trace_path(dirs, id);
  auto bytes = read_legacy(path);  // once: the bytes hashed are the bytes imported
  if (!bytes) return bytes.error();
  auto j = parse_record_text(*bytes, path);
  if (!j) return j.error();
  auto run_id = j->find("run_id");
  if (run_id == j->end() || !run_id->is_string() || run_id->get<std::string>() != id)
    return make_error(kStage, "its run_id is not its file name's");
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  out["ledger_import"] = {
      {"file", id + std::string(kSuffix)}, {"bytes", bytes->size()}, {"sha256", sha256_hex(*bytes)}};
  for (auto& [k, v] : j->items())
    if (k != "ledger_import") out[k] = v;
  std::string line = out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  // The note (and compacting) changes the size: a legacy record near the bound could become a line
  // that no reader takes (ledger_append refuses it too, less clearly).
  if (line.size() > kMaxTraceBytes)
    return make_error(kStage, "with its import note it is " + std::to_string(line.size()) + " bytes, over the " +
                                  std::to_string(kMaxTraceBytes) +
                                  "-byte bound of a ledger record; it is left where it is "
                                  "(fix: trim it, or keep it outside the store)");
  return line;
}

Status move_imported(const Dirs& dirs, const std::string& id) {
  const std::string dir = dirs.traces + "/imported";
  SBX_TRY(ensure_dir(dir, 0700));
  const std::string name = id + std::string(kSuffix);
  if (::rename(trace_path(dirs, id).c_str(), (dir + "/" + name).c_str()) != 0)
    return sys_error(kStage, "cannot move " + name + " into " + dir);
  return {};
}

}  // namespace

Result<ImportReport> import_legacy_traces(const Dirs& dirs) {
  ImportReport rep;
  auto legacy = stored_ids(dirs);
  if (!legacy) return legacy.error();
  std::set<std::string> in_ledger;
  SBX_TRY(scan_ledger(
      dirs,
      [&](const LedgerLine& l) {
    if (auto e = parse_ledger_line(l.text)) in_ledger.insert(e->run_id);
    return true;
      },
      nullptr, 0, 1,
      [&](const OversizeLine& l) {
    if (auto e = parse_ledger_tail(l.tail)) in_ledger.insert(e->run_id);  // in the ledger, if unreadable
    return true;
  }));
  auto signer = LedgerSigner::load_default();
  if (!signer) return signer.error();
  for (auto& id : *legacy) {  // name order: oldest first
    if (in_ledger.count(id)) {
      ++rep.already;
    } else {
      if (!ledger_run_id_ok(id)) {
        rep.skipped.push_back(id + std::string(kSuffix) + ": the name is not a run id the ledger accepts");
        continue;
      }
      auto line = import_line(dirs, id);
      if (!line) {
        rep.skipped.push_back(id + std::string(kSuffix) + ": " + line.error().describe());
        continue;
      }
      auto appended = ledger_append(dirs, id, *line, *signer ? &**signer : nullptr);
      if (!appended) return appended.error();  // the ledger itself failed: stop here
      ++rep.imported;
    }
    SBX_TRY(move_imported(dirs, id));
  }
  return rep;
}

Result<std::vector<TraceSummary>> list_traces(const Dirs& dirs, std::size_t newest) {
  TraceFilter f;
  f.newest = newest;
  return list_traces(dirs, f);
}

namespace {

// Without the index: every record read (the ledger's, then the legacy files), filtered here.
Result<std::vector<TraceSummary>> list_by_reading(const Dirs& dirs, const TraceFilter& f, std::uint64_t* skipped) {
  auto runs = stored_runs(dirs, skipped);
  if (!runs) return runs.error();
  std::vector<TraceSummary> out;
  for (auto it = runs->rbegin(); it != runs->rend() && (f.newest == 0 || out.size() < f.newest); ++it) {
    auto j = load_stored(dirs, *it);
    if (!j) {
      // One bad record (a crash mid-copy, a hand edit) must not hide every other run.
      spdlog::warn("skipping trace {}: {}", it->id, j.error().describe());
      if (skipped) ++*skipped;
      continue;
    }
    TraceSummary s = summarize_record(it->id, *j);
    s.in_ledger = it->ledger_offset >= 0;
    if (f.matches(s)) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

Result<std::vector<TraceSummary>> list_traces(const Dirs& dirs, const TraceFilter& f, std::uint64_t* skipped) {
  std::uint64_t none = 0;
  if (!skipped) skipped = &none;
  *skipped = 0;
  if (!ledger_exists(dirs)) return list_by_reading(dirs, f, skipped);
  auto indexed = query_index(dirs, f, skipped);
  if (!indexed) {
    // A damaged index file (a crash while it was written unsynced, a stray edit) is rebuilt once.
    spdlog::info("trace index unusable ({}): rebuilding it", indexed.error().describe());
    if (rebuild_index(dirs)) indexed = query_index(dirs, f, skipped);
  }
  if (!indexed) {
    spdlog::debug("trace index unusable ({}): reading the ledger", indexed.error().describe());
    *skipped = 0;
    return list_by_reading(dirs, f, skipped);
  }
  std::vector<TraceSummary> out;
  for (auto& r : *indexed) out.push_back(std::move(r.summary));
  // Records of the previous store format (few, and gone once imported) are read and merged in.
  auto legacy = stored_ids(dirs);
  if (!legacy) return legacy.error();
  if (legacy->empty()) return out;
  std::set<std::string> seen;
  for (auto& s : out) seen.insert(s.run_id);
  for (auto& id : *legacy) {
    if (seen.count(id)) continue;
    auto j = parse_record(trace_path(dirs, id));
    if (!j) {
      spdlog::warn("skipping trace {}: {}", id, j.error().describe());
      ++*skipped;
      continue;
    }
    TraceSummary s = summarize_record(id, *j);
    s.in_ledger = false;
    if (f.matches(s)) out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const TraceSummary& a, const TraceSummary& b) { return a.run_id > b.run_id; });
  if (f.newest && out.size() > f.newest) out.resize(f.newest);
  return out;
}

namespace {

Result<nlohmann::json> load_trace_from(const Dirs& dirs, const std::string& want, bool use_index, bool* stale,
                                       std::string* legacy_file) {
  // "last" and "-N" count back from the newest run (run ids sort by time).
  bool back = want == "last" || (want.size() > 1 && want.size() < 10 && want[0] == '-' &&
                                 want.find_first_not_of("0123456789", 1) == std::string::npos);
  if (!back) SBX_TRY(check_run_id(want));
  auto runs = stored_runs(dirs, nullptr, use_index);
  if (!runs) return runs.error();
  if (back) {
    std::size_t n = want == "last" ? 1 : std::stoul(want.substr(1));
    if (n == 0) return make_error("usage", "'-0' names no run: -1 is the newest run, -2 the one before");
    if (runs->size() < n)
      return make_error(kStage, "no trace '" + want + "' in " + dirs.traces + ": it holds " +
                                    std::to_string(runs->size()) + " run(s)");
    return load_stored(dirs, (*runs)[runs->size() - n], stale, legacy_file);
  }
  auto by_id = [](const Stored& s, const std::string& id) { return s.id < id; };
  auto exact = std::lower_bound(runs->begin(), runs->end(), want, by_id);
  if (exact != runs->end() && exact->id == want) return load_stored(dirs, *exact, stale, legacy_file);

  std::vector<const Stored*> matches;
  for (auto& s : *runs)
    if (s.id.rfind(want, 0) == 0) matches.push_back(&s);
  if (matches.empty()) return make_error(kStage, "no trace '" + want + "' in " + dirs.traces);
  if (matches.size() > 1) {
    return make_error(kStage, "run id prefix '" + want + "' is ambiguous: " + std::to_string(matches.size()) +
                                  " traces match (" + matches.front()->id + ", ..., " + matches.back()->id +
                                  "); give more characters, or 'last' for the newest run");
  }
  return load_stored(dirs, *matches.front(), stale, legacy_file);
}

}  // namespace

Result<nlohmann::json> load_trace(const Dirs& dirs, const std::string& run_id_or_prefix, std::string* legacy_file) {
  bool stale = false;
  auto r = load_trace_from(dirs, run_id_or_prefix, true, &stale, legacy_file);
  if (!stale) return r;
  // The index named a line that is not the run's (edited, or stale in a way its catch-up does not
  // see): it is rebuilt, and the run found by reading the ledger itself.
  spdlog::warn("trace index: {}; rebuilding it from the ledger", r.error().message);
  if (auto n = rebuild_index(dirs); !n) spdlog::warn("cannot rebuild the trace index: {}", n.error().describe());
  return load_trace_from(dirs, run_id_or_prefix, false, nullptr, legacy_file);
}

}  // namespace sbx
