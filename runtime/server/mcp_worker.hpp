#pragma once
// `sbx mcp-worker`: one call of `sbx mcp`, in a process of its own (cli/mcp_cmd.cpp parses its
// flags and prints its response). A cold worker reads one job on stdin (a memfd the server
// wrote); a pooled one (--pooled, mcp_pool.hpp) builds its sandbox first, then waits for the job
// on its socket. Either answers with one JSON response on stdout.
//
// A job is {"tool": "run_code"|"pack", "profile", "request"|"dir"+"records"+"contexts"+"secrets", "pool"?}
// (mcp_server.cpp writes it; "secrets" holds each secret's source, "@FILE" or "env:VAR", never its
// value). A response is run_exec's or a pack's; {"error": {"stage",
// "message"}} when the job could not run at all (the worker then exits 125).
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/paths.hpp"
#include "runtime/model/spec.hpp"
#include "runtime/typed/exec.hpp"

namespace sbx::mcp {

// The tenant of `sbx mcp --tenant`, as its workers (children of the server) inherit it.
inline constexpr const char* kMcpTenantEnv = "SBX_MCP_WORKER_TENANT";
std::optional<std::string> worker_tenant();

// What every job of a worker runs with.
struct WorkerContext {
  Dirs dirs;                          // the state directories (--state-dir)
  std::vector<std::string> argv;      // sbx's own argv, recorded
  std::optional<std::string> tenant;  // worker_tenant()
  // A pack's merged spec with its entrypoint as the command, as `sbx run` would take it with no
  // other flag (cli's apply_flags): one definition of what a flag-less run is.
  std::function<Result<RunSpec>(RunSpec, const std::vector<std::string>& command)> with_command;
};

// What a warm template's digest (model/warm.hpp, template_digest) says of a run's image: "host",
// or the image's content digest as the store resolves its name now (a name re-imported since the
// template was built then gives another digest: the call runs cold).
std::string template_image_identity(const std::string& image, const Dirs& dirs);

nlohmann::json worker_error(Stage stage, const std::string& message);
// The worker's exit status for its response: 125 when the job could not run at all.
int worker_exit_status(const nlohmann::json& response);

// A cold worker's job, as read from its stdin (bounded, parsed).
Result<nlohmann::json> read_cold_job(int fd);
// The response to a job: run_code, a pack, or an error for a job that is no object or names no
// tool the worker knows.
nlohmann::json answer_job(const Result<nlohmann::json>& job, const WorkerContext& ctx);
nlohmann::json run_code_job(const nlohmann::json& job, const WorkerContext& ctx);
nlohmann::json run_pack_job(const nlohmann::json& job, const WorkerContext& ctx);

// How a pooled worker's sandbox ended its wait: run_exec_pooled's result and what the wait saw.
struct PooledWait {
  Result<PooledExec> exec = make_error("mcp", "not run");
  bool got_job = false;       // a job arrived (valid or not)
  bool closed = false;        // the server closed its end: no job can come
  std::string died;           // the sandbox became unusable with no job waiting: why
  bool setup_failed = false;  // ... because init reported a setup error (died holds it)
  nlohmann::json invalid;     // {"invalid": why} when the job was no JSON object
  std::string created_at;     // when the worker started building (the record's pool note)
  bool pack = false;          // a pack's pooled sandbox: exec.request is the server's whole job
  nlohmann::json job;         // the job that came (valid JSON object), as the server sent it
};
// Why a pooled sandbox cannot serve any call ("" when it can), and how long to wait for a job the
// server may already have sent (-1: until the server closes the socket).
struct Broken {
  std::string why;
  int grace_ms = -1;
};
Broken broken_sandbox(const PooledWait& w);
// How long a worker whose sandbox died before hand-out waits for a job the server may already be
// sending (the server's hand-out is one check of the worker's note and one sendmsg: microseconds).
inline constexpr int kDiedJobGraceMs = 2000;

// What a pooled worker does after its wait: nothing (no call came: nothing answered, nothing
// recorded), answer `response`, or run `job` cold.
struct PooledNext {
  bool nothing = false;
  nlohmann::json response;
  nlohmann::json job;
};
// The step after a wait whose sandbox is usable (broken_sandbox(w).why empty).
PooledNext after_pooled_wait(const PooledWait& w, const std::string& profile);
// The step once a broken sandbox's worker has taken `job` (nullopt: none came).
PooledNext after_broken_wait(const std::optional<nlohmann::json>& job, const std::string& why,
                             const std::string& profile, const std::string& created_at);
// Why a pooled sandbox does not serve `job` ("" when it does): another tool or profile, or a
// tenant policy edited since the build (policy_now(), asked only when `tenant` is given, differs
// from policy_at_build).
std::string pooled_job_refusal(const nlohmann::json& job, const std::string& profile,
                               const std::optional<std::string>& tenant, const std::string& policy_at_build,
                               const std::function<std::string()>& policy_now);
// The same for a pack's pooled sandbox, built for `pack_key` (the server's job less its records:
// tool, profile, dir, contexts, secrets): another pack, other contexts or secrets, or an edited
// tenant policy.
std::string pooled_pack_job_refusal(const nlohmann::json& job, const nlohmann::json& pack_key,
                                    const std::optional<std::string>& tenant, const std::string& policy_at_build,
                                    const std::function<std::string()>& policy_now);
// The job a pooled worker runs cold: run_code under its profile, with the pool note for the record.
nlohmann::json cold_job(const nlohmann::json& request, const std::string& profile, const nlohmann::json& pool_note);
// A pack's job as the server sent it, with the pool note for the record.
nlohmann::json cold_pack_job(const nlohmann::json& job, const nlohmann::json& pool_note);

// A template's key (mcp_template.hpp, TemplateNote) and each call's one-time token
// (TemplateLauncher::call_token): the hex of kTemplateKeyBytes random bytes. A call's token is
// never in its worker's argv, which any local user reads in /proc: a template's pooled worker
// reads it first on its socket from the server (PoolLauncher's first_words), an unpooled one in
// its job ("template": {"key"}).
inline constexpr std::size_t kTemplateKeyBytes = 32;
bool is_template_key(std::string_view s);
// Reads a token from `fd` (kTemplateKeyBytes * 2 bytes, within timeout_ms) into tmpl["key"].
Status read_template_key(int fd, nlohmann::json& tmpl, int timeout_ms);

// The whole pooled worker: build, tell the server, wait, and decide (may block until the server
// closes the socket). pack_key null: a run_code sandbox for `profile`; else a pack tool's, for the
// pack it names ({"dir", "contexts", "secrets"}, `sbx mcp-worker --pooled --pack-job JSON`).
// tmpl ({"socket", "listener_pid", "listener_id", "digest", "run_id", "key"}, `--from-template JSON`
// with its key read by read_template_key): a run_code sandbox forked from that warm template
// (mcp_template.hpp), its call's files and argv sent at hand-out.
PooledNext serve_pooled(const WorkerContext& ctx, const std::string& profile, const nlohmann::json& pack_key = nullptr,
                        const nlohmann::json& tmpl = nullptr);

}  // namespace sbx::mcp
