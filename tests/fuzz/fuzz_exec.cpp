// The `sbx exec` request (runtime/typed/exec.cpp): the request text parsed the way cli/exec_cmd.cpp does,
// then checked by parse_exec_request, and its limits layered over the built-in `untrusted` profile
// the way run_exec does. Nothing is run. Checked besides "no crash": the files a request names
// stay below /code (relative, no empty, "." or ".." component; "a..b" is a plain name).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "runtime/typed/exec.hpp"
#include "runtime/model/profile.hpp"

using nlohmann::json;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  json rq;
  try {
    rq = json::parse(reinterpret_cast<const char*>(data), reinterpret_cast<const char*>(data) + size);
  } catch (const json::exception&) {  // parse_error, and out_of_range for a number like 1e999
    return 0;
  }
  auto parsed = sbx::parse_exec_request(rq);
  if (!parsed) return 0;
  for (auto& [path, content] : parsed->files) {
    if (path.empty() || path[0] == '/') std::abort();
    std::size_t start = 0;
    while (start <= path.size()) {
      std::size_t end = path.find('/', start);
      if (end == std::string::npos) end = path.size();
      std::string_view part(path.data() + start, end - start);
      if (part.empty() || part == "." || part == "..") std::abort();
      start = end + 1;
    }
  }
  static const auto profile = sbx::load_profile(sbx::kDefaultProfile);
  if (!profile) std::abort();
  json patch = {{"limits", parsed->limits_patch}};
  (void)sbx::spec_from_layers(*profile, &patch, "exec request");
  return 0;
}
