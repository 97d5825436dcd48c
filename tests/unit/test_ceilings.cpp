#include <doctest/doctest.h>

#include "runtime/model/limits_table.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/model/spec.hpp"

using sbx::check_ceilings;
using sbx::RunSpec;

namespace {
std::string why(const RunSpec& ceiling, const RunSpec& asked, const std::set<std::string>& op = {}) {
  auto st = check_ceilings(ceiling, asked, "pack.json", "untrusted", op);
  return st ? "" : st.error().message;
}
}  // namespace

TEST_CASE("profile ceilings: lowering is fine, raising or removing a limit is refused by name") {
  RunSpec c;
  c.limits.timeout_ms = 30000;
  c.limits.memory_bytes = 512LL << 20;
  c.limits.cpus = 1;
  RunSpec a = c;
  CHECK(why(c, a) == "");
  a.limits.timeout_ms = 1000;
  a.limits.cpus = 0.5;
  CHECK(why(c, a) == "");
  a.limits.timeout_ms = 360000000;
  CHECK(why(c, a) == "pack.json: /limits/timeout: 100h is above the ceiling of profile 'untrusted' (30s): a manifest or "
                     "request may lower a limit, never raise it; the operator may raise it with --timeout");
  CHECK(why(c, a, {"timeout"}) == "");  // the operator's flag decides it
  a = c;
  a.limits.memory_bytes.reset();  // unlimited is above any limit
  CHECK(why(c, a).find("/limits/memory: unlimited is above the ceiling") != std::string::npos);
  a = c;
  a.limits.cpus = 2;
  CHECK(why(c, a).find("/limits/cpus: 2 is above the ceiling of profile 'untrusted' (1)") != std::string::npos);
  a = c;
  a.limits.tmp_size_bytes = 100LL << 30;
  CHECK(why(c, a).find("/limits/tmp_size: 100G is above") != std::string::npos);
  a = c;
  a.limits.pids = 5;  // the profile has none: anything goes
  CHECK(why(c, a) == "");
}

TEST_CASE("a ceiling refusal names the fix of the command in use: its flag, or --profile") {
  RunSpec c;
  c.limits.timeout_ms = 2000;
  RunSpec a = c;
  a.limits.timeout_ms = 5000;
  auto st = check_ceilings(c, a, "exec request", "t", {}, sbx::CeilingRaise::by_profile);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message == "exec request: /limits/timeout: 5s is above the ceiling of profile 't' (2s): a manifest "
                              "or request may lower a limit, never raise it; the operator may pass --profile with a "
                              "profile whose limits.timeout is higher");
  CHECK(st.error().message.find("--timeout") == std::string::npos);  // `sbx exec` has no such flag
  // Every limit has a profile fix, flag or not (tmp_size has no flag of `sbx run`).
  for (const auto& k : sbx::limit_kinds()) {
    CHECK(sbx::ceiling_raise_hint(k, sbx::CeilingRaise::by_profile) ==
          std::string("; the operator may pass --profile with a profile whose limits.") + k.name + " is higher");
    CHECK(sbx::ceiling_raise_hint(k, sbx::CeilingRaise::by_flag) ==
          (k.flag[0] ? std::string("; the operator may raise it with ") + k.flag : std::string()));
  }
}

TEST_CASE("integers below a key's range are refused too (nlohmann keeps them unsigned)") {
  nlohmann::json j = sbx::spec_to_json(RunSpec{});
  j["tier"] = 2;
  auto s = sbx::spec_from_json(j, "p.json");
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().message == "p.json: /tier: must be an integer between 3 and 4");
  j["tier"] = 3;
  CHECK(sbx::spec_from_json(j, "p.json").ok());
}
