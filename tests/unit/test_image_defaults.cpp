// Container run defaults over a run spec (runtime/model/image_defaults.hpp).
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "runtime/model/image_defaults.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

TEST_CASE("image defaults: Entrypoint, Cmd and a caller's command") {
  const json d = {{"Entrypoint", {"/bin/sh", "-c"}}, {"Cmd", {"echo hi"}}};
  sbx::RunSpec spec;
  REQUIRE(sbx::apply_image_defaults(spec, d, "/nonexistent", {}, "img").ok());
  CHECK(spec.argv == std::vector<std::string>{"/bin/sh", "-c", "echo hi"});
  sbx::CallerChoices caller;
  caller.command = {"date"};
  REQUIRE(sbx::apply_image_defaults(spec, d, "/nonexistent", caller, "img").ok());
  CHECK(spec.argv == std::vector<std::string>{"/bin/sh", "-c", "date"});  // Cmd replaced, Entrypoint kept
  REQUIRE(sbx::apply_image_defaults(spec, json(nullptr), "/nonexistent", caller, "img").ok());
  CHECK(spec.argv == std::vector<std::string>{"date"});  // no config: the caller's command as given
}

TEST_CASE("image defaults: Env below the profile, WorkingDir and numeric User below the flags") {
  const json d = {{"Env", {"PATH=/opt/bin", "A=image", "malformed", "=x"}}, {"WorkingDir", "/work"}, {"User", "42:7"}};
  sbx::RunSpec spec;
  spec.env["A"] = "profile";
  REQUIRE(sbx::apply_image_defaults(spec, d, "/nonexistent", {}, "img").ok());
  CHECK(spec.env.at("PATH") == "/opt/bin");
  CHECK(spec.env.at("A") == "profile");
  CHECK(spec.env.size() == 2);
  CHECK(spec.workdir == "/work");
  CHECK(spec.uid == 42);
  CHECK(spec.gid == 7);
  sbx::RunSpec flagged;
  flagged.uid = 5;
  sbx::CallerChoices caller;
  caller.workdir = caller.uid = true;
  caller.uid_value = 5;
  flagged.workdir = "/mine";
  REQUIRE(sbx::apply_image_defaults(flagged, d, "/nonexistent", caller, "img").ok());
  CHECK(flagged.workdir == "/mine");
  CHECK(flagged.uid == 5);
  CHECK(flagged.gid == 5);  // --uid N alone: N's group (no /etc/passwd here: N), not the image User's
  caller.gid = true;
  flagged.gid = 9;
  REQUIRE(sbx::apply_image_defaults(flagged, d, "/nonexistent", caller, "img").ok());
  CHECK(flagged.gid == 9);  // --gid given wins
}

TEST_CASE("image defaults: --entrypoint replaces the Entrypoint and drops the Cmd") {
  const json d = {{"Entrypoint", {"/bin/sh", "-c"}}, {"Cmd", {"echo hi"}}};
  sbx::RunSpec spec;
  sbx::CallerChoices caller;
  caller.entrypoint = std::vector<std::string>{"/bin/echo"};
  REQUIRE(sbx::apply_image_defaults(spec, d, "/nonexistent", caller, "img").ok());
  CHECK(spec.argv == std::vector<std::string>{"/bin/echo"});  // docker: the Cmd goes with the Entrypoint
  caller.command = {"a", "b"};
  REQUIRE(sbx::apply_image_defaults(spec, d, "/nonexistent", caller, "img").ok());
  CHECK(spec.argv == std::vector<std::string>{"/bin/echo", "a", "b"});
  caller.entrypoint = std::vector<std::string>{};  // --entrypoint ''
  REQUIRE(sbx::apply_image_defaults(spec, d, "/nonexistent", caller, "img").ok());
  CHECK(spec.argv == std::vector<std::string>{"a", "b"});
  REQUIRE(sbx::apply_image_defaults(spec, json(nullptr), "/nonexistent", caller, "img").ok());
  CHECK(spec.argv == std::vector<std::string>{"a", "b"});
}

TEST_CASE("image defaults: a named User is looked up inside the image, symlinks resolved in its root") {
  fs::path root = fs::temp_directory_path() / ("sbx-imgdef-" + std::to_string(::getpid()));
  fs::create_directories(root / "real");
  fs::create_directories(root / "etc");
  std::ofstream(root / "real/passwd") << "root:x:0:0::/root:/bin/sh\napp:x:1234:2345::/app:/bin/sh\n";
  std::ofstream(root / "etc/group") << "staff:x:50:\n";
  // An absolute symlink: inside the image it means <root>/real/passwd, never the host's file.
  fs::create_symlink("/real/passwd", root / "etc/passwd");
  sbx::RunSpec spec;
  REQUIRE(sbx::apply_image_defaults(spec, json{{"User", "app"}}, root.string(), {}, "img").ok());
  CHECK(spec.uid == 1234);
  CHECK(spec.gid == 2345);
  REQUIRE(sbx::apply_image_defaults(spec, json{{"User", "app:staff"}}, root.string(), {}, "img").ok());
  CHECK(spec.gid == 50);
  auto missing = sbx::apply_image_defaults(spec, json{{"User", "nobody-here"}}, root.string(), {}, "img");
  REQUIRE(!missing.ok());
  CHECK(missing.error().message.find("'nobody-here' is not in its /etc/passwd") != std::string::npos);
  // --uid N alone: the primary group of uid N in the image's passwd, whatever User says.
  sbx::CallerChoices caller;
  caller.uid = true;
  for (auto [uid, gid] : {std::pair{0u, 0u}, std::pair{1234u, 2345u}, std::pair{777u, 777u}}) {
    caller.uid_value = uid;
    REQUIRE(sbx::apply_image_defaults(spec, json{{"User", "app:staff"}}, root.string(), caller, "img").ok());
    CHECK(spec.gid == gid);
  }
  fs::remove_all(root);
}
