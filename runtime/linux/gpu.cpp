#include "runtime/linux/gpu.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/base/trace_field.hpp"
#include "runtime/model/environment.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/text_escape.hpp"

namespace sbx {
namespace {
using nlohmann::json;

constexpr std::size_t kMaxDirEntries = 4096;  // per directory read while discovering
constexpr std::size_t kMaxDriverFiles = 256;
constexpr std::size_t kMaxInfoBytes = 64 * 1024;     // one /proc/driver/nvidia file
constexpr std::size_t kMaxCdiBytes = 1 << 20;        // one CDI spec
constexpr std::size_t kMaxCdiDepth = 16;             // a CDI spec is 5 levels deep
constexpr std::size_t kMaxLdCacheBytes = 16u << 20;  // /etc/ld.so.cache (~100 KB on Debian)

// The driver's user-space side a CUDA program loads (libnvidia-container's list for compute and
// utility), matched as name prefixes ("libcuda.so" matches libcuda.so.1 and libcuda.so.550.54.15).
const char* const kDriverLibs[] = {"libcuda.so",
                                   "libcudadebugger.so",
                                   "libnvidia-ml.so",
                                   "libnvidia-ptxjitcompiler.so",
                                   "libnvidia-nvvm.so",
                                   "libnvidia-gpucomp.so",
                                   "libnvidia-allocator.so",
                                   "libnvidia-cfg.so",
                                   "libnvidia-opencl.so",
                                   "libnvidia-pkcs11.so",
                                   "libnvidia-pkcs11-openssl3.so"};
const char* const kDriverTools[] = {"nvidia-smi", "nvidia-debugdump"};

bool starts_with_any(const std::string& name, const char* const* list, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (name.rfind(list[i], 0) == 0) return true;
  return false;
}
bool is_driver_lib(const std::string& name) { return starts_with_any(name, kDriverLibs, std::size(kDriverLibs)); }
bool is_driver_tool(const std::string& name) {
  for (auto* t : kDriverTools)
    if (name == t) return true;
  return false;
}

std::string basename_of(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}
std::string dirname_of(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos || s == 0 ? "/" : p.substr(0, s);
}

std::vector<std::string> list_names(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    out.push_back(n);
    if (out.size() >= kMaxDirEntries) break;
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_small(const std::string& path) {
  auto r = read_bounded(path, kMaxInfoBytes, "gpu", path);
  return r ? *r : std::string();
}

std::string trim(std::string s) {
  auto b = s.find_first_not_of(" \t\r\n");
  auto e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::string octal_mode(unsigned m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", m & 07777);
  return buf;
}

bool system_path(const std::string& p) {
  for (const char* d : {"/usr/", "/lib/", "/lib64/", "/lib32/", "/bin/", "/sbin/"})
    if (p.rfind(d, 0) == 0) return true;
  return false;
}

// The GPUs the driver reports, in nvidia-smi's index order (PCI bus id), or, without
// /proc/driver/nvidia/gpus, one per /dev/nvidia<N> node in minor order (no UUID or name then).
std::vector<GpuInfo> discover_gpus(const GpuHostPaths& p) {
  std::vector<GpuInfo> gpus;
  std::string dir = p.host(p.proc_driver) + "/gpus";
  for (auto& bus : list_names(dir)) {
    GpuInfo g = parse_gpu_information(read_small(dir + "/" + bus + "/information"));
    if (g.bus_id.empty()) g.bus_id = bus;
    if (g.minor >= 0) gpus.push_back(g);
    if (gpus.size() >= kMaxGpus) break;
  }
  if (gpus.empty()) {
    for (auto& n : list_names(p.host(p.dev))) {
      if (n.size() < 7 || n.rfind("nvidia", 0) != 0 || n.find_first_not_of("0123456789", 6) != std::string::npos)
        continue;
      if (n.size() > 10) continue;
      GpuInfo g;
      g.minor = std::atoi(n.c_str() + 6);
      gpus.push_back(g);
      if (gpus.size() >= kMaxGpus) break;
    }
    std::sort(gpus.begin(), gpus.end(), [](auto& a, auto& b) { return a.minor < b.minor; });
  } else {
    std::sort(gpus.begin(), gpus.end(), [](auto& a, auto& b) { return a.bus_id < b.bus_id; });
  }
  for (std::size_t i = 0; i < gpus.size(); ++i) gpus[i].index = static_cast<int>(i);
  return gpus;
}

std::string describe_gpus(const std::vector<GpuInfo>& gpus) {
  if (gpus.empty()) return "this host shows no GPU";
  std::string s = "this host has " + std::to_string(gpus.size()) + ":";
  for (auto& g : gpus) {
    s += " " + std::to_string(g.index);
    if (!g.uuid.empty()) s += " (" + g.uuid + ")";
  }
  return s;
}

// The sandbox's program must be able to open the node as the host sees it: sbx never changes a
// host node's owner or mode (the node is the host's, shared by everyone using the GPU). As host
// root the program's host ids are the mapped range's (userns.hpp) and its supplementary groups
// are dropped, so only the matching owner or "other" bits count; rootless it is the caller, whom
// access(2) asks directly.
Status check_openable(const GpuNode& n, const GpuPlanInput& in) {
  bool ok;
  if (::geteuid() != 0) {
    ok = ::access(n.host_path.c_str(), R_OK | W_OK) == 0;
  } else {
    unsigned m = n.mode;
    ok = (m & 06) == 06 || (n.uid == in.host_uid && (m & 0600) == 0600) || (n.gid == in.host_gid && (m & 060) == 060);
  }
  if (ok) return {};
  return make_error("gpu",
                    n.path + " is mode " + octal_mode(n.mode) + ", owner " + std::to_string(n.uid) + ":" +
                        std::to_string(n.gid) + ": the sandbox's user (host uid " + std::to_string(in.host_uid) +
                        ") could not open it, and sbx does not change the host's nodes; have the driver create "
                        "them readable and writable by all (NVreg_DeviceFileMode=0666, its default)",
                    EACCES);
}

// The character-device majors the NVIDIA driver registers: 195 (nvidia0.., nvidiactl) and the
// dynamic ones it names in the host's /proc/devices (nvidia-uvm, nvidia-caps, ...). Read from the
// real /proc, never from SBX_TEST_GPU_HOST's tree: what decides which devices a sandbox may open
// must not come from a directory the caller points at.
std::set<unsigned> nvidia_majors() {
  std::set<unsigned> m = {195};
  auto text = read_bounded("/proc/devices", 1 << 16, "gpu", "/proc/devices");
  if (!text) return m;
  bool chr = false;
  std::size_t i = 0;
  while (i < text->size()) {
    std::size_t j = text->find('\n', i);
    if (j == std::string::npos) j = text->size();
    std::string line = text->substr(i, j - i);
    i = j + 1;
    if (line.starts_with("Character devices:")) chr = true;
    else if (line.starts_with("Block devices:")) chr = false;
    else if (chr) {
      unsigned major = 0;
      char name[64] = {};
      if (std::sscanf(line.c_str(), "%u %63s", &major, name) == 2 && std::string_view(name).starts_with("nvidia"))
        m.insert(major);
    }
  }
  return m;
}

Result<GpuNode> node_at(const GpuHostPaths& p, const std::string& inside, const std::string& host_path) {
  struct stat st;
  if (::lstat(host_path.c_str(), &st) != 0) return sys_error("gpu", "device node " + host_path);
  if (!S_ISCHR(st.st_mode))
    return make_error("gpu", host_path + " is not a character device (" + file_kind(st.st_mode) + ")", ENODEV);
  // Only the driver's own devices are ever bound usable (not nodev): a CDI spec or a test tree
  // that names /dev/fuse, /dev/kvm or /dev/net/tun as a GPU node is refused. /dev/null's numbers
  // (1,3) are allowed as the tests' stand-in: the sandbox has /dev/null anyway.
  static const std::set<unsigned> majors = nvidia_majors();
  bool null_stand_in = major(st.st_rdev) == 1 && minor(st.st_rdev) == 3;
  if (!majors.contains(major(st.st_rdev)) && !null_stand_in)
    return make_error("gpu",
                      host_path + " is character device " + std::to_string(major(st.st_rdev)) + ":" +
                          std::to_string(minor(st.st_rdev)) +
                          ", not one of the NVIDIA driver's (major 195 or a "
                          "major /proc/devices names nvidia*): refused",
                      EPERM);
  (void)p;
  GpuNode n;
  n.path = inside;
  n.host_path = host_path;
  n.major = major(st.st_rdev);
  n.minor = minor(st.st_rdev);
  n.mode = st.st_mode & 07777;
  n.uid = st.st_uid;
  n.gid = st.st_gid;
  return n;
}

bool valid_sandbox_path(const std::string& p) {
  if (p.empty() || p[0] != '/' || p.size() > 4096) return false;
  if (p.find("/../") != std::string::npos || p.ends_with("/..") || p.find('\0') != std::string::npos) return false;
  return true;
}

// Adds a driver file (its real path) to the plan: visible through the host root's read-only /usr,
// or bound read-only.
void add_driver_file(GpuPlan& plan, const GpuHostPaths& p, const GpuPlanInput& in, const std::string& real_path,
                     std::set<std::string>& seen) {
  if (!seen.insert(real_path).second || seen.size() > kMaxDriverFiles) return;
  std::string host = p.host(real_path);
  struct stat st;
  if (::stat(host.c_str(), &st) != 0 || (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))) {
    plan.notes.push_back("skipped " + real_path + ": not a regular file or directory (a dangling symlink?)");
    return;
  }
  if (p.prefix.empty() && in.host_root && system_path(real_path)) plan.visible_files.push_back(real_path);
  else plan.driver_files.push_back({host, real_path, false});
}

// Driver libraries and tools: the loader cache's entries, then /usr/local/nvidia/{lib64,lib,bin}
// (where driver containers and the GPU test machine keep them; the loader cache does not list them).
void discover_driver_files(GpuPlan& plan, const GpuHostPaths& p, const GpuPlanInput& in) {
  std::set<std::string> seen;
  std::set<std::string> cache_dirs;
  if (auto data = read_bounded(p.host(p.ld_cache), kMaxLdCacheBytes, "gpu", p.ld_cache)) {
    for (auto& path : parse_ld_cache(*data)) {
      if (!is_driver_lib(basename_of(path))) continue;
      cache_dirs.insert(dirname_of(path));
      add_driver_file(plan, p, in, path, seen);
    }
  }
  std::vector<std::string> lib_dirs, tool_dirs;
  for (auto& root : p.driver_dirs) {
    for (const char* sub : {"/lib64", "/lib", "/bin"}) {
      std::string dir = root + sub;
      bool bin = std::strcmp(sub, "/bin") == 0;
      bool any = false;
      for (auto& n : list_names(p.host(dir))) {
        if (bin ? !is_driver_tool(n) : !is_driver_lib(n)) continue;
        add_driver_file(plan, p, in, dir + "/" + n, seen);
        any = true;
      }
      if (any) (bin ? tool_dirs : lib_dirs).push_back(dir);
    }
  }
  // With the prefix (tests), the loader cache's directories are not the sandbox's: name them too.
  if (!p.prefix.empty())
    for (auto& d : cache_dirs) lib_dirs.push_back(d);
  // nvidia-smi from the system's PATH (Debian's nvidia-smi package puts it in /usr/bin).
  for (const char* d : {"/usr/bin", "/bin"})
    for (auto* t : kDriverTools)
      if (::access(p.host(std::string(d) + "/" + t).c_str(), X_OK) == 0)
        add_driver_file(plan, p, in, std::string(d) + "/" + t, seen);
  std::string ld;
  for (auto& d : lib_dirs) ld += (ld.empty() ? "" : ":") + d;
  if (!ld.empty()) plan.env["LD_LIBRARY_PATH"] = ld;
  std::string path = kSandboxPath;
  for (auto& d : tool_dirs) path += ":" + d;
  if (!tool_dirs.empty()) plan.env["PATH"] = path;
}

// Applies one containerEdits object of a CDI spec (https://github.com/cncf-tags/container-device-interface,
// SPEC.md): deviceNodes, mounts and env; hooks and the rest are listed as not supported.
Status apply_cdi_edits(GpuPlan& plan, const GpuHostPaths& p, const json& edits, const std::string& where) {
  if (edits.is_null()) return {};
  if (!edits.is_object()) return make_error("gpu", where + ": containerEdits is not an object");
  for (auto& [k, v] : edits.items()) {
    if (k == "deviceNodes") {
      if (!v.is_array()) return make_error("gpu", where + "/deviceNodes: not an array");
      for (auto& d : v) {
        if (!d.is_object() || !d.contains("path") || !d["path"].is_string())
          return make_error("gpu", where + "/deviceNodes: an entry has no string 'path'");
        std::string path = d["path"];
        std::string host =
            d.contains("hostPath") && d["hostPath"].is_string() ? d["hostPath"].get<std::string>() : path;
        if (!valid_sandbox_path(path) || path.rfind("/dev/", 0) != 0 || !valid_sandbox_path(host))
          return make_error("gpu", where + "/deviceNodes: '" + path + "' is not an absolute path under /dev");
        auto n = node_at(p, path, p.host(host));
        if (!n) return n.error();
        plan.nodes.push_back(*n);
      }
    } else if (k == "mounts") {
      if (!v.is_array()) return make_error("gpu", where + "/mounts: not an array");
      for (auto& m : v) {
        if (!m.is_object() || !m.contains("hostPath") || !m.contains("containerPath") || !m["hostPath"].is_string() ||
            !m["containerPath"].is_string())
          return make_error("gpu", where + "/mounts: an entry lacks string hostPath/containerPath");
        std::string host = m["hostPath"], dst = m["containerPath"];
        if (!valid_sandbox_path(host) || !valid_sandbox_path(dst))
          return make_error("gpu", where + "/mounts: '" + dst + "' is not an absolute path");
        bool rw = false;
        if (m.contains("options") && m["options"].is_array())
          for (auto& o : m["options"]) rw = rw || (o.is_string() && o == "rw");
        if (rw)
          plan.notes.push_back("CDI mount " + dst + " asks rw: bound read-only (sbx binds driver files read-only)");
        plan.driver_files.push_back({p.host(host), dst, false});
      }
    } else if (k == "env") {
      if (!v.is_array()) return make_error("gpu", where + "/env: not an array");
      for (auto& e : v) {
        if (!e.is_string()) return make_error("gpu", where + "/env: an entry is not a string");
        std::string s = e;
        auto eq = s.find('=');
        if (eq == std::string::npos || eq == 0 || s.size() > 32768)
          return make_error("gpu", where + "/env: '" + json_excerpt(e) + "' is not NAME=VALUE");
        plan.env[s.substr(0, eq)] = s.substr(eq + 1);
      }
    } else if (k == "hooks") {
      if (v.is_array())
        for (auto& h : v)
          plan.notes.push_back(
              "CDI hook not run: " +
              (h.is_object()
                   ? json_excerpt(h.value("hookName", json("?"))) + " " + json_excerpt(h.value("path", json("?")))
                   : json_excerpt(h)) +
              " (sbx runs no host program from a CDI spec; the spec's nodes, mounts and env are applied)");
    } else {
      plan.notes.push_back("CDI containerEdits." + k + " not supported: ignored (" + where + ")");
    }
  }
  return {};
}

// The first JSON CDI spec of kind nvidia.com/gpu, in the CDI directories' order; every YAML spec
// is noted as skipped (a YAML one may be what the host meant). Returns the path, or "" for none.
Result<std::pair<std::string, json>> find_cdi_spec(const GpuHostPaths& p, std::vector<std::string>& notes) {
  std::pair<std::string, json> found;
  for (auto& dir : p.cdi_dirs) {
    for (auto& n : list_names(p.host(dir))) {
      std::string path = p.host(dir) + "/" + n;
      if (n.ends_with(".yaml") || n.ends_with(".yml")) {
        notes.push_back("CDI spec " + dir + "/" + n +
                        " skipped: sbx reads JSON CDI specs only (nvidia-ctk cdi generate --format=json)");
        continue;
      }
      if (!n.ends_with(".json") || !found.first.empty()) continue;
      JsonBounds b{kMaxCdiBytes, kMaxCdiDepth, 1u << 16};
      auto spec = read_json_file(path, b, "gpu", "CDI spec " + path);
      if (!spec) return spec.error();
      if (!spec->is_object() || !spec->contains("kind") || !(*spec)["kind"].is_string())
        return make_error("gpu", "CDI spec " + path + ": no string 'kind'");
      if ((*spec)["kind"] != "nvidia.com/gpu") continue;
      found = {path, std::move(*spec)};
    }
  }
  return found;
}

Status plan_from_cdi(GpuPlan& plan, const GpuHostPaths& p, const GpuRequest& req, const std::string& path,
                     const json& spec, const std::vector<GpuInfo>& gpus) {
  plan.granted_by = "cdi";
  plan.cdi_spec = path;
  if (!spec.contains("devices") || !spec["devices"].is_array())
    return make_error("gpu", "CDI spec " + path + ": no 'devices' array");
  const json& devs = spec["devices"];
  std::string names;
  auto find = [&](const std::string& name) -> const json* {
    for (auto& d : devs)
      if (d.is_object() && d.contains("name") && d["name"] == name) return &d;
    return nullptr;
  };
  for (auto& d : devs)
    if (d.is_object() && d.contains("name") && d["name"].is_string())
      names += (names.empty() ? "" : ", ") + d["name"].get<std::string>();
  std::vector<const json*> chosen;
  if (req.all) {
    if (auto* d = find("all")) chosen.push_back(d);
    else
      for (auto& dev : devs) chosen.push_back(&dev);
  } else {
    for (auto& item : req.items) {
      const json* d = find(item);
      if (!d)
        return make_error(
            "gpu", "--gpu " + item + ": CDI spec " + path + " has no device of that name (it has: " + names + ")",
            ENODEV);
      chosen.push_back(d);
    }
  }
  std::string where = "CDI spec " + path;
  SBX_TRY(apply_cdi_edits(plan, p, spec.value("containerEdits", json()), where + ": /containerEdits"));
  for (std::size_t i = 0; i < chosen.size(); ++i)
    SBX_TRY(apply_cdi_edits(plan, p, chosen[i]->value("containerEdits", json()),
                            where + ": device '" + json_excerpt(chosen[i]->value("name", json("?"))) + "'"));
  // What the trace names: the driver's facts of each GPU whose node the spec grants.
  for (auto& n : plan.nodes) {
    std::string b = basename_of(n.path);
    if (b.size() < 7 || b.rfind("nvidia", 0) != 0 || b.find_first_not_of("0123456789", 6) != std::string::npos)
      continue;
    int minor = std::atoi(b.c_str() + 6);
    GpuInfo g;
    g.minor = minor;
    for (auto& h : gpus)
      if (h.minor == minor) g = h;
    plan.gpus.push_back(g);
  }
  return {};
}

Status plan_from_discovery(GpuPlan& plan, const GpuHostPaths& p, const GpuRequest& req,
                           const std::vector<GpuInfo>& gpus) {
  plan.granted_by = "discovery";
  if (req.all) {
    plan.gpus = gpus;
  } else {
    for (auto& item : req.items) {
      const GpuInfo* found = nullptr;
      if (item.find_first_not_of("0123456789") == std::string::npos) {
        int idx = std::atoi(item.c_str());
        for (auto& g : gpus)
          if (g.index == idx) found = &g;
      } else {
        for (auto& g : gpus)
          if (!g.uuid.empty() && (g.uuid == item || g.uuid.rfind(item, 0) == 0)) {
            if (found) return make_error("gpu", "--gpu " + item + ": more than one GPU's UUID starts so", EINVAL);
            found = &g;
          }
      }
      if (!found) return make_error("gpu", "--gpu " + item + ": no such GPU (" + describe_gpus(gpus) + ")", ENODEV);
      plan.gpus.push_back(*found);
    }
  }
  if (plan.gpus.empty()) return make_error("gpu", "--gpu all: " + describe_gpus(gpus), ENODEV);
  for (auto& g : plan.gpus) {
    std::string n = "/dev/nvidia" + std::to_string(g.minor);
    auto node = node_at(p, n, p.host(p.dev) + n.substr(4));
    if (!node) return node.error();
    plan.nodes.push_back(*node);
  }
  // The control nodes every CUDA process opens: nvidiactl (required), nvidia-uvm (unified
  // memory; CUDA needs it), nvidia-uvm-tools (profilers; granted where present).
  for (const char* c : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}) {
    std::string n = std::string("/dev/") + c;
    std::string host = p.host(p.dev) + "/" + c;
    struct stat st;
    if (::lstat(host.c_str(), &st) != 0) {
      if (std::strcmp(c, "nvidiactl") == 0)
        return sys_error("gpu", "device node " + host + " (the driver's control node)");
      plan.notes.push_back(n + " not present on the host: not granted");
      continue;
    }
    auto node = node_at(p, n, host);
    if (!node) return node.error();
    plan.nodes.push_back(*node);
  }
  // nvidia-caps holds MIG capabilities (config, monitor, instances): sbx grants whole GPUs only.
  if (!list_names(p.host(p.dev) + "/nvidia-caps").empty())
    plan.notes.push_back("/dev/nvidia-caps/* not granted: MIG capabilities (sbx grants whole GPUs, no MIG instance)");
  return {};
}

}  // namespace

GpuHostPaths gpu_host_paths() {
  GpuHostPaths p;
  if (const char* t = std::getenv("SBX_TEST_GPU_HOST"); t && *t == '/') p.prefix = t;
  while (p.prefix.size() > 1 && p.prefix.back() == '/') p.prefix.pop_back();
  return p;
}

GpuInfo parse_gpu_information(const std::string& text) {
  GpuInfo g;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t j = text.find('\n', i);
    if (j == std::string::npos) j = text.size();
    std::string line = text.substr(i, j - i);
    i = j + 1;
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    if (value.size() > 256) value.resize(256);
    if (key == "Model") g.name = value;
    else if (key == "GPU UUID") g.uuid = value;
    else if (key == "Bus Location") g.bus_id = value;
    else if (key == "Device Minor" && !value.empty() && value.size() < 6 &&
             value.find_first_not_of("0123456789") == std::string::npos)
      g.minor = std::atoi(value.c_str());
  }
  return g;
}

// The version in /proc/driver/nvidia/version's NVRM line: the first word after "Kernel Module" made
// of digits and dots. The proprietary module writes "... x86_64 Kernel Module  550.54.15  Tue ...",
// the open one "... Open Kernel Module for x86_64  580.159.04  Release Build" (seen on the H200
// host of tests/device/).
std::string parse_driver_version(const std::string& text) {
  auto k = text.find("Kernel Module");
  if (k == std::string::npos) return "";
  const std::size_t from = k + 13, end = text.find('\n', from);
  std::istringstream words(text.substr(from, end == std::string::npos ? std::string::npos : end - from));
  std::string w;
  while (words >> w)
    if (w.size() <= 32 && w.find('.') != std::string::npos && w.find_first_not_of("0123456789.") == std::string::npos)
      return w;
  return "";
}

std::vector<std::string> parse_ld_cache(const std::string& data) {
  // glibc's elf/cache.c: an optional old-format part ("ld.so-1.7.0", nlibs, 12-byte entries), then
  // "glibc-ld.so.cache1.1", nlibs, len_strings, flags, extension offset, 3 unused words (48 bytes
  // in all), then 24-byte entries whose key and value are offsets from the new header's start.
  std::vector<std::string> out;
  static const char kNew[] = "glibc-ld.so.cache1.1";
  std::size_t base = 0;
  if (data.compare(0, 11, "ld.so-1.7.0") == 0 && data.size() >= 16) {
    std::uint32_t n;
    std::memcpy(&n, data.data() + 12, 4);
    std::size_t off = 16 + static_cast<std::size_t>(n) * 12;
    off = (off + 7) & ~static_cast<std::size_t>(7);
    if (off >= data.size()) return out;
    base = off;
  }
  if (data.size() < base + 48 || data.compare(base, 20, kNew) != 0) return out;
  std::uint32_t nlibs;
  std::memcpy(&nlibs, data.data() + base + 20, 4);
  std::size_t avail = (data.size() - base - 48) / 24;
  if (nlibs > avail) nlibs = static_cast<std::uint32_t>(avail);
  for (std::uint32_t i = 0; i < nlibs; ++i) {
    std::uint32_t value;
    std::memcpy(&value, data.data() + base + 48 + i * 24 + 8, 4);
    std::size_t at = base + value;
    if (at >= data.size()) continue;
    std::size_t end = data.find('\0', at);
    if (end == std::string::npos || end - at > 4096) continue;
    std::string path = data.substr(at, end - at);
    if (!path.empty() && path[0] == '/') out.push_back(path);
  }
  return out;
}

Result<GpuPlan> plan_gpu(const GpuPlanInput& in, const GpuHostPaths& p) {
  GpuPlan plan;
  auto req = parse_gpu_request(in.request);
  if (!req) return req.error();
  if (req->empty()) return plan;
  plan.enabled = true;
  plan.request = in.request;
  std::string max_text = in.max == kGpuMaxAll ? "all" : std::to_string(in.max);
  auto refuse = [&](std::size_t asked) {
    std::string count = asked == 0 ? std::string("every GPU") : std::to_string(asked) + (asked == 1 ? " GPU" : " GPUs");
    return make_error("usage", in.request_layer + " asks for " + count + " (" + in.request + "); " + in.max_layer +
                                   " allows at most " + max_text +
                                   " (its gpu.max: a manifest or request may lower it, never raise it; a profile "
                                   "that allows more, e.g. --profile trusted, is the operator's choice)");
  };
  if (in.max != kGpuMaxAll && !req->all && req->items.size() > static_cast<std::size_t>(in.max))
    return refuse(req->items.size());
  if (in.max == 0) return refuse(req->all ? 0 : req->items.size());  // no need to look at the host
  plan.driver_version = parse_driver_version(read_small(p.host(p.proc_driver) + "/version"));
  auto gpus = discover_gpus(p);
  auto cdi = find_cdi_spec(p, plan.notes);
  if (!cdi) return cdi.error();
  if (!cdi->first.empty()) {
    SBX_TRY(plan_from_cdi(plan, p, *req, cdi->first, cdi->second, gpus));
  } else {
    SBX_TRY(plan_from_discovery(plan, p, *req, gpus));
    discover_driver_files(plan, p, in);
  }
  if (in.max != kGpuMaxAll && plan.gpus.size() > static_cast<std::size_t>(in.max)) return refuse(plan.gpus.size());
  if (plan.nodes.size() > 4 * kMaxGpus) return make_error("gpu", "more than 256 device nodes to grant");
  for (auto& n : plan.nodes) SBX_TRY(check_openable(n, in));
  return plan;
}

Result<GpuPlan> plan_gpu_for_run(const RunSpec& spec, const IdentityPlan& identity,
                                 const std::map<std::string, std::string>& layers) {
  GpuPlanInput in;
  in.request = spec.gpu.devices;
  in.max = spec.gpu.max;
  auto layer = [&](const char* k, const char* dflt) {
    auto it = layers.find(k);
    return it == layers.end() ? std::string(dflt) : it->second;
  };
  in.request_layer = layer("gpu", "the request");
  in.max_layer = layer("gpu.max", "the profile");
  // The host ids the program runs as: its ids inside, through the maps.
  auto outside = [](const std::vector<IdMapping>& map, std::uint32_t id) {
    for (auto& m : map)
      if (id >= m.inside && id - m.inside < m.count) return m.outside + (id - m.inside);
    return static_cast<std::uint32_t>(65534);
  };
  in.host_uid = outside(identity.uid_map, identity.uid);
  in.host_gid = outside(identity.gid_map, identity.gid);
  in.host_root = spec.image == "host";
  return plan_gpu(in, gpu_host_paths());
}

json gpu_enforcement_json(const GpuPlan& plan) {
  if (!plan.enabled)
    return trace_object({{"enforcement/gpu/granted", false}, {"enforcement/gpu/nodes", json::array()}});
  json devices = json::array();
  for (auto& g : plan.gpus)
    devices.push_back(
        trace_object({{"enforcement/gpu/devices/[]/index", g.index >= 0 ? json(g.index) : json(nullptr)},
                      {"enforcement/gpu/devices/[]/minor", g.minor >= 0 ? json(g.minor) : json(nullptr)},
                      {"enforcement/gpu/devices/[]/uuid", g.uuid.empty() ? json(nullptr) : json(g.uuid)},
                      {"enforcement/gpu/devices/[]/name", g.name.empty() ? json(nullptr) : json(g.name)},
                      {"enforcement/gpu/devices/[]/bus_id", g.bus_id.empty() ? json(nullptr) : json(g.bus_id)}}));
  json nodes = json::array();
  for (auto& n : plan.nodes)
    nodes.push_back(trace_object(
        {{"enforcement/gpu/nodes/[]/path", n.path},
         {"enforcement/gpu/nodes/[]/host_path", n.host_path},
         {"enforcement/gpu/nodes/[]/major", n.major},
         {"enforcement/gpu/nodes/[]/minor", n.minor},
         {"enforcement/gpu/nodes/[]/mode", octal_mode(n.mode)},
         {"enforcement/gpu/nodes/[]/host_uid", n.uid},
         {"enforcement/gpu/nodes/[]/host_gid", n.gid},
         {"enforcement/gpu/nodes/[]/mount", "bind from the host's /dev, without nodev; read-only /dev around it"}}));
  json files = json::array();
  for (auto& f : plan.driver_files)
    files.push_back(trace_object({{"enforcement/gpu/driver_files/[]/src", f.src},
                                  {"enforcement/gpu/driver_files/[]/dst", f.dst},
                                  {"enforcement/gpu/driver_files/[]/rw", false}}));
  // The environment's names are data: the map is written whole (enforcement/gpu/env/*).
  return trace_object(
      {{"enforcement/gpu/granted", true},
       {"enforcement/gpu/request", plan.request},
       {"enforcement/gpu/granted_by", plan.granted_by},
       {"enforcement/gpu/cdi_spec", plan.cdi_spec.empty() ? json(nullptr) : json(plan.cdi_spec)},
       {"enforcement/gpu/driver_version", plan.driver_version.empty() ? json(nullptr) : json(plan.driver_version)},
       {"enforcement/gpu/devices", devices},
       {"enforcement/gpu/nodes", nodes},
       {"enforcement/gpu/driver_files", files},
       {"enforcement/gpu/visible_files", plan.visible_files},
       {"enforcement/gpu/env", plan.env},
       {"enforcement/gpu/notes", plan.notes},
       {"enforcement/gpu/not_isolated",
        "the GPU is shared with the host and its other users: no GPU memory or compute limit (only "
        "MIG partitions a GPU; sbx grants whole GPUs), and /proc/driver/nvidia shows every GPU"}});
}

json gpu_usage_json(const GpuPlan& plan) {
  if (!plan.enabled) return nullptr;
  return trace_object({{"usage/gpu/memory_peak_bytes", nullptr},
                       {"usage/gpu/memory_reason",
                        "not sampled: sbx does not link the driver's NVML; nvidia-smi --query-compute-apps "
                        "on the host shows a running sandbox's GPU memory"}});
}

}  // namespace sbx
