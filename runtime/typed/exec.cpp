#include "runtime/typed/exec.hpp"

#include "runtime/image/blob_store.hpp"

#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <set>

#include "runtime/base/clock.hpp"
#include "runtime/base/trace_field.hpp"
#include "runtime/base/doc_reader.hpp"
#include "runtime/image/artifact_export.hpp"
#include "runtime/typed/pack.hpp"
#include "runtime/launch/call_files.hpp"
#include "runtime/launch/dry_run.hpp"
#include "runtime/linux/events.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/launch/sandbox.hpp"
#include "runtime/typed/schema_validate.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/record/trace_ledger.hpp"
#include "runtime/typed/typed_io.hpp"
#include "runtime/linux/userns.hpp"

namespace sbx {
namespace {
using nlohmann::json;

struct Language {
  const char* name;
  const char* ext;
  std::vector<std::string> argv_prefix;
};

const Language kLanguages[] = {
    {"python", "py", {"/usr/bin/python3"}},
    {"sh", "sh", {"/bin/sh"}},
    // bash: its $EPOCHREALTIME stamps the clock as the program's first command, no further exec
    // (bench/mcp_pool.py measures the program's start that way).
    {"bash", "bash", {"/bin/bash"}},
    // node: agents write JavaScript too; /code/main.js runs as a CommonJS script.
    {"node", "js", {"/usr/bin/node"}},
};

Error bad(const std::string& what) { return make_error("usage", "exec request: " + what); }

// A memfd capturing one of the program's streams; read back after the run.
struct Capture {
  UniqueFd fd;
  std::string read_all() const {
    std::string s;
    char buf[65536];
    ::lseek(fd.get(), 0, SEEK_SET);
    for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) > 0;) s.append(buf, static_cast<std::size_t>(n));
    return s;
  }
};

}  // namespace

std::vector<std::string> exec_languages() {
  std::vector<std::string> out;
  for (auto& l : kLanguages) out.emplace_back(l.name);
  return out;
}

namespace {
// "python, sh, bash, node": the list for messages.
std::string language_list() {
  std::string out;
  for (auto& name : exec_languages()) out += (out.empty() ? "" : ", ") + name;
  return out;
}
}  // namespace

Result<ExecRequest> parse_exec_request(const json& rq) {
  // Errors: "exec request: <pointer>: <what>" (stage usage: the caller's mistake), as every
  // document sbx reads (doc_reader.hpp); code, files and inputs may hold any byte.
  DocSource src{"exec request", "usage", "", false};
  DocReader r(rq, src);
  SBX_TRY(r.check_object());
  r.known({"language", "code", "inputs", "files", "limits", "output_schema"});
  SBX_TRY(r.finish({.name = true, .known = true}));
  if (!r.contains("language") || !rq["language"].is_string())
    return r.fail_key("language", "'language' is required: one of " + language_list());
  const Language* lang = nullptr;
  for (auto& l : kLanguages)
    if (rq["language"] == l.name) lang = &l;
  if (!lang)
    return r.fail_key("language",
                      "language " + json_excerpt(rq["language"]) + " is not supported (" + language_list() + ")");
  if (!r.contains("code") || !rq["code"].is_string())
    return r.fail_key("code", "'code' is required: the program's source as a string");
  std::vector<std::pair<std::string, std::string>> files;
  if (r.contains("files")) {
    DocReader f = r.member("files");
    SBX_TRY(f.check_object("'files' must be an object {relative path: content}"));
    // One rule for a cold and a pooled call (pool_job.hpp): both accept and refuse alike.
    if (rq["files"].size() > kMaxRequestFiles)
      return f.fail("'files' has " + std::to_string(rq["files"].size()) + " entries; at most " +
                    std::to_string(kMaxRequestFiles) + " are allowed");
    for (auto& [path, content] : rq["files"].items()) {
      if (!plain_relative_path(path))
        return f.fail_key(path, "'" + path + "' must be a relative path of plain names (no '', '.' or '..' component)");
      if (path == std::string("main.") + lang->ext)
        return f.fail_key(path, "'" + path + "' would replace the code itself");
      if (!content.is_string()) return f.fail_key(path, "'" + path + "' must map to a string");
      files.push_back({path, content.get<std::string>()});
    }
  }
  json limits_patch = json::object();
  if (r.contains("limits")) {
    std::vector<PackProblem> problems;
    auto p = limits_to_spec_patch(rq["limits"], "request", problems);
    if (!p)
      return problems.empty() ? bad(p.error().message) : r.fail_at(problems.front().pointer, problems.front().message);
    limits_patch = *p;
  }
  std::optional<CompiledSchema> schema;
  if (r.contains("output_schema")) {
    // Strict: a request has no channel for warnings, and an unknown keyword (a misspelled
    // "requried") would let results through that the caller meant to refuse.
    SchemaReport report;
    auto s = CompiledSchema::compile(rq["output_schema"], "output_schema", &report, true);
    if (!s) return bad(s.error().message);
    schema = std::move(*s);
  }
  ExecRequest out{lang->ext,
                  lang->argv_prefix,
                  rq["code"].get<std::string>(),
                  std::move(files),
                  std::move(limits_patch),
                  std::move(schema),
                  rq.value("inputs", json(nullptr)).dump()};
  return out;
}

namespace {

// One exec call, planned: what its RunRequest's after_run fills in, kept beside the request.
struct ExecState {
  ExecRequest rq;
  json result = nullptr, result_errors = nullptr;
  std::size_t result_errors_omitted = 0;
  std::string traces_dir;  // where the run's record goes (the tenant's store under --tenant)
};

// The profile's spec under one request's limits, with the record's account of who set each
// limit. A pooled worker plans twice under one profile (its placeholder at build, its call at
// hand-out) and keeps the first: both are pure functions of the profile, which profile_changed
// found unchanged, and of the patch, compared here. They were ~0.13 ms of a hand-out's plan.
struct LayeredSpec {
  json patch;
  RunSpec spec;
  std::map<std::string, std::string> layers;
};

Result<LayeredSpec> layered_spec(const LoadedProfile& profile, json patch, std::optional<LayeredSpec>* memo) {
  if (memo && *memo && (*memo)->patch == patch) return **memo;
  // The request's operator chose the profile (--profile); no flag raises a limit here.
  auto spec = spec_from_layers(profile, &patch, "exec request", {}, CeilingRaise::by_profile);
  if (!spec) return make_error("usage", spec.error().message);  // already names the "exec request"
  auto layers = limit_layers(profile, &patch, "exec request", {});
  LayeredSpec l{std::move(patch), std::move(*spec), std::move(layers)};
  if (memo) *memo = l;
  return l;
}

// The run's spec: the profile's, lowered by the request's limits (never raised: spec_from_layers
// checks the ceiling), running /code/main.EXT in /tmp.
Result<RunSpec> exec_spec(const ExecRequest& rq, RunSpec spec, const ExecContext& ctx) {
  // The operator's hosts (`sbx exec --allow-host`), after the request's layer: a request names none.
  if (auto st = add_allow_hosts(spec.network, ctx.allow_hosts); !st) return st.error();
  if (!spec.limits.output_limit_bytes) spec.limits.output_limit_bytes = kExecDefaultOutputCap;
  spec.argv = rq.argv_prefix;
  spec.argv.push_back("/code/main." + rq.ext);
  spec.workdir = "/tmp";
  if (!ctx.events.empty()) {
    if (auto st = check_events_destination(ctx.events); !st) return st.error();
    spec.events = ctx.events;
  }
  return spec;
}

// Code, extra files and the input reach the sandbox as generated files: written by init on a
// tmpfs of the sandbox's own mount namespace and bound read-only, never stored on the host.
void exec_files(const ExecRequest& rq, RunRequest& run) {
  run.typed.inputs = json::array(
      {file_record("/in/input.json", static_cast<std::int64_t>(rq.input_bytes.size()), sha256_hex(rq.input_bytes))});
  run.files.push_back({"/code/main." + rq.ext, rq.code, 0444});
  for (auto& [path, content] : rq.files) run.files.push_back({"/code/" + path, content, 0444});
  run.files.push_back({"/in/input.json", rq.input_bytes, 0444});
}

// The exec's output, once the program has ended (run.typed.after_run): /out/result.json read and,
// with an output_schema, validated; a valid one is kept as a blob and becomes the response's
// result. A pooled call also keeps the request and profile blobs here (deferred: each is a
// durable write the program would otherwise wait for). Held by value in the RunRequest, which
// `st`'s owner outlives.
struct ExecOutput {
  ExecState* st;
  Dirs dirs;
  std::int64_t keep_max;
  std::shared_ptr<BlobPin> pin;                                 // the run's (RunRequest::blob_pin)
  std::string request_text, deferred_origin, deferred_profile;  // empty unless deferred

  AfterRun operator()(const Outcome& o, int out_fd) const;
  std::vector<SchemaError> check(const OutFile& f, const Outcome& o, json& blobs) const;
};

std::vector<SchemaError> ExecOutput::check(const OutFile& f, const Outcome& o, json& blobs) const {
  const std::optional<CompiledSchema>& schema = st->rq.schema;
  std::vector<SchemaError> errs;
  if (!f.present) {
    if (schema && o.status == RunStatus::ok) errs.push_back({"", "the program wrote no /out/result.json"});
    return errs;
  }
  ParsedJson parsed;
  if (!f.problem.empty()) errs.push_back({"", "/out/result.json: " + f.problem});
  else if (parsed = parse_json(f.bytes, result_bounds()); !parsed.ok())
    errs.push_back({parsed.pointer, parsed.problem});
  else if (schema) errs = schema->validate(parsed.value, kProducedValues);
  if (errs.empty()) {
    st->result = std::move(parsed.value);
    // The result as the program wrote it, kept after the run (the supervisor is done).
    BlobKeeper kept(dirs, keep_max, pin);
    kept.add_bytes("result", "/out/result.json", f.bytes);
    for (auto& b : kept.take()) blobs.push_back(b);
  }
  return errs;
}

AfterRun ExecOutput::operator()(const Outcome& o, int out_fd) const {
  AfterRun after;
  json& extra = after.record;
  json blobs = json::array();
  if (!request_text.empty()) {
    BlobKeeper keeper(dirs, keep_max, pin);
    keeper.add_bytes("exec_request", "request.json", request_text);
    keeper.add_bytes("profile", deferred_origin, deferred_profile);
    blobs = keeper.take();
    put(extra, "blobs", blobs);
  }
  OutFile f = out_fd >= 0 ? read_out_file(out_fd, "result.json", kMaxResultBytes) : OutFile{};
  json outputs = json::array();
  if (f.present && f.problem.empty()) outputs.push_back(file_record("/out/result.json", f.size, f.sha256));
  put(extra, "outputs", outputs);
  std::vector<SchemaError> errs = check(f, o, blobs);
  if (f.present && errs.empty()) put(extra, "blobs", blobs);  // the result's blob added
  json output_check = nullptr;
  if (!errs.empty()) {
    output_check = invalid_check(errs, 0, result_bounds());
    st->result_errors = output_check["errors"];
    st->result_errors_omitted = output_check.value("errors_omitted", std::size_t{0});
    // Only a run that otherwise succeeded becomes output_invalid; a failed one keeps its status
    // (with_verdict, outcome.hpp).
    after.verdict = ContractVerdict{RunStatus::output_invalid,
                                    make_error("output", std::to_string(errs.size() + st->result_errors_omitted) +
                                                             " error(s) in /out/result.json")};
  }
  if (errs.empty() && st->rq.schema) output_check = trace_object({{"validation/output/status", "ok"}});
  put(extra, "validation", trace_object({{"validation/input", nullptr}, {"validation/output", output_check}}));
  return after;
}

std::string exec_profile_name(const ExecContext& ctx) {
  return ctx.profile.empty() ? std::string(kDefaultProfile) : ctx.profile;
}

// The request checked and turned into a RunRequest (everything but the captured streams); a
// malformed request is an Error. Shared by a cold run (run_exec) and a warm pool's hand-out
// (run_exec_pooled), so that both run, record and answer the same call the same way.
// `profile`: as the caller already loaded it (a pooled worker's, for both of its plans); null:
// loaded here. `memo`: the pooled worker's layered_spec, kept between its two plans.
Result<std::shared_ptr<ExecState>> plan_exec(const json& request, const ExecContext& ctx, RunRequest& run,
                                             bool defer_blobs = false, const LoadedProfile* profile = nullptr,
                                             std::optional<LayeredSpec>* memo = nullptr) {
  auto parsed = parse_exec_request(request);
  if (!parsed) return parsed.error();
  auto state = std::make_shared<ExecState>();
  state->rq = std::move(*parsed);
  ExecRequest& rq = state->rq;
  std::optional<LoadedProfile> own;
  if (!profile) {
    auto read = load_profile(exec_profile_name(ctx));
    if (!read) return read.error();
    profile = &own.emplace(std::move(*read));
  }
  auto layered = layered_spec(*profile, json{{"limits", rq.limits_patch}}, memo);
  if (!layered) return layered.error();
  auto spec = exec_spec(rq, std::move(layered->spec), ctx);
  if (!spec) return spec.error();
  run.profile = profile->source;
  run.dirs = ctx.dirs;
  run.trace_file = ctx.trace_file;
  run.invocation_argv = ctx.invocation_argv;
  exec_files(rq, run);
  run.spec = std::move(*spec);
  run.limit_layers = std::move(layered->layers);
  run.limit_raise = CeilingRaise::by_profile;
  if (ctx.before_run)
    if (auto st = ctx.before_run(run); !st) return make_error("usage", st.error().message);
  state->traces_dir = run.dirs.traces;  // a tenant's run records to the tenant's store
  if (ctx.dry_run) return state;
  // What a replay needs (blob_store.hpp), kept before the run: the request (code, files, inputs
  // and limits in one document) and the profile's text.
  auto ceiling = keep_ceiling();
  if (!ceiling) return ceiling.error();
  json copy = request;  // dump_json escapes invalid UTF-8 in place
  std::string request_text = dump_json(copy, -1);
  for (auto& [k, v] : ctx.record_extra.items()) run.record_extra[k] = v;  // before_run's (a tenant) stay
  ExecOutput output{state.get(), run.dirs, *ceiling, run.blob_pin, "", "", ""};
  if (defer_blobs) {
    put(run.record_extra, "blobs", json::array());
    output.request_text = std::move(request_text);
    output.deferred_origin = run.profile.origin;
    output.deferred_profile = run.profile.text;
  } else {
    BlobKeeper keeper(run.dirs, *ceiling, run.blob_pin);
    keeper.add_bytes("exec_request", "request.json", request_text);
    keeper.add_bytes("profile", run.profile.origin, run.profile.text);
    put(run.record_extra, "blobs", keeper.take());
  }
  run.typed.after_run = std::move(output);
  // No result without a record: a run whose record is not durable in the ledger answers with an
  // error, not with its output (exit 125; cli/exec_cmd.cpp prints the one line).
  run.require_record = true;
  return state;
}

Result<json> exec_response(const ExecState& st, const RunReport& rep, const Capture& out, const Capture& err) {
  if (!rep.recorded)
    return make_error("record",
                      "the run's trace record could not be stored (" + rep.record_error + "): its result is withheld");
  const json& t = rep.trace;
  json resp = {{"run_id", t.value("run_id", "")},
               {"status", to_string(rep.outcome.status)},
               {"exit_code", rep.outcome.exit_code ? json(*rep.outcome.exit_code) : json(nullptr)},
               {"signal", rep.outcome.signal ? json(*rep.outcome.signal) : json(nullptr)},
               {"error", rep.outcome.error ? json(rep.outcome.error->describe()) : json(nullptr)},
               {"stdout", out.read_all()},
               {"stderr", err.read_all()},
               {"stdout_truncated", t.value("stdout", json::object()).value("truncated", false)},
               {"stderr_truncated", t.value("stderr", json::object()).value("truncated", false)},
               {"result", st.result},
               {"result_errors", st.result_errors},
               {"usage", t.value("usage", json::object())},
               {"violations", t.value("violations", json::array())},
               {"made_by", t.value("sandbox", json::object()).value("made_by", json(nullptr))},
               {"trace", st.traces_dir + "/" + kLedgerName}};
  if (st.result_errors_omitted > 0) resp["result_errors_omitted"] = st.result_errors_omitted;
  return resp;
}

// The program's stdout and stderr go to memfds that the response reads back (capped by the run's
// output limit): a cold call and a pooled one capture alike.
Status capture_streams(Capture& out, Capture& err, RunRequest& run) {
  out.fd.reset(::memfd_create("sbx-exec-stdout", MFD_CLOEXEC));
  err.fd.reset(::memfd_create("sbx-exec-stderr", MFD_CLOEXEC));
  if (!out.fd.ok() || !err.fd.ok()) return sys_error("exec", "memfd_create for the captured output");
  run.io.stdout_fd = out.fd.get();
  run.io.stderr_fd = err.fd.get();
  return {};
}

// "" when the pooled sandbox `warm` (its spec as built: `pooled`) may serve `call`: pool_refusal's
// rule, and a sandbox forked from a template (mcp_template.hpp) serves only a call planned for
// that template (before_run found it stale otherwise: its digest, made again now, differs).
std::string pooled_call_refusal(const RunRequest& warm, const RunSpec& pooled, const RunRequest& call) {
  if (std::string why = pool_refusal(pooled, call.spec); !why.empty()) return why;
  if (call.from_template.socket == warm.from_template.socket) return "";
  return "the call is not for the template this sandbox was forked from (" +
         call.record_extra.value("pool", json::object()).value("reason", std::string("no template")) + ")";
}

}  // namespace

Result<json> run_exec(const json& request, const ExecContext& ctx) {
  RunRequest run;
  auto state = plan_exec(request, ctx, run);
  if (!state) return state.error();
  if (ctx.dry_run) return dry_run(run);  // the same checks and plan as `sbx run --dry-run`
  Capture out, err;
  if (auto st = capture_streams(out, err, run); !st) return st.error();
  RunReport rep = run_sandbox(run);
  return exec_response(**state, rep, out, err);
}

Result<PooledExec> run_exec_pooled(const ExecContext& ctx, const AwaitExecCall& await_request) {
  // The sandbox is made for the profile as a call without limits of its own would run under it:
  // a placeholder request plans it (its program and files are replaced at hand-out).
  RunRequest warm;
  const std::string profile_name = exec_profile_name(ctx);
  auto profile = load_profile(profile_name);
  if (!profile) return profile.error();
  std::optional<LayeredSpec> memo;  // the placeholder's, reused by a call with the same limits
  auto placeholder = plan_exec({{"language", "sh"}, {"code", ""}}, ctx, warm, false, &*profile, &memo);
  if (!placeholder) return placeholder.error();
  warm.files.clear();
  warm.record_extra = json::object();
  warm.typed.after_run = nullptr;
  Capture out, err;
  if (auto st = capture_streams(out, err, warm); !st) return st.error();
  PooledExec res;
  std::shared_ptr<ExecState> state;
  RunRequest call;  // the call's own plan; its after_run is handed to the pooled run
  const RunSpec pooled_spec = warm.spec;
  warm.pool.await_call = [&](const PoolPause& pause) -> std::optional<PooledCall> {
    json pool_meta = json::object();
    auto request = await_request(pause, pool_meta);
    if (!request) return std::nullopt;  // discarded: no call came
    res.request = *request;
    res.pool_meta = pool_meta;
    if (pool_meta.contains("discard")) {  // the sandbox is unusable: the call runs cold
      res.cold_reason = pool_meta["discard"].get<std::string>();
      return std::nullopt;
    }
    const std::int64_t t0_us = monotonic_us();
    // The profile as it is now (profile_changed: found and read again, parsed only when it
    // extends another): a sandbox built under another file, text or parent does not run the
    // call, which runs cold, planned under the new one.
    auto changed = profile_changed(*profile, profile_name);
    if (!changed) {
      res.error = changed.error();
      return std::nullopt;
    }
    if (!changed->empty()) {
      res.cold_reason = *changed;
      return std::nullopt;
    }
    auto planned = plan_exec(*request, ctx, call, true, &*profile, &memo);
    if (!planned) {
      res.error = planned.error();
      return std::nullopt;
    }
    if (std::string why = pooled_call_refusal(warm, pooled_spec, call); !why.empty()) {
      res.cold_reason = why;
      return std::nullopt;
    }
    state = std::move(*planned);
    // The hand-out's second leg (bench/mcp_pool.py): the call planned and checked against the
    // sandbox, before the job goes to init.
    put(pool_meta, "pool/plan_us", monotonic_us() - t0_us);
    PooledCall c;
    c.spec = call.spec;
    c.job.argv = call.spec.argv;
    c.job.files = call.files;
    c.inputs = call.typed.inputs;
    c.record_extra = call.record_extra;
    put(c.record_extra, "pool", pool_meta);
    c.after_run = call.typed.after_run;
    return c;
  };
  RunReport rep = run_sandbox(warm);
  if (rep.discarded) {
    if (res.error) return *res.error;
    if (res.request.is_null() && rep.outcome.error) res.build_error = rep.outcome.error;
    return res;  // res.request null: nothing came; otherwise res.cold_reason says why it runs cold
  }
  if (!state) return make_error("pool", "the pooled run ended before its call was handed over");
  auto resp = exec_response(*state, rep, out, err);
  if (!resp) return resp.error();
  res.response = std::move(*resp);
  return res;
}

}  // namespace sbx
