// The limits facility: the limit plan (limits_plan.hpp: one mechanism per limit), --require-limits,
// and the run cgroup (cgroup.hpp) when the plan uses one. After clone, init is placed in the
// cgroup unless clone3 did it (CLONE_INTO_CGROUP). The rlimit fallback's child step is
// set_rlimits in child.cpp's run_program (from ChildConfig::rlimits, filled in
// Run::prepare_child); the supervisor enforces wall time, CPU budget and output (supervisor.hpp).
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include "runtime/launch/facility.hpp"
#include "runtime/launch/preflight.hpp"
#include "runtime/model/limits_table.hpp"

namespace sbx {
using nlohmann::json;

namespace {
// The program's shares of the host user's kernel quotas (fixed_rlimits, limits_plan.hpp).
json kernel_quotas_json(const std::vector<std::pair<int, std::uint64_t>>& fixed) {
  json q = json::object();
  for (auto& [res, value] : fixed) {
    if (res == RLIMIT_SIGPENDING) put(q, "enforcement/kernel_quotas/sigpending", value);
    if (res == RLIMIT_MSGQUEUE) put(q, "enforcement/kernel_quotas/msgqueue", value);
    if (res == RLIMIT_MEMLOCK) put(q, "enforcement/kernel_quotas/memlock", value);
  }
  return q;
}
}  // namespace

void add_limit_entries(const std::vector<LimitEntry>& entries, json& enforcement) {
  json applied = json::object();
  json not_applied = json::array();
  for (auto& l : entries) {
    if (l.mechanism.empty())
      not_applied.push_back(trace_object({{"enforcement/limits_not_applied/[]/limit", l.limit},
                                          {"enforcement/limits_not_applied/[]/value", l.value},
                                          {"enforcement/limits_not_applied/[]/reason", l.reason}}));
    else
      put(applied, "enforcement/limits_applied/*", l.limit,
          trace_object({{"enforcement/limits_applied/*/value", l.value},
                        {"enforcement/limits_applied/*/mechanism", l.mechanism},
                        {"enforcement/limits_applied/*/degraded", l.degraded},
                        {"enforcement/limits_applied/*/note", l.reason}}));
  }
  put(enforcement, "enforcement/limits_applied", std::move(applied));
  put(enforcement, "enforcement/limits_not_applied", std::move(not_applied));
}

namespace {

// A limit's value as a number (bytes, milliseconds, a count), not the plan's string.
json limit_value(const Limits& l, const std::string& limit) {
  const LimitKind* k = limit_kind_by_plan_name(limit);
  return k ? limit_json(l, *k) : json(nullptr);
}

// Which limits are enforced and how: wall time, output and /tmp size are sbx's own; memory,
// processes and CPU come from the limit plan (cgroup v2, or an honest rlimit fallback).
std::vector<LimitEntry> limit_entries(const Limits& l, const LimitPlan& plan) {
  std::vector<LimitEntry> v;
  for (auto& d : plan.decisions) {
    json value = limit_value(l, d.limit);
    if (value.is_null()) value = d.value;
    v.push_back({d.limit, value, d.applied ? d.mechanism : "", d.reason, d.degraded});
  }
  v.push_back({"tmp_size", l.tmp_size_bytes, "tmpfs size option (/tmp)", "", false});
  return v;
}

// --dry-run's view of the same plan: which layer set each limit, and whether it is enforced.
json limits_plan_json(const Limits& l, const LimitPlan& plan, const std::map<std::string, std::string>& layers) {
  json out = json::array();
  for (auto& d : plan.decisions) {
    auto layer = layers.find(d.limit);
    out.push_back({{"limit", d.limit},
                   {"value", limit_value(l, d.limit)},
                   {"set_by", layer == layers.end() ? json(nullptr) : json(layer->second)},
                   {"enforced", d.applied},
                   {"degraded", d.degraded},
                   {"mechanism", d.applied ? json(d.mechanism) : json(nullptr)},
                   {"reason", d.reason}});
  }
  out.push_back({{"limit", "tmp_size"},
                 {"value", l.tmp_size_bytes},
                 {"set_by", nullptr},
                 {"enforced", true},
                 {"degraded", false},
                 {"mechanism", "tmpfs size option (/tmp)"},
                 {"reason", ""}});
  return out;
}

// The run cgroup. Its failure is not the run's: the plan falls back to rlimits, the whole story
// (paths, the pids in the way, errno) goes to the trace (cgroup_error), and the mounts facility's
// one line about limits names only the cause.
void create_run_cgroup(RunContext& ctx) {
  // A killed sbx cannot remove its run cgroup; the next run does.
  if (auto st = gc_stale_cgroups(ctx.cg); !st) spdlog::debug("cgroup gc: {}", st.error().describe());
  auto created = RunCgroup::create(ctx.cg, ctx.plan.cgroup_limits, ctx.run_id);
  if (!created) {
    ctx.cgroup_error = created.error();
    spdlog::debug("cgroup v2 unusable, falling back to rlimits: {}", created.error().describe());
    ctx.plan = plan_limits(ctx.spec.limits, ctx.cg, ctx.rootless, false, ctx.gpu.enabled);
    return;
  }
  RunCgroup& cg = ctx.cgroup.emplace(std::move(*created));
  // Weaker than asked but not worth a warning line of its own (one per run at most): the trace
  // keeps them (cgroup_notes), -v shows them.
  for (auto& w : cg.warnings()) spdlog::info("cgroup: {}", w);
  // Before anything runs in it: the counters' baseline is the empty cgroup's.
  if (ctx.events) ctx.cgroup_events.emplace(cg.dir_fd(), ctx.plan.cgroup_limits.cpus.has_value(), ctx.events);
}

class LimitsFacility final : public Facility {
 public:
  const char* name() const override { return "limits"; }
  Status prepare(RunContext& ctx) const override {
    ctx.plan = plan_limits(ctx.spec.limits, ctx.cg, ctx.rootless, true, ctx.gpu.enabled);
    if (auto e = shortfall(ctx)) return *e;
    if (ctx.plan.use_cgroup && !ctx.dry_run) create_run_cgroup(ctx);
    ctx.limits = limit_entries(ctx.spec.limits, ctx.plan);
    if (auto e = shortfall(ctx)) return *e;  // again: a cgroup that could not be created weakened the plan
    return {};
  }
  Status after_clone(RunContext& ctx, pid_t pid) const override {
    // Before "go": nothing ran yet.
    if (ctx.cgroup && !ctx.in_cgroup) return ctx.cgroup->add_pid(pid);
    return {};
  }
  void record(const RunContext& ctx, const SuperviseResult*, json& out) const override {
    if (!ctx.limits) put(out, "enforcement/cgroup", "unavailable");
    else
      put(out, "enforcement/cgroup", ctx.cgroup ? "v2 " + ctx.cgroup->path() : "unavailable (" + ctx.cg.layout + ")");
    if (ctx.cgroup && !ctx.cgroup->warnings().empty()) put(out, "enforcement/cgroup_notes", ctx.cgroup->warnings());
    if (ctx.cgroup_error) put(out, "enforcement/cgroup_error", ctx.cgroup_error->describe());
    add_limit_entries(ctx.limits ? *ctx.limits : std::vector<LimitEntry>{}, out);
    if (ctx.limits) put(out, "enforcement/kernel_quotas", kernel_quotas_json(ctx.plan.fixed));  // once planned
  }
  void plan(const RunContext& ctx, json& out) const override {
    const CgroupInfo& cg = ctx.cg;
    out["limits"] = limits_plan_json(ctx.spec.limits, ctx.plan, ctx.req.limit_layers);
    out["kernel_quotas"] = kernel_quotas_json(ctx.plan.fixed);
    out["cgroup"] = ctx.plan.use_cgroup
                        ? "v2: a run cgroup under " + (cg.root_subtree ? cg.mount + "/sbx" : cg.mount + cg.self_path)
                        : "unavailable (" + cg.layout + "): limits fall back to rlimits where one exists";
  }

 private:
  static std::optional<Error> shortfall(const RunContext& ctx) {
    if (!ctx.spec.require_limits) return std::nullopt;
    return require_limits_shortfall(ctx.plan, ctx.cg, ctx.req.limit_layers);
  }
};

}  // namespace

const Facility& limits_facility() {
  static const LimitsFacility f;
  return f;
}

}  // namespace sbx
