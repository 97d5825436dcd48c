#include <doctest/doctest.h>

#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdio>
#include <string>

#include <spdlog/spdlog.h>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/shell_quote.hpp"
#include "runtime/record/trace_store.hpp"
#include "runtime/record/trace_summary.hpp"

namespace {

struct TempStore {
  std::string root;
  sbx::Dirs dirs;
  TempStore() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/sbx-traces-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    root = tmpl;
    dirs.state = root + "/state";
    dirs.traces = dirs.state + "/traces";  // deliberately missing: store_trace creates it
    dirs.data = root + "/data";
    dirs.images = dirs.data + "/images";
  }
  ~TempStore() { std::system(("rm -rf '" + root + "'").c_str()); }
};

// The members list_traces summarises, in the shape of sbx.trace/v1.
std::string record(const std::string& id, const std::string& status, nlohmann::json exit_code,
                   std::int64_t wall_ms, nlohmann::json argv) {
  nlohmann::json j = {
      {"schema", "sbx.trace/v1"},
      {"run_id", id},
      {"started_at", "2026-11-30T07:55:12.123Z"},
      {"invocation", {{"argv", {"sbx", "run", "--"}}, {"spec", {{"argv", argv}}}}},
      {"result", {{"status", status}, {"exit_code", exit_code}, {"signal", nullptr}, {"error", nullptr}}},
      {"usage", {{"wall_ms", wall_ms}}},
  };
  return j.dump();
}

// Silence the "skipping trace" warning for the duration of a test, restoring the level after.
struct QuietLog {
  spdlog::level::level_enum was = spdlog::get_level();
  QuietLog() { spdlog::set_level(spdlog::level::off); }
  ~QuietLog() { spdlog::set_level(was); }
};

const char* kOld = "20261130T075512.123Z-3fa9c1d2";
const char* kMid = "20261130T075513.000Z-00000001";
const char* kNew = "20261201T000000.001Z-ffffffff";

}  // namespace

TEST_CASE("an empty or missing store lists nothing") {
  TempStore s;
  auto l = sbx::list_traces(s.dirs);
  REQUIRE(l.ok());
  CHECK(l->empty());
}

TEST_CASE("store_trace creates a 0700 store and lists newest first with summaries") {
  TempStore s;
  REQUIRE(sbx::store_trace(s.dirs, kMid, record(kMid, "exit_nonzero", 3, 42, {"sh", "-c", "exit 3"})).ok());
  REQUIRE(sbx::store_trace(s.dirs, kNew, record(kNew, "signaled", nullptr, 7, {"sleep", "10"})).ok());
  REQUIRE(sbx::store_trace(s.dirs, kOld, record(kOld, "ok", 0, 5, {"true"})).ok());

  struct stat st;
  REQUIRE(::stat(s.dirs.traces.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);

  auto l = sbx::list_traces(s.dirs);
  REQUIRE(l.ok());
  REQUIRE(l->size() == 3);
  CHECK((*l)[0].run_id == kNew);
  CHECK((*l)[1].run_id == kMid);
  CHECK((*l)[2].run_id == kOld);

  CHECK((*l)[0].status == "signaled");
  CHECK_FALSE((*l)[0].exit_code.has_value());
  CHECK((*l)[0].wall_ms == 7);
  CHECK((*l)[1].exit_code == 3);
  CHECK((*l)[1].command == "sh -c 'exit 3'");
  CHECK((*l)[2].started_at == "2026-11-30T07:55:12.123Z");
  CHECK((*l)[2].command == "true");
}

TEST_CASE("storing the same run id again replaces the record") {
  TempStore s;
  REQUIRE(sbx::store_trace(s.dirs, kOld, record(kOld, "ok", 0, 1, {"a"})).ok());
  REQUIRE(sbx::store_trace(s.dirs, kOld, record(kOld, "timeout", nullptr, 2, {"b"})).ok());
  auto l = sbx::list_traces(s.dirs);
  REQUIRE(l->size() == 1);
  CHECK((*l)[0].status == "timeout");
}

TEST_CASE("store_trace refuses run ids that are not plain file names") {
  TempStore s;
  CHECK_FALSE(sbx::store_trace(s.dirs, "", "{}").ok());
  CHECK_FALSE(sbx::store_trace(s.dirs, "../escape", "{}").ok());
  CHECK_FALSE(sbx::store_trace(s.dirs, ".hidden", "{}").ok());
}

TEST_CASE("load_trace by exact id, by unique prefix, and errors for none and ambiguous") {
  TempStore s;
  for (auto* id : {kOld, kMid, kNew}) REQUIRE(sbx::store_trace(s.dirs, id, record(id, "ok", 0, 1, {"x"})).ok());

  auto exact = sbx::load_trace(s.dirs, kMid);
  REQUIRE(exact.ok());
  CHECK((*exact)["run_id"] == kMid);

  auto pre = sbx::load_trace(s.dirs, "20261201");
  REQUIRE(pre.ok());
  CHECK((*pre)["run_id"] == kNew);

  auto amb = sbx::load_trace(s.dirs, "20261130T");
  REQUIRE_FALSE(amb.ok());
  CHECK(amb.error().message.find("ambiguous") != std::string::npos);
  CHECK(amb.error().message.find("2 traces match") != std::string::npos);

  auto none = sbx::load_trace(s.dirs, "2027");
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().message == "no trace '2027' in " + s.dirs.traces);
  CHECK(none.error().err == 0);

  CHECK_FALSE(sbx::load_trace(s.dirs, "../traces/x").ok());
  CHECK_FALSE(sbx::load_trace(s.dirs, "").ok());
}

TEST_CASE("an exact id wins even when it is also a prefix of another id") {
  TempStore s;
  REQUIRE(sbx::store_trace(s.dirs, "run1", record("run1", "ok", 0, 1, {"x"})).ok());
  REQUIRE(sbx::store_trace(s.dirs, "run10", record("run10", "ok", 0, 1, {"x"})).ok());
  auto r = sbx::load_trace(s.dirs, "run1");
  REQUIRE(r.ok());
  CHECK((*r)["run_id"] == "run1");
}

TEST_CASE("corrupt files are skipped by list_traces but reported by load_trace") {
  TempStore s;
  QuietLog quiet;
  REQUIRE(sbx::store_trace(s.dirs, kOld, record(kOld, "ok", 0, 1, {"x"})).ok());
  REQUIRE(sbx::write_file_durable(s.dirs.traces + "/" + kMid + ".json", "{\"schema\": \"sbx.tr").ok());
  REQUIRE(sbx::write_file_durable(s.dirs.traces + "/" + kNew + ".json", "[1, 2]").ok());
  REQUIRE(sbx::write_file_durable(s.dirs.traces + "/notes.txt", "not a trace").ok());
  REQUIRE(sbx::write_file_durable(s.dirs.traces + "/20261130T0000.json", "{\"a\": 1}").ok());

  auto l = sbx::list_traces(s.dirs);
  REQUIRE(l.ok());
  REQUIRE(l->size() == 1);
  CHECK((*l)[0].run_id == kOld);

  auto bad = sbx::load_trace(s.dirs, kMid);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("corrupt trace") != std::string::npos);
}

TEST_CASE("summary falls back to sbx's own argv and tolerates missing members") {
  TempStore s;
  nlohmann::json j = {{"schema", "sbx.trace/v1"}, {"invocation", {{"argv", {"sbx", "run", "--", "echo", "hi there"}}}}};
  REQUIRE(sbx::store_trace(s.dirs, kOld, j.dump()).ok());
  auto l = sbx::list_traces(s.dirs);
  REQUIRE(l->size() == 1);
  CHECK((*l)[0].command == "sbx run -- echo 'hi there'");
  CHECK((*l)[0].status == "?");
  CHECK((*l)[0].wall_ms == 0);
  CHECK((*l)[0].started_at.empty());
}

TEST_CASE("shell_quote leaves safe words alone and single-quotes the rest") {
  using sbx::shell_quote;
  CHECK(shell_quote("python3") == "python3");
  CHECK(shell_quote("/usr/bin/x_y-z.py") == "/usr/bin/x_y-z.py");
  CHECK(shell_quote("--opt=a,b:c@d%e+f") == "--opt=a,b:c@d%e+f");
  CHECK(shell_quote("") == "''");
  CHECK(shell_quote("a b") == "'a b'");
  CHECK(shell_quote("$HOME") == "'$HOME'");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(shell_quote("*") == "'*'");
  CHECK(shell_quote("a\nb") == "$'a\\nb'");  // never a raw newline: see test_text_escape.cpp
  CHECK(shell_quote("caf\xc3\xa9") == "'caf\xc3\xa9'");
  CHECK(sbx::shell_join({"sh", "-c", "echo $1", ""}) == "sh -c 'echo $1' ''");
}

TEST_CASE("a deep or odd record in the store is skipped by list and refused by load, never a crash") {
  TempStore s;
  REQUIRE(sbx::store_trace(s.dirs, "20261130T000000.000Z-00000001",
                           record("20261130T000000.000Z-00000001", "ok", 0, 5, {"true"}))
              .ok());
  std::string deep = "{\"schema\": \"sbx.trace/v1\", \"result\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
  REQUIRE(sbx::store_trace(s.dirs, "20261130T000000.000Z-00000002", deep).ok());
  // Wrong types everywhere a summary looks: still summarised.
  REQUIRE(sbx::store_trace(s.dirs, "20261130T000000.000Z-00000003",
                           R"({"schema": "sbx.trace/v1", "started_at": 5, "result": {"status": [], "exit_code": 1e300},
                               "usage": {"wall_ms": 1e300}, "invocation": {"argv": {}, "spec": []}})")
              .ok());
  auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::off);
  auto list = sbx::list_traces(s.dirs);
  spdlog::set_level(level);
  REQUIRE(list.ok());
  REQUIRE(list->size() == 2);
  CHECK((*list)[0].run_id == "20261130T000000.000Z-00000003");
  CHECK((*list)[0].wall_ms == 0);
  CHECK_FALSE((*list)[0].exit_code.has_value());
  auto bad = sbx::load_trace(s.dirs, "20261130T000000.000Z-00000002");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("/result/0/0/0") != std::string::npos);
  CHECK(bad.error().message.find("nested deeper than 128 levels") != std::string::npos);
}

TEST_CASE("summarize_record_text: the summary of the full parse, and refused exactly where parse_json refuses") {
  nlohmann::json j = nlohmann::json::parse(record(kOld, "timeout", nullptr, 42, {"sh", "-c", "echo hi"}));
  j["invocation"]["pack"] = {{"name", "p"}, {"version", "1"}, {"digest", "sha256:ab"}};
  j["image"] = {{"name", "busybox"}, {"digest", "sha256:cd"}};
  j["outputs"] = nlohmann::json::array({{{"path", "a"}, {"bytes", 1}}});  // not read by the summary
  j["violations"] = {{{"kind", "seccomp"}, {"nested", {{"deep", {1, 2, {{"x", nullptr}}}}}}}};
  auto fast = sbx::summarize_record_text(kOld, j.dump());
  REQUIRE(fast.ok());
  auto full = sbx::summarize_record(kOld, j);
  CHECK(fast->run_id == full.run_id);
  CHECK(fast->started_at == full.started_at);
  CHECK(fast->status == "timeout");
  CHECK(fast->status == full.status);
  CHECK(fast->exit_code == full.exit_code);
  CHECK(fast->wall_ms == 42);
  CHECK(fast->command == full.command);
  CHECK(fast->command == "sh -c 'echo hi'");
  CHECK(fast->pack == "p");
  CHECK(fast->pack_version == full.pack_version);
  CHECK(fast->pack_digest == full.pack_digest);
  CHECK(fast->image == "busybox");
  CHECK(fast->image_digest == full.image_digest);
  // What parse_json refuses, in a member the summary does not read too.
  for (std::string bad : {std::string("[1, 2]"), std::string("{\"a\": 1"), std::string("{\"a\": tru}"), std::string("{} x"),
                          "{\"outputs\": " + std::string(200, '[') + std::string(200, ']') + "}",
                          std::string("{\"outputs\": \"\x01\"}")}) {
    auto r = sbx::summarize_record_text(kOld, bad);
    CHECK_FALSE(r.ok());
    auto p = sbx::parse_json(bad, {sbx::kMaxTraceBytes});
    bool object = p.ok() && p.value.is_object();
    CHECK_FALSE(object);
  }
  std::string at_bound = "{\"outputs\": " + std::string(127, '[') + std::string(127, ']') + "}";
  CHECK(sbx::summarize_record_text(kOld, at_bound).ok());
  CHECK(sbx::parse_json(at_bound, {sbx::kMaxTraceBytes}).ok());
}

TEST_CASE("summarize_record_text refuses a duplicate member name at any depth, as parse_json does") {
  // `trace ls` (this summary) and `trace show` (parse_json) must agree on such a record: last-wins
  // in one and a refusal in the other would show two readers two different records.
  for (std::string bad : {std::string(R"({"run_id":"a","result":{"status":"ok"},"result":{"status":"failed"}})"),
                          std::string(R"({"run_id":"a","outputs":[{"path":"x","path":"y"}]})"),
                          std::string(R"({"run_id":"a","usage":{"wall_ms":1,"wall_ms":2}})")}) {
    auto full = sbx::parse_json(bad, {sbx::kMaxTraceBytes});
    CHECK(full.problem.find("duplicate member name") != std::string::npos);
    auto r = sbx::summarize_record_text(kOld, bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("duplicate member name") != std::string::npos);
  }
  // The same name in sibling objects, or in an object and its parent, is not a duplicate.
  std::string ok = R"({"run_id":"a","result":{"status":"ok"},"outputs":[{"path":"x"},{"path":"y"}],"x":{"run_id":"b"}})";
  CHECK(sbx::summarize_record_text(kOld, ok).ok());
  CHECK(sbx::parse_json(ok, {sbx::kMaxTraceBytes}).ok());
}

TEST_CASE("import refuses a legacy record that its import note would put over the record bound") {
  TempStore s;
  QuietLog quiet;
  REQUIRE(sbx::ensure_dir(s.dirs.traces, 0700).ok());
  // Compact, just under the bound: readable as a legacy file, but not once "ledger_import" is added.
  std::string head = std::string(R"({"schema":"sbx.trace/v1","run_id":")") + kOld + R"(","pad":")";
  std::string tail = "\"}";
  std::string text = head + std::string(sbx::kMaxTraceBytes - 16 - head.size() - tail.size(), 'a') + tail;
  REQUIRE(text.size() <= sbx::kMaxTraceBytes);
  {
    std::FILE* f = std::fopen((s.dirs.traces + "/" + kOld + ".json").c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(std::fwrite(text.data(), 1, text.size(), f) == text.size());
    std::fclose(f);
  }
  auto rep = sbx::import_legacy_traces(s.dirs);
  REQUIRE(rep.ok());
  CHECK(rep->imported == 0);
  REQUIRE(rep->skipped.size() == 1);
  CHECK(rep->skipped[0].find("bound of a ledger record") != std::string::npos);
  struct stat st;
  CHECK(::stat((s.dirs.traces + "/" + kOld + ".json").c_str(), &st) == 0);  // left where it was
}

// `sbx trace ls --since 1h` listed every run (the text compared as a time), `--since garbage` too.
TEST_CASE("--since takes a duration before now or a UTC time, and refuses anything else") {
  // 2026-12-03T02:00:00.000Z
  const std::int64_t now = 1796263200000;
  auto b = sbx::since_bound("1h", now);
  REQUIRE(b.ok());
  CHECK(*b == "2026-12-03T01:00:00.000Z");
  CHECK(*sbx::since_bound("90s", now) == "2026-12-03T01:58:30.000Z");
  CHECK(*sbx::since_bound("2d", now) == "2026-12-01T02:00:00.000Z");
  CHECK(*sbx::since_bound("1w", now) == "2026-11-26T02:00:00.000Z");
  CHECK(*sbx::since_bound("2026-12-01", now) == "2026-12-01");
  CHECK(*sbx::since_bound("2999", now) == "2999");
  CHECK(*sbx::since_bound("2026-12", now) == "2026-12");
  CHECK(*sbx::since_bound("2026-12-01T08:30", now) == "2026-12-01T08:30");
  // A trailing Z is dropped: "...:00Z" would sort after a run at "...:00.123Z" of that second.
  CHECK(*sbx::since_bound("2026-12-01T08:30:00Z", now) == "2026-12-01T08:30:00");
  CHECK(*sbx::since_bound("2026-12-01T08:30:00.5Z", now) == "2026-12-01T08:30:00.5");
  CHECK(std::string("2026-12-01T08:30:00.123Z") >= *sbx::since_bound("2026-12-01T08:30:00Z", now));
  for (const char* bad : {"garbage", "", "202", "20261", "1", "90", "1y", "2026-1", "2026-12-1", "2026-13-01", "2026-12-01T25:00", "2026-12-01+02:00",
                          "2026-12-01T08:30:00+02:00", "yesterday", "-1h", "d"}) {
    auto r = sbx::since_bound(bad, now);
    CHECK_MESSAGE(!r.ok(), bad);
    if (!r.ok()) CHECK(r.error().message.find("use a duration before now (90s, 30m, 1h, 2d, 1w)") != std::string::npos);
  }
}

namespace {
void index_sql(const sbx::Dirs& dirs, const char* sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open((dirs.traces + "/index.sqlite").c_str(), &db) == SQLITE_OK);
  char* msg = nullptr;
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, &msg);
  std::string why = msg ? msg : "";
  sqlite3_free(msg);
  sqlite3_close(db);
  REQUIRE_MESSAGE(rc == SQLITE_OK, why);
}
}  // namespace

TEST_CASE("an edited query index is not believed: ls and show say what the ledger says") {
  TempStore s;
  QuietLog quiet;
  REQUIRE(sbx::store_trace(s.dirs, kOld, record(kOld, "exit_nonzero", 3, 1, {"rm", "-rf", "/"})).ok());
  REQUIRE(sbx::store_trace(s.dirs, kMid, record(kMid, "oom", nullptr, 2, {"evil"})).ok());
  REQUIRE(sbx::store_trace(s.dirs, kNew, record(kNew, "ok", 0, 3, {"true"})).ok());
  REQUIRE(sbx::list_traces(s.dirs).ok());  // builds the index
  // Run 2's row says it went well, and points at run 3's line; the last row (run 3) is untouched,
  // so the catch-up's own check of where it stopped passes.
  index_sql(s.dirs,
            "update runs set status='ok', exit_code=0, command='echo harmless' where line=2;"
            "update runs set off=(select off from runs where line=3) where line=2;");
  auto l = sbx::list_traces(s.dirs);
  REQUIRE(l.ok());
  REQUIRE(l->size() == 3);
  CHECK((*l)[1].run_id == kMid);
  CHECK((*l)[1].status == "oom");
  CHECK((*l)[1].command == "evil");
  CHECK_FALSE((*l)[1].exit_code.has_value());
  // Filtered on the lie: the index was rebuilt, and the run is not "ok".
  index_sql(s.dirs, "update runs set status='ok', exit_code=0 where line=2;");
  sbx::TraceFilter ok;
  ok.status = "ok";
  auto lo = sbx::list_traces(s.dirs, ok);
  REQUIRE(lo.ok());
  REQUIRE(lo->size() == 1);
  CHECK((*lo)[0].run_id == kNew);

  index_sql(s.dirs, "update runs set off=(select off from runs where line=3) where line=2;");
  auto shown = sbx::load_trace(s.dirs, kMid);
  REQUIRE(shown.ok());
  CHECK((*shown)["run_id"] == kMid);
  CHECK((*shown)["result"]["status"] == "oom");
  // An offset inside run 3's own line that still parses is refused too (the bytes do not hash).
  index_sql(s.dirs, "update runs set off=(select off from runs where line=3) + 1 where line=3;");
  auto last = sbx::load_trace(s.dirs, kNew);
  REQUIRE(last.ok());
  CHECK((*last)["run_id"] == kNew);
}
