// pack.json (runtime/typed/pack.cpp, parse_pack_manifest): the manifest text of a rule pack, with the
// schema files it names read relative to a scratch pack directory that holds a valid input and
// output schema (made once, removed at exit). Every problem found must come with a message.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/typed/pack.hpp"

namespace fs = std::filesystem;

namespace {

struct PackDir {
  std::string path;
  PackDir() {
    char tmpl[] = "/tmp/sbx-fuzz-pack-XXXXXX";
    if (!::mkdtemp(tmpl)) std::abort();
    path = tmpl;
    fs::create_directories(path + "/schemas");
    std::ofstream(path + "/schemas/input.json") << R"({"type": "object", "properties": {"n": {"type": "integer"}}})";
    std::ofstream(path + "/schemas/output.json") << R"({"type": "object", "required": ["ok"]})";
  }
  ~PackDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static PackDir dir;
  std::vector<sbx::PackProblem> problems;
  auto pack = sbx::parse_pack_manifest(dir.path, std::string(reinterpret_cast<const char*>(data), size), problems);
  if (!pack) {
    if (problems.empty()) std::abort();  // an error without a problem to show the user
    for (auto& p : problems) (void)p.describe();
  }
  return 0;
}
