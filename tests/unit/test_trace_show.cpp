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
