#pragma once
// `sbx exec`: the typed call an agent orchestrator makes instead of opening a shell. One JSON
// request in, one JSON response out:
//   request  {language: "python"|"sh"|"bash"|"node", code, inputs?, files? {path: content}, limits?, output_schema?}
//   response {run_id, status, exit_code, signal, stdout, stderr, stdout_truncated, stderr_truncated,
//             result, result_errors, usage, violations, trace}, plus result_errors_omitted when more
//             than kMaxContractErrors were found, and escaped_strings (json_io.hpp) when the program's
//             output or another string was not valid UTF-8 and is escaped.
// The code is read-only at /code/main.<ext> (files beside it under /code), the inputs at
// /in/input.json, /out is writable; the profile is `untrusted`. stdout/stderr are captured
// (capped by limits.output_limit, default 64K each), not streamed.
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/paths.hpp"
#include "runtime/typed/schema_validate.hpp"

namespace sbx {

struct RunRequest;  // run_request.hpp

inline constexpr std::int64_t kExecDefaultOutputCap = 64 * 1024;

struct ExecContext {
  Dirs dirs;
  std::vector<std::string> invocation_argv;
  std::string trace_file;
  // The profile the run is under (its limits are the request's ceilings); `sbx mcp --profile`
  // passes its own through the worker (cli/mcp_cmd.cpp).
  std::string profile = "untrusted";
  // `sbx exec --allow-host` rules, added to the profile's (spec.hpp add_allow_hosts): the
  // operator's, never the request's.
  std::vector<std::string> allow_hosts;
  std::string events;  // --events FILE|fd:N (events.hpp): the operator's, never the request's
  // --dry-run: the request is checked and the run planned (dry_run.hpp), nothing runs; the
  // response is the dry run's JSON.
  bool dry_run = false;
  // Added to the record (RunRequest::record_extra): a replay's "replay_of".
  nlohmann::json record_extra = nlohmann::json::object();
  // Called on the fully built run before anything is kept or run (--tenant: tenant.hpp applies
  // the tenant's ceilings and moves the store); an error is the request's (stage "usage").
  std::function<Status(RunRequest&)> before_run;
};

// A request checked and taken apart; reading it touches no file and starts nothing (so it can be
// fuzzed on its own, tests/fuzz/fuzz_exec.cpp).
// The request's languages, in order ("python", "sh", "bash", "node"): the MCP tool's enum too.
std::vector<std::string> exec_languages();

struct ExecRequest {
  std::string ext;                       // "py", "sh", "bash", "js": the code is /code/main.<ext>
  std::vector<std::string> argv_prefix;  // the interpreter
  std::string code;
  std::vector<std::pair<std::string, std::string>> files;  // relative path under /code, content
  nlohmann::json limits_patch;                             // the RunSpec `limits` layer
  std::optional<CompiledSchema> schema;                    // output_schema, compiled
  std::string input_bytes;                                 // /in/input.json
};
Result<ExecRequest> parse_exec_request(const nlohmann::json& request);

// A malformed request is an Error (stage "usage"); anything that ran, or failed to set up, is a
// response.
Result<nlohmann::json> run_exec(const nlohmann::json& request, const ExecContext& ctx);

// A warm pool's exec (`sbx mcp --pool`, runtime/server/mcp_pool.hpp): builds a sandbox for ctx.profile
// before any call exists (init paused before the program's execve, run_request.hpp await_call), then
// calls await_request, which blocks until the call's request arrives (nullopt: the sandbox is
// discarded) and may fill pool_meta (recorded as the run's "pool"). A call the sandbox can serve
// (pool_refusal, pool_job.hpp) runs in it at once; one it cannot is left to the caller to run
// cold, with the reason.
struct PoolPause;  // run_request.hpp
using AwaitExecCall = std::function<std::optional<nlohmann::json>(const PoolPause&, nlohmann::json& pool_meta)>;
struct PooledExec {
  nlohmann::json request;      // the call's request; null when none came (discarded)
  nlohmann::json pool_meta;    // what await_request recorded
  nlohmann::json response;     // the call's response when it ran in the pooled sandbox; else null
  std::string cold_reason;     // why the pooled sandbox could not serve it ("" when it did)
  std::optional<Error> error;  // the request did not plan (a response as run_exec's error)
  // The sandbox could not be built (request null: await_request was never called, nothing was
  // recorded); the caller may still take a call and run it cold.
  std::optional<Error> build_error;
};
Result<PooledExec> run_exec_pooled(const ExecContext& ctx, const AwaitExecCall& await_request);

}  // namespace sbx
