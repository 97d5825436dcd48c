// The GPU grant's CDI reader (runtime/linux/gpu.cpp: find_cdi_spec, plan_from_cdi, apply_cdi_edits):
// the input is a JSON CDI spec, written as <tree>/etc/cdi/nvidia.json of a stand-in host tree
// (GpuHostPaths::prefix, what SBX_TEST_GPU_HOST sets) and planned with plan_gpu. The first byte
// picks the request (all, 0, 0,1, a UUID); the rest is the spec. As root the tree holds stand-in
// nodes (/dev/null's numbers, as tests/unit/test_gpu.cpp makes them) so that specs naming them
// plan through to the end; without root the planner still reads and refuses every spec.
// Checked besides "no crash": a plan's nodes are under /dev inside and under the tree on the host,
// its binds come from the tree (no "..", no escape by a spec's hostPath), its env names are
// NAME=VALUE keys, and the trace's enforcement/usage JSON of the plan dumps.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/base/fsutil.hpp"
#include "runtime/linux/gpu.hpp"

namespace {

std::string g_tree;

bool inside_tree(const std::string& host) {
  if (host.compare(0, g_tree.size() + 1, g_tree + "/") != 0) return false;
  return host.find("/../") == std::string::npos && !host.ends_with("/..");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  char t[] = "/tmp/sbx-fuzz-cdi-XXXXXX";
  if (!::mkdtemp(t)) std::abort();
  g_tree = t;
  for (auto d : {"/dev", "/etc", "/etc/cdi", "/usr", "/usr/bin", "/usr/lib"}) ::mkdir((g_tree + d).c_str(), 0755);
  for (auto n : {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"})
    if (::mknod((g_tree + n).c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) ::chmod((g_tree + n).c_str(), 0666);
  std::ofstream(g_tree + "/usr/bin/nvidia-smi") << "elf";
  std::ofstream(g_tree + "/usr/lib/libcuda.so.1") << "elf";
  std::atexit([] { (void)sbx::remove_tree(g_tree); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  static const char* requests[] = {"all", "0", "0,1", "GPU-aaaa0000-0000-0000-0000-000000000000"};
  sbx::GpuPlanInput in;
  in.request = requests[data[0] % 4];
  in.max = sbx::kGpuMaxAll;
  in.request_layer = "flag --gpu";
  in.max_layer = "profile 'fuzz'";
  in.host_uid = in.host_gid = 1000;
  {
    std::ofstream f(g_tree + "/etc/cdi/nvidia.json", std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data + 1), static_cast<std::streamsize>(size - 1));
  }
  sbx::GpuHostPaths p;
  p.prefix = g_tree;
  auto plan = sbx::plan_gpu(in, p);
  if (!plan) {
    (void)plan.error().describe();
    return 0;
  }
  for (auto& n : plan->nodes)
    if (!n.path.starts_with("/dev/") || !inside_tree(n.host_path)) std::abort();
  for (auto& b : plan->driver_files)
    if (!inside_tree(b.src) || b.dst.empty() || b.dst[0] != '/') std::abort();
  for (auto& [k, v] : plan->env)
    if (k.empty() || k.find('=') != std::string::npos) std::abort();
  (void)sbx::gpu_enforcement_json(*plan).dump();
  (void)sbx::gpu_usage_json(*plan).dump();
  return 0;
}
