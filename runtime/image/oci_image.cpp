#include "runtime/image/oci_image.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <utility>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/openat2.hpp"
#include "runtime/base/sha256.hpp"

namespace sbx {
namespace {

using nlohmann::json;
constexpr const char* kStage = "image";
constexpr std::size_t kMaxDocBytes = 4u << 20;  // an index, manifest or config
constexpr int kMaxIndexDepth = 4;
constexpr std::size_t kMaxLayers = 256;  // Docker's own limit is 125 (overlayfs lower layers)

// `rel` beneath dirfd and only a regular file. RESOLVE_BENEATH keeps every step, symlinks
// included, inside the layout (the layout may come from a hostile archive, whose "blobs" could
// point anywhere; an absolute or escaping symlink is refused), while the relative symlinks a
// classic `docker save` writes for a layer shared by two images still resolve.
Result<UniqueFd> open_beneath(int dirfd, const std::string& rel, const std::string& dir) {
  // The relative symlinks of `docker save` have a "..": EAGAIN is retried (base/openat2.hpp).
  int fd = openat2_retrying(dirfd, rel.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
                            RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS);
  if (fd < 0) return sys_error(kStage, "cannot open " + rel + " in " + dir);
  UniqueFd f(fd);
  struct stat st;
  if (::fstat(f.get(), &st) != 0) return sys_error(kStage, "cannot stat " + rel + " in " + dir);
  if (!S_ISREG(st.st_mode)) return make_error(kStage, rel + " in " + dir + " is not a regular file");
  return f;
}

Result<json> parse_doc(const std::string& text, const std::string& what) {
  return parse_json_doc(text, JsonBounds{kMaxDocBytes}, kStage, what);
}

// A blob named by an OCI descriptor, opened beneath the layout, its size checked; `hex` gets its
// digest. Its content is checked against the digest by whoever reads it, on the very bytes used
// (read_doc_blob hashes the text it parses, the importer each layer as it extracts it): hashing
// first and reading again later would trust a layout on FUSE, or one being written, twice.
Result<UniqueFd> open_blob(int dirfd, const std::string& dir, const json& desc, const std::string& what,
                           std::string& hex) {
  if (!desc.is_object() || !desc.contains("digest") || !desc["digest"].is_string())
    return make_error(kStage, what + " in " + dir + " has no digest");
  const std::string digest = desc["digest"].get<std::string>();
  if (!digest.starts_with("sha256:"))
    return make_error(kStage,
                      what + " in " + dir + ": unsupported digest '" + json_excerpt(digest) + "' (sbx checks sha256)");
  hex = digest.substr(7);
  if (!is_sha256_hex(hex))
    return make_error(kStage, what + " in " + dir + ": malformed digest " + json_excerpt(digest));
  auto fd = open_beneath(dirfd, "blobs/sha256/" + hex, dir);
  if (!fd) return fd.error();
  if (desc.contains("size") && desc["size"].is_number_integer()) {
    struct stat st;
    if (::fstat(fd->get(), &st) == 0 && st.st_size != desc["size"].get<std::int64_t>())
      return make_error(kStage, what + " " + digest + " in " + dir + " is " + std::to_string(st.st_size) +
                                    " bytes, its descriptor says " + std::to_string(desc["size"].get<std::int64_t>()));
  }
  return fd;
}

Error digest_mismatch(const std::string& what, const std::string& dir, const std::string& expected,
                      const std::string& got) {
  return make_error(kStage, what + " " + expected + " in " + dir +
                                " does not match its digest (its content is sha256:" + got +
                                "); the layout is corrupt or was tampered with");
}

// A JSON document at `rel` beneath the layout (index.json, manifest.json, a classic config).
Result<json> read_doc_at(int dirfd, const std::string& rel, const std::string& dir, std::string* text_out = nullptr) {
  auto fd = open_beneath(dirfd, rel, dir);
  if (!fd) return fd.error();
  auto text = read_bounded_fd(fd->get(), kMaxDocBytes, kStage, rel + " in " + dir);
  if (!text) return text.error();
  if (text_out) *text_out = *text;
  return parse_doc(*text, rel + " in " + dir);
}

Result<json> read_doc_blob(int dirfd, const std::string& dir, const json& desc, const std::string& what) {
  std::string hex;
  auto fd = open_blob(dirfd, dir, desc, what, hex);
  if (!fd) return fd.error();
  auto text = read_bounded_fd(fd->get(), kMaxDocBytes, kStage, what + " in " + dir);
  if (!text) return text.error();
  // The text that is parsed is the text that is hashed.
  if (std::string got = sha256_hex(*text); got != hex) return digest_mismatch(what, dir, "sha256:" + hex, got);
  return parse_doc(*text, what + " in " + dir);
}

struct Platform {
  std::string os, arch, variant;
  std::string text() const { return os + "/" + arch + (variant.empty() ? "" : "/" + variant); }
};

Result<Platform> parse_platform(const std::string& s) {
  Platform p;
  auto a = s.find('/');
  if (a == std::string::npos || a == 0)
    return make_error("usage", "--platform: expected OS/ARCH[/VARIANT], got '" + s + "'");
  p.os = s.substr(0, a);
  auto b = s.find('/', a + 1);
  p.arch = s.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
  if (b != std::string::npos) p.variant = s.substr(b + 1);
  if (p.arch.empty()) return make_error("usage", "--platform: expected OS/ARCH[/VARIANT], got '" + s + "'");
  return p;
}

std::string str_of(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

bool platform_matches(const json& p, const Platform& want) {
  return str_of(p, "os") == want.os && str_of(p, "architecture") == want.arch &&
         (want.variant.empty() || str_of(p, "variant") == want.variant);
}

std::string platform_of(const json& p) {
  std::string v = str_of(p, "variant");
  return str_of(p, "os") + "/" + str_of(p, "architecture") + (v.empty() ? "" : "/" + v);
}

bool is_index_type(const std::string& mt) {
  return mt == "application/vnd.oci.image.index.v1+json" ||
         mt == "application/vnd.docker.distribution.manifest.list.v2+json";
}

bool is_manifest_type(const std::string& mt) {
  return mt == "application/vnd.oci.image.manifest.v1+json" ||
         mt == "application/vnd.docker.distribution.manifest.v2+json";
}

bool is_layer_type(const std::string& mt) {
  for (const char* ok :
       {"application/vnd.oci.image.layer.v1.tar", "application/vnd.oci.image.layer.v1.tar+gzip",
        "application/vnd.oci.image.layer.v1.tar+zstd", "application/vnd.oci.image.layer.nondistributable.v1.tar",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
        "application/vnd.docker.image.rootfs.diff.tar.gzip", "application/vnd.docker.image.rootfs.diff.tar"})
    if (mt == ok) return true;
  return false;
}

// Finds the manifest for `want` under an index: nested indexes are followed; a descriptor
// without a platform matches only when nothing with one does.
// Each nested index is read once (a hostile index may name one thousands of times, at every level)
// and at most kMaxDescriptors descriptors are looked at in all.
struct IndexWalk {
  std::set<std::string> visited;  // digests of the nested indexes read
  std::vector<std::string> seen;  // platforms offered, for the error when none matches
  std::size_t descriptors = 0;
};
constexpr std::size_t kMaxDescriptors = 4096;

Status find_manifest(int dirfd, const std::string& dir, const json& index, const Platform& want, int depth,
                     std::optional<json>& found, IndexWalk& walk) {
  if (!index.is_object() || !index.contains("manifests") || !index["manifests"].is_array())
    return make_error(kStage, "the index in " + dir + " has no \"manifests\" array");
  std::optional<json> untagged;
  for (const json& d : index["manifests"]) {
    if (++walk.descriptors > kMaxDescriptors)
      return make_error(
          kStage, "the indexes in " + dir + " list more than " + std::to_string(kMaxDescriptors) + " descriptors");
    const std::string mt = str_of(d, "mediaType");
    if (is_index_type(mt)) {
      if (depth >= kMaxIndexDepth)
        return make_error(kStage, "indexes in " + dir + " nest deeper than " + std::to_string(kMaxIndexDepth));
      if (!walk.visited.insert(str_of(d, "digest")).second) continue;
      auto nested = read_doc_blob(dirfd, dir, d, "index");
      if (!nested) return nested.error();
      SBX_TRY(find_manifest(dirfd, dir, *nested, want, depth + 1, found, walk));
      if (found) return {};
      continue;
    }
    if (!is_manifest_type(mt)) continue;  // attestations, signatures, artifacts
    if (d.contains("platform")) {
      if (walk.seen.size() < 32) walk.seen.push_back(platform_of(d["platform"]));
      if (platform_matches(d["platform"], want)) {
        found = d;
        return {};
      }
    } else if (!untagged) {
      untagged = d;
    }
  }
  if (!found && untagged) found = untagged;
  return {};
}

// Env, Entrypoint, Cmd, WorkingDir and User from the config, each only if it has the right type.
json run_defaults_of(const json& config) {
  json out = json::object();
  if (!config.is_object() || !config.contains("config") || !config["config"].is_object()) return out;
  const json& c = config["config"];
  auto strings = [&](const char* key) {
    if (!c.contains(key) || !c[key].is_array()) return;
    for (auto& v : c[key])
      if (!v.is_string()) return;
    if (!c[key].empty()) out[key] = c[key];
  };
  strings("Env");
  strings("Entrypoint");
  strings("Cmd");
  for (const char* key : {"WorkingDir", "User"})
    if (c.contains(key) && c[key].is_string() && !c[key].get<std::string>().empty()) out[key] = c[key];
  return out;
}

Status check_config_platform(const json& config, const Platform& want, const std::string& dir, std::string& platform) {
  platform = platform_of(config);
  if (!platform_matches(config, want))
    return make_error(kStage, "the image in " + dir + " is for " + platform + ", not " + want.text() + " (--platform)");
  return {};
}

Status keep_layer(ContainerImage& img, UniqueFd fd, std::string digest) {
  img.layers.push_back("/proc/self/fd/" + std::to_string(fd.get()));
  img.fds.push_back(std::move(fd));
  img.layer_digests.push_back(std::move(digest));
  return {};
}

// Tags: an OCI layout names each image it holds by its index descriptor's kOciRefName
// annotation (skopeo's oci:DIR:TAG writes and selects it); a docker archive by its RepoTags. A tag
// asked for matches a name exactly, or else the tag part of a full reference ("3.19" for
// "docker.io/library/alpine:3.19"), which must then be unique.
constexpr std::size_t kMaxTagsListed = 8;  // in a message: the names are the archive's, unbounded

std::string tag_list(const std::vector<std::string>& tags) {
  std::string out;
  for (std::size_t i = 0; i < tags.size() && i < kMaxTagsListed; ++i)
    out += (i ? ", " : "") + json_excerpt(json(tags[i]), 64);
  if (tags.size() > kMaxTagsListed) out += ", and " + std::to_string(tags.size() - kMaxTagsListed) + " more";
  return out;
}

// The names in `names` (distinct) that `tag` selects.
std::vector<std::string> tags_matching(const std::vector<std::string>& names, const std::string& tag) {
  std::vector<std::string> exact, suffix;
  for (auto& n : names) {
    if (n == tag) exact.push_back(n);
    else if (n.size() > tag.size() && n.ends_with(tag) && n[n.size() - tag.size() - 1] == ':') suffix.push_back(n);
  }
  return exact.empty() ? suffix : exact;
}

// Which of `names` (distinct, as the archive lists them) the import takes: the one `tag` selects,
// or with no tag the only one; "" when there are no names to choose from.
Result<std::string> choose_tag(const std::vector<std::string>& names, const std::string& tag, const std::string& dir) {
  if (tag.empty()) {
    if (names.size() <= 1) return names.empty() ? std::string() : names[0];
    return make_error("usage", dir + " holds " + std::to_string(names.size()) + " tagged images (" + tag_list(names) +
                                   "); choose one by importing " + dir + ":TAG");
  }
  auto hits = tags_matching(names, tag);
  if (hits.empty())
    return make_error("usage", "no image tagged " + json_excerpt(json(tag), 64) + " in " + dir +
                                   (names.empty() ? " (it names no tags)" : " (it has " + tag_list(names) + ")"));
  if (hits.size() > 1)
    return make_error("usage", "the tag " + json_excerpt(json(tag), 64) + " matches " + tag_list(hits) + " in " + dir +
                                   "; give the full name after the ':'");
  return hits[0];
}

// index.json reduced to the descriptors of the tagged image chosen (choose_tag); an index whose
// descriptors carry no tag is kept whole (a multi-platform index written without names).
Result<json> select_tagged(const json& index, const std::string& tag, const std::string& dir) {
  if (!index.is_object() || !index.contains("manifests") || !index["manifests"].is_array()) return index;
  std::vector<std::string> names;
  auto name_of = [](const json& d) {
    return d.is_object() && d.contains("annotations") ? str_of(d["annotations"], kOciRefName) : std::string();
  };
  for (const json& d : index["manifests"]) {
    std::string n = name_of(d);
    if (!n.empty() && std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  auto chosen = choose_tag(names, tag, dir);
  if (!chosen) return chosen.error();
  if (chosen->empty()) return index;
  json out = index;
  out["manifests"] = json::array();
  for (const json& d : index["manifests"])
    if (name_of(d) == *chosen) out["manifests"].push_back(d);
  return out;
}

Result<ContainerImage> resolve_oci(int dirfd, const std::string& dir, const Platform& want, const std::string& tag) {
  auto whole = read_doc_at(dirfd, "index.json", dir);
  if (!whole) return whole.error();
  auto index = select_tagged(*whole, tag, dir);
  if (!index) return index.error();
  std::optional<json> desc;
  IndexWalk walk;
  SBX_TRY(find_manifest(dirfd, dir, *index, want, 0, desc, walk));
  if (!desc) {
    std::string has;
    for (auto& p : walk.seen) has += (has.empty() ? "" : ", ") + p;
    return make_error(kStage,
                      "no image for " + want.text() + " in " + dir + (has.empty() ? "" : " (it has " + has + ")"));
  }
  auto manifest = read_doc_blob(dirfd, dir, *desc, "manifest");
  if (!manifest) return manifest.error();
  if (!manifest->contains("config") || !(*manifest)["layers"].is_array())
    return make_error(kStage, "the manifest " + str_of(*desc, "digest") + " in " + dir + " has no config or no layers");
  auto config = read_doc_blob(dirfd, dir, (*manifest)["config"], "config");
  if (!config) return config.error();
  ContainerImage img;
  img.format = "oci-layout";
  img.manifest_digest = str_of(*desc, "digest");
  img.config_digest = str_of((*manifest)["config"], "digest");
  SBX_TRY(check_config_platform(*config, want, dir, img.platform));
  img.run_defaults = run_defaults_of(*config);
  if ((*manifest)["layers"].size() > kMaxLayers)
    return make_error(kStage, "the manifest in " + dir + " lists " + std::to_string((*manifest)["layers"].size()) +
                                  " layers; sbx applies at most " + std::to_string(kMaxLayers));
  for (const json& layer : (*manifest)["layers"]) {
    const std::string mt = str_of(layer, "mediaType");
    if (!is_layer_type(mt))
      return make_error(kStage, "layer " + str_of(layer, "digest") + " in " + dir + " has media type '" +
                                    json_excerpt(mt) + "', which sbx cannot apply (encrypted or not a tar)");
    std::string hex;
    auto fd = open_blob(dirfd, dir, layer, "layer", hex);
    if (!fd) return fd.error();
    SBX_TRY(keep_layer(img, std::move(*fd), "sha256:" + hex));
  }
  return img;
}

// A classic `docker save`: manifest.json lists the config file and the layer tars; each layer is
// checked against the config's rootfs.diff_ids (the SHA-256 of the uncompressed layer), or
// against its own name when it is stored as blobs/sha256/<hex>.
// The entry of a docker archive's manifest.json that `tag` selects among their RepoTags (the
// only entry when no tag is given).
Result<json> docker_entry(const json& list, const std::string& tag, const std::string& dir) {
  std::vector<std::string> names;
  for (const json& e : list)
    if (e.is_object() && e.contains("RepoTags") && e["RepoTags"].is_array())
      for (const json& t : e["RepoTags"])
        if (t.is_string() && std::find(names.begin(), names.end(), t.get<std::string>()) == names.end())
          names.push_back(t.get<std::string>());
  if (tag.empty() && list.size() == 1) return list[0];
  if (tag.empty() && names.size() <= 1)
    return make_error("usage", "the archive " + dir + " holds " + std::to_string(list.size()) +
                                   " images; sbx imports one (save them one at a time)");
  auto chosen = choose_tag(names, tag, dir);
  if (!chosen) return chosen.error();
  for (const json& e : list)
    if (e.is_object() && e.contains("RepoTags") && e["RepoTags"].is_array())
      for (const json& t : e["RepoTags"])
        if (t.is_string() && t.get<std::string>() == *chosen) return e;
  return make_error("usage", "the archive " + dir + " holds " + std::to_string(list.size()) +
                                 " images; sbx imports one (save them one at a time)");
}

Result<ContainerImage> resolve_docker(int dirfd, const std::string& dir, const Platform& want, const std::string& tag) {
  auto list = read_doc_at(dirfd, "manifest.json", dir);
  if (!list) return list.error();
  if (!list->is_array() || list->empty()) return make_error(kStage, "manifest.json in " + dir + " lists no image");
  auto chosen = docker_entry(*list, tag, dir);
  if (!chosen) return chosen.error();
  const json& entry = *chosen;
  const std::string config_path = str_of(entry, "Config");
  if (config_path.empty() || !entry.contains("Layers") || !entry["Layers"].is_array())
    return make_error(kStage, "manifest.json in " + dir + " has no Config or Layers");
  std::string ctext;
  auto config = read_doc_at(dirfd, config_path, dir, &ctext);
  if (!config) return config.error();
  const std::string config_hex = sha256_hex(ctext);
  // The config's file is named by its digest ("<hex>.json", or blobs/sha256/<hex>).
  std::string base = config_path.substr(config_path.rfind('/') + 1);
  if (base.ends_with(".json")) base.resize(base.size() - 5);
  if (is_sha256_hex(base) && base != config_hex)
    return make_error(kStage,
                      config_path + " in " + dir + " does not match its name (content sha256:" + config_hex + ")");
  const json* diff_ids = nullptr;
  if (config->contains("rootfs") && (*config)["rootfs"].is_object() && (*config)["rootfs"].contains("diff_ids") &&
      (*config)["rootfs"]["diff_ids"].is_array())
    diff_ids = &(*config)["rootfs"]["diff_ids"];
  if (!diff_ids || diff_ids->size() != entry["Layers"].size())
    return make_error(kStage, "the config in " + dir + " does not list one diff_id per layer");
  ContainerImage img;
  img.format = "docker-archive";
  img.config_digest = "sha256:" + config_hex;
  SBX_TRY(check_config_platform(*config, want, dir, img.platform));
  img.run_defaults = run_defaults_of(*config);
  if (entry["Layers"].size() > kMaxLayers)
    return make_error(kStage, "manifest.json in " + dir + " lists " + std::to_string(entry["Layers"].size()) +
                                  " layers; sbx applies at most " + std::to_string(kMaxLayers));
  for (std::size_t i = 0; i < entry["Layers"].size(); ++i) {
    const std::string path = entry["Layers"][i].is_string() ? entry["Layers"][i].get<std::string>() : "";
    auto fd = open_beneath(dirfd, path, dir);
    if (!fd) return fd.error();
    // Checked while it is extracted (see open_blob): the uncompressed layer's diff_id, or its
    // own name when it is stored as blobs/sha256/<hex>.
    std::string expect = (*diff_ids)[i].is_string() ? (*diff_ids)[i].get<std::string>() : "";
    if (path.starts_with("blobs/sha256/")) expect = "sha256:" + path.substr(13);
    if (!expect.starts_with("sha256:") || !is_sha256_hex(expect.substr(7)))
      return make_error(kStage, "layer " + path + " in " + dir + ": no sha256 digest to check it against (" +
                                    json_excerpt(expect) + ")");
    SBX_TRY(keep_layer(img, std::move(*fd), expect));
  }
  return img;
}

bool exists_beneath(int dirfd, const char* name) {
  struct stat st;
  return ::fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::optional<std::string> container_format(const std::string& dir) {
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.get() < 0) return std::nullopt;
  if (exists_beneath(d.get(), "oci-layout") && exists_beneath(d.get(), "index.json")) return "oci-layout";
  if (exists_beneath(d.get(), "manifest.json") && exists_beneath(d.get(), "version") &&
      !exists_beneath(d.get(), "oci-layout"))
    return "docker-dir";
  if (exists_beneath(d.get(), "manifest.json") && !exists_beneath(d.get(), "oci-layout")) return "docker-archive";
  return std::nullopt;
}

Result<ContainerImage> resolve_container_image(const std::string& dir, const std::string& platform,
                                               const std::string& tag) {
  auto want = parse_platform(platform);
  if (!want) return want.error();
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.get() < 0) return sys_error(kStage, "cannot open " + dir);
  auto format = container_format(dir);
  if (!format) return make_error(kStage, dir + " is neither an OCI image layout nor a docker save archive");
  // Its manifest.json is one image's registry manifest, its blobs are named by bare hex digests:
  // a third layout, which skopeo converts losslessly into one sbx reads.
  if (*format == "docker-dir")
    return make_error("usage", dir +
                                   " is a containers-image \"dir\" layout (manifest.json and version, as written by "
                                   "'podman save --format docker-dir' or 'skopeo copy ... dir:" +
                                   dir + "'), which sbx does not import: convert it with 'skopeo copy dir:" + dir +
                                   " oci:NEWDIR:latest' and import NEWDIR, or save the image with 'podman save "
                                   "--format oci-archive' (or oci-dir, or docker-archive)");
  return *format == "oci-layout" ? resolve_oci(d.get(), dir, *want, tag) : resolve_docker(d.get(), dir, *want, tag);
}

}  // namespace sbx
