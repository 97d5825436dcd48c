#include "runtime/cgroup.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace sbx {

CgroupInfo detect_cgroup() {
  CgroupInfo info;
  bool v1 = false;
  std::ifstream mounts("/proc/self/mounts");
  std::string dev, dir, type, rest;
  while (mounts >> dev >> dir >> type && std::getline(mounts, rest)) {
    if (type == "cgroup2" && info.mount.empty()) info.mount = dir;
    if (type == "cgroup") v1 = true;
  }
  if (info.mount.empty()) info.layout = v1 ? "v1" : "none";
  else info.layout = v1 ? "hybrid" : "v2";
  std::ifstream self("/proc/self/cgroup");
  std::string line;
  while (std::getline(self, line))
    if (line.rfind("0::", 0) == 0) info.self_path = line.substr(3);
  if (!info.mount.empty()) {
    std::string dirpath = info.mount + (info.self_path == "/" ? "" : info.self_path);
    std::ifstream c(dirpath + "/cgroup.controllers");
    std::string ctl;
    while (c >> ctl) info.controllers.push_back(ctl);
    info.writable = ::access(dirpath.c_str(), W_OK) == 0;
  }
  return info;
}

}  // namespace sbx
