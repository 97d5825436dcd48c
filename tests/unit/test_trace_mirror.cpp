// The trace database's parts that need no server (the rest is tests/integration/test_trace_db.py,
// against a real PostgreSQL): URL checks, identifiers, and verify_ledger_lines over rows put back
// into ledger lines, as the database's verify does.
#include <doctest/doctest.h>

#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "runtime/model/spec.hpp"
#include "runtime/record/pg_client.hpp"
#include "runtime/record/trace_ledger.hpp"
#include "runtime/record/trace_mirror.hpp"

namespace {

// A chain of n records as the database would hold them: each entry's record and envelope.
std::vector<sbx::LedgerEntry> chain(int n, std::vector<std::string>& records) {
  std::vector<sbx::LedgerEntry> out;
  std::string prev(64, '0');
  records.reserve(static_cast<std::size_t>(n));
  for (int i = 1; i <= n; ++i) {
    std::string id = "run-" + std::to_string(i);
    records.push_back(R"({"run_id":")" + id + R"(","schema":"sbx.trace/v1"})");
    sbx::LedgerEntry e;
    e.seq = static_cast<std::uint64_t>(i);
    e.run_id = id;
    e.prev = prev;
    e.hash = sbx::ledger_hash(e.seq, id, prev, records.back());
    e.record = records.back();
    prev = e.hash;
    out.push_back(e);
  }
  return out;
}

sbx::LedgerVerifyReport verify_rows(const std::vector<sbx::LedgerEntry>& rows) {
  auto r = sbx::verify_ledger_lines(
      [&](const sbx::LedgerSourceSink& s) -> sbx::Status {
        std::uint64_t n = 0;
        for (auto& e : rows) {
          std::string text = sbx::ledger_line(e);
          if (!s.line(sbx::LedgerLine{++n, 0, text})) break;
        }
        return {};
      },
      std::nullopt, nullptr);
  REQUIRE(r.ok());
  return *r;
}

}  // namespace

TEST_CASE("trace database URLs: libpq's forms are taken; a password never is") {
  CHECK(sbx::check_trace_db_url("postgresql://sbx@db.example:5432/traces") == "");
  CHECK(sbx::check_trace_db_url("postgresql://sbx@/traces?host=/run/postgresql&sslmode=verify-full") == "");
  CHECK(sbx::check_trace_db_url("host=db dbname=traces user=sbx passfile=/etc/sbx/pgpass") == "");
  auto inline_pw = sbx::check_trace_db_url("postgresql://sbx:hunter2@db/traces");
  CHECK(inline_pw.find("PGPASSWORD") != std::string::npos);
  CHECK(inline_pw.find("hunter2") == std::string::npos);
  CHECK(sbx::check_trace_db_url("host=db password=hunter2").find("password") != std::string::npos);
  CHECK(sbx::check_trace_db_url("postgresql://db/traces?password=x").find("password") != std::string::npos);
  // A client key's passphrase is a secret too.
  auto sslpw = sbx::check_trace_db_url("host=/nowhere sslpassword=hunter2 dbname=x");
  CHECK(sslpw.find("sslpassword") != std::string::npos);
  CHECK(sslpw.find("hunter2") == std::string::npos);
  CHECK(sbx::check_trace_db_url("not a url").find("not a PostgreSQL connection URI") != std::string::npos);
  CHECK(sbx::check_trace_db_url("").find("empty") != std::string::npos);
  CHECK(sbx::check_trace_db_url(std::string(5000, 'x')).find("4096") != std::string::npos);
}

TEST_CASE("schema names: one per store, quoted as identifiers") {
  CHECK(sbx::trace_db_schema("") == "sbx");
  CHECK(sbx::trace_db_schema("acme-corp") == "sbx_tenant_acme-corp");
  CHECK(sbx::sql_ident("sbx_tenant_acme-corp") == "\"sbx_tenant_acme-corp\"");
  CHECK(sbx::sql_ident("a\"b") == "\"a\"\"b\"");
  // PostgreSQL cuts identifiers at 63 bytes, silently: two 64-byte tenant names that share their
  // first 52 bytes must not share a schema.
  std::string a = std::string(60, 'x') + "aaaa", b = std::string(60, 'x') + "bbbb";
  CHECK(sbx::trace_db_schema(a).size() <= 63);
  CHECK(sbx::trace_db_schema(b).size() <= 63);
  CHECK(sbx::trace_db_schema(a) != sbx::trace_db_schema(b));
  CHECK(sbx::trace_db_schema(std::string(52, 'y')) == "sbx_tenant_" + std::string(52, 'y'));
}

TEST_CASE("--trace-db replaces the profile's trace_db; the profile key parses and is bounded") {
  CHECK(sbx::effective_trace_db("postgresql://p@/x") == "postgresql://p@/x");
  sbx::set_trace_db_flag("postgresql://flag@/x");
  CHECK(sbx::effective_trace_db("postgresql://p@/x") == "postgresql://flag@/x");
  CHECK(sbx::effective_trace_db("") == "postgresql://flag@/x");
  sbx::set_trace_db_flag("");
  auto spec = sbx::spec_from_json(nlohmann::json{{"trace_db", "postgresql://sbx@/traces"}}, "test");
  REQUIRE(spec.ok());
  CHECK(spec->trace_db == "postgresql://sbx@/traces");
  CHECK(sbx::spec_to_json(*spec)["trace_db"] == "postgresql://sbx@/traces");
  CHECK_FALSE(sbx::spec_from_json(nlohmann::json{{"trace_db", std::string(5000, 'x')}}, "test").ok());
  CHECK_FALSE(sbx::spec_from_json(nlohmann::json{{"trace_db", 3}}, "test").ok());
}

TEST_CASE("rows put back into ledger lines verify as the file's lines do, with the same verdicts") {
  std::vector<std::string> records;
  auto rows = chain(4, records);
  // ledger_line is the line ledger_append writes: it parses back to the same parts.
  const std::string line = sbx::ledger_line(rows[1]);
  auto parsed = sbx::parse_ledger_line(line);
  REQUIRE(parsed.ok());
  CHECK(parsed->seq == 2);
  CHECK(parsed->hash == rows[1].hash);
  CHECK(parsed->record == records[1]);

  auto ok = verify_rows(rows);
  CHECK(ok.intact);
  CHECK(ok.records == 4);
  CHECK(ok.head_seq == 4);

  SUBCASE("a record edited in place") {
    std::string edited = records[2];
    edited.replace(edited.find("sbx.trace"), 3, "SBX");
    rows[2].record = edited;
    auto r = verify_rows(rows);
    CHECK_FALSE(r.intact);
    CHECK(r.problem.find("seq 3: edited") != std::string::npos);
  }
  SUBCASE("a row deleted") {
    rows.erase(rows.begin() + 1);
    auto r = verify_rows(rows);
    CHECK_FALSE(r.intact);
    CHECK(r.problem.find("record seq 2 is missing") != std::string::npos);
  }
  SUBCASE("a run id in a row that does not make a ledger line (quotes injected)") {
    rows[3].run_id = "x\",\"seq\":1";
    auto r = verify_rows(rows);
    CHECK_FALSE(r.intact);
    CHECK(r.records == 3);
  }
  SUBCASE("a row whose record is not the run its envelope names") {
    rows[0].run_id = "run-other";
    rows[0].hash = sbx::ledger_hash(1, "run-other", rows[0].prev, rows[0].record);
    auto r = verify_rows(rows);
    CHECK_FALSE(r.intact);
  }
}

TEST_CASE("a store's node name: made once, kept, and a different SBX_NODE is refused") {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/sbx-node-XXXXXX";
  REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
  sbx::Dirs d;
  d.state = tmpl;
  d.traces = tmpl + "/traces";
  ::unsetenv("SBX_NODE");
  auto first = sbx::ledger_node_name(d, true);
  REQUIRE(first.ok());
  CHECK(first->size() > 9);
  CHECK(sbx::ledger_node_name(d, true).value() == *first);  // kept
  ::setenv("SBX_NODE", "other-node", 1);
  auto clash = sbx::ledger_node_name(d, true);
  CHECK_FALSE(clash.ok());
  CHECK(clash.error().message.find("ships as '" + *first + "'") != std::string::npos);
  ::setenv("SBX_NODE", "bad/name", 1);
  CHECK_FALSE(sbx::ledger_node_name(d, true).ok());
  ::unsetenv("SBX_NODE");
  std::system(("rm -rf '" + tmpl + "'").c_str());
}
