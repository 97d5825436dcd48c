// sbx mcp: a stdio MCP server whose tools are rule packs and run_code (runtime/server/mcp_server.hpp),
// and sbx mcp-worker, the hidden subcommand each of its calls runs as: one job on stdin (a memfd
// the server wrote), one JSON response on stdout (a memfd the server reads once it exits); and sbx
// mcp-fork-server, hidden too, which forks those workers (runtime/server/fork_server.hpp).
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "cli/commands.hpp"
#include "runtime/launch/template_pid1.hpp"
#include "runtime/record/pg_client.hpp"
#include "runtime/record/trace_mirror.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/strings.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/launch/sandbox.hpp"
#include "runtime/launch/tenant.hpp"
#include "runtime/linux/cgroup.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/server/fork_server.hpp"
#include "runtime/server/mcp_http.hpp"
#include "runtime/server/mcp_pool.hpp"
#include "runtime/server/mcp_template.hpp"
#include "runtime/server/mcp_protocol.hpp"
#include "runtime/server/mcp_server.hpp"
#include "runtime/server/mcp_session.hpp"
#include "runtime/server/mcp_worker.hpp"
#include "runtime/typed/pack.hpp"
#include "runtime/typed/exec.hpp"
#include "runtime/typed/pack_run.hpp"

namespace sbx::cli {
namespace {
using nlohmann::json;

struct McpFlags {
  std::vector<std::string> packs;
  std::vector<std::string> contexts;  // PACK/NAME=PATH
  std::vector<std::string> secrets;   // PACK/NAME=@FILE|env:VAR
  std::string profile = kDefaultProfile;
  std::optional<std::string> tenant;  // --tenant NAME (runtime/launch/tenant.hpp), applied by every worker
  std::size_t max_concurrent = 4;
  std::size_t max_queued = 256;
  std::size_t pool = 2;                           // --pool N: idle pooled sandboxes for run_code (0: off)
  int pool_max_idle = mcp::kDefaultPoolMaxIdleS;  // --pool-max-idle SECONDS (0: no age limit)
  WarmSpec warm;  // the profile's warm key (runtime/model/warm.hpp), checked at the pool's start
  // --listen ADDR: the Streamable HTTP transport instead of stdio (runtime/server/mcp_http.hpp).
  std::string listen;
  std::string tokens;  // --tokens FILE
  std::string tls_cert, tls_key;
  bool no_auth = false;
  std::vector<std::string> allowed_origins;
  std::size_t max_connections = 256, max_sessions = 64, max_calls_per_tenant = 8, max_body = 4u << 20;
};

// --trace-db of sbx mcp (and of the session servers and workers it starts, which are handed it).
std::string g_trace_db;

struct WorkerFlags {
  bool pooled = false;  // --pooled: build the sandbox first, then wait for the job (mcp_pool.hpp)
  std::string profile = kDefaultProfile;
  std::string pack_job;       // --pack-job JSON: a pack tool's pooled sandbox (mcp::pack_job, less tool and profile)
  std::string template_host;  // --template-host DIR: run the profile's warm template (mcp_template.hpp)
  std::string from_template;  // --from-template JSON: a pooled sandbox forked from that template
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

// The flags that need no pack: their bounds, and the tenant (checked once here, so that a bad
// tenant fails the server, not each call; every worker then applies it to its call through the
// environment it inherits). Returns the usage error's status, or nullopt.
std::optional<int> check_server_flags(const McpFlags& f) {
  if (f.max_concurrent < 1 || f.max_concurrent > 256) return usage_error("mcp: --max-concurrent must be 1..256");
  if (f.tenant) {
    auto t = load_tenant(*f.tenant);
    if (!t) return usage_error("mcp: " + t.error().message);
    ::setenv(mcp::kMcpTenantEnv, f.tenant->c_str(), 1);
  } else {
    ::unsetenv(mcp::kMcpTenantEnv);
  }
  if (f.pool > 64) return usage_error("mcp: --pool must be 0..64");
  if (f.pool_max_idle < 0 || f.pool_max_idle > 86400)
    return usage_error("mcp: --pool-max-idle must be 0..86400 seconds");
  return std::nullopt;
}

// Per pack name: (NAME, VALUE) of each --context (VALUE a path) or --secret (VALUE a source).
using GivenInputs = std::map<std::string, std::vector<std::pair<std::string, std::string>>>;
struct Given {
  GivenInputs contexts, secrets;
};

// "PACK/NAME=VALUE", the form of --context and --secret (sbx pack run's NAME=VALUE, its pack
// named first): false when it is not that.
bool split_pack_input(const std::string& text, std::string& pack, std::string& name, std::string& value) {
  auto slash = text.find('/'), eq = text.find('=');
  if (slash == std::string::npos || eq == std::string::npos || slash == 0 || eq < slash + 2 || eq + 1 == text.size())
    return false;
  pack = text.substr(0, slash);
  name = text.substr(slash + 1, eq - slash - 1);
  value = text.substr(eq + 1);
  return true;
}

// --context PACK/NAME=PATH, every PATH readable now; --secret PACK/NAME=@FILE|env:VAR, each read
// now (a typo fails the server at start, not each call) and given once. A secret's value is not
// kept: the worker of each call reads it again from its source (so the server's memory and its
// jobs hold only "@FILE" or "env:VAR"), as `sbx pack run --secret` reads it for its one run. Only
// PACK/NAME is ever echoed: the text after '=' might be the secret itself, pasted by mistake.
std::optional<int> parse_inputs(const McpFlags& f, Given& given) {
  std::string pack, name, value;
  for (auto& c : f.contexts) {
    if (!split_pack_input(c, pack, name, value))
      return usage_error("mcp: --context: expected PACK/NAME=PATH, got '" + c + "'");
    if (::access(value.c_str(), R_OK) != 0)
      return usage_error("mcp: --context " + pack + "/" + name + ": cannot read " + value + ": " +
                         std::strerror(errno));
    given.contexts[pack].push_back({name, value});
  }
  for (auto& s : f.secrets) {
    if (!split_pack_input(s, pack, name, value))
      return usage_error("mcp: --secret: expected PACK/NAME=@FILE or PACK/NAME=env:VAR");
    for (auto& [n, v] : given.secrets[pack])
      if (n == name) return usage_error("mcp: --secret " + pack + "/" + name + " given twice");
    auto secret = read_secret_source(value);
    if (!secret) return usage_error("mcp: --secret " + pack + "/" + name + ": " + secret.error().describe());
    wipe(*secret);
    given.secrets[pack].push_back({name, value});
  }
  return std::nullopt;
}

// What keeps a loaded pack from being offered: a required secret or context the operator did
// not give ("" when none). A context or secret given that the pack does not declare is a usage
// error (as in `sbx pack run`).
std::optional<int> pack_inputs_missing(const Pack& pack, Given& given, std::string& missing) {
  auto has = [](const GivenInputs& in, const std::string& pack_name, const std::string& name) {
    auto it = in.find(pack_name);
    if (it == in.end()) return false;
    for (auto& [n, v] : it->second)
      if (n == name) return true;
    return false;
  };
  for (auto& s : pack.secrets)
    if (s.required && !has(given.secrets, pack.name, s.name))
      missing = "secret " + s.name + " (--secret " + pack.name + "/" + s.name + "=@FILE|env:VAR)";
  for (auto& c : pack.contexts)
    if (c.required && !has(given.contexts, pack.name, c.name))
      missing = "context " + c.name + " (--context " + pack.name + "/" + c.name + "=PATH)";
  for (auto& [n, p] : given.contexts[pack.name]) {
    bool declared = false;
    for (auto& c : pack.contexts) declared = declared || c.name == n;
    if (!declared) return usage_error("mcp: --context " + pack.name + "/" + n + ": the pack declares no such context");
  }
  for (auto& [n, source] : given.secrets[pack.name]) {
    bool declared = false;
    for (auto& s : pack.secrets) declared = declared || s.name == n;
    if (!declared) return usage_error("mcp: --secret " + pack.name + "/" + n + ": the pack declares no such secret");
  }
  return std::nullopt;
}

// Every --packs directory's packs as tools of cfg; every --context must name one of them. A pack
// that cannot be offered (it does not load, its limits pass the profile's, it lacks the
// operator's input) is warned about on stderr and left out: one bad pack among many must not
// take the whole server down (an MCP client sees only "Connection closed"), and run_code is
// served even when no pack is. A --packs path that is not a directory at all (a typo) is still
// a usage error: nothing in it could be a pack.
std::optional<int> load_pack_tools(const McpFlags& f, const LoadedProfile& profile, Given& given,
                                   mcp::ServerConfig& cfg) {
  std::set<std::string> names{"run_code"};     // every pack that loaded, offered or not (for --context)
  std::map<std::string, std::string> offered;  // tool name -> its pack's directory
  std::map<std::string, std::string> clashed;  // a name two packs claim -> the first one's directory
  bool skipped = false;
  auto skip = [&skipped](const std::string& dir, const std::vector<std::string>& problems) {
    std::fprintf(stderr, "sbx: %s\n", printable(mcp::skipped_pack_warning(dir, problems)).c_str());
    skipped = true;
  };
  for (auto& d : f.packs) {
    struct stat st {};
    if (::stat(d.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return usage_error("mcp: --packs " + d + ": not a directory");
    for (auto& dir : pack_dirs(d)) {
      std::vector<PackProblem> problems;
      auto pack = load_pack(dir, problems);
      if (!pack) {
        std::vector<std::string> lines;
        for (auto& p : problems) lines.push_back(p.describe());
        if (lines.empty()) lines.push_back(pack.error().message);
        skip(dir, lines);
        continue;
      }
      // A pack whose limits pass the profile's would fail on every call: not offered.
      if (auto merged = spec_from_layers(profile, &pack->spec_patch, pack->source_dir + "/pack.json", {},
                                         CeilingRaise::by_profile);
          !merged) {
        skip(dir, {merged.error().message + " (profile " + f.profile + ")"});
        continue;
      }
      // A name two packs claim is nobody's: the first one loaded (in path order, which whoever
      // adds a directory chooses) is withdrawn too, with the operator's secrets and contexts for it.
      if (auto it = clashed.find(pack->name); it != clashed.end()) {
        skip(dir, {mcp::tool_name_clash({{pack->name, it->second}}, pack->name)});
        continue;
      }
      if (auto clash = mcp::tool_name_clash(offered, pack->name); !clash.empty()) {
        skip(dir, {clash});
        if (auto it = offered.find(pack->name); it != offered.end()) {
          skip(it->second, {mcp::tool_name_clash({{pack->name, dir}}, pack->name)});
          std::erase_if(cfg.packs, [&](const mcp::PackTool& t) { return t.name == pack->name; });
          cfg.contexts.erase(pack->name);
          cfg.secrets.erase(pack->name);
          clashed[pack->name] = it->second;
          offered.erase(it);
        }
        continue;
      }
      names.insert(pack->name);
      std::string missing;
      if (auto rc = pack_inputs_missing(*pack, given, missing)) return rc;
      if (!missing.empty()) {
        // Not a tool a model could call: it would fail every time for want of the operator's input.
        std::fprintf(stderr, "sbx: mcp: warning: pack %s is not offered: it requires %s\n",
                     printable(pack->name).c_str(), printable(missing).c_str());
        continue;
      }
      offered[pack->name] = dir;
      cfg.packs.push_back(mcp::pack_tool(*pack));
      if (given.contexts.count(pack->name)) cfg.contexts[pack->name] = given.contexts[pack->name];
      if (given.secrets.count(pack->name)) cfg.secrets[pack->name] = given.secrets[pack->name];
    }
  }
  for (auto [flag, inputs] : {std::pair{"--context", &given.contexts}, std::pair{"--secret", &given.secrets}})
    for (auto& [name, list] : *inputs) {
      if (names.count(name) || list.empty()) continue;
      // The pack it names may be one skipped above (its name unknown, it did not load): warned.
      if (!skipped) return usage_error(std::string("mcp: ") + flag + " " + name + "/...: no pack named '" + name + "'");
      std::fprintf(stderr, "sbx: mcp: warning: %s %s/...: no pack named '%s' is offered\n", flag,
                   printable(name).c_str(), printable(name).c_str());
    }
  return std::nullopt;
}

// A profile or pack that prepares an interpreter (model/warm.hpp) is checked before the first call:
// a preload missing from the image (or an image without the interpreter) is the operator's error,
// said now. Each such pool hands out only prepared sandboxes. "" when all are ready; else the error.
std::string await_prepared(const McpFlags& f, const mcp::ServerConfig& cfg, mcp::PoolRouter& pools) {
  struct Warm {
    mcp::PoolLauncher* pool;
    std::string owner, fix;
  };
  std::vector<Warm> warm;
  auto prepares = [&](mcp::PoolLauncher* pool, const WarmSpec& spec, std::string owner, std::string fix) {
    const WarmInterpreter* interp = find_warm_interpreter(spec.interpreter);
    if (!pool || !interp || !interp->has_driver) return;
    std::fprintf(stderr, "sbx: mcp: pool: preparing %s%s%s for %s\n", printable(spec.interpreter).c_str(),
                 spec.preload.empty() ? "" : " with ", printable(join_words(spec.preload, ", ")).c_str(),
                 printable(owner).c_str());
    pool->prepared_only(true);
    warm.push_back({pool, std::move(owner), std::move(fix)});
  };
  prepares(pools.find("run_code"), f.warm, "profile " + f.profile, "the profile's warm key, or the image");
  for (auto& pt : cfg.packs)
    prepares(pools.find(mcp::PoolRouter::key_of(mcp::pack_job(cfg, pt))), pt.warm, "pack " + pt.name,
             "the pack's warm key, or its image");
  // The pools build side by side; each wait is bounded (kWarmCheckMs).
  for (auto& w : warm)
    if (std::string why = w.pool->await_first(mcp::kWarmCheckMs); !why.empty())
      return "mcp: --pool: " + w.owner + "'s warm key: " + why + " (fix " + w.fix + ")";
  return "";
}

// Serves cfg with workers started as `argv`, cold, or from a pool of f.pool sandboxes.
int serve_mcp(const McpFlags& f, const mcp::ServerConfig& cfg, const std::vector<std::string>& argv) {
  mcp::ReexecLauncher launcher(argv);
  std::string tools;
  for (auto& p : cfg.packs) tools += p.name + ", ";
  std::fprintf(stderr, "sbx: mcp: serving %srun_code on stdio (profile %s, at most %zu calls at once, pool %zu)\n",
               printable(tools).c_str(), printable(f.profile).c_str(), f.max_concurrent, f.pool);
  if (f.pool == 0) return mcp::serve(cfg, launcher);
  int rc;
  {
    mcp::PoolRouter pools(launcher);
    // run_code runs under the server's profile and that profile's image (a request names
    // neither), so its pooled sandboxes are made for (profile, image) alike.
    auto pooled_argv = argv;
    pooled_argv.insert(pooled_argv.end(), {"--pooled", "--profile", f.profile});
    // A profile whose warm mode is "template": run_code's calls are forks of one template instead
    // (mcp_template.hpp), built and checked before the first call.
    std::unique_ptr<mcp::TemplateLauncher> tmpl;
    if (f.warm.mode == "template") {
      auto host_argv = argv;
      host_argv.insert(host_argv.end(), {"--profile", f.profile});
      const char* tmp = std::getenv("TMPDIR");
      tmpl = std::make_unique<mcp::TemplateLauncher>(host_argv, tmp && *tmp == '/' ? tmp : "/tmp", launcher,
                                                     f.pool_max_idle * 1000LL, pooled_argv, f.pool);
      std::fprintf(stderr, "sbx: mcp: template: preparing python3%s%s for profile %s\n",
                   f.warm.preload.empty() ? "" : " with ", printable(join_words(f.warm.preload, ", ")).c_str(),
                   printable(f.profile).c_str());
      if (std::string why = tmpl->await_first(mcp::kWarmCheckMs); !why.empty())
        return usage_error("mcp: --pool: profile " + f.profile + "'s warm key: " + why +
                           " (fix the profile's warm key, or the image)");
      pools.route("run_code", tmpl.get());
    } else {
      pools.add("run_code",
                std::make_unique<mcp::PoolLauncher>(pooled_argv, f.pool, launcher, f.pool_max_idle * 1000LL));
    }
    // A pack tool's are made for that pack: its copy, contexts, image and limits; all the pools
    // together hold at most kMaxPooledSandboxes.
    std::size_t budget = mcp::kMaxPooledSandboxes - f.pool;
    for (auto& pt : cfg.packs) {
      json key = mcp::pack_job(cfg, pt);
      if (!key["secrets"].empty()) {
        pools.unpooled(mcp::PoolRouter::key_of(key),
                       "pack " + pt.name +
                           " is given secrets (--secret), read at each call into that call's sandbox only: not pooled");
        continue;
      }
      if (budget < f.pool) {
        pools.unpooled(mcp::PoolRouter::key_of(key), "the server's pools hold at most " +
                                                         std::to_string(mcp::kMaxPooledSandboxes) +
                                                         " sandboxes (--pool " + std::to_string(f.pool) +
                                                         " for each tool): pack " + pt.name + " has none");
        continue;
      }
      budget -= f.pool;
      auto pack_argv = pooled_argv;
      json built_for = {{"dir", key["dir"]}, {"contexts", key["contexts"]}, {"secrets", key["secrets"]}};
      pack_argv.insert(pack_argv.end(), {"--pack-job", dump_json(built_for, -1)});
      pools.add(mcp::PoolRouter::key_of(key),
                std::make_unique<mcp::PoolLauncher>(pack_argv, f.pool, launcher, f.pool_max_idle * 1000LL));
    }
    std::string why = await_prepared(f, cfg, pools);
    rc = why.empty() ? mcp::serve(cfg, pools) : usage_error(why);
  }
  // A worker killed while it built its sandbox had not named its run cgroup to the server yet
  // (it does once built, mcp_pool.hpp), so the pool could not remove it. Its owner is dead,
  // which is what every run's sweep of stale run cgroups looks for (gc_stale_cgroups,
  // runtime/linux/cgroup.hpp): while the server runs, the next pooled build sweeps it; at the
  // server's end no build follows, so the server sweeps once itself (bounded: each stale cgroup
  // is killed and removed within seconds, and the server is exiting).
  if (auto st = gc_stale_cgroups(detect_cgroup()); !st)
    std::fprintf(stderr, "sbx: mcp: pool: %s\n", printable(st.error().describe()).c_str());
  return rc;
}

// `sbx [--state-dir DIR] SUBCOMMAND`: how this server starts another sbx of its own (a worker, a
// session's server), with the state directory it was given.
std::vector<std::string> sbx_argv(const GlobalOptions& g, const char* subcommand) {
  std::vector<std::string> argv{g.argv.empty() ? std::string("sbx") : g.argv[0]};
  if (!g.state_dir.empty()) argv.insert(argv.end(), {"--state-dir", g.state_dir});
  argv.emplace_back(subcommand);
  // --trace-db reaches every process that runs a call: the session servers and their workers.
  if (!g_trace_db.empty()) argv.insert(argv.end(), {"--trace-db", g_trace_db});
  return argv;
}

// The stdio server each HTTP session runs (less its tenant, which its token names): the same
// packs, inputs, profile and bounds as this server's flags.
std::vector<std::string> session_server_argv(const McpFlags& f, const GlobalOptions& g) {
  std::vector<std::string> argv = sbx_argv(g, "mcp");
  argv.insert(argv.end(), {"--profile", f.profile});
  for (auto& p : f.packs) argv.insert(argv.end(), {"--packs", p});
  for (auto& c : f.contexts) argv.insert(argv.end(), {"--context", c});
  for (auto& s : f.secrets) argv.insert(argv.end(), {"--secret", s});
  argv.insert(argv.end(),
              {"--max-concurrent", std::to_string(f.max_concurrent), "--max-queued", std::to_string(f.max_queued),
               "--pool", std::to_string(f.pool), "--pool-max-idle", std::to_string(f.pool_max_idle)});
  return argv;
}

// /readyz's check (mcp_http.hpp, ready_check): "" once a sandbox has been built here with the
// server's profile, as doctor's row builds it, and each token's tenant passes every check of a run
// (--dry-run: its identity, store and ceilings here, e.g. separate ids in a pod with no room for
// them); else why.
std::string readiness(const std::string& profile, const std::string& state, const std::vector<std::string>& tenants) {
  CheckResult r = throwaway_sandbox_check(profile, state);
  if (r.status != CheckStatus::ok) return r.detail;
  for (auto& t : tenants) {
    Captured c = run_self(
        {"sbx", "--state-dir", state, "run", "--tenant", t, "--profile", profile, "--dry-run", "--", "/bin/true"}, {},
        std::chrono::seconds(15), false);
    if (c.status == 0) continue;
    std::string_view last = last_sbx_line(c.err);
    return "tenant " + t +
           ": a run would fail: " + (last.empty() ? "exit status " + std::to_string(c.status) : std::string(last));
  }
  return "";
}

// --listen: checks the HTTP flags (every token's tenant loads now, so a typo fails the server, not
// each call) and serves.
int serve_over_http(const McpFlags& f, GlobalOptions& g, const mcp::ServerConfig& cfg) {
  mcp::HttpConfig h;
  std::string why;
  if (!mcp::parse_listen_address(f.listen, h, why)) return usage_error("mcp: " + why);
  if (f.no_auth == !f.tokens.empty())
    return usage_error(
        "mcp: --listen needs --tokens FILE (bearer tokens, each naming a tenant), or --no-auth on a "
        "loopback address");
  if (f.no_auth && !mcp::is_loopback_host(h.host))
    return usage_error("mcp: --no-auth serves only a loopback address (127.0.0.1 or ::1), not " + h.host +
                       ": give --tokens FILE");
  if (!f.tokens.empty()) {
    if (f.tenant) return usage_error("mcp: --tenant with --tokens: each token names its tenant");
    auto table = mcp::load_token_file(f.tokens);
    if (!table) return usage_error("mcp: " + table.error().describe());
    for (auto& e : table->entries)
      if (auto t = load_tenant(e.tenant); !t)
        return usage_error("mcp: --tokens " + f.tokens + ": tenant " + e.tenant + ": " + t.error().message);
    h.tokens = std::move(*table);
  }
  if (f.max_connections < 1 || f.max_sessions < 1 || f.max_calls_per_tenant < 1 || f.max_body < 1024)
    return usage_error(
        "mcp: --max-connections, --max-sessions and --max-calls-per-tenant must be 1 or more, --max-body 1024 or more");
  if (f.tls_cert.empty() != f.tls_key.empty()) return usage_error("mcp: --tls-cert and --tls-key go together");
  h.tls_cert = f.tls_cert;
  h.tls_key = f.tls_key;
  h.no_auth = f.no_auth;
  h.no_auth_tenant = f.tenant.value_or("");
  h.allowed_origins = f.allowed_origins;
  h.max_connections = f.max_connections;
  h.max_sessions = f.max_sessions;
  h.max_sessions_per_tenant = std::min<std::size_t>(h.max_sessions_per_tenant, f.max_sessions);
  h.max_calls_per_tenant = f.max_calls_per_tenant;
  h.max_body_bytes = f.max_body;
  h.stream_limit_bytes = cfg.stream_limit_bytes;
  h.child_argv = session_server_argv(f, g);
  // The children apply the tenant themselves: the environment this server set for stdio must not
  // reach them as well.
  ::unsetenv(mcp::kMcpTenantEnv);
  h.state_dir = resolve_dirs(g.state_dir).state;
  std::vector<std::string> tenants;
  for (auto& e : h.tokens.entries)
    if (std::find(tenants.begin(), tenants.end(), e.tenant) == tenants.end()) tenants.push_back(e.tenant);
  h.ready_check = [profile = f.profile, state = h.state_dir, tenants] { return readiness(profile, state, tenants); };
  return mcp::serve_http(h);
}

int run_server(McpFlags& f, GlobalOptions& g) {
  auto profile = load_profile(f.profile);
  if (!profile) return usage_error("mcp: --profile: " + profile.error().describe());
  if (auto rc = check_server_flags(f)) return *rc;
  // Rootless in a delegated cgroup, the server must not keep <own> busy for its workers' run
  // cgroups (runtime/linux/cgroup.hpp).
  enter_supervisor_leaf(detect_cgroup());
  mcp::ServerConfig cfg;
  cfg.profile = f.profile;
  cfg.max_concurrent = f.max_concurrent;
  cfg.max_queued = f.max_queued;
  // A call's streams are at most the profile's output limit each (a request or a pack may only
  // lower it; a tenant's ceiling too): what sizes the largest response the server reads.
  auto base = spec_from_layers(*profile, nullptr, "profile " + f.profile);
  if (base && base->limits.output_limit_bytes)
    cfg.stream_limit_bytes = std::min<std::int64_t>(*base->limits.output_limit_bytes, mcp::kMaxCapturedStreamBytes);
  if (base) f.warm = base->warm;
  Given given;
  if (auto rc = parse_inputs(f, given)) return *rc;
  if (auto rc = load_pack_tools(f, *profile, given, cfg)) return *rc;
  if (!f.listen.empty()) return serve_over_http(f, g, cfg);
  cfg.instructions =
      "Each tool call runs in a fresh, isolated sandbox (sbx) and is recorded in sbx's trace ledger; the run id and "
      "the ledger's path are in the result's _meta (sbx/run_id, sbx/trace). Pack tools take {\"records\": [...]} "
      "and return the pack's validated result; run_code runs a program in one of: " +
      join_words(exec_languages(), ", ") + ".";
  // Its workers forked by one prepared sbx instead of each exec'd (runtime/server/fork_server.hpp).
  // argv[0] is what is exec'd: its argv area holds the titles of the fork server and of every
  // worker it forks (proc_title.hpp), "sbx mcp-fork-server" the longest.
  auto forks = mcp::ForkServer::start({"/proc/self/exe", "mcp-fork-server"});
  if (!forks)
    std::fprintf(stderr, "sbx: mcp: fork server: %s; workers are exec'd\n",
                 printable(forks.error().describe()).c_str());
  mcp::UseForkServer use_forks(forks ? &*forks : nullptr);
  return serve_mcp(f, cfg, sbx_argv(g, "mcp-worker"));
}

// The response on stdout, one line; the worker's exit status.
int print_response(json resp) {
  std::string s = dump_json(resp, -1) + "\n";
  std::fwrite(s.data(), 1, s.size(), stdout);
  return mcp::worker_exit_status(resp);
}

// One call (runtime/server/mcp_worker.hpp): a pooled worker's wait may end with nothing to
// answer (exit 0, no record), an answer, or a job to run cold here.
int run_worker(const WorkerFlags& wf, GlobalOptions& g) {
  mcp::WorkerContext ctx;
  ctx.dirs = resolve_dirs(g.state_dir);
  ctx.argv = g.argv;
  ctx.tenant = mcp::worker_tenant();
  ctx.with_command = [](RunSpec spec, const std::vector<std::string>& command) {
    RunFlags rf;
    rf.command = command;
    return apply_flags(std::move(spec), rf);
  };
  // The template's stdin is the server's socket: where it says its run id, digest and readiness.
  if (!wf.template_host.empty()) return mcp::serve_template_host(ctx, wf.profile, wf.template_host, STDIN_FILENO);
  Result<json> job = json(nullptr);
  if (wf.pooled) {
    json pack_key = nullptr;
    if (!wf.pack_job.empty()) {
      auto parsed = parse_json_doc(wf.pack_job, {mcp::kMaxMessageBytes}, "usage", "mcp-worker --pack-job");
      if (!parsed || !parsed->is_object()) return usage_error("mcp-worker: --pack-job: not a JSON object");
      pack_key = std::move(*parsed);
    }
    json tmpl = nullptr;
    if (!wf.from_template.empty()) {
      auto parsed = parse_json_doc(wf.from_template, {mcp::kMaxMessageBytes}, "usage", "mcp-worker --from-template");
      if (!parsed || !parsed->is_object()) return usage_error("mcp-worker: --from-template: not a JSON object");
      tmpl = std::move(*parsed);
      if (auto st = mcp::read_template_key(STDIN_FILENO, tmpl, 10'000); !st) return usage_error(st.error().describe());
    }
    auto next = mcp::serve_pooled(ctx, wf.profile, pack_key, tmpl);
    if (next.nothing) return 0;
    if (!next.response.is_null()) return print_response(next.response);
    job = std::move(next.job);
  } else {
    job = mcp::read_cold_job(STDIN_FILENO);
  }
  // Session tools (mcp_session.hpp, above the worker's unit) first; every other job as before.
  if (job && job->is_object() && mcp::is_session_tool(job->value("tool", "")))
    return print_response(mcp::run_session_job(*job, ctx));
  return print_response(mcp::answer_job(job, ctx));
}
}  // namespace

void add_mcp_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out) {
  static McpFlags f;
  auto* mcp =
      app.add_subcommand("mcp", "Serve rule packs and run_code as MCP tools over stdio (JSON-RPC; man sbx-mcp)");
  mcp->add_option("--packs", f.packs,
                  "A pack directory, or a directory of pack directories: one tool each (repeatable)");
  mcp->add_option("--context", f.contexts, "Mount a context for every call of a pack: PACK/NAME=PATH (repeatable)");
  mcp->add_option("--secret", f.secrets,
                  "Deliver a secret to every call of a pack: PACK/NAME=@FILE or PACK/NAME=env:VAR (repeatable)");
  mcp->add_option("--profile", f.profile,
                  "Profile every call runs under; its limits are the calls' ceilings (default untrusted)");
  mcp->add_option("--tenant", f.tenant,
                  "Serve as tenant NAME: its ceilings bind every call (and the profile); its own host ids and store")
      ->check(tenant_option_check, "NAME");
  mcp->add_option("--max-concurrent", f.max_concurrent, "Calls running at once; the rest wait in order (default 4)");
  mcp->add_option("--max-queued", f.max_queued, "Calls waiting beyond those; more are refused (default 256)");
  mcp->add_option(
      "--pool", f.pool,
      "Sandboxes kept built ahead for each tool (run_code and every pack), each used once (default 2; 0: off)");
  mcp->add_option(
      "--pool-max-idle", f.pool_max_idle,
      "Seconds a pooled sandbox may wait for its call before it is discarded and rebuilt (default 300; 0: no limit)");
  mcp->add_option("--listen", f.listen,
                  "Serve MCP over Streamable HTTP at ADDR (HOST:PORT, :PORT) on /mcp, with /healthz, /readyz, "
                  "/metrics; instead of stdio");
  mcp->add_option("--tokens", f.tokens,
                  "With --listen: bearer tokens, a JSON file {\"tokens\": [{\"sha256\": HEX, \"tenant\": NAME}]}");
  mcp->add_option("--tls-cert", f.tls_cert,
                  "With --listen: serve HTTPS with this PEM certificate chain (and --tls-key)");
  mcp->add_option("--tls-key", f.tls_key, "With --listen: the PEM private key of --tls-cert");
  mcp->add_flag("--no-auth", f.no_auth,
                "With --listen on a loopback address: no token needed (every call as --tenant)");
  mcp->add_option("--allow-origin", f.allowed_origins,
                  "With --listen: a browser Origin allowed besides loopback and the server's own (repeatable)");
  mcp->add_option("--max-connections", f.max_connections, "With --listen: connections open at once (default 256)");
  mcp->add_option("--max-sessions", f.max_sessions, "With --listen: MCP sessions open at once (default 64)");
  mcp->add_option("--max-calls-per-tenant", f.max_calls_per_tenant,
                  "With --listen: tool calls one tenant runs at once; more get 429 (default 8)");
  mcp->add_option("--max-body", f.max_body, "With --listen: a request body's bytes at most (default 4194304)");
  // Supervises: the forwarded signals stay blocked, and the server reads them from a signalfd
  // (shutdown in order: cancel, wait, exit).
  mcp->add_option("--trace-db", g_trace_db, kTraceDbHelp);
  out.push_back({mcp,
                 [&g]() -> int {
                   if (!g_trace_db.empty())
                     if (auto why = check_trace_db_url(g_trace_db); !why.empty())
                       return usage_error("mcp: --trace-db: " + why);
                   set_trace_db_flag(g_trace_db);
                   return run_server(f, g);
                 },
                 true});
}

void add_mcp_fork_server_command(CLI::App& app, GlobalOptions&, std::vector<Command>& out) {
  // Hidden (no group): started by `sbx mcp` only. Supervises: the forwarded signals stay blocked,
  // as they are in the server, so that its workers start with the mask an exec'd one inherits.
  auto* forks = app.add_subcommand("mcp-fork-server", "")->group("");
  out.push_back({forks,
                 []() -> int {
                   int type = 0;
                   socklen_t len = sizeof type;
                   if (::getsockopt(STDIN_FILENO, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_SEQPACKET)
                     return usage_error(
                         "mcp-fork-server: its stdin is not the socket that sbx mcp gives it "
                         "(it is started by sbx mcp only)");
                   // Made once here, before any worker, so that every worker forked from this
                   // process has it (a worker that finds none makes its own, and one that cannot
                   // fails its template call saying why).
                   (void)template_pid1_binary();
                   return mcp::serve_forks(STDIN_FILENO, [](std::vector<std::string>& args) {
                     std::vector<char*> argv;
                     for (auto& a : args) argv.push_back(a.data());
                     argv.push_back(nullptr);
                     return sbx_main(static_cast<int>(args.size()), argv.data());
                   });
                 },
                 true});
}

void add_mcp_worker_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out) {
  // Hidden (no group): started by `sbx mcp` only, never by a person.
  static WorkerFlags wf;
  auto* worker = app.add_subcommand("mcp-worker", "")->group("");
  worker->add_flag("--pooled", wf.pooled, "");
  worker->add_option("--profile", wf.profile, "");
  worker->add_option("--pack-job", wf.pack_job, "");
  worker->add_option("--template-host", wf.template_host, "");
  worker->add_option("--from-template", wf.from_template, "");
  worker->add_option("--trace-db", g_trace_db, "");
  out.push_back({worker,
                 [&g]() -> int {
                   set_trace_db_flag(g_trace_db);
                   return run_worker(wf, g);
                 },
                 true});
}

}  // namespace sbx::cli
