#include <doctest/doctest.h>

#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "runtime/base/paths.hpp"
#include "runtime/egress/egress_policy.hpp"
#include "runtime/model/environment.hpp"
#include "runtime/launch/preflight.hpp"
#include "runtime/linux/mounts.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/base/suggest.hpp"

using namespace sbx;

namespace {
CgroupInfo hybrid_without_cpu() {
  CgroupInfo i;
  i.layout = "hybrid";
  i.mount = "/sys/fs/cgroup/unified";
  i.self_path = std::string(1, '/');  // GCC 12 misreports the literal "/" (-Wrestrict)
  i.controllers = {"hugetlb"};
  i.writable = true;
  return i;
}

std::string env_value(const std::vector<std::string>& env, const std::string& name) {
  for (auto& e : env)
    if (e.rfind(name + "=", 0) == 0) return e.substr(name.size() + 1);
  return "<unset>";
}
}  // namespace

TEST_CASE("require-limits: the error names the limit, the layer that set it and how to clear it") {
  auto profile = load_profile("untrusted");
  REQUIRE(profile.ok());
  Limits l;
  l.cpus = 1;
  l.pids = 64;
  auto plan = plan_limits(l, hybrid_without_cpu(), false, true);
  auto layers = limit_layers(*profile, nullptr, "", {});
  CHECK(layers["cpus"] == "profile 'untrusted'");
  auto e = require_limits_shortfall(plan, hybrid_without_cpu(), layers);
  REQUIRE(e.has_value());
  CHECK(e->message.find("cannot enforce cpus (1, set by profile 'untrusted': clear it with --cpus none)") !=
        std::string::npos);
  CHECK(e->message.find("pids") == std::string::npos);  // degraded (RLIMIT_NPROC) is enforced

  // Memory in the rlimit fallback is bounded per process only: a shortfall "in total".
  Limits mem;
  mem.memory_bytes = 1 << 20;
  auto m = require_limits_shortfall(plan_limits(mem, hybrid_without_cpu(), false, true), hybrid_without_cpu(), layers);
  REQUIRE(m.has_value());
  CHECK(m->message.find("cannot enforce memory in total (1M") != std::string::npos);  // as --memory spells it

  auto by_flag = limit_layers(*profile, nullptr, "", {"cpus"});
  CHECK(by_flag["cpus"] == "flag --cpus");
  e = require_limits_shortfall(plan, hybrid_without_cpu(), by_flag);
  REQUIRE(e.has_value());
  CHECK(e->message.find("set by flag --cpus: leave it out") != std::string::npos);

  nlohmann::json manifest = {{"limits", {{"cpus", 0.5}}}};
  auto from_manifest = limit_layers(*profile, &manifest, "p/pack.json", {});
  CHECK(from_manifest["cpus"] == "p/pack.json");
  CHECK(from_manifest["pids"] == "profile 'untrusted'");
  CHECK(from_manifest["cpu_time"] == "sbx's defaults");

  l.cpus.reset();  // cleared by --cpus none
  CHECK_FALSE(
      require_limits_shortfall(plan_limits(l, hybrid_without_cpu(), false, true), hybrid_without_cpu(), layers));
}

TEST_CASE("NO_PROXY leaves out the loopback names an allow rule sends to the host") {
  auto no_proxy = [](std::vector<std::string> allow) {
    RunSpec s;
    s.network.mode = "proxy";
    s.network.allow = std::move(allow);
    auto env = build_environment(s, nullptr, false);
    CHECK(env_value(env, "NO_PROXY") == env_value(env, "no_proxy"));
    return env_value(env, "NO_PROXY");
  };
  CHECK(no_proxy({"example.com"}) == "localhost,127.0.0.1,::1");
  CHECK(no_proxy({"127.0.0.1:8765"}) == "::1");
  CHECK(no_proxy({"[::1]:8080"}) == "127.0.0.1");
  CHECK(no_proxy({"127.0.0.0/8:*", "[::1]:80"}) == "");
  CHECK(no_proxy({"0.0.0.0/0:443"}) == "::1");
  CHECK(no_proxy({"10.0.0.0/8"}) == "localhost,127.0.0.1,::1");
  // A name rule for localhost never reaches the host (check_resolved refuses internal addresses
  // for names): localhost stays direct, inside the sandbox.
  CHECK(no_proxy({"localhost:3000"}) == "localhost,127.0.0.1,::1");
}

TEST_CASE("did you mean: close words only") {
  std::vector<std::string> cmds = {"run", "profile", "trace", "doctor", "pack", "exec", "image"};
  CHECK(did_you_mean("rn", cmds) == " (did you mean 'run'?)");
  CHECK(did_you_mean("imgae", cmds) == " (did you mean 'image'?)");
  CHECK(did_you_mean("xyzzy", cmds).empty());
  CHECK(did_you_mean("r", cmds).empty());  // one letter is no typo of anything
  CHECK(closest_word(std::string(100000, 'a'), cmds).empty());
}

TEST_CASE("allow-host: a URL says which form is expected") {
  auto r = parse_allow_rule("http://example.com:8080/path");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("not a URL") != std::string::npos);
  CHECK(r.error().message.find("--allow-host example.com:8080") != std::string::npos);
}

TEST_CASE("state dir: refused when another user could write it or a directory on its way") {
  char tmpl[] = "/tmp/sbx-unit-private-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string base = tmpl;
  auto refused = [](const std::string& p) {
    auto st = check_private_dir(p, "sbx's state dir");
    return st ? std::string() : st.error().message;
  };
  REQUIRE(::chmod(base.c_str(), 0700) == 0);
  CHECK(refused(base + "/state").empty());  // missing parts are sbx's to create
  REQUIRE(::mkdir((base + "/state").c_str(), 0700) == 0);
  CHECK(refused(base + "/state").empty());
  CHECK(refused(base + "/state/../state/").empty());
  REQUIRE(::chmod((base + "/state").c_str(), 0770) == 0);
  CHECK(refused(base + "/state").find("group-writable (mode 0770)") != std::string::npos);
  CHECK(refused(base + "/state").find("chmod go-w " + base + "/state") != std::string::npos);
  REQUIRE(::chmod((base + "/state").c_str(), 0700) == 0);
  // An ancestor others can write: without the sticky bit refused, with it (like /tmp) fine.
  REQUIRE(::chmod(base.c_str(), 0777) == 0);
  CHECK(refused(base + "/state").find("world-writable") != std::string::npos);
  CHECK(refused(base + "/state/deeper/still").find(base + " is world-writable") != std::string::npos);
  REQUIRE(::chmod(base.c_str(), 01777) == 0);
  CHECK(refused(base + "/state").empty());
  // The state dir itself sticky and world-writable: refused all the same.
  REQUIRE(::chmod((base + "/state").c_str(), 01777) == 0);
  CHECK_FALSE(refused(base + "/state").empty());
  REQUIRE(::chmod((base + "/state").c_str(), 0700) == 0);
  // Through a symlink: the target's parts are checked.
  REQUIRE(::chmod(base.c_str(), 0700) == 0);
  REQUIRE(::mkdir((base + "/open").c_str(), 0700) == 0);
  REQUIRE(::chmod((base + "/open").c_str(), 0777) == 0);
  REQUIRE(::mkdir((base + "/open/st").c_str(), 0700) == 0);
  REQUIRE(::symlink((base + "/open/st").c_str(), (base + "/link").c_str()) == 0);
  CHECK(refused(base + "/link").find(base + "/open is world-writable") != std::string::npos);
  if (::geteuid() == 0) {  // owned by another user
    REQUIRE(::chown((base + "/state").c_str(), 65534, 65534) == 0);
    CHECK(refused(base + "/state").find("belongs to uid 65534") != std::string::npos);
  }
  CHECK(std::system(("chmod -R u+rwx " + base + "; rm -rf " + base).c_str()) == 0);
}

TEST_CASE("paths: resolved_path resolves what exists, path_relation compares whole names") {
  char tmpl[] = "/tmp/sbx-unit-resolved-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string base = tmpl;
  REQUIRE(::mkdir((base + "/real").c_str(), 0700) == 0);
  REQUIRE(::symlink((base + "/real").c_str(), (base + "/link").c_str()) == 0);
  CHECK(resolved_path(base + "/link") == base + "/real");
  CHECK(resolved_path(base + "/link/") == base + "/real");
  CHECK(resolved_path(base + "/link/not/yet/../there") == base + "/real/not/there");  // the rest lexically
  CHECK(resolved_path(base + "/real/./x//") == base + "/real/x");
  CHECK(resolved_path("/") == "/");
  CHECK(path_relation("/srv/a", "/srv/a") == "is");
  CHECK(path_relation("/srv/a/b", "/srv/a") == "is inside");
  CHECK(path_relation("/srv", "/srv/a") == "holds");
  CHECK(path_relation("/", "/srv/a") == "holds");
  CHECK(path_relation("/srv/a", "/") == "is inside");
  CHECK(path_relation("/srv/state", "/srv/stateful").empty());
  CHECK(path_relation("/srv/stateful", "/srv/state").empty());
  CHECK(path_within("/srv/a", "/srv/a"));
  CHECK(path_within("/srv/a/b", "/srv/a"));
  CHECK(path_within("/srv/a", "/"));
  CHECK(path_within("/", "/"));
  CHECK_FALSE(path_within("/srv/stateful", "/srv/state"));
  CHECK_FALSE(path_within("/srv", "/srv/a"));
  CHECK(std::system(("rm -rf " + base).c_str()) == 0);
}

namespace {
// The message check_binds_spare_state refuses `bind` with, "" when it passes.
std::string spare_state_refusal(const std::string& bind, const Dirs& d,
                                const std::vector<std::pair<std::string, std::string>>& also = {}) {
  RunSpec s;
  s.binds.push_back(*parse_bind(bind));
  auto sources = open_bind_sources(s, "/");
  if (!sources) return "cannot open: " + sources.error().message;  // no REQUIRE: also run in a forked child
  auto st = check_binds_spare_state(*sources, d, also);
  return st ? std::string() : st.error().message;
}
}  // namespace

TEST_CASE("binds: none read-write over the state dir, the data dir or the config dir") {
  char tmpl[] = "/tmp/sbx-unit-binds-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string base = tmpl;
  for (const char* d : {"/state", "/state/cache", "/stateful", "/other", "/data", "/data/images"})
    REQUIRE(::mkdir((base + d).c_str(), 0700) == 0);
  REQUIRE(std::system(("touch " + base + "/state/cache/entry").c_str()) == 0);
  REQUIRE(::symlink((base + "/state").c_str(), (base + "/to-state").c_str()) == 0);
  Dirs d;
  d.state = base + "/state";
  d.data = base + "/data";
  auto check = [&](const std::string& bind) { return spare_state_refusal(bind, d); };
  CHECK(check(base + "/state:/s:rw").find("is sbx's state dir") != std::string::npos);
  CHECK(check(base + "/state/cache:/s:rw").find("is inside sbx's state dir") != std::string::npos);
  CHECK(check(base + "/state/cache/entry:/e:rw").find("is inside sbx's state dir") != std::string::npos);  // a file
  CHECK(check(base + ":/s:rw").find("holds sbx's state dir") != std::string::npos);
  CHECK(check("/:/host:rw").find("holds sbx's state dir") != std::string::npos);
  CHECK(check(base + "/data/images:/i:rw").find("sbx's data dir") != std::string::npos);
  CHECK(check(base + "/state").empty());           // read-only: the program cannot write
  CHECK(check(base + "/stateful:/s:rw").empty());  // a sibling with a common prefix
  CHECK(check(base + "/other:/o:rw").empty());
  // The caller's symlinks are followed once, when the source is opened: the directory opened is
  // what is checked, and the message names its real path.
  std::string m = check(base + "/to-state/cache:/s:rw");
  CHECK(m.find(base + "/state/cache is inside sbx's state dir " + base + "/state") != std::string::npos);
  CHECK(m.find("--bind " + base + "/to-state/cache:/s:rw") != std::string::npos);
  // A state dir that does not exist yet: a bind of the directory that will hold it holds it.
  Dirs later = d;
  later.state = base + "/other/not/yet";
  CHECK(spare_state_refusal(base + "/other:/o:rw", later).find("holds sbx's state dir") != std::string::npos);
  // Directories beyond `dirs` (a tenant run's: the untenanted state, other tenants' stores).
  CHECK(spare_state_refusal(base + "/other:/o:rw", d, {{base + "/other", "tenant 'B''s store"}})
            .find("is tenant 'B''s store " + base + "/other") != std::string::npos);
  CHECK(spare_state_refusal(base + "/stateful:/o:rw", d, {{base + "/other", "tenant 'B''s store"}}).empty());
  CHECK(std::system(("rm -rf " + base).c_str()) == 0);
}

TEST_CASE("binds: the state dir reached through another mount of it is refused by identity") {
  // A path check alone sees two unrelated names; the opened directory's device and inode, and
  // its parents', are the state dir's. Needs a mount: made in a child's own mount namespace.
  if (::geteuid() != 0) {  // unshare(CLONE_NEWNS) needs CAP_SYS_ADMIN
    MESSAGE("skipped: a second mount of the state dir needs a mount namespace, which only root may make here");
    return;
  }
  char tmpl[] = "/tmp/sbx-unit-alias-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string base = tmpl;
  for (const char* d : {"/state", "/state/cache", "/alias"}) REQUIRE(::mkdir((base + d).c_str(), 0700) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount((base + "/state").c_str(), (base + "/alias").c_str(), nullptr, MS_BIND, nullptr) != 0)
      ::_exit(3);
    Dirs d;
    d.state = base + "/state";
    bool inside =
        spare_state_refusal(base + "/alias/cache:/c:rw", d).find("is inside sbx's state dir") != std::string::npos;
    bool is = spare_state_refusal(base + "/alias:/c:rw", d).find("is sbx's state dir") != std::string::npos;
    ::_exit(inside && is ? 0 : 1);
  }
  int ws = 0;
  REQUIRE(::waitpid(pid, &ws, 0) == pid);
  REQUIRE(WIFEXITED(ws));
  if (WEXITSTATUS(ws) != 3) CHECK(WEXITSTATUS(ws) == 0);  // 3: no mount namespace here (a container): nothing to show
  CHECK(std::system(("rm -rf " + base).c_str()) == 0);
}

TEST_CASE("preflight: the wall-time message names the layer that set the limit and how to raise it") {
  CHECK(wall_time_message(30000, "profile 'untrusted'") ==
        "wall-time limit of 30s reached: sandbox killed (exit 124); 30s is the default of profile 'untrusted': "
        "raise it with --timeout, e.g. --timeout 2m (none: no limit)");
  CHECK(wall_time_message(300, "flag --timeout") == "wall-time limit of 300ms reached: sandbox killed (exit 124)");
  CHECK(wall_time_message(5000, "/p/pack.json").find("set by /p/pack.json: raise limits.timeout there") !=
        std::string::npos);
}

TEST_CASE("preflight: an exec or MCP call's wall-time message names its own fix, never --timeout") {
  // Issue 32: `sbx exec` and `sbx mcp` take no --timeout; the message told their callers to use it.
  CHECK(wall_time_message(30000, "profile 'untrusted'", CeilingRaise::by_profile) ==
        "wall-time limit of 30s reached: sandbox killed (exit 124); 30s is the ceiling of profile 'untrusted': a "
        "request's limits.timeout may lower it, not raise it; the operator may pass --profile with a profile whose "
        "limits.timeout is higher");
  auto req = wall_time_message(5000, "exec request", CeilingRaise::by_profile);
  CHECK(req.find("set by exec request: raise limits.timeout there, up to the profile's ceiling") != std::string::npos);
  for (auto* layer : {"profile 'untrusted'", "sbx's defaults", "", "exec request", "/p/pack.json"})
    CHECK(wall_time_message(1000, layer, CeilingRaise::by_profile).find("--timeout") == std::string::npos);
}

TEST_CASE("proc mount refused: the hint names the covered /proc paths and the unmasked-/proc fix") {
  const std::string host =
      "22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
      "40 22 0:35 / /proc/sys/fs/binfmt_misc rw,relatime shared:13 - autofs systemd-1 rw\n"
      "25 1 0:23 / /sys rw - sysfs sysfs rw\n";
  // A plain host: nothing covers /proc, so the refusal has another cause and no hint is made up.
  CHECK(proc_mount_refused_hint(host) == "");
  // Docker's masked paths: a /dev/null bind over /proc/keys, a tmpfs over /proc/timer\040list-like names.
  std::string masked = host +
                       "600 22 0:5 /null /proc/keys rw,nosuid - devtmpfs udev rw\n"
                       "601 22 0:50 / /proc/timer_list ro - tmpfs tmpfs ro\n"
                       "602 22 0:51 / /proc/my\\040dir ro - tmpfs tmpfs ro\n"
                       "603 22 0:52 / /proc/scsi ro - tmpfs tmpfs ro\n";
  std::string hint = proc_mount_refused_hint(masked);
  CHECK(hint.find("/proc/keys, /proc/timer_list, /proc/my dir and 1 more") != std::string::npos);
  CHECK(hint.find("procMount: Unmasked") != std::string::npos);
  CHECK(hint.find("--security-opt systempaths=unconfined") != std::string::npos);
  CHECK(hint.find("podman: --security-opt unmask=ALL --security-opt seccomp=deploy/seccomp-sbx.json") != std::string::npos);
  CHECK(hint.find("deploy/README.md") != std::string::npos);
  // No /proc at all (bwrap without --proc): mount one first.
  for (auto none :
       {std::optional<std::string>(), std::optional<std::string>("25 1 0:23 / /sys rw - sysfs sysfs rw\n")}) {
    std::string h = proc_mount_refused_hint(none);
    CHECK(h.find("no /proc is mounted") != std::string::npos);
    CHECK(h.find("bwrap: --proc /proc") != std::string::npos);
  }
}

namespace {
IdentityPlan root_identity(std::uint32_t uid = 0, std::uint32_t gid = 0) {
  IdentityPlan id;
  id.rootless = false;
  id.uid = uid;
  id.gid = gid;
  id.uid_map = {{0, kDefaultHostBase, kMappedRange}};
  id.gid_map = {{0, kDefaultHostBase, kMappedRange}};
  return id;
}
IdentityPlan rootless_identity(std::uint32_t caller = 1000) {
  IdentityPlan id;
  id.rootless = true;
  id.uid_map = {{0, caller, 1}};
  id.gid_map = {{0, caller, 1}};
  return id;
}
BindOwnership owned(std::uint32_t uid, std::uint32_t gid, mode_t mode, bool dir = true) {
  BindOwnership o;
  o.uid = uid;
  o.gid = gid;
  o.mode = mode;
  o.dir = dir;
  return o;
}
}  // namespace

TEST_CASE("rw bind pre-check: a root-owned directory is not writable by the sandbox's root") {
  const auto root = root_identity();
  // The case: host root's 0755 directory; the sandbox's root is host uid 1879048192.
  CHECK(bind_write_access(owned(0, 0, 0755), root, {}, false) == BindWrite::unwritable);
  CHECK(bind_write_access(owned(0, 0, 0777), root, {}, false) == BindWrite::writable);   // others may
  CHECK(bind_write_access(owned(0, 0, 0775), root, {}, false) == BindWrite::unwritable);  // group 0 not ours
  CHECK(bind_write_access(owned(0, 0, 0776), root, {}, false) == BindWrite::unwritable);  // a dir needs x too
  CHECK(bind_write_access(owned(0, 0, 0666, false), root, {}, false) == BindWrite::writable);  // a file: w only
  // Group: the sandbox's gid 0 is host gid 1879048192.
  CHECK(bind_write_access(owned(0, kDefaultHostBase, 0775), root, {}, false) == BindWrite::writable);
  // Owned by a sandbox uid: its root overrides the mode (CAP_DAC_OVERRIDE in its namespace).
  CHECK(bind_write_access(owned(kDefaultHostBase + 5, kDefaultHostBase, 0500), root, {}, false) ==
        BindWrite::writable);
  // ... but a program that is not the namespace's root does not.
  CHECK(bind_write_access(owned(kDefaultHostBase + 5, kDefaultHostBase, 0500), root_identity(1000, 1000), {}, false) ==
        BindWrite::unwritable);
  // The owner's class decides for the owner, even where others may write.
  CHECK(bind_write_access(owned(kDefaultHostBase + 1000, 0, 0577), root_identity(1000, 1000), {}, false) ==
        BindWrite::unwritable);
}

TEST_CASE("rw bind pre-check: an ACL or a file system that decides itself only warns") {
  auto o = owned(0, 0, 0755);
  o.acl = true;
  CHECK(bind_write_access(o, root_identity(), {}, false) == BindWrite::uncertain);
  o.acl = false;
  o.generic_perms = false;  // NFS, FUSE
  CHECK(bind_write_access(o, root_identity(), {}, false) == BindWrite::uncertain);
}

TEST_CASE("rw bind pre-check: idmap makes the owner's bits the program's") {
  const auto root = root_identity();
  CHECK(bind_write_access(owned(0, 0, 0755), root, {}, true) == BindWrite::writable);
  CHECK(bind_write_access(owned(4242, 4242, 0700), root, {}, true) == BindWrite::writable);
  // Idmapped, the owner shows as the program's uid: its root's override applies as to its own files.
  CHECK(bind_write_access(owned(0, 0, 0555), root, {}, true) == BindWrite::writable);
  CHECK(bind_write_access(owned(0, 0, 0555), root_identity(1000, 1000), {}, true) == BindWrite::unwritable);
}

TEST_CASE("rw bind of the sudo user's directory: idmapped as root without being asked") {
  const auto root = root_identity();
  const std::optional<std::uint32_t> me = 4242;
  // The invoking user's 0755 tree the sandbox's host uid cannot write: idmapped (its owner writes).
  CHECK(wants_owner_idmap(owned(4242, 4343, 0755), root, true, me));
  // Without sudo (no SUDO_UID) nobody is "the caller": left as asked (refused, with idmap named).
  CHECK_FALSE(wants_owner_idmap(owned(4242, 4343, 0755), root, true, std::nullopt));
  // Another account's tree (postgres, www-data): never its rights without being asked.
  CHECK_FALSE(wants_owner_idmap(owned(1001, 4343, 0755), root, true, me));
  // Never a root-owned one (a setuid-root file could be left), by uid or by gid.
  CHECK_FALSE(wants_owner_idmap(owned(0, 0, 0755), root, true, 0u));
  CHECK_FALSE(wants_owner_idmap(owned(4242, 0, 0755), root, true, me));
  // Writable already (others may): left as asked.
  CHECK_FALSE(wants_owner_idmap(owned(4242, 4343, 0777), root, true, me));
  // An ACL or a file system deciding itself: maybe writable, and maybe no idmapped mount: left.
  auto nfs = owned(4242, 4343, 0755);
  nfs.generic_perms = false;
  CHECK_FALSE(wants_owner_idmap(nfs, root, true, me));
  // Inside a container's user namespace no idmapped mount can be made; rootless nothing is needed.
  CHECK_FALSE(wants_owner_idmap(owned(4242, 4343, 0755), root, false, me));
  CHECK_FALSE(wants_owner_idmap(owned(1000, 1000, 0755), rootless_identity(1000), true, 1000u));
}

TEST_CASE("SUDO_UID: a decimal uid, not 0, or nothing") {
  CHECK(sudo_invoking_uid("1000") == std::optional<std::uint32_t>(1000));
  CHECK(sudo_invoking_uid("4294967294") == std::optional<std::uint32_t>(4294967294u));
  CHECK_FALSE(sudo_invoking_uid(nullptr));
  CHECK_FALSE(sudo_invoking_uid(""));
  CHECK_FALSE(sudo_invoking_uid("0"));
  CHECK_FALSE(sudo_invoking_uid("4294967295"));
  CHECK_FALSE(sudo_invoking_uid("99999999999"));
  CHECK_FALSE(sudo_invoking_uid("12a"));
  CHECK_FALSE(sudo_invoking_uid("-1"));
  CHECK_FALSE(sudo_invoking_uid(" 1000"));
}

TEST_CASE("rw bind pre-check rootless: the caller's ids and groups") {
  const auto me = rootless_identity(1000);
  CHECK(bind_write_access(owned(1000, 1000, 0755), me, {}, false) == BindWrite::writable);
  CHECK(bind_write_access(owned(1000, 1000, 0555), me, {}, false) == BindWrite::writable);  // mapped: override
  CHECK(bind_write_access(owned(0, 0, 0755), me, {}, false) == BindWrite::unwritable);
  CHECK(bind_write_access(owned(0, 27, 0775), me, {27}, false) == BindWrite::writable);  // a supplementary group
  // idmap rootless: nothing to do where the caller owns it; impossible where another user does.
  CHECK(bind_write_access(owned(1000, 1000, 0755), me, {}, true) == BindWrite::writable);
  CHECK(bind_write_access(owned(0, 0, 0777), me, {}, true) == BindWrite::idmap_rootless);
}
