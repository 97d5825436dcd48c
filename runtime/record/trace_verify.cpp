// verify_ledger (trace_ledger.hpp): walks the chain and names its first break.
#include <utility>

#include <nlohmann/json.hpp>

#include "runtime/base/json_io.hpp"
#include "runtime/base/json_scan.hpp"
#include "runtime/record/ledger_key.hpp"
#include "runtime/record/trace_ledger.hpp"

namespace sbx {
namespace {

// The run id a damaged line still shows, for the message: the envelope's, else the record's.
std::string run_id_hint(std::string_view line) {
  constexpr std::string_view key = "\"run_id\":\"";
  auto at = line.rfind(key);
  if (at == std::string_view::npos) return "?";
  auto rest = line.substr(at + key.size());
  auto id = rest.substr(0, rest.find('"'));
  return ledger_run_id_ok(id) ? std::string(id) : "?";
}

struct Walker {
  LedgerVerifyReport& r;
  const std::optional<LedgerAnchor>& anchor;
  const LedgerVerifier* verifier;
  std::string_view find_run;
  std::string prev_hash = std::string(64, '0');
  std::string prev_run;
  std::uint64_t last_seq = 0;  // of the line before (records counts only those checked)
  bool resync = false;         // after a skipped line whose envelope is unreadable: take the next as it links

  std::string where(const LedgerLine& l, const std::string& run) const {
    return "line " + std::to_string(l.line_no) + " (run " + run + ")";
  }
  std::string after() const {
    return last_seq ? " after seq " + std::to_string(last_seq) + " (run " + prev_run + ")" : " at the start";
  }
  bool fail(std::string problem) {
    r.intact = false;
    r.other_break = true;
    // After a skipped line (which does not stop the walk) the first other break is added to its report.
    r.problem = r.problem.empty() ? std::move(problem) : r.problem + "; then " + problem;
    return false;
  }

  // A line over the size bound: its record cannot be read, so it cannot be checked and the chain
  // is broken there; its envelope (in its last bytes) still says how the chain goes on, so the
  // lines after it are verified against it.
  bool skip(const OversizeLine& l) {
    ++r.oversize_lines;
    auto e = parse_ledger_tail(l.tail);
    if (e && !find_run.empty() && e->run_id == find_run) ++r.run_lines;
    if (r.problem.empty()) {
      r.intact = false;
      r.problem = "line " + std::to_string(l.line_no) +
                  (e ? " (run " + e->run_id + ", seq " + std::to_string(e->seq) + ")" : "") + after() + ": at byte " +
                  std::to_string(l.offset) + ", " + std::to_string(l.size) + " bytes, over the " +
                  std::to_string(kMaxLedgerLine) +
                  "-byte bound of a ledger line: skipped by every reader, its record unchecked";
    }
    // What can be checked of it without its record: its signature and the anchor, from its envelope.
    if (e && verifier && e->sig.empty() && !r.signed_records) ++r.unsigned_before_signing;
    else if (e && verifier && (e->sig.empty() || !verifier->verify(e->hash, e->sig)))
      fail("line " + std::to_string(l.line_no) + " (run " + e->run_id + "), seq " + std::to_string(e->seq) +
           ": not signed, or the signature does not verify with the public key");
    else if (e && verifier) ++r.signed_records;
    if (e && anchor && anchor->seq == e->seq && anchor->hash != e->hash)
      fail("line " + std::to_string(l.line_no) + " (run " + e->run_id + "), seq " + std::to_string(e->seq) +
           ": not the anchored head's hash: the ledger was rewritten from this record or before");
    if (!e || e->seq != last_seq + 1 || e->prev != prev_hash) {
      r.other_break = true;  // the chain is not followed through it: the next line is taken as it links
      resync = true;
      return true;
    }
    last_seq = e->seq;
    prev_hash = e->hash;
    prev_run = e->run_id;
    return true;
  }

  // A pruned ledger (trace_ledger.hpp, PruneAnchorLine): the walk goes on from the last pruned
  // record's envelope, as it would have from its line. What can be checked of that envelope
  // without its record is: its signature, and an anchored head at its seq. An anchored head
  // before it was pruned: nothing is left to check it against, which is not "intact".
  bool start_after(const std::optional<PruneAnchorLine>& a) {
    if (!a) return true;
    const LedgerEntry& e = a->entry;
    r.pruned_through = e.seq;
    r.pruned_hash = e.hash;
    r.pruned_at = a->pruned_at;
    last_seq = r.head_seq = e.seq;
    prev_hash = r.head_hash = e.hash;
    prev_run = r.head_run_id = e.run_id;
    std::string at = "the prune anchor (line 1, through seq " + std::to_string(e.seq) + ")";
    if (verifier && !e.sig.empty() && !verifier->verify(e.hash, e.sig))
      return fail(at + ": the signature does not verify with the public key: forged, or signed by another key");
    if (verifier && !e.sig.empty()) ++r.signed_records;
    if (anchor && anchor->seq == e.seq && anchor->hash != e.hash)
      return fail(at + ": not the anchored head's hash: the ledger was rewritten from this record or before");
    if (anchor && anchor->seq < e.seq)
      return fail("the anchored head seq " + std::to_string(anchor->seq) + " was pruned (the ledger starts after seq " +
                  std::to_string(e.seq) + "): it cannot be checked; anchor a newer head ('sbx trace head')");
    return true;
  }

  bool check(const LedgerLine& l) {
    auto e = parse_ledger_line(l.text);
    if (!e) return fail(where(l, run_id_hint(l.text)) + after() + ": " + e.error().message);
    if (resync) {  // after an unfollowable skipped line: this line's own links are taken as given
      resync = false;
      last_seq = e->seq ? e->seq - 1 : 0;
      prev_hash = e->prev;
    }
    const std::uint64_t want = last_seq + 1;
    std::string at = where(l, e->run_id);
    if (ledger_hash(e->seq, e->run_id, e->prev, e->record) != e->hash)
      return fail(at + ", seq " + std::to_string(e->seq) +
                  ": edited: the record or its envelope does not hash to the hash on its line");
    if (e->seq > want)
      return fail(
          at + ": seq " + std::to_string(e->seq) + " where " + std::to_string(want) + " was expected" + after() + ": " +
          (e->seq - want == 1 ? "record seq " + std::to_string(want) + " is"
                              : "records seq " + std::to_string(want) + ".." + std::to_string(e->seq - 1) + " are") +
          " missing (deleted, or moved later)");
    if (e->seq < want)
      return fail(at + ": seq " + std::to_string(e->seq) + " where " + std::to_string(want) + " was expected" +
                  after() + ": a record was inserted here, or the records were reordered");
    // Signing starts when `sbx key init` makes the key: the lines before the first signed one are
    // counted, not a break (their hashes are covered by that signed line's chain link). After it, a
    // line without "sig" is a break: stripping signatures off later lines must not pass.
    if (verifier && e->sig.empty() && !r.signed_records) ++r.unsigned_before_signing;
    else if (verifier && e->sig.empty())
      return fail(at + ", seq " + std::to_string(e->seq) +
                  ": not signed (the line has no \"sig\"), but a line before it is: its signature was removed");
    else if (verifier && !verifier->verify(e->hash, e->sig))
      return fail(at + ", seq " + std::to_string(e->seq) +
                  ": the signature does not verify with the public key: forged, or signed by another key");
    if (anchor && anchor->seq == e->seq && anchor->hash != e->hash)
      return fail(at + ", seq " + std::to_string(e->seq) + ": hashes to " + e->hash.substr(0, 16) +
                  "..., not to the anchored head's " + anchor->hash.substr(0, 16) +
                  "...: the ledger was rewritten from this record or before");
    if (e->prev != prev_hash)
      return fail(at + ", seq " + std::to_string(e->seq) + ": chains to " + e->prev.substr(0, 16) +
                  "... but the line before" + (r.records ? " (run " + prev_run + ") hashes to " : " is the start, ") +
                  prev_hash.substr(0, 16) + "...: a record before it was replaced");
    // Scanned, not built (json_scan.hpp: refused exactly as parse_json refuses): only its run_id is read.
    std::string_view id_raw;
    auto scan = scan_json(e->record, {kMaxTraceBytes}, 1, [&](const ScannedMember& m) {
      if (m.path[0] == "run_id") id_raw = m.raw;
    });
    if (!scan.ok || scan.root != '{') return fail(at + ": the record is not a JSON object");
    auto id = nlohmann::json::parse(id_raw, nullptr, /*allow_exceptions=*/false);
    if (!id.is_string() || id.get<std::string>() != e->run_id)
      return fail(at + ": the record's run_id differs from its line's");
    if (verifier && !e->sig.empty()) ++r.signed_records;
    if (!find_run.empty() && e->run_id == find_run && ++r.run_lines == 1)
      r.run_line = LedgerRunLine{e->seq, e->hash, e->sig, std::string(e->record)};
    ++r.records;
    last_seq = e->seq;
    prev_hash = e->hash;
    prev_run = e->run_id;
    r.head_seq = e->seq;
    r.head_hash = e->hash;
    r.head_run_id = e->run_id;
    return true;
  }
};

}  // namespace

Result<LedgerVerifyReport> verify_ledger(const Dirs& dirs, const std::optional<LedgerAnchor>& anchor,
                                         const LedgerVerifier* verifier, std::string_view find_run) {
  return verify_ledger_lines(
      [&dirs](const LedgerSourceSink& s) { return scan_ledger(dirs, s.line, s.torn, 0, 1, s.oversize, 0, s.start); },
      anchor, verifier, find_run);
}

Result<LedgerVerifyReport> verify_ledger_lines(const LedgerSource& source, const std::optional<LedgerAnchor>& anchor,
                                               const LedgerVerifier* verifier, std::string_view find_run) {
  LedgerVerifyReport r;
  Walker w{r, anchor, verifier, find_run};
  std::uint64_t torn = 0, end = 0;
  std::optional<PruneAnchorLine> pruned;
  bool started = false;
  LedgerSourceSink sink;
  sink.line = [&](const LedgerLine& l) {
    end = l.offset + l.text.size() + 1;
    if (!std::exchange(started, true) && !w.start_after(pruned)) return false;
    return w.check(l);
  };
  sink.oversize = [&](const OversizeLine& l) {
    end = l.offset + l.size + 1;
    if (!std::exchange(started, true) && !w.start_after(pruned)) return false;
    return w.skip(l);
  };
  sink.torn = &torn;
  sink.start = &pruned;
  auto st = source(sink);
  if (!st) return st.error();
  if (!started) (void)w.start_after(pruned);  // a ledger of its anchor alone
  if (r.oversize_lines > 1) r.problem += "; " + std::to_string(r.oversize_lines) + " lines over the bound in all";
  if (verifier && r.signed_records == 0 && (r.records || r.oversize_lines)) {
    // Nothing signed at all: nothing ties these lines to the key (a forger rewrites them and
    // leaves "sig" off every one).
    w.fail(
        "no line is signed, but --pubkey asks for signatures: none was appended with the private key (sbx key init)");
  } else if (!r.other_break && anchor && anchor->seq > w.last_seq) {
    w.fail("the ledger ends at seq " + std::to_string(w.last_seq) + ", before the anchored head seq " +
           std::to_string(anchor->seq) + ": records were cut off its end");
  } else if (!r.other_break && torn > 0) {
    w.fail(
        "torn tail: the last " + std::to_string(torn) + " bytes (from byte " + std::to_string(end) + ")" + w.after() +
        " are an incomplete line: an append was interrupted before it was acknowledged; the next append cuts them off");
  }
  return r;
}

}  // namespace sbx
