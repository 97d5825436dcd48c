// verify_ledger (trace_ledger.hpp): walks the chain and names its first break.
#include <nlohmann/json.hpp>

#include "runtime/base/json_io.hpp"
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
  std::string prev_hash = std::string(64, '0');
  std::string prev_run;

  std::string where(const LedgerLine& l, const std::string& run) const {
    return "line " + std::to_string(l.line_no) + " (run " + run + ")";
  }
  std::string after() const {
    return r.records ? " after seq " + std::to_string(r.records) + " (run " + prev_run + ")" : " at the start";
  }
  bool fail(std::string problem) {
    r.intact = false;
    r.problem = std::move(problem);
    return false;
  }

  bool check(const LedgerLine& l) {
    auto e = parse_ledger_line(l.text);
    if (!e) return fail(where(l, run_id_hint(l.text)) + after() + ": " + e.error().message);
    const std::uint64_t want = r.records + 1;
    std::string at = where(l, e->run_id);
    if (ledger_hash(e->seq, e->run_id, e->prev, e->record) != e->hash)
      return fail(at + ", seq " + std::to_string(e->seq) +
                  ": edited: the record or its envelope does not hash to the hash on its line");
    if (e->seq > want)
      return fail(at + ": seq " + std::to_string(e->seq) + " where " + std::to_string(want) + " was expected" + after() +
                  ": " + (e->seq - want == 1 ? "record seq " + std::to_string(want) + " is"
                                             : "records seq " + std::to_string(want) + ".." + std::to_string(e->seq - 1) + " are") +
                  " missing (deleted, or moved later)");
    if (e->seq < want)
      return fail(at + ": seq " + std::to_string(e->seq) + " where " + std::to_string(want) + " was expected" + after() +
                  ": a record was inserted here, or the records were reordered");
    if (verifier && e->sig.empty())
      return fail(at + ", seq " + std::to_string(e->seq) + ": not signed (the line has no \"sig\"), but --pubkey asks for signatures");
    if (verifier && !verifier->verify(e->hash, e->sig))
      return fail(at + ", seq " + std::to_string(e->seq) +
                  ": the signature does not verify with the public key: forged, or signed by another key");
    if (anchor && anchor->seq == e->seq && anchor->hash != e->hash)
      return fail(at + ", seq " + std::to_string(e->seq) + ": hashes to " + e->hash.substr(0, 16) + "..., not to the anchored head's " +
                  anchor->hash.substr(0, 16) + "...: the ledger was rewritten from this record or before");
    if (e->prev != prev_hash)
      return fail(at + ", seq " + std::to_string(e->seq) + ": chains to " + e->prev.substr(0, 16) +
                  "... but the line before" + (r.records ? " (run " + prev_run + ") hashes to " : " is the start, ") +
                  prev_hash.substr(0, 16) + "...: a record before it was replaced");
    auto rec = parse_json_doc(std::string(e->record), {kMaxTraceBytes}, "trace", "record");
    if (!rec || !rec->is_object()) return fail(at + ": the record is not a JSON object");
    auto id = rec->find("run_id");
    if (id == rec->end() || !id->is_string() || id->get<std::string>() != e->run_id)
      return fail(at + ": the record's run_id differs from its line's");
    ++r.records;
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
                                         const LedgerVerifier* verifier) {
  LedgerVerifyReport r;
  Walker w{r, anchor, verifier};
  std::uint64_t torn = 0, end = 0;
  auto st = scan_ledger(
      dirs,
      [&](const LedgerLine& l) {
        end = l.offset + l.text.size() + 1;
        return w.check(l);
      },
      &torn);
  if (!st) return st.error();
  if (r.intact && anchor && anchor->seq > r.records) {
    r.intact = false;
    r.problem = "the ledger ends at seq " + std::to_string(r.records) + ", before the anchored head seq " +
                std::to_string(anchor->seq) + ": records were cut off its end";
  } else if (r.intact && torn > 0) {
    r.intact = false;
    r.problem = "torn tail: the last " + std::to_string(torn) + " bytes (from byte " + std::to_string(end) + ")" + w.after() +
                " are an incomplete line: an append was interrupted before it was acknowledged; the next append cuts them off";
  }
  return r;
}

}  // namespace sbx
