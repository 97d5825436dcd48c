#include <doctest/doctest.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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

TEST_CASE("ledger_durable_size: the ledger's whole lines once synced, 0 without one, an error for a non-file") {
  TempLedger t;
  auto none = sbx::ledger_durable_size(t.dirs);
  REQUIRE(none.ok());
  CHECK(none->size == 0);
  REQUIRE(sbx::ledger_append(t.dirs, "r1", rec("r1")).ok());
  REQUIRE(sbx::ledger_append(t.dirs, "r2", rec("r2")).ok());
  auto two = sbx::ledger_durable_size(t.dirs);
  REQUIRE(two.ok());
  CHECK(two->size == t.text().size());
  struct stat st;
  REQUIRE(::stat(sbx::ledger_path(t.dirs).c_str(), &st) == 0);
  CHECK(two->ino == static_cast<std::uint64_t>(st.st_ino));
  // A torn tail is not counted: the next append cuts it and writes its own line there, which may
  // still be syncing when a reader sees it whole.
  std::ofstream(sbx::ledger_path(t.dirs), std::ios::binary | std::ios::app) << "{\"record\":{";
  auto torn = sbx::ledger_durable_size(t.dirs);
  REQUIRE(torn.ok());
  CHECK(torn->size == two->size);
  // A scan pinned to that file reads nothing of another one (a prune replaced it since).
  std::size_t lines = 0;
  auto count = [&lines](const sbx::LedgerLine&) { return ++lines > 0; };
  REQUIRE(sbx::scan_ledger(t.dirs, count, nullptr, 0, 1, nullptr, 0, nullptr, &*torn).ok());
  CHECK(lines == 2);
  sbx::DurableLedger other = *torn;
  other.ino += 1;
  lines = 0;
  REQUIRE(sbx::scan_ledger(t.dirs, count, nullptr, 0, 1, nullptr, 0, nullptr, &other).ok());
  CHECK(lines == 0);
  REQUIRE(::unlink(sbx::ledger_path(t.dirs).c_str()) == 0);
  REQUIRE(::mkfifo(sbx::ledger_path(t.dirs).c_str(), 0600) == 0);
  auto fifo = sbx::ledger_durable_size(t.dirs);  // O_RDONLY on a FIFO would wait for a writer
  CHECK_FALSE(fifo.ok());
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

namespace {

// A ledger line as an append writes it, made here so that its record may be of any size (an
// append of a record over the bound is refused by the writer).
std::string make_line(std::uint64_t seq, const std::string& id, const std::string& prev, const std::string& record,
                      std::string* hash = nullptr) {
  std::string h = sbx::ledger_hash(seq, id, prev, record);
  if (hash) *hash = h;
  return "{\"record\":" + record + ",\"seq\":" + std::to_string(seq) + ",\"run_id\":\"" + id + "\",\"prev\":\"" + prev +
         "\",\"hash\":\"" + h + "\"}\n";
}

// A record of about `bytes` bytes: one long string member.
std::string big_rec(const std::string& id, std::size_t bytes) {
  return R"({"run_id":")" + id + R"(","pad":")" + std::string(bytes, 'x') + R"(","schema":"sbx.trace/v1"})";
}

struct Scanned {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> lines;  // line_no, offset
  std::vector<sbx::OversizeLine> over;
  std::vector<std::string> over_ids;
  std::uint64_t torn = 0;
};

Scanned scan(const sbx::Dirs& dirs, std::size_t max_line) {
  Scanned s;
  auto st = sbx::scan_ledger(
      dirs,
      [&](const sbx::LedgerLine& l) {
        s.lines.emplace_back(l.line_no, l.offset);
        return true;
      },
      &s.torn, 0, 1,
      [&](const sbx::OversizeLine& l) {
        CHECK(l.tail.size() <= sbx::kLedgerTailRead);
        auto e = sbx::parse_ledger_tail(l.tail);
        s.over_ids.push_back(e ? e->run_id : "?");
        s.over.push_back(l);
        return true;
      },
      max_line);
  REQUIRE(st.ok());
  return s;
}

}  // namespace

TEST_CASE("the scanner streams past a line over the bound and reads every other line") {
  TempLedger t;
  REQUIRE(::mkdir(t.dirs.traces.c_str(), 0700) == 0);
  std::string h1, h2, h3;
  std::string l1 = make_line(1, "r1", std::string(64, '0'), rec("r1"), &h1);
  // 3 MiB: over the test's bound of 4096 bytes by far more than the scanner's 1 MiB read, so that
  // it is skipped chunk by chunk, keeping only its last bytes.
  std::string l2 = make_line(2, "r2", h1, big_rec("r2", 3 << 20), &h2);
  std::string l3 = make_line(3, "r3", h2, rec("r3"), &h3);
  // 6000 bytes: over the bound, but whole within one read.
  std::string l4 = make_line(4, "r4", h3, big_rec("r4", 6000));
  std::string l5 = "{\"record\":{},\"seq\":9}";  // not a ledger line: passed on, for the reader to judge
  t.write(l1 + l2 + l3 + l4 + l5 + "\n");
  auto s = scan(t.dirs, 4096);
  CHECK(s.lines == std::vector<std::pair<std::uint64_t, std::uint64_t>>{
                       {1, 0}, {3, l1.size() + l2.size()}, {5, l1.size() + l2.size() + l3.size() + l4.size()}});
  REQUIRE(s.over.size() == 2);
  CHECK(s.over[0].line_no == 2);
  CHECK(s.over[0].offset == l1.size());
  CHECK(s.over[0].size == l2.size() - 1);
  CHECK(s.over[1].line_no == 4);
  CHECK(s.over[1].offset == l1.size() + l2.size() + l3.size());
  CHECK(s.over[1].size == l4.size() - 1);
  CHECK(s.over_ids == std::vector<std::string>{"r2", "r4"});
  CHECK(s.torn == 0);
  CHECK(sbx::describe_oversize(s.over[0]).find("at byte " + std::to_string(l1.size()) + " is " + std::to_string(l2.size() - 1) + " bytes") != std::string::npos);

  // An unfinished line over the bound at the end: a torn tail of its full size, not a line.
  t.write(l1 + l2.substr(0, l2.size() - 1));
  s = scan(t.dirs, 4096);
  CHECK(s.lines.size() == 1);
  CHECK(s.over.empty());
  CHECK(s.torn == l2.size() - 1);

  // Resuming at a line's offset, after a skipped line, numbers the lines on.
  t.write(l1 + l2 + l3);
  Scanned r;
  REQUIRE(sbx::scan_ledger(
              t.dirs, [&](const sbx::LedgerLine& l) { r.lines.emplace_back(l.line_no, l.offset); return true; }, nullptr,
              l1.size() + l2.size(), 3, nullptr, 4096)
              .ok());
  CHECK(r.lines == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{3, l1.size() + l2.size()}});

  // Without an oversize callback the scan warns and goes on.
  std::uint64_t n = 0;
  REQUIRE(sbx::scan_ledger(t.dirs, [&](const sbx::LedgerLine&) { return ++n, true; }, nullptr, 0, 1, nullptr, 4096).ok());
  CHECK(n == 2);
  CHECK_FALSE(sbx::parse_ledger_tail("no envelope here").ok());
}

TEST_CASE("a line over the real bound: verify fails naming it and checks the rest; readers and appends go on") {
  TempLedger t;
  REQUIRE(::mkdir(t.dirs.traces.c_str(), 0700) == 0);
  std::string h1, h2;
  std::string l1 = make_line(1, "r1", std::string(64, '0'), rec("r1"), &h1);
  std::string l2 = make_line(2, "r2", h1, big_rec("r2", sbx::kMaxLedgerLine + 1000), &h2);
  std::string l3 = make_line(3, "r3", h2, rec("r3"));
  t.write(l1 + l2 + l3);
  const std::size_t l2_size = l2.size() - 1;
  l2 = {};  // 64 MiB, no longer needed
  auto v = sbx::verify_ledger(t.dirs);
  REQUIRE(v.ok());
  CHECK_FALSE(v->intact);
  CHECK(v->oversize_lines == 1);
  CHECK(v->records == 2);  // r1 and r3: the chain goes on through r2's envelope
  CHECK(v->head_run_id == "r3");
  CHECK(v->problem.find("line 2 (run r2, seq 2) after seq 1 (run r1): at byte " + std::to_string(l1.size())) != std::string::npos);
  CHECK(v->problem.find("over the " + std::to_string(sbx::kMaxLedgerLine) + "-byte bound") != std::string::npos);
  CHECK(v->problem.find("; then") == std::string::npos);

  auto line = sbx::read_ledger_line(t.dirs, l1.size());
  REQUIRE_FALSE(line.ok());
  CHECK(line.error().message.find("over the") != std::string::npos);
  CHECK(line.error().message.find(" is " + std::to_string(l2_size) + " bytes") != std::string::npos);  // measured, not read
  CHECK(sbx::read_ledger_line(t.dirs, 0).ok());

  auto s = scan(t.dirs, 0);
  CHECK(s.lines.size() == 2);
  REQUIRE(s.over.size() == 1);
  CHECK(s.over_ids[0] == "r2");

  // An append after it chains on; verify still names line 2 and checks r4 too.
  auto a = sbx::ledger_append(t.dirs, "r4", rec("r4"));
  REQUIRE(a.ok());
  CHECK(a->seq == 4);
  v = sbx::verify_ledger(t.dirs);
  REQUIRE(v.ok());
  CHECK(v->records == 3);
  CHECK(v->head_seq == 4);

  // A break after the skipped line is reported too.
  std::string text = t.text();
  auto at = text.rfind("\"r4\"");
  text.replace(at, 4, "\"rX\"");
  t.write(text);
  v = sbx::verify_ledger(t.dirs);
  REQUIRE(v.ok());
  CHECK(v->problem.find("; then line 4 (run rX), seq 4: edited") != std::string::npos);
}

TEST_CASE("verify_ledger with find_run: the run's line as the walk checked it, and how many lines name it") {
  TempLedger t;
  for (const char* id : {"r1", "r2", "r3"}) REQUIRE(sbx::ledger_append(t.dirs, id, rec(id)).ok());
  auto v = sbx::verify_ledger(t.dirs, std::nullopt, nullptr, "r2");
  REQUIRE(v.ok());
  CHECK(v->intact);
  CHECK(v->run_lines == 1);
  REQUIRE(v->run_line.has_value());
  CHECK(v->run_line->seq == 2);
  CHECK(v->run_line->record == rec("r2"));
  v = sbx::verify_ledger(t.dirs, std::nullopt, nullptr, "r9");
  REQUIRE(v.ok());
  CHECK(v->run_lines == 0);
  CHECK_FALSE(v->run_line.has_value());
  const std::string good = t.text();
  // The line keeps its envelope (seq, prev, the hash and signature of the record it had) but holds
  // another record body: what a reader that trusted the envelope would act on, under a valid signature.
  std::string forged = good;
  const std::string body = rec("r2"), evil = R"({"run_id":"r2","schema":"sbx.trace/v1","invocation":{"spec":{"binds":["/"]}}})";
  forged.replace(forged.find(body), body.size(), evil);
  t.write(forged);
  v = sbx::verify_ledger(t.dirs, std::nullopt, nullptr, "r2");
  REQUIRE(v.ok());
  CHECK_FALSE(v->intact);
  CHECK(v->problem.find("edited") != std::string::npos);
  CHECK_FALSE(v->run_line.has_value());
  // The run recorded again, chain intact: two lines name it, and a reader is told so.
  t.write(good);
  REQUIRE(sbx::ledger_append(t.dirs, "r2", rec("r2")).ok());
  v = sbx::verify_ledger(t.dirs, std::nullopt, nullptr, "r2");
  REQUIRE(v.ok());
  CHECK(v->intact);
  CHECK(v->run_lines == 2);
}

TEST_CASE("append refuses a record over the bound every reader takes, and the ledger stays readable") {
  TempLedger t;
  REQUIRE(sbx::ledger_append(t.dirs, "r1", rec("r1")).ok());
  std::string head = R"({"run_id":"big","pad":")", tail = "\"}";
  std::string big = head + std::string(sbx::kMaxTraceBytes + 1 - head.size() - tail.size(), 'a') + tail;
  REQUIRE(big.size() == sbx::kMaxTraceBytes + 1);
  auto r = sbx::ledger_append(t.dirs, "big", big);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("bound") != std::string::npos);
  REQUIRE(sbx::ledger_append(t.dirs, "r2", rec("r2")).ok());
  auto v = sbx::verify_ledger(t.dirs);
  REQUIRE(v.ok());
  CHECK(v->intact);
  CHECK(v->records == 2);
  CHECK(v->oversize_lines == 0);
}

// The lock covers the read of the last line and the write of the next; the sync comes after it
// (group commit, ledger_append). Appenders in several processes at once must still leave one
// unbroken chain, every record once, each append's seq the one its line carries.
TEST_CASE("ledger appends from concurrent processes leave one intact chain") {
  TempLedger t;
  constexpr int kProcs = 4, kEach = 60;
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int bad = 0;
      for (int i = 0; i < kEach; ++i) {
        std::string id = "p";
        id += std::to_string(p);
        id += '-';
        id += std::to_string(i);
        auto r = sbx::ledger_append(t.dirs, id, rec(id));
        if (!r.ok() || r->seq == 0) ++bad;
      }
      ::_exit(bad == 0 ? 0 : 1);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  auto report = sbx::verify_ledger(t.dirs);
  REQUIRE(report.ok());
  CHECK(report->intact);
  CHECK(report->records == kProcs * kEach);
  CHECK(report->head_seq == kProcs * kEach);
  std::string text = t.text();
  for (int p = 0; p < kProcs; ++p)
    for (int i = 0; i < kEach; ++i) {
      std::string id = "\"run_id\":\"p";
      id += std::to_string(p);
      id += '-';
      id += std::to_string(i);
      id += '"';
      CHECK(text.find(id) != std::string::npos);
    }
}
