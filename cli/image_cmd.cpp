// sbx image import DIR|TARBALL|-[:TAG] --name NAME[:TAG] | ls | inspect REF | rm REF... | verify REF [--full]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "cli/commands.hpp"
#include "runtime/image/image_store.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/paths.hpp"
#include "runtime/base/progress_line.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/base/units.hpp"
#include "runtime/image/image_import.hpp"
#include "runtime/linux/userns.hpp"

namespace sbx::cli {
namespace {

std::string short_digest(const std::string& d) { return d.substr(0, 7 + 12); }

// The flags of every image subcommand (CLI11 binds to them for the process's life).
struct ImageFlags {
  std::string source, name, ref;
  std::vector<std::string> refs;
  bool full = false, quiet = false, ls_json = false, as_json = false;  // as_json: import and verify
  std::string max_bytes_text, max_entries_text;
  ImportOptions import_options;
};

// --max-bytes, --max-entries; the usage error's status when one is malformed.
std::optional<int> import_limits(const ImageFlags& f, ImportLimits& limits) {
  if (!f.max_bytes_text.empty()) {
    auto b = parse_size_bytes(f.max_bytes_text);
    if (!b || *b <= 0)
      return usage_error("image import: --max-bytes: expected a size such as 512M or 8G, got '" + f.max_bytes_text +
                         "'");
    limits.max_bytes = *b;
  }
  if (!f.max_entries_text.empty()) {
    char* end = nullptr;
    long long n = std::strtoll(f.max_entries_text.c_str(), &end, 10);
    if (!end || *end || n <= 0)
      return usage_error("image import: --max-entries: expected a positive count, got '" + f.max_entries_text + "'");
    limits.max_entries = n;
  }
  return std::nullopt;
}

// "imported NAME DIGEST (N entries, SIZE; what was normalised; the container's format)".
void print_imported(const ImageFlags& f, ImageRecord& res) {
  auto* r = &res;
  auto& m = r->meta;
  std::int64_t dropped = m["normalised"]["dropped"].get<std::int64_t>();
  std::printf("imported %s %s (%lld entries, %s", (*canonical_image_name(f.name)).c_str(), r->digest.c_str(),
              static_cast<long long>(m["entries"].get<std::int64_t>()),
              human_bytes(m["bytes"].get<std::int64_t>()).c_str());
  if (dropped) std::printf("; dropped %lld device node(s)/FIFO(s)/socket(s)", static_cast<long long>(dropped));
  std::int64_t special = m["normalised"]["special_bits_cleared"].get<std::int64_t>();
  if (special) std::printf("; cleared setuid/setgid/sticky on %lld", static_cast<long long>(special));
  if (m.contains("container"))
    std::printf("; %s %s, %zu layer(s)", m["format"].get<std::string>().c_str(),
                printable(m["container"]["platform"].get<std::string>()).c_str(), m["container"]["layers"].size());
  std::printf(")\n");
  if (r->repaired)
    std::printf("repaired %s: the stored copy had been modified (its seal did not match) and was replaced\n",
                r->digest.c_str());
  std::int64_t outside = m.contains("owners") ? m["owners"].value("outside_range", std::int64_t{0}) : 0;
  if (outside)
    std::printf("%lld entr%s owned by an id past %u kept the importer's owner: a run maps image ids 0-%u only\n",
                static_cast<long long>(outside), outside == 1 ? "y" : "ies", kOwnerIdRange - 1, kOwnerIdRange - 1);
}

int image_import(const ImageFlags& f, ImageStore& store) {
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  ProgressLine line("importing " + printable(f.source), stderr, tty);
  ImportProgress progress = [&](const char* phase, std::int64_t entries, std::int64_t bytes) {
    if (!f.quiet) line.update(phase, entries, bytes);
  };
  ImportLimits limits;
  if (auto rc = import_limits(f, limits)) return *rc;
  // Owners are carried where a run can map them: host root in the host's user namespace, whose
  // runs read the store through an idmapped mount (runtime/linux/mounts.hpp make_idmapped_image).
  limits.carry_owners = ::geteuid() == 0 && in_initial_user_namespace();
  auto r = store.import(f.source, f.name, progress, limits, f.import_options);
  line.finish();
  if (!r) return usage_error(r.error().describe());
  if (f.as_json) {
    // The image's record as `image inspect` prints it, and what this import did.
    nlohmann::json j = r->meta;
    j["digest"] = r->digest;
    j["name"] = *canonical_image_name(f.name);
    j["names"] = r->names;
    j["repaired"] = r->repaired;
    std::printf("%s\n", dump_json(j, 2, {}, true).c_str());  // ASCII (json_io.hpp)
    return 0;
  }
  if (f.quiet) {
    std::printf("%s\n", r->digest.c_str());
    return 0;
  }
  print_imported(f, *r);
  return 0;
}

int image_ls(const ImageFlags& f, ImageStore& store) {
  auto all = store.list();
  if (!all) return usage_error(all.error().describe());
  if (f.ls_json) {
    nlohmann::json arr = nlohmann::json::array();
    for (auto& r : *all)
      arr.push_back({{"digest", r.digest},
                     {"names", r.names},
                     {"entries", r.meta.value("entries", 0LL)},
                     {"bytes", r.meta.value("bytes", 0LL)},
                     {"imported_at", r.meta.value("imported_at", std::string())}});
    std::printf("%s\n", dump_json(arr, 2, {}, true).c_str());  // ASCII: safe on a terminal (json_io.hpp)
    return 0;
  }
  std::printf("%-32s %-19s %8s %10s  %s\n", "NAME", "DIGEST", "ENTRIES", "SIZE", "IMPORTED");
  for (auto& r : *all) {
    std::vector<std::string> names = r.names.empty() ? std::vector<std::string>{"<none>"} : r.names;
    for (auto& n : names)
      std::printf("%-32s %-19s %8lld %10s  %s\n", printable(n).c_str(), printable(short_digest(r.digest)).c_str(),
                  static_cast<long long>(r.meta.value("entries", 0LL)), human_bytes(r.meta.value("bytes", 0LL)).c_str(),
                  printable(r.meta.value("imported_at", std::string())).c_str());
  }
  return 0;
}

int image_inspect(const ImageFlags& f, ImageStore& store) {
  auto r = store.resolve(f.ref);
  if (!r) return usage_error(r.error().describe());
  nlohmann::json j = r->meta;
  j["names"] = r->names;
  j["rootfs"] = r->rootfs;
  j["manifest"] = r->dir + "/manifest";
  std::printf("%s\n", dump_json(j, 2, {}, true).c_str());  // for a terminal: ASCII (json_io.hpp)
  return 0;
}

int image_rm(const ImageFlags& f, ImageStore& store) {
  for (auto& one : f.refs) {
    auto r = store.remove(one);
    if (!r) return usage_error(r.error().describe());
    for (auto& line : *r) std::printf("%s\n", printable(line).c_str());
  }
  return 0;
}

int image_verify(const ImageFlags& f, ImageStore& store) {
  auto r = store.resolve(f.ref);
  if (!r) return usage_error(r.error().describe());
  // Re-hashing a large image takes a while: the same progress line as import (hashing phase).
  ProgressLine line("verifying " + printable(f.ref), stderr, ::isatty(STDERR_FILENO) == 1);
  auto v = store.verify(*r, f.full, [&](const char* phase, std::int64_t entries, std::int64_t bytes) {
    line.update(phase, entries, bytes);
  });
  line.finish();
  if (!v) return usage_error(v.error().describe());
  if (f.as_json) {
    nlohmann::json j = {{"digest", r->digest},
                        {"ok", v->ok()},
                        {"seal_ok", v->seal_ok},
                        {"full", v->full},
                        {"content_ok", v->full ? nlohmann::json(v->content_ok) : nlohmann::json(nullptr)},
                        {"differences", v->differences}};
    std::printf("%s\n", dump_json(j, 2, {}, true).c_str());
    return v->ok() ? 0 : 1;
  }
  std::printf("%s seal: %s\n", r->digest.c_str(), v->seal_ok ? "ok" : "MISMATCH (the stored tree was modified)");
  if (v->full) {
    std::printf("%s content: %s\n", r->digest.c_str(), v->content_ok ? "ok (every file re-hashed)" : "MISMATCH");
    for (auto& d : v->differences) std::printf("  %s\n", printable(d).c_str());
  }
  return v->ok() ? 0 : 1;
}

}  // namespace

void add_image_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out) {
  auto* image = app.add_subcommand("image", "Manage the content-addressed image store (base images for --image)");
  image->require_subcommand(1);
  static ImageFlags f;
  auto* import = image->add_subcommand(
      "import",
      "Import a directory or a tarball (plain, gzip, xz, zstd, bzip2): a root file system, an OCI image layout or a docker save archive");
  import
      ->add_option("source", f.source,
                   "Directory or tarball to import; '-' reads the tarball from stdin; DIR:TAG (or -:TAG) chooses "
                   "one of the tagged images of an OCI layout or docker archive")
      ->required();
  import->add_option("--name", f.name, "NAME[:TAG] to give the image (tag defaults to latest)")->required();
  import->add_flag("-q,--quiet", f.quiet, "Print only the digest, no progress");
  import->add_flag("--json", f.as_json,
                   "Print the imported image's record as one JSON object (digest, name, names, entries, bytes, "
                   "repaired, ...)");
  import->add_option("--format", f.import_options.format,
                     "auto (default), rootfs, oci-layout or docker-archive: what SOURCE is");
  import->add_option("--platform", f.import_options.platform,
                     "OS/ARCH[/VARIANT] to take from a multi-platform image (default linux/amd64)");
  import->add_option("--max-bytes", f.max_bytes_text, "Stop and store nothing past this much file data (default 4G)");
  import->add_option("--max-entries", f.max_entries_text,
                     "Stop and store nothing past this many entries (default 1000000)");
  auto* ls = image->add_subcommand("ls", "List stored images: names, digest, size, import time");
  ls->add_flag("--json", f.ls_json, "Print a JSON array (one object per image) for scripts");
  auto* inspect = image->add_subcommand("inspect", "Print an image's record (digest, names, counts, seal) as JSON");
  inspect->add_option("ref", f.ref, "NAME[:TAG] or sha256:<hex prefix>")->required();
  auto* rm = image->add_subcommand("rm", "Remove a name (the image goes with its last name) or, by digest, an image");
  rm->add_option("refs", f.refs, "NAME[:TAG] or sha256:<hex prefix>")->required();
  auto* verify =
      image->add_subcommand("verify", "Check an image's seal; with --full re-hash its content against the manifest");
  verify->add_option("ref", f.ref, "NAME[:TAG] or sha256:<hex prefix>")->required();
  verify->add_flag("--full", f.full, "Re-hash every file and compare with the manifest");
  verify->add_flag("--json", f.as_json,
                   "Print one JSON object: digest, ok, seal_ok, full, content_ok (null without --full), differences");

  out.push_back({image, [&g, import, ls, inspect, rm, verify]() -> int {
                   ImageStore store(resolve_dirs(g.state_dir).images);
                   if (import->parsed()) return image_import(f, store);
                   if (ls->parsed()) return image_ls(f, store);
                   if (inspect->parsed()) return image_inspect(f, store);
                   if (rm->parsed()) return image_rm(f, store);
                   if (verify->parsed()) return image_verify(f, store);
                   return usage_error("image: expected import, ls, inspect, rm or verify");
                 }});
}

}  // namespace sbx::cli
