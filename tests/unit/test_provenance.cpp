#include <doctest/doctest.h>

#include <regex>
#include <string>

#include "runtime/record/provenance.hpp"
#include "runtime/base/sha256.hpp"

using namespace sbx;
using nlohmann::json;

namespace {
const std::string kHex = sha256_hex("result");
const std::string kHex2 = sha256_hex("input");

json pack_record() {
  return {{"schema", "sbx.trace/v1"},
          {"run_id", "20261201T101010.123Z-abcdef01"},
          {"started_at", "2026-12-01T10:10:10.123Z"},
          {"ended_at", "2026-12-01T10:10:10.456Z"},
          {"sbx", {{"version", "0.1.0"}, {"binary_sha256", sha256_hex("sbx")}}},
          {"invocation", {{"argv", {"sbx", "pack", "run", "p", "--input", "in.json"}},
                          {"cwd", "/home/u"},
                          {"profile", {{"name", "untrusted"}, {"origin", "built-in"}, {"sha256", sha256_hex("profile")}}},
                          {"pack", {{"name", "count"}, {"version", "1.2.3"}, {"digest", "sha256:" + sha256_hex("pack")}}},
                          {"spec", {{"argv", {"/bin/sh", "/pack/run.sh"}}, {"network", {{"mode", "none"}, {"allow", json::array()}}}}}}},
          {"image", {{"name", "alpine"}, {"digest", "sha256:" + sha256_hex("image")}}},
          {"enforcement", {{"namespaces", {"user", "pid"}}, {"seccomp", {{"profile", "default"}, {"sha256", sha256_hex("sc")}}}}},
          {"inputs", {{{"path", "/in/records.json"}, {"bytes", 5}, {"sha256", kHex2}, {"source", "/home/u/in put.json"}}}},
          {"outputs", {{{"path", "/out/result.json"}, {"bytes", 6}, {"sha256", kHex}}}},
          {"stdout", {{"bytes", 0}, {"sha256", sha256_hex("")}}},
          {"stderr", {{"bytes", 3}, {"sha256", sha256_hex("err")}}},
          {"result", {{"status", "ok"}, {"exit_code", 0}, {"signal", nullptr}}}};
}

// in-toto spec/v1 field_types.md: a ResourceDescriptor MUST set one of uri, digest, content; a
// DigestSet maps algorithm names to lower-case hex for the standard algorithms.
void check_resource_descriptor(const json& rd, bool digest_required) {
  REQUIRE(rd.is_object());
  CHECK((rd.contains("uri") || rd.contains("digest") || rd.contains("content")));
  if (digest_required) REQUIRE(rd.contains("digest"));
  if (rd.contains("digest")) {
    REQUIRE(rd["digest"].is_object());
    CHECK_FALSE(rd["digest"].empty());
    for (auto& [alg, v] : rd["digest"].items()) {
      REQUIRE(v.is_string());
      if (alg == "sha256") CHECK(is_sha256_hex(v.get<std::string>()));
    }
  }
  if (rd.contains("name")) CHECK(rd["name"].is_string());
  if (rd.contains("uri")) CHECK(std::regex_match(rd["uri"].get<std::string>(), std::regex("^[a-z][a-z0-9+.-]*:.+")));
}
}  // namespace

TEST_CASE("provenance: an in-toto Statement v1 with a SLSA Provenance v1 predicate, shaped as the specs say") {
  auto doc = intoto_statement(pack_record());
  REQUIRE(doc);
  const json& s = doc->statement;
  // statement.md: _type, subject (each with digest), predicateType required; predicate an object.
  CHECK(s["_type"] == "https://in-toto.io/Statement/v1");
  CHECK(s["predicateType"] == "https://slsa.dev/provenance/v1");
  REQUIRE(s["subject"].is_array());
  REQUIRE(s["subject"].size() == 1);
  check_resource_descriptor(s["subject"][0], true);
  CHECK(s["subject"][0]["name"] == "/out/result.json");
  CHECK(s["subject"][0]["digest"]["sha256"] == kHex);
  const json& p = s["predicate"];
  // provenance v1: buildDefinition {buildType, externalParameters} and runDetails {builder.id}
  // are required; the TypeURIs are URIs.
  const json& bd = p["buildDefinition"];
  CHECK(bd["buildType"] == kBuildType);
  CHECK(bd["externalParameters"].is_object());
  CHECK(bd["internalParameters"].is_object());
  CHECK(bd["externalParameters"]["profile"]["name"] == "untrusted");
  CHECK(bd["externalParameters"]["profile"]["sha256"] == sha256_hex("profile"));
  CHECK(bd["externalParameters"]["pack"]["digest"] == "sha256:" + sha256_hex("pack"));
  CHECK(bd["externalParameters"]["argv"][1] == "pack");
  REQUIRE(bd["resolvedDependencies"].is_array());
  std::map<std::string, json> deps;
  for (auto& d : bd["resolvedDependencies"]) {
    check_resource_descriptor(d, false);
    deps[d["name"]] = d;
  }
  CHECK(deps["image"]["digest"]["sha256"] == sha256_hex("image"));
  CHECK(deps["pack"]["digest"]["sha256"] == sha256_hex("pack"));
  CHECK(deps["/in/records.json"]["digest"]["sha256"] == kHex2);
  CHECK(deps["/in/records.json"]["uri"] == "file:///home/u/in%20put.json");
  const json& rd = p["runDetails"];
  CHECK(rd["builder"]["id"] == "pkg:generic/sbx@0.1.0?checksum=sha256:" + sha256_hex("sbx"));
  CHECK(rd["metadata"]["invocationId"] == "20261201T101010.123Z-abcdef01");
  CHECK(is_rfc3339_utc(rd["metadata"]["startedOn"]));
  CHECK(is_rfc3339_utc(rd["metadata"]["finishedOn"]));
  for (auto& b : rd["byproducts"]) check_resource_descriptor(b, true);
  // Extension fields are named <vendor>_<field> (provenance v1, "Extension fields").
  CHECK(rd["sbx_result"]["status"] == "ok");
  CHECK(doc->skipped.empty());
}

TEST_CASE("provenance: a run without outputs attests its stdout; bad digests and times are left out, said") {
  json r = pack_record();
  r["outputs"] = json::array({{{"path", "/out/x"}, {"sha256", "NOTHEX"}}});
  r["invocation"]["pack"] = nullptr;
  r["image"] = {{"name", "host"}, {"digest", nullptr}};
  r["started_at"] = "2026-12-01 10:10:10";
  r["sbx"].erase("binary_sha256");
  auto doc = intoto_statement(r);
  REQUIRE(doc);
  const json& s = doc->statement;
  REQUIRE(s["subject"].size() == 1);
  CHECK(s["subject"][0]["name"] == "stdout");
  CHECK(s["subject"][0]["digest"]["sha256"] == sha256_hex(""));
  CHECK_FALSE(s["predicate"]["runDetails"]["metadata"].contains("startedOn"));
  CHECK(s["predicate"]["runDetails"]["builder"]["id"] == "pkg:generic/sbx@0.1.0");
  // The host's file system: a descriptor with a uri, no digest (none exists).
  auto& deps = s["predicate"]["buildDefinition"]["resolvedDependencies"];
  CHECK(deps[0]["name"] == "image");
  CHECK(deps[0]["uri"] == "file:///");
  CHECK_FALSE(deps[0].contains("digest"));
  CHECK(doc->skipped.size() == 3);  // the output, started_at, the binary's digest

  json empty = {{"run_id", "x"}};
  CHECK_FALSE(intoto_statement(empty));
  CHECK_FALSE(intoto_statement(json::object()));
}

TEST_CASE("provenance: RFC 3339 UTC times, digest sets, file URIs") {
  CHECK(is_rfc3339_utc("1985-04-12T23:20:50.52Z"));
  CHECK(is_rfc3339_utc("2026-12-01T10:10:10Z"));
  CHECK_FALSE(is_rfc3339_utc("2026-12-01T10:10:10+01:00"));
  CHECK_FALSE(is_rfc3339_utc("2026-13-01T10:10:10Z"));
  CHECK_FALSE(is_rfc3339_utc("2026-12-01T10:10:10.Z"));
  CHECK_FALSE(is_rfc3339_utc("2026-12-01"));
  CHECK(sha256_digest_set("sha256:" + kHex) == json{{"sha256", kHex}});
  CHECK(sha256_digest_set(kHex) == json{{"sha256", kHex}});
  CHECK(sha256_digest_set("sha256:ABC").is_null());
  CHECK(sha256_digest_set(json(5)).is_null());
  CHECK(file_uri("/a b/\xff%") == "file:///a%20b/%FF%25");
}
