#include "runtime/launch/dry_run.hpp"

#include <string>

#include "runtime/base/paths.hpp"
#include "runtime/launch/facility.hpp"
#include "runtime/launch/preflight.hpp"
#include "runtime/linux/cgroup.hpp"
#include "runtime/linux/userns.hpp"

namespace sbx {

Result<nlohmann::json> dry_run(const RunRequest& req) {
  SBX_TRY(check_trace_file(req.trace_file));
  std::string cwd = current_dir();
  CgroupInfo cg = detect_cgroup();
  Result<IdentityPlan> identity = plan_identity(req.spec, req.tenant.id_slot);
  // The run's facilities, in the run's order (the same first error), creating nothing; then each
  // one's part of the plan.
  RunContext ctx(req, cwd, cg, identity, true);
  SBX_TRY(prepare_facilities(ctx));
  nlohmann::json out = spec_to_json(req.spec);
  out["enforcement"] = enforcement_plan(ctx);
  return out;
}

}  // namespace sbx
