#pragma once
// GPUs in the sandbox (`--gpu all|N[,N]|UUID`, the RunSpec's `gpu` key). The parent plans, from
// the host, what the sandbox gets: the requested GPUs' device nodes plus the control nodes they
// need (nvidiactl, nvidia-uvm, nvidia-uvm-tools), and the driver's user-space side (libraries and
// tools) read-only, with the loader path set. Two sources, as the container ecosystem does:
//   cdi        a CDI spec (JSON) for kind nvidia.com/gpu in /etc/cdi or /var/run/cdi names the
//              device nodes, mounts and environment of each device; hooks are not run (listed)
//   discovery  /dev/nvidia* nodes, /proc/driver/nvidia/gpus/*/information for index, UUID, name
//              and minor number, and the driver's libraries from the loader cache and
//              /usr/local/nvidia
// The child bind-mounts each node into the sandbox's tmpfs /dev WITHOUT nodev (mounts.cpp,
// build_dev): a tmpfs mounted in a user namespace is implicitly nodev, and so is every other bind
// sbx makes; a node can be opened only through a mount of the host's that allows devices.
//
// What is not isolated (man sbx, GPU): a granted GPU is shared with the host and other users of
// it; there is no GPU memory or compute limit (only MIG partitions a GPU, and sbx grants none);
// /proc/driver/nvidia is the host's /proc view, filtered by nothing but the kernel.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/base/error.hpp"
#include "runtime/model/gpu_request.hpp"
#include "runtime/model/spec.hpp"
#include "runtime/linux/userns.hpp"

namespace sbx {

// Where the host's GPU facts are read. The real paths, unless SBX_TEST_GPU_HOST=DIR is set: then
// every path is DIR + the real path (DIR/dev/nvidia0, DIR/proc/driver/nvidia, DIR/etc/cdi, ...),
// and the sandbox sees each file at its real path. A hook for the test suite only (a CI host has
// no GPU; tests build a tree of stand-in nodes with mknod); it grants nothing the caller could not
// open on the host itself (the nodes keep their host owner and mode, and the kernel checks them).
struct GpuHostPaths {
  std::string prefix;  // "" or the test tree
  std::string dev = "/dev";
  std::string proc_driver = "/proc/driver/nvidia";
  std::vector<std::string> cdi_dirs = {"/etc/cdi", "/var/run/cdi"};
  std::string ld_cache = "/etc/ld.so.cache";
  std::vector<std::string> driver_dirs = {"/usr/local/nvidia"};
  std::string host(const std::string& path) const { return prefix + path; }
};
GpuHostPaths gpu_host_paths();  // reads SBX_TEST_GPU_HOST

struct GpuInfo {
  int index = -1;                  // nvidia-smi's: PCI bus order
  int minor = -1;                  // /dev/nvidia<minor>
  std::string uuid, name, bus_id;  // "" when the driver did not say
};

struct GpuNode {
  std::string path;       // inside the sandbox (/dev/nvidia0)
  std::string host_path;  // as read on the host (prefix included)
  unsigned major = 0, minor = 0;
  unsigned mode = 0;               // permission bits
  std::uint32_t uid = 0, gid = 0;  // host owner
};

struct GpuPlan {
  bool enabled = false;
  std::string request;                     // as asked ("0", "all", ...)
  std::string granted_by;                  // "cdi" or "discovery"
  std::string cdi_spec;                    // the spec applied (host path), "" for discovery
  std::string driver_version;              // "" when /proc/driver/nvidia/version did not say
  std::vector<GpuInfo> gpus;               // the granted GPUs
  std::vector<GpuNode> nodes;              // every node bound into /dev (GPUs and control nodes)
  std::vector<BindMount> driver_files;     // read-only binds (src host path, dst in-sandbox path)
  std::vector<std::string> visible_files;  // driver files already visible through the system root
  std::map<std::string, std::string> env;  // LD_LIBRARY_PATH, PATH, and the CDI spec's env
  std::vector<std::string> notes;          // what was skipped or is not supported, and why
};

// Plans the GPU grant for `spec.gpu` against the host. `max` is the ceiling (kGpuMaxAll for no
// ceiling); `max_layer` and `request_layer` name who set them, for the refusal ("profile
// 'untrusted'", "flag --gpu", "pack.json"). `sandbox_uid`/`sandbox_gid` are the host ids the
// program runs as (what the kernel checks a node's mode against); `host_root` whether the root is
// the host's (--image host: /usr is visible already, so driver files there need no bind).
struct GpuPlanInput {
  std::string request;
  int max = 0;
  std::string max_layer, request_layer;
  std::uint32_t host_uid = 0, host_gid = 0;
  bool host_root = true;
};
Result<GpuPlan> plan_gpu(const GpuPlanInput& in, const GpuHostPaths& paths);

// plan_gpu for a run: the input from the spec, its identity plan and the layers map of the
// request ("gpu": who asked, "gpu.max": who set the ceiling; RunRequest::limit_layers).
Result<GpuPlan> plan_gpu_for_run(const RunSpec& spec, const IdentityPlan& identity,
                                 const std::map<std::string, std::string>& layers);

// Parsers exposed for unit tests.
// /proc/driver/nvidia/gpus/<bus>/information: "Model:", "GPU UUID:", "Device Minor:", "Bus Location:".
GpuInfo parse_gpu_information(const std::string& text);
// /proc/driver/nvidia/version: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  ..."
std::string parse_driver_version(const std::string& text);
// The library paths named in an ld.so.cache ("glibc-ld.so.cache1.1" format); bounded by the text.
std::vector<std::string> parse_ld_cache(const std::string& data);

// The trace's enforcement.gpu and usage.gpu.
nlohmann::json gpu_enforcement_json(const GpuPlan& plan);
nlohmann::json gpu_usage_json(const GpuPlan& plan);

}  // namespace sbx
