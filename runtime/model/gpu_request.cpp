#include "runtime/model/gpu_request.hpp"

#include <algorithm>
#include <cstdlib>

#include "runtime/base/text_escape.hpp"

namespace sbx {
Result<GpuRequest> parse_gpu_request(const std::string& text) {
  GpuRequest r;
  if (text.empty() || text == "none") return r;
  if (text == "all") {
    r.all = true;
    return r;
  }
  if (text.size() > 4096) return make_error("usage", "--gpu: request longer than 4096 bytes");
  std::size_t i = 0;
  while (i <= text.size()) {
    std::size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    std::string item = text.substr(i, j - i);
    bool index = !item.empty() && item.size() <= 4 && item.find_first_not_of("0123456789") == std::string::npos &&
                 std::atoi(item.c_str()) < 1024;
    bool uuid =
        item.size() >= 8 && item.size() <= 96 && (item.rfind("GPU-", 0) == 0 || item.rfind("MIG-", 0) == 0) &&
        item.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-/") == std::string::npos;
    if (!index && !uuid)
      return make_error("usage", "--gpu: bad GPU '" + printable(item.substr(0, 64)) +
                                     "' (all, an index such as 0, or a UUID GPU-...)");
    if (item.rfind("MIG-", 0) == 0)
      return make_error("usage", "--gpu " + item + ": MIG instances are not supported (whole GPUs only)");
    if (std::find(r.items.begin(), r.items.end(), item) == r.items.end()) r.items.push_back(item);
    if (r.items.size() > kMaxGpus) return make_error("usage", "--gpu: more than 64 GPUs named");
    i = j + 1;
  }
  return r;
}

}  // namespace sbx
