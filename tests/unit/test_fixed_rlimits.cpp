// fixed_rlimits (limits_plan.hpp): every sandbox's program gets no core file and a sixteenth of
// sbx's own quotas of queued signals, message queue bytes and locked shared memory, never more
// than sbx has; a sixteenth of the kernel's default where sbx's is unlimited. The attack that the
// share stops is tests/integration/test_kernel_quotas.py.
#include <doctest/doctest.h>
#include <sys/resource.h>

#include <map>

#include "runtime/linux/limits_plan.hpp"

using namespace sbx;

namespace {
// Sets this process's soft limit of `res` for the test's scope (the hard limit is never touched,
// so the old soft limit can always be restored).
struct SoftLimit {
  int res;
  rlimit old{};
  SoftLimit(int r, rlim_t soft) : res(r) {
    REQUIRE(::getrlimit(res, &old) == 0);
    rlimit now = old;
    now.rlim_cur = soft;
    REQUIRE(::setrlimit(res, &now) == 0);
  }
  ~SoftLimit() { ::setrlimit(res, &old); }
};

std::map<int, std::uint64_t> as_map(const std::vector<std::pair<int, std::uint64_t>>& v) {
  std::map<int, std::uint64_t> m;
  for (auto& [res, value] : v) {
    CHECK(m.count(res) == 0);  // each resource once
    m[res] = value;
  }
  return m;
}
}  // namespace

TEST_CASE("fixed_rlimits: no core file, and a sixteenth of sbx's own kernel quotas") {
  rlimit sig{}, mq{}, lock{};
  REQUIRE(::getrlimit(RLIMIT_SIGPENDING, &sig) == 0);
  REQUIRE(::getrlimit(RLIMIT_MSGQUEUE, &mq) == 0);
  REQUIRE(::getrlimit(RLIMIT_MEMLOCK, &lock) == 0);
  // Soft limits at or below the hard ones (a host's defaults are thousands of signals, 800 KiB
  // and 8 MiB); a host whose hard limits are lower still has no room to set them.
  auto room = [](const rlimit& r, rlim_t v) { return r.rlim_max == RLIM_INFINITY || r.rlim_max >= v; };
  if (!room(sig, 1600) || !room(mq, 16000) || !room(lock, 65536)) {
    MESSAGE("skipped: a hard limit of this host is below the soft limit the test sets");
    return;
  }
  SoftLimit s(RLIMIT_SIGPENDING, 1600), m(RLIMIT_MSGQUEUE, 16000), l(RLIMIT_MEMLOCK, 65536);
  auto got = as_map(fixed_rlimits());
  CHECK(got.at(RLIMIT_CORE) == 0);
  CHECK(got.at(RLIMIT_SIGPENDING) == 100);
  CHECK(got.at(RLIMIT_MSGQUEUE) == 1000);
  CHECK(got.at(RLIMIT_MEMLOCK) == 4096);
  CHECK(got.size() == 4);
}

TEST_CASE("fixed_rlimits: an unlimited quota shares out the kernel's default; a small one rounds down") {
  const auto inf = static_cast<std::uint64_t>(RLIM_INFINITY);
  CHECK(kernel_quota_share(inf, 819200) == 51200u);
  CHECK(kernel_quota_share(96367, 819200) == 6022u);  // a limit of its own: the default is not used
  CHECK(kernel_quota_share(15, 0) == 0u);             // a quota under 16: none for a sandbox
  CHECK(kernel_quota_share(0, 0) == 0u);
}
