#pragma once
// What a profile, manifest, request or --gpu asks for, as text: parsed here, in the run model,
// so that reading a RunSpec needs nothing of the host's GPUs (gpu.hpp plans the grant).
#include <cstddef>
#include <string>
#include <vector>

#include "runtime/base/error.hpp"

namespace sbx {

// GPUs one request may name, and discovery reads at most (gpu.cpp).
inline constexpr std::size_t kMaxGpus = 64;

// The request as written: "" (none), "all", or a comma list of indices and UUIDs ("0,1",
// "GPU-4f3e...", "0,GPU-..."). At most 64 items; each a decimal index < 1024 or a UUID-like token.
struct GpuRequest {
  bool all = false;
  std::vector<std::string> items;  // indices and UUIDs, in the order asked, duplicates removed
  bool empty() const { return !all && items.empty(); }
};
Result<GpuRequest> parse_gpu_request(const std::string& text);

// gpu.max as written in a profile: a count >= 0, or "all" (-1).
inline constexpr int kGpuMaxAll = -1;

}  // namespace sbx
