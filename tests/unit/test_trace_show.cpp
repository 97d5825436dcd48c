#include <doctest/doctest.h>

#include "runtime/record/trace_show.hpp"

using namespace sbx;
using nlohmann::json;

TEST_CASE("trace text: an empty record prints every line with '-' for what it lacks") {
  std::string t = trace_show_text(json::object());
  CHECK(t.starts_with("run          -\nstarted      -\nended        -\ncommand      \n"));
  CHECK(t.find("\nlimits       none applied\n") != std::string::npos);
  CHECK(t.find("\ninputs       none\noutputs      none\n") != std::string::npos);
  CHECK(t.ends_with("violations   none\n"));
  // An odd record (members of the wrong type) prints, too.
  CHECK_NOTHROW(trace_show_text(json{{"result", 3}, {"usage", "x"}, {"violations", {1, "a"}}}));
}

TEST_CASE("trace text: a record's facts, escaped for the terminal, labels padded to 12 columns") {
  json r = {{"run_id", "r1"},
            {"invocation", {{"argv", {"sbx", "run", "--", "echo", "a b"}}, {"spec", {{"argv", {"echo", "a b"}}}},
                            {"profile", {{"name", "untrusted"}, {"origin", "builtin"}, {"sha256", "ab"}}}}},
            {"result", {{"status", "error"}, {"exit_code", 3}, {"error", {{"stage", "mounts"}, {"message", "m\x1b[2J"}}}}},
            {"enforcement", {{"limits_applied", {{"memory", {{"value", 5}, {"mechanism", "cgroup"}}}}},
                             {"limits_not_applied", {{{"limit", "pids"}, {"reason", "no cgroup"}}}},
                             {"network", {{"mode", "proxy"}, {"allow", {"a.example"}}}}}},
            {"usage", {{"wall_ms", 7}, {"network", {{"connections", 1}, {"denied", 0}, {"bytes_out", 2}, {"bytes_in", 3}}}}},
            {"violations", {{{"kind", "network"}, {"host", "h"}, {"port", 80}, {"time_ms", 4}, {"reason", "denied"}}}}};
  std::string t = trace_show_text(r);
  CHECK(t.find("command      echo 'a b'\n") != std::string::npos);
  CHECK(t.find("profile      untrusted (builtin, sha256 ab)\n") != std::string::npos);
  CHECK(t.find("status       error, exit 3\n") != std::string::npos);
  CHECK(t.find("\x1b") == std::string::npos);  // the message's escape sequence is made printable
  CHECK(t.find("limits       memory = 5 (cgroup)\nnot applied  pids: no cgroup\n") != std::string::npos);
  CHECK(t.find("usage        wall 7 ms, cpu user - ms") == std::string::npos);
  CHECK(t.find("usage        wall 7 ms, cpu user -, cpu sys -\n") != std::string::npos);
  CHECK(t.find("network      proxy (allow a.example)\n             1 connection(s), 0 denied, 2 bytes out, 3 bytes in\n") !=
        std::string::npos);
  CHECK(t.ends_with("violations   network: denied h:80 at 4 ms: denied\n"));
}

TEST_CASE("trace text: JSON for the terminal is ASCII, and bytes that are not UTF-8 do not abort it") {
  CHECK(dump_ascii_json(json("é")) == "\"\\u00e9\"");
  CHECK_NOTHROW(dump_ascii_json(json(std::string("\xff"))));
}

// trace show printed seccomp violations as raw JSON and limits as raw numbers; clone3's ENOSYS
// (which every threaded program meets) was listed among what the program was refused.
TEST_CASE("trace text: seccomp refusals as sentences, limits in units, clone3's ENOSYS as expected") {
  json seccomp = {{"kind", "seccomp"}, {"name", "unshare"},      {"number", 272},
                  {"arch", "x86_64"},  {"action", "SCMP_ACT_ERRNO(EPERM)"}, {"count", 3}, {"first_at_ms", 12}};
  json clone3 = {{"kind", "seccomp"}, {"name", "clone3"},       {"number", 435},
                 {"arch", "x86_64"},  {"action", "SCMP_ACT_ERRNO(ENOSYS)"}, {"count", 2}, {"first_at_ms", 5}};
  json applied = {{"memory", {{"value", 536870912}, {"mechanism", "cgroup"}}},
                  {"timeout", {{"value", 30000}, {"mechanism", "supervisor"}}},
                  {"pids", {{"value", 64}, {"mechanism", "cgroup"}}}};
  json not_applied = json::array({{{"limit", "cpu_time"}, {"value", 90000}, {"reason", "no rlimit"}}});
  json r = {{"run_id", "r9"},
            {"enforcement", {{"limits_applied", applied}, {"limits_not_applied", not_applied}}},
            {"usage", {{"memory_peak_bytes", 3145728}}},
            {"violations", {clone3, seccomp}}};
  std::string t = trace_show_text(r);
  CHECK(t.find("limits       memory = 512M (cgroup)\n             pids = 64 (cgroup)\n             timeout = 30s "
               "(supervisor)\nnot applied  cpu_time = 90s: no rlimit\n") != std::string::npos);
  CHECK(t.find("memory peak 3M,") != std::string::npos);
  CHECK(t.find("violations   seccomp: refused unshare (x86_64 #272) 3 times with EPERM, first at 12 ms\n"
               "expected     seccomp: refused clone3 (x86_64 #435) 2 times with ENOSYS, first at 5 ms (expected: libc "
               "falls back to clone)\n") != std::string::npos);

  // The line a run ends with: clone3 not counted, hosts named once each.
  json net = {{"kind", "network"}, {"host", "example.com"}, {"port", 443}, {"time_ms", 4}, {"reason", "not allowed"}};
  r["violations"] = {clone3, seccomp, net, net};
  CHECK(violations_line(r) ==
        "3 system calls refused (unshare), 2 connections denied (example.com): see 'sbx trace show r9 --format text'");
  r["violations"] = {clone3};
  CHECK(violations_line(r) == "");
  CHECK(trace_show_text(r).find("violations   none\nexpected     seccomp: refused clone3") != std::string::npos);
  r["violations"] = {net};
  CHECK(violations_line(r) == "1 connection denied (example.com): see 'sbx trace show r9 --format text'");
  CHECK(violations_line(json::object()) == "");
  // sbx probe recognises the line (its helper is refused on purpose), and nothing else.
  CHECK(is_violations_line(violations_line(r)));
  r["violations"] = {seccomp};
  CHECK(is_violations_line(violations_line(r)));
  CHECK_FALSE(is_violations_line("seccomp is UNCONFINED: the program may use every system call"));
  CHECK_FALSE(is_violations_line("export: skipped /out/x: see 'sbx trace show r9 --format text'"));
  CHECK_FALSE(is_violations_line(""));
}

TEST_CASE("run --json: one object from the record, counted as the violations line counts") {
  json seccomp = {{"kind", "seccomp"}, {"name", "unshare"}, {"count", 3}};
  json clone3 = {{"kind", "seccomp"}, {"name", "clone3"}, {"count", 2}, {"action", "SCMP_ACT_ERRNO(ENOSYS)"}};
  json net = {{"kind", "network"}, {"host", "example.com"}, {"port", 443}};
  json r = {{"run_id", "r7"},
            {"started_at", "2026-12-01T08:00:00.000Z"},
            {"ended_at", "2026-12-01T08:00:01.000Z"},
            {"result", {{"status", "timeout"}, {"exit_code", nullptr}, {"signal", 9}, {"reason", "cpu"}}},
            {"usage", {{"wall_ms", 1000}}},
            {"violations", {seccomp, clone3, net}}};
  auto counts = count_violations(r);
  CHECK(counts.system_calls == 3);
  CHECK(counts.hosts == 1);
  RecordPlace place{true, "/s/traces/ledger.jsonl", 42, "ab", "", ""};
  json j = run_summary_json(r, place, 124);
  CHECK(j["run_id"] == "r7");
  CHECK(j["result"] == r["result"]);  // the record's result, whole: a member added there shows here
  CHECK(j["exit_status"] == 124);
  CHECK(j["wall_ms"] == 1000);
  CHECK(j["violations"] == json{{"system_calls", 3}, {"hosts", 1}});
  CHECK(j["record"]["seq"] == 42);
  CHECK(j["record"]["ledger"] == "/s/traces/ledger.jsonl");
  CHECK(j["record"]["error"].is_null());
  // Not stored: no seq, the reason instead.
  json k = run_summary_json(json::object(), RecordPlace{false, "/l", 0, "", "disk full", ""}, 125);
  CHECK(k["record"]["seq"].is_null());
  CHECK(k["record"]["error"] == "disk full");
  CHECK(k["violations"] == json{{"system_calls", 0}, {"hosts", 0}});
}
