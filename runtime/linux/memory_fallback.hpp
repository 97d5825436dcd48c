#pragma once
// The RAM a run's tmpfs mounts can hold, against its memory limit. A tmpfs page is shmem: with
// cgroup v2 it is charged to the run cgroup like any other page, but in the rlimit fallback no
// rlimit counts it, so there the sizes themselves are the bound: /tmp, /dev/shm (sized like /tmp),
// /out, every --tmpfs and an image run's overlay upper layer must fit in the memory limit
// together. Sizes that come from the profile are scaled down to fit (the trace says so); sizes
// the caller asked for by flag or request are never changed behind their back: the run refuses,
// naming the keys.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/base/error.hpp"
#include "runtime/model/spec.hpp"

namespace sbx {

struct MountPlan;
struct LimitPlan;
struct IdentityPlan;

struct TmpfsShare {
  std::string key;   // the RunSpec key that sets it: "tmp_size" (/tmp and /dev/shm), "out_size", "tmpfs", "upper"
  std::string path;  // where it is mounted in the sandbox
  std::int64_t bytes = 0;
  bool caller_set = false;  // asked for explicitly (flag or request), so never scaled
};

struct TmpfsBudget {
  std::vector<TmpfsShare> shares;  // after scaling
  std::int64_t asked_total = 0;    // before scaling
  std::int64_t total = 0;          // after scaling: <= the memory limit
  bool scaled = false;
};

// The image upper layer's size (mounts.hpp MountPlan::upper_size_bytes).
inline constexpr std::int64_t kUpperSizeBytes = 16LL << 20;
// A scaled tmpfs never goes below this (a tmpfs of a few pages is useless); if even that does not
// fit, the run refuses.
inline constexpr std::int64_t kMinScaledTmpfs = 1LL << 20;

// Every RAM-backed mount of a run with its size. explicit_limits: the limit keys the caller set
// ("tmp_size", "out_size", "tmpfs"); those are never scaled.
std::vector<TmpfsShare> tmpfs_shares(const RunSpec& spec, const std::vector<std::string>& explicit_limits);

// Fits the shares into memory_bytes: unchanged when they fit; else the caller-unset ones are
// scaled down by one factor; an error naming the keys when that cannot make them fit.
Result<TmpfsBudget> fit_tmpfs(std::vector<TmpfsShare> shares, std::int64_t memory_bytes);

// Writes the budget's sizes into the mount plan (the sizes tmpfs_at mounts with).
void apply_tmpfs_budget(const TmpfsBudget& budget, MountPlan& plan);

// "/tmp 64M (tmp_size), /dev/shm 64M (tmp_size), ..." for messages.
std::string describe_shares(const std::vector<TmpfsShare>& shares);

// The trace's enforcement.memory_fallback: per mechanism what it bounds and what it does not.
// sysv_capped: init sets the ipc namespace's shmall/shmmax (its user namespace maps uid 0).
nlohmann::json memory_fallback_json(const TmpfsBudget& budget, std::int64_t memory_bytes, bool sysv_capped);

// The whole step, shared by run_sandbox and --dry-run (so a dry run refuses what the run would):
// when the final limit plan bounds memory by rlimits only, fits the tmpfs mounts under the limit,
// writes their sizes into `mounts` and returns the trace's enforcement.memory_fallback; null when
// a cgroup charges the memory (or there is no memory limit); an error when they cannot fit.
// `scaled` (optional) is told the budget when sizes were scaled down, for the run's log line.
Result<nlohmann::json> apply_memory_fallback(const RunSpec& spec, const LimitPlan& plan,
                                             const std::vector<std::string>& explicit_limits,
                                             const IdentityPlan& identity, MountPlan& mounts,
                                             TmpfsBudget* scaled = nullptr);

// Whether init can cap SysV IPC (shmall/shmmax, msgmni, sem) in the run's ipc namespace: only when
// the user namespace maps a uid 0.
bool sysv_ipc_capped(const IdentityPlan& identity);

// SysV IPC is kernel memory that no rlimit counts, held until IPC_RMID or the ipc namespace's
// end: shared memory segments; message queues (with the defaults msgmni 32000 and msgmnb 16384,
// zero-byte messages of ~64 bytes of slab each took 180 MB of a 32M run, and could take ~32 GiB);
// semaphores (~64 bytes each: 60 sets of 32000 took 123 MB). Where no memory cgroup charges them,
// init writes these sysctls of the run's own ipc namespace (child.cpp, bound_sysv_ipc) so that each
// of the three holds at most `memory_bytes`: shared memory by shmall/shmmax; queues by msgmni
// whole queues of at most kSysvQueueBytes of messages, each message costing at most
// kSysvMessageBytes of kernel memory beyond its data; semaphores by sem's SEMMNS and SEMMNI.
inline constexpr std::int64_t kSysvQueueBytes = 16384;  // msgmnb, the kernel's default, pinned
inline constexpr std::int64_t kSysvMessageBytes = 128;  // a message's header and slab rounding, at most
inline constexpr std::int64_t kSysvSemaphoreBytes = 256;
inline constexpr std::int64_t kSysvSemaphoreSetBytes = 2048;
inline constexpr std::int64_t kSysvMaxIds = 32000;              // the kernel's own default and ceiling of ids
inline constexpr std::int64_t kSysvMaxSemaphores = 1024000000;  // SEMMNS's default: an int
struct SysvKnob {
  const char* path;   // under /proc/sys/kernel/
  std::string value;  // as written
};
std::vector<SysvKnob> sysv_ipc_caps(std::int64_t memory_bytes, long page_size);

}  // namespace sbx
