#include <doctest/doctest.h>

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "runtime/base/openat2.hpp"
#include "tests/unit/test_util.hpp"

namespace {

using sbx::test::TempDir;

// Renames a directory back and forth until stopped: every rename bumps the kernel's rename
// sequence, which an openat2(RESOLVE_BENEATH) walking a ".." checks (fs/namei.c) and answers with
// EAGAIN when it moved, as a host busy building other sandboxes does (mounts bump another).
struct Renamer {
  std::atomic<bool> stop{false};
  std::thread t;
  explicit Renamer(const TempDir& dir) {
    ::mkdir((dir / "r1").c_str(), 0755);
    ::mkdir((dir / "r2").c_str(), 0755);
    ::mkdir((dir / "r1/x").c_str(), 0755);
    const std::string a = dir / "r1/x", b = dir / "r2/x";
    t = std::thread([this, a, b] {
      while (!stop.load(std::memory_order_relaxed)) {
        (void)std::rename(a.c_str(), b.c_str());
        (void)std::rename(b.c_str(), a.c_str());
      }
    });
  }
  ~Renamer() {
    stop = true;
    t.join();
  }
};

}  // namespace

TEST_CASE("openat2 beneath a tree: the EAGAIN a busy host causes is retried, never an error") {
  TempDir dir("sbx-openat2");
  REQUIRE(::mkdir((dir / "tree").c_str(), 0755) == 0);
  REQUIRE(::mkdir((dir / "tree/a").c_str(), 0755) == 0);
  sbx::UniqueFd tree(::open((dir / "tree").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(tree.ok());
  const char* path = "a/../a";  // one "..": what a relative symlink in a bound tree or an image has
  Renamer renamer(dir);
  // The raw system call does answer EAGAIN here (else this test would prove nothing). Tried for
  // up to 20 s rather than a number of times: on a loaded host the renamer may get the CPU only
  // now and then (200,000 tries once saw none while other builds ran).
  int raw_eagain = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (raw_eagain == 0 && std::chrono::steady_clock::now() < until) {
    struct open_how how = {};
    how.flags = O_PATH | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH;
    long fd = ::syscall(SYS_openat2, tree.get(), path, &how, sizeof how);
    if (fd >= 0) ::close(static_cast<int>(fd));
    else if (errno == EAGAIN) ++raw_eagain;
  }
  CHECK(raw_eagain > 0);
  int failed = 0;
  for (int i = 0; i < 5000; ++i) {
    int fd = sbx::openat2_retrying(tree.get(), path, O_PATH | O_CLOEXEC, RESOLVE_BENEATH);
    if (fd >= 0) ::close(fd);
    else ++failed;
  }
  CHECK(failed == 0);
}

TEST_CASE("openat2_retrying keeps every other answer: an escape is refused, a symlink is refused") {
  TempDir dir("sbx-openat2");
  REQUIRE(::mkdir((dir / "tree").c_str(), 0755) == 0);
  REQUIRE(::symlink("/etc", (dir / "tree/out").c_str()) == 0);
  sbx::UniqueFd tree(::open((dir / "tree").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(tree.ok());
  CHECK(sbx::openat2_retrying(tree.get(), "../", O_PATH | O_CLOEXEC, RESOLVE_BENEATH) == -1);
  CHECK(errno == EXDEV);
  CHECK(sbx::openat2_retrying(tree.get(), "out/passwd", O_PATH | O_CLOEXEC, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) ==
        -1);
  CHECK(errno == ELOOP);
  int made = sbx::openat2_retrying(tree.get(), "new", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, RESOLVE_BENEATH, 0600);
  REQUIRE(made >= 0);
  struct stat st;
  CHECK(::fstat(made, &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  ::close(made);
}
