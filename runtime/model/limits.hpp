#pragma once
// A run's limits, the one part of RunSpec (spec.hpp) that limits_table.hpp describes entry by
// entry. It has a header of its own so that the table does not include the whole spec, nor the
// spec the table: spec.cpp reads limits through the table.
#include <cstdint>
#include <optional>

namespace sbx {

// Every member is one entry of limits_table.hpp (its names, flag, bound, enforcement, ceiling rule).
struct Limits {
  std::optional<std::int64_t> timeout_ms;          // wall time, enforced by the supervisor
  std::optional<std::int64_t> output_limit_bytes;  // per stream passed through; rest dropped
  std::optional<std::int64_t> memory_bytes;        // cgroup memory.max, or the rlimit fallback (limits_plan.hpp)
  std::optional<std::int64_t> pids;                // cgroup pids.max
  std::optional<double> cpus;                      // cgroup cpu.max quota/period
  std::optional<std::int64_t> cpu_time_ms;         // CPU-seconds budget
  std::int64_t tmp_size_bytes = 64LL << 20;        // size cap of the sandbox's /tmp
  std::int64_t out_size_bytes = 64LL << 20;        // size cap of the sandbox's /out (a tmpfs)
  // Artifact export (--output DIR): at most this many bytes / entries leave /out; the rest is
  // skipped, listed in the trace, and the run's status becomes output_limit.
  std::int64_t output_max_bytes = 256LL << 20;
  std::int64_t output_max_files = 10000;
  bool operator==(const Limits&) const = default;
};

}  // namespace sbx
