#include "runtime/record/provenance.hpp"

#include <cctype>
#include <cstdio>

#include "runtime/base/json_io.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/base/bytes.hpp"

namespace sbx {
namespace {
using nlohmann::json;

// The tolerant member read (json_io.hpp), by this file's short name.
constexpr auto at = json_member;

std::string str(const json& v, const std::string& fallback = "") {
  return v.is_string() ? v.get<std::string>() : fallback;
}

// A stream of the record ({bytes, sha256, truncated, ...}) as a ResourceDescriptor.
json stream_descriptor(const char* name, const json& s) {
  json d = sha256_digest_set(at(s, "sha256"));
  if (d.is_null()) return nullptr;
  json rd = {{"name", name}, {"digest", d}};
  json ann = json::object();
  if (at(s, "bytes").is_number_integer()) ann["bytes"] = at(s, "bytes");
  if (at(s, "truncated").is_boolean()) ann["truncated"] = at(s, "truncated");
  if (!ann.empty()) rd["annotations"] = ann;
  return rd;
}

}  // namespace

json sha256_digest_set(const json& v) {
  if (!v.is_string()) return nullptr;
  std::string s = v.get<std::string>();
  if (s.rfind("sha256:", 0) == 0) s = s.substr(7);
  if (!is_sha256_hex(s)) return nullptr;
  return {{"sha256", s}};
}

bool is_rfc3339_utc(const std::string& s) {
  // YYYY-MM-DDThh:mm:ss
  static const char kShape[] = "dddd-dd-ddTdd:dd:dd";
  if (s.size() < sizeof kShape || s.back() != 'Z') return false;
  for (std::size_t i = 0; i + 1 < sizeof kShape; ++i) {
    char want = kShape[i];
    if (want == 'd' ? !std::isdigit(static_cast<unsigned char>(s[i])) : s[i] != want) return false;
  }
  std::size_t i = sizeof kShape - 1;
  if (s[i] == '.') {
    std::size_t digits = 0;
    for (++i; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) ++digits;
    if (digits == 0) return false;
  }
  if (i != s.size() - 1) return false;
  auto num = [&](std::size_t pos, std::size_t n) { return std::stoi(s.substr(pos, n)); };
  int mon = num(5, 2), day = num(8, 2), h = num(11, 2), m = num(14, 2), sec = num(17, 2);
  return mon >= 1 && mon <= 12 && day >= 1 && day <= 31 && h <= 23 && m <= 59 && sec <= 60;
}

std::string file_uri(const std::string& path) {
  std::string out = "file://";
  for (unsigned char c : bytes_of(path)) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

namespace {

// subject: the outputs, by their path in the sandbox; else stdout. The streams not attested are
// byproducts.
json subjects(const json& r, ProvenanceDoc& doc, json& byproducts) {
  json subject = json::array();
  const json& outputs = at(r, "outputs");
  if (outputs.is_array()) {
    for (auto& o : outputs) {
      std::string name = str(at(o, "path"));
      json d = sha256_digest_set(at(o, "sha256"));
      if (name.empty() || d.is_null()) {
        doc.skipped.push_back("output " + (name.empty() ? std::string("(no path)") : name) + ": no valid sha256");
        continue;
      }
      json rd = {{"name", name}, {"digest", d}};
      if (at(o, "bytes").is_number_integer()) rd["annotations"] = {{"bytes", at(o, "bytes")}};
      subject.push_back(rd);
    }
  }
  json out_stream = stream_descriptor("stdout", at(r, "stdout"));
  json err_stream = stream_descriptor("stderr", at(r, "stderr"));
  if (subject.empty() && !out_stream.is_null()) subject.push_back(out_stream);  // what `sbx run` produced
  else if (!out_stream.is_null()) byproducts.push_back(out_stream);
  if (!err_stream.is_null()) byproducts.push_back(err_stream);
  return subject;
}

json external_parameters(const json& r) {
  const json& inv = at(r, "invocation");
  const json& spec = at(inv, "spec");
  const json& prof = at(inv, "profile");
  const json& pack = at(inv, "pack");
  return {
      {"argv", at(inv, "argv")},
      {"command", at(spec, "argv")},
      {"profile", {{"name", at(prof, "name")}, {"sha256", at(prof, "sha256")}}},
      {"pack", pack.is_object()
                   ? json{{"name", at(pack, "name")}, {"version", at(pack, "version")}, {"digest", at(pack, "digest")}}
                   : json(nullptr)},
      {"image", at(at(r, "image"), "name")},
      {"network", {{"mode", at(at(spec, "network"), "mode")}, {"allow", at(at(spec, "network"), "allow")}}}};
}

// One input as a resolved dependency (a directory's sha256 is of its sbx-manifest v1 text, not
// of any file: its own key), or null with a note in doc.skipped.
json input_dependency(const json& in, const std::string& path, ProvenanceDoc& doc) {
  json d = sha256_digest_set(at(in, "sha256"));
  if (path.empty() || d.is_null()) {
    doc.skipped.push_back("input " + (path.empty() ? std::string("(no path)") : path) + ": no valid sha256");
    return nullptr;
  }
  if (at(in, "type") == "directory") d = {{"sbxManifestSha256", d["sha256"]}};
  json rd = {{"name", path}, {"digest", d}};
  std::string source = str(at(in, "source"));
  if (!source.empty() && source[0] == '/') rd["uri"] = file_uri(source);
  json ann = json::object();
  for (const char* k : {"bytes", "type", "entries"})
    if (!at(in, k).is_null()) ann[k] = at(in, k);
  if (!ann.empty()) rd["annotations"] = ann;
  return rd;
}

// The image, the pack and the inputs; `input_paths` gets every input's path.
json dependencies(const json& r, ProvenanceDoc& doc, json& input_paths) {
  json deps = json::array();
  const json& image = at(r, "image");
  const json& pack = at(at(r, "invocation"), "pack");
  // The image: its digest names the sealed tree that ran; "host" is the host's own /usr etc.,
  // which has no digest (said in the annotation, not hidden).
  std::string image_name = str(at(image, "name"), "?");
  if (json d = sha256_digest_set(at(image, "digest")); !d.is_null()) {
    deps.push_back({{"name", "image"}, {"digest", d}, {"annotations", {{"sbx_image", image_name}}}});
  } else {
    deps.push_back(
        {{"name", "image"},
         {"uri", "file:///"},
         {"annotations", {{"sbx_image", image_name}, {"note", "the host's file system, read-only; no digest"}}}});
  }
  if (pack.is_object()) {
    std::string pname = str(at(pack, "name"), "?") + "@" + str(at(pack, "version"), "?");
    if (json d = sha256_digest_set(at(pack, "digest")); !d.is_null())
      deps.push_back({{"name", "pack"}, {"digest", d}, {"annotations", {{"sbx_pack", pname}}}});
    else doc.skipped.push_back("pack " + pname + ": no valid digest");
  }
  const json& inputs = at(r, "inputs");
  if (inputs.is_array()) {
    for (auto& in : inputs) {
      std::string path = str(at(in, "path"));
      input_paths.push_back(path);
      if (json rd = input_dependency(in, path, doc); !rd.is_null()) deps.push_back(std::move(rd));
    }
  }
  return deps;
}

json internal_parameters(const json& r) {
  const json& enf = at(r, "enforcement");
  return {{"cwd", at(at(r, "invocation"), "cwd")},
          {"limitsApplied", at(enf, "limits_applied")},
          {"seccomp", {{"profile", at(at(enf, "seccomp"), "profile")}, {"sha256", at(at(enf, "seccomp"), "sha256")}}},
          {"namespaces", at(enf, "namespaces")},
          {"kernel", at(at(r, "host"), "kernel")},
          {"recordSchema", at(r, "schema")}};
}

json run_details(const json& r, const std::string& run_id, ProvenanceDoc& doc, const json& byproducts) {
  const json& sbx = at(r, "sbx");
  std::string version = str(at(sbx, "version"), "unknown");
  std::string builder_id = "pkg:generic/sbx@" + file_uri(version).substr(7);  // percent-encoded
  json bin = sha256_digest_set(at(sbx, "binary_sha256"));
  if (!bin.is_null()) builder_id += "?checksum=sha256:" + bin["sha256"].get<std::string>();
  else doc.skipped.push_back("builder: the record has no valid sbx.binary_sha256 (a record of an older sbx)");

  json metadata = {{"invocationId", run_id}};
  for (auto [field, key] : {std::pair{"startedOn", "started_at"}, std::pair{"finishedOn", "ended_at"}}) {
    std::string t = str(at(r, key));
    if (is_rfc3339_utc(t)) metadata[field] = t;
    else doc.skipped.push_back(std::string(key) + ": not an RFC 3339 UTC time");
  }
  const json& res = at(r, "result");
  json details = {
      {"builder", {{"id", builder_id}, {"version", {{"sbx", version}}}}},
      {"metadata", metadata},
      {"sbx_result",
       {{"status", at(res, "status")}, {"exit_code", at(res, "exit_code")}, {"signal", at(res, "signal")}}}};
  if (!byproducts.empty()) details["byproducts"] = byproducts;
  return details;
}

}  // namespace

Result<ProvenanceDoc> intoto_statement(const json& r) {
  ProvenanceDoc doc;
  const std::string run_id = str(at(r, "run_id"));
  if (run_id.empty()) return make_error("trace export", "the record has no run_id");
  json byproducts = json::array();
  json subject = subjects(r, doc, byproducts);
  if (subject.empty())
    return make_error("trace export", "run " + run_id + " has no output or stream with a valid sha256 to attest");
  json external = external_parameters(r);
  json input_paths = json::array();
  json deps = dependencies(r, doc, input_paths);
  external["inputs"] = input_paths;
  doc.statement = {{"_type", kInTotoStatementType},
                   {"subject", subject},
                   {"predicateType", kSlsaProvenanceType},
                   {"predicate",
                    {{"buildDefinition",
                      {{"buildType", kBuildType},
                       {"externalParameters", external},
                       {"internalParameters", internal_parameters(r)},
                       {"resolvedDependencies", deps}}},
                     {"runDetails", run_details(r, run_id, doc, byproducts)}}}};
  return doc;
}

}  // namespace sbx
