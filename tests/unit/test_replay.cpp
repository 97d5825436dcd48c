#include <doctest/doctest.h>

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/image/blob_store.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/typed/replay.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/record/trace_store.hpp"

namespace {
using nlohmann::json;

struct TempState {
  std::string root;
  sbx::Dirs dirs;
  TempState() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/sbx-blobs-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    root = tmpl;
    dirs.state = root + "/state";
    dirs.traces = dirs.state + "/traces";
    dirs.data = root + "/data";
    dirs.images = dirs.data + "/images";
  }
  ~TempState() { std::system(("rm -rf '" + root + "'").c_str()); }
};

void write(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  REQUIRE(f);
  std::fputs(text.c_str(), f);
  std::fclose(f);
}
}  // namespace

TEST_CASE("json_differences names each differing pointer with both values") {
  json a = {{"count", 2}, {"when", "1"}, {"list", {1, 2, 3}}, {"a/b", {{"x~y", true}}}, {"gone", 1}};
  json b = {{"count", 2}, {"when", "2"}, {"list", {1, 5}}, {"a/b", {{"x~y", false}}}, {"new", nullptr}};
  std::size_t omitted = 0;
  auto d = sbx::json_differences(a, b, 50, &omitted);
  std::vector<std::string> where;
  for (auto& x : d) where.push_back(x.where);
  CHECK(where == std::vector<std::string>{"/a~1b/x~0y", "/gone", "/list/1", "/list/2", "/new", "/when"});
  CHECK(d[5].original == "1");
  CHECK(d[5].replay == "2");
  CHECK(omitted == 0);
  // Bounded: the rest is counted, not listed.
  auto two = sbx::json_differences(a, b, 2, &omitted);
  CHECK(two.size() == 2);
  CHECK(omitted == 4);
  CHECK(sbx::json_differences(a, a, 50, nullptr).empty());
  // A value is cut and escaped in its one line.
  sbx::ReplayDifference big{"result", "/x", json(std::string(500, 'a') + "\x1b[2J"), json(1)};
  std::string line = sbx::describe_difference(big, 40);
  CHECK(line.find("\x1b") == std::string::npos);
  CHECK(line.find("...(") != std::string::npos);
  CHECK(line.rfind("result #/x: original \"aaaa", 0) == 0);
}

TEST_CASE("blobs are stored by content, read back checked, and kept trees never follow symlinks") {
  TempState t;
  auto hex = sbx::put_blob(t.dirs, "hello");
  REQUIRE(hex);
  CHECK(*hex == sbx::sha256_hex("hello"));
  CHECK(sbx::blob_path(t.dirs, *hex) == t.dirs.state + "/blobs/sha256/" + hex->substr(0, 2) + "/" + *hex);
  auto again = sbx::put_blob(t.dirs, "hello");
  REQUIRE(again);
  auto back = sbx::get_blob(t.dirs, *hex);
  REQUIRE(back);
  CHECK(*back == "hello");
  // A blob changed on disk is refused.
  std::string p = sbx::blob_path(t.dirs, *hex);
  ::chmod(p.c_str(), 0600);
  write(p, "HELLO");
  CHECK_FALSE(sbx::get_blob(t.dirs, *hex));
  CHECK_FALSE(sbx::get_blob(t.dirs, "../../etc/passwd"));

  std::string tree = t.root + "/tree";
  REQUIRE(sbx::ensure_dir(tree + "/sub", 0755));
  write(tree + "/sub/a", "alpha");
  write(t.root + "/secret", "host secret");
  REQUIRE(::symlink((t.root + "/secret").c_str(), (tree + "/link").c_str()) == 0);
  write(tree + "/big", std::string(100, 'x'));
  sbx::BlobKeeper keeper(t.dirs, 50, nullptr);
  keeper.add_tree("input_file", "input_dir", "input_link", "/in/t", tree);
  keeper.add_file("input_file", "/in/l", tree + "/link");  // a symlink named directly
  json e = keeper.take();
  std::map<std::string, json> by;
  for (auto& x : e) by[x["path"].get<std::string>()] = x;
  CHECK(by["/in/t/sub/a"]["sha256"] == sbx::sha256_hex("alpha"));
  CHECK(by["/in/t/sub"]["role"] == "input_dir");
  CHECK(by["/in/t/link"]["role"] == "input_link");
  CHECK(by["/in/t/link"]["target"] == t.root + "/secret");
  CHECK_FALSE(by["/in/t/link"].contains("sha256"));
  CHECK(by["/in/t/big"]["skipped"].get<std::string>().find("keep ceiling") != std::string::npos);
  CHECK(by["/in/l"].contains("skipped"));
  CHECK_FALSE(sbx::get_blob(t.dirs, sbx::sha256_hex("host secret")));
}

TEST_CASE("gc deletes what no kept record needs and says what it kept and why") {
  TempState t;
  auto needed = sbx::put_blob(t.dirs, "needed");
  auto old_only = sbx::put_blob(t.dirs, "old only");
  auto orphan = sbx::put_blob(t.dirs, "orphan");
  REQUIRE(needed);
  REQUIRE(old_only);
  REQUIRE(orphan);
  struct timespec times[2] = {{std::time(nullptr) - 7200, 0}, {std::time(nullptr) - 7200, 0}};
  REQUIRE(::utimensat(AT_FDCWD, sbx::blob_path(t.dirs, *orphan).c_str(), times, 0) == 0);
  // Not kept by any run in the last hour either (put_blob refreshes a reused blob's mtime, and gc
  // spares what a run kept that recently: it may not be recorded yet).
  REQUIRE(::utimensat(AT_FDCWD, sbx::blob_path(t.dirs, *old_only).c_str(), times, 0) == 0);
  json old_rec = {{"schema", "sbx.trace/v1"}, {"run_id", "20200101T000000.000Z-00000001"}, {"started_at", "2020-01-01T00:00:00.000Z"},
                  {"blobs", {{{"role", "records"}, {"path", "r"}, {"sha256", *old_only}, {"bytes", 8}}}}};
  json new_rec = {{"schema", "sbx.trace/v1"}, {"run_id", "20990101T000000.000Z-00000002"}, {"started_at", "2099-01-01T00:00:00.000Z"},
                  {"blobs", {{{"role", "records"}, {"path", "r"}, {"sha256", *needed}, {"bytes", 6}}}}};
  REQUIRE(sbx::store_trace(t.dirs, "20200101T000000.000Z-00000001", old_rec.dump()));
  REQUIRE(sbx::store_trace(t.dirs, "20990101T000000.000Z-00000002", new_rec.dump()));

  auto dry = sbx::gc_blobs(t.dirs, 30, -1, true);
  REQUIRE(dry);
  CHECK(dry->deleted.size() == 2);
  CHECK(::access(sbx::blob_path(t.dirs, *orphan).c_str(), F_OK) == 0);

  auto rep = sbx::gc_blobs(t.dirs, 30, -1, false);
  REQUIRE(rep);
  REQUIRE(rep->kept.size() == 1);
  CHECK(rep->kept[0].sha256 == *needed);
  CHECK(rep->kept[0].why.find("needed by kept run 20990101T000000.000Z-00000002") == 0);
  CHECK(rep->deleted.size() == 2);
  CHECK(rep->kept_records == 1);
  CHECK(::access(sbx::blob_path(t.dirs, *orphan).c_str(), F_OK) != 0);
  CHECK(::access(sbx::blob_path(t.dirs, *old_only).c_str(), F_OK) != 0);

  // Over --max-bytes the kept record's blob goes too, and says so.
  auto over = sbx::gc_blobs(t.dirs, -1, 0, false);
  REQUIRE(over);
  REQUIRE(over->deleted.size() == 1);
  CHECK(over->deleted[0].needed_by_kept);
  CHECK(over->deleted[0].why.find("can no longer be replayed") != std::string::npos);
}

TEST_CASE("gc spares what a live pin holds, however old, and removes stale pins and killed writers' tmp files") {
  TempState t;
  struct timespec old[2] = {{std::time(nullptr) - 7200, 0}, {std::time(nullptr) - 7200, 0}};
  auto pin = std::make_shared<sbx::BlobPin>();
  auto pinned = sbx::put_blob(t.dirs, "kept by a running sandbox", pin.get());
  auto loose = sbx::put_blob(t.dirs, "kept by nobody");
  REQUIRE(pinned);
  REQUIRE(loose);
  // Both look older than any grace: only the pin can save one.
  REQUIRE(::utimensat(AT_FDCWD, sbx::blob_path(t.dirs, *pinned).c_str(), old, 0) == 0);
  REQUIRE(::utimensat(AT_FDCWD, sbx::blob_path(t.dirs, *loose).c_str(), old, 0) == 0);
  // A pin whose process is gone (nobody holds its flock) and a killed writer's temporary file.
  std::string blobs = t.dirs.state + "/blobs";
  write(blobs + "/pins/pin.dead00", *loose + "\n");
  write(blobs + "/tmp/blob.dead00", "half a blob");

  auto rep = sbx::gc_blobs(t.dirs, -1, -1, false);
  REQUIRE(rep);
  CHECK(rep->live_pins == 1);
  CHECK(rep->stale_pins == 1);
  CHECK(rep->tmp_removed == 1);
  CHECK(::access(sbx::blob_path(t.dirs, *pinned).c_str(), F_OK) == 0);
  CHECK(::access(sbx::blob_path(t.dirs, *loose).c_str(), F_OK) != 0);
  CHECK(::access((blobs + "/pins/pin.dead00").c_str(), F_OK) != 0);
  CHECK(::access((blobs + "/tmp/blob.dead00").c_str(), F_OK) != 0);
  REQUIRE(rep->kept.size() == 1);
  CHECK(rep->kept[0].why.find("pinned by a running sandbox") == 0);

  // Released (the record would name it now): nothing holds it any more.
  pin.reset();
  auto after = sbx::gc_blobs(t.dirs, -1, -1, false);
  REQUIRE(after);
  CHECK(after->live_pins == 0);
  CHECK(::access(sbx::blob_path(t.dirs, *pinned).c_str(), F_OK) != 0);
}

TEST_CASE("replay: a replay's record names the run it re-ran, which 'sbx replay last' replays instead") {
  CHECK(sbx::replayed_original(nlohmann::json{{"run_id", "r2"}, {"replay_of", {{"run_id", "r1"}, {"seq", 3}}}}) == "r1");
  CHECK(sbx::replayed_original(nlohmann::json{{"run_id", "r1"}}).empty());
  CHECK(sbx::replayed_original(nlohmann::json{{"replay_of", nullptr}}).empty());
  CHECK(sbx::replayed_original(nlohmann::json::array()).empty());
}

TEST_CASE("blobs: a keeper reports each file it kept, for --keep-inputs' progress line") {
  TempState t;
  std::string tree = t.root + "/tree";
  REQUIRE(sbx::ensure_dir(tree + "/sub", 0755));
  write(tree + "/sub/a", "alpha");
  write(tree + "/b", "beta!");
  sbx::BlobKeeper keeper(t.dirs, 50, nullptr);
  std::vector<std::pair<std::int64_t, std::int64_t>> seen;
  keeper.on_kept = [&](std::int64_t files, std::int64_t bytes) { seen.emplace_back(files, bytes); };
  keeper.add_tree("input_file", "input_dir", "input_link", "/in/t", tree);
  REQUIRE(seen.size() == 2);
  CHECK(seen.back() == std::pair<std::int64_t, std::int64_t>{2, 10});
}
