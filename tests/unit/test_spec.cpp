#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <future>

#include <nlohmann/json.hpp>

#include "runtime/base/sha256.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/model/spec.hpp"
#include "tests/unit/test_util.hpp"

using namespace sbx;
using nlohmann::json;

TEST_CASE("a RunSpec round-trips through JSON") {
  RunSpec s;
  s.argv = {"python3", "-c", "print(1)"};
  s.uid = 1000;
  s.gid = 100;
  s.env = {{"A", "1"}};
  s.env_pass = {"TERM"};
  s.binds = {{"/data", "/in", false}, {"/out", "/out", true}};
  s.tmpfs = {{"/scratch", 1 << 20}};
  s.limits.timeout_ms = 1500;
  s.limits.memory_bytes = 256LL << 20;
  s.limits.cpus = 0.5;
  auto back = spec_from_json(spec_to_json(s), "test");
  REQUIRE(back.ok());
  CHECK(*back == s);
}

TEST_CASE("strict parsing names the source and the key") {
  json j = spec_to_json(RunSpec{});
  j["limits"]["timeout"] = "1s";
  auto r = spec_from_json(j, "profile /x.json");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message == "profile /x.json: /limits/timeout: unknown key");

  json k = spec_to_json(RunSpec{});
  k["limits"]["timeout_ms"] = "soon";
  auto r2 = spec_from_json(k, "p.json");
  REQUIRE_FALSE(r2.ok());
  CHECK(r2.error().message.find("p.json: /limits/timeout_ms: bad duration 'soon'") == 0);

  json u = spec_to_json(RunSpec{});
  u["uid"] = -1;
  CHECK_FALSE(spec_from_json(u, "p").ok());
  json n = spec_to_json(RunSpec{});
  n["network"]["mode"] = "host";
  CHECK_FALSE(spec_from_json(n, "p").ok());
}

TEST_CASE("durations and sizes accept units in JSON") {
  json j = spec_to_json(RunSpec{});
  j["limits"]["timeout_ms"] = "2s";
  j["limits"]["memory_bytes"] = "64M";
  auto r = spec_from_json(j, "t");
  REQUIRE(r.ok());
  CHECK(*r->limits.timeout_ms == 2000);
  CHECK(*r->limits.memory_bytes == 64LL << 20);
}

TEST_CASE("merge patch: objects merge, values replace, null deletes") {
  json base = {{"a", 1}, {"o", {{"x", 1}, {"y", 2}}}, {"l", {1, 2}}};
  merge_patch(base, {{"o", {{"y", nullptr}, {"z", 3}}}, {"l", {9}}, {"b", true}});
  CHECK(base == json({{"a", 1}, {"o", {{"x", 1}, {"z", 3}}}, {"l", {9}}, {"b", true}}));
}

TEST_CASE("bind and tmpfs short forms") {
  auto b = parse_bind("/src");
  REQUIRE(b.ok());
  CHECK(b->dst == "/src");
  CHECK_FALSE(b->rw);
  b = parse_bind("/src:/dst:rw");
  REQUIRE(b.ok());
  CHECK(b->dst == "/dst");
  CHECK(b->rw);
  b = parse_bind("rel:/dst:ro");
  REQUIRE(b.ok());
  CHECK_FALSE(b->rw);
  CHECK_FALSE(parse_bind("").ok());
  CHECK_FALSE(parse_bind("a:b:c:d").ok());
  auto t = parse_tmpfs("/scratch:16M");
  REQUIRE(t.ok());
  CHECK(t->size_bytes == 16LL << 20);
  CHECK_FALSE(parse_tmpfs("/x:big").ok());
  // docker's form: size= and mount options. nosuid, nodev and rw are what every tmpfs already is.
  t = parse_tmpfs("/run:size=64m,noexec");
  REQUIRE(t.ok());
  CHECK(t->dst == "/run");
  CHECK(t->size_bytes == 64LL << 20);
  CHECK(t->noexec);
  t = parse_tmpfs("/run:size=1Gi,nosuid,nodev,rw");
  REQUIRE(t.ok());
  CHECK(t->size_bytes == 1LL << 30);
  CHECK_FALSE(t->noexec);
  t = parse_tmpfs("/run:noexec");
  REQUIRE(t.ok());
  CHECK(t->size_bytes == 64LL << 20);
  CHECK(t->noexec);
  CHECK(parse_tmpfs("/run:size=64m,exec").error().message.find("option 'exec' not supported") != std::string::npos);
  CHECK_FALSE(parse_tmpfs("/run:size=0").ok());
  // A spec's JSON keeps it (and says nothing of it when unset).
  RunSpec s;
  s.argv = {"true"};
  s.tmpfs = {*parse_tmpfs("/run:noexec"), TmpfsMount{"/b", 1 << 20}};
  auto j = spec_to_json(s);
  CHECK(j["tmpfs"][0]["noexec"] == true);
  CHECK_FALSE(j["tmpfs"][1].contains("noexec"));
  auto back = spec_from_json(j, "test");
  REQUIRE(back.ok());
  CHECK(back->tmpfs == s.tmpfs);
}

TEST_CASE("validation rejects paths that could aim outside the new root") {
  RunSpec s;
  s.argv = {"true"};
  CHECK(validate_spec(s).ok());
  s.binds = {{"/a", "/x/../../etc", false}};
  CHECK_FALSE(validate_spec(s).ok());
  s.binds = {{"/a", "relative", false}};
  CHECK_FALSE(validate_spec(s).ok());
  s.binds.clear();
  s.workdir = "tmp";
  CHECK_FALSE(validate_spec(s).ok());
  s.workdir = "/tmp";
  s.argv.clear();
  CHECK_FALSE(validate_spec(s).ok());
}

TEST_CASE("profiles: built-ins load, layer in order, and are validated") {
  auto untrusted = load_profile("untrusted");
  REQUIRE(untrusted.ok());
  auto s = spec_from_layers(*untrusted, nullptr, "");
  REQUIRE(s.ok());
  CHECK(s->tier == 4);
  CHECK(s->profile == "untrusted");
  CHECK(s->limits.timeout_ms.has_value());
  auto trusted = load_profile("trusted");
  REQUIRE(trusted.ok());
  auto t = spec_from_layers(*trusted, nullptr, "");
  REQUIRE(t.ok());
  CHECK(t->tier == 3);
  CHECK(*t->limits.timeout_ms > *s->limits.timeout_ms);
  // A manifest layer overrides the profile.
  json manifest = {{"limits", {{"timeout_ms", 1234}}}};
  auto m = spec_from_layers(*untrusted, &manifest, "pack.json");
  REQUIRE(m.ok());
  CHECK(*m->limits.timeout_ms == 1234);
  CHECK(*m->limits.memory_bytes == *s->limits.memory_bytes);
  json bad = {{"limits", {{"nope", 1}}}};
  auto b = spec_from_layers(*untrusted, &bad, "pack.json");
  REQUIRE_FALSE(b.ok());
  CHECK(b.error().message.find("pack.json: /limits/nope: unknown key") == 0);
  CHECK_FALSE(load_profile("no-such-profile").ok());
}

TEST_CASE("profiles: find_profile reads the file afresh each time, unparsed; load_profile parses it") {
  char dir[] = "/tmp/sbx-unit-profile-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  std::string path = std::string(dir) + "/p.json";
  auto write = [&](const char* text) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(text, f);
    std::fclose(f);
  };
  write(R"({"limits": {"pids": 64}})");
  auto had = load_profile(path);
  REQUIRE(had.ok());
  auto same = find_profile(path);
  REQUIRE(same.ok());
  CHECK(same->origin == had->source.origin);
  CHECK(same->text == had->source.text);
  write(R"({"limits": {"pids": 32}})");
  auto changed = find_profile(path);
  REQUIRE(changed.ok());
  CHECK(changed->text != had->source.text);  // read afresh, not the earlier text
  auto reparsed = load_profile(path);
  REQUIRE(reparsed.ok());
  CHECK(reparsed->patch != had->patch);
  write(R"({"limits": {"pids": "many"}})");
  CHECK(find_profile(path).ok());          // found and read: not parsed
  CHECK_FALSE(load_profile(path).ok());  // a broken edit is an error once parsed
  std::remove(path.c_str());
  ::rmdir(dir);
}

TEST_CASE("network: allow list, limits, and the proxy mode it implies") {
  json j = spec_to_json(RunSpec{});
  j["network"]["allow"] = {"example.com", "*.pypi.org:443", "[::1]:8080", "10.0.0.0/8:*"};
  j["network"]["max_connections"] = 10;
  j["network"]["max_bytes"] = "100M";
  auto r = spec_from_json(j, "p.json");
  REQUIRE(r.ok());
  CHECK(r->network.mode == "proxy");
  CHECK(r->network.allow.size() == 4);
  CHECK(r->network.max_connections == 10);
  CHECK(r->network.max_bytes == 100LL << 20);
  auto back = spec_from_json(spec_to_json(*r), "again");
  REQUIRE(back.ok());
  CHECK(*back == *r);

  json bad = spec_to_json(RunSpec{});
  bad["network"]["allow"] = {"ok.example", "bad host"};
  auto e = spec_from_json(bad, "p.json");
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message.find("p.json: /network/allow/1:") == 0);
  json bad2 = spec_to_json(RunSpec{});
  bad2["network"]["max_connections"] = 0;
  CHECK_FALSE(spec_from_json(bad2, "p.json").ok());
}

TEST_CASE("limit keys: the public spelling becomes the RunSpec key; both spellings of one limit are refused") {
  nlohmann::json limits = {{"timeout", "2s"}, {"memory_bytes", "1G"}, {"pids", 3}};
  std::map<std::string, std::string> written;
  REQUIRE(sbx::canonical_limit_keys(limits, "p.json", &written).ok());
  CHECK(limits == nlohmann::json({{"timeout_ms", "2s"}, {"memory_bytes", "1G"}, {"pids", 3}}));
  CHECK(written == std::map<std::string, std::string>{{"timeout_ms", "timeout"}});
  CHECK(sbx::as_written("p.json: /limits/timeout_ms: bad duration", written) == "p.json: /limits/timeout: bad duration");
  CHECK(sbx::as_written("/limits/timeout_msx: other", written) == "/limits/timeout_msx: other");
  nlohmann::json both = {{"memory", "1G"}, {"memory_bytes", 5}};
  auto st = sbx::canonical_limit_keys(both, "p.json");
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message.find("'memory' and 'memory_bytes'") != std::string::npos);
  CHECK(sbx::public_limit_name("cpu_time_ms") == "cpu_time");
  CHECK(sbx::public_limit_name("out_size_bytes") == "out_size_bytes");
}

TEST_CASE("limit keys: a bare number under a public duration or size key is refused, naming the key") {
  json limits = {{"timeout", 10}};
  auto st = canonical_limit_keys(limits, "profile p.json");
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().message ==
        R"(profile p.json: /limits/timeout: a bare number is ambiguous; write a duration with its unit: "10s" or "10000ms")");
  json sizes = {{"memory", 256}};
  CHECK(canonical_limit_keys(sizes, "p").error().message ==
        R"(p: /limits/memory: a bare number is ambiguous; write a size with its unit: "256M", "256K" or "256B" (bytes))");
  json fine = {{"timeout_ms", 10}, {"memory_bytes", 256}, {"pids", 4}, {"cpus", 0.5}, {"tmp_size", "8M"}};
  CHECK(canonical_limit_keys(fine, "p").ok());
}

namespace {
// {"extends": "<parent>"<rest>}, built by appending (GCC 12 misreads "literal" + std::string&& under -Wrestrict).
std::string extending(const std::string& parent, const std::string& rest = "") {
  std::string s = R"({"extends": ")";
  s += parent;
  s += '"';
  s += rest;
  s += '}';
  return s;
}
void write_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fputs(text.c_str(), f);
  std::fclose(f);
}
}  // namespace

TEST_CASE("profiles: a limit a profile leaves out comes from the default profile, never 'no limit'") {
  sbx::test::TempDir dir;
  write_file(dir / "p.json", R"({"limits": {"timeout": "5s", "memory": null}})");
  auto p = load_profile(dir / "p.json");
  REQUIRE(p.ok());
  auto s = spec_from_layers(*p, nullptr, "");
  auto d = spec_from_layers(*load_profile("untrusted"), nullptr, "");
  REQUIRE(s.ok());
  CHECK(*s->limits.timeout_ms == 5000);
  CHECK_FALSE(s->limits.memory_bytes.has_value());  // null: no limit, said so
  CHECK(s->limits.pids == d->limits.pids);
  CHECK(s->limits.cpus == d->limits.cpus);
  CHECK(s->limits.output_limit_bytes == d->limits.output_limit_bytes);
  CHECK(p->limits_defaulted == std::vector<std::string>{"pids", "cpus", "output_limit", "tmp_size"});
  auto layers = limit_layers(*p, nullptr, "", {});
  CHECK(layers["pids"] == "the default profile 'untrusted' (profile 'p' leaves it unset)");
  CHECK(layers["timeout"] == "profile 'p'");

  write_file(dir / "bad.json", R"({"limits": {"timeout": 10}})");
  CHECK(load_profile(dir / "bad.json").error().message ==
        "profile " + (dir / "bad.json") +
            R"(: /limits/timeout: a bare number is ambiguous; write a duration with its unit: "10s" or "10000ms")");
  write_file(dir / "typo.json", R"({"extend": "trusted"})");
  CHECK(load_profile(dir / "typo.json").error().message ==
        "profile " + (dir / "typo.json") + ": /extend: unknown key (did you mean 'extends'?)");
}

TEST_CASE("profiles: extends inherits and overrides; unknown parents, cycles and depth are refused") {
  sbx::test::TempDir dir;
  write_file(dir / "child.json", R"({"extends": "trusted", "limits": {"timeout": "5s", "cpus": 2}})");
  auto c = load_profile(dir / "child.json");
  REQUIRE(c.ok());
  auto s = spec_from_layers(*c, nullptr, "");
  auto t = spec_from_layers(*load_profile("trusted"), nullptr, "");
  REQUIRE(s.ok());
  CHECK(*s->limits.timeout_ms == 5000);
  CHECK(*s->limits.cpus == 2);
  CHECK(s->limits.memory_bytes == t->limits.memory_bytes);  // trusted's 4G, not untrusted's
  CHECK(s->capabilities.keep == t->capabilities.keep);
  CHECK(s->tier == 3);
  CHECK(c->extends == std::vector<std::string>{"trusted"});
  CHECK(c->limits_defaulted.empty());
  // A grandchild by file; null lifts the inherited limit.
  write_file(dir / "grand.json", extending(dir / "child.json", R"(, "limits": {"memory": null})"));
  auto g = load_profile(dir / "grand.json");
  REQUIRE(g.ok());
  auto gs = spec_from_layers(*g, nullptr, "");
  REQUIRE(gs.ok());
  CHECK_FALSE(gs->limits.memory_bytes.has_value());
  CHECK(*gs->limits.timeout_ms == 5000);
  CHECK(g->extends == std::vector<std::string>{"child", "trusted"});

  write_file(dir / "a.json", extending(dir / "b.json"));
  write_file(dir / "b.json", extending(dir / "a.json"));
  auto cyc = load_profile(dir / "a.json");
  REQUIRE_FALSE(cyc.ok());
  CHECK(cyc.error().message == "profile " + (dir / "b.json") + ": /extends: a cycle (" + (dir / "a.json") + " -> " +
                                   (dir / "b.json") + " -> " + (dir / "a.json") + "): a profile cannot extend itself");
  auto level = [&](int i) {
    std::string name = "d";
    name += std::to_string(i);
    name += ".json";
    return dir / name;
  };
  for (int i = 0; i < 10; ++i) write_file(level(i), extending(level(i + 1)));
  write_file(level(10), "{}");
  auto deep = load_profile(level(0));
  REQUIRE_FALSE(deep.ok());
  CHECK(deep.error().message.find(": /extends: more than 8 levels of extends") != std::string::npos);
  write_file(dir / "orphan.json", R"({"extends": "no-such"})");
  CHECK(load_profile(dir / "orphan.json").error().message.starts_with("profile " + (dir / "orphan.json") +
                                                                      ": /extends: unknown profile 'no-such'"));
  write_file(dir / "num.json", R"({"extends": 3})");
  CHECK(load_profile(dir / "num.json").error().message ==
        "profile " + (dir / "num.json") + R"(: /extends: must be the name of a profile (e.g. "untrusted"))");
}

namespace {
// Runs in `dir` for one scope: the current directory a profile's extends must not depend on.
struct InDir {
  std::string was;
  explicit InDir(const std::string& dir) {
    char buf[4096];
    REQUIRE(::getcwd(buf, sizeof buf) != nullptr);
    was = buf;
    REQUIRE(::chdir(dir.c_str()) == 0);
  }
  ~InDir() { (void)::chdir(was.c_str()); }
  InDir(const InDir&) = delete;
  InDir& operator=(const InDir&) = delete;
};
}  // namespace

TEST_CASE("profiles: the resolved digest and the pool's check cover a parent's edit (issue 32)") {
  // A sandbox pooled under child.json must not serve a call once base.json lifts a limit, and the
  // record's digest must tell the two runs apart, though child.json's text is the same.
  sbx::test::TempDir dir;
  write_file(dir / "base.json", R"({"limits": {"memory": "100M"}})");
  write_file(dir / "child.json", R"({"extends": "base.json", "limits": {"timeout": "5s"}})");
  auto before = load_profile(dir / "child.json");
  REQUIRE(before.ok());
  CHECK(sbx::is_sha256_hex(before->source.resolved_sha256));
  auto same = profile_changed(*before, dir / "child.json");
  REQUIRE(same.ok());
  CHECK(same->empty());
  write_file(dir / "base.json", R"({"limits": {"memory": null}})");
  auto after = load_profile(dir / "child.json");
  REQUIRE(after.ok());
  CHECK(after->source.text == before->source.text);
  CHECK(after->source.resolved_sha256 != before->source.resolved_sha256);
  auto changed = profile_changed(*before, dir / "child.json");
  REQUIRE(changed.ok());
  CHECK(*changed == "a profile that child extends (base) changed since the pooled sandbox was built");
  // The child's own edit is caught by its text, as before.
  write_file(dir / "child.json", R"({"extends": "base.json", "limits": {"timeout": "6s"}})");
  CHECK(profile_changed(*after, dir / "child.json")->find("the profile changed since") == 0);
  // A profile that extends nothing: one digest per merged content, its text compared alone.
  auto u = load_profile("untrusted");
  REQUIRE(u.ok());
  CHECK(profile_changed(*u, "untrusted")->empty());
}

TEST_CASE("profiles: a relative extends is read beside the profile, never from the current directory") {
  sbx::test::TempDir a, b;
  // b is the current directory (a checkout): its base.json lifts the memory limit.
  write_file(b / "base.json", R"({"limits": {"memory": null}})");
  write_file(b / "mybase.json", R"({"limits": {"memory": null}})");
  write_file(a / "child.json", R"({"extends": "base.json", "limits": {"timeout": "5s"}})");
  InDir in_b(b.path);
  auto missing = load_profile(a / "child.json");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().describe() == "profile " + (a / "child.json") + ": /extends: cannot read profile " +
                                          (a / "base.json") + ": No such file or directory");
  write_file(a / "base.json", R"({"limits": {"memory": "100M"}})");
  auto c = load_profile(a / "child.json");
  REQUIRE(c.ok());
  auto s = spec_from_layers(*c, nullptr, "");
  REQUIRE(s.ok());
  CHECK(*s->limits.memory_bytes == 100LL << 20);  // a/base.json's, not b/base.json's null
  CHECK(*s->limits.timeout_ms == 5000);
  // A bare name is a profile name (search directories, built-ins), not a file of the current directory.
  write_file(a / "named.json", R"({"extends": "mybase"})");
  auto named = load_profile(a / "named.json");
  REQUIRE_FALSE(named.ok());
  CHECK(named.error().message.find(": /extends: unknown profile 'mybase'") != std::string::npos);
  // A relative --profile file is the operator's own choice: read from the current directory, and
  // its extends beside it (here: b).
  write_file(b / "top.json", R"({"extends": "base.json"})");
  auto top = load_profile("top.json");
  REQUIRE(top.ok());
  CHECK_FALSE(spec_from_layers(*top, nullptr, "")->limits.memory_bytes.has_value());
}

TEST_CASE("profiles: a FIFO or a device as a profile or a parent is refused at once, never waited on") {
  sbx::test::TempDir dir;
  const std::string fifo = dir / "p.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Held open for writing (O_RDWR does not block): a loader that opened the FIFO blocking would
  // then block in read instead, until the timeout below closes this end and the read sees EOF.
  sbx::UniqueFd writer(::open(fifo.c_str(), O_RDWR | O_CLOEXEC));
  REQUIRE(writer.ok());
  write_file(dir / "child.json", R"({"extends": "p.json"})");
  auto direct = std::async(std::launch::async, [&] { return load_profile(fifo); });
  auto via = std::async(std::launch::async, [&] { return load_profile(dir / "child.json"); });
  const bool in_time = direct.wait_for(std::chrono::seconds(5)) == std::future_status::ready &&
                       via.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  CHECK(in_time);
  writer.reset();
  auto d = direct.get();
  auto v = via.get();
  REQUIRE_FALSE(d.ok());
  CHECK(d.error().message == "profile " + fifo + ": not a regular file");
  REQUIRE_FALSE(v.ok());
  CHECK(v.error().message == "profile " + (dir / "child.json") + ": /extends: profile " + fifo + ": not a regular file");
  CHECK(load_profile("/dev/null").error().message == "profile /dev/null: not a regular file");
  REQUIRE(::mkdir((dir / "d.json").c_str(), 0700) == 0);
  CHECK(load_profile(dir / "d.json").error().describe() == "cannot read profile " + (dir / "d.json") + ": Is a directory");
}

TEST_CASE("profiles: a limits that is not an object is refused, never taken for 'drop every inherited limit'") {
  sbx::test::TempDir dir;
  for (const char* bad : {R"({"extends": "untrusted", "limits": null})", R"({"limits": null})",
                          R"({"extends": "untrusted", "limits": "none"})", R"({"limits": []})"}) {
    CAPTURE(bad);
    write_file(dir / "p.json", bad);
    auto p = load_profile(dir / "p.json");
    REQUIRE_FALSE(p.ok());
    CHECK(p.error().message == "profile " + (dir / "p.json") +
                                   R"(: /limits: must be an object of limits (e.g. {"timeout": "5s"}); to lift one )"
                                   R"(limit set it to null inside it ({"memory": null}))");
  }
}

TEST_CASE("the operator's --allow-host rules join the profile's, one rule set for run and exec") {
  NetworkSpec n;
  REQUIRE(add_allow_hosts(n, {}).ok());
  CHECK(n.mode == "none");  // no rule: no network at all
  n.allow = {"pypi.org"};   // the profile's own
  REQUIRE(add_allow_hosts(n, {"example.com:8443", "[::1]:8080"}).ok());
  CHECK(n.allow == std::vector<std::string>{"pypi.org", "example.com:8443", "[::1]:8080"});
  CHECK(n.mode == "proxy");
  NetworkSpec bad;
  auto e = add_allow_hosts(bad, {"ok.example", "bad host"});
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message.rfind("--allow-host 'bad host'", 0) == 0);
  e = add_allow_hosts(bad, {"localhost:8080"});  // a loopback name never reaches anything
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message.find("can never allow anything") != std::string::npos);
}

TEST_CASE("bind options: rw, ro and idmap, one list") {
  auto b = parse_bind("/src:/dst:rw,idmap");
  REQUIRE(b.ok());
  CHECK(b->rw);
  CHECK(b->idmap);
  CHECK(b->dst == "/dst");
  b = parse_bind("/src:idmap");  // SRC:OPT: the destination is the source
  REQUIRE(b.ok());
  CHECK(b->dst == "/src");
  CHECK_FALSE(b->rw);
  CHECK(b->idmap);
  b = parse_bind("/src:/dst");
  REQUIRE(b.ok());
  CHECK_FALSE(b->idmap);
  auto bad = parse_bind("/src:/dst:rw,idmpa");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("option 'idmpa' not known (did you mean 'idmap'?)") != std::string::npos);
  CHECK(bad.error().message.find("ro, rw, idmap") != std::string::npos);
  CHECK_FALSE(parse_bind("/src:/dst:wr").ok());
  CHECK(bind_option_names() == std::vector<std::string>{"ro", "rw", "idmap"});
  // A profile's binds object takes the same option.
  auto s = spec_from_json(json{{"binds", json::array({json{{"src", "/a"}, {"dst", "/b"}, {"rw", true}, {"idmap", true}}})}}, "test");
  REQUIRE(s.ok());
  REQUIRE(s->binds.size() == 1);
  CHECK(s->binds[0].idmap);
  CHECK(spec_to_json(*s)["binds"][0]["idmap"] == true);
}

TEST_CASE("hostname: RFC 1123 characters only, since it is written into /etc/hosts") {
  RunSpec s;
  s.argv = {"/bin/true"};
  for (const char* ok : {"sbx", "build-7.example", "A1"}) {
    s.hostname = ok;
    CHECK(validate_spec(s).ok());
  }
  for (const char* bad : {"x\n10.0.0.9 api.example", "a b", "-x", ".x", "x\t", "x_y", "x#y"}) {
    s.hostname = bad;
    auto st = validate_spec(s);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().message.find("may hold only letters") != std::string::npos);
  }
}
