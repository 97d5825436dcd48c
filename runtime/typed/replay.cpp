#include "runtime/typed/replay.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/openat2.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/image/artifact_export.hpp"
#include "runtime/image/blob_store.hpp"
#include "runtime/image/image_store.hpp"
#include "runtime/launch/sandbox.hpp"
#include "runtime/launch/tenant.hpp"
#include "runtime/launch/trace.hpp"
#include "runtime/record/ledger_key.hpp"
#include "runtime/record/trace_ledger.hpp"
#include "runtime/record/trace_store.hpp"
#include "runtime/typed/exec.hpp"
#include "runtime/typed/pack.hpp"
#include "runtime/typed/pack_run.hpp"
#include "runtime/typed/pack_tree.hpp"
#include "runtime/typed/typed_io.hpp"

namespace sbx {
namespace {
using nlohmann::json;
constexpr const char* kStage = "replay";

Error cannot(const std::string& what) { return make_error(kStage, what); }

std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A rebuilt path must stay inside the directory it is rebuilt in: a record's paths are data.
bool safe_relative(const std::string& rel) {
  if (rel.empty() || rel[0] == '/' || rel.size() > 4096) return false;
  std::size_t start = 0;
  while (start <= rel.size()) {
    std::size_t end = rel.find('/', start);
    if (end == std::string::npos) end = rel.size();
    std::string part = rel.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

// The record's blob entries, and reading them back with what is missing said plainly.
class Blobs {
 public:
  Blobs(const Dirs& dirs, const json& record) : dirs_(dirs) {
    if (auto it = record.find("blobs"); it != record.end() && it->is_array()) list_ = *it;
  }
  bool any() const { return !list_.empty(); }
  std::vector<const json*> role(const std::string& r) const {
    std::vector<const json*> v;
    for (auto& b : list_)
      if (b.is_object() && str(b, "role") == r) v.push_back(&b);
    return v;
  }
  // The bytes of one entry: an error names the role, the path and why (not kept, or gone).
  Result<std::string> read(const json& b) const {
    std::string what = str(b, "role") + " " + printable(str(b, "path"));
    if (b.contains("skipped"))
      return cannot(what + " was not kept when the run was recorded (" + printable(str(b, "skipped")) + ")");
    std::string hex = str(b, "sha256");
    if (!is_sha256_hex(hex)) return cannot(what + ": the record names no valid sha256");
    auto data = get_blob(dirs_, hex);
    if (!data)
      return cannot("blob sha256:" + hex + " (" + what + ") is missing from the blob store " + blobs_dir(dirs_) + ": " +
                    data.error().describe());
    return data;
  }

 private:
  const Dirs& dirs_;
  json list_ = json::array();
};

unsigned parse_mode(const json& b, unsigned dflt) {
  std::string m = str(b, "mode");
  if (m.empty() || m.size() > 4 || m.find_first_not_of("01234567") != std::string::npos) return dflt;
  // Permission bits only: a record is data, and a rebuilt file is never made set-id.
  return static_cast<unsigned>(std::stoul(m, nullptr, 8)) & 0777;
}

// Opens (creating with mode 0700 where missing) the directory `rel` ("" for the root itself)
// beneath `root` without crossing any symlink or leaving it: the record is data anyone with write
// access to the ledger could have edited, so a recorded link "x" -> /etc followed by an entry
// "x/f" must fail here, not create /etc/f (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS).
Result<UniqueFd> open_dir_beneath(int root, const std::string& rel, const std::string& shown) {
  UniqueFd cur(::fcntl(root, F_DUPFD_CLOEXEC, 0));
  if (cur.get() < 0) return sys_error(kStage, "dup");
  std::size_t i = 0;
  while (i < rel.size()) {
    std::size_t j = rel.find('/', i);
    if (j == std::string::npos) j = rel.size();
    std::string comp = rel.substr(i, j - i);
    constexpr std::uint64_t flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
    constexpr std::uint64_t resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    int fd = openat2_retrying(cur.get(), comp.c_str(), flags, resolve);
    if (fd < 0 && errno == ENOENT) {
      if (::mkdirat(cur.get(), comp.c_str(), 0700) != 0 && errno != EEXIST)
        return sys_error(kStage, "create directory " + shown + "/" + rel.substr(0, j));
      fd = openat2_retrying(cur.get(), comp.c_str(), flags, resolve);
    }
    if (fd < 0) {
      int err = errno;
      if (err == ELOOP || err == ENOTDIR || err == EXDEV)
        return cannot("the record puts an entry under '" + printable(rel.substr(0, j)) +
                      "', which it also records as a link or a file: refused (a rebuilt tree never follows a link)");
      return make_error(kStage, "open directory " + shown + "/" + rel.substr(0, j), err);
    }
    cur = UniqueFd(static_cast<int>(fd));
    i = j + 1;
  }
  return cur;
}

void split_rel(const std::string& rel, std::string& dir, std::string& base) {
  auto slash = rel.rfind('/');
  dir = slash == std::string::npos ? "" : rel.substr(0, slash);
  base = slash == std::string::npos ? rel : rel.substr(slash + 1);
}

// Rebuilds the tree whose entries (file_role, dir_role) have paths under `prefix` into `dest`.
// Everything is made relative to a descriptor of `dest`, beneath it, never through a symlink.
Status rebuild_tree(const Blobs& blobs, const std::string& file_role, const std::string& dir_role,
                    const std::string& link_role, const std::string& prefix, const std::string& dest) {
  SBX_TRY(ensure_dir(dest, 0755));
  if (::chmod(dest.c_str(), 0755) != 0) return sys_error(kStage, "chmod " + dest);  // whatever the umask
  UniqueFd root(::open(dest.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (root.get() < 0) return sys_error(kStage, "open " + dest);
  auto rel_of = [&](const json& b) -> std::optional<std::string> {
    std::string p = str(b, "path");
    if (prefix.empty()) return p;
    if (p.size() <= prefix.size() + 1 || p.compare(0, prefix.size(), prefix) != 0 || p[prefix.size()] != '/')
      return std::nullopt;
    return p.substr(prefix.size() + 1);
  };
  // Directories first, shallowest first, each with its recorded mode once its files are in.
  std::vector<std::pair<std::string, unsigned>> dirs;
  for (auto* b : blobs.role(dir_role)) {
    auto rel = rel_of(*b);
    if (!rel) continue;
    if (b->contains("skipped"))
      return cannot(dir_role + " " + printable(str(*b, "path")) + " was not kept (" + printable(str(*b, "skipped")) +
                    ")");
    if (!safe_relative(*rel))
      return cannot("the record's " + dir_role + " path '" + printable(*rel) + "' leaves its tree");
    dirs.push_back({*rel, parse_mode(*b, 0755)});
  }
  std::sort(dirs.begin(), dirs.end());
  for (auto& [rel, mode] : dirs) {
    auto d = open_dir_beneath(root.get(), rel, dest);
    if (!d) return d.error();
  }
  std::string dir, base;
  for (auto* b : blobs.role(file_role)) {
    auto rel = rel_of(*b);
    if (!rel) continue;
    if (!safe_relative(*rel))
      return cannot("the record's " + file_role + " path '" + printable(*rel) + "' leaves its tree");
    auto data = blobs.read(*b);
    if (!data) return data.error();
    split_rel(*rel, dir, base);
    auto parent = open_dir_beneath(root.get(), dir, dest);
    if (!parent) return parent.error();
    std::string path = dest + "/" + *rel;
    int fd = ::openat(parent->get(), base.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return sys_error(kStage, "create " + path);
    UniqueFd guard(fd);
    SBX_TRY(write_all(fd, *data, path));
    if (::fchmod(fd, parse_mode(*b, 0644)) != 0) return sys_error(kStage, "chmod " + path);
  }
  for (auto* b : blobs.role(link_role)) {
    auto rel = rel_of(*b);
    if (!rel) continue;
    if (b->contains("skipped"))
      return cannot(link_role + " " + printable(str(*b, "path")) + " was not kept (" + printable(str(*b, "skipped")) +
                    ")");
    if (!safe_relative(*rel))
      return cannot("the record's " + link_role + " path '" + printable(*rel) + "' leaves its tree");
    // The link itself, as it was: a symlink's target is text, and sbx never follows it here.
    split_rel(*rel, dir, base);
    auto parent = open_dir_beneath(root.get(), dir, dest);
    if (!parent) return parent.error();
    if (::symlinkat(str(*b, "target").c_str(), parent->get(), base.c_str()) != 0)
      return sys_error(kStage, "symlink " + dest + "/" + *rel);
  }
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    auto d = open_dir_beneath(root.get(), it->first, dest);
    if (!d) return d.error();
    if (::fchmod(d->get(), it->second) != 0) return sys_error(kStage, "chmod " + dest + "/" + it->first);
  }
  return {};
}

// Everything compared, once both records are at hand.
void compare_records(const json& orig, const json& rep, const Dirs& dirs, const Blobs& orig_blobs, ReplayReport& r) {
  auto add = [&](ReplayDifference d) {
    if (r.differences.size() >= kMaxReplayDifferences) ++r.differences_omitted;
    else r.differences.push_back(std::move(d));
  };
  json o_res = orig.value("result", json::object()), r_res = rep.value("result", json::object());
  for (const char* k : {"status", "exit_code", "signal"})
    if (o_res.value(k, json(nullptr)) != r_res.value(k, json(nullptr)))
      add({k, "", o_res.value(k, json(nullptr)), r_res.value(k, json(nullptr))});
  for (const char* s : {"stdout", "stderr"}) {
    json a = orig.value(s, json::object()).value("sha256", json(nullptr));
    json b = rep.value(s, json::object()).value("sha256", json(nullptr));
    if (a != b)
      add({"output",
           s,
           {{"sha256", a}, {"bytes", orig.value(s, json::object()).value("bytes", json(nullptr))}},
           {{"sha256", b}, {"bytes", rep.value(s, json::object()).value("bytes", json(nullptr))}}});
  }
  auto by_path = [](const json& rec, const char* key) {
    std::map<std::string, json> m;
    if (auto it = rec.find(key); it != rec.end() && it->is_array())
      for (auto& f : *it)
        if (f.is_object()) m[str(f, "path")] = f.value("sha256", json(nullptr));
    return m;
  };
  for (const char* key : {"inputs", "outputs"}) {
    auto a = by_path(orig, key), b = by_path(rep, key);
    std::set<std::string> paths;
    for (auto& [p, v] : a) paths.insert(p);
    for (auto& [p, v] : b) paths.insert(p);
    for (auto& p : paths) {
      json va = a.count(p) ? json{{"sha256", a[p]}} : json(nullptr);
      json vb = b.count(p) ? json{{"sha256", b[p]}} : json(nullptr);
      if (va != vb) add({key == std::string("inputs") ? "input" : "output", p, va, vb});
    }
  }
  // The JSON result, pointer by pointer, when both runs kept one and they differ.
  auto result_blob = [](const Blobs& bl) -> const json* {
    auto v = bl.role("result");
    return v.empty() ? nullptr : v.front();
  };
  Blobs rep_blobs(dirs, rep);
  const json* a = result_blob(orig_blobs);
  const json* b = result_blob(rep_blobs);
  if (a && b && str(*a, "sha256") != str(*b, "sha256")) {
    auto ta = orig_blobs.read(*a), tb = rep_blobs.read(*b);
    if (ta && tb) {
      ParsedJson ja = parse_json(*ta, result_bounds()), jb = parse_json(*tb, result_bounds());
      if (ja.ok() && jb.ok()) {
        std::size_t omitted = 0;
        std::size_t room =
            kMaxReplayDifferences > r.differences.size() ? kMaxReplayDifferences - r.differences.size() : 0;
        for (auto& d : json_differences(ja.value, jb.value, room, &omitted)) add(std::move(d));
        r.differences_omitted += omitted;
      }
    } else {
      add({"result", "", ta ? json("kept") : json(ta.error().describe()),
           tb ? json("kept") : json(tb.error().describe())});
    }
  }
}

std::string pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

void diff_into(const json& a, const json& b, const std::string& ptr, std::vector<ReplayDifference>& out,
               std::size_t max, std::size_t* omitted, int depth) {
  if (a == b) return;
  auto push = [&](const std::string& where, json x, json y) {
    if (out.size() >= max) {
      if (omitted) ++*omitted;
    } else {
      out.push_back({"result", where, std::move(x), std::move(y)});
    }
  };
  // Bounded: results are parsed within result_bounds() (json_io.hpp), and past 256 levels a
  // subtree is reported whole rather than walked.
  if (depth < 256 && a.is_object() && b.is_object()) {
    std::set<std::string> keys;
    for (auto& [k, v] : a.items()) keys.insert(k);
    for (auto& [k, v] : b.items()) keys.insert(k);
    for (auto& k : keys) {
      std::string p = ptr + "/" + pointer_token(k);
      auto ia = a.find(k), ib = b.find(k);
      if (ia == a.end()) push(p, nullptr, *ib);
      else if (ib == b.end()) push(p, *ia, nullptr);
      else diff_into(*ia, *ib, p, out, max, omitted, depth + 1);
    }
    return;
  }
  if (depth < 256 && a.is_array() && b.is_array()) {
    std::size_t n = std::max(a.size(), b.size());
    for (std::size_t i = 0; i < n; ++i) {
      std::string p = ptr + "/" + std::to_string(i);
      if (i >= a.size() || i >= b.size())
        push(p, i < a.size() ? a[i] : json(nullptr), i < b.size() ? b[i] : json(nullptr));
      else diff_into(a[i], b[i], p, out, max, omitted, depth + 1);
    }
    return;
  }
  push(ptr, a, b);
}

}  // namespace

Status rebuild_recorded_tree(const Dirs& dirs, const json& record, const std::string& file_role,
                             const std::string& dir_role, const std::string& link_role, const std::string& prefix,
                             const std::string& dest) {
  return rebuild_tree(Blobs(dirs, record), file_role, dir_role, link_role, prefix, dest);
}

std::vector<ReplayDifference> json_differences(const json& a, const json& b, std::size_t max, std::size_t* omitted) {
  std::vector<ReplayDifference> out;
  diff_into(a, b, "", out, max, omitted, 0);
  return out;
}

std::string describe_difference(const ReplayDifference& d, std::size_t max_value) {
  auto val = [&](const json& v) {
    if (v.is_null()) return std::string("(none)");
    std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
    if (s.size() > max_value) {
      std::string n = std::to_string(s.size());
      s.resize(max_value);
      s.append("...(").append(n).append(" bytes)");
    }
    return printable(s);
  };
  // Built with append: GCC 12 warns falsely (-Wstringop-overflow) about operator+ chains here.
  std::string line = d.what;
  if (d.what == "result") line.append(" #").append(printable(d.where));
  else if (!d.where.empty()) line.append(" ").append(printable(d.where));
  line.append(": original ").append(val(d.original)).append(", replay ").append(val(d.replay));
  return line;
}

Result<json> keep_run_inputs(const Dirs& dirs, const RunSpec& spec, const ProfileSource& profile,
                             std::shared_ptr<BlobPin> pin, std::function<void(std::int64_t, std::int64_t)> progress) {
  char buf[4096];
  std::string cwd = ::getcwd(buf, sizeof buf) ? buf : ".";
  auto ceiling = keep_ceiling();
  if (!ceiling) return ceiling.error();
  BlobKeeper keeper(dirs, *ceiling, std::move(pin));
  keeper.on_kept = std::move(progress);
  keeper.add_bytes("profile", profile.origin, profile.text);
  for (auto& in : spec.inputs) {
    std::string src = !in.src.empty() && in.src[0] == '/' ? in.src : cwd + "/" + in.src;
    struct stat st;
    // lstat: an --input that is itself a symlink is kept as nothing, and said so.
    if (::lstat(src.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      keeper.add_tree("input_file", "input_dir", "input_link", in.dst, src);
    } else {
      keeper.add_file("input_file", in.dst, src);
    }
  }
  return keeper.take();
}

std::string replayed_original(const json& record) {
  if (!record.is_object()) return "";
  const json of = record.value("replay_of", json(nullptr));
  return of.is_object() && of.contains("run_id") && of["run_id"].is_string() ? of["run_id"].get<std::string>() : "";
}

namespace {

// One replay, phase by phase (replay_run is its table of contents): the record found and trusted,
// its profile text, then one of three ways to run it again (an exec request, a pack, a plain run),
// each ending in the same comparison.
class Replay {
 public:
  explicit Replay(const ReplayRequest& req) : req_(req) {}
  Result<ReplayReport> run();

 private:
  Status load_record();
  Status check_tenant() const;
  Status check_chain();
  Status check_signature(const LedgerRunLine& e) const;
  Status check_ceiling(const RunSpec& s) const;
  Result<ProfileSource> kept_profile() const;
  Result<ReplayReport> replay_exec(const json& exec_blob, const ProfileSource& profile);
  Result<RunSpec> rebuilt_spec() const;
  Status check_image(RunSpec& spec) const;
  Status rebuild_inputs(RunSpec& spec) const;
  RunRequest plain_request(const ProfileSource& profile) const;
  Status under_tenant(RunRequest& run, const json& pack) const;
  Result<ReplayReport> replay_pack(const json& pack, RunSpec spec, RunRequest run);
  Result<ReplayReport> replay_plain(RunSpec spec, RunRequest run);
  Result<ReplayReport> compare(bool recorded, const std::string& record_error, const json& trace, int exit_status);

  const ReplayRequest& req_;
  ReplayReport r_;
  json orig_;
  json replay_of_;
  std::optional<Blobs> blobs_;
  // Where the pack and inputs the replay mounts are rebuilt: a PrivateDir under <state>/tmp, as a
  // pack run's copy of its pack (pack_tree.hpp). In $TMPDIR a concurrent sandbox of the same user
  // binding it read-write could rewrite them between their hash and their mount; no sandbox can
  // bind the state dir read-write. Removed with the replay.
  std::shared_ptr<PrivateDir> wd_;
};

Result<ReplayReport> Replay::run() {
  // The store says what to mount and run: it must be sbx's user's alone (paths.hpp).
  if (auto st = check_private_dir(req_.dirs.state, "sbx's state dir"); !st) return cannot(st.error().message);
  SBX_TRY(load_record());
  SBX_TRY(check_chain());  // first: every later phase reads the record the chain vouches for
  SBX_TRY(check_tenant());
  blobs_.emplace(req_.dirs, orig_);
  if (!blobs_->any())
    return cannot("run " + r_.original_run +
                  " kept nothing to replay it from (its record names no blobs: a plain "
                  "'sbx run' keeps its inputs and profile only with --keep-inputs)");
  auto profile = kept_profile();
  if (!profile) return profile.error();
  // In the untenanted state dir under a tenant too, where a pack run copies its pack: as root the
  // sandbox's mapped uid traverses to it (PrivateDir), and a tenant's store lies deeper.
  auto wd = PrivateDir::make(req_.tenant ? req_.base_dirs.state : req_.dirs.state, "replay");
  if (!wd) return cannot("a work directory for the rebuilt run: " + wd.error().describe());
  wd_ = std::move(*wd);
  if (auto ev = blobs_->role("exec_request"); !ev.empty()) return replay_exec(*ev.front(), *profile);
  auto spec = rebuilt_spec();
  if (!spec) return spec.error();
  RunRequest run = plain_request(*profile);
  if (orig_.contains("export")) {
    run.export_dir = wd_->path() + "/out";
    SBX_TRY(prepare_export_dir(run.export_dir));
  }
  json pack = orig_.value("invocation", json::object()).value("pack", json(nullptr));
  if (pack.is_object()) return replay_pack(pack, std::move(*spec), std::move(run));
  return replay_plain(std::move(*spec), std::move(run));
}

Status Replay::load_record() {
  auto loaded = load_trace(req_.dirs, req_.run);
  if (!loaded) return cannot(loaded.error().describe());
  if (std::string original = replayed_original(*loaded); !original.empty()) {
    // `sbx replay last` after a replay: the newest record is the replay's, which kept nothing.
    r_.followed_replay = str(*loaded, "run_id");
    loaded = load_trace(req_.dirs, original);
    if (!loaded)
      return cannot("run " + r_.followed_replay + " is a replay of run " + printable(original) +
                    ", whose record cannot be read: " + loaded.error().describe());
  }
  orig_ = std::move(*loaded);
  r_.original_run = str(orig_, "run_id");
  return {};
}

Status Replay::check_tenant() const {
  const json tj = orig_.value("tenant", json(nullptr));
  const std::string recorded = tj.is_object() ? str(tj, "name") : "";
  if (!req_.tenant && !recorded.empty())
    return cannot("run " + r_.original_run + " was made under tenant '" + printable(recorded) +
                  "': replay it with --tenant " + printable(recorded) + " (its ceilings and ids apply again)");
  if (req_.tenant && recorded != req_.tenant->name)
    return cannot("run " + r_.original_run + " was not made under tenant '" + req_.tenant->name +
                  "' (its record names " +
                  (recorded.empty() ? std::string("no tenant") : "tenant '" + printable(recorded) + "'") + ")");
  return {};
}

// The record decides what the replay mounts, which policy it runs under and where its output
// goes, so it must be the record the run wrote: the whole chain is checked first (an edited,
// inserted or reordered line breaks it; a chain rewritten from its start is caught only by an
// anchor or signatures: 'sbx trace verify --anchor/--pubkey').
Status Replay::check_chain() {
  // One walk: the line of the run is kept as the walk checked it (its hash its record's, its
  // place in the chain), so the record replayed is the one verified, not a second read.
  auto chain = verify_ledger(req_.dirs, std::nullopt, nullptr, r_.original_run);
  if (!chain) return chain.error();
  // Lines over the size bound break the chain only where they are (their records cannot be read,
  // so never replayed): linked by their envelopes, with every other line checked, the records
  // around them are still the ones that were written.
  if (chain->broken_only_by_oversize()) spdlog::warn("replay: {} (every other record verified)", chain->problem);
  else if (!chain->intact)
    return cannot("the ledger's chain is broken (" + printable(chain->problem) +
                  "): a record that may have been edited is not replayed (see 'sbx trace verify')");
  if (chain->run_lines > 1)
    return cannot("run " + r_.original_run +
                  " is named by more than one ledger line: the ledger was edited; see 'sbx trace verify'");
  if (!chain->run_line)
    return cannot(chain->run_lines
                      ? "run " + r_.original_run + "'s ledger line is over the size bound: its record cannot be read"
                      : "run " + r_.original_run +
                            " is not in the ledger (a record of the previous store format, see "
                            "'sbx trace import'): it kept nothing to replay it from");
  const LedgerRunLine* entry = &*chain->run_line;
  SBX_TRY(check_signature(*entry));
  auto line_record = parse_json_doc(entry->record, {kMaxTraceBytes}, kStage, "the record's ledger line");
  if (!line_record || !line_record->is_object())
    return cannot("run " + r_.original_run + "'s ledger line holds no record");
  orig_ = std::move(*line_record);
  r_.original_seq = entry->seq;
  r_.original_hash = entry->hash;
  replay_of_ = trace_object({{"replay_of/run_id", r_.original_run},
                             {"replay_of/seq", r_.original_seq},
                             {"replay_of/record_hash", r_.original_hash}});
  return {};
}

// Where `sbx key init` made a key, a chain can still be rewritten from its start by anyone who can
// write the ledger (hashes recomputed), but not signed: the record's own line must carry a
// signature its public key accepts, or the record is not trusted to say what to mount and run.
// Without a key there is nothing to check against (the chain above is all), as before.
Status Replay::check_signature(const LedgerRunLine& e) const {
  auto paths = ledger_key_paths();
  if (!paths) return {};
  struct stat st;
  bool have_pub = ::stat(paths->pub.c_str(), &st) == 0, have_priv = ::lstat(paths->priv.c_str(), &st) == 0;
  if (!have_pub && !have_priv) return {};
  if (!have_pub)
    return cannot("a ledger key exists (" + paths->priv + ") but its public half " + paths->pub + " is missing: run " +
                  r_.original_run + "'s signature cannot be checked, so it is not replayed");
  auto verifier = LedgerVerifier::load(paths->pub);
  if (!verifier) return cannot(verifier.error().describe());
  if (e.sig.empty())
    return cannot("run " + r_.original_run + "'s record is not signed, but a ledger key exists (" + paths->pub +
                  "): an unsigned record may have been forged (rechained), and a record made before 'sbx key init' "
                  "cannot be told from one; it is not replayed");
  if (!verifier->verify(e.hash, e.sig))
    return cannot("run " + r_.original_run + "'s signature does not verify with " + paths->pub +
                  ": forged, or signed by another key; it is not replayed");
  return {};
}

// A replay never runs with more than the profile the record names would allow now, whatever the
// record says (a record is data; a signed one is still an old decision): the profile is loaded as
// installed today and the recorded spec must stay inside it. Binds: each one the profile has, no
// writable one it has read-only; seccomp: the profile's policy (or any, under an unconfined
// profile); limits, GPUs and capabilities: check_ceilings; network: every allow rule covered by
// one of the profile's, no higher connection or byte budget; passed-through environment: names
// the profile passes.
Status Replay::check_ceiling(const RunSpec& s) const {
  json prof = orig_.value("invocation", json::object()).value("profile", json::object());
  const std::string name = str(prof, "name");
  auto loaded = load_profile(name.empty() ? std::string(kDefaultProfile) : name);
  if (!loaded)
    return cannot("the record's profile '" + printable(name) + "' cannot be loaded now: " + loaded.error().describe());
  auto ceiling = spec_from_layers(*loaded, nullptr, "");
  if (!ceiling) return cannot("the record's profile '" + printable(name) + "': " + ceiling.error().describe());
  const RunSpec& c = *ceiling;
  auto over = [&](const std::string& what) {
    return cannot("run " + r_.original_run + "'s recorded spec " + what + ", more than its profile '" +
                  printable(name) +
                  "' allows now: a replay never runs with more than that (run it again with 'sbx run' to grant it)");
  };
  for (auto& b : s.binds) {
    bool ok = std::any_of(c.binds.begin(), c.binds.end(), [&](const BindMount& p) {
      return p.src == b.src && p.dst == b.dst && (p.rw || !b.rw) && (p.idmap || !b.idmap);
    });
    if (!ok)
      return over("binds " + printable(b.src) + ":" + printable(b.dst) + (b.rw ? ":rw" : ":ro") +
                  (b.idmap ? ",idmap" : ""));
  }
  if (s.seccomp != c.seccomp && c.seccomp != "unconfined")
    return over("has seccomp '" + printable(s.seccomp) + "' where the profile has '" + c.seccomp + "'");
  if (auto st = check_ceilings(c, s, "run " + r_.original_run + "'s recorded spec", name); !st)
    return cannot(st.error().message + " (a replay is held to its profile as installed now)");
  std::vector<AllowRule> allowed;
  for (auto& a : c.network.allow)
    if (auto r = parse_allow_rule(a)) allowed.push_back(*r);
  for (auto& a : s.network.allow) {
    auto r = parse_allow_rule(a);
    if (!r ||
        std::none_of(allowed.begin(), allowed.end(), [&](const AllowRule& p) { return allow_rule_covers(p, *r); }))
      return over("allows host '" + printable(a) + "'");
  }
  if (s.network.max_connections > c.network.max_connections)
    return over("allows " + std::to_string(s.network.max_connections) + " proxied connections");
  if (c.network.max_bytes && (!s.network.max_bytes || *s.network.max_bytes > *c.network.max_bytes))
    return over("relays more network bytes");
  if (!s.gpu.devices.empty() && s.gpu.devices != c.gpu.devices)
    return over("asks for GPU(s) '" + printable(s.gpu.devices) + "'");
  for (auto& e : s.env_pass)
    if (std::find(c.env_pass.begin(), c.env_pass.end(), e) == c.env_pass.end())
      return over("passes the caller's $" + printable(e) + " through");
  return {};
}

// The profile, as its text was when the run was recorded.
Result<ProfileSource> Replay::kept_profile() const {
  auto pv = blobs_->role("profile");
  if (pv.empty()) return cannot("the profile's text of run " + r_.original_run + " was not kept");
  auto ptext = blobs_->read(*pv.front());
  if (!ptext) return ptext.error();
  json prof = orig_.value("invocation", json::object()).value("profile", json::object());
  if (sha256_hex(*ptext) != str(prof, "sha256"))
    return cannot("the kept profile text does not hash to the record's invocation.profile.sha256");
  return ProfileSource{str(prof, "name"), str(prof, "origin"), *ptext};
}

// exec: the request holds everything (code, files, input, limits); run_exec rebuilds the spec
// from it and the built-in profile exactly as the first time.
Result<ReplayReport> Replay::replay_exec(const json& exec_blob, const ProfileSource& profile) {
  auto text = blobs_->read(exec_blob);
  if (!text) return text.error();
  auto request = parse_json_doc(*text, {kMaxRequestBytes}, kStage, "the kept exec request");
  if (!request) return request.error();
  // The profile the request ran under (sbx exec's built-in default, or `sbx exec --profile`'s
  // and `sbx mcp --profile`'s), as it is now: only the same text, and the same merged profile
  // when it extends another, gives the same limits.
  const std::string name = profile.name.empty() ? std::string(kDefaultProfile) : profile.name;
  auto current = load_profile(profile.origin == "built-in" || profile.origin.empty() ? name : profile.origin);
  std::string resolved =
      str(orig_.value("invocation", json::object()).value("profile", json::object()), "resolved_sha256");
  if (!current || current->source.text != profile.text ||
      (!resolved.empty() && current->source.resolved_sha256 != resolved))
    return cannot("the run's profile '" + printable(name) + "' (" + printable(profile.origin) +
                  ") has changed since the run, or is gone: its limits would not be the same");
  ExecContext ctx;
  ctx.profile = profile.origin == "built-in" || profile.origin.empty() ? name : profile.origin;
  ctx.dirs = req_.dirs;
  if (req_.tenant) {
    ctx.dirs = req_.base_dirs;
    ctx.before_run = [this](RunRequest& run) { return apply_tenant(*req_.tenant, run, json(nullptr)); };
  }
  ctx.invocation_argv = req_.invocation_argv;
  ctx.record_extra = trace_object({{"replay_of", replay_of_}});
  auto resp = run_exec(*request, ctx);
  if (!resp) return cannot("the replay could not run: " + resp.error().describe());
  std::string run_id = resp->value("run_id", "");
  auto rep = load_trace(req_.dirs, run_id);
  if (!rep) return cannot("the replay's record cannot be read: " + rep.error().describe());
  return compare(true, "", *rep, 0);
}

Result<RunSpec> Replay::rebuilt_spec() const {
  const json inv = orig_.value("invocation", json::object());
  auto spec = spec_from_json(inv.value("spec", json::object()), "the record's invocation.spec");
  if (!spec) return cannot(spec.error().message);
  // Where the original streamed its live events was that operator's choice for that run; a
  // replay opens no file the record names (--events is not replayed).
  spec->events.clear();
  SBX_TRY(check_image(*spec));
  SBX_TRY(rebuild_inputs(*spec));
  return spec;
}

// The same image, by digest: gone, or changed on disk (its seal), and there is nothing to replay on.
Status Replay::check_image(RunSpec& spec) const {
  if (spec.image == "host") return {};
  json img = orig_.value("image", json::object());
  std::string digest = str(img, "digest");
  if (!digest.starts_with("sha256:") || !is_sha256_hex(digest.substr(7)))
    return cannot("the record names image '" + printable(spec.image) + "' without a digest");
  ImageStore store(req_.dirs.images);
  auto image = store.resolve(digest);
  if (!image)
    return cannot("image " + digest + " (recorded as '" + printable(spec.image) +
                  "') is no longer in the image store " + req_.dirs.images + ": " + image.error().describe());
  if (auto st = store.check_seal(*image); !st)
    return cannot("image " + digest + " fails its seal: " + st.error().describe());
  spec.image = digest;
  return {};
}

// --input files and trees, rebuilt from blobs at their recorded paths.
Status Replay::rebuild_inputs(RunSpec& spec) const {
  json rec_inputs = orig_.value("inputs", json::array());
  for (std::size_t i = 0; i < spec.inputs.size(); ++i) {
    BindMount& in = spec.inputs[i];
    std::string dest = wd_->path() + "/in" + std::to_string(i);
    std::string type;
    for (auto& e : rec_inputs)
      if (e.is_object() && str(e, "path") == in.dst) type = str(e, "type");
    if (type == "directory") {
      SBX_TRY(rebuild_tree(*blobs_, "input_file", "input_dir", "input_link", in.dst, dest));
    } else {
      const json* found = nullptr;
      for (auto* b : blobs_->role("input_file"))
        if (str(*b, "path") == in.dst) found = b;
      if (!found)
        return cannot("--input " + printable(in.dst) + " was not kept (the run was made without --keep-inputs)");
      auto data = blobs_->read(*found);
      if (!data) return data.error();
      SBX_TRY(write_file_durable(dest, *data, parse_mode(*found, 0644)));
    }
    in.src = dest;
  }
  return {};
}

RunRequest Replay::plain_request(const ProfileSource& profile) const {
  RunRequest run;
  run.profile = profile;
  run.dirs = req_.dirs;
  run.invocation_argv = req_.invocation_argv;
  run.record_extra = trace_object({{"replay_of", replay_of_}});
  // The program's output goes to sbx's stderr: stdout carries the comparison alone.
  run.io.stdout_fd = 2;
  run.io.stderr_fd = 2;
  return run;
}

// Both kinds of replay (a pack's, a plain run's) run under the tenant again.
Status Replay::under_tenant(RunRequest& run, const json& pack) const {
  if (!req_.tenant) return {};
  run.dirs = req_.base_dirs;
  if (auto st = apply_tenant(*req_.tenant, run, pack); !st) return cannot("tenant: " + st.error().message);
  return {};
}

Result<ReplayReport> Replay::replay_pack(const json& pack, RunSpec spec, RunRequest run) {
  if (!pack.value("secrets", json::array()).empty())
    return cannot("run " + r_.original_run + " was given secrets, and secrets are never kept");
  if (!pack.value("contexts", json::array()).empty())
    return cannot("run " + r_.original_run + " was given contexts (host directories), which are not kept");
  std::string pack_dir = wd_->path() + "/pack";
  SBX_TRY(rebuild_tree(*blobs_, "pack_file", "pack_dir", "pack_link", "", pack_dir));
  auto digest = pack_digest(pack_dir);
  if (!digest) return cannot("the rebuilt pack: " + digest.error().describe());
  if (*digest != str(pack, "digest"))
    return cannot("the pack rebuilt from its blobs has digest " + *digest + ", the record says " +
                  printable(str(pack, "digest")) + " (a file of it was not kept)");
  std::vector<PackProblem> problems;
  auto p = load_pack(pack_dir, problems);
  if (!p) return cannot("the rebuilt pack does not load: " + p.error().describe());
  auto rv = blobs_->role("records");
  if (rv.empty()) return cannot("the input records of run " + r_.original_run + " were not kept");
  auto records = blobs_->read(*rv.front());
  if (!records) return records.error();
  PackRunRequest preq;
  preq.pack = std::move(*p);
  preq.input_path = str(*rv.front(), "path");
  preq.input_bytes = std::move(*records);
  // The recorded spec already holds the pack's mount of its old directory: run_pack adds the
  // rebuilt one.
  std::erase_if(spec.binds, [](const BindMount& b) { return b.dst == "/pack"; });
  SBX_TRY(check_ceiling(spec));
  run.spec = std::move(spec);
  SBX_TRY(under_tenant(run, json{{"name", preq.pack.name}, {"digest", preq.pack.digest}}));
  preq.run = std::move(run);
  PackRunResult res = run_pack(preq);
  return compare(res.recorded, res.record_error, res.trace, res.exit_status);
}

Result<ReplayReport> Replay::replay_plain(RunSpec spec, RunRequest run) {
  SBX_TRY(check_ceiling(spec));
  run.spec = std::move(spec);
  run.require_record = true;
  SBX_TRY(under_tenant(run, json(nullptr)));
  RunReport rep = run_sandbox(run);
  return compare(rep.recorded, rep.record_error, rep.trace, rep.exit_status);
}

// Every replay ends the same way: the new record stored, then compared with the original.
Result<ReplayReport> Replay::compare(bool recorded, const std::string& record_error, const json& trace,
                                     int exit_status) {
  if (!recorded) return cannot("the replay's record could not be stored: " + record_error);
  r_.replay_run = str(trace, "run_id");
  r_.replay_exit = exit_status;
  compare_records(orig_, trace, req_.dirs, *blobs_, r_);
  return r_;
}

}  // namespace

Result<ReplayReport> replay_run(const ReplayRequest& req) { return Replay(req).run(); }

}  // namespace sbx
