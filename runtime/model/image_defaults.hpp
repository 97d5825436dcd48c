#pragma once
// A container image's run defaults (its config's Env, Entrypoint, Cmd, WorkingDir and User,
// recorded in image.json at import: runtime/image/oci_image.hpp) applied to a run on that image, below
// what the caller says: `sbx run --image X` with no command runs Entrypoint + Cmd; a command
// given replaces Cmd and keeps the Entrypoint, as `docker run` does; Env fills names the profile
// and --env leave unset; WorkingDir and User apply unless --workdir / --uid / --gid are given
// (--uid N alone takes N's primary group from the image's /etc/passwd, else N, as docker's
// --user N does); --entrypoint replaces the Entrypoint and drops the Cmd, as docker's does.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/model/spec.hpp"

namespace sbx {

struct CallerChoices {
  std::vector<std::string> command;                // empty: none given
  bool workdir = false, uid = false, gid = false;  // --workdir, --uid, --gid given
  std::vector<std::string> env_pass;               // names the caller passes through: the image's Env yields
  // --entrypoint: replaces the image's Entrypoint and Cmd ({} for --entrypoint ''); nullopt: not given.
  std::optional<std::vector<std::string>> entrypoint;
  std::uint32_t uid_value = 0;  // --uid's value (when `uid`)
};

// `defaults`: image.json's "config" object; `rootfs`: the image's tree, where a user or group
// name is looked up in etc/passwd and etc/group (resolved inside the tree, symlinks included, never
// outside it). Sets spec.argv too. Errors (stage "usage") name the image and the field.
Status apply_image_defaults(RunSpec& spec, const nlohmann::json& defaults, const std::string& rootfs,
                            const CallerChoices& caller, const std::string& image);

}  // namespace sbx
