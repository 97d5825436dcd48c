// limits_table.hpp: one definition per limit, and every list that used to be written by hand
// derives from it. These tests walk the table, so a limit added there is covered here without a
// new line: its keys and flag, its planner, preflight's flag for it, and that no ceiling (a
// profile's over a manifest or request, a tenant's over everything) lets a layer raise it.
#include <doctest/doctest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "runtime/launch/preflight.hpp"
#include "runtime/launch/tenant.hpp"
#include "runtime/linux/limits_plan.hpp"
#include "runtime/model/limits_table.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/typed/pack.hpp"

using namespace sbx;
using nlohmann::json;

namespace {
// Sets the limit to `n` (bytes, ms, a count, CPUs): a value small enough for every unit's bounds.
void set_limit(Limits& l, const LimitKind& k, std::int64_t n) {
  std::visit(
      [&](auto m) {
        if constexpr (std::is_same_v<decltype(m), std::optional<double> Limits::*>) l.*m = static_cast<double>(n);
        else l.*m = n;
      },
      k.member);
}
bool is_optional(const LimitKind& k) { return !std::holds_alternative<std::int64_t Limits::*>(k.member); }
bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("limits table: every member of Limits is exactly one entry") {
  Limits l;
  // Structured bindings compile only with exactly this many members: a member added to Limits
  // without an entry in limits_table.cpp fails here (add the entry, then one name below).
  auto& [m0, m1, m2, m3, m4, m5, m6, m7, m8, m9] = l;
  const std::vector<const void*> members = {&m0, &m1, &m2, &m3, &m4, &m5, &m6, &m7, &m8, &m9};
  REQUIRE(limit_kinds().size() == members.size());
  std::set<const void*> covered;
  for (auto& k : limit_kinds())
    covered.insert(std::visit([&](auto m) -> const void* { return &(l.*m); }, k.member));
  CHECK(covered == std::set<const void*>(members.begin(), members.end()));
  // And the spec reads and writes exactly the table's keys.
  std::set<std::string> written, keys;
  const RunSpec defaults;
  const json spec = spec_to_json(defaults);
  for (auto& [key, v] : spec["limits"].items()) written.insert(key);
  for (auto& k : limit_kinds()) keys.insert(k.spec_key);
  CHECK(written == keys);
}

TEST_CASE("limits table: every entry has its names, flag, parser, bound and ceiling rule, consistently") {
  std::set<std::string> names, spec_keys, plan_names, flags;
  std::map<std::string, std::set<int>> orders;
  for (auto& k : limit_kinds()) {
    CAPTURE(k.spec_key);
    REQUIRE(k.name);
    REQUIRE(k.spec_key);
    REQUIRE(k.flag);  // "" only for a limit no flag raises (the profile alone sets it)
    CHECK(names.insert(k.name).second);
    CHECK(spec_keys.insert(k.spec_key).second);
    if (k.flag[0]) {
      CHECK(std::string(k.flag).starts_with("--"));
      CHECK(flags.insert(k.flag).second);
    } else {
      CHECK(k.enforced == LimitEnforcement::tmpfs);
    }
    CHECK(k.max > 0);
    CHECK((k.parse != nullptr) == (k.unit != LimitUnit::cpus));
    CHECK((k.noun != nullptr) == (k.unit == LimitUnit::count || k.unit == LimitUnit::cpus));
    CHECK(std::holds_alternative<std::optional<double> Limits::*>(k.member) == (k.unit == LimitUnit::cpus));
    // The plan and the trace name each limit the plan enforces; a tenant refuses a raise of those
    // by the layer that asked (limit_layers), and lowers the others.
    const bool planned = k.enforced == LimitEnforcement::plan || k.enforced == LimitEnforcement::supervisor;
    CHECK((k.plan_name != nullptr) == planned);
    CHECK((k.order.plan >= 0) == planned);
    if (k.plan_name) CHECK(plan_names.insert(k.plan_name).second);
    if (k.controller) CHECK(k.enforced == LimitEnforcement::plan);
    if (k.tenant == TenantCeiling::refuse_raise) CHECK((planned && is_optional(k)));
    // A flag that clears ("none") is one of an optional limit; the export caps' flags only set.
    CHECK(has_clearable_flag(k) == (k.flag[0] && is_optional(k)));
    for (auto [column, value] : {std::pair{"read", k.order.read}, {"ceiling", k.order.ceiling},
                                 {"plan", k.order.plan}, {"flag", k.order.flag}})
      if (value >= 0) CHECK(orders[column].insert(value).second);
  }
  CHECK(orders["read"].size() == limit_kinds().size());
  CHECK(orders["ceiling"].size() == limit_kinds().size());
  // The public keys a manifest takes are the table's, in its order.
  std::vector<std::string> manifest_keys, listed;
  for (auto& k : limit_kinds())
    if (k.in_manifests) manifest_keys.push_back(k.name);
  for (auto& k : limit_keys()) listed.push_back(k.name);
  CHECK(listed == manifest_keys);
}

TEST_CASE("limits table: the lists that derive from it say what they said by hand") {
  std::vector<PackProblem> problems;
  CHECK_FALSE(limits_to_spec_patch(json{{"walltime", "1s"}}, "pack.json", problems).ok());
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].message == "unknown limit (known: timeout, memory, pids, cpus, cpu_time, output_limit, tmp_size)");
  CHECK(limits_properties_schema() ==
        json::parse(R"({"timeout": {"type": "string", "description":
                          "a duration with its unit (ms, s, m, h), e.g. \"10s\"; a bare number is refused"},
                        "memory": {"type": "string", "description":
                          "a size with its unit (K, M, G), e.g. \"256M\"; a bare number is refused"},
                        "pids": {"type": "integer", "minimum": 1}, "cpus": {"type": "number", "exclusiveMinimum": 0},
                        "cpu_time": {"type": "string", "description":
                          "a duration with its unit (ms, s, m, h), e.g. \"10s\"; a bare number is refused"},
                        "output_limit": {"type": "string", "description":
                          "a size with its unit (K, M, G), e.g. \"16M\"; a bare number is refused"},
                        "tmp_size": {"type": "string", "description":
                          "a size with its unit (K, M, G), e.g. \"16M\"; a bare number is refused"}})"));
  std::vector<std::string> plan, flag;
  for (auto* k : limit_kinds_by(&LimitOrder::plan)) plan.push_back(k->plan_name);
  for (auto* k : limit_kinds_by(&LimitOrder::flag)) flag.push_back(k->flag);
  CHECK(plan == std::vector<std::string>{"memory", "pids", "cpus", "cpu_time", "timeout", "output"});
  CHECK(flag == std::vector<std::string>{"--timeout", "--cpu-time", "--output-limit", "--memory", "--pids", "--cpus"});
}

TEST_CASE("limits table: plan_limits plans every planned limit, and preflight knows each one's flag") {
  Limits all;
  for (auto& k : limit_kinds()) set_limit(all, k, 1000);
  CgroupInfo none;  // no cgroup v2: every limit takes its fallback, or is not applied
  auto plan = plan_limits(all, none, false, false);
  std::vector<std::string> decided, expected;
  for (auto& d : plan.decisions) decided.push_back(d.limit);
  for (auto* k : limit_kinds_by(&LimitOrder::plan)) expected.push_back(k->plan_name);
  CHECK(decided == expected);
  for (auto* k : limit_kinds_by(&LimitOrder::plan)) {
    CAPTURE(k->plan_name);
    REQUIRE(limit_kind_by_plan_name(k->plan_name) == k);
    // As --require-limits words a limit it cannot enforce: the flag that clears it is its own.
    LimitPlan one;
    one.decisions.push_back({k->plan_name, "1000", "", "not here"});
    auto e = require_limits_shortfall(one, none, {{k->plan_name, "profile 'untrusted'"}});
    REQUIRE(e.has_value());
    CHECK(has(e->message, std::string("clear it with ") + k->flag + " none)"));
  }
}

TEST_CASE("limits table: each limit flag sets, clears and refuses as it always has") {
  for (auto* k : limit_kinds_by(&LimitOrder::flag)) {
    CAPTURE(k->flag);
    Limits l;
    REQUIRE(apply_limit_flag(l, *k, "3").ok());
    CHECK(limit_set(l, *k));
    REQUIRE(apply_limit_flag(l, *k, "none").ok());
    CHECK_FALSE(limit_set(l, *k));
    auto bad = apply_limit_flag(l, *k, "x");
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().message.starts_with(std::string(k->flag) + ": "));
    CHECK(bad.error().stage == sbx::Stage("usage"));
  }
  Limits l;
  const auto& kinds = limit_kinds();
  auto kind = [&](const char* name) -> const LimitKind& {
    return *std::find_if(kinds.begin(), kinds.end(), [&](auto& k) { return std::string(k.name) == name; });
  };
  CHECK(apply_limit_flag(l, kind("pids"), "0").error().message == "--pids: bad process count '0' (a positive integer, or none)");
  CHECK(apply_limit_flag(l, kind("pids"), "4194305").error().message ==
        "--pids: bad process count '4194305' (a positive integer, or none)");
  CHECK(apply_limit_flag(l, kind("cpus"), "4097").error().message ==
        "--cpus: bad CPU count '4097' (a positive number, e.g. 0.5, or none)");
  CHECK(apply_limit_flag(l, kind("memory"), "0").error().message ==
        "--memory: must be greater than zero (or none for no limit)");
  CHECK(apply_limit_flag(l, kind("output_limit"), "0").ok());  // a limit: nothing passes
  CHECK(l.output_limit_bytes == 0);
  CHECK(apply_limit_flag(l, kind("cpus"), "0").ok());  // clears, as docker's --cpus 0
  CHECK_FALSE(l.cpus);
  CHECK(apply_limit_flag(l, kind("timeout"), "1m").ok());
  CHECK(l.timeout_ms == 60000);
}

TEST_CASE("limits table: a profile's ceiling refuses a manifest or request raising any limit") {
  for (auto& k : limit_kinds()) {
    CAPTURE(k.spec_key);
    RunSpec ceiling, asked;
    set_limit(ceiling.limits, k, 1000);
    set_limit(asked.limits, k, 2000);
    auto st = check_ceilings(ceiling, asked, "pack.json", "untrusted");
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().message.starts_with(std::string("pack.json: /limits/") + k.name + ": "));
    CHECK(has(st.error().message, "is above the ceiling of profile 'untrusted'"));
    if (k.flag[0]) {
      CHECK(has(st.error().message, std::string("the operator may raise it with ") + k.flag));
      CHECK(check_ceilings(ceiling, asked, "pack.json", "untrusted", {k.name}).ok());  // the flag decides it
    }
    set_limit(asked.limits, k, 500);
    CHECK(check_ceilings(ceiling, asked, "pack.json", "untrusted").ok());

    // The same through the layers, from JSON: profile < manifest.
    LoadedProfile profile;
    profile.source = {"untrusted", "built-in", ""};
    profile.patch = {{"limits", {{k.spec_key, 1000}}}};
    json manifest = {{"limits", {{k.spec_key, 2000}}}};
    auto merged = spec_from_layers(profile, &manifest, "pack.json");
    REQUIRE_FALSE(merged.ok());
    CHECK(merged.error().message.starts_with(std::string("pack.json: /limits/") + k.name + ": "));
    if (is_optional(k)) {  // removing a limit is raising it
      manifest["limits"][k.spec_key] = nullptr;
      CHECK_FALSE(spec_from_layers(profile, &manifest, "pack.json").ok());
    }
    manifest["limits"][k.spec_key] = 500;
    CHECK(spec_from_layers(profile, &manifest, "pack.json").ok());
  }
}

TEST_CASE("limits table: a tenant's ceiling binds every limit, whoever asked") {
  for (auto& k : limit_kinds()) {
    CAPTURE(k.spec_key);
    auto t = parse_tenant(json{{"id_slot", 1}, {"limits", {{k.spec_key, 1000}}}}.dump(), "acme", "acme.json");
    REQUIRE(t.ok());
    RunSpec s;
    set_limit(s.limits, k, 2000);
    const std::string layer_name = k.plan_name ? k.plan_name : k.name;
    for (const char* layer : {"pack.json", "flag --x"}) {
      auto st = check_tenant_ceilings(*t, s, {{layer_name, layer}});
      if (k.tenant == TenantCeiling::refuse_raise) {
        REQUIRE_FALSE(st.ok());
        CHECK(st.error().message.starts_with(std::string("tenant 'acme': ") + k.name + ": "));
      } else {
        REQUIRE(st.ok());
        CHECK(limit_json(s.limits, k) == 1000);  // lowered
        set_limit(s.limits, k, 2000);
      }
    }
    // From the profile or sbx's defaults: lowered to the ceiling, never refused.
    REQUIRE(check_tenant_ceilings(*t, s, {{layer_name, "profile 'untrusted'"}}).ok());
    CHECK(limit_json(s.limits, k) == 1000);
  }
}

TEST_CASE("pack and exec limits: a bare number for a duration or a size is refused at its key; counts stay numbers") {
  std::vector<PackProblem> problems;
  CHECK_FALSE(limits_to_spec_patch(json{{"timeout", 10}}, "request", problems).ok());
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].describe() ==
        R"(request#/limits/timeout: a bare number is ambiguous; write a duration with its unit: "10s" or "10000ms")");
  problems.clear();
  CHECK_FALSE(limits_to_spec_patch(json{{"memory", 256}, {"cpu_time", 2}}, "pack.json", problems).ok());
  REQUIRE(problems.size() == 2);  // every problem, as `sbx pack validate` lists them
  CHECK(problems[0].describe() == "pack.json#/limits/cpu_time: a bare number is ambiguous; write a duration with "
                                  "its unit: \"2s\" or \"2000ms\"");
  CHECK(problems[1].describe() == "pack.json#/limits/memory: a bare number is ambiguous; write a size with its unit: "
                                  "\"256M\", \"256K\" or \"256B\" (bytes)");
  problems.clear();
  // A key named with its unit takes a number in it; counts and CPUs are numbers.
  auto ok = limits_to_spec_patch(json{{"timeout_ms", 1500}, {"pids", 8}, {"cpus", 0.5}, {"output_limit", "1K"}},
                                 "pack.json", problems);
  REQUIRE(ok.ok());
  CHECK(*ok == json{{"timeout_ms", 1500}, {"pids", 8}, {"cpus", 0.5}, {"output_limit_bytes", "1K"}});
  for (auto& k : limit_kinds()) {
    CAPTURE(k.name);
    CHECK(bare_limit_number(k.spec_key, json(5)).empty());  // the record's keys (a replay reads them)
    bool unit = k.unit == LimitUnit::duration_ms || k.unit == LimitUnit::size_bytes;
    CHECK(bare_limit_number(k.name, json(5)).empty() == (!unit || std::string(k.name) == k.spec_key));
    CHECK(bare_limit_number(k.name, json("5s")).empty());
  }
}
