#include <doctest/doctest.h>

#include "runtime/launch/probe_host.hpp"

using namespace sbx;
using nlohmann::json;

TEST_CASE("probe host: the helper's egress targets are an allowed host:port per rule and a refused port per host") {
  auto e = egress_targets(json{{"network", {{"allow", {"a.example:443", "10.0.0.0/8", "*.b.example"}}}}});
  CHECK(e.allowed == std::vector<std::string>{"a.example:443", "10.0.0.1:443", "sbx-probe.b.example:443"});
  CHECK(e.other == std::vector<std::string>{"a.example:22", "10.0.0.1:22", "sbx-probe.b.example:22"});
  CHECK(egress_targets(json::object()).allowed.empty());
  CHECK(egress_targets(json{{"network", {{"allow", {"not a rule at all::"}}}}}).allowed.empty());
}

TEST_CASE("probe host: lists in evidence are cut at their bound, with the count") {
  CHECK(joined({"a", "b"}) == "a, b");
  CHECK(joined({"1", "2", "3"}, 2) == "1, 2, ... (3 in all)");
}

TEST_CASE("probe host: a secret's value in the record or the ledger is a breach, raw or JSON-escaped") {
  std::vector<ProbeResult> r;
  secret_record_check(r, "{\"x\":\"s3cr\\\"et\"}", {{"A", "s3cr\"et"}, {"B", "abc"}});
  REQUIRE(r.size() == 1);
  CHECK(r[0].status == "breached");
  CHECK(r[0].evidence == "the value of A is in the trace record or the ledger");
  r.clear();
  secret_record_check(r, "abc", {{"B", "abc"}});  // under 4 bytes: not searched
  CHECK(r[0].status == "held");
}

TEST_CASE("probe host: the record must name image, profile, command, seccomp policy and identity") {
  json rec = {{"image", {{"name", "host"}}},
              {"invocation", {{"profile", {{"name", "untrusted"}, {"sha256", "ab"}}}, {"spec", {{"argv", {"/sbx-probe", "T"}}}}}},
              {"enforcement", {{"seccomp", json::object()}, {"identity", json::object()}}}};
  std::vector<ProbeResult> r;
  record_names_check(r, rec, "T", "ok");
  CHECK(r.at(0).status == "held");
  CHECK(r.at(0).evidence == "image host, profile untrusted, command, seccomp policy and identity are named; status ok");
  r.clear();
  record_names_check(r, json::object(), "T", "ok");
  CHECK(r.at(0).evidence == "the record does not name: image, profile, command, seccomp policy, identity");
}

TEST_CASE("probe host: a held limit the record enforced by a degraded mechanism is degraded, naming it") {
  json rec = {{"enforcement",
               {{"limits_applied",
                 {{"memory", {{"degraded", true}, {"mechanism", "rlimit RLIMIT_DATA"}}},
                  {"pids", {{"degraded", false}, {"mechanism", "cgroup v2 pids.max"}}}}}}}};
  std::vector<ProbeResult> r = {{"limit.memory", "held", "allocation stopped at 512 MiB"},
                                {"limit.pids", "held", "fork failed"},
                                {"limit.timeout", "held", "killed"},
                                {"fs.root", "held", "read-only"}};
  degraded_limits(r, rec);
  CHECK(r[0].status == "degraded");
  CHECK(r[0].evidence.find("allocation stopped at 512 MiB; but enforced only by rlimit RLIMIT_DATA") == 0);
  CHECK(r[0].evidence.find("sbx doctor") != std::string::npos);
  CHECK(r[1].status == "held");
  CHECK(r[2].status == "held");
  CHECK(r[3].status == "held");
  // A breach stays a breach.
  std::vector<ProbeResult> b = {{"limit.memory", "breached", "touched 600 MiB"}};
  degraded_limits(b, rec);
  CHECK(b[0].status == "breached");
}

TEST_CASE("probe host: a new mount counts against the run only where the run reaches") {
  auto roots = run_mount_roots(json{{"binds", {{{"src", "/srv/data/"}, {"dst", "/d"}}}}}, {"/var/lib/sbx", ""});
  CHECK(roots == std::vector<std::string>{"/tmp", "/srv/data", "/var/lib/sbx"});
  CHECK(mount_within_reach("/srv/data/sub tmpfs none", roots));
  CHECK(mount_within_reach("/srv/data tmpfs none", roots));
  CHECK(mount_within_reach("/tmp tmpfs sbx-base", roots));
  CHECK(mount_within_reach("/somewhere tmpfs sbx-base", roots));  // sbx's own name, anywhere
  CHECK_FALSE(mount_within_reach("/srv/database tmpfs none", roots));
  CHECK_FALSE(mount_within_reach("/run/user/1000 tmpfs tmpfs", roots));
  CHECK_FALSE(mount_within_reach("/var/lib/docker/overlay2/x/merged overlay overlay", roots));
  // A bind of / puts every mount point within reach.
  CHECK(mount_within_reach("/anything ext4 /dev/sda1", run_mount_roots(json{{"binds", {{{"src", "/"}, {"dst", "/h"}}}}}, {})));
}
