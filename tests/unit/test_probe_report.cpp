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

TEST_CASE("probe output: info lines for the host side, bounded, first value kept") {
  std::string text = "I\tpidns\t4026532001\nI\tpidns\t1\nI\tsecret.0\t32\nI\tBad Key\tx\nI\tnokey\n";
  text += "I\tlong\t" + std::string(201, 'x') + "\n";
  text += "I\tesc\t\x1b[31m\n";
  auto po = parse_probe_output(text);
  CHECK(po.info.at("pidns") == "4026532001");  // a later line cannot replace what the first said
  CHECK(po.info.at("secret.0") == "32");
  CHECK(po.info.count("long") == 0);
  CHECK(po.info.at("esc").find('\x1b') == std::string::npos);
  CHECK(po.bad_lines == 3);  // bad key, no value, too long
  CHECK(po.results.empty());
  std::string many;
  for (int i = 0; i < 200; ++i) many += "I\tk" + std::to_string(i) + "\tv\n";
  CHECK(parse_probe_output(many).info.size() == kMaxProbeInfo);
}

TEST_CASE("probe report: degraded is counted apart, and is not a breach") {
  std::vector<ProbeResult> r = {{"limit.memory", "degraded", "per process only"}, {"fs.root", "held", "ro"}};
  CHECK(probe_exit_status(r) == 0);
  CHECK(probe_table(r).find("1 held, 1 degraded, 0 breached, 0 skipped") != std::string::npos);
  auto j = probe_json(r);
  CHECK(j["degraded"] == 1);
  CHECK(j["held"] == 1);
  CHECK(j["skipped"] == 0);
  // The helper inside cannot claim it: only the host side judges a degraded mechanism.
  CHECK(parse_probe_output("P\tlimit.memory\tdegraded\tx\n").bad_lines == 1);
}
