#include <doctest/doctest.h>

#include "runtime/record/probe_report.hpp"

using namespace sbx;

TEST_CASE("probe output: result lines, markers, and hostile lines counted, never trusted") {
  auto po = parse_probe_output(
      "P\tfs.writable\theld\t3 mounts\n"
      "P\tsys.seccomp\tbreached\tSeccomp: 0\n"
      "P\tBad Name\theld\tx\n"
      "P\tnet.x\tmaybe\tx\n"
      "garbage\n"
      "P\tnet.y\tskipped\tesc \x1b[31m red\n"
      "MEM\n"
      "END");
  REQUIRE(po.results.size() == 3);
  CHECK(po.results[0].name == "fs.writable");
  CHECK(po.results[1].status == "breached");
  CHECK(po.results[2].evidence.find('\x1b') == std::string::npos);  // escaped for the terminal
  CHECK(po.bad_lines == 3);
  CHECK(po.reached_memory);
  CHECK(po.finished);
  CHECK(probe_exit_status(po.results) == 1);
  po.results.erase(po.results.begin() + 1);
  CHECK(probe_exit_status(po.results) == 0);
  auto j = probe_json(po.results);
  CHECK(j["held"] == 1);
  CHECK(j["skipped"] == 1);
  CHECK(j["probes"][0]["area"] == "fs");
  CHECK(probe_table(po.results).find("1 held, 0 breached, 1 skipped") != std::string::npos);
}

TEST_CASE("probe output: bounded") {
  std::string many;
  for (int i = 0; i < 500; ++i) many += "P\ta.b\theld\t" + std::string(5000, 'x') + "\n";
  auto po = parse_probe_output(many);
  CHECK(po.results.size() == kMaxProbeResults);
  CHECK(po.results[0].evidence.size() == 1000);
  CHECK_FALSE(po.finished);
}
