// DocReader (runtime/base/doc_reader.hpp): the one strict reader of documents sbx is given. Its
// errors always read "<source>: <JSON pointer>: <what>"; these cases pin the pointer (RFC 6901
// escaping, nested paths), the unknown-key check, wrong types, bounds and the collecting mode.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "runtime/base/doc_reader.hpp"
#include "runtime/base/units.hpp"

using nlohmann::json;
using sbx::DocProblem;
using sbx::DocReader;
using sbx::DocSource;
using sbx::Status;

TEST_CASE("doc reader: typed getters read what is there and leave what is absent or null") {
  json j = json::parse(R"({"s": "x", "b": true, "n": 7, "u": 18446744073709551615, "l": ["a", "b"], "z": null})");
  DocSource src{"d.json", "usage"};
  DocReader r(j, src);
  std::string s = "keep", z = "kept";
  bool b = false;
  int n = 0;
  std::uint64_t u = 0;
  std::vector<std::string> l;
  CHECK(r.get_string("s", s));
  CHECK(r.get_bool("b", b));
  CHECK(r.get_integer("n", n, 0, 10));
  CHECK(r.get_u64("u", u));
  CHECK(r.get_strings("l", l));
  CHECK(r.get_string("z", z));
  CHECK(r.get_string("absent", z));
  CHECK(r.finish());
  CHECK(s == "x");
  CHECK(b);
  CHECK(n == 7);
  CHECK(u == 18446744073709551615ULL);
  CHECK(l == std::vector<std::string>{"a", "b"});
  CHECK(z == "kept");
}

TEST_CASE("doc reader: an unknown key is named by its pointer, escaped per RFC 6901") {
  json j = json::parse(R"({"known": 1, "a/b~c": 2})");
  DocSource src{"d.json", "usage"};
  DocReader r(j, src);
  r.ignore("known");
  auto st = r.finish();
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().stage == sbx::Stage("usage"));
  CHECK(st.error().message == "d.json: /a~1b~0c: unknown key");
  CHECK(sbx::pointer_join("/x", "~/") == "/x/~0~1");
  // The wordings callers choose: the key quoted, and the known keys listed in declaration order.
  DocReader r2(j, src);
  r2.known({"known", "other"});
  auto st2 = r2.finish({true, true});
  REQUIRE_FALSE(st2.ok());
  CHECK(st2.error().message == "d.json: /a~1b~0c: unknown key 'a/b~c' (known: known, other)");
}

TEST_CASE("doc reader: wrong types and values out of bounds") {
  json j = json::parse(R"({"s": 1, "b": "yes", "n": 11, "f": 1.5, "neg": -1, "l": ["a", 2], "q": "12x", "nul": "a\u0000b"})");
  DocSource src{"d.json", "usage"};
  DocReader r(j, src);
  std::string s;
  bool b = false;
  int n = 0;
  std::uint64_t u = 0;
  std::vector<std::string> l;
  std::optional<std::int64_t> q;
  CHECK(r.get_string("s", s).error().message == "d.json: /s: must be a string");
  CHECK(r.get_bool("b", b).error().message == "d.json: /b: must be true or false");
  CHECK(r.get_integer("n", n, 0, 10).error().message == "d.json: /n: must be an integer between 0 and 10");
  CHECK(r.get_integer("f", n, 0, 10).error().message == "d.json: /f: must be an integer between 0 and 10");
  CHECK(r.get_u64("neg", u).error().message == "d.json: /neg: must be a non-negative integer");
  CHECK(r.get_strings("l", l).error().message == "d.json: /l/1: must be a string");
  CHECK(r.get_quantity("q", q, sbx::parse_size_bytes, true, 1000).error().message.starts_with("d.json: /q: "));
  CHECK(r.get_quantity("n", q, sbx::parse_size_bytes, true, 10).error().message == "d.json: /n: must be at most 10");
  CHECK(r.get_quantity("neg", q, sbx::parse_size_bytes, true, 10).error().message ==
        "d.json: /neg: must be greater than zero");
  CHECK(r.get_string("nul", s).error().message == "d.json: /nul: must not contain a NUL byte");
  DocSource lenient{"d.json", "usage", "", false};
  DocReader r2(j, lenient);
  CHECK(r2.get_string("nul", s));
  CHECK(s.size() == 3);
}

TEST_CASE("doc reader: child readers carry the pointer of nested objects and arrays") {
  json j = json::parse(R"({"outer": {"list": [{"ok": 1}, {"ok": 1, "bad": true}]}})");
  DocSource src{"d.json", "usage"};
  DocReader r(j, src);
  DocReader outer = r.member("outer");
  CHECK(outer.pointer() == "/outer");
  DocReader list = outer.member("list");
  CHECK(list.check_array());
  DocReader second = list.element(1);
  CHECK(second.pointer() == "/outer/list/1");
  second.ignore("ok");
  CHECK(second.finish().error().message == "d.json: /outer/list/1/bad: unknown key");
  CHECK(r.finish());  // "outer" was read through member()
  CHECK(list.check_object().error().message == "d.json: /outer/list: must be a JSON object");
  // The document itself: no pointer, or the text the source asks for.
  json arr = json::array();
  CHECK(DocReader(arr, src).check_object().error().message == "d.json: must be a JSON object");
  DocSource rooted{"p.json", "seccomp", "/"};
  CHECK(DocReader(arr, rooted).check_object().error().message == "p.json: /: must be a JSON object");
}

TEST_CASE("doc reader: collecting mode records every problem and finish() names every unknown key") {
  json j = json::parse(R"({"a": 1, "x": 1, "y": 2})");
  std::vector<DocProblem> problems;
  DocSource src{"pack.json", "pack", "", true, [&](const DocProblem& p) { problems.push_back(p); }};
  DocReader r(j, src);
  std::string s;
  CHECK_FALSE(r.get_string("a", s).ok());
  auto st = r.finish();
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message == "pack.json: /x: unknown key");  // the first one
  REQUIRE(problems.size() == 3);
  CHECK(problems[0].pointer == "/a");
  CHECK(problems[0].message == "must be a string");
  CHECK(problems[1].pointer == "/x");
  CHECK(problems[2].pointer == "/y");
}
