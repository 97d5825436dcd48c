#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "runtime/server/mcp_template.hpp"
#include "tests/unit/test_util.hpp"

using sbx::mcp::ControlDir;
using sbx::test::TempDir;

namespace {

bool exists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

void touch(const std::string& p) {
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  ::close(fd);
}

}  // namespace

TEST_CASE("ControlDir: removed with its socket as it is destroyed, or left when disowned") {
  TempDir t;
  const std::string d = t.path + "/sbx-template.a";
  REQUIRE(::mkdir(d.c_str(), 0700) == 0);
  touch(d + "/sock");
  {
    auto c = ControlDir::open(d);
    REQUIRE(c.ok());
    CHECK(c->path() == d);
    ControlDir moved = std::move(*c);  // the moved-from one removes nothing
  }
  CHECK_FALSE(exists(d));

  REQUIRE(::mkdir(d.c_str(), 0700) == 0);
  {
    auto c = ControlDir::open(d);
    REQUIRE(c.ok());
    c->disown();
  }
  CHECK(exists(d));
}

TEST_CASE("ControlDir: a name taken meanwhile is never followed") {
  // The attack a removal by path lost to: the directory moved away (or removed and made again)
  // and its name now a link to a directory that has a `sock` of its own. Nothing the link leads
  // to is removed, nor the link; the socket of the directory held open is.
  TempDir t;
  const std::string d = t.path + "/sbx-template.b", away = t.path + "/away", victim = t.path + "/victim";
  REQUIRE(::mkdir(d.c_str(), 0700) == 0);
  touch(d + "/sock");
  REQUIRE(::mkdir(victim.c_str(), 0700) == 0);
  touch(victim + "/sock");
  auto c = ControlDir::open(d);
  REQUIRE(c.ok());
  CHECK(c->named());
  REQUIRE(::rename(d.c_str(), away.c_str()) == 0);
  REQUIRE(::symlink(victim.c_str(), d.c_str()) == 0);
  CHECK_FALSE(c->named());  // the server stops such a template: its workers connect by the name
  c->remove();
  CHECK(exists(victim + "/sock"));
  CHECK(exists(d));
  CHECK_FALSE(exists(away + "/sock"));
  CHECK(exists(away));  // its name is another's now: left, empty

  // Another directory made under the name: left as well.
  REQUIRE(::unlink(d.c_str()) == 0);
  REQUIRE(::rmdir(away.c_str()) == 0);
  REQUIRE(::mkdir(d.c_str(), 0700) == 0);
  auto e = ControlDir::open(d);
  REQUIRE(e.ok());
  REQUIRE(::rename(d.c_str(), away.c_str()) == 0);
  REQUIRE(::mkdir(d.c_str(), 0700) == 0);
  e->remove();
  CHECK(exists(d));
  CHECK(exists(away));
}

TEST_CASE("ControlDir: only a real directory named sbx-template.* and this user's") {
  TempDir t;
  const std::string real = t.path + "/sbx-template.c", link = t.path + "/sbx-template.d";
  REQUIRE(::mkdir(real.c_str(), 0700) == 0);
  REQUIRE(::symlink(real.c_str(), link.c_str()) == 0);
  CHECK_FALSE(ControlDir::open(link).ok());
  CHECK_FALSE(ControlDir::open(t.path).ok());  // not named as one
  CHECK_FALSE(ControlDir::open(t.path + "/sbx-template.none").ok());
  if (::geteuid() == 0) {  // as root, one of another user's (an unprivileged run cannot make one)
    REQUIRE(::chown(real.c_str(), 65534, 65534) == 0);
    auto c = ControlDir::open(real);
    REQUIRE_FALSE(c.ok());
    CHECK(c.error().message.find("is not this user's") != std::string::npos);
  }
  CHECK(exists(real));
  CHECK(exists(link));
}

TEST_CASE("parse_template_note: the host's first line gives run id, digest and key; the driver's follow") {
  const std::string key(64, 'a');
  auto n = sbx::mcp::parse_template_note("template 20261208T000000.000Z-0a0b0c0d sha256:d1 " + key + "\nready\n");
  CHECK(n.run_id == "20261208T000000.000Z-0a0b0c0d");
  CHECK(n.digest == "sha256:d1");
  CHECK(n.key == key);
  CHECK(n.ready);
  // A driver's own line cannot replace the host's: only the first "template" line counts.
  n = sbx::mcp::parse_template_note("template r1 d1 " + key + "\ntemplate r2 d2 " + std::string(64, 'b') + "\n");
  CHECK((n.run_id == "r1" && n.key == key));
  // Nor a later one when the first is not the host's.
  n = sbx::mcp::parse_template_note("template r1\ntemplate r2 d2 " + key + "\n");
  CHECK(n.run_id.empty());
  // A line without its key gives no run id: the template is never ready for calls (ready_template).
  n = sbx::mcp::parse_template_note("template r1 d1\nready\n");
  CHECK(n.run_id.empty());
  CHECK(n.key.empty());
  n = sbx::mcp::parse_template_note("failed preload 'x': ModuleNotFoundError\n");
  CHECK(n.failed == "preload 'x': ModuleNotFoundError");
  CHECK_FALSE(n.ready);
}
