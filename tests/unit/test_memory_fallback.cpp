#include <doctest/doctest.h>

#include "runtime/linux/memory_fallback.hpp"
#include "runtime/linux/mounts.hpp"

using namespace sbx;

namespace {
constexpr std::int64_t M = 1LL << 20;
RunSpec spec_with(std::int64_t tmp, std::int64_t out) {
  RunSpec s;
  s.limits.tmp_size_bytes = tmp;
  s.limits.out_size_bytes = out;
  return s;
}
}  // namespace

TEST_CASE("memory fallback: /tmp counts twice (/dev/shm has its size), an image adds the upper layer") {
  auto s = spec_with(64 * M, 32 * M);
  auto v = tmpfs_shares(s, {});
  REQUIRE(v.size() == 3);
  CHECK(v[1].path == "/dev/shm");
  CHECK(v[1].bytes == 64 * M);
  s.image = "busybox";
  s.tmpfs.push_back({"/scratch", 8 * M});
  v = tmpfs_shares(s, {});
  REQUIRE(v.size() == 5);
  CHECK(v[3].caller_set);
  CHECK(v[4].key == "upper");
}

TEST_CASE("memory fallback: sizes that fit are kept; profile sizes scale; the caller's are refused") {
  auto ok = fit_tmpfs(tmpfs_shares(spec_with(64 * M, 64 * M), {}), 512 * M);
  REQUIRE(ok);
  CHECK_FALSE(ok->scaled);
  CHECK(ok->total == 192 * M);

  auto scaled = fit_tmpfs(tmpfs_shares(spec_with(64 * M, 64 * M), {}), 128 * M);
  REQUIRE(scaled);
  CHECK(scaled->scaled);
  CHECK(scaled->asked_total == 192 * M);
  CHECK(scaled->total <= 128 * M);
  CHECK(scaled->total > 127 * M);
  for (auto& s : scaled->shares) CHECK(s.bytes % 4096 == 0);

  auto spec = spec_with(64 * M, 64 * M);
  spec.tmpfs.push_back({"/scratch", 100 * M});
  auto mixed = fit_tmpfs(tmpfs_shares(spec, {}), 128 * M);  // 28M left for three profile mounts
  REQUIRE(mixed);
  CHECK(mixed->shares[3].bytes == 100 * M);
  CHECK(mixed->total <= 128 * M);

  spec.tmpfs[0].size_bytes = 200 * M;
  auto refused = fit_tmpfs(tmpfs_shares(spec, {}), 128 * M);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.find("/scratch 200M (tmpfs)") != std::string::npos);
  CHECK(refused.error().stage == sbx::Stage("limits"));

  auto asked = fit_tmpfs(tmpfs_shares(spec_with(64 * M, 64 * M), {"tmp_size"}), 100 * M);
  REQUIRE_FALSE(asked);  // /tmp and /dev/shm are the caller's 128M: nothing to scale
}

TEST_CASE("memory fallback: the budget lands in the mount plan") {
  auto spec = spec_with(64 * M, 64 * M);
  spec.image = "busybox";
  spec.tmpfs.push_back({"/a", 4 * M});
  auto b = fit_tmpfs(tmpfs_shares(spec, {}), 64 * M);
  REQUIRE(b);
  MountPlan plan;
  plan.tmpfs = spec.tmpfs;
  apply_tmpfs_budget(*b, plan);
  CHECK(plan.tmp_size_bytes == b->shares[0].bytes);
  CHECK(plan.out_size_bytes == b->shares[2].bytes);
  CHECK(plan.tmpfs[0].size_bytes == 4 * M);
  CHECK(plan.upper_size_bytes == b->shares[4].bytes);
  CHECK(plan.tmp_size_bytes + plan.tmp_size_bytes + plan.out_size_bytes + 4 * M + plan.upper_size_bytes <= 64 * M);
}

TEST_CASE("memory fallback: SysV IPC caps fit the limit, and stay within what the kernel takes") {
  auto value = [](const std::vector<SysvKnob>& caps, const std::string& name) {
    for (auto& k : caps)
      if (name == k.path) return k.value;
    return std::string("missing");
  };
  auto small = sysv_ipc_caps(32LL << 20, 4096);
  CHECK(value(small, "shmmax") == "33554432");
  CHECK(value(small, "shmall") == "8192");
  CHECK(value(small, "msgmnb") == "16384");
  CHECK(value(small, "msgmni") == "15");  // 32M / (16384 * 129)
  CHECK(value(small, "sem") == "32000 65536 500 8192");
  // A terabyte: ids at the kernel's 32000, semaphores at its default count (an int there).
  auto huge = sysv_ipc_caps(1LL << 40, 4096);
  CHECK(value(huge, "msgmni") == "32000");
  CHECK(value(huge, "sem") == "32000 1024000000 500 32000");
  CHECK(value(sysv_ipc_caps(0, 4096), "msgmni") == "1");
}
