#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "runtime/session/kernel_relay.hpp"
#include "runtime/session/session_store.hpp"
#include "runtime/session/session_tunnel.hpp"
#include "runtime/session/session_wire.hpp"

using namespace sbx;

TEST_CASE("session frames round-trip in any split, and the reader holds at most one frame") {
  std::string bytes = encode_json_frame({{"op", "exec"}, {"argv", {"true"}}}) +
                      encode_frame('O', std::string("a\0b", 3)) + encode_frame('E', "") +
                      encode_stream_frame(7, "zmtp");
  for (std::size_t step : {1u, 2u, 5u, 64u}) {
    FrameReader r;
    std::vector<Frame> got;
    for (std::size_t at = 0; at < bytes.size(); at += step) {
      r.feed(std::string_view(bytes).substr(at, step));
      for (;;) {
        auto f = r.next();
        REQUIRE(f);
        if (!*f) break;
        got.push_back(**f);
      }
    }
    REQUIRE(got.size() == 4);
    CHECK(frame_json(got[0])->at("op") == "exec");
    CHECK(got[1].type == 'O');
    CHECK(got[1].body == std::string("a\0b", 3));
    CHECK(got[2].body.empty());
    std::uint32_t id = 0;
    std::string_view data;
    REQUIRE(decode_stream_frame(got[3].body, id, data));
    CHECK(id == 7);
    CHECK(data == "zmtp");
    CHECK(r.pending() == 0);
  }
}

TEST_CASE("a frame over the bound, of an unknown type, or not a JSON object is refused") {
  FrameReader big;
  big.feed(std::string("\x7f\xff\xff\xff", 4) + "J");
  CHECK_FALSE(big.next());
  FrameReader odd;
  odd.feed(encode_frame('X', "x"));
  CHECK_FALSE(odd.next());
  CHECK_FALSE(frame_json(Frame{'J', "[1,2]"}));
  CHECK_FALSE(frame_json(Frame{'J', "{\"a\":"}));
  CHECK_FALSE(frame_json(Frame{'O', "{}"}));
  std::string deep(200, '[');
  CHECK_FALSE(frame_json(Frame{'J', "{\"a\":" + deep + "}"}));
  std::uint32_t id = 0;
  std::string_view data;
  CHECK_FALSE(decode_stream_frame("abc", id, data));
}

TEST_CASE("session ids are 32 lower-case hex digits, unguessable and never a path") {
  std::string a = new_session_id(), b = new_session_id();
  CHECK(valid_session_id(a));
  CHECK(a != b);
  for (const char* bad : {"", "../../etc", "0123456789ABCDEF0123456789abcdef", "0123456789abcdef0123456789abcde",
                          "0123456789abcdef0123456789abcdef0", "0123456789abcdef/123456789abcdef"})
    CHECK_MESSAGE(!valid_session_id(bad), bad);
}

TEST_CASE("SBX_MAX_SESSIONS may lower the maximum of running sessions, never raise it") {
  ::setenv("SBX_MAX_SESSIONS", "3", 1);
  CHECK(*max_sessions() == 3);
  for (const char* bad : {"0", "-1", "33", "1x", "999999999999"}) {
    ::setenv("SBX_MAX_SESSIONS", bad, 1);
    CHECK_MESSAGE(!max_sessions(), bad);
  }
  ::unsetenv("SBX_MAX_SESSIONS");
  CHECK(*max_sessions() == kDefaultMaxSessions);
}

TEST_CASE("a kernel's connection file: tcp and five ports, or a clear refusal") {
  char path[] = "/tmp/sbx-conn-XXXXXX";
  int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  auto write = [&](const std::string& text) { std::ofstream(path) << text; };
  write(R"({"transport":"tcp","ip":"127.0.0.1","shell_port":5001,"iopub_port":5002,"stdin_port":5003,)"
        R"("control_port":5004,"hb_port":5005,"key":"k","signature_scheme":"hmac-sha256","kernel_name":"sbx"})");
  auto c = read_connection_file(path);
  REQUIRE(c);
  CHECK(c->ports[0] == 5001);
  CHECK(c->ports[4] == 5005);
  CHECK(c->key == "k");
  write(R"({"transport":"ipc","ip":"/tmp/k"})");
  CHECK(read_connection_file(path).error().message.find("tcp only") != std::string::npos);
  write(R"({"transport":"tcp","shell_port":0,"iopub_port":2,"stdin_port":3,"control_port":4,"hb_port":5})");
  CHECK(read_connection_file(path).error().message.find("shell_port") != std::string::npos);
  write(R"({"transport":"tcp","shell_port":"1","iopub_port":2,"stdin_port":3,"control_port":4,"hb_port":5})");
  CHECK_FALSE(read_connection_file(path));
  ::unlink(path);
}

TEST_CASE("a store keeps at most kMaxTombstones ended sessions, the newest") {
  char tmpl[] = "/tmp/sbx-tomb-XXXXXX";
  REQUIRE(::mkdtemp(tmpl));
  Dirs dirs;
  dirs.state = tmpl;
  REQUIRE(::mkdir((std::string(tmpl) + "/sessions").c_str(), 0700) == 0);
  REQUIRE(::mkdir((std::string(tmpl) + "/sessions/ended").c_str(), 0700) == 0);
  std::string last;
  for (std::size_t i = 0; i < kMaxTombstones + 5; ++i) {
    last = new_session_id();
    retire_session_dir(dirs, last, {{"id", last}, {"state", "ended"}, {"ended_by", "stop"}});
  }
  auto all = list_sessions(dirs, true);
  REQUIRE(all);
  CHECK(all->size() == kMaxTombstones);
  CHECK(find_session(dirs, last)->value("ended_by", "") == "stop");
  std::system(("rm -rf " + std::string(tmpl)).c_str());
}

TEST_CASE("a store's symlinks are never followed, its FIFOs never block, its odd files are skipped") {
  char tmpl[] = "/tmp/sbx-store-XXXXXX";
  REQUIRE(::mkdtemp(tmpl));
  std::string t = tmpl;
  Dirs dirs;
  dirs.state = t + "/state";
  auto put = [](const std::string& path, const std::string& text) { std::ofstream(path) << text; };
  REQUIRE(::mkdir(dirs.state.c_str(), 0700) == 0);
  REQUIRE(::mkdir((dirs.state + "/sessions").c_str(), 0700) == 0);
  REQUIRE(::mkdir((dirs.state + "/sessions/ended").c_str(), 0700) == 0);
  REQUIRE(::mkdir((t + "/victim").c_str(), 0700) == 0);
  put(t + "/victim/session.json", R"({"id": "0123456789abcdef0123456789abcdef"})");
  put(t + "/victim/keep", "x");
  std::string linked = "0123456789abcdef0123456789abcdef";
  REQUIRE(::symlink((t + "/victim").c_str(), session_dir(dirs, linked).c_str()) == 0);
  std::string fifo = std::string(32, 'a');
  REQUIRE(::mkdir(session_dir(dirs, fifo).c_str(), 0700) == 0);
  REQUIRE(::mkfifo((session_dir(dirs, fifo) + "/session.json").c_str(), 0600) == 0);
  REQUIRE(::mkfifo((dirs.state + "/sessions/ended/" + std::string(32, 'b') + ".json").c_str(), 0600) == 0);
  put(dirs.state + "/sessions/ended/" + std::string(32, 'c') + ".json", R"({"id": 5, "started_at": "x"})");
  put(dirs.state + "/sessions/ended/" + std::string(32, 'd') + ".json",
      R"({"id": ")" + std::string(32, 'd') + R"(", "started_at": 7})");
  std::vector<std::string> skipped;
  auto all = list_sessions(dirs, true, &skipped);
  REQUIRE(all);
  REQUIRE(all->size() == 1);
  CHECK(all->front()["id"] == std::string(32, 'd'));
  CHECK(skipped.size() == 4);
  struct stat st;
  CHECK(::stat((t + "/victim/keep").c_str(), &st) == 0);
  CHECK(::stat((t + "/victim/session.json").c_str(), &st) == 0);
  auto found = find_session(dirs, linked);
  REQUIRE_FALSE(found);
  CHECK(found.error().message.find("symlink") != std::string::npos);
  found = find_session(dirs, fifo);
  REQUIRE_FALSE(found);
  CHECK(found.error().message.find("not a regular file") != std::string::npos);
  // ended/ a symlink: a burial writes and prunes nothing there.
  std::string ended = dirs.state + "/sessions/ended";
  REQUIRE(std::system(("rm -rf " + ended).c_str()) == 0);
  REQUIRE(::symlink((t + "/victim").c_str(), ended.c_str()) == 0);
  retire_session_dir(dirs, std::string(32, 'e'), {{"id", std::string(32, 'e')}});
  CHECK(::stat((t + "/victim/" + std::string(32, 'e') + ".json").c_str(), &st) != 0);
  CHECK_FALSE(create_session_dir(dirs, std::string(32, 'f'), 4));
  // Another user's (or others-writable) store is refused outright.
  REQUIRE(::chmod(dirs.state.c_str(), 0777) == 0);
  CHECK_FALSE(list_sessions(dirs, true));
  CHECK_FALSE(check_session_store(dirs));
  std::system(("rm -rf " + t).c_str());
}
