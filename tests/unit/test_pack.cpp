// runtime/pack: manifest parsing (every problem with file + pointer) and the content digest.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <tuple>

#include "runtime/typed/pack.hpp"

namespace fs = std::filesystem;
using sbx::PackProblem;

namespace {

struct TempPack {
  std::string dir;
  TempPack() {
    char t[] = "/tmp/sbx-unit-pack-XXXXXX";
    dir = ::mkdtemp(t);
    fs::create_directories(dir + "/schemas");
    write("schemas/in.json", R"({"type":"object"})");
    write("schemas/out.json", R"({"type":"object"})");
    write("run.sh", "echo hi\n");
  }
  ~TempPack() { fs::remove_all(dir); }
  void write(const std::string& rel, const std::string& text) { std::ofstream(dir + "/" + rel) << text; }
};

const char* kGood = R"({"name":"p","version":"1","entrypoint":["/bin/sh","/pack/run.sh"],
  "input_schema":"schemas/in.json","output_schema":"schemas/out.json",
  "limits":{"timeout":"2s","memory":"64M","pids":8,"cpus":0.5,"cpu_time_ms":1000,"output_limit":"1K","tmp_size":"8M"},
  "network":{"mode":"none"},
  "context":[{"name":"tol","path":"/ctx/tol.json","required":true}],
  "secrets":[{"name":"TOKEN","required":false,"delivery":"env"}]})";

bool has(const std::vector<PackProblem>& v, const std::string& file, const std::string& pointer) {
  for (auto& p : v)
    if (p.file == file && p.pointer == pointer) return true;
  return false;
}

}  // namespace

TEST_CASE("a good manifest becomes the manifest layer of the RunSpec") {
  TempPack t;
  std::vector<PackProblem> problems;
  auto p = sbx::parse_pack_manifest(t.dir, kGood, problems);
  REQUIRE_MESSAGE(p.ok(), (problems.empty() ? "" : problems[0].describe()));
  CHECK(p->spec_patch["argv"] == nlohmann::json({"/bin/sh", "/pack/run.sh"}));
  CHECK(p->spec_patch["limits"]["timeout_ms"] == "2s");
  CHECK(p->spec_patch["limits"]["memory_bytes"] == "64M");
  CHECK(p->spec_patch["limits"]["cpu_time_ms"] == 1000);
  CHECK(p->spec_patch["limits"]["tmp_size_bytes"] == "8M");
  REQUIRE(p->contexts.size() == 1);
  CHECK(p->contexts[0].required);
  REQUIRE(p->secrets.size() == 1);
  CHECK(p->secrets[0].delivery == "env");
}

TEST_CASE("every problem is reported with its file and pointer") {
  TempPack t;
  t.write("schemas/out.json", R"({"type": 12})");
  std::vector<PackProblem> problems;
  auto p = sbx::parse_pack_manifest(t.dir, R"({"name":"Bad Name","entrypoint":[],"image":"Debian/12",
    "input_schema":"../x.json","output_schema":"schemas/out.json","limits":{"memory":"lots","nope":1},
    "network":{"mode":"host"},"context":[{"name":"c","path":"/pack/x"}],
    "secrets":[{"name":"a-b","delivery":"mail"}],"extra":1})", problems);
  CHECK_FALSE(p.ok());
  for (auto ptr : {"/name", "/version", "/entrypoint", "/image", "/input_schema", "/limits/memory", "/limits/nope",
                   "/network/mode", "/context/0/path", "/secrets/0/name", "/secrets/0/delivery", "/extra"})
    CHECK_MESSAGE(has(problems, "pack.json", ptr), ptr);
  CHECK(has(problems, "schemas/out.json", "/type"));  // the schema error names its place
}

TEST_CASE("an invalid manifest still reports the name and version it had (pack validate --json)") {
  TempPack t;
  std::vector<PackProblem> problems;
  sbx::PackIdentity read;
  auto p = sbx::parse_pack_manifest(t.dir, R"({"name":"Bad Name","version":"1.2","entrypoint":[]})", problems,
                                    false, &read);
  CHECK_FALSE(p.ok());
  CHECK(read.name == std::optional<std::string>("Bad Name"));
  CHECK(read.version == std::optional<std::string>("1.2"));
  // Absent or not a string: nothing read.
  sbx::PackIdentity none;
  problems.clear();
  CHECK_FALSE(sbx::parse_pack_manifest(t.dir, R"({"version":3,"entrypoint":[]})", problems, false, &none).ok());
  CHECK_FALSE(none.name);
  CHECK_FALSE(none.version);
}

TEST_CASE("not JSON, not an object") {
  TempPack t;
  std::vector<PackProblem> problems;
  CHECK_FALSE(sbx::parse_pack_manifest(t.dir, "{", problems).ok());
  CHECK(has(problems, "pack.json", ""));
  problems.clear();
  CHECK_FALSE(sbx::parse_pack_manifest(t.dir, "[]", problems).ok());
  CHECK(problems.size() == 1);
}

TEST_CASE("digest: stable, path-independent, sensitive to content, mode and names; refuses links") {
  TempPack a, b;
  auto da = sbx::pack_digest(a.dir), db = sbx::pack_digest(b.dir);
  REQUIRE(da.ok());
  REQUIRE(db.ok());
  CHECK(da->starts_with("sha256:"));
  CHECK(*da == *db);  // same files in different places
  b.write("run.sh", "echo ho\n");
  CHECK(*sbx::pack_digest(b.dir) != *da);
  b.write("run.sh", "echo hi\n");
  CHECK(*sbx::pack_digest(b.dir) == *da);
  ::chmod((b.dir + "/run.sh").c_str(), 0755);
  CHECK(*sbx::pack_digest(b.dir) != *da);
  ::chmod((b.dir + "/run.sh").c_str(), 0644);
  fs::rename(b.dir + "/run.sh", b.dir + "/go.sh");
  CHECK(*sbx::pack_digest(b.dir) != *da);
  fs::create_symlink("/etc/passwd", b.dir + "/link");
  CHECK_FALSE(sbx::pack_digest(b.dir).ok());
}

TEST_CASE("pack names") {
  CHECK(sbx::valid_pack_name("corrosion-grade"));
  CHECK(sbx::valid_pack_name("a.b_c-1"));
  CHECK_FALSE(sbx::valid_pack_name(""));
  CHECK_FALSE(sbx::valid_pack_name("-x"));
  CHECK_FALSE(sbx::valid_pack_name("Upper"));
  CHECK_FALSE(sbx::valid_pack_name("a/b"));
}

// `sbx pack validate` said ok for an entrypoint the pack does not have: the first run failed with 127.
TEST_CASE("the entrypoint's files under /pack must be in the pack, argv[0] executable") {
  TempPack t;
  auto manifest = [](const std::string& argv) {
    return R"({"name":"p","version":"1","entrypoint":)" + argv +
           R"(,"input_schema":"schemas/in.json","output_schema":"schemas/out.json"})";
  };
  std::vector<PackProblem> problems;
  CHECK(sbx::parse_pack_manifest(t.dir, manifest(R"(["/bin/sh","/pack/run.sh"])"), problems).ok());
  problems.clear();
  auto missing = sbx::parse_pack_manifest(t.dir, manifest(R"(["/bin/sh","/pack/rnu.sh"])"), problems);
  CHECK_FALSE(missing.ok());
  REQUIRE(has(problems, "pack.json", "/entrypoint/1"));
  CHECK(problems[0].message.find("which the pack does not have") != std::string::npos);
  problems.clear();
  // run.sh is not executable (0644): as argv[0] the kernel refuses it.
  CHECK_FALSE(sbx::parse_pack_manifest(t.dir, manifest(R"(["/pack/run.sh"])"), problems).ok());
  REQUIRE(has(problems, "pack.json", "/entrypoint/0"));
  CHECK(problems[0].message.find("chmod +x run.sh") != std::string::npos);
  problems.clear();
  ::chmod((t.dir + "/run.sh").c_str(), 0755);
  CHECK(sbx::parse_pack_manifest(t.dir, manifest(R"(["/pack/run.sh"])"), problems).ok());
  problems.clear();
  CHECK_FALSE(sbx::parse_pack_manifest(t.dir, manifest(R"(["/bin/sh","/pack/schemas"])"), problems).ok());
  CHECK(has(problems, "pack.json", "/entrypoint/1"));
  problems.clear();
  CHECK_FALSE(sbx::parse_pack_manifest(t.dir, manifest(R"(["/bin/sh","/pack/../etc/passwd"])"), problems).ok());
  CHECK(has(problems, "pack.json", "/entrypoint/1"));
}

TEST_CASE("a manifest's warm key is the pack's own, checked as a profile's, for an entrypoint it can run") {
  TempPack t;
  t.write("main.py", "print(1)\n");
  auto manifest = [](const std::string& entrypoint, const std::string& warm) {
    return R"({"name":"p","version":"1","entrypoint":)" + entrypoint +
           R"(,"input_schema":"schemas/in.json","output_schema":"schemas/out.json","warm":)" + warm + "}";
  };
  std::vector<PackProblem> problems;
  auto p = sbx::parse_pack_manifest(t.dir, manifest(R"(["/usr/bin/python3","/pack/main.py","x"])",
                                                    R"({"interpreter":"python3","preload":["json","decimal"]})"),
                                    problems);
  REQUIRE_MESSAGE(p.ok(), (problems.empty() ? "" : problems[0].describe()));
  CHECK(p->warm.interpreter == "python3");
  CHECK(p->warm.preload == std::vector<std::string>{"json", "decimal"});
  CHECK_FALSE(p->spec_patch.contains("warm"));  // not a layer: a profile's preloads never mix in

  // An entrypoint a prepared interpreter would not run as its script; a preload that is a path; a
  // template (a profile's run_code only): each named at its pointer.
  for (auto [entrypoint, warm, pointer] :
       {std::tuple{R"(["/usr/bin/python3","-I","/pack/main.py"])", R"({"interpreter":"python3"})", "/warm/interpreter"},
        std::tuple{R"(["/bin/sh","/pack/run.sh"])", R"({"interpreter":"python3"})", "/warm/interpreter"},
        std::tuple{R"(["/usr/bin/python3"])", R"({"interpreter":"python3"})", "/warm/interpreter"},
        std::tuple{R"(["/usr/bin/python3","/pack/main.py"])", R"({"interpreter":"python3","preload":["../x"]})",
                   "/warm/preload/0"},
        std::tuple{R"(["/usr/bin/python3","/pack/main.py"])", R"({"interpreter":"python3","mode":"template"})",
                   "/warm/mode"},
        std::tuple{R"(["/usr/bin/python3","/pack/main.py"])", R"({"interpreter":"ruby"})", "/warm/interpreter"}}) {
    problems.clear();
    CHECK_FALSE(sbx::parse_pack_manifest(t.dir, manifest(entrypoint, warm), problems).ok());
    CHECK_MESSAGE(has(problems, "pack.json", pointer), entrypoint, " ", warm, ": ",
                  (problems.empty() ? "" : problems[0].describe()));
  }
  // A shell prepares nothing: any entrypoint.
  problems.clear();
  CHECK(sbx::parse_pack_manifest(t.dir, manifest(R"(["/bin/sh","/pack/run.sh"])", R"({"interpreter":"sh"})"), problems)
            .ok());
}
