#include <doctest/doctest.h>

#include "runtime/launch/tenant.hpp"
#include "runtime/linux/userns.hpp"

#include <cstdio>
#include <filesystem>

#include <stdlib.h>

using namespace sbx;

namespace {
Tenant parsed(const std::string& text) {
  auto t = parse_tenant(text, "acme", "acme.json");
  if (!t.ok()) FAIL(t.error().message);
  return *t;
}
std::string refusal(const std::string& text) {
  auto t = parse_tenant(text, "acme", "acme.json");
  REQUIRE_FALSE(t.ok());
  return t.error().message;
}
}  // namespace

TEST_CASE("tenant names: no '/', no '..', no control bytes, bounded") {
  CHECK(check_tenant_name("acme").ok());
  CHECK(check_tenant_name("team-a_2.prod").ok());
  for (const std::string& bad : std::vector<std::string>{"", "../x", "a/b", ".x", "-x", "a..b", "a\x01" "b",
                                                          std::string(65, 'a'), "a b"})
    CHECK_FALSE(check_tenant_name(bad).ok());
}

TEST_CASE("tenant files: strict keys with did-you-mean, both limit spellings, id_slot required") {
  Tenant t = parsed(R"({"id_slot": 3, "images": ["busybox"], "limits": {"memory": "128M", "timeout_ms": 5000},
                        "network": {"allow": ["*.example.com"]}, "gpu": {"max": 1}, "separate_ids": "preferred"})");
  CHECK(t.id_slot == 3);
  CHECK(t.limits.memory_bytes == 128LL << 20);
  CHECK(t.limits.timeout_ms == 5000);
  CHECK(t.gpu_max == 1);
  CHECK_FALSE(t.require_separate_ids);
  CHECK(parsed(R"({"id_slot": 1})").images == std::vector<std::string>{"host"});
  CHECK(parsed(R"({"id_slot": 1})").require_separate_ids);
  CHECK(refusal(R"({"id_slot": 1, "imgaes": []})").find("did you mean 'images'") != std::string::npos);
  CHECK(refusal(R"({"id_slot": 1, "limits": {"memroy": "1M"}})").find("did you mean") != std::string::npos);
  CHECK(refusal(R"({"id_slot": 1, "limits": {"memory": "lots"}})").find("memory") != std::string::npos);
  CHECK(refusal(R"({"images": []})").find("/id_slot: required") != std::string::npos);
  CHECK(refusal(R"({"id_slot": 0})").find("/id_slot") != std::string::npos);
  CHECK(refusal(R"({"id_slot": 1, "network": {"allow": ["bad host!"]}})").find("/network/allow/0") != std::string::npos);
  CHECK(refusal(R"({"id_slot": 1, "store": "relative"})").find("/store") != std::string::npos);
  CHECK(refusal(std::string(100, '[')).find("acme.json") != std::string::npos);
}

TEST_CASE("tenant ceilings: what a caller asked for above them is refused, defaults are lowered") {
  Tenant t = parsed(R"({"id_slot": 1, "limits": {"memory": "128M", "timeout": "10s"}, "network": {"allow": ["*.example.com", "10.0.0.0/8:*"]}, "gpu": {"max": 1}})");
  std::map<std::string, std::string> layers = {{"memory", "profile 'untrusted'"}, {"timeout", "sbx's defaults"}};
  RunSpec s;
  s.limits.memory_bytes = 512LL << 20;
  REQUIRE(check_tenant_ceilings(t, s, layers).ok());
  CHECK(s.limits.memory_bytes == 128LL << 20);  // the profile's default, lowered
  CHECK(s.limits.timeout_ms == 10000);          // unlimited by default: the ceiling
  layers["memory"] = "flag --memory";
  s.limits.memory_bytes = 1LL << 30;
  auto e = check_tenant_ceilings(t, s, layers);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message.find("tenant 'acme': memory: 1G (flag --memory) is above the tenant's ceiling (128M)") != std::string::npos);
  s.limits.memory_bytes.reset();  // --memory none
  CHECK_FALSE(check_tenant_ceilings(t, s, layers).ok());
  layers["memory"] = "pack/pack.json";
  s.limits.memory_bytes = 64LL << 20;
  CHECK(check_tenant_ceilings(t, s, layers).ok());
  // Network: inside a tenant rule, or refused.
  s.network.allow = {"api.example.com", "10.1.2.3:8080"};
  CHECK(check_tenant_ceilings(t, s, layers).ok());
  s.network.allow = {"example.com.evil.org"};
  CHECK_FALSE(check_tenant_ceilings(t, s, layers).ok());
  s.network.allow = {"*.com"};
  CHECK_FALSE(check_tenant_ceilings(t, s, layers).ok());
  s.network.allow = {"11.0.0.1"};
  CHECK_FALSE(check_tenant_ceilings(t, s, layers).ok());
  // GPUs: a quota of 1.
  s.network.allow.clear();
  s.gpu.max = -1;
  s.gpu.devices = "0,1";
  CHECK_FALSE(check_tenant_ceilings(t, s, layers).ok());
  s.gpu.devices.erase(1);  // "0" (assigning the literal trips GCC 12 -Wrestrict)
  CHECK(check_tenant_ceilings(t, s, layers).ok());
  CHECK(s.gpu.max == 1);
}

TEST_CASE("tenant images by name or whole digest; packs by whole digest only") {
  const std::string d = "sha256:" + std::string(64, 'a');
  Tenant t = parsed(R"({"id_slot": 1, "images": ["busybox", ")" + d + R"("]})");
  CHECK(tenant_allows_image(t, "busybox", ""));
  CHECK(tenant_allows_image(t, "busybox:latest", ""));
  CHECK(tenant_allows_image(t, "other", d));
  CHECK_FALSE(tenant_allows_image(t, "host", ""));
  CHECK_FALSE(tenant_allows_image(t, "other", "sha256:" + std::string(64, 'b')));
  // A prefix is only so many bits, which a tenant supplying its own image could search for.
  CHECK(refusal(R"({"id_slot": 1, "images": ["sha256:0123456789abcdef"]})").find("/images/0") != std::string::npos);
  // A pack's name is its own manifest's claim: packs are allowed by whole digests only.
  CHECK(refusal(R"({"id_slot": 1, "packs": ["acme-rules"]})").find("/packs/0: a pack is allowed by its full digest") !=
        std::string::npos);
  CHECK(parsed(R"({"id_slot": 1, "packs": [")" + d + R"("]})").packs == std::vector<std::string>{d});
}

TEST_CASE("a tenant's \"host\" admits the host root only, never an image named host") {
  const std::string d = "sha256:" + std::string(64, 'a');
  Tenant t = parsed(R"({"id_slot": 1, "images": ["host"]})");
  CHECK(tenant_allows_image(t, "host", ""));
  // An image imported as host:latest before the name was reserved: "host" is not its name here.
  CHECK_FALSE(tenant_allows_image(t, "host:latest", d));
  CHECK_FALSE(tenant_allows_image(t, "host:v1", d));
  Tenant u = parsed(R"({"id_slot": 1, "images": ["busybox"]})");
  CHECK_FALSE(tenant_allows_image(u, "host", ""));
}

TEST_CASE("id slots are disjoint slices of sbx's range; a range too small refuses") {
  RunSpec s;
  auto a = plan_identity(s, 0, 0, "sbx:1000000:327680\n", "sbx:2000000:327680\n", 1);
  auto b = plan_identity(s, 0, 0, "sbx:1000000:327680\n", "sbx:2000000:327680\n", 2);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->uid_map[0].outside == 1000000 + 65536);
  CHECK(b->uid_map[0].outside == 1000000 + 2 * 65536);
  CHECK(a->uid_map[0].outside + a->uid_map[0].count <= b->uid_map[0].outside);
  CHECK(b->gid_map[0].outside == 2000000 + 2 * 65536);
  auto too_far = plan_identity(s, 0, 0, "sbx:1000000:327680\n", "sbx:2000000:327680\n", 5);
  REQUIRE_FALSE(too_far.ok());
  CHECK(too_far.error().message.find("widen it") != std::string::npos);
  auto builtin = plan_identity(s, 0, 0, "", "", 7);
  REQUIRE(builtin.ok());
  CHECK(builtin->uid_map[0].outside == kDefaultHostBase + 7 * kMappedRange);
  auto rootless = plan_identity(s, 1000, 1000, "", "", 7);
  REQUIRE(rootless.ok());
  CHECK(rootless->uid_map[0].outside == 1000);
}

TEST_CASE("tenant store: never the untenanted state, inside or above it, nor another tenant's") {
  char tmpl[] = "/tmp/sbx-unit-store-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string root = tmpl, tenants = root + "/tenants-dir";
  std::filesystem::create_directories(tenants);
  std::filesystem::create_directories(root + "/state");
  Dirs base;
  base.state = root + "/state";
  base.traces = base.state + "/traces";
  base.data = base.state + "/data";
  base.images = base.data + "/images";
  auto write = [&](const std::string& name, const std::string& text) {
    std::FILE* f = std::fopen((tenants + "/" + name + ".json").c_str(), "w");
    REQUIRE(f);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  };
  write("B", R"({"id_slot": 2, "store": ")" + root + R"(/b-store"})");
  auto with_store = [&](const std::string& store) {
    write("acme", R"({"id_slot": 1, "store": ")" + store + R"("})");
    auto t = parse_tenant(R"({"id_slot": 1, "store": ")" + store + R"("})", "acme", tenants + "/acme.json");
    REQUIRE(t.ok());
    auto st = check_tenant_store(*t, base);
    return st.ok() ? std::string() : st.error().message;
  };
  std::filesystem::create_symlink(base.state, root + "/link");
  for (auto [store, words] : std::vector<std::pair<std::string, std::string>>{
           {base.state, "is sbx's untenanted state directory"},
           {base.state + "/traces", "is inside sbx's untenanted state directory"},
           {root, "holds sbx's untenanted state directory"},
           {root + "/link", "is sbx's untenanted state directory"},
           {root + "/b-store", "is tenant 'B''s store"},
           {root + "/b-store/x", "is inside tenant 'B''s store"}}) {
    std::string m = with_store(store);
    CAPTURE(store);
    CHECK(m.find(words) != std::string::npos);
    CHECK(m.find("acme.json") != std::string::npos);
    CHECK(m.find("/store") != std::string::npos);
  }
  CHECK(with_store(base.state + "/tenants/acme").empty());  // its own default, named
  CHECK(with_store(root + "/acme-store").empty());
  // The default store, when another tenant's names a place inside it: the other's file is named.
  write("B", R"({"id_slot": 2, "store": ")" + base.state + R"(/tenants/acme/b"})");
  auto t = parse_tenant(R"({"id_slot": 1})", "acme", tenants + "/acme.json");
  REQUIRE(t.ok());
  auto st = check_tenant_store(*t, base);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.find("B.json") != std::string::npos);
  std::filesystem::remove_all(root);
}

TEST_CASE("tenant identity: \"preferred\" shares a user namespace's range only where the namespace has no room") {
  RunSpec spec;
  auto planner_in = [&spec](const std::string& own_map, const std::string& subids) {
    OwnIdMaps own;
    own.uid_map = own.gid_map = own_map;
    own.has_setgid = true;
    return [&spec, own, subids](std::uint32_t slot) { return plan_identity(spec, 0, 0, subids, subids, slot, own); };
  };
  Tenant preferred;
  preferred.name = "t";
  preferred.id_slot = 1;
  preferred.require_separate_ids = false;
  Tenant required = preferred;
  required.require_separate_ids = true;

  // A pod with hostUsers: false: 65536 ids, its root sbx's own. Slot 1 needs 131072.
  auto pod = planner_in("0 0 1\n1 2000001 65535\n", "");
  auto shared = plan_tenant_identity(preferred, pod);
  REQUIRE(shared.plan);
  CHECK(shared.slot == 0);
  CHECK(shared.plan->uid_map.at(0).outside == 1);
  CHECK(shared.plan->uid_map.at(0).count == 65535);
  CHECK(shared.shared_why.find("no room for the tenant's slice") != std::string::npos);
  CHECK(shared.shared_why.find("needs 131072") != std::string::npos);
  auto refused = plan_tenant_identity(required, pod);
  CHECK_FALSE(refused.plan);
  CHECK(refused.slot == 1);

  // The host's own namespace with an 'sbx' range of one slice: widen it; never a shared range.
  auto narrow = plan_tenant_identity(preferred, planner_in(kInitialIdMap, "sbx:1879048192:65536\n"));
  REQUIRE_FALSE(narrow.plan);
  CHECK(narrow.plan.error().message.find("widen it") != std::string::npos);
  CHECK(narrow.shared_why.empty());

  // A namespace with no id but sbx's own: the single-id map would run the tenant as sbx's uid.
  auto single = plan_tenant_identity(preferred, planner_in("0 0 1\n", ""));
  CHECK_FALSE(single.plan);
  CHECK(single.shared_why.empty());

  // Room enough: the tenant's own slice, whatever the file prefers.
  auto roomy = plan_tenant_identity(preferred, planner_in("0 0 1\n1 2000001 262143\n", ""));
  REQUIRE(roomy.plan);
  CHECK(roomy.slot == 1);
  CHECK(roomy.plan->uid_map.at(0).outside == 1 + 65536);
  CHECK(roomy.shared_why.empty());
}
