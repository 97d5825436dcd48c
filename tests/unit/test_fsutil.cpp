#include <doctest/doctest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "runtime/base/fsutil.hpp"
#include "tests/unit/test_util.hpp"

namespace {

using sbx::test::TempDir;

int count_entries(const std::string& dir) {
  int n = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (auto* e = ::readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") ++n;
    ::closedir(d);
  }
  return n;
}

}  // namespace

TEST_CASE("ensure_dir creates every missing level with the mode, and is idempotent") {
  TempDir t;
  std::string deep = t.path + "/a/b//c/";
  REQUIRE(sbx::ensure_dir(deep, 0700).ok());
  struct stat st;
  REQUIRE(::stat((t.path + "/a/b/c").c_str(), &st) == 0);
  CHECK(S_ISDIR(st.st_mode));
  CHECK((st.st_mode & 0777) == 0700);
  REQUIRE(::stat((t.path + "/a").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(sbx::ensure_dir(t.path + "/a/b/c", 0700).ok());  // exists already: fine
}

TEST_CASE("ensure_dir fails with ENOTDIR when a file is in the way, naming the path") {
  TempDir t;
  REQUIRE(sbx::write_file_durable(t.path + "/f", "x").ok());
  auto st = sbx::ensure_dir(t.path + "/f/sub");
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().err == ENOTDIR);
  CHECK(st.error().message.find(t.path + "/f") != std::string::npos);
  auto st2 = sbx::ensure_dir(t.path + "/f");
  REQUIRE_FALSE(st2.ok());
  CHECK(st2.error().err == ENOTDIR);
}

TEST_CASE("write_file_durable writes, replaces atomically, and leaves no temporary behind") {
  TempDir t;
  std::string p = t.path + "/rec.json";
  REQUIRE(sbx::write_file_durable(p, "first", 0600).ok());
  CHECK(sbx::read_file(p).value() == "first");
  struct stat st;
  REQUIRE(::stat(p.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);

  std::string big(1 << 20, 'z');  // larger than one pipe/page write, exercises the write loop
  REQUIRE(sbx::write_file_durable(p, big).ok());
  CHECK(sbx::read_file(p).value() == big);
  CHECK(count_entries(t.path) == 1);  // only rec.json: the temp file was renamed, not copied

  REQUIRE(sbx::write_file_durable(p, "").ok());
  CHECK(sbx::read_file(p).value().empty());
}

TEST_CASE("write_file_durable into a missing directory fails and says where") {
  TempDir t;
  auto st = sbx::write_file_durable(t.path + "/missing/rec.json", "x");
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().err == ENOENT);
  CHECK(st.error().message.find(t.path + "/missing/") != std::string::npos);
}

TEST_CASE("read_file of a missing file carries ENOENT and the path") {
  auto r = sbx::read_file("/nonexistent/sbx-test-file");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().err == ENOENT);
  CHECK(r.error().message.find("/nonexistent/sbx-test-file") != std::string::npos);
}

TEST_CASE("flock_waiting takes a free lock at once, and gives up on a held one after its wait") {
  TempDir t;
  std::string path = t.path + "/lock";
  sbx::UniqueFd a(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  sbx::UniqueFd b(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(sbx::flock_waiting(a.get(), LOCK_EX, 0) == 0);
  // A second open file description is another holder: shared or exclusive, it waits, then says so.
  CHECK(sbx::flock_waiting(b.get(), LOCK_SH, 30) == EWOULDBLOCK);
  CHECK(sbx::flock_waiting(b.get(), LOCK_EX, 30) == EWOULDBLOCK);
  ::flock(a.get(), LOCK_UN);
  CHECK(sbx::flock_waiting(b.get(), LOCK_SH, 30) == 0);
  CHECK(sbx::flock_waiting(-1, LOCK_SH, 30) == EBADF);
}

TEST_CASE("make_dir_writable_at changes a directory, never what a symlink in its place points at") {
  TempDir t;
  std::string target = t.path + "/target", locked = t.path + "/locked";
  REQUIRE(::mkdir(target.c_str(), 0500) == 0);
  REQUIRE(::mkdir(locked.c_str(), 0500) == 0);
  REQUIRE(::symlink(target.c_str(), (t.path + "/link").c_str()) == 0);
  int dir = ::open(t.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(dir >= 0);
  CHECK_FALSE(sbx::make_dir_writable_at(dir, "link"));
  CHECK(sbx::make_dir_writable_at(dir, "locked"));
  ::close(dir);
  CHECK_FALSE(sbx::make_dir_writable_at(AT_FDCWD, t.path + "/link"));
  struct stat st;
  REQUIRE(::stat(target.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0500);  // the link's target is untouched
  REQUIRE(::stat(locked.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(sbx::remove_tree(t.path + "/link").ok());  // the link goes, its target stays
  CHECK(::access(target.c_str(), F_OK) == 0);
}
