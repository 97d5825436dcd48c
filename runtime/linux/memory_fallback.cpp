#include "runtime/linux/memory_fallback.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "runtime/linux/limits_plan.hpp"
#include "runtime/linux/mounts.hpp"
#include "runtime/base/trace_field.hpp"
#include "runtime/base/units.hpp"
#include "runtime/linux/userns.hpp"

namespace sbx {

std::vector<TmpfsShare> tmpfs_shares(const RunSpec& spec, const std::vector<std::string>& explicit_limits) {
  auto asked = [&](const char* k) {
    return std::find(explicit_limits.begin(), explicit_limits.end(), k) != explicit_limits.end();
  };
  std::vector<TmpfsShare> v;
  // /dev/shm is mounted with /tmp's size (mounts.cpp build_dev): two mounts, each that big.
  v.push_back({"tmp_size", "/tmp", spec.limits.tmp_size_bytes, asked("tmp_size")});
  v.push_back({"tmp_size", "/dev/shm", spec.limits.tmp_size_bytes, asked("tmp_size")});
  v.push_back({"out_size", "/out", spec.limits.out_size_bytes, asked("out_size")});
  // --tmpfs mounts are named per run, never by a profile default: always the caller's.
  for (auto& t : spec.tmpfs) v.push_back({"tmpfs", t.dst, t.size_bytes, true});
  if (spec.image != "host") v.push_back({"upper", "/ (overlay upper layer)", kUpperSizeBytes, false});
  return v;
}

std::string describe_shares(const std::vector<TmpfsShare>& shares) {
  std::string out;
  for (auto& s : shares) out += (out.empty() ? "" : ", ") + s.path + " " + format_size(s.bytes) + " (" + s.key + ")";
  return out;
}

Result<TmpfsBudget> fit_tmpfs(std::vector<TmpfsShare> shares, std::int64_t memory_bytes) {
  TmpfsBudget b;
  std::int64_t fixed = 0, scalable = 0;
  for (auto& s : shares) (s.caller_set ? fixed : scalable) += s.bytes;
  b.asked_total = fixed + scalable;
  if (b.asked_total > memory_bytes) {
    // One factor for every size the caller did not set, rounded down to whole pages, never below
    // kMinScaledTmpfs: what is left of the limit after the caller's own sizes, shared pro rata.
    std::int64_t room = memory_bytes - fixed;
    std::size_t n = 0;
    for (auto& s : shares) n += s.caller_set ? 0 : 1;
    if (room < static_cast<std::int64_t>(n) * kMinScaledTmpfs)
      return make_error("limits",
                        "the tmpfs mounts need " + format_size(b.asked_total) + " of RAM (" + describe_shares(shares) +
                            "), more than the memory limit " + format_size(memory_bytes) +
                            " that must also bound them without cgroup v2: lower those sizes or raise --memory");
    for (auto& s : shares) {
      if (s.caller_set) continue;
      auto scaled = static_cast<std::int64_t>(static_cast<long double>(s.bytes) * room / scalable);
      s.bytes = std::max(kMinScaledTmpfs, scaled / 4096 * 4096);
    }
    b.scaled = true;
  }
  b.shares = std::move(shares);
  for (auto& s : b.shares) b.total += s.bytes;
  if (b.total > memory_bytes)  // only the kMinScaledTmpfs floor can get here
    return make_error("limits", "the tmpfs mounts need " + format_size(b.total) + " of RAM (" +
                                    describe_shares(b.shares) + "), more than the memory limit " +
                                    format_size(memory_bytes));
  return b;
}

void apply_tmpfs_budget(const TmpfsBudget& budget, MountPlan& plan) {
  std::size_t extra = 0;
  for (auto& s : budget.shares) {
    if (s.path == "/tmp") plan.tmp_size_bytes = s.bytes;
    else if (s.key == "out_size") plan.out_size_bytes = s.bytes;
    else if (s.key == "upper") plan.upper_size_bytes = s.bytes;
    else if (s.key == "tmpfs" && extra < plan.tmpfs.size()) plan.tmpfs[extra++].size_bytes = s.bytes;
  }
}

nlohmann::json memory_fallback_json(const TmpfsBudget& budget, std::int64_t memory_bytes, bool sysv_capped) {
  using nlohmann::json;
  json tmpfs = json::array();
  for (auto& s : budget.shares)
    tmpfs.push_back(trace_object({{"enforcement/memory_fallback/mechanisms/[]/mounts/[]/path", s.path},
                                  {"enforcement/memory_fallback/mechanisms/[]/mounts/[]/key", s.key},
                                  {"enforcement/memory_fallback/mechanisms/[]/mounts/[]/size_bytes", s.bytes}}));
  json unbounded =
      json::array({"the sum of RLIMIT_DATA over processes", "stacks (RLIMIT_STACK per process)",
                   "MAP_SHARED|MAP_ANONYMOUS mappings",
                   "tmpfs inodes: one per KiB of each mount's size at most (mount_plan.hpp, "
                   "kTmpfsBytesPerInode), about 1 KiB of kernel memory each, outside the sizes above",
                   "memfds: no RLIMIT_FSIZE is set (limits_plan.cpp fallback_memory): it would stop "
                   "files larger than the limit on rw binds on disk, and cap each memfd, never their sum"});
  // One mechanism: what it is, its value, what it bounds and what it does not.
  auto mechanism = [](const char* name, const json& value, const char* bounds, const char* not_bounded) {
    return trace_object({{"enforcement/memory_fallback/mechanisms/[]/mechanism", name},
                         {"enforcement/memory_fallback/mechanisms/[]/value", value},
                         {"enforcement/memory_fallback/mechanisms/[]/bounds", bounds},
                         {"enforcement/memory_fallback/mechanisms/[]/not", not_bounded}});
  };
  json sysv = mechanism("ipc namespace kernel.shmall, shmmax, msgmni, msgmnb, sem", memory_bytes,
                        "all SysV shared memory segments of the run together; the kernel memory of its SysV "
                        "message queues, and of its semaphores, each at most the limit (memory_fallback.hpp)",
                        "");
  if (!sysv_capped) {
    put(sysv, "enforcement/memory_fallback/mechanisms/[]/value", 0);
    put(sysv, "enforcement/memory_fallback/mechanisms/[]/bounds", "");
    put(sysv, "enforcement/memory_fallback/mechanisms/[]/not",
        "SysV IPC: the run's user namespace maps no uid 0 (rootless --uid), and only its uid 0 may set "
        "the ipc namespace's sysctls");
    unbounded.push_back("SysV shared memory, message queues and semaphores (no uid 0 in the user namespace)");
  }
  json tmpfs_sizes =
      mechanism("tmpfs size options", budget.total, "every RAM-backed mount together, at most the memory limit", "");
  put(tmpfs_sizes, "enforcement/memory_fallback/mechanisms/[]/asked_bytes", budget.asked_total);
  put(tmpfs_sizes, "enforcement/memory_fallback/mechanisms/[]/scaled", budget.scaled);
  put(tmpfs_sizes, "enforcement/memory_fallback/mechanisms/[]/mounts", std::move(tmpfs));
  json mechanisms = json::array(
      {mechanism("rlimit RLIMIT_DATA", memory_bytes,
                 "private writable memory of each process: heap, anonymous and writable private file mappings",
                 "address-space reservations (PROT_NONE), shared mappings, stacks; the sum over processes"),
       std::move(tmpfs_sizes), std::move(sysv)});
  return trace_object({{"enforcement/memory_fallback/bounded_in_total", false},
                       {"enforcement/memory_fallback/mechanisms", std::move(mechanisms)},
                       {"enforcement/memory_fallback/unbounded", std::move(unbounded)}});
}

Result<nlohmann::json> apply_memory_fallback(const RunSpec& spec, const LimitPlan& plan,
                                             const std::vector<std::string>& explicit_limits,
                                             const IdentityPlan& identity, MountPlan& mounts, TmpfsBudget* scaled) {
  const LimitDecision* mem = plan.find("memory");
  if (!mem || !mem->applied || plan.cgroup_limits.memory_bytes || !spec.limits.memory_bytes) return nlohmann::json();
  auto fit = fit_tmpfs(tmpfs_shares(spec, explicit_limits), *spec.limits.memory_bytes);
  if (!fit) return fit.error();
  apply_tmpfs_budget(*fit, mounts);
  if (fit->scaled && scaled) *scaled = *fit;
  return memory_fallback_json(*fit, *spec.limits.memory_bytes, sysv_ipc_capped(identity));
}

std::vector<SysvKnob> sysv_ipc_caps(std::int64_t memory_bytes, long page_size) {
  std::int64_t m = std::max<std::int64_t>(memory_bytes, 1);
  std::int64_t pages = std::max<std::int64_t>(1, m / (page_size > 0 ? page_size : 4096));
  // A queue holds at most msgmnb bytes and msgmnb messages (ipc/msg.c msg_fits_inqueue).
  std::int64_t queue_worst = kSysvQueueBytes * (1 + kSysvMessageBytes);
  std::int64_t queues = std::clamp<std::int64_t>(m / queue_worst, 1, kSysvMaxIds);
  // Semaphores: half of the budget to their count, half to the sets that hold them.
  // Never above the kernel's own default count (an int there: a larger one is refused).
  std::int64_t sems = std::clamp<std::int64_t>(m / 2 / kSysvSemaphoreBytes, 1, kSysvMaxSemaphores);
  std::int64_t sets = std::clamp<std::int64_t>(m / 2 / kSysvSemaphoreSetBytes, 1, kSysvMaxIds);
  std::int64_t per_set = std::min<std::int64_t>(sems, kSysvMaxIds);
  return {{"shmmax", std::to_string(m)},
          {"shmall", std::to_string(pages)},
          {"msgmnb", std::to_string(kSysvQueueBytes)},
          {"msgmni", std::to_string(queues)},
          // SEMMSL SEMMNS SEMOPM SEMMNI; 500 operations per semop, the kernel's default.
          {"sem", std::to_string(per_set) + " " + std::to_string(sems) + " 500 " + std::to_string(sets)}};
}

bool sysv_ipc_capped(const IdentityPlan& identity) {
  // The ipc namespace's shm sysctls are writable only by its user namespace's uid 0 (mode bits,
  // no capability override: ipc/ipc_sysctl.c ipc_permissions); rootless with --uid N maps no
  // uid 0, so there SysV shm stays unbounded, and the trace says so.
  return std::any_of(identity.uid_map.begin(), identity.uid_map.end(),
                     [](const IdMapping& m) { return m.inside == 0; });
}

}  // namespace sbx
