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
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

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
  nlohmann::json reply;       // kind == bad
  nlohmann::json id;          // request
  std::string method;         // request, notification
  nlohmann::json params = nlohmann::json::object();
};
Incoming classify(std::string_view line);
// The same for a value already parsed (one member of a 2025-03-26 batch).
Incoming classify_value(nlohmann::json msg);

// Which era a request is in, from its _meta (see the top of this file).
struct RequestEra {
  bool modern = false;               // carries the modern _meta version key
  std::string version;               // that version, when modern
  std::optional<nlohmann::json> error;  // a modern request refused: the error response's `error`
};
RequestEra request_era(const nlohmann::json& params);

// A pack's tool: name, description, inputSchema {records: [<the pack's input schema>]} and
// outputSchema (the pack's output schema when its root is an object, else wrapped as {result}).
// `wrapped_output` says which, for the call's structuredContent.
struct PackTool {
  std::string dir;
  std::string name;
  nlohmann::json definition;  // the Tool object of tools/list
  bool wrapped_output = false;
};
PackTool pack_tool(const Pack& pack);

// The run_code tool (the `sbx exec` request as arguments) under profile `profile`.
nlohmann::json run_code_tool(const std::string& profile);

// Re-roots a JSON Schema placed at `pointer` inside another: every local "$ref": "#..." becomes
// "#<pointer>..." so that the schema's references still resolve (a pack schema's
// "#/definitions/x" placed under /properties/records/items). Values of enum/const/default/examples
// are data, not schemas, and are left alone.
nlohmann::json reroot_schema(const nlohmann::json& schema, const std::string& pointer);

// Tool results from a worker's response (cli/mcp_cmd.cpp `mcp-worker`). `response` is what the
// worker printed: an exec response, a pack response, or {"error": {stage, message}}.
nlohmann::json run_code_result(const nlohmann::json& response);
nlohmann::json pack_result(const nlohmann::json& response, bool wrapped_output);
// A tool error result with one text block.
nlohmann::json tool_error(const std::string& text);

}  // namespace sbx::mcp
