#pragma once
// A validating JSON scanner that builds nothing: it reads a document the way parse_json
// (json_io.hpp) does — nlohmann's strict parser (RFC 8259: UTF-8 checked, escapes and surrogate
// pairs checked, a number that overflows a double refused, a leading UTF-8 BOM skipped) within
// JsonBounds (size, depth, values) and refusing a repeated member name — and accepts exactly the
// documents parse_json accepts, but hands out only the raw text of the members the caller asks
// for. Why: building nlohmann's DOM of every record was the whole cost of indexing a large trace
// ledger (runtime/record/trace_index.cpp; issue 30 #13: 35 s at 100,000 records). The agreement
// with parse_json is checked by tests/unit/test_json_scan.cpp and by the differential fuzz
// target tests/fuzz/fuzz_json_scan.cpp.
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "runtime/base/json_io.hpp"

namespace sbx {

// A member reached from the root through objects only: its path (decoded member names, root
// first) and its value's raw text (a slice of the scanned text: "\"a\\n\"", "12", "[1,2]", ...).
struct ScannedMember {
  std::span<const std::string_view> path;
  std::string_view raw;
};

// What scan_json found: ok, or why not (the byte offset where it was refused, and a problem
// phrased as parse_json phrases its own where they are the same kind: bounds, duplicates).
struct JsonScan {
  bool ok = false;
  char root = 0;  // the root value's first byte on success: '{', '[', '"', 't', 'f', 'n', '-' or a digit
  std::size_t at = 0;
  std::string problem;
};

// Scans `text`; for each member at most `member_depth` objects deep (1: the root object's own
// members), calls `on_member` once its value has been read (a value's members before the value
// itself). Nothing is called for members of arrays. `on_member` may be empty. A document that
// fails is refused whole: members reported before the failure must be discarded by the caller.
JsonScan scan_json(std::string_view text, const JsonBounds& bounds, std::size_t member_depth,
                   const std::function<void(const ScannedMember&)>& on_member);

}  // namespace sbx
