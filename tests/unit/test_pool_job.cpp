#include <doctest/doctest.h>

#include "runtime/launch/call_files.hpp"
#include "runtime/launch/pool_job.hpp"
#include "runtime/server/mcp_pool.hpp"

using namespace sbx;

TEST_CASE("a pooled sandbox's job round-trips and keeps its files unwritable") {
  PoolJob job;
  job.argv = {"/bin/sh", "/code/main.sh"};
  job.files = {{"/code/main.sh", "echo hi\n", 0444}, {"/code/lib/x.py", std::string("a\0b", 3), 0755},
               {"/in/input.json", "null", 04666}};
  auto back = decode_pool_job(encode_pool_job(job));
  REQUIRE(back);
  CHECK(back->argv == job.argv);
  REQUIRE(back->files.size() == 3);
  CHECK(back->files[1].content == std::string("a\0b", 3));
  CHECK(back->files[1].mode == 0555);
  CHECK(back->files[2].mode == 0444);  // no setuid, no write bits survive
}

TEST_CASE("a job that is cut, padded, or names a path outside /code and /in is refused") {
  PoolJob job;
  job.argv = {"/bin/sh"};
  job.files = {{"/code/main.sh", "x", 0444}};
  std::string frame = encode_pool_job(job);
  CHECK_FALSE(decode_pool_job(frame.substr(0, frame.size() - 1)));
  CHECK_FALSE(decode_pool_job(frame + "x"));
  for (const char* bad : {"/etc/passwd", "/code/../etc/x", "/code//x", "/code/", "/code", "/codex/y", "/in/a/"}) {
    PoolJob b = job;
    b.files = {{bad, "x", 0444}};
    CHECK_MESSAGE(!decode_pool_job(encode_pool_job(b)), std::string(bad));
  }
  PoolJob noargv;
  CHECK_FALSE(decode_pool_job(encode_pool_job(noargv)));
  // A length prefix past the bound is refused before anything is held.
  std::string huge(8, '\xff');
  CHECK_FALSE(decode_pool_job(huge));
}

TEST_CASE("a pooled sandbox serves only calls that lower timeout or output_limit") {
  RunSpec pooled;
  pooled.argv = {"/bin/sh", "/code/main.sh"};
  pooled.limits.timeout_ms = 30000;
  pooled.limits.output_limit_bytes = 65536;
  pooled.limits.memory_bytes = 512 << 20;
  RunSpec call = pooled;
  call.argv = {"/usr/bin/python3", "/code/main.py"};
  CHECK(pool_refusal(pooled, call) == "");
  call.limits.timeout_ms = 1000;
  call.limits.output_limit_bytes = 100;
  CHECK(pool_refusal(pooled, call) == "");
  call.limits.timeout_ms = 30001;
  CHECK(pool_refusal(pooled, call).find("timeout") != std::string::npos);
  call.limits.timeout_ms.reset();  // none at all is more than the pool's
  CHECK(pool_refusal(pooled, call) != "");
  call = pooled;
  call.limits.memory_bytes = 256 << 20;  // lower, but fixed when the sandbox was made
  CHECK(pool_refusal(pooled, call).find("limit other than") != std::string::npos);
  call = pooled;
  call.image = "busybox";
  CHECK(pool_refusal(pooled, call).find("image") != std::string::npos);
  call = pooled;
  call.network.allow = {"example.com"};
  CHECK(pool_refusal(pooled, call).find("network") != std::string::npos);
  call = pooled;
  call.binds.push_back({"/srv", "/srv", false});
  CHECK(pool_refusal(pooled, call).find("mounts") != std::string::npos);
}

TEST_CASE("the server removes only a run cgroup a pooled worker's note names plainly") {
  using sbx::mcp::cgroup_of_note;
  using sbx::mcp::worker_note_ready;
  CHECK(cgroup_of_note(worker_note_ready("/sys/fs/cgroup/sbx/run-1")) == "/sys/fs/cgroup/sbx/run-1");
  CHECK(cgroup_of_note(worker_note_ready("")) == "");  // "ready -": no run cgroup
  CHECK(cgroup_of_note("ready /sys/fs/cgroup/sbx/run-1") == "");  // not a whole line
  CHECK(cgroup_of_note("ready /sys/fs/cgroup/../../etc\n") == "");
  CHECK(cgroup_of_note("ready /sys/fs/cgroup/a/./b\n") == "");
  CHECK(cgroup_of_note("ready /sys/fs/cgroup/a//b\n") == "");
  CHECK(cgroup_of_note("ready /sys/fs/cgroup/\n") == "");  // never the root itself
  CHECK(cgroup_of_note("ready /tmp/x\n") == "");
  CHECK(cgroup_of_note(sbx::mcp::worker_note_failed("bind source missing\n")) == "");
  CHECK(sbx::mcp::worker_note_failed("a\nb").find('\n') == sbx::mcp::worker_note_failed("a\nb").size() - 1);
}

TEST_CASE("a call's extra files: one rule for a cold and a pooled call (plain_relative_path)") {
  for (const char* ok : {"a", "a/b", "lib/x.py", "a..b", "..a", ".hidden/x"}) {
    CAPTURE(ok);
    CHECK(plain_relative_path(ok));
  }
  for (const char* bad : {"", "/a", "a/", "a//b", "a/./b", ".", "./a", "a/.", "..", "a/../b", "a/.."}) {
    CAPTURE(bad);
    CHECK_FALSE(plain_relative_path(bad));
  }
  CHECK_FALSE(plain_relative_path(std::string(256, 'n')));
  CHECK(plain_relative_path(std::string(255, 'n')));
  CHECK_FALSE(plain_relative_path(std::string("a\0b", 3)));
  // A pooled job holds the request's files plus the code and the input, never more.
  PoolJob job;
  job.argv = {"/bin/sh"};
  for (std::size_t i = 0; i < kMaxRequestFiles + 3; ++i) job.files.push_back({"/code/f" + std::to_string(i), "", 0444});
  CHECK_FALSE(decode_pool_job(encode_pool_job(job)));
  job.files.pop_back();
  CHECK(decode_pool_job(encode_pool_job(job)));
  job.files = {{"/code/a/./b", "", 0444}};
  CHECK_FALSE(decode_pool_job(encode_pool_job(job)));
}

namespace {
struct RecordingLauncher : sbx::mcp::SandboxLauncher {
  std::vector<nlohmann::json> jobs;
  sbx::Result<sbx::mcp::Worker> launch(const nlohmann::json& job) override {
    jobs.push_back(job);
    return sbx::mcp::Worker{};
  }
};
}  // namespace

TEST_CASE("the pool router keys a call by its tool or pack, and runs a call with no pool cold, saying why") {
  using sbx::mcp::PoolRouter;
  CHECK(PoolRouter::key_of({{"tool", "run_code"}, {"request", {{"tool", "pack"}}}}) == "run_code");
  CHECK(PoolRouter::key_of({{"tool", "pack"}, {"dir", "/srv/p"}}) == "pack:/srv/p");
  RecordingLauncher cold;
  PoolRouter router(cold);
  router.unpooled("pack:/srv/s", "pack s is given secrets");
  CHECK(router.next_tick_ms() == -1);  // no pool: nothing due
  REQUIRE(router.launch({{"tool", "pack"}, {"dir", "/srv/s"}}));
  REQUIRE(router.launch({{"tool", "pack"}, {"dir", "/srv/other"}}));
  REQUIRE(cold.jobs.size() == 2);
  CHECK(cold.jobs[0]["pool"] == nlohmann::json{{"hit", false}, {"reason", "pack s is given secrets"}});
  CHECK(cold.jobs[1]["pool"]["reason"] == "no pool serves this tool");
  CHECK(cold.jobs[1]["dir"] == "/srv/other");
}
