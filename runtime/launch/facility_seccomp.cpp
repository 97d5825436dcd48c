// The seccomp facility (seccomp_policy.hpp): the policy is parsed, compiled (or loaded from the
// cache) here in the parent; Run::prepare_channels hands the notifying copy to the program child,
// which installs it last before its execve (install_seccomp in child.cpp's run_program), and the
// supervisor answers its notifications from the reference program (seccomp_notify.hpp).
#include <spdlog/spdlog.h>

#include "runtime/launch/facility.hpp"
#include "runtime/record/ledger_key.hpp"

namespace sbx {
namespace {
using nlohmann::json;

class Seccomp final : public Facility {
 public:
  const char* name() const override { return "seccomp"; }
  Status prepare(RunContext& ctx) const override {
    const RunSpec& s = ctx.spec;
    // No cache directory in a dry run: it writes nothing, not even a compiled policy.
    std::string cache = ctx.dry_run || ctx.req.dirs.state.empty() ? "" : ctx.req.dirs.state + "/cache/seccomp";
    // The cache is trusted only through a MAC keyed by a secret outside the state dir (the config
    // dir, beside the ledger key): whoever can write the cache cannot forge it (seccomp_policy.hpp).
    // Without a usable secret the policy is compiled for this run and nothing is cached.
    std::string secret;
    if (!cache.empty() && s.seccomp != "unconfined") {
      if (auto k = cache_mac_secret()) secret = std::move(*k);
      else if (!ctx.dry_run) spdlog::info("seccomp cache not used: {}", k.error().describe());
    }
    // A template's own sandbox: the default policy with what its driver needs (kTemplateSeccomp).
    if (ctx.req.template_host && s.seccomp != "default")
      return Error{"seccomp", EINVAL,
                   "a warm template needs the default seccomp policy (its calls stack the profile's on the "
                   "template's): this profile names '" +
                       s.seccomp + "' (use \"mode\": \"pool\")"};
    const std::string which = ctx.req.template_host ? std::string(kTemplateSeccomp) : s.seccomp;
    auto prepared = prepare_seccomp(which, cache, s.capabilities.keep, secret);
    if (!prepared) return prepared.error();
    const PreparedSeccomp& sc = ctx.seccomp.emplace(std::move(*prepared));
    if (!ctx.dry_run) log(s, sc);
    return {};
  }
  void record(const RunContext& ctx, const SuperviseResult*, json& out) const override {
    if (ctx.seccomp) put(out, "enforcement/seccomp", seccomp_enforcement_json(*ctx.seccomp));
    else
      put(out, "enforcement/seccomp",
          trace_object({{"enforcement/seccomp/profile", ctx.spec.seccomp},
                        {"enforcement/seccomp/sha256", nullptr},
                        {"enforcement/seccomp/unresolved", json::array()},
                        {"enforcement/seccomp/mode", nullptr},
                        {"enforcement/seccomp/note", "not installed: the run ended before the policy was prepared"}}));
  }
  void plan(const RunContext& ctx, json& out) const override {
    out["seccomp"] = seccomp_enforcement_json(*ctx.seccomp);
  }

 private:
  static void log(const RunSpec& s, const PreparedSeccomp& sc) {
    if (!sc.enabled)
      spdlog::warn("seccomp is UNCONFINED for this run: the program may use every system call the kernel offers");
    if (sc.enabled)
      spdlog::info("seccomp policy {}: {} BPF instructions, {} in {} us", s.seccomp, sc.reference.size(),
                   sc.cached ? "loaded from the cache" : "compiled", sc.setup_us);
    for (auto& n : sc.notes) spdlog::info("seccomp policy {}: {}", s.seccomp, n);
    if (!sc.unresolved.empty())
      spdlog::info("seccomp policy {}: {} system call name(s) unknown to libseccomp skipped (listed in the trace)",
                   s.seccomp, sc.unresolved.size());
  }
};

}  // namespace

const Facility& seccomp_facility() {
  static const Seccomp f;
  return f;
}

}  // namespace sbx
