// `sbx mcp`'s loop (runtime/server/mcp_server.cpp) driven over socket pairs, without a sandbox:
// serve() runs on a thread of the test with a SandboxLauncher of the test, whose "worker" is a
// child that exits at once (its response memfd left empty, or the launch refused).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/server/mcp_server.hpp"
#include "tests/unit/test_util.hpp"

using namespace sbx;
using namespace sbx::mcp;
using nlohmann::json;

namespace {

struct FakeLauncher : SandboxLauncher {
  std::vector<json> jobs;  // read by the test only after serve() returned
  bool refuse = false;
  int hold = -1, hold_writer = -1;  // a pipe: each worker runs until the test closes its write end
  Result<Worker> launch(const json& job) override {
    jobs.push_back(job);
    if (refuse) return make_error("mcp", "no sandbox in a unit test");
    UniqueFd response(::memfd_create("fake-mcp-response", MFD_CLOEXEC));
    pid_t pid = ::fork();
    if (pid == 0) {
      char c;
      if (hold_writer >= 0) ::close(hold_writer);  // its copy would keep the pipe open
      if (hold >= 0) (void)!::read(hold, &c, 1);
      ::_exit(0);
    }
    siginfo_t si{};
    if (hold < 0)
      ::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOWAIT);  // exited, still to be reaped by the server
    Worker w;
    w.pid = pid;
    w.pidfd = UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    w.response = std::move(response);
    return w;
  }
};

struct ServerRig {
  ServerConfig cfg;
  FakeLauncher launcher;
  sbx::test::FdPair in = sbx::test::make_socketpair(), out = sbx::test::make_socketpair();
  std::thread server;
  int rc = -1;
  std::string pending;  // read from the server, not yet a whole line
  UniqueFd saved_stderr{::dup(STDERR_FILENO)};  // the server's log lines are not the test's output

  ServerRig() {
    UniqueFd null(::open("/dev/null", O_WRONLY | O_CLOEXEC));
    ::dup2(null.get(), STDERR_FILENO);
  }
  ~ServerRig() {
    stop();
    ::dup2(saved_stderr.get(), STDERR_FILENO);
  }
  void start() {
    server = std::thread([this] { rc = serve(cfg, launcher, in.b.get(), out.b.get()); });
  }
  void stop() {
    in.a.reset();  // stdin EOF: the server shuts down
    if (server.joinable()) server.join();
  }
  void send(const std::string& line) {
    std::string s = line + "\n";
    for (std::size_t off = 0; off < s.size();) {
      ssize_t k = ::send(in.a.get(), s.data() + off, s.size() - off, MSG_NOSIGNAL);
      REQUIRE(k > 0);
      off += static_cast<std::size_t>(k);
    }
  }
  // The next line the server writes (waiting at most ~5 s); "" if none came.
  std::string line() {
    for (int i = 0; i < 500; ++i) {
      if (auto nl = pending.find('\n'); nl != std::string::npos) {
        std::string l = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        return l;
      }
      pending += sbx::test::read_available(out.a.get(), 10);
    }
    return "";
  }
  json message() {
    std::string l = line();
    REQUIRE_MESSAGE(!l.empty(), "the server wrote no line");
    return json::parse(l);
  }
  void initialize() {
    send(R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})");
    json r = message();
    REQUIRE(r["id"] == 1);
    REQUIRE(r["result"]["protocolVersion"] == "2025-06-18");
    send(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
  }
};

std::string text_of(const json& result) { return result["content"][0]["text"].get<std::string>(); }

}  // namespace

TEST_CASE("mcp server: initialize, tools/list and ping over a socket pair; stdin EOF ends it with 0") {
  ServerRig rig;
  rig.cfg.instructions = "be brief";
  rig.start();
  rig.send(R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})");
  json init = rig.message();
  CHECK(init["jsonrpc"] == "2.0");
  CHECK(init["id"] == 1);
  CHECK(init["result"]["protocolVersion"] == "2025-06-18");
  CHECK(init["result"]["serverInfo"]["name"] == "sbx");
  CHECK(init["result"]["instructions"] == "be brief");
  CHECK(init["result"]["capabilities"]["tools"]["listChanged"] == false);
  rig.send(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");  // answered with nothing
  rig.send(R"({"jsonrpc":"2.0","id":"two","method":"tools/list"})");
  json list = rig.message();
  CHECK(list["id"] == "two");
  REQUIRE(list["result"]["tools"].is_array());
  std::vector<std::string> names;
  for (auto& t : list["result"]["tools"]) names.push_back(t["name"]);
  CHECK(names == std::vector<std::string>{"run_code", "session_start", "session_exec", "session_stop"});
  rig.send(R"({"jsonrpc":"2.0","id":3,"method":"ping"})");
  CHECK(rig.message() == json::parse(R"({"jsonrpc":"2.0","id":3,"result":{}})"));
  rig.send(R"({"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{}}})");
  CHECK(rig.message()["error"]["message"] == "Invalid Request: already initialized");
  rig.stop();
  CHECK(rig.rc == 0);
  CHECK(rig.launcher.jobs.empty());
}

TEST_CASE("mcp server: malformed JSON, an unknown method and a call before initialize are errors, not the end") {
  ServerRig rig;
  rig.start();
  rig.send("{not json");
  json bad = rig.message();
  CHECK(bad["id"].is_null());
  CHECK(bad["error"]["code"] == kParseError);
  rig.send(R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})");
  json early = rig.message();
  CHECK(early["error"]["code"] == kInvalidRequest);
  CHECK(early["error"]["message"].get<std::string>().rfind("Invalid Request: not initialized", 0) == 0);
  rig.send("");  // a blank line carries nothing
  rig.initialize();
  rig.send(R"({"jsonrpc":"2.0","id":2,"method":"no/such"})");
  json unknown = rig.message();
  CHECK(unknown["error"]["code"] == kMethodNotFound);
  CHECK(unknown["error"]["message"] == "Method not found: \"no/such\"");
  rig.send(R"([{"jsonrpc":"2.0","id":3,"method":"ping"}])");  // no batches in 2025-06-18
  CHECK(rig.message()["error"]["message"] == "Invalid Request: JSON-RPC batches are not part of protocol version 2025-06-18");
  rig.stop();
  CHECK(rig.rc == 0);
}

TEST_CASE("mcp server: a line past kMaxMessageBytes is refused as it arrives and the rest of it dropped") {
  ServerRig rig;
  rig.start();
  rig.initialize();
  std::string big = R"({"jsonrpc":"2.0","id":9,"method":"ping","params":{"pad":")" + std::string(kMaxMessageBytes, 'a') + "\"}}";
  rig.send(big);
  json refused = rig.message();
  CHECK(refused["id"].is_null());
  CHECK(refused["error"]["code"] == kInvalidRequest);
  CHECK(refused["error"]["message"] ==
        "Invalid Request: a message is longer than " + std::to_string(kMaxMessageBytes) + " bytes");
  rig.send(R"({"jsonrpc":"2.0","id":10,"method":"ping"})");  // the next line is read as usual
  CHECK(rig.message()["id"] == 10);
  rig.stop();
}

TEST_CASE("mcp server: tools/call goes through the launcher; a refused launch and a worker without a response are tool errors") {
  ServerRig rig;
  SUBCASE("the launch is refused") {
    rig.launcher.refuse = true;
    rig.start();
    rig.initialize();
    rig.send(R"({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"run_code","arguments":{"language":"sh","code":"true"}}})");
    json r = rig.message();
    CHECK(r["id"] == 5);
    CHECK(r["result"]["isError"] == true);
    CHECK(text_of(r["result"]).rfind("sbx: could not start the call's sandbox: ", 0) == 0);
  }
  SUBCASE("the worker ends without writing its response") {
    rig.start();
    rig.initialize();
    rig.send(R"({"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"run_code","arguments":{"language":"sh","code":"true"}}})");
    json r = rig.message();
    CHECK(r["id"] == 6);
    CHECK(r["result"]["isError"] == true);
    CHECK(text_of(r["result"]) == "sbx: the sandbox worker ended (exit 0) without a response");
  }
  SUBCASE("a malformed run_code request never reaches the launcher") {
    rig.start();
    rig.initialize();
    rig.send(R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"run_code","arguments":{"code":1}}})");
    json r = rig.message();
    CHECK(r["result"]["isError"] == true);
    rig.send(R"({"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"nope","arguments":{}}})");
    CHECK(rig.message()["error"]["message"] == "Invalid params: unknown tool \"nope\"");
    rig.stop();
    CHECK(rig.launcher.jobs.empty());
    return;
  }
  rig.stop();
  REQUIRE(rig.launcher.jobs.size() == 1);
  CHECK(rig.launcher.jobs[0]["tool"] == "run_code");
  CHECK(rig.launcher.jobs[0]["profile"] == "untrusted");
  CHECK(rig.launcher.jobs[0]["request"]["code"] == "true");
}

TEST_CASE("mcp server: a client that does not read stops being read past kQueuedResponseBudget, and loses nothing") {
  ServerRig rig;
  rig.start();
  rig.initialize();
  sbx::test::set_nonblocking(rig.in.a.get());
  // tools/list answers are a few KiB each: the client sends until the server stops taking them.
  std::string req = R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})" "\n";
  // One answer first: its size says how many answers the budget holds.
  REQUIRE(::send(rig.in.a.get(), req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size()));
  const std::size_t answer_size = rig.line().size() + 1;
  std::size_t requests = 0, stalls = 0;
  std::string partial;
  // Stalled for 3 s once past the budget: the server stopped reading. A slow server (ASan, a
  // loaded machine) stalls the client before the budget too, so a stall alone proves nothing;
  // 30 s without progress ends the loop and fails the check below.
  while (stalls < 3000 && !(stalls >= 300 && requests * answer_size > kQueuedResponseBudget)) {
    std::string chunk = partial.empty() ? std::string() : partial;
    while (chunk.size() < 256 * 1024) chunk += req;
    ssize_t k = ::send(rig.in.a.get(), chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (k <= 0) {
      ++stalls;
      ::usleep(10000);
      partial = chunk;
      continue;
    }
    stalls = 0;
    std::size_t sent = static_cast<std::size_t>(k);
    requests += std::count(chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(sent), '\n');
    partial = chunk.substr(sent);
    REQUIRE(requests < 10u * 1000 * 1000);  // the budget never stopped it: fail rather than loop on
  }
  CHECK(requests * answer_size > kQueuedResponseBudget);  // past the budget: more than it holds
  // Reading at last, the client gets an answer to every request it got through.
  std::size_t answers = 0;
  for (;;) {
    if (!partial.empty()) {
      ssize_t k = ::send(rig.in.a.get(), partial.data(), partial.size(), MSG_NOSIGNAL);
      if (k > 0) {
        requests += std::count(partial.begin(), partial.begin() + k, '\n');
        partial.erase(0, static_cast<std::size_t>(k));
      }
    }
    std::string l = rig.line();
    if (l.empty()) break;
    ++answers;
    if (answers == requests && partial.empty()) break;
  }
  CHECK(answers == requests);
  rig.stop();
  CHECK(rig.rc == 0);
}

TEST_CASE("mcp server: calls waiting for a slot hold their requests as text, within kQueuedRequestBudget") {
  ServerRig rig;
  sbx::test::FdPair hold = sbx::test::make_pipe();
  rig.launcher.hold = hold.a.get();
  rig.launcher.hold_writer = hold.b.get();
  rig.cfg.max_concurrent = 1;
  rig.start();
  rig.initialize();
  auto call = [&](const std::string& id, const std::string& code) {
    rig.send(R"({"jsonrpc":"2.0","id":")" + id +
             R"(","method":"tools/call","params":{"name":"run_code","arguments":{"language":"sh","code":")" + code +
             R"("}}})");
  };
  auto ping = [&](int id) {  // lines are handled in order: an answer to what came before is in first
    rig.send(R"({"jsonrpc":"2.0","id":)" + std::to_string(id) + R"(,"method":"ping"})");
    return rig.message();
  };
  call("running", "true");  // takes the one slot and keeps it
  const std::string big(40u << 20, 'x');
  call("big", big);  // waits: ~40 MiB held
  call("refused", std::string(30u << 20, 'y'));
  json r = rig.message();
  CHECK(r["id"] == "refused");
  CHECK(r["error"]["code"] == kServerBusy);
  CHECK(r["error"]["message"].get<std::string>().rfind("Server busy: the 1 calls waiting for a slot hold ", 0) == 0);
  call("small", "echo small");  // fits beside the big one
  CHECK(ping(20)["id"] == 20);
  hold.b.reset();  // every worker may end now: the waiting calls start in order
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(rig.message()["id"].get<std::string>());
  CHECK(ids == std::vector<std::string>{"running", "big", "small"});
  rig.stop();
  REQUIRE(rig.launcher.jobs.size() == 3);
  // What waited as text reached the launcher as it was sent.
  CHECK(rig.launcher.jobs[1] ==
        json{{"tool", "run_code"}, {"profile", "untrusted"}, {"request", {{"language", "sh"}, {"code", big}}}});
  CHECK(rig.launcher.jobs[2]["request"]["code"] == "echo small");
}
