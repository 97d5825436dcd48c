#include "runtime/typed/pack_run.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "runtime/image/artifact_export.hpp"
#include "runtime/image/blob_store.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/trace_field.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/launch/dry_run.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/typed/pack_tree.hpp"
#include "runtime/base/clock.hpp"
#include "runtime/typed/typed_io.hpp"
#include "runtime/linux/userns.hpp"

namespace sbx {
namespace {
using nlohmann::json;

std::vector<std::string> error_lines(const std::string& file, const std::vector<SchemaError>& errs,
                                     std::size_t omitted) {
  std::vector<std::string> v;
  for (auto& e : errs) v.push_back(file + "#" + e.pointer + ": " + e.message);
  if (omitted > 0)
    v.push_back(file + ": " + std::to_string(omitted) + " more error(s) not listed (the first " +
                std::to_string(errs.size()) + " are)");
  return v;
}

}  // namespace

void wipe(std::string& s) {
  if (!s.empty()) ::explicit_bzero(s.data(), s.size());
  s.clear();
  s.shrink_to_fit();
}

Result<std::string> read_secret_source(const std::string& source) {
  if (source.starts_with("@")) {
    std::string path = source.substr(1);
    return read_regular_bounded(path, kMaxSecretBytes, "usage", "secret file " + path);
  }
  if (source.starts_with("env:")) {
    std::string var = source.substr(4);
    const char* v = var.empty() ? nullptr : std::getenv(var.c_str());
    if (!v)
      return make_error("usage", "environment variable " + (var.empty() ? std::string("''") : var) + " is not set");
    return std::string(v);
  }
  // The source text may be the secret itself, pasted by mistake: do not echo it.
  return make_error("usage",
                    "a secret's source must be @FILE or env:VAR (the value itself is never given on the command line)");
}

std::vector<SchemaError> validate_records(const CompiledSchema& schema, const json& records, std::size_t* omitted,
                                          std::size_t max_kept) {
  std::vector<SchemaError> out;
  if (!records.is_array()) {
    out.push_back({"", "the input must be a JSON array of records"});
    return out;
  }
  for (std::size_t i = 0; i < records.size(); ++i)
    for (auto& e : schema.validate(records[i])) {
      if (out.size() >= max_kept) {
        if (omitted) ++*omitted;
        continue;
      }
      // Built with append: GCC 12 warns falsely (-Wstringop-overflow) about "/" + to_string(i) here.
      std::string pointer(1, '/');
      pointer.append(std::to_string(i)).append(e.pointer);
      out.push_back({std::move(pointer), e.message});
    }
  return out;
}

namespace {
PackRunResult dry_run_pack(PackRunRequest& req, PackRunResult& res) {
  for (auto& [n, v] : req.secrets) wipe(v);
  for (auto& [n, v] : req.run.secrets.files) wipe(v);
  for (auto& [n, v] : req.run.secrets.env) wipe(v);
  if (req.run.typed.refuse) {
    res.status = req.run.typed.refuse->status;
    res.exit_status = exit_status_for(*req.run.typed.refuse);
    if (res.errors.empty() && req.run.typed.refuse->error)
      res.errors.push_back(req.run.typed.refuse->error->describe());
    return res;
  }
  auto plan = dry_run(req.run);
  if (!plan) {
    res.errors.push_back(plan.error().describe_setup());
    return res;  // setup_error, 125
  }
  res.status = RunStatus::ok;
  res.exit_status = 0;
  res.result = std::move(*plan);
  return res;
}
}  // namespace

namespace {

// A context given for a run, and what is mounted for it: a private copy, hashed as it was made
// (pack_tree.hpp), like the pack itself. The caller's host path may change during the run; the
// program sees the bytes the record's digest names.
struct ContextCopy {
  std::string mounted;  // the copy (or, on a dry run, the source itself)
  std::string digest;   // "" on a dry run (nothing is read)
};

Result<std::vector<ContextCopy>> copy_contexts(const PackRunRequest& req, std::shared_ptr<PrivateDir>& holder) {
  std::vector<ContextCopy> out;
  for (std::size_t i = 0; i < req.contexts.size(); ++i) {
    auto& [name, path] = req.contexts[i];
    if (req.dry_run) {
      out.push_back({path, ""});
      continue;
    }
    // Beside the pack's own copy (<state>/tmp, pack_tree.hpp) when there is one.
    if (!holder && req.pack.copy) holder = req.pack.copy;
    if (!holder) {
      auto d = PrivateDir::make(req.run.dirs.state, "context");
      if (!d) return d.error();
      holder = std::move(*d);
    }
    // The caller's own path is resolved (a link the caller named is the caller's choice); what
    // lies under it is read without following any link.
    char* real = ::realpath(path.c_str(), nullptr);
    if (!real) return sys_error("pack", "context " + name + ": " + path);
    std::string source = real;
    std::free(real);
    std::string copy = holder->path() + "/" + std::to_string(i);
    auto digest = hash_tree(source, copy, "context " + name + " (" + path + ")", kPackBoundsHint);
    if (!digest) return digest.error();
    out.push_back({copy, *digest});
  }
  return out;
}

// The run's identity in the record: the pack, its secrets by name only (which were delivered),
// its contexts by name, mount point, host path and the digest of what was mounted, and the
// records file.
void describe_pack_run(PackRunRequest& req, const std::vector<ContextCopy>& copies) {
  RunRequest& run = req.run;
  json secret_names = json::array(), contexts = json::array();
  for (auto& [name, value] : req.secrets) secret_names.push_back(name);
  for (std::size_t i = 0; i < req.contexts.size(); ++i)
    for (auto& c : req.pack.contexts)
      if (c.name == req.contexts[i].first) {
        json e = trace_object({{"invocation/pack/contexts/[]/name", c.name},
                               {"invocation/pack/contexts/[]/path", c.path},
                               {"invocation/pack/contexts/[]/source", req.contexts[i].second}});
        if (!copies[i].digest.empty()) put(e, "invocation/pack/contexts/[]/digest", copies[i].digest);
        contexts.push_back(std::move(e));
      }
  run.typed.pack = trace_object({{"invocation/pack/name", req.pack.name},
                                 {"invocation/pack/version", req.pack.version},
                                 {"invocation/pack/digest", req.pack.digest},
                                 {"invocation/pack/secrets", secret_names},
                                 {"invocation/pack/contexts", contexts}});
  run.typed.inputs = json::array(
      {file_record(req.input_path, static_cast<std::int64_t>(req.input_bytes.size()), sha256_hex(req.input_bytes))});
}

// 1 the input contract, before anything is created: a refusal goes into run.typed.refuse (the run
// then makes nothing and records why), its lines into res.errors; returns validation.input.
json check_input(PackRunRequest& req, const Result<CompiledSchema>& in_schema, const Result<CompiledSchema>& out_schema,
                 PackRunResult& res) {
  RunRequest& run = req.run;
  std::vector<SchemaError> in_errors;
  std::size_t in_omitted = 0;
  ParsedJson parsed = parse_json(req.input_bytes, {kMaxRecordsBytes});
  if (!in_schema || !out_schema) {
    // load_pack compiled both already; this only fails if the pack changed in between.
    Outcome o;
    o.error = !in_schema ? in_schema.error() : out_schema.error();
    run.typed.refuse = o;
  } else if (!parsed.ok()) {
    in_errors.push_back({parsed.pointer, parsed.problem});
  } else {
    in_errors = validate_records(*in_schema, parsed.value, &in_omitted, kMaxContractErrors);
  }
  if (!in_errors.empty()) {
    run.typed.refuse = refusal(
        {RunStatus::input_invalid, make_error("input", std::to_string(in_errors.size() + in_omitted) + " error(s) in " +
                                                           req.input_path + " against " + req.pack.input_schema_path)});
    res.errors = error_lines(req.input_path, in_errors, in_omitted);
    return invalid_check(in_errors, in_omitted, {kMaxRecordsBytes});
  }
  if (run.typed.refuse) return nullptr;
  return trace_object({{"validation/input/status", "ok"}, {"validation/input/records", parsed.value.size()}});
}

// 2 the mounts of the contract. The records are the exact bytes validated above, handed to the
// sandbox as a generated file (the caller's file may change after validation; this copy cannot).
// The pack and the contexts are bound from sbx's private copies (load_pack_copy, copy_contexts).
void bind_pack_and_contexts(PackRunRequest& req, const std::vector<ContextCopy>& copies) {
  req.run.spec.binds.push_back({req.pack.dir, "/pack", false});
  for (std::size_t i = 0; i < req.contexts.size(); ++i)
    for (auto& c : req.pack.contexts)
      if (c.name == req.contexts[i].first) req.run.spec.binds.push_back({copies[i].mounted, c.path, false});
}

void plan_contract_mounts(PackRunRequest& req, const std::vector<ContextCopy>& copies) {
  RunRequest& run = req.run;
  if (!run.typed.refuse) {
    run.files.push_back({"/in/records.json", req.input_bytes, 0444});
    bind_pack_and_contexts(req, copies);
  }
  for (auto& [name, value] : req.secrets)
    for (auto& s : req.pack.secrets)
      if (s.name == name) (s.delivery == "env" ? run.secrets.env : run.secrets.files).push_back({name, value});
}

// 3 the output contract, once the program has ended (run.typed.after_run): /out/result.json read,
// validated against the output schema, kept as a blob when valid; the verdict goes back to the
// run's outcome (with_verdict, outcome.hpp).
struct OutputContract {
  const PackRunRequest& req;
  const CompiledSchema& schema;
  const json& validation;
  std::int64_t ceiling;
  json valid_result;
  std::vector<std::string> lines;

  AfterRun judge(const Outcome& o, int out_fd);
  std::vector<SchemaError> validate(const OutFile& f);
};

std::vector<SchemaError> OutputContract::validate(const OutFile& f) {
  std::vector<SchemaError> errs;
  if (!f.present) errs.push_back({"", "the program wrote no /out/result.json"});
  else if (!f.problem.empty()) errs.push_back({"", "/out/result.json: " + f.problem});
  else {
    ParsedJson out = parse_json(f.bytes, result_bounds());
    if (!out.ok()) errs.push_back({out.pointer, out.problem});
    else errs = schema.validate(out.value, kProducedValues);
    if (errs.empty()) valid_result = std::move(out.value);
  }
  return errs;
}

AfterRun OutputContract::judge(const Outcome& o, int out_fd) {
  AfterRun after;
  json& extra = after.record;
  extra = trace_object({{"validation", validation}});
  if (req.run.typed.refuse || out_fd < 0) return after;
  OutFile f = read_out_file(out_fd, "result.json", kMaxResultBytes);
  json outputs = json::array();
  if (f.present && f.problem.empty()) outputs.push_back(file_record("/out/result.json", f.size, f.sha256));
  put(extra, "outputs", outputs);
  json& output_check = at(at(extra, "validation"), "validation/output");
  if (o.status != RunStatus::ok) {
    // The program failed on its own terms (exit code, signal, timeout): that status stands, and
    // its output, if any, is not validated nor handed on.
    output_check = trace_object({{"validation/output/status", "not_checked"},
                                 {"validation/output/reason", std::string("the run ended ") + to_string(o.status)}});
    return after;
  }
  std::vector<SchemaError> errs = validate(f);
  if (errs.empty()) {
    BlobKeeper kept(req.run.dirs, ceiling, req.run.blob_pin);  // after the run: the supervisor is done
    kept.add_bytes("result", "/out/result.json", f.bytes);
    put(extra, "blobs", kept.take());
    output_check = trace_object({{"validation/output/status", "ok"}});
    return after;
  }
  after.verdict =
      ContractVerdict{RunStatus::output_invalid,
                      make_error("output", std::to_string(errs.size()) + " error(s) in /out/result.json against " +
                                               req.pack.output_schema_path)};
  output_check = invalid_check(errs, 0, result_bounds());  // keeps the first kMaxContractErrors
  std::size_t omitted = output_check.value("errors_omitted", std::size_t{0});
  lines = error_lines("/out/result.json", errs, omitted);
  return after;
}

// What a replay needs (blob_store.hpp), kept before the run: the pack's tree, the records as
// validated and the profile's text.
json keep_pack_blobs(PackRunRequest& req, std::int64_t ceiling) {
  BlobKeeper keeper(req.run.dirs, ceiling, req.run.blob_pin);
  keeper.add_tree("pack_file", "pack_dir", "pack_link", "", req.pack.dir);
  return keeper.take();
}
json keep_call_blobs(PackRunRequest& req, std::int64_t ceiling) {
  BlobKeeper keeper(req.run.dirs, ceiling, req.run.blob_pin);
  keeper.add_bytes("records", req.input_path, req.input_bytes);
  keeper.add_bytes("profile", req.run.profile.origin, req.run.profile.text);
  return keeper.take();
}
void keep_replay_blobs(PackRunRequest& req, std::int64_t ceiling) {
  json blobs = keep_pack_blobs(req, ceiling);
  for (auto& b : keep_call_blobs(req, ceiling)) blobs.push_back(b);
  put(req.run.record_extra, "blobs", blobs);
}

// The run's end as the caller sees it: the secrets wiped, the status, the record, and the
// validated result only when the run is ok and its record durable.
void finish_pack_run(PackRunRequest& req, RunReport& report, OutputContract& contract, PackRunResult& res) {
  RunRequest& run = req.run;
  res.recorded = report.recorded;
  res.record_error = report.record_error;
  for (auto& [n, v] : run.secrets.files) wipe(v);
  for (auto& [n, v] : run.secrets.env) wipe(v);
  for (auto& [n, v] : req.secrets) wipe(v);
  res.exit_status = report.exit_status;
  res.status = report.outcome.status;
  if (report.outcome.error) res.error = report.outcome.error->describe();
  res.trace = std::move(report.trace);
  if (res.status == RunStatus::ok && res.recorded) res.result = std::move(contract.valid_result);
  res.errors.insert(res.errors.end(), contract.lines.begin(), contract.lines.end());
}

}  // namespace

PackRunResult run_pack(PackRunRequest& req) {
  PackRunResult res;
  RunRequest& run = req.run;
  std::shared_ptr<PrivateDir> context_dir;  // the contexts' copies, removed when the run is over
  auto copies = copy_contexts(req, context_dir);
  if (!copies) {
    for (auto& [n, v] : req.secrets) wipe(v);
    res.errors.push_back(copies.error().describe());
    return res;  // setup_error, 125: nothing ran
  }
  describe_pack_run(req, *copies);
  auto in_schema = CompiledSchema::compile(req.pack.input_schema, req.pack.input_schema_path);
  auto out_schema = CompiledSchema::compile(req.pack.output_schema, req.pack.output_schema_path);
  json validation = trace_object(
      {{"validation/input", check_input(req, in_schema, out_schema, res)}, {"validation/output", nullptr}});
  plan_contract_mounts(req, *copies);
  // A dry run stops here: the input contract is checked and the mounts are planned; the rest is
  // the same dry run as `sbx run --dry-run` (dry_run.hpp), nothing created.
  if (req.dry_run) return dry_run_pack(req, res);
  auto ceiling = keep_ceiling();
  if (!ceiling) {
    res.errors.push_back(ceiling.error().describe());
    return res;  // setup_error, 125
  }
  keep_replay_blobs(req, *ceiling);
  // A refused run never calls after_run with an out fd, so the schema it names is not used then.
  static const CompiledSchema kNoSchema;
  OutputContract contract{req, out_schema ? *out_schema : kNoSchema, validation, *ceiling, {}, {}};
  run.typed.after_run = [&contract](const Outcome& o, int out_fd) { return contract.judge(o, out_fd); };
  // No result without a record: the caller gets the validated result only once the run's record
  // is durable in the ledger (cli/pack_cmd.cpp withholds it otherwise).
  run.require_record = true;
  RunReport report = run_sandbox(run);
  finish_pack_run(req, report, contract, res);
  return res;
}

namespace {
// Why a sandbox built for req (its contexts' copies `copies`) does not run a call with `records`
// ("" when it does; `count` then holds how many records there are): run_pack_pooled's checks.
std::string pooled_pack_refusal(const PackRunRequest& req, const std::vector<ContextCopy>& copies,
                                const LoadedProfile& profile, const std::string& profile_name,
                                const CompiledSchema& in_schema, const std::string& records, std::size_t& count) {
  auto changed = profile_changed(profile, profile_name);
  if (!changed) return "profile " + profile_name + " could not be read again: " + changed.error().describe();
  if (!changed->empty()) return *changed;
  auto now = pack_digest(req.pack.source_dir);
  if (!now) return "the pack could not be read again: " + now.error().describe();
  if (*now != req.pack.digest)
    return "pack " + req.pack.source_dir + " changed since the pooled sandbox was built (" + req.pack.digest +
           ", now " + *now + ")";
  for (std::size_t i = 0; i < req.contexts.size(); ++i) {
    auto& [name, path] = req.contexts[i];
    char* real = ::realpath(path.c_str(), nullptr);
    if (!real) return "context " + name + " (" + path + ") could not be found again";
    std::string source = real;
    std::free(real);
    auto digest = hash_tree(source, "", "context " + name + " (" + path + ")", kPackBoundsHint);
    if (!digest) return "context " + name + " could not be read again: " + digest.error().describe();
    if (*digest != copies[i].digest)
      return "context " + name + " (" + path + ") changed since the pooled sandbox was built";
  }
  ParsedJson parsed = parse_json(records, {kMaxRecordsBytes});
  if (!parsed.ok() || !validate_records(in_schema, parsed.value, nullptr, 1).empty())
    return "the records are not valid against the pack's input schema (the cold run refuses them, creating nothing)";
  count = parsed.value.size();
  return "";
}

// The sandbox's side of run_pack_pooled: everything run_pack plans before its run, but the
// records. Returns the contexts' copies (held by `holder`) and the pack tree's blobs.
Result<std::vector<ContextCopy>> plan_pooled_pack(PackRunRequest& req, std::shared_ptr<PrivateDir>& holder) {
  if (!req.secrets.empty()) return make_error("pool", "a pack given secrets is not pooled: they are read at each call");
  auto copies = copy_contexts(req, holder);
  if (!copies) return copies.error();
  describe_pack_run(req, *copies);
  bind_pack_and_contexts(req, *copies);
  // No result without a record (run_pack).
  req.run.require_record = true;
  return copies;
}
}  // namespace

PooledPack run_pack_pooled(PackRunRequest& req, const LoadedProfile& profile, const std::string& profile_name,
                           const AwaitPackRecords& await_records) {
  PooledPack out;
  RunRequest& run = req.run;
  std::shared_ptr<PrivateDir> context_dir;
  auto copies = plan_pooled_pack(req, context_dir);
  auto in_schema = CompiledSchema::compile(req.pack.input_schema, req.pack.input_schema_path);
  auto out_schema = CompiledSchema::compile(req.pack.output_schema, req.pack.output_schema_path);
  auto ceiling = keep_ceiling();
  for (const Error* e : {copies ? nullptr : &copies.error(), in_schema ? nullptr : &in_schema.error(),
                         out_schema ? nullptr : &out_schema.error(), ceiling ? nullptr : &ceiling.error()})
    if (e) {
      out.build_error = *e;
      return out;
    }
  const json pack_blobs = keep_pack_blobs(req, *ceiling);  // the tree once; each call's record names it
  json validation;
  std::optional<OutputContract> contract;
  run.pool.await_call = [&](const PoolPause& pause) -> std::optional<PooledCall> {
    json meta = json::object();
    auto records = await_records(pause, meta);
    if (!records) return std::nullopt;  // discarded: no call came
    out.called = true;
    out.pool_meta = meta;
    const std::int64_t t0_us = monotonic_us();
    std::size_t count = 0;
    out.cold_reason = meta.contains("discard")
                          ? meta["discard"].get<std::string>()
                          : pooled_pack_refusal(req, *copies, profile, profile_name, *in_schema, *records, count);
    if (!out.cold_reason.empty()) return std::nullopt;
    req.input_bytes = std::move(*records);
    validation = trace_object(
        {{"validation/input", trace_object({{"validation/input/status", "ok"}, {"validation/input/records", count}})},
         {"validation/output", nullptr}});
    contract.emplace(OutputContract{req, *out_schema, validation, *ceiling, {}, {}});
    put(meta, "pool/plan_us", monotonic_us() - t0_us);
    PooledCall c;
    c.spec = run.spec;
    c.job.argv = run.spec.argv;
    c.job.files = {{"/in/records.json", req.input_bytes, 0444}};
    c.inputs = json::array(
        {file_record(req.input_path, static_cast<std::int64_t>(req.input_bytes.size()), sha256_hex(req.input_bytes))});
    c.record_extra = run.record_extra;
    put(c.record_extra, "blobs", pack_blobs);
    put(c.record_extra, "pool", meta);
    // The records' and the profile's blobs are kept after the run (each a durable write the
    // program would otherwise wait for), beside the result's.
    c.after_run = [&req, &contract, ceil = *ceiling](const Outcome& o, int out_fd) {
      AfterRun after = contract->judge(o, out_fd);
      json& blobs = after.record["blobs"];
      if (!blobs.is_array()) blobs = json::array();
      for (auto& b : keep_call_blobs(req, ceil)) blobs.push_back(b);
      return after;
    };
    return c;
  };
  RunReport report = run_sandbox(run);
  run.pool.await_call = nullptr;  // it refers to this frame's locals
  if (report.discarded) {
    if (!out.called && report.outcome.error) out.build_error = report.outcome.error;
    return out;
  }
  if (!contract) {
    out.build_error = make_error("pool", "the pooled run ended before its call was handed over");
    return out;
  }
  finish_pack_run(req, report, *contract, out.result);
  return out;
}

}  // namespace sbx
