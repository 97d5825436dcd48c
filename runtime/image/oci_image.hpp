#pragma once
// Container images as users have them: an OCI image layout (what `skopeo copy ... oci:DIR` and
// `docker save` since Docker 25 write) or a classic `docker save` archive, already unpacked into a
// directory (image_store.cpp unpacks an archive with the ordinary, normalising tar import first).
//
// Resolution: index.json (or manifest.json) → the manifest for the platform asked for (nested
// indexes followed once each, at most 4 deep) → its config and layer blobs. Every blob is opened
// beneath the layout's directory (no step of the path leaves it), and its SHA-256 is checked on the
// very bytes that are used: a JSON document's text as it is parsed, a layer as it is extracted (an
// OCI descriptor's digest, or for a classic archive the layer's diff_id in the config). JSON
// documents are read with the bounds of runtime/base/json_io.hpp.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"

namespace sbx {

struct ContainerImage {
  std::string format;                      // "oci-layout" or "docker-archive"
  std::string manifest_digest;             // OCI: the manifest's "sha256:..."; classic archive: ""
  std::string config_digest;               // "sha256:..." of the config blob
  std::string platform;                    // "os/arch[/variant]" of the config
  std::vector<std::string> layers;         // layer files (absolute /proc/self/fd paths kept open)
  std::vector<std::string> layer_digests;  // "sha256:..." each must match: apply_layers checks it on
                                           // the bytes it extracts
  // The config's run defaults: Env, Entrypoint, Cmd, WorkingDir, User (absent ones omitted).
  nlohmann::json run_defaults = nlohmann::json::object();
  std::vector<UniqueFd> fds;  // the open layer files behind `layers`
};

// Whether `dir` holds an OCI layout ("oci-layout" and "index.json"), a classic docker archive
// ("manifest.json" and no "oci-layout"), or the containers/image "dir" transport's layout
// ("manifest.json" and "version": what `podman save --format docker-dir` and `skopeo copy ...
// dir:DIR` write, refused with how to convert it): "oci-layout", "docker-archive", "docker-dir",
// or nullopt.
std::optional<std::string> container_format(const std::string& dir);

// The annotation an OCI layout's index.json names each tagged image by (what skopeo's
// oci:DIR:TAG selects).
inline constexpr const char* kOciRefName = "org.opencontainers.image.ref.name";

// Resolves the image in `dir` for `platform` ("linux/amd64", "linux/arm64/v8", ...), checking
// every digest. `tag` selects among an OCI layout's tagged images (kOciRefName) or a docker
// archive's RepoTags; without one, a layout or archive holding several tagged images is refused
// with their tags. Errors have stage "image" (or "usage" for a choice the caller must make) and
// name the file and what is wrong.
Result<ContainerImage> resolve_container_image(const std::string& dir, const std::string& platform,
                                               const std::string& tag = "");

}  // namespace sbx
