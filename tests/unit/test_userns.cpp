// Identity as root of a user namespace (runtime/linux/userns.hpp): our own uid_map/gid_map parsed
// hostile-safe, and the sandbox's range taken from the ids that namespace maps.
#include <doctest/doctest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/linux/userns.hpp"

using namespace sbx;

TEST_CASE("own id maps: the kernel's padded lines parse; anything else is refused") {
  auto init = parse_id_map(kInitialIdMap);
  REQUIRE(init);
  REQUIRE(init->size() == 1);
  CHECK((*init)[0].inside == 0);
  CHECK((*init)[0].count == 4294967295u);
  auto two = parse_id_map("         0     100000      65536\n     65536    1000000          1\n");
  REQUIRE(two);
  REQUIRE(two->size() == 2);
  CHECK((*two)[1].outside == 1000000);
  CHECK(parse_id_map("0 0 1")->size() == 1);  // no final newline
  CHECK(parse_id_map("")->empty());
  for (const char* bad :
       {"0 0", "0 0 0\n", "a 0 1\n", "0 0 1 2\n", "-1 0 1\n", "0 0 4294967297\n", "4294967295 0 2\n",
        "0 4294967295 2\n", "99999999999 0 1\n", "0\t0\t1\n", "0 0 1\n\n", "00000000000000000001 0 1\n"})
    CHECK_MESSAGE(!parse_id_map(bad), bad);
  std::string many;
  for (int i = 0; i < 341; ++i) many += std::to_string(i) + " " + std::to_string(i) + " 1\n";
  CHECK_FALSE(parse_id_map(many));  // more extents than the kernel allows
  many.resize(many.find("\n340 ") + 1);
  CHECK(parse_id_map(many)->size() == 340);
}

namespace {
Result<IdentityPlan> plan_in(const std::string& uid_map, const std::string& gid_map, std::uint32_t slot = 0,
                             std::uint32_t uid = 0, const std::string& subid = "") {
  RunSpec s;
  s.uid = s.gid = uid;
  return plan_identity(s, 0, 0, subid, subid, slot, OwnIdMaps{uid_map, gid_map});
}
}  // namespace

TEST_CASE("identity in a user namespace: the planned range where it is mapped, else our own ids but ours") {
  // The initial namespace, and a namespace that maps the planned range: today's plan.
  auto init = plan_in(kInitialIdMap, kInitialIdMap);
  REQUIRE(init.ok());
  CHECK(init->uid_map[0].outside == kDefaultHostBase);
  CHECK(init->range_source == "built-in default");
  auto wide = plan_in("0 0 1\n1000000 2000000 65536\n", "0 0 1\n1000000 2000000 65536\n", 0, 0, "sbx:1000000:65536\n");
  REQUIRE(wide.ok());
  CHECK(wide->uid_map[0].outside == 1000000);
  CHECK(wide->range_source == "/etc/subuid and /etc/subgid (sbx)");

  // A pod with hostUsers: false: ids 0-65535. Sandbox 0..65534 -> 1..65535, never our own 0.
  auto pod = plan_in("0 2000000 65536\n", "0 2000000 65536\n");
  REQUIRE(pod.ok());
  CHECK_FALSE(pod->rootless);
  CHECK_FALSE(pod->single_id_fallback);
  REQUIRE(pod->uid_map.size() == 1);
  CHECK(pod->uid_map[0].inside == 0);
  CHECK(pod->uid_map[0].outside == 1);
  CHECK(pod->uid_map[0].count == 65535);
  CHECK(pod->gid_map[0].outside == 1);
  CHECK(pod->range_source == "own user namespace (65535 ids)");
  CHECK_FALSE(maps_host_id(pod->uid_map, 0));
  // --uid past the smaller range: a clear error; the last id in it is fine.
  auto past = plan_in("0 2000000 65536\n", "0 2000000 65536\n", 0, 65535);
  REQUIRE_FALSE(past.ok());
  CHECK(past.error().message.find("below 65535") != std::string::npos);
  CHECK(plan_in("0 2000000 65536\n", "0 2000000 65536\n", 0, 65534).ok());

  // Split extents: the longest run wins, capped at 65536; our own id is left out wherever it is.
  auto split = plan_in("0 5000 1\n10 6000 100\n200 7000 200000\n", "0 5000 100\n100 9000 100000\n");
  REQUIRE(split.ok());
  CHECK(split->uid_map[0].outside == 200);
  CHECK(split->gid_map[0].outside == 1);
  CHECK(split->uid_map[0].count == 65536);
  CHECK(split->gid_map[0].count == 65536);
  // The smaller of the two maps bounds both.
  auto narrow = plan_in("0 0 65536\n", "0 0 1001\n");
  REQUIRE(narrow.ok());
  CHECK(narrow->uid_map[0].count == 1000);
  CHECK(narrow->gid_map[0].count == 1000);

  // Tenant slots: slot N takes the N-th 65536 of the run, or refuses with the fix.
  auto big = plan_in("0 0 1\n1 3000000 300000\n", "0 0 1\n1 3000000 300000\n", 2);
  REQUIRE(big.ok());
  CHECK(big->uid_map[0].outside == 1 + 2 * 65536);
  CHECK(big->uid_map[0].count == 65536);
  auto slot = plan_in("0 2000000 65536\n", "0 2000000 65536\n", 1);
  REQUIRE_FALSE(slot.ok());
  CHECK(slot.error().message.find("tenant id slot 1 needs 131072 ids") != std::string::npos);
  CHECK(slot.error().message.find("--uidmap") != std::string::npos);
}

TEST_CASE("identity in a user namespace that maps only our own id: a single-id map, said so") {
  auto one = plan_in("0 1000 1\n", "0 1000 1\n", 0, 0);
  REQUIRE(one.ok());
  CHECK(one->rootless);
  CHECK(one->single_id_fallback);
  // Our namespace allows setgroups: the container's supplementary groups are dropped, as in any root run.
  CHECK_FALSE(one->keep_groups);
  CHECK(one->range_source == "single id: own user namespace maps no other id");
  REQUIRE(one->uid_map.size() == 1);
  CHECK(one->uid_map[0].outside == 0);
  CHECK(one->uid_map[0].count == 1);
  auto json = identity_to_json(*one);
  CHECK(json["mode"] == "rootless");
  CHECK(json["range_source"] == "single id: own user namespace maps no other id");
  // Other ids mapped for uids but none for gids: still a single id (both maps must have a range).
  CHECK(plan_in("0 0 65536\n", "0 1000 1\n")->single_id_fallback);
  // Tenants need ids of their own.
  CHECK_FALSE(plan_in("0 1000 1\n", "0 1000 1\n", 1).ok());
  // Maps that do not parse refuse, naming the file.
  auto bad = plan_in("garbage", kInitialIdMap);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("/proc/self/uid_map") != std::string::npos);
}

TEST_CASE("identity in a user namespace that denies setgroups: refused, never the container's groups kept") {
  RunSpec s;
  OwnIdMaps denied{"0 0 1\n1 2000001 65535\n", "0 0 1\n1 2000001 65535\n", true};
  auto r = plan_identity(s, 0, 0, "", "", 0, denied);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("--setgroups allow") != std::string::npos);
  // A single id needs no setgroups: the rootless map writes 'deny' itself, and the groups that our
  // namespace already cannot drop stay (unshare -r: they are the invoking user's own).
  OwnIdMaps single{"0 0 1\n", "0 0 1\n", true};
  auto one = plan_identity(s, 0, 0, "", "", 0, single);
  REQUIRE(one.ok());
  CHECK(one->single_id_fallback);
  CHECK(one->keep_groups);
}

TEST_CASE("identity: only a rootless caller's and a setgroups-denying namespace's groups are kept") {
  RunSpec s;
  CHECK(plan_identity(s, 1000, 1000, "", "")->keep_groups);
  CHECK_FALSE(plan_identity(s, 0, 0, "", "")->keep_groups);
  OwnIdMaps pod{"0 0 1\n1 2000001 65535\n", "0 0 1\n1 2000001 65535\n", false};
  CHECK_FALSE(plan_identity(s, 0, 0, "", "", 0, pod)->keep_groups);
  // The plan says where sbx runs, from the maps it was made of (what idmapping may be tried).
  CHECK(plan_identity(s, 0, 0, "", "")->initial_namespace);
  CHECK_FALSE(plan_identity(s, 0, 0, "", "", 0, pod)->initial_namespace);
  // A single id where setgroups is allowed but CAP_SETGID was dropped (a container started so):
  // the groups cannot be dropped, nor the map written without 'deny'; kept, as unshare -r.
  OwnIdMaps no_setgid{"0 0 1\n", "0 0 1\n", false, false};
  auto one = plan_identity(s, 0, 0, "", "", 0, no_setgid);
  REQUIRE(one.ok());
  CHECK(one->keep_groups);
  OwnIdMaps with_setgid{"0 0 1\n", "0 0 1\n", false, true};
  CHECK_FALSE(plan_identity(s, 0, 0, "", "", 0, with_setgid)->keep_groups);
}
