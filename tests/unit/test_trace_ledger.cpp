#include <doctest/doctest.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "runtime/record/trace_ledger.hpp"

namespace {

struct TempLedger {
  std::string root;
  sbx::Dirs dirs;
  TempLedger() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/sbx-ledger-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    root = tmpl;
    dirs.state = root;
    dirs.traces = root + "/traces";
  }
  ~TempLedger() { std::system(("rm -rf '" + root + "'").c_str()); }
  std::string text() const {
    std::ifstream f(sbx::ledger_path(dirs), std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  void write(const std::string& t) const { std::ofstream(sbx::ledger_path(dirs), std::ios::binary | std::ios::trunc) << t; }
};

std::string rec(const std::string& id) { return R"({"run_id":")" + id + R"(","schema":"sbx.trace/v1"})"; }

}  // namespace

TEST_CASE("ledger lines round-trip and the envelope is strict") {
  TempLedger t;
  REQUIRE(sbx::ledger_append(t.dirs, "r1", rec("r1")).ok());
  auto second = sbx::ledger_append(t.dirs, "r2", rec("r2"));
  REQUIRE(second.ok());
  CHECK(second->seq == 2);
  std::string text = t.text();
  std::string line2 = text.substr(text.find('\n') + 1);
  line2.pop_back();
  auto e = sbx::parse_ledger_line(line2);
  REQUIRE(e.ok());
  CHECK(e->seq == 2);
  CHECK(e->run_id == "r2");
  CHECK(std::string(e->record) == rec("r2"));
  CHECK(e->hash == second->hash);
  CHECK(sbx::ledger_hash(e->seq, e->run_id, e->prev, e->record) == e->hash);

  // Hostile envelopes: each refused with a reason, never a crash.
  for (const char* bad : {"", "{", "{\"record\":{}}", "{\"record\":{},\"seq\":01,\"run_id\":\"a\",\"prev\":\"\",\"hash\":\"\"}",
                          "{\"record\":{},\"seq\":99999999999999999999,\"run_id\":\"a\"}",
                          "{\"record\":{},\"seq\":1,\"run_id\":\"../x\",\"prev\":\"\",\"hash\":\"\"}",
                          "{\"record\":{},\"seq\":1,\"run_id\":\"a\",\"prev\":\"00\",\"hash\":\"00\"}"}) {
    auto r = sbx::parse_ledger_line(bad);
    CHECK_FALSE(r.ok());
    if (!r.ok()) CHECK(r.error().message.find("not a ledger line") != std::string::npos);
  }
  std::string zeros(64, '0');
  std::string trailing = "{\"record\":{},\"seq\":1,\"run_id\":\"a\",\"prev\":\"" + zeros + "\",\"hash\":\"" + zeros + "\"}x";
  CHECK_FALSE(sbx::parse_ledger_line(trailing).ok());
  CHECK_FALSE(sbx::ledger_run_id_ok(".hidden"));
  CHECK_FALSE(sbx::ledger_run_id_ok("a\"b"));
  CHECK_FALSE(sbx::ledger_run_id_ok(std::string(129, 'a')));
  CHECK(sbx::ledger_run_id_ok("20261130T075512.123Z-3fa9c1d2"));
}

TEST_CASE("append refuses multi-line records and bad run ids; the ledger is 0600") {
  TempLedger t;
  CHECK_FALSE(sbx::ledger_append(t.dirs, "r1", "{\n}").ok());
  CHECK_FALSE(sbx::ledger_append(t.dirs, "r1", "[]").ok());
  CHECK_FALSE(sbx::ledger_append(t.dirs, "a/b", rec("a")).ok());
  REQUIRE(sbx::ledger_append(t.dirs, "r1", rec("r1")).ok());
  struct stat st;
  REQUIRE(::stat(sbx::ledger_path(t.dirs).c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
}

TEST_CASE("verify names the break; a torn tail is cut by the next append and noted") {
  TempLedger t;
  for (const char* id : {"r1", "r2", "r3"}) REQUIRE(sbx::ledger_append(t.dirs, id, rec(id)).ok());
  auto ok = sbx::verify_ledger(t.dirs);
  REQUIRE(ok.ok());
  CHECK(ok->intact);
  CHECK(ok->records == 3);
  auto head = sbx::ledger_head(t.dirs);
  REQUIRE(head.ok());
  CHECK(head->seq == 3);
  CHECK(head->hash == ok->head_hash);

  std::string good = t.text();
  t.write(good.substr(0, good.size() - 20));  // the last line, torn
  auto torn = sbx::verify_ledger(t.dirs);
  REQUIRE(torn.ok());
  CHECK_FALSE(torn->intact);
  CHECK(torn->problem.find("torn tail") != std::string::npos);
  CHECK(torn->problem.find("after seq 2 (run r2)") != std::string::npos);
  auto again = sbx::ledger_append(t.dirs, "r4", rec("r4"));
  REQUIRE(again.ok());
  CHECK(again->seq == 3);
  CHECK(again->torn_bytes > 0);
  CHECK(t.text().find("\"ledger_repair\":{\"torn_bytes\":") != std::string::npos);
  auto repaired = sbx::verify_ledger(t.dirs);
  REQUIRE(repaired.ok());
  CHECK(repaired->intact);

  // A record edited in place: the hash no longer matches.
  std::string text = t.text();
  auto at = text.find("\"r2\"");
  text.replace(at, 4, "\"rX\"");
  t.write(text);
  auto edited = sbx::verify_ledger(t.dirs);
  REQUIRE(edited.ok());
  CHECK_FALSE(edited->intact);
  CHECK(edited->problem.find("line 2") != std::string::npos);
  CHECK(edited->problem.find("edited") != std::string::npos);
}

TEST_CASE("an append after a complete line that is not a ledger line is refused") {
  TempLedger t;
  REQUIRE(sbx::ledger_append(t.dirs, "r1", rec("r1")).ok());
  t.write(t.text() + "garbage\n");
  auto r = sbx::ledger_append(t.dirs, "r2", rec("r2"));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("sbx trace verify") != std::string::npos);
}
