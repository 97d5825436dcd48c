// Hostile JSON: bounded parsing, lossless escaping of invalid UTF-8, and the malformed-shape tables
// for profiles, pack manifests and seccomp policies (each shape must be a clean error naming the
// key, never an abort or a crash).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/typed/pack.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/linux/seccomp_policy.hpp"
#include "runtime/launch/trace.hpp"

using namespace sbx;
using nlohmann::json;

namespace {

std::string nested(std::size_t depth, const char* open = "[", const char* close = "]") {
  std::string s;
  for (std::size_t i = 0; i < depth; ++i) s += open;
  for (std::size_t i = 0; i < depth; ++i) s += close;
  return s;
}

std::string repeat(const std::string& part, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += part;
  return s;
}

struct TempDir {
  std::string dir;
  TempDir() {
    char t[] = "/tmp/sbx-unit-json-XXXXXX";
    dir = ::mkdtemp(t);
  }
  ~TempDir() { (void)std::system(("rm -rf '" + dir + "'").c_str()); }
  std::string write(const std::string& name, const std::string& text) const {
    std::string p = dir + "/" + name;
    REQUIRE(write_file_durable(p, text, 0644).ok());
    return p;
  }
};

}  // namespace

TEST_CASE("parse_json: depth is bounded before the DOM exists, with a pointer to where") {
  auto ok = parse_json(nested(kMaxJsonDepth), {1u << 20});
  CHECK(ok.ok());
  auto deep = parse_json(nested(kMaxJsonDepth + 1), {1u << 20});
  REQUIRE_FALSE(deep.ok());
  CHECK(deep.problem == "nested deeper than 128 levels");
  CHECK(deep.pointer == repeat("/0", kMaxJsonDepth));
  CHECK(deep.value.is_null());

  // 200,000 levels: nlohmann's recursive dump/compare would overflow the stack on this DOM.
  auto huge = parse_json(nested(200000), {1u << 20});
  REQUIRE_FALSE(huge.ok());
  CHECK(huge.problem.find("nested deeper") == 0);

  std::string objs = repeat("{\"a/b\":", 200) + "1" + repeat("}", 200);
  auto o = parse_json(objs, {1u << 20});
  REQUIRE_FALSE(o.ok());
  CHECK(o.pointer == repeat("/a~1b", kMaxJsonDepth));

  auto mixed = parse_json(R"({"x": [1, 2, {"y": )" + nested(200) + "}]}", {1u << 20});
  REQUIRE_FALSE(mixed.ok());
  CHECK(mixed.pointer.find("/x/2/y/0/0") == 0);
}

TEST_CASE("parse_json: size, value count and syntax errors") {
  auto big = parse_json(std::string(100, ' ') + "1", {64});
  REQUIRE_FALSE(big.ok());
  CHECK(big.problem.find("larger than 64 bytes") == 0);

  JsonBounds few{1u << 20, kMaxJsonDepth, 10};
  auto many = parse_json("[1,2,3,4,5,6,7,8,9,10,11,12]", few);
  REQUIRE_FALSE(many.ok());
  CHECK(many.problem == "more than 10 values");
  CHECK(many.pointer == "/9");
  CHECK(parse_json("[1,2,3,4,5,6,7,8,9]", few).ok());

  for (const char* bad : {"", "{", "[1,]", "{\"a\":}", "nul", "\"\xff\"", "1 2", "[1e999]", "{\"a\" 1}"}) {
    CAPTURE(bad);
    auto r = parse_json(bad, {1u << 20});
    REQUIRE_FALSE(r.ok());
    CHECK(r.problem.find("not valid JSON") == 0);
  }
  auto at = parse_json(R"({"a": [1, 2, tru]})", {1u << 20});
  CHECK(at.pointer.find("/a") == 0);
  auto doc = parse_json_doc("[", {10}, "spec", "profile x.json");
  REQUIRE_FALSE(doc.ok());
  CHECK(doc.error().message.find("profile x.json: not valid JSON") == 0);
}

TEST_CASE("read_bounded: reads at most the cap, whatever the file") {
  TempDir t;
  auto p = t.write("f", std::string(5000, 'x'));
  CHECK(read_bounded(p, 5000, "fs", "f").ok());
  auto r = read_bounded(p, 4999, "fs", "f");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == "f: larger than 4999 bytes");
  // An endless file: refused at the cap instead of filling memory.
  auto z = read_bounded("/dev/zero", 1u << 20, "fs", "/dev/zero");
  REQUIRE_FALSE(z.ok());
  CHECK(z.error().message.find("larger than 1 MiB") != std::string::npos);
  CHECK_FALSE(read_bounded(t.dir + "/missing", 10, "fs", "missing").ok());
}

TEST_CASE("escape_utf8: invalid bytes become \\xHH, losslessly, and valid text is untouched") {
  bool changed = true;
  CHECK(escape_utf8("plain \\x41 caf\xc3\xa9 \xf0\x9f\x99\x82", &changed) == "plain \\x41 caf\xc3\xa9 \xf0\x9f\x99\x82");
  CHECK_FALSE(changed);
  CHECK(escape_utf8("\xff", &changed) == "\\xff");
  CHECK(changed);
  // Backslashes are escaped too in an escaped string, so "\x" always starts an escape.
  CHECK(escape_utf8("a\\b\xe9", &changed) == "a\\x5cb\\xe9");
  CHECK(escape_utf8("\xc0\xaf") == "\\xc0\\xaf");               // overlong '/'
  CHECK(escape_utf8("\xed\xa0\x80") == "\\xed\\xa0\\x80");      // a UTF-16 surrogate
  CHECK(escape_utf8("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  CHECK(escape_utf8("ok\xe2\x82") == "ok\\xe2\\x82");            // truncated sequence
  CHECK(valid_utf8("\xe2\x82\xac"));
  CHECK_FALSE(valid_utf8("\x80"));
}

TEST_CASE("dump_json: never throws; escaped strings and member names are listed by pointer") {
  json j = {{"argv", {"/bin/sh", "\xff", "ok"}}, {"env", {{"X", "\xe9t\xe9"}, {"B\xff/", "v"}}}};
  std::string text = dump_json(j, 2);
  json back = json::parse(text);
  CHECK(back["argv"][1] == "\\xff");
  CHECK(back["env"]["X"] == "\\xe9t\\xe9");
  CHECK(back["env"].contains("B\\xff/"));
  CHECK(back["escaped_strings"] == json({"/argv/1", "/env/B\\xff~1", "/env/X"}));
  // Valid documents are not marked.
  json clean = {{"a", "b"}};
  CHECK(json::parse(dump_json(clean, -1)) == json({{"a", "b"}}));

  // A document too deep to dump safely yields the fallback, not a stack overflow.
  json deep = json::array();
  json* cur = &deep;
  for (int i = 0; i < 5000; ++i) {
    cur->push_back(json::array());
    cur = &(*cur)[0];
  }
  CHECK(json_depth(deep) == 5001);
  std::string d = dump_json(deep, -1, [](const std::string& why) { return json{{"record_error", why}}; });
  CHECK(json::parse(d)["record_error"].get<std::string>().find("nested deeper") == 0);
}

TEST_CASE("trace_text: an invalid UTF-8 argv is escaped in the record, which stays valid") {
  json rec = {{"schema", "sbx.trace/v1"}, {"run_id", "r1"}, {"invocation", {{"argv", {"sbx", "run", "\xff"}}}}};
  json back = json::parse(trace_text(rec));
  CHECK(back["invocation"]["argv"][2] == "\\xff");
  CHECK(back["escaped_strings"] == json({"/invocation/argv/2"}));
}

// ---- malformed profiles: each shape is an error naming the file and the key ---------------------

TEST_CASE("profiles: every malformed shape is a clean error naming the file and the key") {
  struct Case {
    std::string text;
    std::string pointer;  // must appear in the message ("" = top level)
  };
  const std::vector<Case> cases = {
      {R"({"inputs":[{"src":"/"}]})", "/inputs/0/dst"},
      {R"({"inputs":[{"src":".."}]})", "/inputs/0/dst"},
      {R"({"inputs":[{"src":5}]})", "/inputs/0/src"},
      {R"({"inputs":[{}]})", "/inputs/0/src"},
      {R"({"inputs":[{"src":"/a","x":1}]})", "/inputs/0/x"},
      {R"({"inputs":"x"})", "/inputs"},
      {R"({"inputs":[7]})", "/inputs/0"},
      {R"({"inputs":["/"]})", "/inputs/0"},
      {R"({"binds":[{"src":"/a","rw":"yes"}]})", "/binds/0/rw"},
      {R"({"binds":[{"dst":"/a"}]})", "/binds/0/src"},
      {R"({"binds":[["/a"]]})", "/binds/0"},
      {R"({"binds":{"a":1}})", "/binds"},
      {R"({"binds":["a:b:c:d"]})", "/binds/0"},
      {R"({"tmpfs":[{"dst":"/t","size_bytes":-1}]})", "/tmpfs/0/size_bytes"},
      {R"({"tmpfs":[{"dst":"/t","size_bytes":1e30}]})", "/tmpfs/0/size_bytes"},
      {R"({"tmpfs":[{"dst":"/t","size_bytes":9223372036854775807}]})", "/tmpfs/0/size_bytes"},
      {R"({"tmpfs":[{"dst":3}]})", "/tmpfs/0/dst"},
      {R"({"tmpfs":["/t:lots"]})", "/tmpfs/0"},
      {R"({"tmpfs":[null]})", "/tmpfs/0"},
      {R"({"limits":{"timeout_ms":-5}})", "/limits/timeout_ms"},
      {R"({"limits":{"timeout_ms":0}})", "/limits/timeout_ms"},
      {R"({"limits":{"timeout_ms":18446744073709551615}})", "/limits/timeout_ms"},
      {R"({"limits":{"timeout_ms":9223372036854775807}})", "/limits/timeout_ms"},
      {R"({"limits":{"timeout_ms":1.5}})", "/limits/timeout_ms"},
      {R"({"limits":{"timeout_ms":"5 parsecs"}})", "/limits/timeout_ms"},
      {R"({"limits":{"memory_bytes":"-1M"}})", "/limits/memory_bytes"},
      {R"({"limits":{"memory_bytes":true}})", "/limits/memory_bytes"},
      {R"({"limits":{"memory_bytes":[]}})", "/limits/memory_bytes"},
      {R"({"limits":{"pids":1.5}})", "/limits/pids"},
      {R"({"limits":{"pids":"many"}})", "/limits/pids"},
      {R"({"limits":{"pids":99999999999}})", "/limits/pids"},
      {R"({"limits":{"cpus":"two"}})", "/limits/cpus"},
      {R"({"limits":{"cpus":0}})", "/limits/cpus"},
      {R"({"limits":{"cpus":-1}})", "/limits/cpus"},
      {R"({"limits":{"cpus":1e308}})", "/limits/cpus"},
      {R"({"limits":{"cpu_time_ms":{}}})", "/limits/cpu_time_ms"},
      {R"({"limits":{"output_max_files":-1}})", "/limits/output_max_files"},
      {R"({"limits":{"output_max_files":1e12}})", "/limits/output_max_files"},
      {R"({"limits":{"output_limit_bytes":"1Q"}})", "/limits/output_limit_bytes"},
      {R"({"limits":{"out_size_bytes":0}})", "/limits/out_size_bytes"},
      {R"({"limits":{"a/b~c":1}})", "/limits/a~1b~0c"},
      {R"({"limits":[]})", "/limits"},
      {R"({"limits":7})", "/limits"},
      {R"({"uid":-1})", "/uid"},
      {R"({"uid":4294967295})", "/uid"},
      {R"({"uid":18446744073709551615})", "/uid"},
      {R"({"uid":"0"})", "/uid"},
      {R"({"gid":1.0})", "/gid"},
      {R"({"tier":5})", "/tier"},
      {R"({"tier":"4"})", "/tier"},
      {R"({"tier":-2147483649})", "/tier"},
      {R"({"env":{"A":1}})", "/env/A"},
      {R"({"env":{"A":null}})", ""},  // null deletes in a merge patch: valid, checked below
      {R"({"env":{"A=B":"x"}})", "/env/A=B"},
      {R"({"env":{"":"x"}})", "/env/"},
      {R"({"env":[]})", "/env"},
      {R"({"env_pass":[1]})", "/env_pass/0"},
      {R"({"env_pass":"TERM"})", "/env_pass"},
      {R"({"argv":[null]})", "/argv/0"},
      {R"({"argv":"sh"})", "/argv"},
      {R"({"network":{"mode":"host"}})", "/network/mode"},
      {R"({"network":{"mode":1}})", "/network/mode"},
      {R"({"network":{"allow":[1]}})", "/network/allow/0"},
      {R"({"network":{"allow":["exa mple.com"]}})", "/network/allow/0"},
      {R"({"network":{"max_connections":0}})", "/network/max_connections"},
      {R"({"network":{"max_connections":1000001}})", "/network/max_connections"},
      {R"({"network":{"max_bytes":-3}})", "/network/max_bytes"},
      {R"({"network":{"idle_timeout_ms":"never"}})", "/network/idle_timeout_ms"},
      {R"({"network":{"x":1}})", "/network/x"},
      {R"({"network":5})", "/network"},
      {R"({"seccomp":""})", "/seccomp"},
      {R"({"seccomp":7})", "/seccomp"},
      {R"({"description":5})", "/description"},
      {R"({"workdir":[]})", "/workdir"},
      {R"({"hostname":5})", "/hostname"},
      {R"({"image":{}})", "/image"},
      {R"({"require_limits":"yes"})", "/require_limits"},
      {R"({"profile":false})", "/profile"},
      {R"({"nope":1})", "/nope"},
      {R"({"binds":[{"src":"/data\u0000/../etc","dst":"/d"}]})", "/binds/0/src"},
      {R"({"binds":["/data\u0000/../etc:/d"]})", "/binds/0"},
      {R"({"inputs":["/a\u0000b"]})", "/inputs/0"},
      {R"({"tmpfs":["/t\u0000:1M"]})", "/tmpfs/0"},
      {R"({"argv":["sh","a\u0000b"]})", "/argv/1"},
      {R"({"env":{"A":"x\u0000y"}})", "/env/A"},
      {R"({"env":{"A\u0000B":"x"}})", "/env/A"},
      {R"({"workdir":"/tmp\u0000/x"})", "/workdir"},
      {R"({"seccomp":"/p\u0000.json"})", "/seccomp"},
      {R"([])", ""},
      {R"("x")", ""},
      {R"(null)", ""},
      {R"(42)", ""},
      {"", ""},
      {"{\"a\":", ""},
      {"{\"a\":1}}", ""},
      {"{\"s\":\"\xff\"}", ""},
      {nested(100000), "/0/0/0"},
      {repeat("{\"limits\":", 50000) + "1" + repeat("}", 50000), "/limits/limits"},
  };
  TempDir t;
  int n = 0;
  for (auto& c : cases) {
    std::string name = std::to_string(n++);  // appended: GCC 12 misreports "p" + to_string() (-Wrestrict)
    name.append(".json");
    std::string path = t.write(name, c.text);
    CAPTURE(c.text.substr(0, 120));
    auto r = load_profile(path);
    if (c.text == R"({"env":{"A":null}})") {
      CHECK(r.ok());
      continue;
    }
    REQUIRE_FALSE(r.ok());
    const std::string& m = r.error().message;
    CAPTURE(m);
    CHECK(m.find("profile " + path + ": ") == 0);
    if (!c.pointer.empty()) CHECK(m.find(": " + c.pointer) != std::string::npos);
    CHECK(m.find('\n') == std::string::npos);
  }
}

TEST_CASE("profiles: an oversized file is refused without reading it all") {
  TempDir t;
  std::string path = t.write("big.json", "{\"description\": \"" + std::string(kMaxProfileBytes, 'x') + "\"}");
  auto r = load_profile(path);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("larger than 1 MiB") != std::string::npos);
}

// ---- malformed pack manifests --------------------------------------------------------------------

TEST_CASE("pack manifests: malformed shapes are problems with pointers, never a crash") {
  TempDir t;
  t.write("in.json", "{}");
  t.write("deep.json", nested(5000));
  const std::string base = R"("name":"p","version":"1","entrypoint":["/bin/sh"],"input_schema":"in.json","output_schema":"in.json")";
  // A member of the base replaced, not repeated: a repeated name is refused first (parse_json).
  auto over = [&](const std::string& members) {
    nlohmann::json m = nlohmann::json::parse("{" + base + "}");
    m.update(nlohmann::json::parse(members));
    return m.dump();
  };
  struct Case {
    std::string text;
    std::string pointer;
    std::string file = "pack.json";
  };
  const std::vector<Case> cases = {
      {over(R"({"name":5})"), "/name"},
      {over(R"({"entrypoint":[1]})"), "/entrypoint/0"},
      {over(R"({"entrypoint":"sh"})"), "/entrypoint"},
      {over(R"({"context":[{"name":1,"path":"/c"}]})"), "/context/0/name"},
      {over(R"({"context":[{"name":"c","path":[]}]})"), "/context/0/path"},
      {over(R"({"context":[{"name":"c","path":"/c","required":"no"}]})"), "/context/0/required"},
      {over(R"({"context":{}})"), "/context"},
      {over(R"({"secrets":[{"name":"S","delivery":5}]})"), "/secrets/0/delivery"},
      {over(R"({"secrets":[7]})"), "/secrets/0"},
      {over(R"({"limits":{"timeout":[]}})"), "/limits/timeout"},
      {over(R"({"limits":{"memory":-1}})"), "/limits/memory"},
      {over(R"({"limits":{"pids":1e40}})"), "/limits/pids"},
      {over(R"({"limits":"10s"})"), "/limits"},
      {over(R"({"network":{"mode":5}})"), "/network/mode"},
      {over(R"({"network":[]})"), "/network"},
      {over(R"({"input_schema":5})"), "/input_schema"},
      {over(R"({"image":7})"), "/image"},
      {over(R"({"context":[{"name":"c","path":"/ctx\u0000/../pack"}]})"), "/context/0/path"},
      {over(R"({"input_schema":"in.json\u0000x"})"), "/input_schema"},
      {over(R"({"output_schema":"deep.json"})"), repeat("/0", kMaxJsonDepth), "deep.json"},
      {nested(100000), repeat("/0", kMaxJsonDepth)},
      {"[]", ""},
  };
  for (auto& c : cases) {
    CAPTURE(c.text.substr(0, 160));
    std::vector<PackProblem> problems;
    auto p = parse_pack_manifest(t.dir, c.text, problems);
    REQUIRE_FALSE(p.ok());
    REQUIRE_FALSE(problems.empty());
    bool found = false;
    for (auto& pr : problems) found = found || (pr.file == c.file && pr.pointer == c.pointer);
    CAPTURE(problems[0].describe());
    CHECK(found);
  }
}

// ---- seccomp policies ----------------------------------------------------------------------------

TEST_CASE("seccomp policies: deep and malformed documents are errors with pointers") {
  auto deep = parse_seccomp_policy(repeat("{\"syscalls\":", 100000) + "1" + repeat("}", 100000), "p.json");
  REQUIRE_FALSE(deep.ok());
  CHECK(deep.error().message.find("p.json: /syscalls/syscalls") == 0);
  CHECK(deep.error().message.find("nested deeper than 128 levels") != std::string::npos);
  for (const char* bad : {R"({"defaultAction": 5})", R"({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": [1]}]})",
                          R"({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "X"}]})",
                          R"({"defaultAction": "SCMP_ACT_ALLOW", "defaultErrnoRet": -1})",
                          R"({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 99, "value": 1, "op": "SCMP_CMP_EQ"}]}]})",
                          R"({"defaultAction": "SCMP_ACT_ALLOW", "a/b": 1})"}) {
    CAPTURE(bad);
    auto r = parse_seccomp_policy(bad, "p.json");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("p.json: /") == 0);
  }
  auto slash = parse_seccomp_policy(R"({"defaultAction": "SCMP_ACT_ALLOW", "a/b": 1})", "p.json");
  CHECK(slash.error().message.find("p.json: /a~1b:") == 0);
}

// Every member of a RunSpec profile (and of one element of each array), set to each hostile value:
// the load either succeeds or fails cleanly, naming the file and the member (or one above it).
TEST_CASE("profiles: every member times every hostile value is accepted or a clean error") {
  json base = spec_to_json(RunSpec{});
  base["binds"] = json::array({{{"src", "/a"}, {"dst", "/b"}, {"rw", false}}});
  base["tmpfs"] = json::array({{{"dst", "/t"}, {"size_bytes", 1024}}});
  base["inputs"] = json::array({{{"src", "/a"}, {"dst", "/in/a"}}});
  base["env"] = {{"A", "1"}};
  base["argv"] = {"sh"};
  base["network"]["allow"] = {"example.com"};
  // Leaf pointers, found without recursion.
  std::vector<std::string> leaves;
  std::vector<std::pair<const json*, std::string>> todo{{&base, ""}};
  while (!todo.empty()) {
    auto [v, p] = todo.back();
    todo.pop_back();
    if (!p.empty()) leaves.push_back(p);
    if (v->is_object())
      for (auto& [k, c] : v->items()) todo.push_back({&c, p + "/" + pointer_token(k)});
    else if (v->is_array())
      for (std::size_t i = 0; i < v->size(); ++i) todo.push_back({&(*v)[i], p + "/" + std::to_string(i)});
  }
  REQUIRE(leaves.size() > 40);
  const std::vector<json> hostile = {
      nullptr, true, -1, 0, 1.5, -1e308, 1e308, std::numeric_limits<std::int64_t>::min(),
      std::numeric_limits<std::uint64_t>::max(), "", "x", std::string("\0z", 2), "/../..", std::string(5000, 'a'),
      json::array(), json::array({1, "a", nullptr}), json::object(), json({{"k", json::array()}}),
      json::parse(nested(100)),
  };
  TempDir t;
  std::size_t n = 0, rejected = 0;
  for (auto& leaf : leaves) {
    for (auto& h : hostile) {
      json doc = base;
      doc[json::json_pointer(leaf)] = h;
      std::string name = std::to_string(n++);
      name.append(".json");
      std::string path = t.write(name, doc.dump());
      auto r = load_profile(path);
      if (r.ok()) {
        // Accepted: the layered spec must parse too.
        CHECK(spec_from_layers(*r, nullptr, "").ok());
        continue;
      }
      ++rejected;
      const std::string& m = r.error().message;
      CAPTURE(leaf);
      CAPTURE(h.dump().substr(0, 80));
      CAPTURE(m);
      CHECK(m.find("profile " + path + ": ") == 0);
      CHECK(m.find('\n') == std::string::npos);
      // The message names the member, one of its parents (a whole array or object refused) or
      // one of its own members (the hostile value was an object or nested too deep).
      std::string named = m.substr(("profile " + path + ": ").size());
      std::string key = named[0] == '/' ? named.substr(0, named.find(": ")) : "";
      bool related = leaf == key || leaf.rfind(key + "/", 0) == 0 || key.rfind(leaf + "/", 0) == 0;
      CHECK_MESSAGE((!key.empty() && related), named);
    }
  }
  MESSAGE(n << " hostile profiles, " << rejected << " rejected cleanly");
  CHECK(rejected > n / 2);
}

// The same sweep over a pack manifest: each member (and each member of its array elements) set to
// each hostile value is accepted or reported as problems with pointers into pack.json.
TEST_CASE("pack manifests: every member times every hostile value is accepted or a clean problem") {
  TempDir t;
  t.write("in.json", "{}");
  json base = json::parse(R"({"name":"p","version":"1","description":"d","entrypoint":["/bin/sh","/pack/run.sh"],
    "image":"host","input_schema":"in.json","output_schema":"in.json",
    "limits":{"timeout":"2s","memory":"64M","pids":10,"cpus":0.5,"cpu_time":"1s","output_limit":"1K","tmp_size":"8M"},
    "network":{"mode":"none"},"context":[{"name":"c","path":"/ctx/c","required":true}],
    "secrets":[{"name":"S","required":false,"delivery":"env"}]})");
  std::vector<std::string> leaves;
  std::vector<std::pair<const json*, std::string>> todo{{&base, ""}};
  while (!todo.empty()) {
    auto [v, p] = todo.back();
    todo.pop_back();
    if (!p.empty()) leaves.push_back(p);
    if (v->is_object())
      for (auto& [k, c] : v->items()) todo.push_back({&c, p + "/" + pointer_token(k)});
    else if (v->is_array())
      for (std::size_t i = 0; i < v->size(); ++i) todo.push_back({&(*v)[i], p + "/" + std::to_string(i)});
  }
  const std::vector<json> hostile = {nullptr, true, -1, 1.5, 1e308, std::numeric_limits<std::uint64_t>::max(), "",
                                     "../x", std::string(300, 'a'), json::array(), json::array({1}), json::object(),
                                     json::parse(nested(100))};
  std::size_t n = 0, rejected = 0;
  for (auto& leaf : leaves) {
    for (auto& h : hostile) {
      json doc = base;
      doc[json::json_pointer(leaf)] = h;
      std::vector<PackProblem> problems;
      auto p = parse_pack_manifest(t.dir, doc.dump(), problems);
      ++n;
      if (p.ok()) continue;
      ++rejected;
      CAPTURE(leaf);
      CAPTURE(h.dump().substr(0, 80));
      REQUIRE_FALSE(problems.empty());
      for (auto& pr : problems) {
        CAPTURE(pr.describe());
        CHECK((pr.file == "pack.json" || pr.file == "in.json"));
        CHECK((pr.pointer.empty() || pr.pointer[0] == '/'));
      }
    }
  }
  MESSAGE(n << " hostile manifests, " << rejected << " rejected cleanly");
  CHECK(rejected > n / 2);
}

TEST_CASE("parse_json: a member name repeated in one object is refused, named by its pointer") {
  // nlohmann keeps the last, other readers the first: one document, two meanings (issue 30).
  auto dup = parse_json(R"({"a": 1, "b": {"c": 1, "c": 2}})", {1u << 20});
  REQUIRE_FALSE(dup.ok());
  CHECK(dup.pointer == "/b/c");
  CHECK(dup.problem == R"(duplicate member name "c")");
  CHECK(dup.describe() == R"(/b/c: duplicate member name "c")");
  auto top = parse_json(R"({"language": "sh", "language": "python"})", {1u << 20});
  REQUIRE_FALSE(top.ok());
  CHECK(top.pointer == "/language");
  // The same name in sibling objects, or in an object and its child, is no repeat.
  CHECK(parse_json(R"([{"a": 1}, {"a": 2}, {"a": {"a": 3}}])", {1u << 20}).ok());
  auto in_array = parse_json(R"([{"x": 0}, {"k": 1, "k": 1}])", {1u << 20});
  REQUIRE_FALSE(in_array.ok());
  CHECK(in_array.pointer == "/1/k");
  // Through parse_json_doc (profiles, pack.json, requests, records): the error names the document.
  auto doc = parse_json_doc(R"({"limits": {}, "limits": {}})", {1u << 20}, "profile", "profile x.json");
  REQUIRE_FALSE(doc.ok());
  CHECK(doc.error().message == R"(profile x.json: /limits: duplicate member name "limits")");
  // A name that is not UTF-8 is named escaped; the message stays printable.
  auto raw = parse_json("{\"\\u00e9\": 1, \"\\u00e9\": 2}", {1u << 20});
  REQUIRE_FALSE(raw.ok());
  CHECK(raw.problem.find("duplicate member name") == 0);
}
