#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstring>

#include "runtime/model/caps.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/model/spec.hpp"

using nlohmann::json;
using namespace sbx;

TEST_CASE("capability names: both spellings, any case, one canonical form") {
  for (const char* n : {"CAP_CHOWN", "cap_chown", "chown", "Chown", "CHOWN"}) {
    auto c = canonical_capability(n);
    REQUIRE(c);
    CHECK(*c == "CAP_CHOWN");
  }
  CHECK(capability_number("CAP_SETUID") == 7);
  CHECK(capability_name(21) == "CAP_SYS_ADMIN");
  for (const char* bad : {"", "CAP_", "cap_", "CAP_CHOWN ", "chown\n", "CAP_BOGUS", "0", "CAP_CHOWN,CAP_KILL"})
    CHECK_FALSE(capability_number(bad));
  auto typo = canonical_capability("CAP_CHWON");
  REQUIRE_FALSE(typo);
  CHECK(typo.error().message == "'CAP_CHWON' is not a capability (did you mean 'CAP_CHOWN'?)");
  auto bare = canonical_capability("setgi");
  REQUIRE_FALSE(bare);
  CHECK(bare.error().message.find("did you mean 'CAP_SETGID'?") != std::string::npos);
  CHECK(capability_names(capability_mask({"CAP_SETUID", "CAP_CHOWN"})) == std::vector<std::string>{"CAP_CHOWN", "CAP_SETUID"});
}

TEST_CASE("capabilities.keep in a spec: canonical, sorted, deduplicated; unknown names named by index") {
  json j = spec_to_json(RunSpec{});
  j["capabilities"] = {{"keep", {"setuid", "CAP_CHOWN", "cap_chown", "dac_override"}}};
  auto s = spec_from_json(j, "p.json");
  REQUIRE(s);
  CHECK(s->capabilities.keep == std::vector<std::string>{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_SETUID"});
  CHECK(spec_to_json(*s)["capabilities"]["keep"] == json{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_SETUID"});
  j["capabilities"] = {{"keep", {"chown", "CAP_STE_UID"}}};
  auto bad = spec_from_json(j, "p.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message ==
        "p.json: /capabilities/keep/1: 'CAP_STE_UID' is not a capability (did you mean 'CAP_SETUID'?)");
  j["capabilities"] = {{"keep", "chown"}};
  CHECK_FALSE(spec_from_json(j, "p.json"));
  j["capabilities"] = {{"keep", json::array()}, {"drop", json::array()}};
  auto unknown = spec_from_json(j, "p.json");
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().message == "p.json: /capabilities/drop: unknown key");
}

TEST_CASE("capability ceiling: a manifest keeps a subset of the profile's, the operator may add") {
  RunSpec c, a;
  c.capabilities.keep = {"CAP_CHOWN", "CAP_SETUID"};
  a.capabilities.keep = {"CAP_CHOWN"};
  CHECK(check_ceilings(c, a, "pack.json", "trusted"));
  a.capabilities.keep = {};
  CHECK(check_ceilings(c, a, "pack.json", "trusted"));
  a.capabilities.keep = {"CAP_CHOWN", "CAP_NET_RAW"};
  auto st = check_ceilings(c, a, "pack.json", "trusted");
  REQUIRE_FALSE(st);
  CHECK(st.error().message ==
        "pack.json: /capabilities/keep: CAP_NET_RAW is not kept by profile 'trusted' (it keeps CAP_CHOWN, CAP_SETUID): "
        "a manifest or request may keep fewer capabilities, never more; the operator may add it with --cap-add CAP_NET_RAW");
  CHECK(check_ceilings(c, a, "pack.json", "trusted", {std::string(kCapabilityByOperator) + "CAP_NET_RAW"}));
  c.capabilities.keep = {};
  st = check_ceilings(c, a, "pack.json", "untrusted");
  REQUIRE_FALSE(st);
  CHECK(st.error().message.find("CAP_CHOWN is not kept by profile 'untrusted' (it keeps none)") != std::string::npos);
}

TEST_CASE("the built-in profiles: trusted keeps the five package-manager capabilities, untrusted none") {
  auto t = load_profile("trusted");
  REQUIRE(t);
  auto ts = spec_from_layers(*t, nullptr, "");
  REQUIRE(ts);
  CHECK(ts->capabilities.keep ==
        std::vector<std::string>{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_SETGID", "CAP_SETUID"});
  auto u = load_profile("untrusted");
  REQUIRE(u);
  auto us = spec_from_layers(*u, nullptr, "");
  REQUIRE(us);
  CHECK(us->capabilities.keep.empty());
  // A manifest under trusted may narrow the list; one that widens it is refused by key.
  json narrow = {{"capabilities", {{"keep", {"chown"}}}}};
  auto n = spec_from_layers(*t, &narrow, "pack.json");
  REQUIRE(n);
  CHECK(n->capabilities.keep == std::vector<std::string>{"CAP_CHOWN"});
  json wide = {{"capabilities", {{"keep", {"CAP_SYS_ADMIN"}}}}};
  auto w = spec_from_layers(*t, &wide, "pack.json");
  REQUIRE_FALSE(w);
  CHECK(w.error().message.find("pack.json: /capabilities/keep: CAP_SYS_ADMIN is not kept by profile 'trusted'") == 0);
}

TEST_CASE("/proc/PID/status capability lines") {
  const char* text =
      "Name:\tsh\nUmask:\t0022\nCapInh:\t00000000000000cb\nCapPrm:\t00000000000000cb\nCapEff:\t00000000000000cb\n"
      "CapBnd:\t00000000000000cb\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\n";
  ProcessCaps pc;
  REQUIRE(parse_status_caps(text, std::strlen(text), pc));
  CHECK(pc.effective == 0xcb);
  CHECK(pc.ambient == 0);
  CHECK(process_caps_json(pc)["bounding"] ==
        json{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_SETGID", "CAP_SETUID"});
  // Missing, doubled, malformed and overlong lines are refused, not half-read.
  for (const char* bad : {"CapInh:\t0\nCapPrm:\t0\nCapEff:\t0\nCapBnd:\t0\n",
                          "CapInh:\t0\nCapPrm:\t0\nCapEff:\t0\nCapBnd:\t0\nCapAmb:\t0\nCapAmb:\t0\n",
                          "CapInh:\t0\nCapPrm:\t0\nCapEff:\tzz\nCapBnd:\t0\nCapAmb:\t0\n",
                          "CapInh:\t0\nCapPrm:\t0\nCapEff:\t00000000000000000cb\nCapBnd:\t0\nCapAmb:\t0\n",
                          "CapInh:\t0\nCapPrm:\t0\nCapEff:\t\nCapBnd:\t0\nCapAmb:\t0\n"}) {
    ProcessCaps p;
    CHECK_FALSE(parse_status_caps(bad, std::strlen(bad), p));
  }
  ProcessCaps self;
  CHECK(read_process_caps_raw(::getpid(), self));
}
