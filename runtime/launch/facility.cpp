#include "runtime/launch/facility.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "runtime/launch/preflight.hpp"
#include "runtime/launch/workspace.hpp"
#include "runtime/model/caps.hpp"

namespace sbx {
using nlohmann::json;

RunContext::RunContext(const RunRequest& r, const std::string& dir, const CgroupInfo& info,
                       const Result<IdentityPlan>& id, bool dry)
    : req(r), spec(r.spec), cwd(dir), cg(info), identity(id), rootless(::geteuid() != 0), dry_run(dry) {}

namespace {

// The namespaces sandbox.cpp's spawn clones into (kNamespaces there), by their /proc/PID/ns
// names. Nothing to prepare: clone makes them; init's steps inside them are in child.cpp.
class Namespaces final : public Facility {
 public:
  const char* name() const override { return "namespaces"; }
  void record(const RunContext&, const SuperviseResult*, json& out) const override {
    put(out, "enforcement/namespaces", json::array({"user", "pid", "mount", "net", "ipc", "uts", "cgroup"}));
  }
};

// The user namespace's id maps (userns.hpp). Planned when the run is made (plan_identity); here
// its failure is reported, and every --bind/--input source is opened (open_bind_sources: what is
// checked is what init mounts), checked to spare sbx's state if read-write, as root to be reachable
// by the sandbox's host uid (unless idmapped), and if read-write to be writable by the program. After clone the parent writes the maps; the child's
// steps are become_namespace_root (init) and switch_to_program_identity (program), child.cpp.
class Identity final : public Facility {
 public:
  const char* name() const override { return "identity"; }
  Status prepare(RunContext& ctx) const override {
    if (!ctx.identity) return ctx.identity.error();
    // The sandbox's root is then the container's own: worth one line on every run, not only the record.
    if (ctx.identity->single_id_fallback)
      spdlog::warn(
          "this user namespace maps no id but sbx's own: the sandbox runs with a single-id map (its root "
          "is this namespace's root); give the container a range of ids (podman --uidmap 0:HOST_ID:65537, "
          "Kubernetes hostUsers: false) for a sandbox range of its own{}",
          ctx.identity->keep_groups ? "; its supplementary groups stay with the program, as this namespace "
                                      "denies setgroups (unshare -r: make it with --setgroups allow)"
                                    : "");
    // What later runs trust is read back from the state dir (or tenant store): nobody but sbx's
    // user may be able to write it, neither another user on the host nor this run's program.
    SBX_TRY(check_private_dir(ctx.req.dirs.state, "sbx's state dir"));
    auto opened = open_bind_sources(ctx.spec, ctx.cwd);
    if (!opened) return opened.error();
    ctx.bind_sources = std::move(*opened);
    SBX_TRY(check_binds_spare_state(ctx.bind_sources, ctx.req.dirs, ctx.req.tenant.guarded_dirs));
    if (!ctx.req.workspace.empty()) {
      UniqueFd here(::open(".", O_PATH | O_DIRECTORY | O_CLOEXEC));
      if (!here.ok()) return sys_error("usage", "--workspace " + ctx.req.workspace + ": cannot open it");
      SBX_TRY(check_workspace_source(ctx.bind_sources, ctx.req.workspace, here.get(), protected_homes()));
    }
    idmap_owned_binds(ctx.bind_sources, *ctx.identity, ctx.cwd,
                      ctx.req.tenant.id_slot != 0 || !ctx.req.tenant.guarded_dirs.empty());
    SBX_TRY(check_sources(ctx.bind_sources, ctx.spec, ctx.cwd, &*ctx.identity));
    return check_binds_writable(ctx.bind_sources, *ctx.identity, ctx.req.workspace);
  }
  Status after_clone(RunContext& ctx, pid_t pid) const override {
    if (ctx.from_template) return {};
    return write_id_maps(pid, *ctx.identity);
  }
  void record(const RunContext& ctx, const SuperviseResult*, json& out) const override {
    if (ctx.identity) put(out, "enforcement/identity", identity_to_json(*ctx.identity));
    else
      put(out, "enforcement/identity",
          trace_object({{"enforcement/identity/mode", ::geteuid() == 0 ? "root" : "rootless"},
                        {"enforcement/identity/error", ctx.identity.error().message}}));
  }
  void plan(const RunContext& ctx, json& out) const override { out["identity"] = identity_to_json(*ctx.identity); }
};

// GPUs (gpu.hpp): planned first, so that a request past the profile's ceiling, or for a GPU the
// host lacks, refuses before anything is created. Their nodes and driver files join the mount
// plan (mounts facility); their environment is added in Run::prepare_child.
class Gpu final : public Facility {
 public:
  const char* name() const override { return "gpu"; }
  Status prepare(RunContext& ctx) const override {
    if (!ctx.spec.gpu.devices.empty()) {
      auto planned = plan_gpu_for_run(ctx.spec, *ctx.identity, ctx.req.limit_layers);
      if (!planned) return planned.error();
      ctx.gpu = std::move(*planned);
    }
    ctx.gpu_planned = true;
    if (ctx.parts && ctx.gpu.enabled) put(ctx.parts->usage_extra, "usage/gpu", gpu_usage_json(ctx.gpu));
    return {};
  }
  void record(const RunContext& ctx, const SuperviseResult*, json& out) const override {
    if (ctx.gpu_planned) put(out, "enforcement/gpu", gpu_enforcement_json(ctx.gpu));
  }
  void plan(const RunContext& ctx, json& out) const override { out["gpu"] = gpu_enforcement_json(ctx.gpu); }
};

// Capabilities (caps.hpp): nothing to prepare; the program child drops to the kept set
// (lock_securebits, restrict_capabilities, PR_SET_NO_NEW_PRIVS in child.cpp's run_program), and
// init reads the sets the program holds after its execve (`program`, from kStarted).
class Capabilities final : public Facility {
 public:
  const char* name() const override { return "capabilities"; }
  void record(const RunContext& ctx, const SuperviseResult* sup, json& out) const override {
    const auto& keep = ctx.spec.capabilities.keep;
    json caps = trace_object({{"enforcement/capabilities/kept", keep},
                              {"enforcement/capabilities/bounding", keep},
                              {"enforcement/capabilities/securebits", "locked"},
                              {"enforcement/capabilities/no_new_privs", true}});
    if (sup)
      put(caps, "enforcement/capabilities/program",
          sup->program_caps ? process_caps_json(*sup->program_caps) : json(nullptr));
    put(out, "enforcement/capabilities", std::move(caps));
  }
};

}  // namespace

const Facility& namespaces_facility() {
  static const Namespaces f;
  return f;
}
const Facility& identity_facility() {
  static const Identity f;
  return f;
}
const Facility& gpu_facility() {
  static const Gpu f;
  return f;
}
const Facility& capabilities_facility() {
  static const Capabilities f;
  return f;
}

const std::vector<const Facility*>& facilities() {
  static const std::vector<const Facility*> list = {
      &namespaces_facility(), &identity_facility(), &gpu_facility(),     &limits_facility(),       &mounts_facility(),
      &image_facility(),      &inputs_facility(),   &seccomp_facility(), &capabilities_facility(), &network_facility()};
  return list;
}

Status prepare_facilities(RunContext& ctx) {
  for (const Facility* f : facilities()) SBX_TRY(f->prepare(ctx));
  return {};
}

Status facilities_after_clone(RunContext& ctx, pid_t pid) {
  for (const Facility* f : facilities()) SBX_TRY(f->after_clone(ctx, pid));
  return {};
}

json enforcement_record(const RunContext& ctx, const SuperviseResult* sup) {
  json out = json::object();
  for (const Facility* f : facilities()) f->record(ctx, sup, out);
  return out;
}

json enforcement_plan(const RunContext& ctx) {
  json out = json::object();
  for (const Facility* f : facilities()) f->plan(ctx, out);
  return out;
}

}  // namespace sbx
