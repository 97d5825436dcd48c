// scan_json (runtime/base/json_scan.hpp) accepts exactly what parse_json accepts: every case here
// is run through both and the verdicts compared, and the members it reports are checked against
// the DOM parse_json builds. tests/fuzz/fuzz_json_scan.cpp drives the same comparison with
// generated input.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/json_scan.hpp"
#include "runtime/record/trace_store.hpp"

using namespace sbx;

namespace {

std::string nested(std::size_t depth, const std::string& open, const std::string& close) {
  std::string s;
  for (std::size_t i = 0; i < depth; ++i) s += open;
  s += "1";
  for (std::size_t i = 0; i < depth; ++i) s += close;
  return s;
}

void agrees(const std::string& text, const JsonBounds& b = {1u << 20}) {
  CAPTURE(text);
  ParsedJson dom = parse_json(text, b);
  JsonScan scan = scan_json(text, b, 0, nullptr);
  CAPTURE(dom.problem);
  CAPTURE(scan.problem);
  CHECK(scan.ok == dom.ok());
  if (scan.ok && dom.ok()) {
    const char want = dom.value.is_object() ? '{' : dom.value.is_array() ? '[' : dom.value.is_string() ? '"' : 0;
    if (want) CHECK(scan.root == want);
  }
}

}  // namespace

TEST_CASE("json scan: accepts and refuses exactly what parse_json does") {
  const std::vector<std::string> cases = {
      // well-formed
      "{}", "[]", "1", "-0", "0.5", "-1.25e+10", "1E-5", "\"\"", "true", "false", "null", " \t\r\n{ } \n",
      R"({"a":[1,{"b":null}],"c":"d"})", R"("\"\\\/\b\f\n\r\t\u0000\u00e9\ud83d\ude00")",
      "\"\x7f\"", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", "\xef\xbb\xbf{}", std::string("{}\0garbage", 10),
      "123456789012345678", "1234567890123456789012345", "-9223372036854775808", "-9223372036854775809",
      "18446744073709551615", "18446744073709551616", "1e-400", std::string(400, '1'),
      R"({"a":1,"b":1,"A":1})", R"({"a":{"a":{"a":1}}})", R"({"\u0061b":1,"ac":2})",
      // malformed
      "", " ", "{", "}", "[1,]", "[,1]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "{'a':1}", "01", "1.", ".5", "-",
      "1e", "1e+", "+1", "0x10", "NaN", "Infinity", "tru", "truex", "nul", "[1 2]", "{}{}", "{} x", "\"abc",
      "\"a\x01\"", "\"a\nb\"", "\"\\x\"", "\"\\u12\"", "\"\\u12g4\"", "\"\\ud800\"", "\"\\udc00\"",
      "\"\\ud800\\u0041\"", "\"\\ud800x\"", "\"\xc0\xaf\"", "\"\xc1\xbf\"", "\"\xe0\x80\x80\"", "\"\xed\xa0\x80\"",
      "\"\xf4\x90\x80\x80\"", "\"\xf5\x80\x80\x80\"", "\"\x80\"", "\"\xc3\"", "\"\xe2\x82\"", "\xef\xbb{}",
      "\xef{}", " \xef\xbb\xbf{}", "1e400", "-1e400", std::string(400, '9') + "0" + std::string(10, '0'),
      std::string("{\"a\":\0}", 7), std::string("[\0]", 3), "/* c */ {}", "{} // c",
      // repeated member names, however spelled
      R"({"a":1,"a":2})", R"({"a":1,"b":{"c":1,"c":1}})", R"({"a":1,"\u0061":2})", R"({"é":1,"\u00e9":2})",
      R"({"a":{"x":1},"b":{"x":1}})", R"([{"a":1},{"a":1}])", R"({"":1,"":2})"};
  for (const auto& c : cases) agrees(c);
  agrees(std::string(309, '9'));  // 9.99e308: finite
  agrees("1" + std::string(309, '0'));  // 1e309: not
}

TEST_CASE("json scan: the bounds are parse_json's") {
  agrees(nested(128, "[", "]"));
  agrees(nested(129, "[", "]"));
  agrees(nested(128, "{\"a\":", "}"));
  agrees(nested(129, "{\"a\":", "}"));
  std::string many = "[";
  for (int i = 0; i < 40; ++i) many += "1,";
  many += "1]";
  agrees(many, {1u << 20, 128, 41});
  agrees(many, {1u << 20, 128, 42});
  agrees("[1]", {2});
  agrees("[1]", {3});
  JsonScan deep = scan_json(nested(129, "[", "]"), {1u << 20}, 0, nullptr);
  CHECK(deep.problem == "nested deeper than 128 levels");
  JsonScan dup = scan_json(R"({"b":{"a":1,"a":2}})", {1u << 20}, 0, nullptr);
  CHECK(dup.problem == "duplicate member name \"a\"");
}

TEST_CASE("json scan: members are reported through objects only, to the depth asked, with their raw text") {
  std::vector<std::pair<std::string, std::string>> seen;
  const std::string text = R"( {"a" : {"b": [ {"c":1} ], "d":{"e":"x\ny"}}, "\u0066": -1.5e3 , "g":{}} )";
  auto r = scan_json(text, {1u << 20}, 2, [&](const ScannedMember& m) {
    std::string path;
    for (auto k : m.path) {
      path += '/';
      path += k;
    }
    seen.emplace_back(path, std::string(m.raw));
  });
  REQUIRE(r.ok);
  CHECK(r.root == '{');
  const std::vector<std::pair<std::string, std::string>> want = {
      {"/a/b", R"([ {"c":1} ])"}, {"/a/d", R"({"e":"x\ny"})"}, {"/a", R"({"b": [ {"c":1} ], "d":{"e":"x\ny"}})"},
      {"/f", "-1.5e3"}, {"/g", "{}"}};
  CHECK(seen == want);
}

TEST_CASE("json scan: a record's summary is what the whole DOM gives") {
  nlohmann::json rec = {
      {"schema", "sbx.trace/1"},
      {"started_at", "2026-12-02T10:00:00.000Z"},
      {"result", {{"status", "exit_nonzero"}, {"exit_code", 3}}},
      {"usage", {{"wall_ms", 1234}}},
      {"invocation", {{"argv", {"sbx", "run"}}, {"spec", {{"argv", {"/bin/sh", "-c", "echo 'a b'"}}}},
                      {"pack", {{"name", "p"}, {"version", "1.0"}, {"digest", "sha256:ab"}}}}},
      {"image", {{"name", "busybox"}, {"digest", "sha256:cd"}}},
      {"noise", {{"deep", {{"deeper", {1, 2, {{"result", 1}}}}}}}}};
  auto fast = summarize_record_text("id1", rec.dump());
  REQUIRE(fast);
  TraceSummary whole = summarize_record("id1", rec);
  CHECK(fast->started_at == whole.started_at);
  CHECK(fast->status == "exit_nonzero");
  CHECK(fast->exit_code == 3);
  CHECK(fast->wall_ms == 1234);
  CHECK(fast->command == whole.command);
  CHECK(fast->pack == "p");
  CHECK(fast->pack_version == "1.0");
  CHECK(fast->pack_digest == "sha256:ab");
  CHECK(fast->image == "busybox");
  CHECK(fast->image_digest == "sha256:cd");
  // Odd shapes are tolerated as summarize_record tolerates them: no spec argv falls back to sbx's.
  rec["invocation"]["spec"] = "not an object";
  rec["result"] = {1, 2};
  fast = summarize_record_text("id1", rec.dump());
  REQUIRE(fast);
  CHECK(fast->command == summarize_record("id1", rec).command);
  CHECK(fast->status == "?");
  // And what parse_json refuses is refused: a duplicate deep in a member the summary never reads.
  CHECK_FALSE(summarize_record_text("id1", R"({"noise":{"x":[{"k":1,"k":2}]}})"));
  CHECK_FALSE(summarize_record_text("id1", "[]"));
}
