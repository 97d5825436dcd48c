#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/stage.hpp"

using sbx::Stage;

TEST_CASE("stages: names are unique and sorted, each with a description; from_name finds exactly them") {
  for (std::size_t i = 0; i < sbx::kStageCount; ++i) {
    CAPTURE(sbx::kStages[i].name);
    CHECK(std::string(sbx::kStages[i].what).size() > 10);
    if (i > 0) CHECK(std::string(sbx::kStages[i - 1].name) < sbx::kStages[i].name);
    auto s = Stage::from_name(sbx::kStages[i].name);
    REQUIRE(s);
    CHECK(std::string(s->name()) == sbx::kStages[i].name);
  }
  CHECK(!Stage::from_name(""));
  CHECK(!Stage::from_name("mount"));
  CHECK(!Stage::from_name("systemd_scope"));  // the public spelling has a hyphen
  CHECK(Stage("usage") == *Stage::from_name("usage"));
  CHECK(!(Stage("usage") == Stage("mounts")));
}

TEST_CASE("stages: an Error carries one, and describes itself by its name") {
  sbx::Error e = sbx::make_error("mounts", "bind source /x: missing", 2);
  CHECK(e.stage == sbx::Stage("mounts"));
  CHECK(e.describe_with_stage().find("setup failed at mounts: ") == 0);
}

TEST_CASE("stages: the trace schema's enum of result.error.stage is kStages' names, in order") {
  std::ifstream f(SBX_SOURCE_DIR "/schemas/trace.schema.json");
  REQUIRE(f);
  auto schema = nlohmann::json::parse(std::string(std::istreambuf_iterator<char>(f), {}));
  std::vector<std::string> names;
  for (auto& s : sbx::kStages) names.emplace_back(s.name);
  auto& in_schema = schema["definitions"]["stage"]["enum"];
  INFO("regenerate the schema's list with tests/tools/gen_stage_enum.py");
  CHECK(in_schema == nlohmann::json(names));
}
