#include "runtime/model/image_defaults.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/openat2.hpp"
#include "runtime/base/strings.hpp"

namespace sbx {
namespace {

constexpr std::size_t kMaxDbBytes = 4u << 20;  // an image's /etc/passwd or /etc/group

std::vector<std::string> strings(const nlohmann::json& d, const char* key) {
  std::vector<std::string> out;
  if (d.contains(key) && d[key].is_array())
    for (auto& v : d[key])
      if (v.is_string()) out.push_back(v.get<std::string>());
  return out;
}

std::optional<std::uint32_t> number(std::string_view s) {
  std::uint32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// etc/passwd or etc/group of the image, resolved as the sandbox would see it: inside the tree.
Result<std::string> read_db(const std::string& rootfs, const char* rel, const std::string& image) {
  UniqueFd root(::open(rootfs.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (root.get() < 0) return sys_error("usage", "cannot open image " + image);
  int fd = openat2_retrying(root.get(), rel, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
                            RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
  if (fd < 0) return sys_error("usage", std::string("image ") + image + " has no readable /" + rel);
  UniqueFd f(fd);
  return read_bounded_fd(f.get(), kMaxDbBytes, "usage", std::string("/") + rel + " of image " + image);
}

// The entry of a passwd/group file whose field `key_field` is `key` (its name, or with kIdField
// its id): the numeric id (field 3), and for passwd its group (field 4).
constexpr std::size_t kNameField = 0, kIdField = 2;
std::optional<std::pair<std::uint32_t, std::uint32_t>> lookup(const std::string& db, const std::string& key,
                                                              std::size_t key_field = kNameField) {
  auto f = colon_db_entry(db, key_field, key, 3);
  if (f.empty()) return std::nullopt;
  auto id = number(f[2]);
  if (!id) return std::nullopt;
  auto group = f.size() > 3 ? number(f[3]) : std::nullopt;
  return std::pair{*id, group.value_or(*id)};
}

// The primary group of the user whose uid is `uid` in the image's /etc/passwd, else `uid` itself:
// what docker gives `--user N` (so `--uid 0` runs with gid 0, not with the image User's group).
std::uint32_t primary_gid_of(std::uint32_t uid, const std::string& rootfs, const std::string& image) {
  auto db = read_db(rootfs, "etc/passwd", image);
  if (!db) return uid;
  auto hit = lookup(*db, std::to_string(uid), kIdField);
  return hit ? hit->second : uid;
}

// "uid", "uid:gid", "name", "name:group", as a container config's User.
Status apply_user(RunSpec& spec, const std::string& user, const std::string& rootfs, const CallerChoices& caller,
                  const std::string& image) {
  std::string u = user, g;
  if (auto colon = user.find(':'); colon != std::string::npos) {
    u = user.substr(0, colon);
    g = user.substr(colon + 1);
  }
  // Plain values rather than optionals: GCC 12 warns falsely (maybe-uninitialized) on the latter.
  auto uid_num = number(u);
  std::uint32_t uid = uid_num.value_or(0);
  std::uint32_t gid = uid;  // a numeric User without a group: gid = uid, as runc does
  if (!uid_num) {
    auto db = read_db(rootfs, "etc/passwd", image);
    if (!db) return db.error();
    auto hit = lookup(*db, u);
    if (!hit) return make_error("usage", "image " + image + ": its User '" + u + "' is not in its /etc/passwd");
    uid = hit->first;
    gid = hit->second;  // the user's primary group
  }
  if (!g.empty()) {
    if (auto n = number(g)) {
      gid = *n;
    } else {
      auto db = read_db(rootfs, "etc/group", image);
      if (!db) return db.error();
      auto hit = lookup(*db, g);
      if (!hit)
        return make_error("usage", "image " + image + ": its User's group '" + g + "' is not in its /etc/group");
      gid = hit->first;
    }
  }
  if (!caller.uid) spec.uid = uid;
  if (!caller.gid) spec.gid = gid;
  return {};
}

}  // namespace

Status apply_image_defaults(RunSpec& spec, const nlohmann::json& defaults, const std::string& rootfs,
                            const CallerChoices& caller, const std::string& image) {
  // --uid N alone: N's own primary group, whatever the image's User says (docker's --user N).
  if (caller.uid && !caller.gid) spec.gid = primary_gid_of(caller.uid_value, rootfs, image);
  if (!defaults.is_object()) {
    spec.argv = caller.entrypoint ? *caller.entrypoint : std::vector<std::string>{};
    spec.argv.insert(spec.argv.end(), caller.command.begin(), caller.command.end());
    return {};
  }
  // --entrypoint replaces the image's Entrypoint and, as docker's does, its Cmd too (a Cmd is
  // written as arguments for the Entrypoint it came with).
  std::vector<std::string> argv = caller.entrypoint ? *caller.entrypoint : strings(defaults, "Entrypoint");
  const std::vector<std::string> tail =
      caller.command.empty() && !caller.entrypoint ? strings(defaults, "Cmd") : caller.command;
  argv.insert(argv.end(), tail.begin(), tail.end());
  spec.argv = argv;
  for (auto& kv : strings(defaults, "Env")) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    const std::string name = kv.substr(0, eq);
    // --env-pass NAME is the caller's word too (build_environment applies spec.env after it).
    if (std::find(caller.env_pass.begin(), caller.env_pass.end(), name) != caller.env_pass.end()) continue;
    spec.env.emplace(name, kv.substr(eq + 1));  // the profile's and --env's win
  }
  if (!caller.workdir && defaults.contains("WorkingDir") && defaults["WorkingDir"].is_string())
    spec.workdir = defaults["WorkingDir"].get<std::string>();
  if (defaults.contains("User") && defaults["User"].is_string() && !caller.uid)
    SBX_TRY(apply_user(spec, defaults["User"].get<std::string>(), rootfs, caller, image));
  return {};
}

}  // namespace sbx
