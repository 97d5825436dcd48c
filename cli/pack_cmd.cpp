// sbx pack validate DIR | sbx pack init NAME | sbx pack run DIR --input FILE ...: parse and print;
// the contract itself is runtime/typed/pack_run.cpp (man/sbx-pack.5).
#include <unistd.h>

#include <cstdio>
#include <set>

#include "cli/commands.hpp"
#include "runtime/launch/tenant.hpp"
#include "runtime/model/caps.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/typed/pack.hpp"
#include "runtime/typed/pack_run.hpp"
#include "runtime/launch/preflight.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/record/trace_show.hpp"

namespace sbx::cli {
namespace {

struct PackFlags {
  std::string dir;
  std::string init_name;
  std::string input;
  std::vector<std::string> contexts, secrets;
  std::string result_file;
  bool strict = true;    // pack validate: unknown schema keywords are problems
  bool as_json = false;  // pack validate --json
  RunFlags run;
};

// Unknown schema keywords check nothing: said on stderr on every load that does not refuse them.
void print_warnings(const std::string& dir, const Pack& p) {
  for (auto& w : p.warnings)
    std::fprintf(stderr, "sbx: warning: %s/%s\n", printable(dir).c_str(), printable(w.describe()).c_str());
}

int print_problems(const std::string& dir, const std::vector<PackProblem>& problems, const Error& e) {
  if (problems.empty()) return usage_error(e.message);
  std::size_t count = 0;
  for (auto& p : problems) {
    // A problem of the whole tree (its bounds, a link in it) names the pack itself.
    if (p.file.empty() && p.pointer.empty())
      std::fprintf(stderr, "sbx: %s%s\n", p.warning ? "warning: " : "", printable(p.message).c_str());
    else
      std::fprintf(stderr, "sbx: %s%s/%s\n", p.warning ? "warning: " : "", printable(dir).c_str(),
                   printable(p.describe()).c_str());
    count += !p.warning;
  }
  std::fprintf(stderr, "sbx: pack %s: %zu problem(s)\n", printable(dir).c_str(), count);
  return 125;
}

// pack validate --json: one object on stdout; exit 0 when the pack is good, 125 when not (as without --json).
// On failure, the name and version are the manifest's as read (PackIdentity), null only when it
// had none (or no manifest could be read).
int print_validate_json(const Pack* p, const std::vector<PackProblem>& found, const std::optional<Error>& e,
                        const PackIdentity& read = {}) {
  using nlohmann::json;
  json problems = json::array(), warnings = json::array();
  auto entry = [](const PackProblem& x) {
    return json{{"file", x.file}, {"pointer", x.pointer}, {"message", x.message}};
  };
  for (auto& x : found) (x.warning ? warnings : problems).push_back(entry(x));
  if (p)
    for (auto& w : p->warnings) warnings.push_back(entry(w));
  if (e && problems.empty()) problems.push_back(json{{"file", ""}, {"pointer", ""}, {"message", e->message}});
  json j = {{"ok", problems.empty()},
            {"name", p           ? json(p->name)
                     : read.name ? json(*read.name)
                                 : json(nullptr)},
            {"version", p              ? json(p->version)
                        : read.version ? json(*read.version)
                                       : json(nullptr)},
            {"digest", p && problems.empty() ? json(p->digest) : json(nullptr)},
            {"problems", problems},
            {"warnings", warnings}};
  std::printf("%s\n", dump_ascii_json(j, 2).c_str());
  return problems.empty() ? 0 : 125;
}

// "NAME=VALUE" split, for --context and --secret.
bool split_assignment(const std::string& text, std::string& name, std::string& value) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  name = text.substr(0, eq);
  value = text.substr(eq + 1);
  return true;
}

// --context NAME=PATH: each declared by the pack, given once, readable; every required one given.
std::optional<int> bind_contexts(const PackFlags& f, const Pack& pack, PackRunRequest& req,
                                 std::set<std::string>& given) {
  for (auto& c : f.contexts) {
    std::string name, path;
    if (!split_assignment(c, name, path) || path.empty())
      return usage_error("pack run: --context: expected NAME=PATH, got '" + c + "'");
    bool declared = false;
    for (auto& d : pack.contexts) declared = declared || d.name == name;
    if (!declared) return usage_error("pack run: --context " + name + ": the pack declares no such context");
    if (!given.insert("c:" + name).second) return usage_error("pack run: --context " + name + " given twice");
    if (::access(path.c_str(), R_OK) != 0)
      return usage_error("pack run: --context " + name + ": cannot read " + path + ": " + std::strerror(errno));
    req.contexts.push_back({name, path});
  }
  for (auto& d : pack.contexts)
    if (d.required && !given.count("c:" + d.name))
      return usage_error("pack run: the pack requires --context " + d.name + "=PATH (mounted read-only at " + d.path +
                         ")");
  return std::nullopt;
}

// --secret NAME=@FILE|env:VAR: each declared by the pack, given once, read now; every required
// one given.
std::optional<int> read_pack_secrets(const PackFlags& f, const Pack& pack, PackRunRequest& req,
                                     std::set<std::string>& given) {
  for (auto& s : f.secrets) {
    std::string name, source;
    // Only the name is ever echoed: the text after '=' might be the secret itself.
    if (!split_assignment(s, name, source))
      return usage_error("pack run: --secret: expected NAME=@FILE or NAME=env:VAR");
    bool declared = false;
    for (auto& d : pack.secrets) declared = declared || d.name == name;
    if (!declared) return usage_error("pack run: --secret " + name + ": the pack declares no such secret");
    if (!given.insert("s:" + name).second) return usage_error("pack run: --secret " + name + " given twice");
    auto value = read_secret_source(source);
    if (!value) return usage_error("pack run: --secret " + name + ": " + value.error().describe());
    req.secrets.push_back({name, std::move(*value)});
  }
  for (auto& d : pack.secrets)
    if (d.required && !given.count("s:" + d.name))
      return usage_error("pack run: the pack requires --secret " + d.name + "=@FILE|env:VAR");
  return std::nullopt;
}

// The run's spec: profile, manifest and flags layered (profile.hpp), the entrypoint as command.
Result<RunSpec> pack_spec(PackFlags& f, const LoadedProfile& profile, const Pack& pack) {
  // A limit the operator sets by flag replaces the manifest's: the profile's ceiling binds only
  // what the manifest decides.
  std::set<std::string> by_flag;
  for (auto& k : limit_kinds())
    if (auto* v = limit_flag_text(f.run, k); v && *v) by_flag.insert(k.name);
  for (auto& c : f.run.cap_add)
    if (auto canon = canonical_capability(c)) by_flag.insert(kCapabilityByOperator + *canon);
  auto merged = spec_from_layers(profile, &pack.spec_patch, pack.source_dir + "/pack.json", by_flag);
  if (!merged) return merged.error();
  f.run.command = pack.entrypoint;
  return apply_flags(std::move(*merged), f.run);
}

// What `sbx pack run` prints: the validated result (on stdout or into --result), or why it is
// withheld. Returns the exit status.
int print_pack_result(const PackFlags& f, const PackRunRequest& req, PackRunResult& res) {
  for (auto& e : res.errors) std::fprintf(stderr, "sbx: %s: %s\n", to_string(res.status), printable(e).c_str());
  if (res.status == RunStatus::ok && req.dry_run) {
    std::printf("%s\n", dump_json(res.result, 2).c_str());  // --result is for a run's result only
  } else if (!req.dry_run && !res.recorded) {
    std::fprintf(
        stderr,
        "sbx: pack run: the run's trace record could not be stored durably (%s): the validated result is withheld\n",
        printable(res.record_error).c_str());
    return 125;
  } else if (res.status == RunStatus::ok) {
    std::string text = dump_json(res.result, 2) + "\n";
    if (!f.result_file.empty()) {
      if (auto st = write_file_durable(f.result_file, text); !st) {
        std::fprintf(stderr, "sbx: cannot write --result %s: %s\n", printable(f.result_file).c_str(),
                     printable(st.error().describe()).c_str());
        return 125;
      }
    } else {
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
  }
  return res.exit_status;
}

int run_pack_command(PackFlags& f, GlobalOptions& g) {
  std::vector<PackProblem> problems;
  // A run mounts a private copy, hashed as it was made (load_pack_copy): the owner of f.dir may
  // change it at any moment. A dry run creates nothing and plans the mount of f.dir itself.
  auto pack =
      f.run.dry_run ? load_pack(f.dir, problems) : load_pack_copy(f.dir, resolve_dirs(g.state_dir).state, problems);
  if (!pack) return print_problems(f.dir, problems, pack.error());
  print_warnings(f.dir, *pack);
  if (f.input.empty()) return usage_error("pack run: --input FILE is required (a JSON array of records)");
  auto input = read_bounded(f.input, kMaxRecordsBytes, "usage", f.input);
  if (!input) return usage_error("pack run: --input: " + input.error().describe());

  PackRunRequest req;
  req.input_path = f.input;
  req.input_bytes = std::move(*input);
  std::set<std::string> given;
  if (auto rc = bind_contexts(f, *pack, req, given)) return *rc;
  if (auto rc = read_pack_secrets(f, *pack, req, given)) return *rc;
  auto profile = load_profile(f.run.profile);
  if (!profile) return usage_error(profile.error().describe());
  auto spec = pack_spec(f, *profile, *pack);
  if (!spec) return usage_error(spec.error().message);
  req.pack = std::move(*pack);
  req.run.spec = std::move(*spec);
  req.run.profile = profile->source;
  req.run.dirs = resolve_dirs(g.state_dir);
  req.run.trace_file = f.run.trace_file;
  req.run.explicit_limits = explicit_limits(f.run);
  req.run.limit_layers =
      limit_layers(*profile, &req.pack.spec_patch, req.pack.source_dir + "/pack.json", limits_given(f.run));
  if (auto st = apply_named_tenant(f.run.tenant, req.run,
                                   nlohmann::json{{"name", req.pack.name}, {"digest", req.pack.digest}});
      !st)
    return usage_error(st.error().message);
  req.dry_run = f.run.dry_run;
  if (!req.dry_run)
    if (auto st = check_trace_file(f.run.trace_file); !st) return usage_error(st.error().describe());
  req.run.invocation_argv = g.argv;
  // stdout is the contract's: it carries the validated result and nothing else. The program's
  // own stdout goes to sbx's stderr (capped by --output-limit like any run's), so a pack cannot
  // print a result of its own where the caller reads the validated one.
  req.run.io.stdout_fd = STDERR_FILENO;
  PackRunResult res = run_pack(req);
  return print_pack_result(f, req, res);
}

}  // namespace

void add_pack_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out) {
  static PackFlags f;
  auto* pack = app.add_subcommand(
      "pack", "Rule packs: typed input records in, a validated result out (man sbx-pack, sbx-pack(5))");
  pack->require_subcommand(1);

  auto* validate = pack->add_subcommand("validate", "Check a pack's manifest and schemas; list every problem");
  validate->add_option("DIR", f.dir, "Pack directory")->required();
  validate->add_flag("--strict,!--no-strict", f.strict,
                     "Unknown JSON Schema keywords (a misspelled \"requried\") are errors (the default); "
                     "--no-strict: warnings");
  validate->add_flag(
      "--json", f.as_json,
      "Print one JSON object: ok, name, version, digest, problems and warnings ({file, pointer, message})");
  out.push_back(
      {validate, [&g]() -> int {
         (void)g;
         std::vector<PackProblem> problems;
         PackIdentity read;
         auto p = load_pack(f.dir, problems, f.strict, &read);
         if (!p && f.as_json) return print_validate_json(nullptr, problems, p.error(), read);
         if (!p) return print_problems(f.dir, problems, p.error());
         // The manifest's limits against the profile a plain `pack run` uses: above it, that run fails.
         auto profile = load_profile(kDefaultProfile);
         if (!profile) return usage_error(profile.error().describe());
         if (auto merged = spec_from_layers(*profile, &p->spec_patch, f.dir + "/pack.json"); !merged) {
           if (f.as_json)
             return print_validate_json(
                 &*p, {{"pack.json", "/limits", merged.error().message + " (checked against the default profile)"}},
                 merged.error());
           print_warnings(f.dir, *p);
           return usage_error(merged.error().message + " (checked against the default profile)");
         }
         if (f.as_json) return print_validate_json(&*p, {}, std::nullopt);
         print_warnings(f.dir, *p);
         std::printf("%s %s: ok (digest %s)\n", printable(p->name).c_str(), printable(p->version).c_str(),
                     p->digest.c_str());
         return 0;
       }});

  auto* init = pack->add_subcommand("init", "Create a working pack skeleton in a new directory NAME");
  init->add_option("NAME", f.init_name, "Pack name (also the directory created)")->required();
  out.push_back({init, []() -> int {
                   std::string name = f.init_name;
                   auto slash = name.find_last_of('/');
                   std::string base = slash == std::string::npos ? name : name.substr(slash + 1);
                   if (auto st = init_pack(f.init_name, base); !st)
                     return usage_error("pack init: " + st.error().describe());
                   std::printf("created pack %s in %s; try: sbx pack run %s --input %s/records.json\n", base.c_str(),
                               f.init_name.c_str(), f.init_name.c_str(), f.init_name.c_str());
                   return 0;
                 }});

  auto* run = pack->add_subcommand("run", "Validate input records, run the pack in a sandbox, validate its result");
  run->add_option("DIR", f.dir, "Pack directory")->required();
  run->add_option("--input", f.input, "Input records: a JSON array, each checked against the pack's input_schema");
  run->add_option("--context", f.contexts, "Mount a context file or directory read-only: NAME=PATH (repeatable)");
  run->add_option("--secret", f.secrets, "Deliver a secret for this run only: NAME=@FILE or NAME=env:VAR (repeatable)");
  run->add_option("--result", f.result_file, "Write the validated result to FILE instead of stdout");
  add_limit_options(run, f.run);
  run->add_flag("--dry-run", f.run.dry_run,
                "Check the input records and every check of a run; print the merged spec and what would enforce each "
                "limit as JSON; run nothing");
  out.push_back({run, [&g]() -> int { return run_pack_command(f, g); }, true});
}

}  // namespace sbx::cli
