// The file-system facilities: the mount plan and the memory fallback that sizes its tmpfs mounts,
// the image under it, and --input. Their child step is one: init's build_root (mounts.cpp), which
// interprets the plan's operation list (mount_plan.hpp) that Run::prepare_child makes from the
// final plan; init checks the image fd it is handed against the tree it mounts.
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include <spdlog/spdlog.h>

#include "runtime/base/sha256.hpp"
#include "runtime/base/units.hpp"
#include "runtime/image/image_import.hpp"
#include "runtime/image/image_manifest.hpp"
#include "runtime/image/image_seal.hpp"
#include "runtime/launch/facility.hpp"
#include "runtime/launch/pool_job.hpp"

namespace sbx {
namespace {
using nlohmann::json;

// At most this one line per run about limits: what is weaker and the cause in a few words; the
// details are in the trace (enforcement) and `sbx doctor`. A warning when the caller asked for
// the limit or a cgroup setup failed unexpectedly; otherwise info (-v).
void log_limit_shortfalls(const RunContext& ctx, const TmpfsBudget& scaled) {
  std::string missing, degraded;
  bool asked = false;
  for (auto* d : ctx.plan.shortfalls(true)) {
    (d->applied ? degraded : missing) += (std::string(", ") + d->limit);
    for (auto& e : ctx.req.explicit_limits) asked = asked || e == d->limit;
  }
  const Error* failed = ctx.cgroup_error ? &*ctx.cgroup_error : nullptr;
  if (!missing.empty() || !degraded.empty())
    spdlog::log(
        asked || failed ? spdlog::level::warn : spdlog::level::info, "limits {}{}{} ({}; see the trace, 'sbx doctor')",
        missing.empty() ? "" : "not enforced: " + missing.substr(2), !missing.empty() && !degraded.empty() ? "; " : "",
        degraded.empty() ? "" : "only per process (rlimits): " + degraded.substr(2),
        cgroup_gap_short(ctx.cg, ctx.rootless, failed));
  if (scaled.scaled)
    spdlog::info("tmpfs sizes scaled down to fit the memory limit {} (no cgroup v2 counts their pages): {}",
                 format_size(*ctx.spec.limits.memory_bytes), describe_shares(scaled.shares));
  if (ctx.gpu.enabled && ctx.spec.limits.memory_bytes && !ctx.plan.cgroup_limits.memory_bytes)
    spdlog::warn(
        "--gpu without a cgroup v2 memory controller: the memory limit of {} is NOT applied (rlimits break "
        "CUDA); host memory is unbounded for this run (enforcement.limits_not_applied; --require-limits refuses)",
        format_size(*ctx.spec.limits.memory_bytes));
}

// Each idmap bind, as root: its detached idmapped mount, made now by sbx (host root) and moved
// into place by init (mounts.hpp, make_idmapped_tree). Rootless the program writes as the caller
// already; the writability pre-check let only a source the caller owns through, so there is
// nothing to map (info, -v). A dry run mounts nothing.
Status idmap_binds(RunContext& ctx) {
  const IdentityPlan& id = *ctx.identity;
  for (std::size_t i = 0; i < ctx.bind_sources.size() && i < ctx.spec.binds.size(); ++i) {
    const BindSource& src = ctx.bind_sources[i];
    if (!src.given.idmap || ctx.dry_run) continue;
    if (id.rootless) {
      spdlog::info("--bind {}: idmap changes nothing rootless (the sandbox writes as you already)", src.given.src);
      continue;
    }
    PlannedBind& b = ctx.mounts.binds[i];
    // The program's host ids, which the owner's are mapped to: never a default (0 would be host root).
    auto uid = host_id(id.uid_map, id.uid);
    auto gid = host_id(id.gid_map, id.gid);
    if (!uid || !gid)
      return make_error("mounts", "--bind " + src.given.src + ": idmap: the program's uid or gid maps to no host id",
                        EINVAL);
    auto tree = make_idmapped_tree(src, *uid, *gid, b.owner_uid, b.owner_gid);
    if (!tree) return tree.error();
    b.tree_fd = tree->get();
    ctx.idmap_trees.push_back(std::move(*tree));
  }
  return {};
}

// The mount plan (mounts.hpp) with the GPUs' nodes and driver files; without a cgroup charging
// tmpfs pages, the memory fallback (memory_fallback.hpp) scales profile-given tmpfs sizes to fit
// the memory limit and caps the rest per process (its rlimits are the limit plan's).
class Mounts final : public Facility {
 public:
  const char* name() const override { return "mounts"; }
  Status prepare(RunContext& ctx) const override {
    auto planned = plan_mounts(ctx.spec, ctx.bind_sources);
    if (!planned) return planned.error();
    MountPlan& mounts = ctx.mounts = std::move(*planned);
    SBX_TRY(idmap_binds(ctx));
    for (auto& n : ctx.gpu.nodes) mounts.device_nodes.push_back({n.host_path, n.path});
    for (auto& f : ctx.gpu.driver_files) mounts.binds.push_back({f});  // sbx's own: bound by path
    TmpfsBudget scaled;
    auto fallback = apply_memory_fallback(ctx.spec, ctx.plan, ctx.req.explicit_limits, *ctx.identity, mounts, &scaled);
    if (!fallback) return fallback.error();
    ctx.memory_fallback = std::move(*fallback);
    if (ctx.dry_run) return {};
    log_limit_shortfalls(ctx, scaled);
    if (ctx.parts) put(ctx.parts->image, "image/mounts", mounts_to_json(mounts));
    // A pooled sandbox's /code and /in: tmpfs mounts only init writes, at hand-out (pool_job.hpp).
    // Added after the memory fallback's scaling: they hold the call's own bytes, bounded by the
    // job's size, and are read-only before the program starts.
    if (ctx.req.pool.await_call)
      for (auto& d : kPoolDirs) mounts.tmpfs.push_back({d, kPoolDirBytes});
    return {};
  }
  void record(const RunContext& ctx, const SuperviseResult*, json& out) const override {
    if (ctx.memory_fallback_applies()) put(out, "enforcement/memory_fallback", ctx.memory_fallback);
  }
  void plan(const RunContext& ctx, json& out) const override {
    out["mounts"] = mounts_to_json(ctx.mounts);
    if (ctx.memory_fallback_applies()) out["memory_fallback"] = ctx.memory_fallback;
  }
};

// The generated /etc/hosts (plan_mounts) is bound over the image's only where that is a plain file
// or absent under a plain /etc: an image whose /etc/hosts is a symlink or a directory (or whose
// /etc is a symlink) keeps its own, as before there was one, rather than failing at its mount point.
void keep_an_images_odd_hosts(int image_fd, MountPlan& mounts) {
  auto absent_or = [image_fd](const char* path, mode_t type) {
    struct stat st;
    if (::fstatat(image_fd, path, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT;
    return (st.st_mode & S_IFMT) == type;
  };
  if (absent_or("etc", S_IFDIR) && absent_or("etc/hosts", S_IFREG)) return;
  std::erase_if(mounts.files, [](const GeneratedFile& f) { return f.dst == "/etc/hosts"; });
  spdlog::info("the image's /etc/hosts is not a plain file: it is kept, no localhost entries are added");
}

// The image (image_store.hpp). A run opens the stored tree once here; its seal is taken through
// this fd while init builds the sandbox (Run::check_seal, after "go"). A dry run has no sandbox
// to overlap with and takes the seal now.
class Image final : public Facility {
 public:
  const char* name() const override { return "image"; }
  Status prepare(RunContext& ctx) const override {
    if (ctx.spec.image == "host") {
      ctx.image_plan = {{"name", "host"}, {"digest", nullptr}};
      return {};
    }
    ImageStore store(ctx.req.dirs.images);
    auto resolved = store.resolve(ctx.spec.image);
    if (!resolved) return resolved.error();
    const ImageRecord& image = ctx.image.emplace(std::move(*resolved));
    ctx.image_fd.reset(::open(image.rootfs.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!ctx.image_fd.ok()) return sys_error("image", "open " + image.rootfs);
    MountPlan& mounts = ctx.mounts;
    keep_an_images_odd_hosts(ctx.image_fd.get(), mounts);
    const std::string owners = idmap_image(ctx);
    if (ctx.dry_run) {  // the plan says how the run would see the image's owners; nothing is kept
      ctx.image_tree.reset();
      SBX_TRY(check_seal_now(ctx));
      ctx.image_plan["owners"] = owners;
      return {};
    }
    if (ctx.parts)
      ctx.parts->image =
          trace_object({{"image/name", ctx.spec.image},
                        {"image/digest", image.digest},
                        {"image/names", image.names},
                        {"image/entries", image.meta.value("entries", 0LL)},
                        {"image/seal", "checked"},
                        {"image/root", trace_object({{"image/root/type", "overlay"},
                                                     {"image/root/lower", image.rootfs},
                                                     {"image/root/upper", "tmpfs"},
                                                     {"image/root/upper_size_bytes", mounts.upper_size_bytes},
                                                     {"image/root/read_only", true},
                                                     {"image/root/owners", owners}})},
                        {"image/mounts", mounts_to_json(mounts)}});
    if (ctx.parts && ctx.req.image_entrypoint) put(ctx.parts->image, "image/entrypoint", *ctx.req.image_entrypoint);
    mounts.image_fd = ctx.image_fd.get();
    mounts.image_path = image.rootfs;
    mounts.image_tree_fd = ctx.image_tree.ok() ? ctx.image_tree.get() : -1;
    return {};
  }
  // init has its own copy of the idmapped tree (its own fd table): ours is not needed past clone.
  Status after_clone(RunContext& ctx, pid_t) const override {
    ctx.image_tree.reset();
    return {};
  }
  void plan(const RunContext& ctx, json& out) const override { out["image"] = ctx.image_plan; }

 private:
  // How the image's owners reach the sandbox (the record's image.root.owners). As host root in
  // the host's namespace, the stored ids (image ids, image_import.hpp) through an idmapped copy of
  // the tree; rootless, the store is the caller's and so every file the sandbox user's; in a
  // container's namespace nothing may idmap a host file system.
  static std::string idmap_image(RunContext& ctx) {
    static_assert(kOwnerIdRange == kMappedRange, "an import carries the ids a run maps");
    if (ctx.identity->rootless) return "the caller's: every file is the sandbox user's (a rootless run maps one id)";
    if (!ctx.identity->initial_namespace)
      return "host ids: sbx runs in a container's user namespace, where no host file system can be idmapped";
    // Stored id kOwnerIdBase + N is image id N, which the run's map sends where sandbox id N lives.
    auto stored = [](std::vector<IdMapping> map) {
      for (auto& e : map) e.inside += kOwnerIdBase;
      return map;
    };
    IdmappedImage mapped =
        make_idmapped_image(ctx.image_fd.get(), stored(ctx.identity->uid_map), stored(ctx.identity->gid_map));
    if (!mapped.tree.ok())
      spdlog::warn("image {}: its files keep their host ids in the sandbox ({})", ctx.spec.image, mapped.owners);
    ctx.image_tree = std::move(mapped.tree);
    return mapped.owners;
  }

  static Status check_seal_now(RunContext& ctx) {
    auto seal = compute_seal_fd(ctx.image_fd.get());
    ctx.image_fd.reset();
    if (!seal) return seal.error();
    SBX_TRY(seal_matches(*ctx.image, *seal, ctx.spec.image));
    ctx.image_plan = {
        {"name", ctx.spec.image}, {"digest", ctx.image->digest}, {"names", ctx.image->names}, {"seal", "checked"}};
    return {};
  }
};

// --input: each host file or directory hashed before the run (what the program was given),
// through the fd open_bind_sources opened it by (the inputs follow the binds in `sources`): the
// bytes hashed are those of the very file init binds (mounts.hpp, BindSource), not of whatever
// the path names by the time it is read again.
Result<json> hash_inputs(const std::vector<BindSource>& sources, std::size_t first, const std::string& cwd) {
  json out = json::array();
  for (std::size_t i = first; i < sources.size(); ++i) {
    const BindSource& source = sources[i];
    const BindMount& in = source.given;
    std::string src = in.src[0] == '/' ? in.src : cwd + "/" + in.src;
    const std::string opened = "/proc/self/fd/" + std::to_string(source.fd.get());  // reopens that file
    struct stat st;
    if (::fstat(source.fd.get(), &st) != 0) return sys_error("usage", "--input " + in.src);
    if (S_ISDIR(st.st_mode)) {
      auto scan = scan_tree(opened);
      if (!scan) return make_error("usage", "--input " + in.src + ": " + scan.error().message, scan.error().err);
      json entry = trace_object({{"inputs/[]/path", in.dst},
                                 {"inputs/[]/source", src},
                                 {"inputs/[]/type", "directory"},
                                 {"inputs/[]/bytes", scan->bytes},
                                 {"inputs/[]/sha256", sha256_hex(manifest_text(scan->entries))},
                                 {"inputs/[]/digest_of", "sbx-manifest v1"},
                                 {"inputs/[]/entries", scan->entries.size()}});
      if (!scan->skipped.empty()) put(entry, "inputs/[]/skipped_special_files", scan->skipped.size());
      out.push_back(entry);
    } else if (S_ISREG(st.st_mode)) {
      UniqueFd fd(::open(opened.c_str(), O_RDONLY | O_CLOEXEC));
      if (!fd.ok()) return sys_error("usage", "--input " + in.src);
      std::int64_t bytes = 0;
      auto h = sha256_fd(fd.get(), &bytes);
      fd.reset();
      if (!h) return make_error("usage", "--input " + in.src + ": read", h.error().err);
      out.push_back(trace_object({{"inputs/[]/path", in.dst},
                                  {"inputs/[]/source", src},
                                  {"inputs/[]/type", "file"},
                                  {"inputs/[]/bytes", bytes},
                                  {"inputs/[]/sha256", *h}}));
    } else {
      return make_error("usage", "--input " + in.src + " is not a regular file or a directory");
    }
  }
  return out;
}

// --input (hashed into the record's `inputs`; plan_mounts binds them read-only) and the files sbx
// generates for the sandbox (RunRequest::files), bound read-only. A dry run hashes nothing.
class Inputs final : public Facility {
 public:
  const char* name() const override { return "inputs"; }
  Status prepare(RunContext& ctx) const override {
    if (ctx.dry_run) return {};
    if (!ctx.spec.inputs.empty()) {
      auto hashed = hash_inputs(ctx.bind_sources, ctx.spec.binds.size(), ctx.cwd);
      if (!hashed) return hashed.error();
      ctx.inputs = std::move(*hashed);
    }
    // After the files plan_mounts generated (an image's /etc/hosts).
    ctx.mounts.files.insert(ctx.mounts.files.end(), ctx.req.files.begin(), ctx.req.files.end());
    return {};
  }
};

}  // namespace

const Facility& mounts_facility() {
  static const Mounts f;
  return f;
}
const Facility& image_facility() {
  static const Image f;
  return f;
}
const Facility& inputs_facility() {
  static const Inputs f;
  return f;
}

}  // namespace sbx
