#pragma once
// The facilities of a run (docs/ARCHITECTURE.md, "Adding a facility"): identity, GPUs, limits and
// the run cgroup, mounts and the memory fallback, the image, --input, seccomp, capabilities,
// network. Each one is a `Facility` with up to four parts:
//
//   prepare      parent side, before clone: plan, check, create what the run needs (a cgroup, a
//                compiled policy, an open image); fails with the error the run reports.
//   after_clone  parent side, between clone and "go": init is blocked on its raw read of the go
//                byte (section 3 of the architecture page), so ordinary code is allowed here.
//   record       its part of the trace's `enforcement` object, from what prepare left in the
//                context (a facility that never ran contributes what the record said before).
//   plan         its part of `--dry-run`'s `enforcement` object (dry_run.cpp).
//
// The child-side step of each facility is NOT a virtual call: init may run in the supervisor's
// address space (the shared init, clone.hpp) and from a point on makes raw system calls only, so
// its steps stay the plain functions of child.cpp's run_init/run_program, named in each
// facility's comment in facility.cpp. What a facility hands to the child goes through the
// ChildConfig that Run::prepare_child fills from this context.
//
// The same list serves the run (Run::prepare in sandbox.cpp: prepare in order, stop at the first
// failure) and the dry run (dry_run in dry_run.cpp: prepare with `dry_run` set, which creates
// nothing and writes nothing, then `plan`), so the two cannot drift apart. Facilities hold no
// state: everything lives in the RunContext.
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/egress/egress_policy.hpp"
#include "runtime/image/image_store.hpp"
#include "runtime/launch/run_request.hpp"
#include "runtime/launch/supervisor.hpp"
#include "runtime/launch/trace.hpp"
#include "runtime/linux/cgroup.hpp"
#include "runtime/linux/events.hpp"
#include "runtime/linux/gpu.hpp"
#include "runtime/linux/limits_plan.hpp"
#include "runtime/linux/memory_fallback.hpp"
#include "runtime/linux/mounts.hpp"
#include "runtime/linux/seccomp_policy.hpp"
#include "runtime/linux/userns.hpp"

namespace sbx {

// What the facilities read (the request, the host) and what their prepare steps fill, read in
// turn by the later facilities, by spawn, supervise and collect, and by the record.
struct RunContext {
  RunContext(const RunRequest& req, const std::string& cwd, const CgroupInfo& cg, const Result<IdentityPlan>& identity,
             bool dry_run);

  const RunRequest& req;
  // The spec the sandbox is built from: the request's. A pooled sandbox's call brings its own
  // spec at hand-out, which may only lower what is still open (pool_job.hpp); what was enforced
  // is what this one asked for.
  const RunSpec& spec;
  const std::string& cwd;
  const CgroupInfo& cg;
  const Result<IdentityPlan>& identity;
  const bool rootless;
  const bool dry_run;             // --dry-run: check and plan only; no cgroup, no file, no log line
  std::string run_id;             // names the run cgroup
  EventStream* events = nullptr;  // --events, when open
  TraceParts* parts = nullptr;    // the record's non-enforcement parts (image, usage); null in a dry run

  // gpu
  bool gpu_planned = false;
  GpuPlan gpu;
  // limits and the run cgroup
  LimitPlan plan;
  std::optional<std::vector<LimitEntry>> limits;  // set once the final plan is known
  std::optional<RunCgroup> cgroup;
  std::optional<Error> cgroup_error;          // RunCgroup::create failed: the plan fell back
  std::optional<CgroupEvents> cgroup_events;  // the run cgroup's limit events, while it exists
  bool in_cgroup = false;                     // set by spawn: clone placed init in the cgroup
  // The call is a template's fork (RunRequest::from_template): it lives in the template's user
  // namespace, whose id maps were written when the template was built.
  bool from_template = false;
  // --bind and --input sources, opened once by the identity facility: checked (preflight.hpp)
  // and planned (plan_mounts) from these, held open until the run is over (mounts.hpp, BindSource)
  std::vector<BindSource> bind_sources;
  // mounts and the memory fallback
  MountPlan mounts;
  // idmapped binds (make_idmapped_tree): the detached mounts init moves into place, held until
  // the sandbox is cloned with them
  std::vector<UniqueFd> idmap_trees;
  nlohmann::json memory_fallback;  // null unless limits fall back and memory is limited (memory_fallback.hpp)
  // image
  std::optional<ImageRecord> image;
  UniqueFd image_fd;          // the stored tree, checked against its seal, handed to init
  UniqueFd image_tree;        // as host root: that tree idmapped with the run's maps (make_idmapped_image)
  nlohmann::json image_plan;  // dry run: the image, its seal checked
  // --input, hashed
  nlohmann::json inputs = nlohmann::json::array();
  // seccomp
  std::optional<PreparedSeccomp> seccomp;
  // network
  std::optional<std::vector<AllowRule>> allow_rules;  // proxy mode

  bool memory_fallback_applies() const { return !memory_fallback.is_null(); }
};

class Facility {
 public:
  virtual ~Facility() = default;
  virtual const char* name() const = 0;
  virtual Status prepare(RunContext&) const { return {}; }
  virtual Status after_clone(RunContext&, pid_t /*init*/) const { return {}; }
  // `sup`: what the supervisor saw; null when the run ended before its sandbox ran.
  virtual void record(const RunContext&, const SuperviseResult* /*sup*/, nlohmann::json& /*enforcement*/) const {}
  virtual void plan(const RunContext&, nlohmann::json& /*enforcement*/) const {}
};

// Every facility, in the order a run prepares them (the order of the checks, hence which error
// a request with several faults gets first).
const std::vector<const Facility*>& facilities();

// Each facility's prepare in order, stopping at the first failure, which is returned as it is
// (the run's setup error, --dry-run's exit 125 line).
Status prepare_facilities(RunContext& ctx);
// Each facility's after_clone in order, for the init `pid` cloned but not yet started.
Status facilities_after_clone(RunContext& ctx, pid_t pid);
// The trace's `enforcement` object (limits_applied and limits_not_applied included) and
// --dry-run's, each assembled from the facilities' contributions.
nlohmann::json enforcement_record(const RunContext& ctx, const SuperviseResult* sup);
nlohmann::json enforcement_plan(const RunContext& ctx);

// The facilities one by one (facility_*.cpp), for the list above and for unit tests.
const Facility& namespaces_facility();
const Facility& identity_facility();
const Facility& gpu_facility();
const Facility& limits_facility();
const Facility& mounts_facility();
const Facility& image_facility();
const Facility& inputs_facility();
const Facility& seccomp_facility();
const Facility& capabilities_facility();
const Facility& network_facility();

// The record's limits_applied / limits_not_applied from the limit entries.
void add_limit_entries(const std::vector<LimitEntry>& entries, nlohmann::json& enforcement);

}  // namespace sbx
