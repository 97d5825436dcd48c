#include <doctest/doctest.h>

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "runtime/linux/mount_target.hpp"

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/sbx-mtarget-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
};

bool exists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

// A "new root" with its own tree, and an "outside" directory next to it that symlinks aim at.
struct Fixture {
  TempDir t;
  std::string root, outside;
  sbx::UniqueFd root_fd;
  Fixture() {
    root = t.path + "/root";
    outside = t.path + "/outside";
    REQUIRE(::mkdir(root.c_str(), 0755) == 0);
    REQUIRE(::mkdir(outside.c_str(), 0755) == 0);
    REQUIRE(::mkdir((root + "/src").c_str(), 0755) == 0);
    REQUIRE(::mkdir((root + "/src/real").c_str(), 0755) == 0);
    REQUIRE(::symlink(outside.c_str(), (root + "/src/abs").c_str()) == 0);
    REQUIRE(::symlink("../../../outside", (root + "/src/rel").c_str()) == 0);
    REQUIRE(::symlink("/src/real", (root + "/src/inside").c_str()) == 0);
    root_fd = sbx::UniqueFd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    REQUIRE(root_fd.ok());
  }
};

}  // namespace

TEST_CASE("open_mount_target creates the missing levels inside the root") {
  Fixture f;
  auto t = sbx::open_mount_target(f.root_fd.get(), "/a/b/c", true);
  REQUIRE(t.ok());
  CHECK(t->name == "c");
  struct stat st;
  REQUIRE(::fstat(t->node.get(), &st) == 0);
  CHECK(S_ISDIR(st.st_mode));
  auto file = sbx::open_mount_target(f.root_fd.get(), "/a/b/file", false);
  REQUIRE(file.ok());
  REQUIRE(::stat((f.root + "/a/b/file").c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK(!sbx::open_mount_target(f.root_fd.get(), "/a/b/file", true).ok());  // a file where a dir is wanted
}

TEST_CASE("a symlink aimed out of the root never leads a mount point there") {
  Fixture f;
  for (const char* dst : {"/src/abs/x", "/src/rel/x", "/src/abs/deeper/x"}) {
    CAPTURE(dst);
    auto t = sbx::open_mount_target(f.root_fd.get(), dst, true);
    CHECK(!t.ok());
    if (!t.ok()) CHECK(t.error().err == ELOOP);
  }
  CHECK(!sbx::open_mount_target(f.root_fd.get(), "/src/abs/f", false).ok());
  CHECK(!sbx::open_mount_target(f.root_fd.get(), "/src/abs", true).ok());  // the last component a symlink
  CHECK(::rmdir(f.outside.c_str()) == 0);  // still empty
}

TEST_CASE("a symlink that stays inside the root is followed there") {
  Fixture f;
  auto t = sbx::open_mount_target(f.root_fd.get(), "/src/inside/x", true);
  REQUIRE(t.ok());
  CHECK(exists(f.root + "/src/real/x"));
  // An absolute symlink means the sandbox's root, not the host's: /src/abs -> <outside> is
  // <root>/<outside> inside, which does not exist, and is not created through the link.
  CHECK(!exists(f.outside + "/x"));
}
