// The cgroup namespace root inside a container (runtime/linux/cgroup_ns.hpp): the doctor's judgement
// and cgroup-init's refusals, on fake cgroupfs trees. Moving processes for real is proven in the
// qemu guest (tests/vm/guest-tests.sh, "cgroup namespace with processes at its root").
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "runtime/linux/cgroup_ns.hpp"

using namespace sbx;

namespace {
struct FakeCgroupfs {
  std::string path;
  FakeCgroupfs() {
    char t[] = "/tmp/sbx-test-cgroupns-XXXXXX";
    REQUIRE(::mkdtemp(t) != nullptr);
    path = t;
  }
  ~FakeCgroupfs() { std::system(("rm -rf '" + path + "'").c_str()); }
  void write(const std::string& rel, const std::string& data) { std::ofstream(path + "/" + rel) << data; }
};

CgroupNsRoot busy_root() {
  CgroupNsRoot r;
  r.mount = "/sys/fs/cgroup";
  r.namespace_root = true;
  r.procs = 2;
  r.controllers = {"cpuset", "cpu", "io", "memory", "pids"};
  r.writable = true;
  r.euid_root = true;
  return r;
}
}  // namespace

TEST_CASE("cgroupns: count_procs counts every entry, invisible ones (0) included") {
  CHECK(count_procs("") == 0);
  CHECK(count_procs("1\n") == 1);
  CHECK(count_procs("1\n17\n0\n0\n") == 4);
}

TEST_CASE("cgroupns: the real root is the cgroup without cgroup.type") {
  FakeCgroupfs fs;
  fs.write("cgroup.procs", "1\n");
  CHECK(is_real_cgroup_root(fs.path));
  fs.write("cgroup.type", "domain\n");
  CHECK_FALSE(is_real_cgroup_root(fs.path));
  CHECK_FALSE(is_real_cgroup_root(fs.path + "/nonexistent"));
}

TEST_CASE("cgroupns: doctor names the fix when the namespace root holds the container's processes") {
  auto r = assess_cgroup_namespace(busy_root());
  CHECK(r.name == "cgroupns");
  CHECK_FALSE(r.required);
  CHECK(r.status == CheckStatus::degraded);
  CHECK(r.detail.find("2 processes") != std::string::npos);
  CHECK(r.detail.find("not exempt") != std::string::npos);
  CHECK(r.hint.find("sbx cgroup-init") != std::string::npos);
  CHECK(r.hint.find("+memory +pids +cpu") != std::string::npos);
}

TEST_CASE("cgroupns: doctor is content once the root is empty or its controllers are enabled") {
  auto empty = busy_root();
  empty.procs = 0;
  auto r = assess_cgroup_namespace(empty);
  CHECK(r.status == CheckStatus::ok);
  CHECK(r.hint.empty());
  auto enabled = busy_root();
  enabled.procs = 0;
  enabled.subtree_control = {"memory", "pids", "cpu"};
  r = assess_cgroup_namespace(enabled);
  CHECK(r.status == CheckStatus::ok);
  CHECK(r.detail.find("/sys/fs/cgroup/sbx") != std::string::npos);
}

TEST_CASE("cgroupns: doctor outside a container, read-only mounts, nothing delegated") {
  auto host = busy_root();
  host.namespace_root = false;
  CHECK(assess_cgroup_namespace(host).status == CheckStatus::ok);
  auto ro = busy_root();
  ro.writable = false;
  auto r = assess_cgroup_namespace(ro);
  CHECK(r.status == CheckStatus::degraded);
  CHECK(r.detail.find("read-only") != std::string::npos);
  CHECK(r.hint.find("read-write") != std::string::npos);
  auto none = busy_root();
  none.controllers = {"cpuset", "io"};
  r = assess_cgroup_namespace(none);
  CHECK(r.status == CheckStatus::degraded);
  CHECK(r.detail.find("delegated none") != std::string::npos);
  CgroupNsRoot nomount;
  CHECK(assess_cgroup_namespace(nomount).status == CheckStatus::ok);
}

TEST_CASE("cgroupns: cgroup-init writes nothing where it has no business") {
  FakeCgroupfs fs;
  fs.write("cgroup.procs", "1\n");
  fs.write("cgroup.controllers", "memory pids cpu\n");
  CgroupInfo info;
  info.layout = "v2";
  info.mount = fs.path;
  info.self_path.assign(1, '/');  // (= "/" trips a GCC 12 -Wrestrict false positive)
  SUBCASE("bad leaf names are the caller's mistake") {
    for (const char* bad : {"", "..", "a/b", "sbx", "sbx-supervisor", "x y", "\x1b[31m"}) {
      auto r = cgroup_init(info, bad);
      REQUIRE_FALSE(r);
      CHECK(r.error().err == EINVAL);
      CHECK(r.error().message.rfind("invalid leaf", 0) == 0);
    }
  }
  SUBCASE("the real root: exempt, and its processes are the host's: nothing to do") {
    auto r = cgroup_init(info, "init");
    REQUIRE(r);
    CHECK(r->nothing_to_do.find("real root") != std::string::npos);
    CHECK(r->moved.empty());
  }
  SUBCASE("a namespace root without our controllers") {
    fs.write("cgroup.type", "domain\n");
    fs.write("cgroup.controllers", "cpuset io\n");
    info.namespace_root = true;
    auto r = cgroup_init(info, "init");
    REQUIRE_FALSE(r);
    CHECK(r.error().err == ENOTSUP);
  }
  SUBCASE("not the root of our namespace: nothing to do") {
    fs.write("cgroup.type", "domain\n");
    auto r = cgroup_init(info, "init");
    REQUIRE(r);
    CHECK(r->nothing_to_do.find("not the root") != std::string::npos);
  }
  struct stat st;
  CHECK(::stat((fs.path + "/init").c_str(), &st) != 0);  // no leaf was created
  CgroupInfo none;
  none.layout = "none";
  CHECK_FALSE(cgroup_init(none, "init"));
}
