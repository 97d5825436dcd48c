// The profile key `warm` (runtime/model/warm.hpp) and init's side of the prepared interpreter
// (runtime/launch/warm_start.hpp). The drivers themselves run in tests/integration/test_mcp_warm.py.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "runtime/launch/warm_start.hpp"
#include "runtime/model/spec.hpp"
#include "runtime/model/warm.hpp"

using namespace sbx;
using nlohmann::json;

namespace {
Result<RunSpec> with_warm(const json& warm) {
  json j = spec_to_json(RunSpec{});
  j["warm"] = warm;
  return spec_from_json(j, "p.json");
}
std::string error_of(const json& warm) {
  auto s = with_warm(warm);
  return s ? std::string() : s.error().message;
}
}  // namespace

TEST_CASE("warm: no interpreter is the default and prepares nothing") {
  RunSpec none;
  CHECK(none.warm.interpreter.empty());
  CHECK(warm_driver_argv(none.warm).empty());
  auto round = spec_from_json(spec_to_json(none), "p.json");
  REQUIRE(round);
  CHECK(round->warm == none.warm);
}

TEST_CASE("warm: each interpreter of the binding list is accepted, with its language") {
  for (const char* name : {"python3", "node", "sh", "bash"}) {
    auto s = with_warm({{"interpreter", name}});
    REQUIRE_MESSAGE(s, name);
    CHECK(s->warm.mode == "pool");
    CHECK(find_warm_interpreter(name) != nullptr);
  }
  CHECK(std::string(find_warm_interpreter("python3")->language) == "python");
  CHECK(std::string(find_warm_interpreter("node")->language) == "node");
  auto s = with_warm({{"interpreter", "python3"}, {"preload", {"numpy", "os.path", "json"}}, {"mode", "pool"}});
  REQUIRE(s);
  CHECK(s->warm.preload == std::vector<std::string>{"numpy", "os.path", "json"});
  CHECK(spec_to_json(*s)["warm"] == json{{"interpreter", "python3"}, {"preload", {"numpy", "os.path", "json"}},
                                         {"mode", "pool"}});
}

TEST_CASE("warm: what is refused, and where the error points") {
  CHECK(error_of({{"interpreter", "ruby"}}) ==
        "p.json: /warm/interpreter: must be one of python3, node, sh, bash (got 'ruby')");
  // Templates: python3's driver only.
  CHECK(error_of({{"interpreter", "python3"}, {"mode", "template"}, {"preload", {"json"}}}).empty());
  CHECK(error_of({{"interpreter", "node"}, {"mode", "template"}}).find("/warm/mode: \"template\"") !=
        std::string::npos);
  CHECK(error_of({{"mode", "template"}}).find("/warm/mode: \"template\"") != std::string::npos);
  CHECK(template_driver_argv({"python3", {"json", "numpy"}, "template"}) ==
        std::vector<std::string>{"/usr/bin/python3", "-c", std::string(template_driver_text()), "json", "numpy"});
  CHECK(template_driver_argv({"node", {}, "template"}).empty());
  CHECK(template_driver_sha256().size() == 64);
  // One way of running a Python call, a pool's and a template's (python_main.py): both drivers
  // start with it, and the template's digest covers it.
  REQUIRE(python_main_text().find("def _sbx_main(") != std::string_view::npos);
  CHECK(template_driver_text().substr(0, python_main_text().size()) == python_main_text());
  CHECK(warm_driver_argv({"python3", {"json"}, "pool"}).at(2).rfind(python_main_text(), 0) == 0);
  CHECK(template_driver_sha256() != python_main_sha256());
  CHECK(error_of({{"interpreter", "python3"}, {"mode", "fork"}}).find("/warm/mode: must be") != std::string::npos);
  CHECK(error_of({{"interpreter", "sh"}, {"preload", {"x"}}}) ==
        "p.json: /warm/preload: sh has no modules to preload: leave preload empty");
  CHECK(error_of({{"preload", {"numpy"}}}) == "p.json: /warm/preload: needs an interpreter to import it (warm.interpreter)");
  CHECK(error_of({{"interpreter", "python3"}, {"cache", true}}) == "p.json: /warm/cache: unknown key");
  // Module names only: nothing that is a path, an option or code.
  for (const char* bad : {"../x", "/tmp/x", "a..b", ".x", "x.", "1x", "os path", "-c", "x;y", ""})
    CHECK_MESSAGE(error_of({{"interpreter", "python3"}, {"preload", {"json", bad}}}).find("/warm/preload/1:") !=
                      std::string::npos,
                  bad);
  for (const char* bad : {"./x", "/tmp/x.js", "a/../b", "--inspect", "x y", ""})
    CHECK_MESSAGE(error_of({{"interpreter", "node"}, {"preload", {bad}}}).find("/warm/preload/0:") != std::string::npos,
                  bad);
  for (const char* good : {"lodash", "@scope/pkg", "lodash/fp", "node:fs", "left-pad"})
    CHECK_MESSAGE(error_of({{"interpreter", "node"}, {"preload", {good}}}).empty(), good);
  json many = json::array();
  for (std::size_t i = 0; i <= kMaxPreloads; ++i) {
    std::string name = "m";
    name += std::to_string(i);
    many.push_back(name);
  }
  CHECK(error_of({{"interpreter", "python3"}, {"preload", many}}).find("at most 64") != std::string::npos);
  CHECK(error_of({{"interpreter", "python3"}, {"preload", {std::string(kMaxPreloadNameBytes + 1, 'a')}}}) != "");
}

TEST_CASE("warm: the driver's argv is the interpreter, its driver, then the preloads; shells have none") {
  WarmSpec py{"python3", {"json", "numpy"}, "pool"};
  auto argv = warm_driver_argv(py);
  REQUIRE(argv.size() == 5);
  CHECK(argv[0] == "/usr/bin/python3");
  CHECK(argv[1] == "-c");
  CHECK(argv[2].find("_sbx_warm") != std::string::npos);
  CHECK(argv[3] == "json");
  CHECK(argv[4] == "numpy");
  auto js = warm_driver_argv(WarmSpec{"node", {"util"}, "pool"});
  REQUIRE(js.size() == 4);
  CHECK(js[0] == "/usr/bin/node");
  CHECK(js[1] == "-e");
  CHECK(warm_driver_argv(WarmSpec{"sh", {}, "pool"}).empty());
  CHECK(warm_driver_argv(WarmSpec{"bash", {}, "pool"}).empty());
}

TEST_CASE("warm: the driver's line is ready, pending, or a bounded failure") {
  CHECK(parse_driver_line("", false).kind == DriverLine::kPending);
  CHECK(parse_driver_line("o", false).kind == DriverLine::kPending);
  CHECK(parse_driver_line("ok\n", false).kind == DriverLine::kReady);
  auto fail = parse_driver_line("fail preload numpy: ModuleNotFoundError: No module named 'numpy'\n", false);
  CHECK(fail.kind == DriverLine::kFailed);
  CHECK(fail.why == "preload numpy: ModuleNotFoundError: No module named 'numpy'");
  CHECK(parse_driver_line("ok", true).kind == DriverLine::kFailed);  // died mid-line
  CHECK(parse_driver_line("", true).why == "the warm interpreter ended before it was ready");
  CHECK(parse_driver_line("okay\n", false).kind == DriverLine::kFailed);
  CHECK(parse_driver_line(std::string(kMaxDriverLine, 'x'), false).kind == DriverLine::kFailed);
  CHECK(encode_driver_argv({"/usr/bin/python3", "/code/main.py"}) == std::string("/usr/bin/python3\0/code/main.py\0", 31));
}
