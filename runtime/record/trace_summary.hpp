#pragma once
// What `trace ls` shows of a record and filters on: a summary read from the record (its DOM, or
// its text as the ledger holds it, without building the DOM). The trace store (trace_store.hpp)
// and its query index (trace_index.hpp) both use it, so it is a unit of its own beneath them.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "runtime/base/error.hpp"

namespace sbx {

struct TraceSummary {
  std::string run_id;
  std::string started_at;
  std::string status;
  std::optional<int> exit_code;
  std::int64_t wall_ms = 0;
  std::string command;  // argv joined with spaces, shell-quoted where needed
  // invocation.pack and image (empty when none / unknown), for `trace ls --pack/--image`.
  std::string pack, pack_version, pack_digest, image, image_digest;
  // false: a file of the previous store format (trace_store.hpp), which the ledger's chain does not
  // cover.
  bool in_ledger = true;
};

// `trace ls --since`: a duration before now ("90s", "30m", "1h", "2d", "1w"; a unit is required)
// or a UTC time in RFC 3339, whole or cut after a field ("2026", "2026-12-01", "2026-12-01T08:30",
// "2026-12-01T08:30:00Z"). Returns the lower bound as text that compares with started_at in time
// order; anything else is an error that shows the accepted forms.
// `flag` names the option in the error (`trace prune --before` takes the same forms).
Result<std::string> since_bound(std::string_view text, std::int64_t now_unix_ms, std::string_view flag = "--since");

// What `trace ls` filters on ("" / 0: no filter).
struct TraceFilter {
  std::string status;  // result.status, exactly
  std::string since;   // started_at >= this (RFC 3339 text compares in time order)
  // A pack: its name, NAME@VERSION or its digest (sha256:<hex> or the bare hex); an image: the
  // name the run gave (--image) or its digest, likewise.
  std::string pack, image;
  std::size_t newest = 0;
  // "sha256:<hex>" for a bare 64-digit hex digest; anything else as it is.
  static std::string digest_form(const std::string& s);
  bool matches(const TraceSummary& s) const {
    auto pack_ok = pack.empty() || s.pack == pack || (!s.pack.empty() && s.pack + "@" + s.pack_version == pack) ||
                   (!s.pack_digest.empty() && s.pack_digest == digest_form(pack));
    auto image_ok =
        image.empty() || s.image == image || (!s.image_digest.empty() && s.image_digest == digest_form(image));
    return (status.empty() || s.status == status) && (since.empty() || s.started_at >= since) && pack_ok && image_ok;
  }
};

// The summary `trace ls` shows of one record (tolerant of odd records).
TraceSummary summarize_record(const std::string& id, const nlohmann::json& j);
// The same from the record's text (as the ledger holds it): an error when it is not a bounded
// JSON object.
Result<TraceSummary> summarize_record_text(const std::string& id, std::string_view text);

}  // namespace sbx
