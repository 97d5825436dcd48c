#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/base/fsutil.hpp"
#include "runtime/linux/gpu.hpp"
#include "runtime/linux/limits_plan.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/model/spec.hpp"

using namespace sbx;

TEST_CASE("gpu: --gpu requests parse strictly") {
  CHECK(parse_gpu_request("")->empty());
  CHECK(parse_gpu_request("none")->empty());
  CHECK(parse_gpu_request("all")->all);
  auto r = parse_gpu_request("0,1,0");
  REQUIRE(r);
  CHECK(r->items == std::vector<std::string>{"0", "1"});
  CHECK(parse_gpu_request("GPU-4f3e2c1a-0000-1111-2222-333344445555")->items.size() == 1);
  CHECK_FALSE(parse_gpu_request("0,"));
  CHECK_FALSE(parse_gpu_request("-1"));
  CHECK_FALSE(parse_gpu_request("1024"));
  CHECK_FALSE(parse_gpu_request("all,0"));
  CHECK_FALSE(parse_gpu_request("GPU-$(id)"));
  CHECK(parse_gpu_request("MIG-abcdef12").error().message.find("MIG instances are not supported") != std::string::npos);
}

TEST_CASE("gpu: the driver's /proc files") {
  auto g = parse_gpu_information(
      "Model: \t\t NVIDIA H200\nIRQ:   \t\t 123\nGPU UUID: \t GPU-0a1b2c3d-1111-2222-3333-444455556666\n"
      "Video BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDevice Minor: \t 3\n"
      "Bus Location: \t 0000:4b:00.0\n");
  CHECK(g.name == "NVIDIA H200");
  CHECK(g.uuid == "GPU-0a1b2c3d-1111-2222-3333-444455556666");
  CHECK(g.minor == 3);
  CHECK(g.bus_id == "0000:4b:00.0");
  CHECK(parse_gpu_information("Device Minor: x\n").minor == -1);
  CHECK(parse_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
                             "GCC version:  gcc version 12.2.0\n") == "550.54.15");
  // The open kernel module's line, as the H200 host of tests/device/ shows it.
  CHECK(parse_driver_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
                             "(nixbld@)  \nGCC version:  gcc version 14.3.0 (GCC)\n") == "580.159.04");
  CHECK(parse_driver_version("NVRM version: NVIDIA UNIX Kernel Module for x86_64\nGCC version: 12.2\n") == "");
  CHECK(parse_driver_version("garbage") == "");
}

namespace {
// A new-format ld.so.cache with the given paths (key = value = the path), as glibc writes it.
std::string make_ld_cache(const std::vector<std::string>& paths) {
  std::string header = "glibc-ld.so.cache1.1";
  std::string strings;
  std::vector<std::uint32_t> offs;
  std::size_t entries_end = 48 + paths.size() * 24;
  for (auto& p : paths) {
    offs.push_back(static_cast<std::uint32_t>(entries_end + strings.size()));
    strings += p + '\0';
  }
  std::string out(48, '\0');
  std::memcpy(out.data(), header.data(), 20);
  std::uint32_t n = static_cast<std::uint32_t>(paths.size()), len = static_cast<std::uint32_t>(strings.size());
  std::memcpy(out.data() + 20, &n, 4);
  std::memcpy(out.data() + 24, &len, 4);
  for (auto off : offs) {
    std::string e(24, '\0');
    std::memcpy(e.data() + 4, &off, 4);
    std::memcpy(e.data() + 8, &off, 4);
    out += e;
  }
  return out + strings;
}
}  // namespace

TEST_CASE("gpu: ld.so.cache entries are read within bounds") {
  auto data = make_ld_cache({"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/lib/x86_64-linux-gnu/libc.so.6"});
  auto paths = parse_ld_cache(data);
  CHECK(paths == std::vector<std::string>{"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/lib/x86_64-linux-gnu/libc.so.6"});
  CHECK(parse_ld_cache(data.substr(0, 60)).empty());  // truncated: no entry complete
  std::string bad = data;
  std::uint32_t huge = 0xfffffff0;
  std::memcpy(bad.data() + 48 + 8, &huge, 4);  // an offset past the end is skipped
  CHECK(parse_ld_cache(bad).size() == 1);
  CHECK(parse_ld_cache("not a cache").empty());
  // The real one, if any: parsed without trouble, absolute paths only.
  if (auto real = read_file("/etc/ld.so.cache"))
    for (auto& p : parse_ld_cache(*real)) CHECK(p[0] == '/');
}

TEST_CASE("gpu: gpu.max is a profile ceiling a manifest may lower, never raise") {
  RunSpec c, a;
  c.gpu.max = 1;
  a.gpu.max = 1;
  CHECK(check_ceilings(c, a, "pack.json", "untrusted"));
  a.gpu.max = 0;
  CHECK(check_ceilings(c, a, "pack.json", "untrusted"));
  a.gpu.max = 2;
  auto st = check_ceilings(c, a, "pack.json", "untrusted");
  REQUIRE_FALSE(st);
  CHECK(st.error().message == "pack.json: /gpu/max: 2 is above the ceiling of profile 'untrusted' (1): a manifest or request may lower it, never raise it");
  a.gpu.max = kGpuMaxAll;
  CHECK_FALSE(check_ceilings(c, a, "pack.json", "untrusted"));
  c.gpu.max = kGpuMaxAll;
  CHECK(check_ceilings(c, a, "pack.json", "trusted"));
}

TEST_CASE("gpu: the spec's gpu key round-trips and is strict") {
  auto j = spec_to_json(RunSpec{});
  CHECK(j["gpu"] == nlohmann::json{{"devices", ""}, {"max", 0}});
  j["gpu"] = {{"devices", "0"}, {"max", "all"}};
  auto s = spec_from_json(j, "x.json");
  REQUIRE(s);
  CHECK(s->gpu.devices == "0");
  CHECK(s->gpu.max == kGpuMaxAll);
  CHECK(spec_to_json(*s)["gpu"]["max"] == "all");
  j["gpu"] = {{"devices", "zero"}};
  CHECK(spec_from_json(j, "x.json").error().message.find("x.json: /gpu/devices: --gpu: bad GPU 'zero'") == 0);
  j["gpu"] = {{"max", 65}};
  CHECK_FALSE(spec_from_json(j, "x.json"));
  j["gpu"] = {{"max", "some"}};
  CHECK_FALSE(spec_from_json(j, "x.json"));
  j["gpu"] = {{"count", 1}};
  CHECK(spec_from_json(j, "x.json").error().message == "x.json: /gpu/count: unknown key");
}

TEST_CASE("gpu: without cgroup v2, --gpu leaves memory unlimited instead of breaking CUDA with rlimits") {
  Limits l;
  l.memory_bytes = 512LL << 20;
  CgroupInfo none;
  none.layout = "hybrid";
  auto plain = plan_limits(l, none, false, true, false);
  REQUIRE(plain.find("memory"));
  CHECK(plain.find("memory")->applied);
  CHECK_FALSE(plain.rlimits.empty());
  auto gpu = plan_limits(l, none, false, true, true);
  REQUIRE(gpu.find("memory"));
  CHECK_FALSE(gpu.find("memory")->applied);
  CHECK(gpu.rlimits.empty());  // neither RLIMIT_DATA nor RLIMIT_FSIZE (and never RLIMIT_AS)
  CHECK(gpu.find("memory")->reason.find("Host memory is NOT bounded") != std::string::npos);
  CHECK(gpu.unbounded().size() == 1);  // what --require-limits refuses
}

namespace {
struct Fixture {
  std::string dir;
  Fixture() {
    char t[] = "/tmp/sbx-gpu-unit-XXXXXX";
    dir = ::mkdtemp(t);
  }
  ~Fixture() { (void)remove_tree(dir); }
  void mkdirs(const std::string& rel) { (void)ensure_dir(dir + rel, 0755); }
  void write(const std::string& rel, const std::string& text) { std::ofstream(dir + rel) << text; }
  bool node(const std::string& rel, mode_t mode = 0666) {
    if (::mknod((dir + rel).c_str(), S_IFCHR | mode, makedev(1, 3)) != 0) return false;
    return ::chmod((dir + rel).c_str(), mode) == 0;
  }
};
}  // namespace

TEST_CASE("gpu: plan on a stand-in host: discovery, ceilings, access, CDI") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: stand-in device nodes need mknod, which only root may do");
    return;
  }
  Fixture f;
  f.mkdirs("/dev");
  f.mkdirs("/proc/driver/nvidia/gpus/0000:4b:00.0");
  f.mkdirs("/proc/driver/nvidia/gpus/0000:1a:00.0");
  f.write("/proc/driver/nvidia/gpus/0000:4b:00.0/information", "Model: NVIDIA H200\nGPU UUID: GPU-bbbb0000-0000-0000-0000-000000000000\nDevice Minor: 0\nBus Location: 0000:4b:00.0\n");
  f.write("/proc/driver/nvidia/gpus/0000:1a:00.0/information", "Model: NVIDIA H200\nGPU UUID: GPU-aaaa0000-0000-0000-0000-000000000000\nDevice Minor: 1\nBus Location: 0000:1a:00.0\n");
  f.write("/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue\n");
  for (auto n : {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"}) REQUIRE(f.node(n));
  f.mkdirs("/usr/local/nvidia/lib64");
  f.mkdirs("/usr/local/nvidia/bin");
  f.write("/usr/local/nvidia/lib64/libcuda.so.550.54.15", "elf");
  f.write("/usr/local/nvidia/lib64/libunrelated.so", "elf");
  f.write("/usr/local/nvidia/bin/nvidia-smi", "#!/bin/sh\n");
  GpuHostPaths p;
  p.prefix = f.dir;
  GpuPlanInput in;
  in.max = 1;
  in.request = "0";
  in.request_layer = "flag --gpu";
  in.max_layer = "profile 'untrusted'";
  in.host_uid = in.host_gid = 1879048192;
  auto plan = plan_gpu(in, p);
  REQUIRE(plan);
  CHECK(plan->granted_by == "discovery");
  CHECK(plan->driver_version == "550.54.15");
  REQUIRE(plan->gpus.size() == 1);
  // Index 0 is the lowest bus id (nvidia-smi's order), which is minor 1 here.
  CHECK(plan->gpus[0].minor == 1);
  CHECK(plan->gpus[0].uuid == "GPU-aaaa0000-0000-0000-0000-000000000000");
  std::vector<std::string> nodes;
  for (auto& n : plan->nodes) nodes.push_back(n.path);
  CHECK(nodes == std::vector<std::string>{"/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"});
  REQUIRE(plan->driver_files.size() == 2);
  CHECK(plan->driver_files[0].dst == "/usr/local/nvidia/lib64/libcuda.so.550.54.15");
  CHECK(plan->driver_files[0].src == f.dir + "/usr/local/nvidia/lib64/libcuda.so.550.54.15");
  CHECK(plan->env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64");
  in.request = "GPU-bbbb";
  CHECK(plan_gpu(in, p)->gpus[0].minor == 0);
  in.request = "0,1";
  auto refused = plan_gpu(in, p);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.find("flag --gpu asks for 2 GPUs (0,1); profile 'untrusted' allows at most 1") == 0);
  in.request = "all";  // two on this host
  CHECK_FALSE(plan_gpu(in, p));
  in.max = kGpuMaxAll;
  CHECK(plan_gpu(in, p)->gpus.size() == 2);
  in.request = "7";
  CHECK(plan_gpu(in, p).error().message.find("--gpu 7: no such GPU (this host has 2: 0 (GPU-aaaa") == 0);
  // A node the sandbox's host uid could not open is refused, not chmod'ed.
  REQUIRE(::chmod((f.dir + "/dev/nvidiactl").c_str(), 0660) == 0);
  in.request = "0";
  auto denied = plan_gpu(in, p);
  REQUIRE_FALSE(denied);
  CHECK(denied.error().message.find("/dev/nvidiactl is mode 0660, owner 0:0: the sandbox's user (host uid 1879048192) could not open it") == 0);
  REQUIRE(::chmod((f.dir + "/dev/nvidiactl").c_str(), 0666) == 0);
  // A CDI spec takes over: its nodes, mounts and env; hooks listed as not run; YAML skipped.
  f.mkdirs("/etc/cdi");
  f.write("/etc/cdi/a.yaml", "cdiVersion: 0.6.0\n");
  f.write("/etc/cdi/nvidia.json", R"({"cdiVersion":"0.6.0","kind":"nvidia.com/gpu",
    "devices":[{"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"}]}}],
    "containerEdits":{"deviceNodes":[{"path":"/dev/nvidiactl"}],
      "mounts":[{"hostPath":"/usr/local/nvidia/bin/nvidia-smi","containerPath":"/usr/bin/nvidia-smi","options":["ro","nosuid"]}],
      "env":["NVIDIA_VISIBLE_DEVICES=void"],
      "hooks":[{"hookName":"createContainer","path":"/usr/bin/nvidia-cdi-hook","args":["nvidia-cdi-hook","update-ldcache"]}]}})");
  auto cdi = plan_gpu(in, p);
  REQUIRE(cdi);
  CHECK(cdi->granted_by == "cdi");
  CHECK(cdi->cdi_spec == f.dir + "/etc/cdi/nvidia.json");
  REQUIRE(cdi->nodes.size() == 2);
  CHECK(cdi->nodes[0].path == "/dev/nvidiactl");
  CHECK(cdi->nodes[1].path == "/dev/nvidia0");
  REQUIRE(cdi->gpus.size() == 1);
  CHECK(cdi->gpus[0].uuid == "GPU-bbbb0000-0000-0000-0000-000000000000");
  CHECK(cdi->env["NVIDIA_VISIBLE_DEVICES"] == "void");
  REQUIRE(cdi->driver_files.size() == 1);
  CHECK(cdi->driver_files[0].dst == "/usr/bin/nvidia-smi");
  std::string notes;
  for (auto& n : cdi->notes) notes += n + "\n";
  CHECK(notes.find("a.yaml skipped: sbx reads JSON CDI specs only") != std::string::npos);
  CHECK(notes.find("CDI hook not run: \"createContainer\" \"/usr/bin/nvidia-cdi-hook\"") != std::string::npos);
  in.request = "1";
  CHECK(plan_gpu(in, p).error().message.find("has no device of that name (it has: 0)") != std::string::npos);
  // A malformed spec is an error naming it; a deep one is refused by the parser's bound.
  f.write("/etc/cdi/nvidia.json", std::string(40, '[') + std::string(40, ']'));
  CHECK(plan_gpu(in, p).error().message.find("CDI spec " + f.dir + "/etc/cdi/nvidia.json") != std::string::npos);
  // A spec (or a test tree) that names another character device as a GPU node: /dev/fuse's
  // numbers (10,229) would be bound usable, not nodev. Only the driver's majors pass.
  REQUIRE(::mknod((f.dir + "/dev/fuse-like").c_str(), S_IFCHR | 0666, makedev(10, 229)) == 0);
  REQUIRE(::chmod((f.dir + "/dev/fuse-like").c_str(), 0666) == 0);
  f.write("/etc/cdi/nvidia.json", R"({"cdiVersion":"0.6.0","kind":"nvidia.com/gpu",
    "devices":[{"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0","hostPath":"/dev/fuse-like"}]}}]})");
  in.request = "0";
  auto smuggled = plan_gpu(in, p);
  REQUIRE_FALSE(smuggled);
  INFO(smuggled.error().message);
  CHECK(smuggled.error().message.find("is character device 10:229, not one of the NVIDIA driver's") != std::string::npos);
}
