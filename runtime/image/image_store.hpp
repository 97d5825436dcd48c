#pragma once
// The content-addressed image store (man/sbx.1, FILES):
//
//   <images>/sha256/<hex>/rootfs/     the normalised tree: the overlay's lower layer, never written
//   <images>/sha256/<hex>/manifest    its canonical manifest; <hex> = sha256(manifest)
//   <images>/sha256/<hex>/image.json  source, import time, counts, what was dropped, and the seal
//   <images>/names/<name>:<tag>       "sha256:<hex>": the names pointing at an image
//   <images>/tmp/                     staging of imports in progress (same file system: rename)
//
// References: NAME[:TAG] (tag "latest" by default) or sha256:<hex> with any unique prefix.
// Imports and removals hold an exclusive flock on <images>/.lock; readers need none because every
// file is replaced by rename.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/image/image_import.hpp"
#include "runtime/image/image_seal.hpp"
#include "runtime/image/oci_image.hpp"

namespace sbx {

struct ImageRecord {
  std::string digest;              // "sha256:<hex>"
  std::string dir;                 // <images>/sha256/<hex>
  std::string rootfs;              // dir + "/rootfs"
  std::vector<std::string> names;  // "name:tag", sorted
  nlohmann::json meta;             // image.json
  bool repaired = false;           // import: a modified stored copy of this content was replaced
};

struct VerifyReport {
  bool seal_ok = false;
  std::string seal_expected, seal_actual;
  bool full = false;  // content was re-hashed
  bool content_ok = false;
  std::vector<std::string> differences;  // "changed: PATH", "missing: PATH", "added: PATH"
  bool ok() const { return seal_ok && (!full || content_ok); }
};

// Compares a freshly taken seal with the one stored at import: the check before every run
// (sandbox.cpp takes the seal through its own fd, beside init's setup). The error names the
// image, `ref` (how the run named it, "" for none) and how to see what changed.
Status seal_matches(const ImageRecord& image, const Seal& taken, const std::string& ref);

// The image name that means the host's own root (no image): reserved, so no stored image can be
// named it, with any tag, and pass for the host root (a tenant's "images": ["host"]).
inline constexpr const char* kHostImage = "host";

// "name[:tag]" → "name:tag", or an error saying which rule the text breaks (kHostImage is one).
Result<std::string> canonical_image_name(const std::string& text);

// How `source` is read: "auto" (an OCI image layout or a docker save archive is recognised by its
// index.json / manifest.json, anything else is a root file system), or one of "rootfs",
// "oci-layout", "docker-archive" to insist. `platform` picks the manifest of a multi-platform image.
struct ImportOptions {
  std::string format = "auto";
  std::string platform = "linux/amd64";
};

// What `sbx image import SOURCE` reads. SOURCE is "-" for stdin (spooled to an unlinked file in
// the store, bounded by max_archive_bytes), a path, or PATH:TAG to choose one of the tagged images
// of an OCI layout or docker archive (skopeo's oci:DIR:TAG). A path may itself contain ':', so
// the part after the last ':' is a tag only when SOURCE does not exist as given and the part
// before it does ("-:TAG": stdin and a tag).
struct ImportSource {
  std::string path;  // "" for stdin
  std::string tag;   // "" for none
  bool from_stdin = false;
};
ImportSource parse_import_source(const std::string& text);

class ImageStore {
 public:
  explicit ImageStore(std::string root) : root_(std::move(root)) {}
  const std::string& root() const { return root_; }

  // `source` (ImportSource: a path, PATH:TAG, or "-" for stdin) is a directory or a tarball (plain,
  // gzip, xz, zstd, bzip2): a root file system, an OCI image layout, or a docker save archive
  // (ImportOptions).
  Result<ImageRecord> import(const std::string& source, const std::string& name, const ImportProgress& progress,
                             const ImportLimits& limits = {}, const ImportOptions& options = {});
  Result<std::vector<ImageRecord>> list() const;
  Result<ImageRecord> resolve(const std::string& ref) const;
  // Removes a name (and the image when no name is left), or an image and all its names when
  // `ref` is a digest; a digest's directory that an import left without its image.json (killed
  // or crashed between storing the tree and describing it) too. Returns one line per thing removed.
  Result<std::vector<std::string>> remove(const std::string& ref);
  // Re-takes the seal (one stat per entry, no reads) and compares it with the stored one.
  Status check_seal(const ImageRecord& image) const;
  // With `full`, re-hashes every file; `progress` is told ("hashing", entries, bytes) as it goes.
  Result<VerifyReport> verify(const ImageRecord& image, bool full, const ImportProgress& progress = {}) const;

 private:
  Result<UniqueFd> lock() const;  // exclusive flock on <images>/.lock
  Status record_origin(const std::string& dir, const std::string& digest, const std::string& name,
                       const ContainerImage* container) const;
  Result<ImageRecord> load(const std::string& hex) const;
  // The one stored digest (hex) that `ref` ("sha256:" and a prefix) names.
  Result<std::string> find_digest(const std::string& ref) const;
  // Under the lock: moves the stored `hex` aside and removes it (so no run finds it half-removed).
  Status remove_stored(const std::string& hex);
  // Under the lock, before an import stores `hex`: moves aside and removes a stored copy that was
  // modified (`repaired`). (A copy stored without the owners this import carries has another
  // digest: owners are in an image's manifest, image_manifest.hpp.)
  Status replace_modified_copy(const std::string& hex, bool& repaired);
  std::string root_;
};

}  // namespace sbx
