#pragma once
// sbx mcp's session tools (man sbx-mcp, "Sessions"): session_start, session_exec, session_stop,
// so that an agent can keep state across steps in one sandbox (runtime/session/). The server
// keeps the ids of the sessions its client started: a client reaches only those, and when it
// goes away the server stops each one (mcp_server.cpp). The work is a worker's, as every call's:
// a session starts, is called and stops through runtime/session's blocking client, never on the
// server's loop.
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/server/mcp_worker.hpp"

namespace sbx::mcp {

inline constexpr const char* kSessionTools[] = {"session_start", "session_exec", "session_stop"};
bool is_session_tool(const std::string& name);

// The three tools' definitions (inputSchema; exec's language enum as run_code's).
nlohmann::json session_tool_definitions();

// A tools/call's arguments checked for `tool`: "" when they are fine, else the tool error's text.
std::string session_arguments_refusal(const std::string& tool, const nlohmann::json& args);

// The worker's part: the job {"tool": T, "profile": P, "arguments": {...}} done; the response
// is {"status": "ok"|..., ...} or worker_error's {"error": ...}.
nlohmann::json run_session_job(const nlohmann::json& job, const WorkerContext& wctx);

// The tool result of a worker's response: its JSON as structuredContent, a text block with the
// call's output or the session's id, isError unless it went well.
nlohmann::json session_result(const std::string& tool, const nlohmann::json& response);

}  // namespace sbx::mcp
