#include <doctest/doctest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "runtime/base/fsutil.hpp"
#include "runtime/server/mcp_worker.hpp"
#include "runtime/server/pool_job_wire.hpp"

using namespace sbx;
using namespace sbx::mcp;
using nlohmann::json;

TEST_CASE("mcp worker: a job that is no object or names no known tool is answered with a usage error") {
  WorkerContext ctx;
  json r = answer_job(json::array(), ctx);
  CHECK(r == json{{"error", {{"stage", "usage"}, {"message", "the job is not an object"}}}});
  CHECK(worker_exit_status(r) == 125);
  r = answer_job(json{{"tool", "shell"}}, ctx);
  CHECK(r["error"]["message"] == "unknown job tool");
  r = answer_job(Result<json>(make_error("usage", "mcp worker job: not JSON")), ctx);
  CHECK(r["error"]["message"] == "mcp worker job: not JSON");
  // A run's response carries its status: an error in it is the program's, not the worker's.
  CHECK(worker_exit_status(json{{"status", "error"}, {"error", "x"}}) == 0);
  CHECK(worker_exit_status(json{{"status", "ok"}}) == 0);
}

TEST_CASE("mcp worker: a pooled sandbox serves only run_code under its profile and its tenant's policy as built") {
  int asked = 0;
  auto now = [&](std::string v) {
    return [&asked, v] {
      ++asked;
      return v;
    };
  };
  json call = {{"tool", "run_code"}, {"profile", "untrusted"}};
  CHECK(pooled_job_refusal(call, "untrusted", std::nullopt, "", now("x")) == "");
  CHECK(asked == 0);  // no tenant: its policy is never read
  CHECK(pooled_job_refusal(call, "trusted", std::nullopt, "", now("")) ==
        "the job is not a run_code call under profile trusted");
  CHECK(pooled_job_refusal(json{{"tool", "pack"}, {"profile", "untrusted"}}, "untrusted", "t", "k", now("k")) ==
        "the job is not a run_code call under profile untrusted");
  CHECK(pooled_job_refusal(call, "untrusted", "t", "k", now("k")) == "");
  CHECK(pooled_job_refusal(call, "untrusted", "t", "k", now("k2")) ==
        "tenant t's policy changed since the pooled sandbox was built");
}

TEST_CASE("mcp worker: a pooled sandbox that cannot serve says why, and waits for a job the server may have sent") {
  PooledWait w;
  w.exec = make_error("clone", "no");
  CHECK(broken_sandbox(w).why == "the pooled sandbox could not be built: no");
  CHECK(broken_sandbox(w).grace_ms == -1);
  w.got_job = true;  // the build failed with a job taken: answered with the error, not broken
  CHECK(broken_sandbox(w).why.empty());

  PooledExec ex;
  ex.build_error = make_error("mounts", "busy");
  w = {};
  w.exec = ex;
  CHECK(broken_sandbox(w).why == "the pooled sandbox could not be built: busy");

  w = {};
  w.exec = PooledExec{};
  w.died = "the pooled sandbox's init died before hand-out";
  CHECK(broken_sandbox(w).why == w.died);
  CHECK(broken_sandbox(w).grace_ms == kDiedJobGraceMs);

  w.died.clear();
  CHECK(broken_sandbox(w).why == "the pooled sandbox ended before hand-out");
  w.closed = true;  // EOF: the server retired it, no job can be waiting
  CHECK(broken_sandbox(w).why.empty());
}

TEST_CASE("mcp worker: after a pooled wait the call is answered, run cold with its reason, or nothing is done") {
  PooledWait w;
  w.created_at = "2026-12-02T10:00:00.000Z";
  w.exec = PooledExec{};
  w.closed = true;
  CHECK(after_pooled_wait(w, "untrusted").nothing);

  PooledExec ran;
  ran.request = json{{"code", "x"}};
  ran.response = json{{"status", "ok"}};
  w.exec = ran;
  auto next = after_pooled_wait(w, "untrusted");
  CHECK_FALSE(next.nothing);
  CHECK(next.response == json{{"status", "ok"}});

  PooledExec cold;
  cold.request = json{{"code", "y"}};
  cold.pool_meta = json{{"discard", "why"}};
  w.exec = cold;
  next = after_pooled_wait(w, "p");
  CHECK(next.job == json{{"tool", "run_code"}, {"profile", "p"}, {"request", {{"code", "y"}}},
                         {"pool", {{"hit", false}, {"reason", "why"}, {"created_at", "2026-12-02T10:00:00.000Z"}}}});

  w.invalid = json{{"invalid", "the job is not an object"}};
  CHECK(after_pooled_wait(w, "p").response["error"]["message"] == "the job is not an object");

  CHECK(after_broken_wait(std::nullopt, "b", "p", "2026-12-02T10:00:00.000Z").nothing);
  next = after_broken_wait(json{{"request", {{"code", "z"}}}}, "b", "p", "2026-12-02T10:00:00.000Z");
  CHECK(next.job["pool"] == json{{"hit", false}, {"reason", "b"}, {"created_at", "2026-12-02T10:00:00.000Z"}});
  CHECK(next.job["request"] == json{{"code", "z"}});
}

TEST_CASE("mcp worker: a pack's pooled sandbox serves only calls of the pack, contexts and secrets it was built for") {
  json key = {{"tool", "pack"}, {"profile", "untrusted"}, {"dir", "/p"}, {"contexts", json::array({{"c", "/x"}})},
              {"secrets", json::array()}};
  auto policy = [] { return std::string("k"); };
  json call = key;
  call["records"] = json::array({{{"id", 1}}});
  call["pool_sent_us"] = 5;
  CHECK(pooled_pack_job_refusal(call, key, std::nullopt, "", policy) == "");
  CHECK(pooled_pack_job_refusal(call, key, "t", "k", policy) == "");
  CHECK(pooled_pack_job_refusal(call, key, "t", "k0", policy) ==
        "tenant t's policy changed since the pooled sandbox was built");
  const std::string other = "the job is not a call of pack /p with the contexts and secrets it was built with";
  for (const char* k : {"dir", "contexts", "secrets", "profile", "tool"}) {
    json c = call;
    c[k] = "else";
    CHECK(pooled_pack_job_refusal(c, key, std::nullopt, "", policy) == other);
  }
  json run_code = {{"tool", "run_code"}, {"profile", "untrusted"}, {"request", {{"code", "x"}}}};
  CHECK(pooled_pack_job_refusal(run_code, key, std::nullopt, "", policy) == other);

  // A call it cannot run goes cold as the server sent it, with the pool's note; never rebuilt from
  // what a client wrote.
  json note = {{"hit", false}, {"reason", "r"}};
  json cold = cold_pack_job(call, note);
  CHECK(cold["pool"] == note);
  CHECK_FALSE(cold.contains("pool_sent_us"));
  CHECK(cold["records"] == call["records"]);
  CHECK(cold["dir"] == "/p");

  PooledWait w;
  w.pack = true;
  w.created_at = "2026-12-04T10:00:00.000Z";
  PooledExec ex;
  ex.request = call;
  ex.pool_meta = json::object();
  ex.cold_reason = "pack /p changed since the pooled sandbox was built";
  w.exec = ex;
  auto next = after_pooled_wait(w, "untrusted");
  CHECK(next.job["tool"] == "pack");
  CHECK(next.job["pool"]["reason"] == ex.cold_reason);
  CHECK(next.job["records"] == call["records"]);
  // A run_code request that names a pack is still run_code: the pool's kind decides, not the request.
  w.pack = false;
  ex.request = {{"tool", "pack"}, {"dir", "/etc"}};
  w.exec = ex;
  next = after_pooled_wait(w, "untrusted");
  CHECK(next.job["tool"] == "run_code");
  CHECK(next.job["request"] == ex.request);
  // After a failed build the server's own job decides.
  next = after_broken_wait(call, "b", "untrusted", w.created_at);
  CHECK(next.job["tool"] == "pack");
  CHECK(next.job["pool"]["reason"] == "b");
}

TEST_CASE("mcp worker: a pooled job travels in its message when small, in a memfd when not, and a bad one is refused") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  UniqueFd server(sv[0]), worker(sv[1]);
  CHECK(recv_pool_job(worker.get(), 1 << 20).kind == PoolJobRead::again);  // nothing sent yet
  // Small: in the message. Exactly the bound still is.
  for (std::size_t size : {std::size_t{2}, kInlineJobBytes}) {
    std::string text(size, 'x');
    REQUIRE(send_pool_job(server.get(), text));
    PoolJobRead got = recv_pool_job(worker.get(), 1 << 20);
    CHECK(got.kind == PoolJobRead::job);
    CHECK(got.text == text);
  }
  // Larger: in a memfd, whose reader keeps its own bound.
  std::string big(kInlineJobBytes + 1, 'y');
  REQUIRE(send_pool_job(server.get(), big));
  PoolJobRead got = recv_pool_job(worker.get(), 1 << 20);
  CHECK(got.kind == PoolJobRead::job);
  CHECK(got.text == big);
  REQUIRE(send_pool_job(server.get(), big));
  got = recv_pool_job(worker.get(), 100);
  CHECK(got.kind == PoolJobRead::invalid);
  CHECK(!got.why.empty());
  // A message that says more or less than it carries, or another tag, is no job.
  auto raw = [&](std::string bytes) {
    REQUIRE(::send(server.get(), bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
    return recv_pool_job(worker.get(), 1 << 20);
  };
  std::uint32_t len = 5;
  std::string head = "j" + std::string(reinterpret_cast<const char*>(&len), sizeof len);
  CHECK(raw(head + "abcdefg").kind == PoolJobRead::invalid);
  CHECK(raw(head + "abcde").text == "abcde");
  CHECK(raw("x").why == "the mcp worker's job message is malformed");
  len = static_cast<std::uint32_t>(kInlineJobBytes + 1);
  CHECK(raw("j" + std::string(reinterpret_cast<const char*>(&len), sizeof len)).kind == PoolJobRead::invalid);
  CHECK(raw("J").kind == PoolJobRead::invalid);  // a memfd's tag without its fd
  // A message queued in pieces (a small send buffer) is read whole once its rest follows.
  std::thread rest([&] {
    ::usleep(50'000);
    REQUIRE(::send(server.get(), "de", 2, 0) == 2);
  });
  got = raw(head + "abc");
  rest.join();
  CHECK(got.kind == PoolJobRead::job);
  CHECK(got.text == "abcde");
  // One whose rest never comes (the server retired the worker) is no job.
  REQUIRE(::send(server.get(), (head + "ab").data(), head.size() + 2, 0) > 0);
  REQUIRE(::shutdown(server.get(), SHUT_WR) == 0);
  CHECK(recv_pool_job(worker.get(), 1 << 20).kind == PoolJobRead::invalid);
  CHECK(recv_pool_job(worker.get(), 1 << 20).kind == PoolJobRead::closed);
}

TEST_CASE("mcp worker: a template's key is read whole from the socket, and no byte of the job after it") {
  const std::string key = std::string(32, '0') + std::string(32, 'f');
  CHECK(sbx::mcp::is_template_key(key));
  CHECK_FALSE(sbx::mcp::is_template_key(key.substr(1)));
  CHECK_FALSE(sbx::mcp::is_template_key(std::string(63, 'a') + "A"));
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  sbx::UniqueFd a(sv[0]), b(sv[1]);
  SUBCASE("in two parts, the job following") {
    REQUIRE(sbx::write_all(a.get(), key.substr(0, 10), "key").ok());
    std::thread late([&] {
      ::usleep(20'000);
      (void)sbx::write_all(a.get(), key.substr(10) + "{\"job\":1}", "key");
    });
    nlohmann::json t = {{"socket", "/tmp/x/sock"}};
    auto st = sbx::mcp::read_template_key(b.get(), t, 2000);
    late.join();
    REQUIRE(st.ok());
    CHECK(t["key"] == key);
    char rest[16] = {};
    CHECK(::read(b.get(), rest, sizeof rest) == 9);
    CHECK(std::string(rest) == "{\"job\":1}");
  }
  SUBCASE("not a key") {
    REQUIRE(sbx::write_all(a.get(), std::string(64, 'x'), "key").ok());
    nlohmann::json t = nlohmann::json::object();
    auto st = sbx::mcp::read_template_key(b.get(), t, 2000);
    CHECK_FALSE(st.ok());
    CHECK_FALSE(t.contains("key"));
  }
  SUBCASE("too short: an end, or nothing in time") {
    REQUIRE(sbx::write_all(a.get(), key.substr(0, 20), "key").ok());
    nlohmann::json t = nlohmann::json::object();
    auto st = sbx::mcp::read_template_key(b.get(), t, 100);
    CHECK_FALSE(st.ok());
    CHECK(st.error().message.find("did not come") != std::string::npos);
    a.reset();
    st = sbx::mcp::read_template_key(b.get(), t, 2000);
    CHECK_FALSE(st.ok());
  }
}
