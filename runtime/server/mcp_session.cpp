#include "runtime/server/mcp_session.hpp"

#include <string_view>

#include "runtime/base/json_io.hpp"
#include "runtime/base/units.hpp"
#include "runtime/launch/tenant.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/server/mcp_protocol.hpp"
#include "runtime/session/session_agent.hpp"
#include "runtime/session/session_client.hpp"
#include "runtime/session/session_launch.hpp"
#include "runtime/session/session_store.hpp"

namespace sbx::mcp {
namespace {
using json = nlohmann::json;

json string_prop(const char* description) { return {{"type", "string"}, {"description", description}}; }

json start_job(const json& job, const WorkerContext& wctx) {
  const json& a = job["arguments"];
  auto profile = load_profile(job.value("profile", kDefaultProfile));
  if (!profile) return worker_error("usage", profile.error().describe());
  auto merged = spec_from_layers(*profile, nullptr, "");
  if (!merged) return worker_error("usage", merged.error().message);
  auto spec = wctx.with_command(std::move(*merged), {std::string(kAgentPath), "session-agent"});
  if (!spec) return worker_error("usage", spec.error().message);
  RunRequest req;
  req.spec = std::move(*spec);
  req.profile = profile->source;
  req.dirs = wctx.dirs;
  req.invocation_argv = wctx.argv;
  req.limit_raise = CeilingRaise::by_profile;
  if (auto st = apply_named_tenant(wctx.tenant, req); !st) return worker_error("usage", st.error().message);
  SessionSettings s;
  s.dirs = req.dirs;
  for (auto [key, into] : {std::pair{"idle", &s.idle_ms}, std::pair{"max", &s.max_ms}}) {
    if (!a.contains(key)) continue;
    auto ms = parse_duration_ms(a[key].get<std::string>());
    if (!ms) return worker_error("usage", std::string(key) + ": " + ms.error().message);
    *into = *ms;
  }
  auto p = prepare_session(std::move(req), std::move(s), "", wctx.tenant);
  if (!p) return worker_error(p.error().stage, p.error().message);
  auto started = start_session(std::move(*p));
  if (!started) return worker_error(started.error().stage, started.error().message);
  return {{"status", "ok"},
          {"session", started->id},
          {"run_id", started->run_id},
          {"idle_ms", started->idle_ms},
          {"max_ms", started->max_ms},
          {"call_timeout_ms", started->call_timeout_ms},
          {"call_output_limit", started->call_output_limit},
          {"store", started->dirs.state}};
}

json exec_job(const json& job, const WorkerContext& wctx, const Dirs& store) {
  const json& a = job["arguments"];
  json req = {{"op", "code"}, {"language", a["language"]}, {"code", a["code"]}};
  if (a.contains("timeout")) {
    auto ms = parse_duration_ms(a["timeout"].get<std::string>());
    if (!ms) return worker_error("usage", "timeout: " + ms.error().message);
    req["timeout_ms"] = *ms;
  }
  std::string out, err;
  auto answer = session_call(store, a["session"].get<std::string>(), req,
                             [&](char type, std::string_view bytes) { (type == 'O' ? out : err).append(bytes); });
  (void)wctx;
  if (!answer) return worker_error(answer.error().stage, answer.error().message);
  if (answer->value("event", "") == "error") return worker_error("sessions", answer->value("message", "?"));
  const json& r = (*answer)["result"];
  json resp = {{"status", r.value("status", "error")},
               {"exit_code", r.value("exit_code", json(nullptr))},
               {"signal", r.value("signal", json(nullptr))},
               {"stdout", out},
               {"stderr", err},
               {"session", a["session"]},
               {"call", answer->value("call", json(nullptr))},
               {"run_id", answer->value("run_id", "")},
               {"stdout_dropped", (*answer)["stdout"].value("dropped", 0)},
               {"stderr_dropped", (*answer)["stderr"].value("dropped", 0)}};
  if (answer->contains("interpreter")) resp["interpreter"] = (*answer)["interpreter"];
  if (r.contains("error") && r["error"].is_object()) resp["error"] = r["error"].value("message", "");
  return resp;
}
}  // namespace

bool is_session_tool(const std::string& name) {
  for (const char* t : kSessionTools)
    if (name == t) return true;
  return false;
}

json session_tool_definitions() {
  json session_id = string_prop("The id session_start returned");
  json start = {{"name", "session_start"},
                {"description",
                 "Start a session: one sandbox kept for many session_exec calls, whose Python globals, files under "
                 "/workspace and processes stay from call to call, until session_stop, its idle time or its maximum. "
                 "Every call is recorded. Use run_code instead when a call needs no state."},
                {"inputSchema",
                 {{"type", "object"},
                  {"properties",
                   {{"idle", string_prop("End the session after this long without a call (e.g. 5m; default 10m)")},
                    {"max", string_prop("End the session this long after its start (default 1h, at most 24h)")}}},
                  {"additionalProperties", false}}}};
  json exec = {{"name", "session_exec"},
               {"description",
                "Run code in a session. python: in the session's one interpreter (globals stay; a last bare "
                "expression is shown); sh, bash, node: a new process (files under /workspace stay)."},
               {"inputSchema",
                {{"type", "object"},
                 {"properties",
                  {{"session", session_id},
                   {"language", {{"type", "string"}, {"enum", {"python", "sh", "bash", "node"}}}},
                   {"code", string_prop("The code to run")},
                   {"timeout", string_prop("This call's wall-time limit (at most the session's, e.g. 10s)")}}},
                 {"required", {"session", "language", "code"}},
                 {"additionalProperties", false}}}};
  json stop = {{"name", "session_stop"},
               {"description", "End a session: its processes and /workspace are destroyed, its record written."},
               {"inputSchema",
                {{"type", "object"},
                 {"properties", {{"session", session_id}}},
                 {"required", {"session"}},
                 {"additionalProperties", false}}}};
  return json::array({start, exec, stop});
}

std::string session_arguments_refusal(const std::string& tool, const json& args) {
  for (auto& [k, v] : args.items()) {
    bool known = (tool == "session_start" && (k == "idle" || k == "max")) ||
                 (tool == "session_exec" && (k == "session" || k == "language" || k == "code" || k == "timeout")) ||
                 (tool == "session_stop" && k == "session");
    if (!known) return "unknown argument '" + k + "' of " + tool;
    if (!v.is_string()) return "'" + k + "' must be a string";
  }
  if (tool != "session_start" && !args.contains("session")) return "'session' is required";
  if (tool == "session_exec" && (!args.contains("language") || !args.contains("code")))
    return "'language' and 'code' are required";
  if (args.contains("session") && !valid_session_id(args["session"].get<std::string>()))
    return "'session' is no session id (session_start returns one)";
  return "";
}

json run_session_job(const json& job, const WorkerContext& wctx) {
  std::string tool = job.value("tool", "");
  if (!job.contains("arguments") || !job["arguments"].is_object())
    return worker_error("usage", "a session job needs its arguments");
  if (tool == "session_start") return start_job(job, wctx);
  // The session's store as its start reported it (the tenant's under --tenant).
  Dirs store = wctx.dirs;
  if (job.contains("store") && job["store"].is_string()) store.state = job["store"].get<std::string>();
  if (tool == "session_exec") return exec_job(job, wctx, store);
  auto stopped = session_stop(store, job["arguments"].value("session", ""));
  if (!stopped) return worker_error(stopped.error().stage, stopped.error().message);
  json r = *stopped;
  r.erase("event");
  r["status"] = "ok";
  return r;
}

json session_result(const std::string& tool, const json& response) {
  if (!response.is_object()) return tool_error("sbx: the worker's response is not a JSON object");
  if (response.contains("error") && response["error"].is_object())
    return tool_error("sbx: " + response["error"].value("message", "?"));
  std::string status = response.value("status", "error");
  std::string text;
  if (tool == "session_exec") {
    for (const char* stream : {"stdout", "stderr"})
      if (auto it = response.find(stream); it != response.end() && it->is_string()) text += it->get<std::string>();
    if (status != "ok") {
      if (!text.empty()) text += '\n';
      text += "[" + status + "]";
    }
  } else {
    json copy = response;
    copy.erase("store");
    text = dump_json(copy, -1);
  }
  json shown = response;
  shown.erase("store");  // the server's, not the client's (mcp_server.cpp keeps it)
  json r = {{"content", json::array({{{"type", "text"}, {"text", text}}})}, {"structuredContent", shown}};
  if (status != "ok") r["isError"] = true;
  return r;
}

}  // namespace sbx::mcp
