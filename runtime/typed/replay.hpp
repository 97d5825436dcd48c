#pragma once
// `sbx replay RUN`: rebuilds a recorded run from its record and the blob store (blob_store.hpp),
// runs it again and compares what came out.
//
// What is the same: the image (by digest; gone or failing its seal: cannot replay), the merged
// RunSpec as recorded (limits, policy, argv, environment, network), the profile's text, and what
// the run consumed, rebuilt from blobs: a pack's tree (its digest checked against the recorded
// one), its input records, `--input` files and trees, an exec request. Host paths a run bound with
// --bind are used as they are now (they are not kept). Secrets and contexts are never kept, so a
// run that used them cannot be replayed.
//
// What is compared: the status and exit code, every output's sha256 (by path), the inputs'
// hashes, and for a JSON result kept as a blob, the JSON pointers whose values differ.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/image/blob_store.hpp"
#include "runtime/base/paths.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/model/spec.hpp"

namespace sbx {

// `sbx run --keep-inputs`: every --input (a file, or a directory's tree: never following a
// symlink) and the profile's text, as a record's "blobs" list. Kept before the run.
// Relative --input paths are taken from the current directory, as the run takes them.
// `progress` (may be empty) is BlobKeeper::on_kept.
Result<nlohmann::json> keep_run_inputs(const Dirs& dirs, const RunSpec& spec, const ProfileSource& profile,
                                       std::shared_ptr<BlobPin> pin,
                                       std::function<void(std::int64_t, std::int64_t)> progress = {});

// Rebuilds into `dest` the tree that the record's "blobs" list holds under the roles file_role,
// dir_role and link_role with paths under `prefix` ("" for every path): what a replay does for a
// pack's tree and for an --input directory. Every entry is data (the record may have been
// edited): nothing is made outside `dest`, no link is followed, no set-id bit is set.
Status rebuild_recorded_tree(const Dirs& dirs, const nlohmann::json& record, const std::string& file_role,
                             const std::string& dir_role, const std::string& link_role, const std::string& prefix,
                             const std::string& dest);

struct Tenant;

struct ReplayRequest {
  Dirs dirs;        // where the record is: sbx's store, or the tenant's (tenant_store)
  std::string run;  // run id, unique prefix, "last" or "-N" (trace_store.hpp: load_trace)
  std::vector<std::string> invocation_argv;
  // --tenant: the record must name this tenant, and the replay runs under it again (apply_tenant:
  // its ceilings, images, packs, id slice and store), starting from `base_dirs` (sbx's untenanted
  // dirs, which apply_tenant moves to the tenant's store). Without it, a record that names a
  // tenant is refused: replayed untenanted it would run without the tenant's ceilings and ids.
  const Tenant* tenant = nullptr;
  Dirs base_dirs;
};

struct ReplayDifference {
  std::string what;                 // "status", "exit_code", "output", "input", "result"
  std::string where;                // the output's path, or the JSON pointer into the result
  nlohmann::json original, replay;  // null where one side has none
};

struct ReplayReport {
  std::string original_run, original_hash, replay_run;
  std::uint64_t original_seq = 0;
  std::vector<ReplayDifference> differences;  // at most kMaxReplayDifferences
  std::size_t differences_omitted = 0;
  int replay_exit = 0;  // the replayed run's own exit status
  // The run named was itself a replay (`sbx replay last` right after a replay): its id; the run
  // replayed is then the original it re-ran (original_run), and the CLI says so.
  std::string followed_replay;
  bool identical() const { return differences.empty() && differences_omitted == 0; }
};

inline constexpr std::size_t kMaxReplayDifferences = 50;

// The run a record re-ran, from its replay_of (replay.cpp writes it); "" for a record that is
// not a replay's. A replay's record keeps no inputs of its own: replaying it means replaying that run.
std::string replayed_original(const nlohmann::json& record);

// An error means the run cannot be replayed (exit 125); its message says what is missing.
Result<ReplayReport> replay_run(const ReplayRequest& req);

// The JSON pointers where `a` and `b` differ (objects by key, arrays by index), at most `max`;
// `omitted` counts the rest. Exposed for unit tests.
std::vector<ReplayDifference> json_differences(const nlohmann::json& a, const nlohmann::json& b, std::size_t max,
                                               std::size_t* omitted);

// One difference as one terminal-safe line, each value cut at `max_value` characters.
std::string describe_difference(const ReplayDifference& d, std::size_t max_value = 200);

}  // namespace sbx
