// Other tools' options get a line that maps them to sbx's own form (runtime/model/foreign_flags.hpp).
#include <doctest/doctest.h>

#include "runtime/model/foreign_flags.hpp"

using sbx::foreign_option_hint;
using sbx::looks_like_volume;

TEST_CASE("docker, podman and bwrap options map to sbx's form") {
  CHECK(foreign_option_hint("-e") == "docker's -e is --env NAME=VALUE here");
  CHECK(foreign_option_hint("-w") == "docker's -w is --workdir DIR here");
  CHECK(foreign_option_hint("--chdir") == "bwrap's --chdir is --workdir DIR here");
  CHECK(foreign_option_hint("--volume").find("--bind SRC:DST:rw") != std::string::npos);
  CHECK(foreign_option_hint("--network=none").starts_with("docker's --network is not needed"));
  for (const char* o : {"--rm", "--network", "--user", "-u", "--read-only", "--ro-bind", "--unshare-net", "--mount",
                        "--setenv", "--gpus", "--pids-limit", "--entrypoint", "--privileged", "-m"}) {
    CAPTURE(o);
    CHECK_FALSE(foreign_option_hint(o).empty());
  }
  // Not another tool's option (sbx's own, or nobody's): no hint, the plain "unknown option".
  CHECK(foreign_option_hint("--bogus").empty());
  CHECK(foreign_option_hint("--env").empty());
  CHECK(foreign_option_hint("e").empty());
}

TEST_CASE("a docker volume is told from a program's name") {
  CHECK(looks_like_volume("/home/u/src:/work"));
  CHECK(looks_like_volume("./d:/d:ro"));
  CHECK(looks_like_volume("cache:/root/.cache"));
  CHECK_FALSE(looks_like_volume("echo"));
  CHECK_FALSE(looks_like_volume("/usr/bin/env"));
  CHECK_FALSE(looks_like_volume(":/x"));
  CHECK_FALSE(looks_like_volume("a:b"));
}
