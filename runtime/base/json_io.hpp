#pragma once
// Every JSON document sbx reads or writes passes through here.
//
// Reading: nlohmann's DOM is unbounded. A document nested 100,000 deep parses, then blows the
// stack in every recursive walk that follows (dump, merge_patch, schema validation, copies). So
// parse_json builds the DOM through a SAX filter that counts depth and values and stops at the
// first one past the bound, before the DOM below it exists; the size is checked before parsing,
// and read_json_file reads at most max_bytes + 1 bytes, whatever the file claims or grows to.
// A failure carries a JSON pointer to where it happened.
//
// Writing: nlohmann throws type_error.316 on a string that is not valid UTF-8, and strings of
// outside origin (argv, environment, paths, program output) are arbitrary bytes. escape_json_strings
// rewrites those strings losslessly (see below) and names them, so that dump_json never throws.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"

namespace sbx {

// Nesting deeper than this is refused in every document sbx reads. sbx's own documents (records,
// manifests, profiles, policies) nest under 10 levels; JSON Schemas and pack data rarely pass 20.
inline constexpr std::size_t kMaxJsonDepth = 128;
// Values (scalars, arrays and objects) in one document: bounds the DOM's memory, which for
// "[[],[],...]" is ~20 times the text's size.
inline constexpr std::size_t kMaxJsonValues = 1u << 22;

// Size caps, by document (man/sbx.1 LIMITS, man/sbx-pack.5).
inline constexpr std::size_t kMaxProfileBytes = 1u << 20;     // profiles
inline constexpr std::size_t kMaxManifestBytes = 1u << 20;    // pack.json
inline constexpr std::size_t kMaxSchemaFileBytes = 4u << 20;  // a pack's JSON Schemas
inline constexpr std::size_t kMaxPolicyBytes = 4u << 20;      // seccomp policy files
inline constexpr std::size_t kMaxRecordsBytes = 64u << 20;    // sbx pack run --input
inline constexpr std::size_t kMaxRequestBytes = 64u << 20;    // sbx exec request
inline constexpr std::size_t kMaxTraceBytes = 64u << 20;      // a stored trace record

struct JsonBounds {
  std::size_t max_bytes;
  std::size_t max_depth = kMaxJsonDepth;
  std::size_t max_values = kMaxJsonValues;
};

// The outcome of parsing untrusted text: a value, or where (a JSON pointer, "" for the document)
// and why it was refused.
struct ParsedJson {
  nlohmann::json value;
  std::string pointer;
  std::string problem;  // empty on success
  bool ok() const { return problem.empty(); }
  // "<pointer>: <problem>", or just the problem at the top level.
  std::string describe() const;
};

ParsedJson parse_json(std::string_view text, const JsonBounds& bounds);

// parse_json as a Result: the error (stage `stage`) reads "<what>: <pointer>: <problem>".
Result<nlohmann::json> parse_json_doc(std::string_view text, const JsonBounds& bounds, Stage stage,
                                      const std::string& what);

// Reads at most bounds.max_bytes (a larger file is an error naming the cap) without trusting the
// size stat reports, then parses with parse_json_doc. Errors name `path`.
Result<nlohmann::json> read_json_file(const std::string& path, const JsonBounds& bounds, Stage stage,
                                      const std::string& what);

// Reads a whole file or stream, refusing one longer than max_bytes; errors name `what`.
Result<std::string> read_bounded(const std::string& path, std::size_t max_bytes, Stage stage, const std::string& what);
Result<std::string> read_bounded_fd(int fd, std::size_t max_bytes, Stage stage, const std::string& what);
// read_bounded for a file that must be a regular one (a configuration file): a FIFO, a device or
// a terminal is refused at once ("<what>: not a regular file"; a directory: "cannot read <what>:
// Is a directory") instead of blocking the open or the read. read_bounded itself takes any file: `pack run --input` may be a pipe or /dev/stdin.
// `no_follow`: a symbolic link as the last component is refused too (a file in sbx's own store,
// where a link is planted, never made).
Result<std::string> read_regular_bounded(const std::string& path, std::size_t max_bytes, Stage stage,
                                         const std::string& what, bool no_follow = false);

// read_bounded_fd with the forwarded signals blocked as main() left them (signals.hpp): `sbx
// exec` reading its request. A forwarded signal meanwhile is only looked at (a signalfd polled, never read), so it stays pending and the run
// that follows records it as a signal before the program started: no call ends without its
// record. Once one is pending the writer has `grace_ms` more to finish the request (end of file);
// past that the request is incomplete, no call exists to record, and the result is an error of
// stage "signal" with *interrupted set to the signal.
Result<std::string> read_to_end_holding_signals(int fd, std::size_t max_bytes, int grace_ms, int* interrupted,
                                                Stage stage, const std::string& what);

// The member `key` of `j`, or a null value when `j` is not an object or lacks it: the tolerant
// read of a stored record, which may be odd or edited (trace show, provenance).
const nlohmann::json& json_member(const nlohmann::json& j, const char* key);

// The lossless escape of a byte string that is not valid UTF-8: each byte of an invalid sequence
// becomes "\xHH", and each backslash "\x5c" (so that "\x" in the escaped text always starts an
// escape). Valid UTF-8 is returned unchanged; `changed` says which happened.
std::string escape_utf8(std::string_view raw, bool* changed = nullptr);
bool valid_utf8(std::string_view s);

// Escapes (escape_utf8) every string value and member name in `j` that is not valid UTF-8, in place,
// and returns a JSON pointer to each one (into the escaped document). Iterative: no recursion on
// the depth of `j`.
std::vector<std::string> escape_json_strings(nlohmann::json& j);

// The greatest nesting depth of `j` (a scalar is 0), computed without recursion.
std::size_t json_depth(const nlohmann::json& j);

// Serialises a document sbx writes (a trace record, an exec response, a validated result),
// never throwing: strings that are not valid UTF-8 are escaped first and, when `j` is an object,
// listed under "escaped_strings" (JSON pointers); a document nested deeper than kMaxJsonDepth + 16
// or a failed dump yields `fallback(reason)` instead (which must itself be shallow and valid).
// `ascii`: every non-ASCII character and DEL as \uXXXX too, for output meant for a terminal
// (C1 controls are valid UTF-8 and would otherwise reach it raw; text_escape.hpp).
std::string dump_json(nlohmann::json& j, int indent,
                      const std::function<nlohmann::json(const std::string& reason)>& fallback = {},
                      bool ascii = false);

// What cut_list kept of a list: `total` entries, the first `listed` of them kept.
struct ListCut {
  std::size_t total = 0, listed = 0;
  bool truncated() const { return listed < total; }
};
// Keeps the longest prefix of `list` (an array; anything else is left alone) with at most
// `max_items` entries and at most `max_bytes` bytes of compact JSON (commas and brackets counted).
ListCut cut_list(nlohmann::json& list, std::size_t max_items, std::size_t max_bytes);

// `v` as compact JSON for an error message, cut to about `max` bytes ("..." marks the cut).
std::string json_excerpt(const nlohmann::json& v, std::size_t max = 80);

// A JSON pointer token: '~' as "~0", '/' as "~1" (RFC 6901).
std::string pointer_token(std::string_view key);

}  // namespace sbx
