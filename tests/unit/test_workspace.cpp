#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>

#include "runtime/launch/workspace.hpp"
#include "test_util.hpp"

using namespace sbx;
using sbx::test::TempDir;

namespace {
RunSpec host_spec(std::vector<std::string> argv) {
  RunSpec s;
  s.image = "host";
  s.workdir = "/tmp";
  s.argv = std::move(argv);
  return s;
}
auto has(std::set<std::string> files) {
  return [files = std::move(files)](const std::string& p) { return files.count(p) > 0; };
}
}  // namespace

TEST_CASE("workspace: --bind . and a relative source without destination mean the same absolute path") {
  std::vector<BindMount> b = {{".", ".", false}, {"src/../data", "src/../data", true}, {"rel", "/in/x", false}};
  anchor_relative_binds(b, "/home/u/proj");
  CHECK(b[0].dst == "/home/u/proj");
  CHECK(b[1].dst == "/home/u/proj/data");
  CHECK(b[1].rw);
  CHECK(b[2].dst == "/in/x");  // a destination the caller named stays as given
  CHECK(absolute_lexical("/a/b", "../../..") == "/");
  CHECK(absolute_lexical("/a", "./b//c/.") == "/a/b/c");
}

TEST_CASE("workspace: binds the directory read-write, .git read-only, and starts there") {
  TempDir d;
  REQUIRE(::mkdir((d.path + "/.git").c_str(), 0700) == 0);
  RunSpec s = host_spec({"make"});
  REQUIRE(add_workspace(s, d.path, {"/nonexistent-home"}, false));
  REQUIRE(s.binds.size() == 2);
  CHECK(s.binds[0] == BindMount{d.path, d.path, true});
  CHECK(s.binds[1] == BindMount{d.path + "/.git", d.path + "/.git", false});  // later: mounted on top
  CHECK(s.workdir == d.path);

  RunSpec kept = host_spec({"make"});
  REQUIRE(add_workspace(kept, d.path, {}, true));
  CHECK(kept.workdir == "/tmp");  // --workdir wins

  // The caller's own read-only bind below the workspace is mounted over it, not hidden under it:
  // the workspace's binds go first (binds are mounted in order).
  RunSpec own = host_spec({"make"});
  own.binds.push_back({d.path + "/secrets", d.path + "/secrets", false});
  REQUIRE(add_workspace(own, d.path, {}, false));
  REQUIRE(own.binds.size() == 3);
  CHECK(own.binds[0] == BindMount{d.path, d.path, true});
  CHECK(own.binds[1] == BindMount{d.path + "/.git", d.path + "/.git", false});
  CHECK(own.binds[2] == BindMount{d.path + "/secrets", d.path + "/secrets", false});
}

TEST_CASE("workspace: refuses /, the home directory and what holds it, and a symlinked .git") {
  RunSpec s = host_spec({"sh"});
  auto root = add_workspace(s, "/", {"/home/u"}, false);
  REQUIRE(!root);
  CHECK(root.error().message.find("the whole host") != std::string::npos);
  auto home = add_workspace(s, "/home/u", {"/home/u/"}, false);
  REQUIRE(!home);
  CHECK(home.error().message.find("is the home directory") != std::string::npos);
  auto above = add_workspace(s, "/home", {"/home/u"}, false);
  REQUIRE(!above);
  CHECK(above.error().message.find("holds the home directory") != std::string::npos);
  CHECK(s.binds.empty());
  // Under sudo, the invoking user's home is protected too (protected_homes): any one of them.
  auto second = add_workspace(s, "/home/v", {"/root", "/home/v"}, false);
  REQUIRE(!second);
  CHECK(second.error().message.find("the home directory /home/v") != std::string::npos);

  TempDir d;
  REQUIRE(::symlink("/tmp", (d.path + "/.git").c_str()) == 0);
  auto link = add_workspace(s, d.path, {}, false);
  REQUIRE(!link);
  CHECK(link.error().message.find("symlink") != std::string::npos);
}

TEST_CASE("workspace: the opened source must be the directory sbx runs in, and not / by another path") {
  TempDir d, other;
  RunSpec s = host_spec({"true"});
  s.binds.push_back({d.path, d.path, true});
  auto opened = open_bind_sources(s, "/");
  REQUIRE(opened);
  UniqueFd here(::open(d.path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  UniqueFd elsewhere(::open(other.path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  CHECK(check_workspace_source(*opened, d.path, here.get(), {}));
  auto swapped = check_workspace_source(*opened, d.path, elsewhere.get(), {});
  REQUIRE(!swapped);
  CHECK(swapped.error().message.find("moved or replaced") != std::string::npos);
  auto as_home = check_workspace_source(*opened, d.path, here.get(), {d.path + "/."});
  REQUIRE(!as_home);
  CHECK(as_home.error().message.find("home directory") != std::string::npos);
  CHECK(check_workspace_source(*opened, "", elsewhere.get(), {}));  // no workspace
  // A home reached through a symlink: the workspace is found to hold it by identity.
  REQUIRE(::mkdir((d.path + "/u").c_str(), 0700) == 0);
  REQUIRE(::symlink(d.path.c_str(), (other.path + "/home").c_str()) == 0);
  auto via_link = check_workspace_source(*opened, d.path, here.get(), {other.path + "/home/u"});
  REQUIRE(!via_link);
  CHECK(via_link.error().message.find("is or holds the home directory") != std::string::npos);
  // The directory renamed between the plan and the check: no source is the workspace any more.
  auto renamed = check_workspace_source(*opened, d.path + "-renamed", here.get(), {});
  REQUIRE(!renamed);
  CHECK(renamed.error().message.find("no bind is the directory sbx runs in") != std::string::npos);
}

TEST_CASE("workspace: its .git source must be the workspace's own, not a symlink followed at open") {
  TempDir d, other;
  REQUIRE(::mkdir((d.path + "/.git").c_str(), 0700) == 0);
  RunSpec s = host_spec({"true"});
  REQUIRE(add_workspace(s, d.path, {}, false));
  UniqueFd here(::open(d.path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  auto good = open_bind_sources(s, "/");
  REQUIRE(good);
  CHECK(check_workspace_source(*good, d.path, here.get(), {}));
  // After add_workspace's lstat, .git becomes a symlink to a directory the run could then write.
  REQUIRE(::rmdir((d.path + "/.git").c_str()) == 0);
  REQUIRE(::symlink(other.path.c_str(), (d.path + "/.git").c_str()) == 0);
  auto swapped = open_bind_sources(s, "/");
  REQUIRE(swapped);
  auto r = check_workspace_source(*swapped, d.path, here.get(), {});
  REQUIRE(!r);
  CHECK(r.error().message.find("replaced by a symlink") != std::string::npos);
}

TEST_CASE("workspace: the hint for a host file the program was handed but cannot see") {
  const std::string cwd = "/home/u/proj";
  // python3 script.py: exit 2, "can't open file '/tmp/script.py'"
  auto py = missing_host_path_hint(host_spec({"python3", "script.py"}), 2, cwd, has({cwd + "/script.py"}));
  CHECK(py.find("script.py is in /home/u/proj on the host") != std::string::npos);
  CHECK(py.find("--workspace") != std::string::npos);
  // bash /abs/script.sh: 127
  auto abs = missing_host_path_hint(host_spec({"bash", "/srv/x/run.sh"}), 127, cwd, has({"/srv/x/run.sh"}));
  CHECK(abs.find("/srv/x/run.sh is on the host but not in the sandbox; bind its directory (--bind /srv/x") !=
        std::string::npos);
  // make: 2, "No targets specified and no makefile found"
  auto mk = missing_host_path_hint(host_spec({"make"}), 2, cwd, has({cwd + "/Makefile"}));
  CHECK(mk.find("make looks for Makefile") != std::string::npos);
  // Not for another status, a file the sandbox has, an option, or a word looked up in PATH.
  CHECK(missing_host_path_hint(host_spec({"python3", "script.py"}), 0, cwd, has({cwd + "/script.py"})).empty());
  CHECK(missing_host_path_hint(host_spec({"python3", "script.py"}), 137, cwd, has({cwd + "/script.py"})).empty());
  CHECK(missing_host_path_hint(host_spec({"cat", "/etc/ssl/x"}), 1, cwd, has({"/etc/ssl/x"})).empty());
  CHECK(missing_host_path_hint(host_spec({"ls", "-l"}), 2, cwd, has({cwd + "/-l"})).empty());
  CHECK(missing_host_path_hint(host_spec({"python3"}), 1, cwd, has({cwd + "/python3"})).empty());
}

TEST_CASE("workspace: no hint once the directory is where the program looks") {
  const std::string cwd = "/home/u/proj";
  RunSpec ws = host_spec({"python3", "script.py"});
  ws.binds.push_back({cwd, cwd, true});
  ws.workdir = cwd;
  CHECK(missing_host_path_hint(ws, 2, cwd, has({cwd + "/script.py"})).empty());
  // Bound elsewhere, started there: the same file, so no hint either.
  RunSpec work = host_spec({"make"});
  work.binds.push_back({".", "/work", false});
  work.workdir = "/work";
  CHECK(missing_host_path_hint(work, 2, cwd, has({cwd + "/Makefile"})).empty());
  // Bound, but the program starts in /tmp: the relative name still misses.
  RunSpec bound = host_spec({"python3", "script.py"});
  bound.binds.push_back({cwd, cwd, false});
  CHECK(!missing_host_path_hint(bound, 2, cwd, has({cwd + "/script.py"})).empty());
  CHECK(host_path_in_sandbox(bound, cwd + "/a/b", cwd) == cwd + "/a/b");
  CHECK(host_path_in_sandbox(bound, "/tmp/a", cwd) == std::nullopt);
  CHECK(host_path_in_sandbox(bound, "/usr/bin/env", cwd) == "/usr/bin/env");
}

TEST_CASE("passwd_home: /etc/passwd read by sbx itself, never glibc's NSS in a static binary") {
  const std::string db =
      "root:x:0:0:root:/root:/bin/bash\n"
      "# a comment\n"
      "short:x:7\n"
      "alice:x:1000:1000:Alice,,,:/home/alice:/bin/bash\n"
      "bob:x:10000:10000::/srv/bob:/bin/sh";  // no final newline
  CHECK(passwd_home(db, 0) == "/root");
  CHECK(passwd_home(db, 1000) == "/home/alice");
  CHECK(passwd_home(db, 10000) == "/srv/bob");
  CHECK(passwd_home(db, 100) == "");   // 10000's prefix is not a match
  CHECK(passwd_home(db, 7) == "");     // a line with too few fields
  CHECK(passwd_home("", 0) == "");
}
