// sbx mcp: a stdio MCP server whose tools are rule packs and run_code (runtime/mcp_server.hpp),
// and sbx mcp-worker, the hidden subcommand each of its calls runs as: one job on stdin (a memfd
// the server wrote), one JSON response on stdout (a memfd the server reads once it exits).
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "cli/commands.hpp"
#include "runtime/exec.hpp"
#include "runtime/json_io.hpp"
#include "runtime/mcp_protocol.hpp"
#include "runtime/mcp_server.hpp"
#include "runtime/pack.hpp"
#include "runtime/pack_run.hpp"
#include "runtime/profile.hpp"
#include "runtime/tenant.hpp"
#include "runtime/text_escape.hpp"
#include "runtime/trace_ledger.hpp"

namespace sbx::cli {
namespace {
// The tenant of `sbx mcp --tenant`, as its workers (children of the server) inherit it.
constexpr const char* kMcpTenantEnv = "SBX_MCP_WORKER_TENANT";
std::optional<std::string> worker_tenant() {
  const char* t = std::getenv(kMcpTenantEnv);
  return t ? std::optional<std::string>(t) : std::nullopt;
}

using nlohmann::json;

struct McpFlags {
  std::vector<std::string> packs;
  std::vector<std::string> contexts;  // PACK/NAME=PATH
  std::string profile = kDefaultProfile;
  std::optional<std::string> tenant;  // --tenant NAME (runtime/tenant.hpp), applied by every worker
  std::size_t max_concurrent = 4;
  std::size_t max_queued = 256;
};

// --packs DIR: a pack directory itself, or a directory whose subdirectories with a pack.json are
// packs (sorted, so tools/list is stable).
std::vector<std::string> pack_dirs(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(fs::path(dir) / kPackManifest, ec)) return {dir};
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory(ec) && fs::exists(e.path() / kPackManifest, ec)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

int run_server(McpFlags& f, GlobalOptions& g) {
  auto profile = load_profile(f.profile);
  if (!profile) return usage_error("mcp: --profile: " + profile.error().describe());
  if (f.max_concurrent < 1 || f.max_concurrent > 256) return usage_error("mcp: --max-concurrent must be 1..256");
  if (f.tenant) {
    // Checked once here, so that a bad tenant fails the server, not each call; every worker then
    // applies it to its call (add_mcp_worker_command) through the environment it inherits.
    auto t = load_tenant(*f.tenant);
    if (!t) return usage_error("mcp: " + t.error().message);
    ::setenv(kMcpTenantEnv, f.tenant->c_str(), 1);
  } else {
    ::unsetenv(kMcpTenantEnv);
  }
  mcp::ServerConfig cfg;
  cfg.profile = f.profile;
  cfg.max_concurrent = f.max_concurrent;
  cfg.max_queued = f.max_queued;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> given;
  for (auto& c : f.contexts) {
    auto slash = c.find('/'), eq = c.find('=');
    if (slash == std::string::npos || eq == std::string::npos || slash == 0 || eq < slash + 2 || eq + 1 == c.size())
      return usage_error("mcp: --context: expected PACK/NAME=PATH, got '" + c + "'");
    std::string path = c.substr(eq + 1);
    if (::access(path.c_str(), R_OK) != 0)
      return usage_error("mcp: --context " + c.substr(0, eq) + ": cannot read " + path + ": " + std::strerror(errno));
    given[c.substr(0, slash)].push_back({c.substr(slash + 1, eq - slash - 1), path});
  }
  std::set<std::string> names{"run_code"};
  for (auto& d : f.packs) {
    struct stat st{};
    if (::stat(d.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return usage_error("mcp: --packs " + d + ": not a directory");
    for (auto& dir : pack_dirs(d)) {
      std::vector<PackProblem> problems;
      auto pack = load_pack(dir, problems);
      if (!pack) {
        for (auto& p : problems)
          std::fprintf(stderr, "sbx: %s/%s\n", printable(dir).c_str(), printable(p.describe()).c_str());
        return usage_error("mcp: --packs: the pack in " + dir + " does not load");
      }
      // A pack whose limits pass the profile's would fail on every call: refused now instead.
      if (auto merged = spec_from_layers(*profile, &pack->spec_patch, pack->dir + "/pack.json"); !merged)
        return usage_error("mcp: " + merged.error().message + " (profile " + f.profile + ")");
      if (!names.insert(pack->name).second) return usage_error("mcp: two tools named '" + pack->name + "' (" + dir + ")");
      std::string missing;
      for (auto& s : pack->secrets)
        if (s.required) missing = "secret " + s.name;
      for (auto& c : pack->contexts) {
        bool have = false;
        for (auto& [n, p] : given[pack->name]) have = have || n == c.name;
        if (c.required && !have) missing = "context " + c.name + " (--context " + pack->name + "/" + c.name + "=PATH)";
      }
      for (auto& [n, p] : given[pack->name]) {
        bool declared = false;
        for (auto& c : pack->contexts) declared = declared || c.name == n;
        if (!declared) return usage_error("mcp: --context " + pack->name + "/" + n + ": the pack declares no such context");
      }
      if (!missing.empty()) {
        // Not a tool a model could call: it would fail every time for want of the operator's input.
        std::fprintf(stderr, "sbx: mcp: warning: pack %s is not offered: it requires %s\n", printable(pack->name).c_str(),
                     printable(missing).c_str());
        continue;
      }
      cfg.packs.push_back(mcp::pack_tool(*pack));
      if (given.count(pack->name)) cfg.contexts[pack->name] = given[pack->name];
    }
  }
  for (auto& [name, list] : given)
    if (!names.count(name)) return usage_error("mcp: --context " + name + "/...: no pack named '" + name + "'");
  cfg.instructions =
      "Each tool call runs in a fresh, isolated sandbox (sbx) and is recorded in sbx's trace ledger; the run id and "
      "the ledger's path are in the result's _meta (sbx/run_id, sbx/trace). Pack tools take {\"records\": [...]} "
      "and return the pack's validated result; run_code runs a Python or sh program.";
  std::vector<std::string> argv{g.argv.empty() ? std::string("sbx") : g.argv[0]};
  if (!g.state_dir.empty()) argv.insert(argv.end(), {"--state-dir", g.state_dir});
  argv.push_back("mcp-worker");
  mcp::ReexecLauncher launcher(argv);
  std::string tools;
  for (auto& p : cfg.packs) tools += p.name + ", ";
  std::fprintf(stderr, "sbx: mcp: serving %srun_code on stdio (profile %s, at most %zu calls at once)\n",
               printable(tools).c_str(), printable(f.profile).c_str(), f.max_concurrent);
  return mcp::serve(cfg, launcher);
}

// A memfd holding one of the program's streams, read back after the run.
struct Capture {
  UniqueFd fd{::memfd_create("sbx-mcp-capture", MFD_CLOEXEC)};
  std::string read_all() const {
    ::lseek(fd.get(), 0, SEEK_SET);
    auto r = read_bounded_fd(fd.get(), 64u << 20, "mcp", "captured output");
    return r ? *r : std::string();
  }
};

json worker_error(const std::string& stage, const std::string& message) {
  return {{"error", {{"stage", stage}, {"message", message}}}};
}

json run_pack_job(const json& job, GlobalOptions& g) {
  std::vector<PackProblem> problems;
  auto pack = load_pack(job.value("dir", ""), problems);
  if (!pack) return worker_error("usage", problems.empty() ? pack.error().message : problems.front().describe());
  auto profile = load_profile(job.value("profile", kDefaultProfile));
  if (!profile) return worker_error("usage", profile.error().describe());
  auto merged = spec_from_layers(*profile, &pack->spec_patch, pack->dir + "/pack.json");
  if (!merged) return worker_error("usage", merged.error().message);
  RunFlags rf;
  rf.command = pack->entrypoint;
  auto spec = apply_flags(std::move(*merged), rf);
  if (!spec) return worker_error("usage", spec.error().message);
  PackRunRequest req;
  req.pack = std::move(*pack);
  req.run.spec = std::move(*spec);
  req.run.profile = profile->source;
  req.run.dirs = resolve_dirs(g.state_dir);
  req.run.limit_layers = limit_layers(*profile, &req.pack.spec_patch, req.pack.dir + "/pack.json", {});
  req.run.invocation_argv = g.argv;
  if (auto st = apply_tenant_flag(worker_tenant(), req.run, json{{"name", req.pack.name}, {"digest", req.pack.digest}}); !st)
    return worker_error("usage", st.error().message);
  req.input_path = "mcp:tools/call";
  json records = job.value("records", json::array());
  req.input_bytes = dump_json(records, -1);
  for (auto& c : job.value("contexts", json::array()))
    if (c.is_array() && c.size() == 2 && c[0].is_string() && c[1].is_string()) req.contexts.push_back({c[0], c[1]});
  Capture out, err;
  if (!out.fd.ok() || !err.fd.ok()) return worker_error("mcp", "memfd_create for the captured output");
  req.run.stdout_fd = out.fd.get();
  req.run.stderr_fd = err.fd.get();
  PackRunResult res = run_pack(req);
  if (!res.recorded)
    return worker_error("record", "the run's trace record could not be stored (" + res.record_error +
                                      "): its result is withheld");
  json resp = {{"run_id", res.trace.value("run_id", "")},
               {"status", to_string(res.status)},
               {"result", res.status == RunStatus::ok ? res.result : json(nullptr)},
               {"errors", res.errors},
               {"stdout", out.read_all()},
               {"stderr", err.read_all()},
               {"trace", req.run.dirs.traces + "/" + kLedgerName}};
  return resp;
}

}  // namespace

void add_mcp_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out) {
  static McpFlags f;
  auto* mcp = app.add_subcommand("mcp", "Serve rule packs and run_code as MCP tools over stdio (JSON-RPC; man sbx)");
  mcp->add_option("--packs", f.packs, "A pack directory, or a directory of pack directories: one tool each (repeatable)");
  mcp->add_option("--context", f.contexts, "Mount a context for every call of a pack: PACK/NAME=PATH (repeatable)");
  mcp->add_option("--profile", f.profile, "Profile every call runs under; its limits are the calls' ceilings (default untrusted)");
  mcp->add_option("--tenant", f.tenant,
                  "Serve as tenant NAME: its ceilings bind every call (and the profile); its own host ids and store")
      ->check(tenant_option_check, "NAME");
  mcp->add_option("--max-concurrent", f.max_concurrent, "Calls running at once; the rest wait in order (default 4)");
  mcp->add_option("--max-queued", f.max_queued, "Calls waiting beyond those; more are refused (default 256)");
  // Supervises: the forwarded signals stay blocked, and the server reads them from a signalfd
  // (shutdown in order: cancel, wait, exit).
  out.push_back({mcp, [&g]() -> int { return run_server(f, g); }, true});
}

void add_mcp_worker_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out) {
  // Hidden (no group): started by `sbx mcp` only, never by a person.
  auto* worker = app.add_subcommand("mcp-worker", "")->group("");
  out.push_back({worker, [&g]() -> int {
    json resp;
    // The job wraps one message's arguments with the tool's and the profile's names: one
    // message's bound plus room for those.
    constexpr std::size_t kMaxJobBytes = mcp::kMaxMessageBytes + (1u << 20);
    auto text = read_bounded_fd(STDIN_FILENO, kMaxJobBytes, "usage", "the mcp worker's job");
    auto job = text ? parse_json_doc(*text, {kMaxJobBytes}, "usage", "mcp worker job") : Result<json>(text.error());
    if (!job || !job->is_object()) {
      resp = worker_error("usage", job ? "the job is not an object" : job.error().message);
    } else if (job->value("tool", "") == "run_code") {
      ExecContext ctx;
      ctx.dirs = resolve_dirs(g.state_dir);
      ctx.invocation_argv = g.argv;
      ctx.profile = job->value("profile", kDefaultProfile);
      if (auto tenant = worker_tenant())
        ctx.before_run = [tenant](RunRequest& run) { return apply_tenant_flag(tenant, run); };
      auto r = run_exec(job->value("request", json::object()), ctx);
      resp = r ? *r : worker_error(r.error().stage, r.error().describe());
    } else if (job->value("tool", "") == "pack") {
      resp = run_pack_job(*job, g);
    } else {
      resp = worker_error("usage", "unknown job tool");
    }
    std::string s = dump_json(resp, -1) + "\n";
    std::fwrite(s.data(), 1, s.size(), stdout);
    return resp.contains("error") && !resp.contains("status") ? 125 : 0;
  }, true});
}

}  // namespace sbx::cli
