// hold_kernel_quotas and fixed_rlimits (limits_plan.hpp): sbx holds its own soft limit of the
// quotas of queued signals, message queue bytes and locked shared memory at half its hard limit
// (of the kernel's default where that is unlimited), and every sandbox's program gets no core file
// and an eighth of that held limit, never more than sbx has. The attacks that these bounds stop
// are in tests/integration/test_kernel_quotas.py.
#include <sys/wait.h>
#include <unistd.h>

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

TEST_CASE("fixed_rlimits: no core file, and an eighth of sbx's own (held) kernel quotas") {
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
  CHECK(got.at(RLIMIT_SIGPENDING) == 200);
  CHECK(got.at(RLIMIT_MSGQUEUE) == 2000);
  CHECK(got.at(RLIMIT_MEMLOCK) == 8192);
  CHECK(got.size() == 4);
}

TEST_CASE("fixed_rlimits: an unlimited quota shares out half the kernel's default; a small one rounds down") {
  const auto inf = static_cast<std::uint64_t>(RLIM_INFINITY);
  CHECK(kernel_quota_share(inf, 819200) == 51200u);   // half of it held by sbx, an eighth of that
  CHECK(kernel_quota_share(48183, 819200) == 6022u);  // a limit of its own: the default is not used
  CHECK(kernel_quota_share(7, 0) == 0u);              // a quota under 8: none for a sandbox
  CHECK(kernel_quota_share(0, 0) == 0u);
}

TEST_CASE("held_kernel_quota: half the hard limit, half the kernel's default where it is unlimited") {
  const auto inf = static_cast<std::uint64_t>(RLIM_INFINITY);
  CHECK(held_kernel_quota(96367, 0) == 48183u);
  CHECK(held_kernel_quota(inf, 8u << 20) == 4u << 20);
  CHECK(held_kernel_quota(1, 0) == 0u);
}

namespace {
// In a child, since it lowers the process's own soft limits: each of `soft` set, then
// hold_kernel_quotas twice; the child's exit status says which check failed (0: none).
int held_in_child(rlim_t sig_soft, rlim_t mq_soft) {
  pid_t pid = ::fork();
  if (pid == 0) {
    rlimit sig{}, mq{};
    if (::getrlimit(RLIMIT_SIGPENDING, &sig) != 0 || ::getrlimit(RLIMIT_MSGQUEUE, &mq) != 0) ::_exit(10);
    sig.rlim_cur = sig_soft;
    mq.rlim_cur = mq_soft;
    if (::setrlimit(RLIMIT_SIGPENDING, &sig) != 0 || ::setrlimit(RLIMIT_MSGQUEUE, &mq) != 0) ::_exit(11);
    for (int i = 0; i < 2; ++i) {  // idempotent: a second sbx process below the first holds the same
      if (!hold_kernel_quotas()) ::_exit(12);
      rlimit s{}, m{};
      ::getrlimit(RLIMIT_SIGPENDING, &s);
      ::getrlimit(RLIMIT_MSGQUEUE, &m);
      if (s.rlim_max != sig.rlim_max || m.rlim_max != mq.rlim_max) ::_exit(13);  // hard limits untouched
      if (s.rlim_cur != std::min<rlim_t>(sig_soft, sig.rlim_max / 2)) ::_exit(14);
      if (m.rlim_cur != std::min<rlim_t>(mq_soft, mq.rlim_max / 2)) ::_exit(15);
    }
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}
}  // namespace

TEST_CASE("hold_kernel_quotas: a soft limit above half the hard one comes down to it; one below stays") {
  rlimit sig{}, mq{};
  REQUIRE(::getrlimit(RLIMIT_SIGPENDING, &sig) == 0);
  REQUIRE(::getrlimit(RLIMIT_MSGQUEUE, &mq) == 0);
  if (sig.rlim_max == RLIM_INFINITY || mq.rlim_max == RLIM_INFINITY || sig.rlim_max < 64 || mq.rlim_max < 64) {
    MESSAGE("skipped: this host's hard limits are unlimited or tiny (the unlimited case is held_kernel_quota's)");
    return;
  }
  CHECK(held_in_child(sig.rlim_max, mq.rlim_max) == 0);  // down to half
  CHECK(held_in_child(10, 20) == 0);                     // lower already: kept
}
