#include "runtime/record/ledger_prune.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <nlohmann/json.hpp>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/json_scan.hpp"
#include "runtime/record/trace_index.hpp"
#include "runtime/record/trace_ledger.hpp"

namespace sbx {
namespace {

constexpr const char* kStage = "trace";
// Beside the ledger, so that the rename is within one file system. Only a prune writes it, under
// the ledger's lock: one found there is what an interrupted prune left, and is removed.
constexpr const char* kTmpName = "ledger.jsonl.prune-tmp";

// A record's started_at, scanned (the record is not built); "" when it has none.
std::string started_at(std::string_view record) {
  std::string_view raw;
  auto scan = scan_json(record, {kMaxTraceBytes}, 1, [&](const ScannedMember& m) {
    if (m.path[0] == "started_at") raw = m.raw;
  });
  if (!scan.ok || raw.empty()) return "";
  auto v = nlohmann::json::parse(raw, nullptr, /*allow_exceptions=*/false);
  return v.is_string() ? v.get<std::string>() : "";
}

// Where the ledger is cut: after the last line that the request prunes (a prefix: the scan stops
// at the first line it keeps).
struct Cut {
  std::optional<LedgerEntry> last;  // its record left empty (the line's bytes are gone after the scan)
  std::uint64_t offset = 0;         // of the first line kept
  std::uint64_t pruned = 0;
  std::optional<PruneAnchorLine> earlier;  // the anchor of an earlier prune
};

Result<Cut> find_cut(const Dirs& dirs, const PruneRequest& req, std::uint64_t head_seq) {
  Cut c;
  std::optional<Error> err;
  auto st = scan_ledger(
      dirs,
      [&](const LedgerLine& l) {
    auto e = parse_ledger_line(l.text);
    if (!e) {
      err = make_error(kStage, "ledger line " + std::to_string(l.line_no) + ": " + e.error().message);
      return false;
    }
    bool by_count = !req.keep || (head_seq >= *req.keep && e->seq <= head_seq - *req.keep);
    std::string started = req.before.empty() ? std::string() : started_at(e->record);
    bool by_age = req.before.empty() || (!started.empty() && started < req.before);
    if (!by_count || !by_age) return false;
    e->record = {};
    c.last = std::move(*e);
    c.offset = l.offset + l.text.size() + 1;
    ++c.pruned;
    return true;
      },
      nullptr, 0, 1,
      [&](const OversizeLine& l) {
    err = make_error(kStage, describe_oversize(l));
    return false;
  },
       0, &c.earlier);
  if (!st) return st.error();
  if (err) return *err;
  return c;
}

// The anchor, then the ledger's bytes from the cut on, copied in chunks into a new file that
// replaces the ledger by rename once synced.
Status rewrite(const Dirs& dirs, int ledger_fd, const Cut& c, const std::string& now, std::uint64_t& bytes) {
  const std::string tmp = dirs.traces + "/" + kTmpName;
  (void)::unlink(tmp.c_str());
  UniqueFd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!out.ok()) return sys_error(kStage, "cannot create " + tmp);
  auto fail = [&tmp](Error e) -> Status {
    (void)::unlink(tmp.c_str());
    return e;
  };
  std::string anchor = prune_anchor_line(*c.last, now);
  if (auto w = write_all(out.get(), anchor, tmp); !w) return fail(w.error());
  bytes = anchor.size();
  std::string chunk(1 << 20, '\0');
  for (std::uint64_t at = c.offset;;) {
    ssize_t n = ::pread(ledger_fd, chunk.data(), chunk.size(), static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(sys_error(kStage, "cannot read the trace ledger " + ledger_path(dirs)));
    if (n == 0) break;
    auto piece = std::string_view(chunk.data(), static_cast<std::size_t>(n));
    if (auto w = write_all(out.get(), piece, tmp); !w) return fail(w.error());
    at += piece.size();
    bytes += piece.size();
  }
  if (::fdatasync(out.get()) != 0) return fail(sys_error(kStage, "cannot sync " + tmp));
  if (::rename(tmp.c_str(), ledger_path(dirs).c_str()) != 0)
    return fail(sys_error(kStage, "cannot rename " + tmp + " over the trace ledger"));
  return sync_dir(dirs.traces);
}

}  // namespace

Result<PruneReport> prune_ledger(const Dirs& dirs, const PruneRequest& req) {
  // Records appended after this walk and before the lock are sbx's own appends, made under the
  // lock; they lie after the cut in any case.
  auto v = verify_ledger(dirs);
  if (!v) return v.error();
  if (!v->intact)
    return make_error(kStage, "the trace ledger does not verify (" + v->problem +
                                  "): pruning it would remove the evidence of the break; 'sbx trace verify' names it");
  PruneReport rep;
  Status done = with_ledger_locked(dirs, [&](int fd) -> Status {
    struct stat st;
    if (::fstat(fd, &st) != 0) return sys_error(kStage, "cannot stat the trace ledger");
    rep.bytes_before = rep.bytes_after = static_cast<std::uint64_t>(st.st_size);
    auto head = ledger_head(dirs);
    if (!head) return head.error();
    auto cut = find_cut(dirs, req, head->seq);
    if (!cut) return cut.error();
    rep.pruned_before = cut->earlier ? cut->earlier->entry.seq : 0;
    rep.kept = head->seq - (cut->last ? cut->last->seq : rep.pruned_before);
    if (!cut->last) return {};
    rep.pruned = cut->pruned;
    rep.through_seq = cut->last->seq;
    rep.through_run_id = cut->last->run_id;
    rep.through_hash = cut->last->hash;
    if (req.dry_run) {
      rep.bytes_after = prune_anchor_line(*cut->last, req.now).size() + rep.bytes_before - cut->offset;
      return {};
    }
    return rewrite(dirs, fd, *cut, req.now, rep.bytes_after);
  });
  if (!done) return done.error();
  // The index holds the old lines' offsets: rebuilt now, so that no pruned row is listed. It is
  // derived data; when this fails, the next reader finds the ledger changed and rebuilds it.
  if (rep.pruned && !req.dry_run)
    if (auto n = rebuild_index(dirs); !n) rep.index_warning = n.error().describe();
  return rep;
}

}  // namespace sbx
