#include <doctest/doctest.h>

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/linux/mount_plan.hpp"
#include "runtime/linux/mounts.hpp"
#include "runtime/typed/schema_validate.hpp"
#include "runtime/launch/facility.hpp"
#include "runtime/launch/trace.hpp"

using namespace sbx;
using nlohmann::json;

namespace {

// plan_mounts as a run calls it: on the sources it opened.
Result<MountPlan> plan_of(const RunSpec& spec) {
  auto sources = open_bind_sources(spec, "/");
  REQUIRE(sources.ok());
  return plan_mounts(spec, *sources);
}

MountPlan host_plan() {
  RunSpec spec;
  spec.hostname = "box";
  spec.tmpfs = {{"/scratch", 8 << 20}};
  spec.binds = {BindMount{"/etc", "/data", true}};
  auto plan = plan_of(spec);
  REQUIRE(plan);
  plan->files = {{"/code/main.py", "print(1)\n", 0444}};
  plan->secret_files = {{"token", "s3cret-value"}};
  plan->device_nodes = {{"/dev/nvidia0", "/dev/nvidia0"}};
  return *plan;
}

std::vector<std::string> ops_named(const json& list, const std::string& op) {
  std::vector<std::string> out;
  for (auto& m : list)
    if (m.value("op", "") == op) out.push_back(m["dst"].get<std::string>());
  return out;
}

std::size_t index_of(const std::vector<MountOp>& ops, const std::string& dst, MountOpKind kind) {
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].dst == dst && ops[i].kind == kind) return i;
  FAIL("no operation at " << dst);
  return 0;
}

json trace_schema() {
  std::ifstream f(SBX_SOURCE_DIR "/schemas/trace.schema.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

// A record made by trace_record (the code path that writes every record) from parts as run_sandbox
// fills them for a run that failed at setup, with the real mount list of `plan`.
json record_with(const MountPlan& plan) {
  TraceParts p;
  p.run_id = "20261201T000000.000Z-00000000";
  p.started_at = p.ended_at = "2026-12-01T00:00:00.000Z";
  p.host = {{"kernel", "6.1.0"}, {"cgroup", {{"layout", "hybrid"}, {"mount", ""}, {"self_path", "/"}, {"controllers", json::array()}}}};
  p.invocation = {{"argv", {"sbx", "run", "--", "true"}}, {"cwd", "/"},
                  {"profile", {{"name", "default"}, {"origin", "builtin"}, {"sha256", std::string(64, 'a')}}},
                  {"pack", nullptr}, {"spec", json::object()}};
  p.image = {{"name", "host"}, {"digest", nullptr}, {"mounts", mounts_to_json(plan)}};
  p.enforcement = {{"namespaces", {"user", "mount"}}, {"identity", json::object()}, {"cgroup", "unavailable"},
                   {"seccomp", {{"profile", nullptr}, {"sha256", nullptr}, {"unresolved", json::array()}, {"note", ""}}},
                   {"capabilities", {{"kept", json::array()}}}, {"network", {{"mode", "none"}, {"allow", json::array()}}}};
  add_limit_entries({}, p.enforcement);
  p.outcome.error = Error{"mounts", ENOENT, "bind source /nope"};
  return trace_record(std::move(p));
}

}  // namespace

TEST_CASE("mount plan: the host root's operations in the order init runs them") {
  auto plan = host_plan();
  auto ops = mount_ops(plan);
  REQUIRE(ops.size() > 10);
  CHECK(ops.front().kind == MountOpKind::root_bind);
  REQUIRE(ops.size() > 2);
  auto& root_ro = ops[ops.size() - 2];  // the root is read-only last; /proc/sys after the pivot
  CHECK(root_ro.kind == MountOpKind::remount_ro);
  CHECK(root_ro.dst == "/");
  CHECK((root_ro.flags & MS_RDONLY) != 0);
  CHECK(ops.back().kind == MountOpKind::proc_sys_ro);
  // /dev is complete (nodes, the GPU's too, devpts, shm) before it turns read-only.
  auto dev_ro = index_of(ops, "/dev", MountOpKind::remount_ro);
  CHECK(index_of(ops, "/dev", MountOpKind::tmpfs) < index_of(ops, "/dev/null", MountOpKind::bind_device));
  CHECK(index_of(ops, "/dev/nvidia0", MountOpKind::bind_device) < dev_ro);
  CHECK(index_of(ops, "/dev/shm", MountOpKind::tmpfs) < dev_ro);
  CHECK(index_of(ops, "/dev/pts", MountOpKind::devpts) < dev_ro);
  // Then /tmp, the caller's tmpfs, /out, binds, generated files, secrets, as build_root did.
  auto tmp = index_of(ops, "/tmp", MountOpKind::tmpfs);
  auto scratch = index_of(ops, "/scratch", MountOpKind::tmpfs);
  auto out = index_of(ops, "/out", MountOpKind::out);
  auto data = index_of(ops, "/data", MountOpKind::bind_rw);
  auto code = index_of(ops, "/code/main.py", MountOpKind::file);
  auto secrets = index_of(ops, "/run/secrets", MountOpKind::secrets);
  CHECK(dev_ro < tmp);
  CHECK(tmp < scratch);
  CHECK(scratch < out);
  CHECK(out < data);
  CHECK(data < code);
  CHECK(code < secrets);
  CHECK(ops[scratch].at_target);    // a caller's path: through open_mount_target
  CHECK_FALSE(ops[tmp].at_target);  // sbx's own
  CHECK(ops[scratch].size_bytes == 8 << 20);
  CHECK(ops[tmp].size_bytes == plan.tmp_size_bytes);
  // No overlay: nothing is pre-created, and the working directory needs no operation.
  CHECK(std::none_of(ops.begin(), ops.end(), [](auto& o) { return o.kind == MountOpKind::mount_point; }));
}

TEST_CASE("mount plan: a tmpfs asked noexec (--tmpfs DST:size=SIZE,noexec) is mounted noexec") {
  RunSpec spec;
  auto noexec = parse_tmpfs("/run:size=1m,noexec");
  REQUIRE(noexec.ok());
  spec.tmpfs = {*noexec, TmpfsMount{"/scratch", 1 << 20}};
  auto plan = plan_of(spec);
  REQUIRE(plan);
  auto ops = mount_ops(*plan);
  auto& run = ops[index_of(ops, "/run", MountOpKind::tmpfs)];
  CHECK(run.size_bytes == 1 << 20);
  CHECK((run.flags & MS_NOEXEC) != 0);
  CHECK((run.flags & MS_NOSUID) != 0);
  CHECK((ops[index_of(ops, "/scratch", MountOpKind::tmpfs)].flags & MS_NOEXEC) == 0);
}

TEST_CASE("mount plan: the trace lists every operation, tmpfs and generated files included, no secret") {
  auto plan = host_plan();
  plan.ops = mount_ops(plan);
  json list = mounts_to_json(plan);
  REQUIRE(list.size() == plan.ops.size());
  CHECK(list[0] == json{{"op", "root"}, {"dst", "/"}, {"type", "tmpfs"}});
  CHECK(ops_named(list, "tmpfs") == std::vector<std::string>{"/dev", "/dev/shm", "/tmp", "/scratch", "/out"});
  CHECK(ops_named(list, "proc") == std::vector<std::string>{"/proc"});
  CHECK(ops_named(list, "file") == std::vector<std::string>{"/code/main.py"});
  CHECK(ops_named(list, "remount_ro") == std::vector<std::string>{"/dev", "/"});
  auto gen = ops_named(list, "write");  // the generated /etc files
  CHECK(std::find(gen.begin(), gen.end(), "/etc/hosts") != gen.end());
  CHECK(std::find(gen.begin(), gen.end(), "/etc/passwd") != gen.end());
  for (auto& m : list) {
    if (m["dst"] == "/scratch") CHECK(m == json{{"op", "tmpfs"}, {"dst", "/scratch"}, {"size_bytes", 8 << 20}, {"mode", "1777"}, {"flags", {"nosuid", "nodev"}}});
    if (m["dst"] == "/out") CHECK(m["owner"] == "program");
    if (m["dst"] == "/data") CHECK(m == json{{"op", "bind"}, {"src", "/etc"}, {"dst", "/data"}, {"rw", true}, {"flags", {"nosuid", "nodev"}}});
    if (m["dst"] == "/code/main.py") CHECK(m["bytes"] == 9);
    if (m["dst"] == "/run/secrets") CHECK_FALSE(m.contains("size_bytes"));
  }
  std::string text = list.dump();
  CHECK(text.find("s3cret") == std::string::npos);
  CHECK(text.find("print(1)") == std::string::npos);
}

TEST_CASE("mount plan: /proc's host-wide counters are covered right after /proc, in host and image roots alike") {
  // diskstats and interrupts show what the host and concurrent sandboxes do as it happens; the
  // rest is Docker's default list. Only what this kernel has is planned (and so recorded).
  for (const char* image : {"host", "busybox"}) {
    RunSpec spec;
    spec.image = image;
    auto plan = plan_of(spec);
    REQUIRE(plan);
    for (const char* p : {"/proc/diskstats", "/proc/interrupts", "/proc/kcore", "/proc/timer_list"}) {
      bool planned = std::find(plan->proc_masks.begin(), plan->proc_masks.end(), p) != plan->proc_masks.end();
      CHECK_MESSAGE(planned == (::access(p, F_OK) == 0), p);
    }
    // /proc/stat stays: glibc's get_nprocs (os.cpu_count, nproc's callers) reads it where /sys is absent.
    CHECK(std::find(plan->proc_masks.begin(), plan->proc_masks.end(), "/proc/stat") == plan->proc_masks.end());
    auto ops = mount_ops(*plan);
    auto proc = index_of(ops, "/proc", MountOpKind::proc);
    std::size_t masks = 0;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind != MountOpKind::mask) continue;
      CHECK(i == proc + 1 + masks);  // all of them, in the list's order, before anything else
      CHECK(ops[i].dst == plan->proc_masks[masks]);
      CHECK((ops[i].flags & MS_RDONLY) != 0);
      ++masks;
    }
    CHECK(masks == plan->proc_masks.size());
    json list = mount_ops_to_json(ops);
    CHECK(ops_named(list, "mask") == plan->proc_masks);
    if (::access("/proc/diskstats", F_OK) == 0)
      CHECK(list[proc + 1]["flags"] == json{"rdonly", "nosuid", "nodev", "noexec"});
  }
}

TEST_CASE("mount plan: the caller's binds are the sources opened, pinned to their device and inode") {
  char tmpl[] = "/tmp/sbx-unit-pinned-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string base = tmpl;
  REQUIRE(::mkdir((base + "/dir").c_str(), 0755) == 0);
  REQUIRE(std::system(("touch " + base + "/dir/file").c_str()) == 0);
  REQUIRE(::symlink("dir", (base + "/link").c_str()) == 0);
  RunSpec spec;
  spec.binds = {BindMount{base + "/link", "/data", true}};
  spec.inputs = {BindMount{"link/file", "/in/file", false}};
  auto sources = open_bind_sources(spec, base);  // the input is relative to the caller's directory
  REQUIRE(sources.ok());
  REQUIRE(sources->size() == 2);
  CHECK((*sources)[0].real == base + "/dir");  // the caller's symlink followed once, here
  CHECK((*sources)[0].dir);
  CHECK((*sources)[1].real == base + "/dir/file");
  CHECK_FALSE((*sources)[1].dir);
  auto plan = plan_mounts(spec, *sources);
  REQUIRE(plan);
  struct stat dir_st, file_st;
  REQUIRE(::stat((base + "/dir").c_str(), &dir_st) == 0);
  REQUIRE(::stat((base + "/dir/file").c_str(), &file_st) == 0);
  auto ops = mount_ops(*plan);
  auto data = index_of(ops, "/data", MountOpKind::bind_rw);
  CHECK(ops[data].src == base + "/dir");
  CHECK(ops[data].pinned);
  CHECK(ops[data].src_dev == dir_st.st_dev);
  CHECK(ops[data].src_ino == dir_st.st_ino);
  CHECK(ops[data].src_dir);
  auto in = index_of(ops, "/in/file", MountOpKind::bind_ro);  // an input: read-only
  CHECK(ops[in].src == base + "/dir/file");
  CHECK(ops[in].pinned);
  CHECK(ops[in].src_ino == file_st.st_ino);
  CHECK_FALSE(ops[in].src_dir);
  // The record lists the real paths (what init binds).
  CHECK(mount_ops_to_json(ops)[data]["src"] == base + "/dir");
  // A plan is only made from the sources opened for the spec.
  CHECK_FALSE(plan_mounts(spec, {}).ok());
  // A missing source: the message names the flag, what was given and where it was looked for.
  spec.binds[0].src = base + "/gone";
  auto missing = open_bind_sources(spec, base);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("--bind " + base + "/gone: source " + base + "/gone") != std::string::npos);
  CHECK(missing.error().err == ENOENT);
  CHECK(std::system(("rm -rf " + base).c_str()) == 0);
}

TEST_CASE("mount plan: an image root pre-creates its mount points from the same list") {
  RunSpec spec;
  spec.image = "busybox";
  spec.workdir = "/work/here";
  spec.binds = {BindMount{"/etc", "/data", false}};
  auto plan = plan_of(spec);
  REQUIRE(plan);
  CHECK(plan->system_dirs.empty());
  auto ops = mount_ops(*plan);
  REQUIRE(ops.size() > 2);
  CHECK(ops[0].kind == MountOpKind::root_overlay);
  CHECK(ops[0].size_bytes == plan->upper_size_bytes);
  CHECK(ops[1].kind == MountOpKind::mount_point);  // the working directory, mounted over by nothing
  CHECK(ops[1].dst == "/work/here");
  std::vector<std::string> pre;
  for (auto& o : ops)
    if (o.precreate) pre.push_back(o.dst);
  CHECK(pre == std::vector<std::string>{"/work/here", "/proc", "/dev", "/tmp", "/out", "/data", "/etc/hosts"});
  // A working directory below a mount needs no mount point of its own.
  plan->workdir = "/tmp/x";
  ops = mount_ops(*plan);
  CHECK(std::none_of(ops.begin(), ops.end(), [](auto& o) { return o.kind == MountOpKind::mount_point; }));
}

TEST_CASE("trace record: a record trace_record builds validates against schemas/trace.schema.json") {
  auto schema = CompiledSchema::compile(trace_schema(), "schemas/trace.schema.json");
  REQUIRE(schema);
  auto plan = host_plan();
  plan.ops = mount_ops(plan);
  json record = record_with(plan);
  auto errors = schema->validate(record);
  std::string all;
  for (auto& e : errors) all += e.pointer + ": " + e.message + "\n";
  CHECK_MESSAGE(errors.empty(), all);
  // The schema does check the list: an unknown operation or a bad mode is refused, by place.
  json bad = record;
  bad["image"]["mounts"][0]["op"] = "mount_everything";
  bad["image"]["mounts"][1]["mode"] = "rwx";
  errors = schema->validate(bad);
  REQUIRE(errors.size() >= 2);
  CHECK(errors[0].pointer.rfind("/image/mounts/", 0) == 0);
  // Records of sbx before the list (binds only, no op) still validate, for replay and verify.
  json old = record;
  old["image"]["mounts"] = json::array({{{"src", "/usr"}, {"dst", "/usr"}, {"rw", false}}});
  errors = schema->validate(old);
  CHECK_MESSAGE(errors.empty(), (errors.empty() ? "" : errors[0].pointer + ": " + errors[0].message));
  old["image"]["mounts"][0].erase("rw");  // but an entry is either an operation or an old bind
  CHECK_FALSE(schema->validate(old).empty());
}

TEST_CASE("tmpfs_inodes: one inode per KiB of a tmpfs's size, never fewer than the floor") {
  CHECK(sbx::tmpfs_inodes(64LL << 20) == 65536);
  CHECK(sbx::tmpfs_inodes(16LL << 20) == 16384);
  CHECK(sbx::tmpfs_inodes(0) == sbx::kMinTmpfsInodes);
  CHECK(sbx::tmpfs_inodes(4096) == sbx::kMinTmpfsInodes);
}
