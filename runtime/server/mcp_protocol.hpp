#pragma once
// `sbx mcp`'s protocol half: the Model Context Protocol's messages as sbx answers them, with no
// I/O and no process (runtime/server/mcp_server.hpp runs the loop). Kept apart so that every rule below
// is unit-tested on its own (tests/unit/test_mcp_protocol.cpp).
//
// Eras (the specification's schema/2026-07-28 and docs/specification/2026-07-28/basic/versioning):
//   legacy  2025-11-25, 2025-06-18, 2025-03-26: an `initialize` handshake picks the version for the
//           whole stdio process; the server answers with the client's version when it supports it,
//           else with its latest (lifecycle.mdx, "Version Negotiation").
//   modern  2026-07-28: no handshake; every request names its version in
//           params._meta["io.modelcontextprotocol/protocolVersion"] and is served statelessly; an
//           unknown version is UnsupportedProtocolVersionError (-32022, data {supported, requested});
//           `server/discover` lists what is supported; every result carries resultType.
// sbx serves both (a "dual-era" server): which era a request belongs to is decided per request.
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/json_io.hpp"
#include "runtime/base/json_limits.hpp"
#include "runtime/model/warm.hpp"
#include "runtime/typed/pack.hpp"

namespace sbx::mcp {

inline constexpr const char* kModernVersion = "2026-07-28";
// Newest first: the first is what `initialize` answers with an unsupported version.
inline constexpr const char* kLegacyVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26"};
inline constexpr const char* kMetaProtocolVersion = "io.modelcontextprotocol/protocolVersion";
inline constexpr const char* kMetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities";
inline constexpr const char* kMetaServerInfo = "io.modelcontextprotocol/serverInfo";

// JSON-RPC 2.0 and MCP error codes (schema.ts).
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;
inline constexpr int kServerBusy = -32000;  // implementation-defined range (-32000..-32019)
inline constexpr int kUnsupportedProtocolVersion = -32022;

// One message is one line; a line longer than this is refused unread (an exec request is at most
// kMaxRequestBytes, json_io.hpp, plus the envelope).
inline constexpr std::size_t kMaxMessageBytes = (64u << 20) + (1u << 20);
// Values (scalars, arrays, objects) in one message, a batch's members together: one per 256 bytes
// of kMaxMessageBytes. A parsed value costs 16 to ~150 bytes ("{"":0}" in 7 bytes of text is an
// object, its map node and its key), so the general kMaxJsonValues (4M) let one 14 MB line of
// "[{"":0},...]" be a tree of ~300 MB; at this bound a message's tree is at most ~40 MB beside its
// text. Past it the message is a parse error (-32700).
inline constexpr std::size_t kMaxMessageValues = 1u << 18;
// What classify parses a line within.
inline constexpr JsonBounds kMessageBounds{kMaxMessageBytes, kMaxJsonDepth, kMaxMessageValues};

// The requests of calls waiting for a slot (--max-queued of them) are held as their jobs' text,
// each with its id, and count against this: a call that would take them past it is refused with
// kServerBusy (queued_request_refusal), unless no call waits (a message's one call is always
// taken). So waiting calls hold at most this, or one call's request when that alone is larger.
inline constexpr std::size_t kQueuedRequestBudget = 64u << 20;
// The refusal's message for a call whose request holds `request` bytes, while `waiting` calls
// wait holding `held` bytes in all: "" when it is taken (none waits, or it fits in `budget`).
std::string queued_request_refusal(std::size_t held, std::size_t request, std::size_t waiting,
                                   std::size_t budget = kQueuedRequestBudget);

// Every version the server answers to, modern first (server/discover's supportedVersions, the
// `supported` list of -32022).
std::vector<std::string> supported_versions();

// `initialize`'s answer: the client's version when sbx supports it, else the newest legacy one.
std::string negotiate_legacy_version(const nlohmann::json& requested);

nlohmann::json error_response(const nlohmann::json& id, int code, const std::string& message,
                              const nlohmann::json& data = nullptr);
nlohmann::json result_response(const nlohmann::json& id, nlohmann::json result);

// A line from the client, checked as JSON-RPC 2.0. Exactly one of: `reply` (an error to send at
// once: parse error, invalid request), or a request (id set), a notification (no id), or a
// response (from the client to a request of ours; sbx sends none, so it is ignored).
struct Incoming {
  enum Kind { bad, request, notification, response } kind = bad;
  nlohmann::json reply;  // kind == bad
  nlohmann::json id;     // request
  std::string method;    // request, notification
  nlohmann::json params = nlohmann::json::object();
};
Incoming classify(std::string_view line);
// The same for a value already parsed (one member of a 2025-03-26 batch).
Incoming classify_value(nlohmann::json msg);

// Which era a request is in, from its _meta (see the top of this file).
struct RequestEra {
  bool modern = false;                  // carries the modern _meta version key
  std::string version;                  // that version, when modern
  std::optional<nlohmann::json> error;  // a modern request refused: the error response's `error`
};
RequestEra request_era(const nlohmann::json& params);

// A pack's tool: name, description, inputSchema {records: [<the pack's input schema>]} and
// outputSchema (the pack's output schema when its root is an object, else wrapped as {result}).
// `wrapped_output` says which, for the call's structuredContent.
struct PackTool {
  std::string dir;
  std::string name;
  WarmSpec warm;              // the pack's warm key: its pooled sandboxes prepare this interpreter
  nlohmann::json definition;  // the Tool object of tools/list
  bool wrapped_output = false;
};
PackTool pack_tool(const Pack& pack);

// The one stderr line for a --packs pack that cannot be offered (it does not load, or its limits
// pass the profile's): the server skips it and serves the rest, so the line names the pack's
// directory, the first problem (and how many more), what is still served, and how to check it.
std::string skipped_pack_warning(const std::string& dir, const std::vector<std::string>& problems);
// Why a pack named `name` in `dir` cannot be a tool beside those already offered (`offered`: tool
// name -> its pack's directory; run_code is sbx's own), for skipped_pack_warning; "" when it can.
// The later pack is the one skipped, so that adding a pack never takes a tool from a client.
std::string tool_name_clash(const std::map<std::string, std::string>& offered, const std::string& name);

// The run_code tool (the `sbx exec` request as arguments) under profile `profile`.
nlohmann::json run_code_tool(const std::string& profile);

// Re-roots a JSON Schema placed at `pointer` inside another: every local "$ref": "#..." becomes
// "#<pointer>..." so that the schema's references still resolve (a pack schema's
// "#/definitions/x" placed under /properties/records/items). Values of enum/const/default/examples
// are data, not schemas, and are left alone.
nlohmann::json reroot_schema(const nlohmann::json& schema, const std::string& pointer);

// A worker's response (cli/mcp_cmd.cpp `mcp-worker`): one exec or pack response, whose streams are
// each at most the profile's output limit (per stream; `stream_limit_bytes`) and whose result was
// read within result_bounds() (typed_io.hpp), dumped by dump_json. One definition of both its size
// (the streams and the result, each escaped at worst kMaxJsonEscapeFactor times, plus 1 MiB for
// the rest) and its depth (the result's bound plus its envelope), so that what a run accepts the
// server passes through (a result nested kMaxJsonDepth deep included).
inline constexpr std::size_t kWorkerEnvelopeDepth = 1;  // {"result": <the program's result>}
// Where a profile sets no output limit: what a worker captures of a stream at most (mcp_cmd.cpp).
inline constexpr std::int64_t kMaxCapturedStreamBytes = 64LL << 20;
JsonBounds worker_response_bounds(std::int64_t stream_limit_bytes);

// What a text content block repeats of each stream and of a result, at most: structuredContent
// carries them in full (the outputSchema's data), the text a summary of it (MCP: a tool with an
// outputSchema returns structuredContent; the text block is for clients that read only text).
inline constexpr std::size_t kSummaryBytes = 4096;

// A worker's response read for its summary without holding it as a DOM: every member as it is,
// except the top-level "stdout" and "stderr" (their first kSummaryBytes, whole characters) and,
// unless `keep_result`, a "result" that passes kSummaryBytes (null). `cut` names each member cut
// ({member: its full size in bytes, or "omitted"}). The summary's problem, when the text is not a
// JSON object within `bounds`.
struct ScannedResponse {
  ParsedJson summary;
  nlohmann::json cut = nlohmann::json::object();
};
ScannedResponse scan_worker_response(std::string_view text, const JsonBounds& bounds, bool keep_result);

// Tool results from a worker's response. run_code: `summary` as scan_worker_response made it
// (or the whole response when nothing was cut), whose text block it becomes; structuredContent is
// the response itself, which the server splices in from the worker's text (kSpliceMarker stands
// in its place) unless `splice` is false and nothing was cut (then `summary` is the response).
// Pack: structuredContent is the pack's result (the summary keeps it whole), the text block its
// JSON when that is under kSummaryBytes, else a note. A pack run that failed: a tool error whose
// text and _meta (sbx/status, sbx/error, sbx/error_truncated) carry the cause, at most
// kSummaryBytes of it, and no structuredContent (pack_result says why). Or {"error": {stage,
// message}}.
inline constexpr const char* kSpliceMarker = "\x01sbx:structuredContent\x01";
nlohmann::json run_code_result(const nlohmann::json& summary, const nlohmann::json& cut = nlohmann::json::object(),
                               bool splice = false);
nlohmann::json pack_result(const nlohmann::json& response, bool wrapped_output,
                           const nlohmann::json& cut = nlohmann::json::object());
// A tool error result with one text block.
nlohmann::json tool_error(const std::string& text);

}  // namespace sbx::mcp
