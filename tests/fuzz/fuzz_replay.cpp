// `sbx replay`'s reading of a stored record and its blob manifest (runtime/typed/replay.hpp,
// runtime/image/blob_store.hpp): the input is a record (JSON; the ledger is data anyone with write
// access to the state directory can edit) whose "blobs" list names files, directories and links
// by role, path, mode and sha256. The target's blob store holds a few blobs (tests/fuzz/corpus/
// replay names them by hash), and the record's pack tree (pack_file/pack_dir/pack_link, every
// path) and --input tree (input_*, under the first input_dir's path) are rebuilt with
// rebuild_recorded_tree, then compared with json_differences the way replay compares results.
// Checked besides "no crash": the rebuild makes nothing outside its destination (the scratch
// directory holds only it and the blob store), every blob is unchanged afterwards, no rebuilt
// file or directory is set-id, and at most kMaxReplayDifferences differences are listed.
#include <ftw.h>
#include <sys/stat.h>
#include <dirent.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/image/blob_store.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/typed/replay.hpp"

using nlohmann::json;

namespace {

std::string g_root;  // holds only state/ and, during one input, dest/
sbx::Dirs g_dirs;
std::vector<std::pair<std::string, std::string>> g_blobs;  // hex, bytes

// The blobs the seeds name (corpus/replay/*.json hold their hashes).
const char* const kBlobBytes[] = {"hello\n", "#!/bin/sh\necho hi\n", "{\"name\":\"p\",\"version\":\"1.0.0\"}\n", ""};

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> v;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (auto* e = ::readdir(d))
      if (std::string n = e->d_name; n != "." && n != "..") v.push_back(n);
    ::closedir(d);
  }
  return v;
}

int no_setid(const char*, const struct stat* st, int, struct FTW*) {
  if (st->st_mode & (S_ISUID | S_ISGID)) std::abort();
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  char t[] = "/tmp/sbx-fuzz-replay-XXXXXX";
  if (!::mkdtemp(t)) std::abort();
  g_root = t;
  g_dirs.state = g_root + "/state";
  g_dirs.traces = g_dirs.state + "/traces";
  g_dirs.data = g_dirs.state + "/data";
  g_dirs.images = g_dirs.data + "/images";
  for (auto b : kBlobBytes) {
    auto hex = sbx::put_blob(g_dirs, b);
    if (!hex) std::abort();
    g_blobs.push_back({*hex, b});
  }
  std::atexit([] { (void)sbx::remove_tree(g_root); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto record = sbx::parse_json_doc(text, {sbx::kMaxTraceBytes}, "replay", "the record");
  if (!record || !record->is_object()) return 0;
  const std::string dest = g_root + "/dest";
  (void)sbx::rebuild_recorded_tree(g_dirs, *record, "pack_file", "pack_dir", "pack_link", "", dest + "/pack");
  std::string prefix = "/in";
  if (auto it = record->find("blobs"); it != record->end() && it->is_array())
    for (auto& b : *it)
      if (b.is_object() && b.value("role", json()) == "input_dir" && b.value("path", json()).is_string()) {
        prefix = b["path"].get<std::string>();
        break;
      }
  if (auto st = sbx::rebuild_recorded_tree(g_dirs, *record, "input_file", "input_dir", "input_link", prefix, dest + "/in");
      !st)
    (void)st.error().describe();
  for (auto& n : names_in(g_root))
    if (n != "state" && n != "dest") std::abort();
  for (auto& [hex, bytes] : g_blobs) {
    auto got = sbx::get_blob(g_dirs, hex);
    if (!got || *got != bytes) std::abort();
  }
  ::nftw(dest.c_str(), no_setid, 16, FTW_PHYS);
  if (auto st = sbx::remove_tree(dest); !st) std::abort();
  std::size_t omitted = 0;
  auto diffs = sbx::json_differences(record->value("result", json()), record->value("outputs", json()),
                                     sbx::kMaxReplayDifferences, &omitted);
  if (diffs.size() > sbx::kMaxReplayDifferences) std::abort();
  for (auto& d : diffs) (void)sbx::describe_difference(d);
  return 0;
}
