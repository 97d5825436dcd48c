#include "runtime/server/mcp_protocol.hpp"

#include <algorithm>

#include "runtime/base/json_io.hpp"
#include "runtime/typed/exec.hpp"
#include "runtime/typed/typed_io.hpp"

namespace sbx::mcp {
using nlohmann::json;

std::vector<std::string> supported_versions() {
  std::vector<std::string> v{kModernVersion};
  for (auto* l : kLegacyVersions) v.emplace_back(l);
  return v;
}

std::string negotiate_legacy_version(const json& requested) {
  if (requested.is_string())
    for (auto* l : kLegacyVersions)
      if (requested == l) return l;
  return kLegacyVersions[0];
}

json error_response(const json& id, int code, const std::string& message, const json& data) {
  json e = {{"code", code}, {"message", message}};
  if (!data.is_null()) e["data"] = data;
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", std::move(e)}};
}

json result_response(const json& id, json result) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

Incoming classify_value(json msg) {
  Incoming in;
  auto invalid = [&](const std::string& why, const json& id = nullptr) {
    in.kind = Incoming::bad;
    in.reply = error_response(id, kInvalidRequest, "Invalid Request: " + why);
    return in;
  };
  if (!msg.is_object()) return invalid("a message is a JSON object");
  // The id, when usable, goes back in the error so the client can match it (JSON-RPC 2.0 §5).
  json id = nullptr;
  bool has_id = msg.contains("id");
  if (has_id && (msg["id"].is_string() || msg["id"].is_number_integer())) id = msg["id"];
  if (!msg.contains("jsonrpc") || msg["jsonrpc"] != "2.0") return invalid("\"jsonrpc\" must be \"2.0\"", id);
  if (!msg.contains("method")) {
    if (has_id && (msg.contains("result") || msg.contains("error"))) {
      in.kind = Incoming::response;
      return in;
    }
    return invalid("no \"method\"", id);
  }
  if (!msg["method"].is_string()) return invalid("\"method\" must be a string", id);
  in.method = msg["method"].get<std::string>();
  // MCP's RequestId is a string or a number (schema.ts); null, fractions, objects are not ids.
  if (has_id && id.is_null()) return invalid("\"id\" must be a string or an integer");
  if (msg.contains("params")) {
    if (!msg["params"].is_object()) {
      in.kind = Incoming::bad;
      in.reply = error_response(id, kInvalidParams, "Invalid params: \"params\" must be an object");
      if (!has_id) in.reply = nullptr;  // a notification is never answered, even in error
      return in;
    }
    in.params = std::move(msg["params"]);
  }
  in.id = id;
  in.kind = has_id ? Incoming::request : Incoming::notification;
  return in;
}

Incoming classify(std::string_view line) {
  // Depth and value bounds hold before the DOM exists (json_io.hpp): a message's tree stays
  // within kMaxMessageValues, a batch's members together.
  ParsedJson p = parse_json(line, kMessageBounds);
  if (!p.ok()) {
    Incoming in;
    in.reply = error_response(nullptr, kParseError, "Parse error: " + p.describe());
    return in;
  }
  if (p.value.is_array()) {  // a batch: only the server loop knows whether 2025-03-26 is in use
    Incoming in;
    in.kind = Incoming::bad;
    in.params = std::move(p.value);
    in.method = "(batch)";
    return in;
  }
  return classify_value(std::move(p.value));
}

std::string queued_request_refusal(std::size_t held, std::size_t request, std::size_t waiting, std::size_t budget) {
  if (waiting == 0 || held + request <= budget) return "";
  return "Server busy: the " + std::to_string(waiting) + " calls waiting for a slot hold " + std::to_string(held) +
         " bytes of requests, and this one's " + std::to_string(request) + " would pass the " + std::to_string(budget) +
         " bytes waiting calls may hold in all; send it once earlier calls have started (at most --max-concurrent "
         "run at once), or make it smaller";
}

RequestEra request_era(const json& params) {
  RequestEra e;
  auto meta = params.find("_meta");
  if (meta == params.end() || !meta->is_object()) return e;
  auto v = meta->find(kMetaProtocolVersion);
  if (v == meta->end()) return e;
  e.modern = true;
  e.version = v->is_string() ? v->get<std::string>() : json_excerpt(*v);
  if (!v->is_string() || *v != kModernVersion) {
    e.error =
        json{{"code", kUnsupportedProtocolVersion},
             {"message", "Unsupported protocol version"},
             {"data", {{"supported", supported_versions()}, {"requested", v->is_string() ? *v : json(e.version)}}}};
    return e;
  }
  auto caps = meta->find(kMetaClientCapabilities);
  if (caps == meta->end() || !caps->is_object())
    e.error = json{{"code", kInvalidParams},
                   {"message", std::string("Invalid params: _meta \"") + kMetaClientCapabilities +
                                   "\" (an object) is required in protocol version " + kModernVersion}};
  return e;
}

namespace {
void reroot_in_place(json& s, const std::string& pointer) {
  // Iterative (schemas come from pack authors; depth is bounded by json_io's reader already, but
  // a walk that cannot overflow the stack needs no argument about that bound).
  std::vector<json*> stack{&s};
  while (!stack.empty()) {
    json* cur = stack.back();
    stack.pop_back();
    if (cur->is_array()) {
      for (auto& x : *cur) stack.push_back(&x);
    } else if (cur->is_object()) {
      for (auto it = cur->begin(); it != cur->end(); ++it) {
        const std::string& k = it.key();
        if (k == "$ref" && it->is_string()) {
          std::string r = it->get<std::string>();
          if (!r.empty() && r[0] == '#' && (r.size() == 1 || r[1] == '/')) *it = "#" + pointer + r.substr(1);
          continue;
        }
        if (k == "enum" || k == "const" || k == "default" || k == "examples") continue;
        stack.push_back(&*it);
      }
    }
  }
}

// A pack schema as a subschema: `$schema` belongs to the root of the whole document, and `$id`
// would make the subschema a resource of its own, against which the re-rooted refs would miss.
json as_subschema(const json& schema, const std::string& pointer) {
  json s = schema;
  if (s.is_object()) {
    s.erase("$schema");
    s.erase("$id");
  }
  reroot_in_place(s, pointer);
  return s;
}
}  // namespace

json reroot_schema(const json& schema, const std::string& pointer) {
  json s = schema;
  reroot_in_place(s, pointer);
  return s;
}

std::string skipped_pack_warning(const std::string& dir, const std::vector<std::string>& problems) {
  std::string why = problems.empty() ? std::string("it does not load") : problems.front();
  if (problems.size() > 1) why += " (and " + std::to_string(problems.size() - 1) + " more problem(s))";
  return "mcp: warning: --packs: the pack in " + dir + " is not offered: " + why +
         "; the other tools (run_code too) are served; check it with: sbx pack validate " + dir;
}

std::string tool_name_clash(const std::map<std::string, std::string>& offered, const std::string& name) {
  if (name == "run_code") return "its name 'run_code' is sbx's own tool: rename the pack in its pack.json";
  auto it = offered.find(name);
  if (it == offered.end()) return "";
  return "its name '" + name + "' is also the name of the pack in " + it->second +
         ": neither is offered (a pack added beside another must not take its tool, secrets or contexts): "
         "rename one of them in its pack.json";
}

PackTool pack_tool(const Pack& pack) {
  PackTool t;
  t.dir = pack.dir;
  t.name = pack.name;
  t.warm = pack.warm;
  json input = {{"type", "object"},
                {"properties",
                 {{"records",
                   {{"type", "array"},
                    {"description", "The input records; each is checked against the pack's input schema"},
                    {"items", as_subschema(pack.input_schema, "/properties/records/items")}}}}},
                {"required", {"records"}},
                {"additionalProperties", false}};
  json output;
  const json& os = pack.output_schema;
  if (os.is_object() && os.value("type", json()) == "object") {
    output = os;
  } else {
    t.wrapped_output = true;
    output = {{"type", "object"},
              {"properties", {{"result", as_subschema(os, "/properties/result")}}},
              {"required", {"result"}},
              {"additionalProperties", false}};
  }
  // The dialect the pack's schemas are written in stays named at the root (the MCP default is
  // 2020-12; sbx's packs are usually draft-07).
  if (pack.input_schema.is_object() && pack.input_schema.contains("$schema"))
    input["$schema"] = pack.input_schema["$schema"];
  if (t.wrapped_output && os.is_object() && os.contains("$schema")) output["$schema"] = os["$schema"];
  std::string desc = pack.description.empty() ? "Rule pack " + pack.name : pack.description;
  desc += " (sbx pack " + pack.name + " " + pack.version + ", " + pack.digest +
          "; each call runs in a fresh sandbox; arguments: {\"records\": [...]})";
  t.definition = {{"name", pack.name},
                  {"description", desc},
                  {"inputSchema", std::move(input)},
                  {"outputSchema", std::move(output)}};
  return t;
}

json run_code_tool(const std::string& profile) {
  json limits = {{"type", "object"},
                 {"description", "Lower the profile's limits (never raise them): values as for sbx run's flags"},
                 {"properties", limits_properties_schema()},
                 {"additionalProperties", false}};
  json input = {
      {"type", "object"},
      {"properties",
       {{"language", {{"type", "string"}, {"enum", exec_languages()}}},
        {"code",
         {{"type", "string"},
          {"description", "The program: /code/main.py, /code/main.sh, /code/main.bash or /code/main.js"}}},
        {"inputs", {{"description", "Any JSON value, readable at /in/input.json"}}},
        {"files",
         {{"type", "object"},
          {"description", "Extra files beside the code under /code: {relative path: content}"},
          {"additionalProperties", {{"type", "string"}}}}},
        {"limits", limits},
        {"output_schema",
         {{"type", "object"}, {"description", "A JSON Schema the program's /out/result.json must satisfy"}}}}},
      {"required", {"language", "code"}},
      {"additionalProperties", false}};
  json nullable_string = {{"type", {"string", "null"}}};
  json output = {{"type", "object"},
                 {"properties",
                  {{"run_id", {{"type", "string"}}},
                   {"status", {{"type", "string"}}},
                   {"exit_code", {{"type", {"integer", "null"}}}},
                   {"signal", json::object()},
                   {"error", nullable_string},
                   {"stdout", {{"type", "string"}}},
                   {"stderr", {{"type", "string"}}},
                   {"stdout_truncated", {{"type", "boolean"}}},
                   {"stderr_truncated", {{"type", "boolean"}}},
                   {"result", json::object()},
                   {"result_errors", json::object()},
                   {"usage", {{"type", "object"}}},
                   {"violations", {{"type", "array"}}},
                   {"trace", {{"type", "string"}}}}},
                 {"required", {"run_id", "status", "exit_code", "stdout", "stderr", "result"}}};
  return {
      {"name", "run_code"},
      {"description",
       "Run a Python, sh, bash or Node.js program in a fresh, isolated sandbox (no network, read-only root, profile " +
           profile +
           ", whose limits are ceilings). The code is /code/main.<ext>, inputs are at /in/input.json; write a JSON "
           "result to /out/result.json. Returns status, exit code, captured stdout/stderr and the result."},
      {"inputSchema", std::move(input)},
      {"outputSchema", std::move(output)}};
}

json tool_error(const std::string& text) {
  return {{"content", json::array({{{"type", "text"}, {"text", text}}})}, {"isError", true}};
}

JsonBounds worker_response_bounds(std::int64_t stream_limit_bytes) {
  JsonBounds r = result_bounds();
  static_assert(kWorkerEnvelopeDepth + 3 <= kMaxEnvelopeDepth, "the MCP message around a result must stay dumpable");
  auto stream = static_cast<std::size_t>(std::max<std::int64_t>(0, stream_limit_bytes));
  r.max_bytes = 2 * kMaxJsonEscapeFactor * (stream + r.max_bytes) + (1u << 20);
  r.max_depth += kWorkerEnvelopeDepth;
  r.max_values += 1u << 16;  // the response's own members beside the result (usage, violations, errors)
  return r;
}

namespace {
// The first `max` bytes of `s`, cut on a UTF-8 character boundary.
std::string head(const std::string& s, std::size_t max) {
  if (s.size() <= max) return s;
  std::size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut);
}

// Builds the summary DOM itself (a stack of containers, as nlohmann's own SAX DOM builder does),
// so that a member can be cut while it streams past: a 16 MiB stream never exists here as more
// than the parser's one token.
class SummarySax {
 public:
  SummarySax(json& root, json& cut, const JsonBounds& b, bool keep_result)
      : root_(root), cut_(cut), b_(b), keep_result_(keep_result) {}

  bool null() { return value(json(nullptr)); }
  bool boolean(bool v) { return value(json(v)); }
  bool number_integer(json::number_integer_t v) { return value(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return value(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return value(json(v)); }
  bool string(json::string_t& v) {
    if (!skipping() && stack_.size() == 1 && (key_ == "stdout" || key_ == "stderr") && v.size() > kSummaryBytes) {
      cut_[key_] = v.size();
      return value(json(head(v, kSummaryBytes)));
    }
    if (!skipping() && stack_.size() == 1 && key_ == "result" && !keep_result_ && v.size() > kSummaryBytes) {
      cut_["result"] = "omitted";
      return value(json(nullptr));
    }
    count_result(v.size());
    return value(json(std::move(v)));
  }
  bool binary(json::binary_t&) { return fail("binary values are not JSON"); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    if (depth_ > stack_.size()) return true;  // inside a member being skipped
    count_result(k.size());
    key_ = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    return fail(std::string("not valid JSON: ") + escape_utf8(ex.what()));
  }
  const std::string& problem() const { return problem_; }

 private:
  bool fail(std::string why) {
    if (problem_.empty()) problem_ = std::move(why);
    return false;
  }
  bool skipping() const { return depth_ > stack_.size(); }
  // A large result is left out of the summary: from the member on, its events are only counted.
  void count_result(std::size_t bytes) {
    if (keep_result_ || skipping() || !in_result_) return;
    result_bytes_ += bytes + 8;
    if (result_bytes_ <= kSummaryBytes) return;
    cut_["result"] = "omitted";
    stack_.resize(1);
    (*stack_[0])["result"] = nullptr;
  }
  json* place(json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    json& slot = top[key_];
    slot = std::move(v);
    return &slot;
  }
  bool value(json v) {
    if (++values_ > b_.max_values) return fail("more than " + std::to_string(b_.max_values) + " values");
    if (stack_.empty() && depth_ == 0) return fail("the response is not a JSON object");
    if (skipping()) return true;
    place(std::move(v));
    return true;
  }
  bool open(json v) {
    if (++values_ > b_.max_values) return fail("more than " + std::to_string(b_.max_values) + " values");
    if (depth_ >= b_.max_depth) return fail("nested deeper than " + std::to_string(b_.max_depth) + " levels");
    if (depth_ == 0 && !v.is_object()) return fail("the response is not a JSON object");
    if (depth_ == 1) in_result_ = key_ == "result";
    ++depth_;
    if (depth_ - 1 > stack_.size()) return true;  // inside a skipped member
    json* slot = place(std::move(v));
    stack_.push_back(slot);
    count_result(0);
    return true;
  }
  bool close() {
    if (depth_ == stack_.size()) stack_.pop_back();
    --depth_;
    if (depth_ == 1) in_result_ = false;
    return true;
  }

  json& root_;
  json& cut_;
  const JsonBounds& b_;
  bool keep_result_;
  std::vector<json*> stack_;  // the containers being filled, root first
  std::size_t depth_ = 0;     // containers open in the text (past stack_.size(): skipped)
  std::string key_;
  bool in_result_ = false;
  std::size_t result_bytes_ = 0;
  std::size_t values_ = 0;
  std::string problem_;
};

// What a client, and `sbx mcp --listen`'s /metrics (mcp_http.cpp, count_call), read of a run
// without parsing its content: its record, status, how its sandbox was made, its violations.
json run_meta(const json& response) {
  json m = json::object();
  for (const char* k : {"run_id", "trace", "status", "made_by"})
    if (response.contains(k) && response[k].is_string()) m[std::string("sbx/") + k] = response[k];
  if (response.contains("violations") && response["violations"].is_array())
    m["sbx/violations"] = response["violations"].size();
  return m;
}

std::string worker_error_text(const json& response) {
  const json& e = response["error"];
  std::string stage = e.is_object() ? e.value("stage", "") : "";
  std::string msg = e.is_object() ? e.value("message", "") : json_excerpt(e);
  return stage.empty() ? msg : stage + ": " + msg;
}

// A worker that answered with an error object ({"stage", "message"}) instead of a run: the
// stage goes to _meta too ("record": the run's record could not be stored).
json worker_error_result(const json& response) {
  json r = tool_error(worker_error_text(response));
  const json& e = response["error"];
  if (e.is_object() && e.contains("stage") && e["stage"].is_string()) r["_meta"] = {{"sbx/error_stage", e["stage"]}};
  return r;
}

const char* kCutNote = "cut here: structuredContent holds the full values";
}  // namespace

ScannedResponse scan_worker_response(std::string_view text, const JsonBounds& bounds, bool keep_result) {
  ScannedResponse r;
  if (text.size() > bounds.max_bytes) {
    r.summary.problem = "larger than " + std::to_string(bounds.max_bytes) + " bytes";
    return r;
  }
  SummarySax sax(r.summary.value, r.cut, bounds, keep_result);
  if (!json::sax_parse(text, &sax, json::input_format_t::json, /*strict=*/true, /*ignore_comments=*/false)) {
    r.summary.problem = sax.problem().empty() ? "not valid JSON" : sax.problem();
    r.summary.value = nullptr;
    r.cut = json::object();
  }
  return r;
}

json run_code_result(const json& summary, const json& cut, bool splice) {
  if (!summary.is_object()) return tool_error("sbx: the worker's response is not a JSON object");
  if (summary.contains("error") && summary["error"].is_object() && !summary.contains("status"))
    return worker_error_result(summary);
  json text = summary;
  if (!cut.empty()) {
    text["cut"] = cut;
    text["note"] = kCutNote;
  }
  json r = {{"content", json::array({{{"type", "text"}, {"text", dump_json(text, 2)}}})},
            {"structuredContent", splice || !cut.empty() ? json(kSpliceMarker) : summary},
            {"isError", summary.value("status", "") != "ok"},
            {"_meta", run_meta(summary)}};
  return r;
}

json pack_result(const json& response, bool wrapped_output, const json& cut) {
  if (!response.is_object()) return tool_error("sbx: the worker's response is not a JSON object");
  if (response.contains("error") && !response.contains("status")) return worker_error_result(response);
  std::string status = response.value("status", "");
  json meta = run_meta(response);
  if (status != "ok") {
    // The cause (setup_error's "no image named busybox:latest", with its fix) goes to the client:
    // the server's stderr, where it is logged too, is hidden by MCP clients. In _meta as well,
    // for a program that reads fields, not text; bounded in both, its cut flagged. Not in
    // structuredContent: the official TypeScript SDK's client validates a structuredContent
    // against the tool's outputSchema even when isError is set, and an error object never
    // matches a pack's output schema, so the client would throw -32602 and its caller would get
    // neither the error nor its cause.
    std::string cause = response.contains("error") && response["error"].is_string()
                            ? response["error"].get<std::string>()
                            : std::string();
    bool cut_cause = cause.size() > kSummaryBytes;
    if (cut_cause) cause = head(cause, kSummaryBytes);
    std::string text = status;
    if (!cause.empty())
      text += ": " + cause + (cut_cause ? " [cut at " + std::to_string(kSummaryBytes) + " bytes]" : std::string());
    if (response.contains("errors") && response["errors"].is_array())
      for (auto& e : response["errors"]) text += "\n" + (e.is_string() ? e.get<std::string>() : json_excerpt(e));
    if (response.contains("stderr") && response["stderr"].is_string() && !response["stderr"].get<std::string>().empty())
      text += (cut.contains("stderr") ? "\nstderr (its first " + std::to_string(kSummaryBytes) + " bytes of " +
                                            cut["stderr"].dump() + "):\n"
                                      : std::string("\nstderr:\n")) +
              response["stderr"].get<std::string>();
    json r = tool_error(text);
    meta["sbx/status"] = status;
    meta["sbx/error"] = cause.empty() ? json(nullptr) : json(cause);
    meta["sbx/error_truncated"] = cut_cause;
    r["_meta"] = meta;
    return r;
  }
  json sc = wrapped_output ? json{{"result", response.value("result", json(nullptr))}}
                           : response.value("result", json(nullptr));
  json copy = sc;
  std::string text = dump_json(copy, 2);
  if (text.size() > kSummaryBytes)
    text = "{\"note\": \"the result (" + std::to_string(text.size()) + " bytes of JSON) is in structuredContent\"}";
  return {{"content", json::array({{{"type", "text"}, {"text", std::move(text)}}})},
          {"structuredContent", std::move(sc)},
          {"isError", false},
          {"_meta", meta}};
}

}  // namespace sbx::mcp
