#include "runtime/image/oci_image.hpp"
#include "runtime/image/image_store.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>

#include <algorithm>
#include <map>
#include <memory>

#include "runtime/base/fsutil.hpp"
#include "runtime/image/image_manifest.hpp"
#include "runtime/image/image_seal.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/base/clock.hpp"
#include "runtime/base/bytes.hpp"
#include "runtime/base/strings.hpp"

namespace sbx {
namespace {
using nlohmann::json;

constexpr const char* kStage = "image";

bool valid_chars(const std::string& s, bool tag) {
  if (s.empty() || s.size() > 128) return false;
  for (unsigned char c : bytes_of(s)) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
              (tag && c >= 'A' && c <= 'Z');
    if (!ok) return false;
  }
  return s[0] != '.' && s[0] != '-';
}

bool is_hex(const std::string& s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

Result<std::vector<std::string>> list_dir(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = ::opendir(path.c_str());
  if (!d) {
    if (errno == ENOENT) return out;
    return sys_error(kStage, "cannot read " + path);
  }
  while (auto* de = ::readdir(d)) {
    std::string n = de->d_name;
    if (n != "." && n != ".." && n[0] != '.') out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

json dropped_json(const std::vector<SkippedEntry>& v) {
  json a = json::array();
  for (std::size_t i = 0; i < v.size() && i < 100; ++i) a.push_back({{"path", v[i].path}, {"why", v[i].why}});
  return a;
}

// Paths of the lines that differ between two manifests.
std::vector<std::string> manifest_differences(const std::string& want, const std::string& have) {
  auto index = [](const std::string& text) {
    std::map<std::string, std::string> m;
    std::size_t pos = text.find('\n') + 1;  // skip the header
    while (pos < text.size()) {
      std::size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(pos, end - pos);
      m[line.substr(0, line.find('\t'))] = line;
      pos = end + 1;
    }
    return m;
  };
  auto a = index(want), b = index(have);
  std::vector<std::string> out;
  for (auto& [path, line] : a) {
    auto it = b.find(path);
    if (it == b.end()) out.push_back("missing: " + path);
    else if (it->second != line) out.push_back("changed: " + path);
  }
  for (auto& [path, line] : b)
    if (!a.count(path)) out.push_back("added: " + path);
  return out;
}

// A killed import leaves its staging directory behind; it carries the importer's pid
// ("import-<pid>-XXXXXX", "rm-<hex>" for removals): remove those whose process is gone. A pid
// reused by an unrelated process only delays the cleanup to a later import.
void remove_abandoned_staging(const std::string& tmp) {
  auto names = list_dir(tmp);
  if (!names) return;
  for (auto& n : *names) {
    if (n.starts_with("rm-")) {
      (void)remove_tree(tmp + "/" + n);  // the caller holds the store lock: no removal is running
      continue;
    }
    if (!n.starts_with("import-")) continue;
    auto dash = n.find('-', 7);
    if (dash == std::string::npos) continue;
    pid_t pid = static_cast<pid_t>(std::atoi(n.substr(7, dash - 7).c_str()));
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) (void)remove_tree(tmp + "/" + n);
  }
}

}  // namespace

Result<std::string> canonical_image_name(const std::string& text) {
  if (text.starts_with("sha256:"))
    return make_error("usage", "an image name cannot start with sha256: ('" + text + "')");
  auto colon = text.find(':');
  std::string name = text.substr(0, colon);
  std::string tag = colon == std::string::npos ? "latest" : text.substr(colon + 1);
  if (!valid_chars(name, false))
    return make_error("usage", "bad image name '" + name + "': use 1-128 of a-z 0-9 . _ - (not starting with . or -)");
  if (name == kHostImage)
    return make_error("usage", "the image name '" + text + "' is reserved: '" + kHostImage +
                                   "' means the host's own root, not a stored image; choose another name");
  if (!valid_chars(tag, true))
    return make_error("usage",
                      "bad image tag '" + tag + "': use 1-128 of A-Z a-z 0-9 . _ - (not starting with . or -)");
  return name + ":" + tag;
}

Result<UniqueFd> ImageStore::lock() const {
  SBX_TRY(ensure_dir(root_, 0755));
  UniqueFd fd(::open((root_ + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd.ok()) return sys_error(kStage, "cannot open " + root_ + "/.lock");
  if (::flock(fd.get(), LOCK_EX) != 0) return sys_error(kStage, "cannot lock the image store");
  return fd;  // the lock is held until the fd is closed
}

Result<ImageRecord> ImageStore::load(const std::string& hex) const {
  ImageRecord r;
  r.digest = "sha256:" + hex;
  r.dir = root_ + "/sha256/" + hex;
  r.rootfs = r.dir + "/rootfs";
  auto meta = read_bounded(r.dir + "/image.json", kMaxManifestBytes, kStage, r.dir + "/image.json");
  if (!meta)
    return make_error(
        kStage, "image " + r.digest + " is incomplete in the store (no image.json): remove it with 'sbx image rm'",
        meta.error().err);
  auto parsed = parse_json_doc(*meta, {kMaxManifestBytes}, kStage, r.dir + "/image.json");
  if (!parsed) return parsed.error();
  r.meta = std::move(*parsed);
  auto names = list_dir(root_ + "/names");
  if (!names) return names.error();
  for (auto& n : *names) {
    auto d = read_file(root_ + "/names/" + n);
    if (d && trim(*d) == r.digest) r.names.push_back(n);
  }
  return r;
}

namespace {

struct Unpacked {
  ImportStats stats;  // of the root file system, when the source was one
  std::string dir;    // an OCI layout or docker archive to resolve; "" when the source was a rootfs
  std::int64_t archive_bytes = 0, archive_entries = 0;  // what unpacking an archive took
};

// A directory that is a container image is resolved where it is; a tarball is extracted (with
// every rule of a root file system import) into staging/rootfs first, and if what came out is a
// container image it moves to staging/archive to be resolved, leaving rootfs empty for its layers.
Result<Unpacked> unpack_source(const std::string& source, bool is_dir, const std::string& staging,
                               const ImportProgress& progress, const ImportLimits& limits, const ImportOptions& options,
                               const std::string& tag) {
  const std::string rootfs = staging + "/rootfs";
  const bool may_be_container = options.format != "rootfs";
  Unpacked out;
  std::optional<std::string> format;
  if (is_dir && may_be_container) format = container_format(source);
  if (format) {
    out.dir = source;
  } else {
    auto stats = is_dir ? populate_from_dir(source, rootfs, progress, limits)
                        : populate_from_tar(source, rootfs, progress, limits);
    if (!stats) return stats.error();
    out.stats = std::move(*stats);
    if (!is_dir && may_be_container) format = container_format(rootfs);
    if (format) {
      out.dir = staging + "/archive";
      if (::rename(rootfs.c_str(), out.dir.c_str()) != 0)
        return sys_error(kStage, "cannot move the unpacked archive aside");
      if (::mkdir(rootfs.c_str(), 0755) != 0) return sys_error(kStage, "cannot create " + rootfs);
      out.archive_bytes = out.stats.bytes;
      out.archive_entries = out.stats.entries;
      out.stats = ImportStats{};
    }
  }
  if (!format && !tag.empty())
    return make_error("usage", source + " is a root file system, which has no tags: ':" + tag +
                                   "' chooses an image of an OCI layout or docker archive");
  if (options.format != "auto" && options.format != "rootfs" && format != options.format)
    return make_error("usage", source + " is not " +
                                   (options.format == "oci-layout" ? "an OCI image layout" : "a docker save archive") +
                                   (format ? " (it is " + *format + ")" : ""));
  return out;
}

}  // namespace

// Two imports can store the same tree (the digest is the content's) from different origins: an
// OCI image and a rootfs tarball of it, or two container images that differ only in their Cmd.
// So the origin — format, container digests and run defaults — is recorded per name in
// image.json's "by_name" (and at the top level for the latest import, which is what a reference
// by digest sees); resolve() puts a name's own entry on top. Entries of names that no longer
// point here are dropped, so the file stays small.
Status ImageStore::record_origin(const std::string& dir, const std::string& digest, const std::string& name,
                                 const ContainerImage* container) const {
  auto text = read_bounded(dir + "/image.json", kMaxManifestBytes, kStage, dir + "/image.json");
  if (!text) return text.error();
  auto meta = parse_json_doc(*text, {kMaxManifestBytes}, kStage, dir + "/image.json");
  if (!meta) return meta.error();
  json entry = {{"format", container ? container->format : "rootfs"}};
  if (container) {
    entry["container"] = {
        {"manifest_digest", container->manifest_digest.empty() ? json(nullptr) : json(container->manifest_digest)},
        {"config_digest", container->config_digest},
        {"platform", container->platform},
        {"layers", container->layer_digests}};
    entry["config"] = container->run_defaults;
  }
  json by_name = meta->contains("by_name") && (*meta)["by_name"].is_object() ? (*meta)["by_name"] : json::object();
  // The origin every other name of this tree had so far: its own entry, or for a name imported
  // before per-name origins existed, the top level as it stands (before this import changes it).
  json current = {{"format", meta->value("format", std::string("rootfs"))}};
  for (const char* key : {"container", "config"})
    if (meta->contains(key)) current[key] = (*meta)[key];
  json kept = json::object();
  auto names = list_dir(root_ + "/names");
  if (!names) return names.error();
  for (auto& n : *names) {
    auto d = read_file(root_ + "/names/" + n);
    if (n == name || !d || trim(*d) != digest) continue;
    kept[n] = by_name.contains(n) ? by_name[n] : current;
  }
  kept[name] = entry;
  (*meta)["by_name"] = std::move(kept);
  for (const char* key : {"format", "container", "config"}) {
    if (entry.contains(key)) (*meta)[key] = entry[key];
    else meta->erase(key);
  }
  return write_file_durable(dir + "/image.json", dump_json(*meta, 2) + "\n", 0644);
}

namespace {

// A container image's layers applied to `rootfs` (for a source that unpacked to an OCI layout);
// what extracting the archive itself took counts too (a docker save tarball is unpacked before its
// layers are applied): the layers get what remains of the limits.
Result<ImportStats> apply_container_layers(Unpacked& layout, const std::string& source, const std::string& rootfs,
                                           const ImportProgress& progress, const ImportLimits& limits,
                                           const ImportOptions& options, const std::string& tag,
                                           std::optional<ContainerImage>& container) {
  auto img = resolve_container_image(layout.dir, options.platform, tag);
  if (!img) return img.error();
  ImportLimits left = limits;
  left.max_bytes -= layout.archive_bytes;
  left.max_entries -= layout.archive_entries;
  if (left.max_bytes <= 0 || left.max_entries <= 0)
    return make_error("usage", "the import stopped: unpacking " + source +
                                   " took the whole --max-bytes/--max-entries; nothing was stored");
  auto stats = apply_layers(img->layers, img->layer_digests, rootfs, progress, left);
  if (!stats) return stats.error();
  if (layout.dir != source) SBX_TRY(remove_tree(layout.dir));  // the unpacked archive
  container.emplace(std::move(*img));
  return stats;
}

// Whether a stored tree's entries have their image owners (image_import.hpp).
bool owners_carried(const json& meta) {
  auto it = meta.find("owners");
  return it != meta.end() && it->is_object() && it->value("carried", false) == true;
}

// image.json of a freshly stored tree.
json image_meta(const std::string& hex, const std::string& source, const TreeScan& scan, const ImportStats& stats,
                const Seal& seal, bool container) {
  json meta = {{"digest", "sha256:" + hex},
               // What sbx before owners entered the digest called this content (image_manifest.hpp):
               // a reference to it is answered with the digest to use now (find_digest).
               {"digest_v1", "sha256:" + sha256_hex(manifest_text(scan.entries))},
               {"imported_at", rfc3339_now()},
               {"source", source},
               {"entries", scan.entries.size()},
               {"bytes", scan.bytes},
               {"normalised",
                {{"special_bits_cleared", stats.special_bits_cleared},
                 {"group_other_write_cleared", stats.write_bits_cleared},
                 {"dropped", stats.dropped.size()},
                 {"dropped_entries", dropped_json(stats.dropped)}}},
               {"seal", {{"entries", seal.entries}, {"digest", seal.digest}}},
               {"owners", {{"carried", stats.owners_carried}, {"outside_range", stats.owners_outside_range}}},
               {"format", "rootfs"}};
  if (container) meta["normalised"]["whiteouts"] = stats.whiteouts;
  return meta;
}

}  // namespace

ImportSource parse_import_source(const std::string& text) {
  ImportSource out;
  if (text == "-" || text.starts_with("-:")) {
    out.from_stdin = true;
    if (text.size() > 2) out.tag = text.substr(2);
    return out;
  }
  out.path = text;
  struct stat st;
  if (::lstat(text.c_str(), &st) == 0) return out;
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return out;
  if (::lstat(text.substr(0, colon).c_str(), &st) != 0) return out;
  out.path = text.substr(0, colon);
  out.tag = text.substr(colon + 1);
  return out;
}

namespace {

// stdin (a pipe, as from `podman save`) copied once into an unlinked file in the store's tmp/:
// the tar reader needs a regular file (it looks at the magic bytes twice), and a stream that
// would come to more than any archive the limits allow is stopped there, nothing kept.
Result<UniqueFd> spool_stdin(const std::string& dir, std::int64_t bound) {
  if (::isatty(STDIN_FILENO) == 1)
    return make_error("usage",
                      "image import -: stdin is a terminal; pipe an archive into it (podman save IMAGE | "
                      "sbx image import - --name NAME)");
  UniqueFd fd(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!fd.ok()) {
    // A file system without O_TMPFILE: a named file, unlinked at once.
    std::string tmpl = dir + "/stdin-" + std::to_string(::getpid()) + "-XXXXXX";
    fd = UniqueFd(::mkostemp(tmpl.data(), O_CLOEXEC));
    if (!fd.ok()) return sys_error(kStage, "cannot create a file for stdin in " + dir);
    ::unlink(tmpl.c_str());
  }
  std::vector<char> buf(1 << 20);
  std::int64_t total = 0;
  for (;;) {
    ssize_t n = ::read(STDIN_FILENO, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error("usage", "image import -: read stdin");
    if (n == 0) break;
    total += n;
    if (total > bound)
      return make_error("usage", "image import -: stdin holds more than " + std::to_string(bound) +
                                     " bytes, more than an archive within --max-bytes and --max-entries can be; "
                                     "nothing was stored (raise them, or import a file)");
    SBX_TRY(write_all(fd.get(), std::string_view(buf.data(), static_cast<std::size_t>(n)), "stdin's copy"));
  }
  if (total == 0) return make_error("usage", "image import -: stdin is empty; pipe an archive into it");
  return fd;
}

// The source as a path to read (stdin's copy through /proc/self/fd, its descriptor kept open).
struct OpenedSource {
  std::string path;
  bool is_dir = false;
  UniqueFd spooled;
};

Result<OpenedSource> open_source(const ImportSource& src, const std::string& text, const std::string& tmp,
                                 const ImportLimits& limits) {
  OpenedSource out;
  out.path = src.path;
  if (src.from_stdin) {
    auto fd = spool_stdin(tmp, max_archive_bytes(limits));
    if (!fd) return fd.error();
    out.spooled = std::move(*fd);
    out.path = "/proc/self/fd/" + std::to_string(out.spooled.get());
  }
  struct stat st;
  if (::stat(out.path.c_str(), &st) != 0) return sys_error("usage", "cannot import " + text);
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
    return make_error("usage", "cannot import " + text + ": not a directory or a tarball");
  out.is_dir = S_ISDIR(st.st_mode);
  return out;
}

// An error about stdin's copy names it as the caller knows it.
Error naming_stdin(Error e, const OpenedSource& source) {
  if (!source.spooled.ok()) return e;
  for (auto at = e.message.find(source.path); at != std::string::npos; at = e.message.find(source.path, at))
    e.message.replace(at, source.path.size(), "stdin");
  return e;
}

}  // namespace

Result<ImageRecord> ImageStore::import(const std::string& source_text, const std::string& name_text,
                                       const ImportProgress& progress, const ImportLimits& limits,
                                       const ImportOptions& options) {
  if (options.format != "auto" && options.format != "rootfs" && options.format != "oci-layout" &&
      options.format != "docker-archive")
    return make_error("usage",
                      "--format: expected auto, rootfs, oci-layout or docker-archive, got '" + options.format + "'");
  auto name = canonical_image_name(name_text);
  if (!name) return name.error();
  // The store must be traversable by the sandbox's root, which as host root is an unprivileged
  // mapped uid: 0755 directories on the way. An image's owner-only files stay so: their owners are
  // ids no host account has (image_manifest.hpp kOwnerIdBase).
  for (auto* sub : {"/tmp", "/sha256", "/names"}) SBX_TRY(ensure_dir(root_ + sub, 0755));
  const ImportSource src = parse_import_source(source_text);
  auto opened = open_source(src, source_text, root_ + "/tmp", limits);
  if (!opened) return opened.error();
  const std::string& source = opened->path;
  std::string tmpl = root_ + "/tmp/import-" + std::to_string(::getpid()) + "-XXXXXX";
  if (!::mkdtemp(tmpl.data())) return sys_error(kStage, "cannot create a staging directory in " + root_ + "/tmp");
  std::string staging = tmpl;
  struct Cleanup {
    std::string path;
    ~Cleanup() {
      if (!path.empty()) (void)remove_tree(path);
    }
  } cleanup{staging};
  ::chmod(staging.c_str(), 0755);
  std::string rootfs = staging + "/rootfs";
  if (::mkdir(rootfs.c_str(), 0755) != 0) return sys_error(kStage, "cannot create " + rootfs);

  auto layout = unpack_source(source, opened->is_dir, staging, progress, limits, options, src.tag);
  if (!layout) return naming_stdin(layout.error(), *opened);
  std::optional<ContainerImage> container;
  Result<ImportStats> stats = std::move(layout->stats);
  if (!layout->dir.empty())
    stats = apply_container_layers(*layout, source, rootfs, progress, limits, options, src.tag, container);
  if (!stats) return naming_stdin(stats.error(), *opened);
  ScanOptions hashing;
  if (progress)
    hashing.progress = [&](std::int64_t entries, std::int64_t bytes) { progress("hashing", entries, bytes); };
  auto scan = scan_tree(rootfs, hashing);
  if (!scan) return scan.error();
  std::string manifest = image_manifest_text(scan->entries, stats->owners_carried);
  std::string hex = sha256_hex(manifest);

  auto lk = lock();
  if (!lk) return lk.error();
  remove_abandoned_staging(root_ + "/tmp");  // under the lock: no removal is half-way
  std::string dir = root_ + "/sha256/" + hex;
  bool repaired = false;
  SBX_TRY(replace_modified_copy(hex, repaired));
  if (::access((dir + "/image.json").c_str(), F_OK) != 0) {
    (void)remove_tree(dir);  // a leftover of an interrupted import of the same content
    SBX_TRY(write_file_durable(staging + "/manifest", manifest, 0444));
    if (::rename(staging.c_str(), dir.c_str()) != 0) return sys_error(kStage, "cannot move the image into " + dir);
    cleanup.path.clear();
    // Taken once the tree is in its final place (a rename touches the ctime of what it moves).
    auto seal = compute_seal(dir + "/rootfs");
    if (!seal) return seal.error();
    json meta = image_meta(hex, source_text, *scan, *stats, *seal, container.has_value());
    // The source path is the caller's bytes: dump_json escapes it if it is not UTF-8 (json_io.hpp).
    SBX_TRY(write_file_durable(dir + "/image.json", dump_json(meta, 2) + "\n", 0644));
  }
  SBX_TRY(write_file_durable(root_ + "/names/" + *name, "sha256:" + hex + "\n", 0644));
  SBX_TRY(record_origin(dir, "sha256:" + hex, *name, container ? &*container : nullptr));
  auto record = resolve(*name);
  if (record) record->repaired = repaired;
  return record;
}

Status ImageStore::replace_modified_copy(const std::string& hex, bool& repaired) {
  const std::string dir = root_ + "/sha256/" + hex;
  if (::access((dir + "/image.json").c_str(), F_OK) != 0) return {};
  // The same content and owners are stored already. If that tree was modified since (its seal no
  // longer matches, which is what `sbx image verify` and every run check), the fresh tree
  // replaces it: re-importing is the repair seal_matches() tells the operator to make.
  auto stored = load(hex);
  const bool modified = !stored || !check_seal(*stored);
  if (!modified) return {};
  SBX_TRY(remove_stored(hex));  // as `image rm` does
  repaired = true;
  return {};
}

Result<std::vector<ImageRecord>> ImageStore::list() const {
  auto hexes = list_dir(root_ + "/sha256");
  if (!hexes) return hexes.error();
  std::vector<ImageRecord> out;
  for (auto& h : *hexes) {
    auto r = load(h);
    if (r) out.push_back(std::move(*r));
  }
  return out;
}

Result<std::string> ImageStore::find_digest(const std::string& ref) const {
  std::string prefix = ref.substr(7);
  if (!is_hex(prefix)) return make_error("usage", "bad image digest '" + ref + "': expected sha256:<hex>");
  auto hexes = list_dir(root_ + "/sha256");
  if (!hexes) return hexes.error();
  std::vector<std::string> hits;
  for (auto& h : *hexes)
    if (h.starts_with(prefix)) hits.push_back(h);
  if (hits.empty()) {
    // Never resolved to it: a v1 digest says nothing of owners, and two images may share it.
    std::vector<std::string> now;
    for (auto& h : *hexes)
      if (auto m = load(h); m && m->meta.value("digest_v1", std::string()).starts_with(ref)) now.push_back(m->digest);
    if (!now.empty())
      return make_error("usage", ref +
                                     " is the digest an older sbx gave this content before owners entered it; "
                                     "pin the image's digest now: " +
                                     join_words(now, ", ") + " (the same files; see 'sbx image inspect')");
    return make_error("usage", "no image " + ref + " in " + root_);
  }
  if (hits.size() > 1)
    return make_error("usage",
                      "image reference " + ref + " is ambiguous: matches " + std::to_string(hits.size()) + " images");
  return hits[0];
}

Result<ImageRecord> ImageStore::resolve(const std::string& ref) const {
  if (ref.starts_with("sha256:")) {
    auto hex = find_digest(ref);
    if (!hex) return hex.error();
    return load(*hex);
  }
  auto name = canonical_image_name(ref);
  if (!name) return name.error();
  auto d = read_file(root_ + "/names/" + *name);
  if (!d) return make_error("usage", "no image named " + *name + " in " + root_ + " (see 'sbx image ls')");
  std::string digest = trim(*d);
  if (!digest.starts_with("sha256:") || !is_hex(digest.substr(7)))
    return make_error(kStage, root_ + "/names/" + *name + " does not hold a digest");
  auto image = load(digest.substr(7));
  if (!image) return image.error();
  // The name's own origin (record_origin) over the latest import's.
  json& meta = image->meta;
  if (meta.contains("by_name") && meta["by_name"].is_object() && meta["by_name"].contains(*name)) {
    const json entry = meta["by_name"][*name];
    for (const char* key : {"format", "container", "config"}) {
      if (entry.contains(key)) meta[key] = entry[key];
      else meta.erase(key);
    }
  }
  return image;
}

Status ImageStore::remove_stored(const std::string& hex) {
  std::string aside = root_ + "/tmp/rm-" + hex;
  (void)remove_tree(aside);
  if (::rename((root_ + "/sha256/" + hex).c_str(), aside.c_str()) != 0)
    return sys_error(kStage, "cannot remove " + root_ + "/sha256/" + hex);
  return remove_tree(aside);
}

Result<std::vector<std::string>> ImageStore::remove(const std::string& ref) {
  auto image = resolve(ref);
  if (!image && ref.starts_with("sha256:")) {
    auto hex = find_digest(ref);
    auto lk = lock();
    if (!lk) return lk.error();
    // Under the lock: an import in progress writes its image.json before letting it go.
    if (hex && ::access((root_ + "/sha256/" + *hex + "/image.json").c_str(), F_OK) != 0) {
      SBX_TRY(remove_stored(*hex));
      return std::vector<std::string>{"deleted sha256:" + *hex + " (incomplete: no image.json)"};
    }
  }
  if (!image) return image.error();
  auto lk = lock();
  if (!lk) return lk.error();
  std::vector<std::string> removed;
  std::vector<std::string> drop = image->names;
  if (!ref.starts_with("sha256:")) drop = {*canonical_image_name(ref)};
  for (auto& n : drop) {
    if (::unlink((root_ + "/names/" + n).c_str()) != 0 && errno != ENOENT)
      return sys_error(kStage, "cannot remove name " + n);
    removed.push_back("untagged " + n);
  }
  if (drop.size() == image->names.size()) {
    SBX_TRY(remove_stored(image->digest.substr(7)));
    removed.push_back("deleted " + image->digest);
  }
  return removed;
}

Status seal_matches(const ImageRecord& image, const Seal& taken, const std::string& ref) {
  if (taken.digest == image.meta.value("/seal/digest"_json_pointer, std::string())) return {};
  return make_error(kStage, "image " + image.digest + (ref.empty() ? "" : " (" + ref + ")") +
                                " was modified in the store (" + image.rootfs +
                                "): its seal no longer matches; see 'sbx image verify --full " +
                                image.digest.substr(0, 19) + "', then re-import it");
}

Status ImageStore::check_seal(const ImageRecord& image) const {
  auto seal = compute_seal(image.rootfs);
  if (!seal) return seal.error();
  return seal_matches(image, *seal, "");
}

Result<VerifyReport> ImageStore::verify(const ImageRecord& image, bool full, const ImportProgress& progress) const {
  VerifyReport r;
  r.seal_expected = image.meta.value("/seal/digest"_json_pointer, std::string());
  auto seal = compute_seal(image.rootfs);
  if (!seal) return seal.error();
  r.seal_actual = seal->digest;
  r.seal_ok = r.seal_actual == r.seal_expected;
  if (!full) return r;
  r.full = true;
  ScanOptions opts;
  if (progress) opts.progress = [&](std::int64_t entries, std::int64_t bytes) { progress("hashing", entries, bytes); };
  auto scan = scan_tree(image.rootfs, opts);
  if (!scan) return scan.error();
  auto want = read_file(image.dir + "/manifest");
  if (!want) return want.error();
  std::string have = manifest_text_like(*want, scan->entries, owners_carried(image.meta));
  bool manifest_intact = sha256_hex(*want) == image.digest.substr(7);
  r.content_ok = manifest_intact && have == *want;
  if (!manifest_intact) r.differences.push_back("the stored manifest does not hash to the image digest");
  for (auto& d : manifest_differences(*want, have)) r.differences.push_back(d);
  return r;
}

}  // namespace sbx
