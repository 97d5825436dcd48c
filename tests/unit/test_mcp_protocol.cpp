// `sbx mcp`'s message rules without any process (runtime/server/mcp_protocol.cpp).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "runtime/server/mcp_protocol.hpp"
#include "runtime/typed/schema_validate.hpp"
#include "runtime/typed/typed_io.hpp"

using nlohmann::json;
namespace mcp = sbx::mcp;

TEST_CASE("mcp: initialize answers with the client's version when supported, else the newest legacy one") {
  CHECK(mcp::negotiate_legacy_version("2025-03-26") == "2025-03-26");
  CHECK(mcp::negotiate_legacy_version("2025-06-18") == "2025-06-18");
  CHECK(mcp::negotiate_legacy_version("2025-11-25") == "2025-11-25");
  CHECK(mcp::negotiate_legacy_version("2024-11-05") == "2025-11-25");
  CHECK(mcp::negotiate_legacy_version("2026-07-28") == "2025-11-25");  // modern is never a handshake version
  CHECK(mcp::negotiate_legacy_version(json(7)) == "2025-11-25");
  CHECK(mcp::supported_versions() == std::vector<std::string>{"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"});
}

TEST_CASE("mcp: JSON-RPC framing errors are the spec's codes, with the id when it is usable") {
  auto in = mcp::classify("{not json");
  CHECK(in.kind == mcp::Incoming::bad);
  CHECK(in.reply["error"]["code"] == -32700);
  CHECK(in.reply["id"].is_null());

  in = mcp::classify(R"({"jsonrpc":"1.0","id":3,"method":"ping"})");
  CHECK(in.reply["error"]["code"] == -32600);
  CHECK(in.reply["id"] == 3);
  in = mcp::classify(R"({"jsonrpc":"2.0","id":3})");
  CHECK(in.reply["error"]["code"] == -32600);
  in = mcp::classify(R"({"jsonrpc":"2.0","id":null,"method":"ping"})");
  CHECK(in.reply["error"]["code"] == -32600);
  in = mcp::classify(R"({"jsonrpc":"2.0","id":1.5,"method":"ping"})");
  CHECK(in.reply["error"]["code"] == -32600);
  in = mcp::classify(R"({"jsonrpc":"2.0","id":1,"method":7})");
  CHECK(in.reply["error"]["code"] == -32600);
  in = mcp::classify(R"("just a string")");
  CHECK(in.reply["error"]["code"] == -32600);
  in = mcp::classify(R"({"jsonrpc":"2.0","id":"a","method":"tools/list","params":[1]})");
  CHECK(in.reply["error"]["code"] == -32602);
  CHECK(in.reply["id"] == "a");
  // A notification is never answered, even when malformed.
  in = mcp::classify(R"({"jsonrpc":"2.0","method":"notifications/x","params":[1]})");
  CHECK(in.kind == mcp::Incoming::bad);
  CHECK(in.reply.is_null());
}

TEST_CASE("mcp: nesting past the bound is a parse error, not a stack overflow") {
  std::string deep(100000, '[');
  auto in = mcp::classify(deep);
  CHECK(in.reply["error"]["code"] == -32700);
}

TEST_CASE("mcp: a message holds at most kMaxMessageValues values, a batch's members together") {
  // {"jsonrpc","id","method","params":{"a":[0,...]}}: the object, three scalars, params, the array.
  auto message = [](std::size_t zeros) {
    std::string m = R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":[)";
    for (std::size_t i = 0; i < zeros; ++i) m += i ? ",0" : "0";
    return m + "]}}";
  };
  auto in = mcp::classify(message(mcp::kMaxMessageValues - 6));
  CHECK(in.kind == mcp::Incoming::request);
  CHECK(in.params["a"].size() == mcp::kMaxMessageValues - 6);
  in = mcp::classify(message(mcp::kMaxMessageValues - 5));
  CHECK(in.kind == mcp::Incoming::bad);
  CHECK(in.reply["error"]["code"] == -32700);
  CHECK(in.reply["error"]["message"] == "Parse error: /params/a/262138: more than 262144 values");
  // Proportionate to the size bound: a value per 256 bytes of the longest line.
  CHECK(mcp::kMaxMessageValues * 256 == (64u << 20));
  // A batch is one line: its members share the bound.
  std::string half = R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":[)";
  for (std::size_t i = 0; i < mcp::kMaxMessageValues / 2; ++i) half += i ? ",0" : "0";
  half += "]}}";
  in = mcp::classify("[" + half + "," + half + "]");
  CHECK(in.reply["error"]["code"] == -32700);
  in = mcp::classify("[" + half + "]");
  CHECK(in.method == "(batch)");
}

TEST_CASE("mcp: waiting calls' requests are refused past kQueuedRequestBudget, but one call alone is taken") {
  // None waits: taken whatever its size (a message's call must be able to wait).
  CHECK(mcp::queued_request_refusal(0, mcp::kQueuedRequestBudget + 1, 0) == "");
  CHECK(mcp::queued_request_refusal(0, 100, 0, 10) == "");
  // Others wait: taken up to the budget exactly, refused past it.
  CHECK(mcp::queued_request_refusal(10, 20, 1, 30) == "");
  std::string why = mcp::queued_request_refusal(10, 21, 2, 30);
  CHECK(why ==
        "Server busy: the 2 calls waiting for a slot hold 10 bytes of requests, and this one's 21 would pass the 30 "
        "bytes waiting calls may hold in all; send it once earlier calls have started (at most --max-concurrent run "
        "at once), or make it smaller");
  CHECK(mcp::queued_request_refusal(60u << 20, 5u << 20, 3) != "");
}

TEST_CASE("mcp: requests, notifications and stray responses are told apart") {
  auto in = mcp::classify(R"({"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"n"}})");
  CHECK(in.kind == mcp::Incoming::request);
  CHECK(in.id == "x");
  CHECK(in.params["name"] == "n");
  in = mcp::classify(R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}})");
  CHECK(in.kind == mcp::Incoming::notification);
  in = mcp::classify(R"({"jsonrpc":"2.0","id":1,"result":{}})");
  CHECK(in.kind == mcp::Incoming::response);
}

TEST_CASE("mcp: the modern era is per request, from _meta") {
  CHECK_FALSE(mcp::request_era(json::object()).modern);
  auto e = mcp::request_era(json::parse(R"({"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
      "io.modelcontextprotocol/clientCapabilities":{}}})"));
  CHECK(e.modern);
  CHECK_FALSE(e.error);
  e = mcp::request_era(json::parse(R"({"_meta":{"io.modelcontextprotocol/protocolVersion":"1900-01-01"}})"));
  REQUIRE(e.error);
  CHECK((*e.error)["code"] == -32022);
  CHECK((*e.error)["data"]["requested"] == "1900-01-01");
  CHECK((*e.error)["data"]["supported"][0] == "2026-07-28");
  e = mcp::request_era(json::parse(R"({"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}})"));
  REQUIRE(e.error);
  CHECK((*e.error)["code"] == -32602);  // clientCapabilities is required
}

TEST_CASE("mcp: a pack schema's local refs still resolve once placed under the tool's inputSchema") {
  json s = json::parse(R"({"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
      "properties":{"a":{"$ref":"#/definitions/x"},"b":{"enum":[{"$ref":"#/keep"}]},"c":{"$ref":"#"}},
      "definitions":{"x":{"type":"integer"}}})");
  json r = mcp::reroot_schema(s, "/properties/records/items");
  CHECK(r["properties"]["a"]["$ref"] == "#/properties/records/items/definitions/x");
  CHECK(r["properties"]["b"]["enum"][0]["$ref"] == "#/keep");  // data, not a schema
  CHECK(r["properties"]["c"]["$ref"] == "#/properties/records/items");

  sbx::Pack p;
  p.name = "demo";
  p.version = "1.0.0";
  p.input_schema = s;
  p.output_schema = json::parse(R"({"type":"array","items":{"$ref":"#/definitions/x"},"definitions":{"x":{"type":"integer"}}})");
  auto t = mcp::pack_tool(p);
  CHECK(t.name == "demo");
  CHECK(t.wrapped_output);
  const json& in = t.definition["inputSchema"];
  CHECK(in["type"] == "object");
  CHECK(in["$schema"] == "http://json-schema.org/draft-07/schema#");
  CHECK_FALSE(in["properties"]["records"]["items"].contains("$schema"));
  // The tool's schemas accept and refuse what the pack's do (compiled by sbx's own validator).
  auto cin = sbx::CompiledSchema::compile(in, "inputSchema");
  REQUIRE(cin.ok());
  CHECK(cin->validate(json::parse(R"({"records":[{"a":1}]})")).empty());
  CHECK_FALSE(cin->validate(json::parse(R"({"records":[{"a":"no"}]})")).empty());
  CHECK_FALSE(cin->validate(json::parse(R"({"rows":[]})")).empty());
  auto cout = sbx::CompiledSchema::compile(t.definition["outputSchema"], "outputSchema");
  REQUIRE(cout.ok());
  CHECK(t.definition["outputSchema"]["type"] == "object");
  CHECK(cout->validate(json::parse(R"({"result":[1,2]})")).empty());
  CHECK_FALSE(cout->validate(json::parse(R"({"result":["x"]})")).empty());
}

TEST_CASE("mcp: tool results: ok is structuredContent plus its text; failures are isError with run id in _meta") {
  json ok = {{"run_id", "r1"}, {"status", "ok"}, {"result", {{"n", 1}}}, {"trace", "/t/ledger.jsonl"}};
  json r = mcp::pack_result(ok, false);
  CHECK(r["isError"] == false);
  CHECK(r["structuredContent"] == json{{"n", 1}});
  CHECK(json::parse(r["content"][0]["text"].get<std::string>()) == json{{"n", 1}});
  CHECK(r["_meta"]["sbx/run_id"] == "r1");
  CHECK(r["_meta"]["sbx/trace"] == "/t/ledger.jsonl");
  CHECK(mcp::pack_result(ok, true)["structuredContent"] == json{{"result", {{"n", 1}}}});

  json bad = {{"run_id", "r2"}, {"status", "input_invalid"}, {"errors", {"/0/a: must be integer"}}, {"trace", "t"}};
  r = mcp::pack_result(bad, false);
  CHECK(r["isError"] == true);
  // None: the TypeScript SDK's client would validate it against the outputSchema and throw.
  CHECK_FALSE(r.contains("structuredContent"));
  CHECK(r["_meta"]["sbx/status"] == "input_invalid");
  CHECK(r["_meta"]["sbx/error"].is_null());
  CHECK(r["content"][0]["text"].get<std::string>().find("/0/a: must be integer") != std::string::npos);
  CHECK(r["_meta"]["sbx/run_id"] == "r2");

  r = mcp::run_code_result({{"run_id", "r3"}, {"status", "timeout"}, {"stdout", ""}});
  CHECK(r["isError"] == true);
  CHECK(r["structuredContent"]["status"] == "timeout");
  r = mcp::run_code_result({{"error", {{"stage", "usage"}, {"message", "limit above the profile"}}}});
  CHECK(r["isError"] == true);
  CHECK(r["content"][0]["text"] == "usage: limit above the profile");
}

TEST_CASE("mcp: _meta says how the run's sandbox was made, its status and violations, and a store error's stage") {
  // What `sbx mcp --listen` counts in /metrics (mcp_http.cpp, count_run) without reading content.
  json resp = {{"run_id", "r5"},     {"status", "seccomp_violation"}, {"made_by", "template"},
               {"stdout", ""},       {"violations", json::array({{{"syscall", "ptrace"}}, {{"syscall", "bpf"}}})},
               {"trace", "/t/l.jsonl"}};
  json r = mcp::run_code_result(resp);
  CHECK(r["_meta"]["sbx/made_by"] == "template");
  CHECK(r["_meta"]["sbx/status"] == "seccomp_violation");
  CHECK(r["_meta"]["sbx/violations"] == 2);
  CHECK(mcp::pack_result(resp, false)["_meta"]["sbx/made_by"] == "template");
  // A response without these fields (an older worker) has none of them.
  json plain = mcp::run_code_result({{"run_id", "r6"}, {"stdout", ""}});
  CHECK_FALSE(plain["_meta"].contains("sbx/made_by"));
  CHECK_FALSE(plain["_meta"].contains("sbx/violations"));
  // A run whose record could not be stored: no result, and the stage for the store-error count.
  json lost = {{"error", {{"stage", "record"}, {"message", "the run's trace record could not be stored"}}}};
  CHECK(mcp::run_code_result(lost)["_meta"]["sbx/error_stage"] == "record");
  CHECK(mcp::pack_result(lost, false)["_meta"]["sbx/error_stage"] == "record");
  CHECK(mcp::pack_result(lost, false)["isError"] == true);
}

TEST_CASE("mcp: a worker's response is summarised without holding its streams, and passes what the run accepted") {
  std::string big(100000, 'x');
  json resp = {{"run_id", "r4"}, {"status", "ok"}, {"stdout", big}, {"stderr", "e"}, {"result", {{"k", big}}}};
  std::string text = resp.dump();
  auto bounds = mcp::worker_response_bounds(1 << 20);
  auto s = mcp::scan_worker_response(text, bounds, /*keep_result=*/false);
  REQUIRE(s.summary.ok());
  CHECK(s.summary.value["stdout"].get<std::string>().size() == mcp::kSummaryBytes);
  CHECK(s.summary.value["stderr"] == "e");
  CHECK(s.summary.value["result"].is_null());
  CHECK(s.cut == json{{"stdout", 100000}, {"result", "omitted"}});
  json r = mcp::run_code_result(s.summary.value, s.cut, true);
  CHECK(r["structuredContent"] == mcp::kSpliceMarker);  // the server splices the worker's text in
  std::string t = r["content"][0]["text"];
  CHECK(t.size() < 3 * mcp::kSummaryBytes);  // a summary, not a second copy of the streams
  CHECK(json::parse(t)["cut"]["stdout"] == 100000);
  CHECK(r["isError"] == false);
  CHECK(r["_meta"]["sbx/run_id"] == "r4");
  // A pack's result is its structuredContent: kept whole; only the streams are cut.
  auto p = mcp::scan_worker_response(text, bounds, /*keep_result=*/true);
  REQUIRE(p.summary.ok());
  CHECK(p.summary.value["result"]["k"] == big);
  CHECK(p.cut == json{{"stdout", 100000}});
  json pr = mcp::pack_result(p.summary.value, false, p.cut);
  CHECK(pr["structuredContent"]["k"] == big);
  CHECK(pr["content"][0]["text"].get<std::string>().size() < mcp::kSummaryBytes);

  // A result nested as deep as a run accepts (result_bounds: kMaxJsonDepth) passes; one level
  // more than the response's bound is refused (issue 30: a valid 128-deep result was dropped).
  auto nested = [](std::size_t depth) {
    return R"({"run_id":"r","status":"ok","stdout":"","result":)" + std::string(depth, '[') + std::string(depth, ']') + "}";
  };
  CHECK(sbx::parse_json(std::string(sbx::kMaxJsonDepth, '[') + std::string(sbx::kMaxJsonDepth, ']'), sbx::result_bounds()).ok());
  auto deep = mcp::scan_worker_response(nested(sbx::kMaxJsonDepth), bounds, true);
  CHECK(deep.summary.ok());
  CHECK(mcp::scan_worker_response(nested(sbx::kMaxJsonDepth), bounds, false).summary.ok());
  json dr = mcp::pack_result(deep.summary.value, true);
  json msg = mcp::result_response(1, dr);
  CHECK(sbx::dump_json(msg, -1).find("\"error\"") == std::string::npos);  // the whole message still dumps
  auto deeper = mcp::scan_worker_response(nested(sbx::kMaxJsonDepth + 1), bounds, true);
  REQUIRE_FALSE(deeper.summary.ok());
  CHECK(deeper.summary.problem.find("nested deeper than") == 0);

  CHECK_FALSE(mcp::scan_worker_response("[1]", bounds, true).summary.ok());
  CHECK_FALSE(mcp::scan_worker_response("{\"a\":", bounds, true).summary.ok());
  CHECK(bounds.max_bytes >= 2 * (1u << 20) * sbx::kMaxJsonEscapeFactor);
}

TEST_CASE("mcp: a call that failed in setup carries the error's line, not only its status (issue 32)") {
  const std::string why = "image: no image named busybox:latest in /s/images (see 'sbx image ls')";
  json pack = {{"run_id", "r4"}, {"status", "setup_error"}, {"error", why}, {"errors", json::array()}, {"trace", "t"}};
  json r = mcp::pack_result(pack, false);
  CHECK(r["isError"] == true);
  CHECK(r["content"][0]["text"] == "setup_error: " + why);
  CHECK(r["_meta"]["sbx/run_id"] == "r4");
  // As fields too (issue 32), in _meta: never in structuredContent, which a client validates
  // against the pack's outputSchema even for an error.
  CHECK_FALSE(r.contains("structuredContent"));
  CHECK(r["_meta"]["sbx/status"] == "setup_error");
  CHECK(r["_meta"]["sbx/error"] == why);
  CHECK(r["_meta"]["sbx/error_truncated"] == false);
  // Bounded in both, the cut flagged and on a character boundary.
  std::string long_why = "x" + std::string(mcp::kSummaryBytes, '\xc3');
  for (std::size_t i = 2; i < long_why.size(); i += 2) long_why[i] = '\xa9';  // "x" then "é" repeated
  pack["error"] = long_why;
  r = mcp::pack_result(pack, false);
  std::string sc = r["_meta"]["sbx/error"];
  CHECK(r["_meta"]["sbx/error_truncated"] == true);
  CHECK(sc.size() <= mcp::kSummaryBytes);
  CHECK(sc.size() >= mcp::kSummaryBytes - 1);
  CHECK(sbx::valid_utf8(sc));
  std::string text = r["content"][0]["text"];
  CHECK(text.size() < mcp::kSummaryBytes + 100);
  CHECK(text.find(sc + " [cut at 4096 bytes]") != std::string::npos);
  // run_code: the text content and structuredContent both carry it.
  json rc = {{"run_id", "r5"}, {"status", "setup_error"}, {"error", why}, {"stdout", ""}, {"stderr", ""}};
  r = mcp::run_code_result(rc);
  CHECK(r["isError"] == true);
  CHECK(r["structuredContent"]["error"] == why);
  CHECK(r["content"][0]["text"].get<std::string>().find(why) != std::string::npos);
}

TEST_CASE("mcp: packs that share a name, or a pack named run_code, are skipped, naming both directories") {
  std::map<std::string, std::string> offered{{"grade", "/srv/a/grade"}};
  CHECK(mcp::tool_name_clash(offered, "other").empty());
  std::string w = mcp::tool_name_clash(offered, "grade");
  CHECK(w == "its name 'grade' is also the name of the pack in /srv/a/grade: neither is offered (a pack added beside "
             "another must not take its tool, secrets or contexts): rename one of them in its pack.json");
  CHECK(mcp::skipped_pack_warning("/srv/b/grade", {w}).find("/srv/b/grade is not offered: its name 'grade' is "
                                                             "also the name of the pack in /srv/a/grade") !=
        std::string::npos);
  CHECK(mcp::tool_name_clash({}, "run_code").find("sbx's own tool") != std::string::npos);
}

TEST_CASE("mcp: a skipped pack's warning names its directory, its problem, what is served and the check") {
  std::string w = mcp::skipped_pack_warning("/srv/packs/bad", {"pack.json: not valid JSON", "schemas/in.json: missing"});
  CHECK(w.find("/srv/packs/bad") != std::string::npos);
  CHECK(w.find("pack.json: not valid JSON (and 1 more problem(s))") != std::string::npos);
  CHECK(w.find("run_code") != std::string::npos);
  CHECK(w.find("sbx pack validate /srv/packs/bad") != std::string::npos);
  CHECK(w.find('\n') == std::string::npos);
  CHECK(mcp::skipped_pack_warning("/p", {}).find("not offered: it does not load;") != std::string::npos);
}
