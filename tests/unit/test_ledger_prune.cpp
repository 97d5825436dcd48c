#include <doctest/doctest.h>

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "runtime/record/ledger_prune.hpp"
#include "runtime/record/trace_index.hpp"
#include "runtime/record/trace_ledger.hpp"

namespace {

struct TempLedger {
  std::string root;
  sbx::Dirs dirs;
  TempLedger() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/sbx-prune-XXXXXX";
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
  void write(const std::string& t) const {
    std::ofstream(sbx::ledger_path(dirs), std::ios::binary | std::ios::trunc) << t;
  }
  // Records r1..rN, started a day apart from 2026-12-01.
  void fill(int n) const {
    for (int i = 1; i <= n; ++i) {
      std::string id = "r";
      id += std::to_string(i);
      char day[3];
      std::snprintf(day, sizeof day, "%02d", i);
      std::string rec = R"({"run_id":")";
      rec.append(id).append(R"(","schema":"sbx.trace/v1","started_at":"2026-12-)").append(day);
      rec.append(R"(T08:00:00.000Z"})");
      REQUIRE(sbx::ledger_append(dirs, id, rec).ok());
    }
  }
};

sbx::PruneRequest keep(std::uint64_t n) {
  sbx::PruneRequest r;
  r.keep = n;
  r.now = "2026-12-20T00:00:00.000Z";
  return r;
}

std::string verify_problem(const sbx::Dirs& dirs) {
  auto v = sbx::verify_ledger(dirs);
  REQUIRE(v.ok());
  CHECK_FALSE(v->intact);
  return v->problem;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("prune --keep: an anchor in place of the oldest records; verify starts there; appends go on") {
  TempLedger t;
  t.fill(5);
  REQUIRE(sbx::rebuild_index(t.dirs).ok());
  auto before = sbx::verify_ledger(t.dirs);
  REQUIRE(before.ok());
  auto r = sbx::prune_ledger(t.dirs, keep(2));
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().describe()));
  CHECK(r->pruned == 3);
  CHECK(r->kept == 2);
  CHECK(r->through_seq == 3);
  CHECK(r->through_run_id == "r3");
  CHECK(r->bytes_after < r->bytes_before);
  std::string text = t.text();
  CHECK(text.starts_with("{\"pruned\":\"2026-12-20T00:00:00.000Z\",\"seq\":3,\"run_id\":\"r3\""));
  CHECK_FALSE(has(text, "\"r1\""));
  auto v = sbx::verify_ledger(t.dirs);
  REQUIRE(v.ok());
  CHECK_MESSAGE(v->intact, v->problem);
  CHECK(v->pruned_through == 3);
  CHECK(v->records == 2);
  CHECK(v->head_seq == 5);
  CHECK(v->head_hash == before->head_hash);  // the kept lines are the same bytes
  // The index lost the pruned rows (it held the old offsets).
  auto ids = sbx::index_run_ids(t.dirs);
  REQUIRE(ids.ok());
  REQUIRE(ids->size() == 2);
  CHECK((*ids)[0].run_id == "r4");
  // The chain goes on.
  auto next = sbx::ledger_append(t.dirs, "r6", R"({"run_id":"r6"})");
  REQUIRE(next.ok());
  CHECK(next->seq == 6);
  auto after = sbx::verify_ledger(t.dirs);
  REQUIRE(after.ok());
  CHECK(after->intact);
  CHECK(after->records == 3);
  // A second prune replaces the anchor; one with nothing to prune changes nothing.
  auto again = sbx::prune_ledger(t.dirs, keep(1));
  REQUIRE(again.ok());
  CHECK(again->pruned == 2);
  CHECK(again->pruned_before == 3);
  CHECK(again->through_seq == 5);
  std::string now = t.text();
  auto none = sbx::prune_ledger(t.dirs, keep(1));
  REQUIRE(none.ok());
  CHECK(none->pruned == 0);
  CHECK(none->kept == 1);
  CHECK(t.text() == now);
}

TEST_CASE("prune --keep 0: the anchor alone is the head, and the next append chains to it") {
  TempLedger t;
  t.fill(2);
  auto head = sbx::ledger_head(t.dirs);
  REQUIRE(head.ok());
  REQUIRE(sbx::prune_ledger(t.dirs, keep(0)).ok());
  auto v = sbx::verify_ledger(t.dirs);
  REQUIRE(v.ok());
  CHECK(v->intact);
  CHECK(v->records == 0);
  CHECK(v->head_seq == 2);
  auto now = sbx::ledger_head(t.dirs);
  REQUIRE(now.ok());
  CHECK(now->seq == 2);
  CHECK(now->hash == head->hash);
  auto next = sbx::ledger_append(t.dirs, "r3", R"({"run_id":"r3"})");
  REQUIRE(next.ok());
  CHECK(next->seq == 3);
  auto after = sbx::verify_ledger(t.dirs);
  REQUIRE(after.ok());
  CHECK(after->intact);
}

TEST_CASE("prune --before: the prefix of records started before the bound; with --keep, both must allow it") {
  TempLedger t;
  t.fill(6);
  sbx::PruneRequest r;
  r.before = "2026-12-04";
  r.now = "2026-12-20T00:00:00.000Z";
  r.dry_run = true;
  std::string text = t.text();
  auto dry = sbx::prune_ledger(t.dirs, r);
  REQUIRE(dry.ok());
  CHECK(dry->pruned == 3);
  CHECK(t.text() == text);  // a dry run changes nothing
  r.dry_run = false;
  r.keep = 4;  // keeps r3 too
  auto both = sbx::prune_ledger(t.dirs, r);
  REQUIRE(both.ok());
  CHECK(both->pruned == 2);
  CHECK(both->through_run_id == "r2");
  CHECK(both->bytes_after == t.text().size());
}

TEST_CASE("around the anchor, edits and deletions are still found; an anchored head that was pruned is not intact") {
  TempLedger t;
  t.fill(5);
  auto old_head = sbx::ledger_head(t.dirs);
  REQUIRE(sbx::prune_ledger(t.dirs, keep(2)).ok());
  const std::string good = t.text();
  const auto first_nl = good.find('\n');
  const std::string anchor = good.substr(0, first_nl + 1);
  const std::string rest = good.substr(first_nl + 1);
  const std::string line4 = rest.substr(0, rest.find('\n') + 1);
  const std::string line5 = rest.substr(line4.size());

  // The first kept record deleted: missing right after the anchor.
  t.write(anchor + line5);
  CHECK(has(verify_problem(t.dirs), "record seq 4 is missing"));
  // The first kept record edited.
  std::string edited = line4;
  edited.replace(edited.find("\"r4\""), 4, "\"rX\"");
  t.write(anchor + edited + line5);
  CHECK(has(verify_problem(t.dirs), "edited"));
  // The anchor's hash changed: the first kept record no longer chains to it.
  std::string forged = anchor;
  auto h = forged.find("\"hash\":\"") + 8;
  forged[h] = forged[h] == '0' ? '1' : '0';
  t.write(forged + rest);
  CHECK(has(verify_problem(t.dirs), "a record before it was replaced"));
  // An anchor anywhere but first is not a ledger line.
  t.write(good + anchor);
  CHECK(has(verify_problem(t.dirs), "not a ledger line"));
  // The anchor's seq changed: the first kept record is then out of sequence.
  std::string moved = anchor;
  moved.replace(moved.find("\"seq\":3"), 7, "\"seq\":2");
  t.write(moved + rest);
  CHECK(has(verify_problem(t.dirs), "seq 4 where 3 was expected"));

  // An anchored head from before the prune cannot be checked any more.
  t.write(good);
  auto v = sbx::verify_ledger(t.dirs, sbx::LedgerAnchor{1, std::string(64, 'a')});
  REQUIRE(v.ok());
  CHECK_FALSE(v->intact);
  CHECK(has(v->problem, "was pruned"));
  // The pruned-through head itself still is: its hash is the anchor's.
  auto at = sbx::verify_ledger(t.dirs, sbx::LedgerAnchor{old_head->seq, old_head->hash});
  REQUIRE(at.ok());
  CHECK(at->intact);
}

TEST_CASE("prune refuses a ledger that does not verify, and an interrupted prune's leftover is harmless") {
  TempLedger t;
  t.fill(3);
  std::string good = t.text();
  std::string edited = good;
  edited.replace(edited.find("\"r2\""), 4, "\"rX\"");
  t.write(edited);
  auto r = sbx::prune_ledger(t.dirs, keep(1));
  REQUIRE_FALSE(r.ok());
  CHECK(has(r.error().message, "does not verify"));
  CHECK(t.text() == edited);

  // A prune killed before its rename leaves its temporary file and the ledger as it was.
  t.write(good);
  std::ofstream(t.dirs.traces + "/ledger.jsonl.prune-tmp") << "half a ledger";
  auto v = sbx::verify_ledger(t.dirs);
  REQUIRE(v.ok());
  CHECK(v->intact);
  REQUIRE(sbx::prune_ledger(t.dirs, keep(1)).ok());
  CHECK(::access((t.dirs.traces + "/ledger.jsonl.prune-tmp").c_str(), F_OK) != 0);
  auto after = sbx::verify_ledger(t.dirs);
  REQUIRE(after.ok());
  CHECK(after->intact);
}

TEST_CASE("an append waiting on the lock while the ledger is replaced appends to the new file") {
  TempLedger t;
  t.fill(2);
  std::thread appender;
  auto st = sbx::with_ledger_locked(t.dirs, [&](int) -> sbx::Status {
    appender = std::thread([&] { CHECK(sbx::ledger_append(t.dirs, "r3", R"({"run_id":"r3"})").ok()); });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the append now waits on the lock
    std::string tmp = t.dirs.traces + "/replacement";
    std::ofstream(tmp, std::ios::binary) << t.text();
    REQUIRE(::rename(tmp.c_str(), sbx::ledger_path(t.dirs).c_str()) == 0);
    return {};
  });
  appender.join();
  REQUIRE(st.ok());
  CHECK(has(t.text(), "\"run_id\":\"r3\""));
  auto v = sbx::verify_ledger(t.dirs);
  REQUIRE(v.ok());
  CHECK(v->intact);
  CHECK(v->records == 3);
}
