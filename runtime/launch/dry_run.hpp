#pragma once
// `--dry-run` (man sbx, DRY RUN): every check a run makes before it creates anything
// (preflight.hpp) and the prepare step of each of the run's facilities (facility.hpp), in the
// run's order, printing what would be enforced, by which mechanism, instead of running. A dry
// run that exits 0 is a run that would get past its setup checks on this host; one that exits
// 125 says the same line the run would.
#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/launch/run_request.hpp"

namespace sbx {

// The dry run: the preflight checks and those of run_sandbox's prepare step (identity, limits,
// mounts, image and its seal, seccomp policy, allow rules), without creating a cgroup, a process
// or a file. The JSON: the merged spec's members, plus "dry_run": {"enforcement": ...} (the
// layout is documented in man/sbx.1, DRY RUN).
Result<nlohmann::json> dry_run(const RunRequest& req);

}  // namespace sbx
