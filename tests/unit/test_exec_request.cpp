// Reading an `sbx exec` request without running it (runtime/typed/exec.cpp, parse_exec_request), the
// part tests/fuzz/fuzz_exec.cpp fuzzes.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "runtime/launch/call_files.hpp"
#include "runtime/typed/exec.hpp"

using nlohmann::json;
using sbx::parse_exec_request;

TEST_CASE("exec request: a full request is taken apart") {
  auto r = parse_exec_request(json::parse(R"({"language": "sh", "code": "echo hi", "files": {"lib/a.sh": "x=1"},
      "inputs": {"n": 2}, "limits": {"timeout": "2s"}, "output_schema": {"type": "object"}})"));
  REQUIRE(r.ok());
  CHECK(r->ext == "sh");
  CHECK(r->argv_prefix == std::vector<std::string>{"/bin/sh"});
  CHECK(r->code == "echo hi");
  REQUIRE(r->files.size() == 1);
  CHECK(r->files[0] == std::pair<std::string, std::string>{"lib/a.sh", "x=1"});
  CHECK(r->input_bytes == R"({"n":2})");
  CHECK(r->limits_patch == json{{"timeout_ms", "2s"}});
  CHECK(r->schema.has_value());
}

TEST_CASE("exec request: node runs /code/main.js, and the languages come from one table") {
  auto r = parse_exec_request(json::parse(R"J({"language": "node", "code": "console.log(1)"})J"));
  REQUIRE(r.ok());
  CHECK(r->ext == "js");
  CHECK(r->argv_prefix == std::vector<std::string>{"/usr/bin/node"});
  CHECK(sbx::exec_languages() == std::vector<std::string>{"python", "sh", "bash", "node"});
}

TEST_CASE("exec request: malformed requests are usage errors naming what is wrong") {
  auto msg = [](const char* text) {
    auto r = parse_exec_request(json::parse(text));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().stage == sbx::Stage("usage"));
    return r.error().message;
  };
  CHECK(msg("[]").find("must be a JSON object") != std::string::npos);
  CHECK(msg(R"({"language": "ruby", "code": ""})").find("not supported (python, sh, bash, node)") != std::string::npos);
  CHECK(msg(R"({"language": "sh"})").find("'code' is required") != std::string::npos);
  CHECK(msg(R"({"language": "sh", "code": "", "files": {"../x": ""}})").find("no '', '.' or '..' component") != std::string::npos);
  CHECK(msg(R"({"language": "sh", "code": "", "files": {"main.sh": ""}})").find("replace the code") != std::string::npos);
  CHECK(msg(R"({"language": "sh", "code": "", "limits": {"bogus": 1}})").find("/limits/bogus") != std::string::npos);
  CHECK(msg(R"({"language": "sh", "code": "", "extra": 1})").find("unknown key 'extra'") != std::string::npos);
}

TEST_CASE("exec request: files are checked by the rule a pooled call is (issue 30: a/./b, 5,000 files)") {
  auto r = parse_exec_request(json::parse(R"({"language": "sh", "code": "", "files": {"a/./b": ""}})"));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("/files/a~1.~1b: 'a/./b' must be a relative path of plain names") != std::string::npos);
  json many = {{"language", "sh"}, {"code", ""}, {"files", json::object()}};
  for (std::size_t i = 0; i < sbx::kMaxRequestFiles; ++i) {
    std::string name = std::to_string(i);
    name.insert(0, 1, 'f');
    many["files"][name] = "";
  }
  CHECK(parse_exec_request(many).ok());
  many["files"]["one-more"] = "";
  auto over = parse_exec_request(many);
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().message.find("at most 4096") != std::string::npos);
  CHECK(parse_exec_request(json::parse(R"({"language": "sh", "code": "", "files": {"a..b/c": ""}})")).ok());
}
