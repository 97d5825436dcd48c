#include "runtime/typed_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "runtime/sha256.hpp"

namespace sbx {

std::pair<uid_t, gid_t> mapped_program_ids(const IdentityPlan& identity) {
  auto map = [](const std::vector<IdMapping>& m, std::uint32_t id) -> std::uint32_t {
    for (auto& e : m)
      if (id >= e.inside && id - e.inside < e.count) return e.outside + (id - e.inside);
    return static_cast<std::uint32_t>(-1);
  };
  return {map(identity.uid_map, identity.uid), map(identity.gid_map, identity.gid)};
}

Result<IoDir> IoDir::create(const IdentityPlan& identity) {
  // Always /tmp, not $TMPDIR: the sandbox's init must be able to traverse the path, and as root
  // it does so as an unprivileged mapped uid (a caller's 0700 $TMPDIR would stop it).
  char tmpl[] = "/tmp/sbx-io-XXXXXX";
  if (!::mkdtemp(tmpl)) return sys_error("typed-io", "create a private directory under /tmp");
  IoDir d;
  d.root_ = tmpl;
  auto [uid, gid] = mapped_program_ids(identity);
  if (::chmod(tmpl, 0711) != 0) return sys_error("typed-io", std::string("chmod ") + tmpl);
  std::string in = d.root_ + "/in", out = d.root_ + "/out";
  if (::mkdir(in.c_str(), 0755) != 0 || ::chmod(in.c_str(), 0755) != 0) return sys_error("typed-io", "mkdir " + in);
  if (::mkdir(out.c_str(), 0700) != 0) return sys_error("typed-io", "mkdir " + out);
  if (uid == static_cast<uid_t>(-1) || gid == static_cast<gid_t>(-1))
    return make_error("typed-io", "the program's uid/gid inside are not mapped to a host id");
  if ((uid != ::geteuid() || gid != ::getegid()) && ::chown(out.c_str(), uid, gid) != 0)
    return sys_error("typed-io", "chown " + out + " to the sandbox's mapped uid " + std::to_string(uid));
  return d;
}

IoDir::~IoDir() {
  if (root_.empty()) return;
  std::error_code ec;
  // remove_all does not follow symlinks: links the sandbox left in out/ are removed, not their targets.
  std::filesystem::remove_all(root_, ec);
  if (ec) spdlog::warn("could not remove {}: {}", root_, ec.message());
}

Result<std::string> IoDir::add_file(const std::string& rel, const std::string& bytes) {
  std::string path = root_ + "/" + rel;
  for (auto i = rel.find('/'); i != std::string::npos; i = rel.find('/', i + 1)) {
    std::string d = root_ + "/" + rel.substr(0, i);
    if (::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) return sys_error("typed-io", "mkdir " + d);
    ::chmod(d.c_str(), 0755);  // whatever the umask: the sandbox reads through it
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0444);
  if (fd < 0) return sys_error("typed-io", "create " + path);
  std::size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      return make_error("typed-io", "write " + path, e);
    }
    off += static_cast<std::size_t>(n);
  }
  ::fchmod(fd, 0444);
  ::close(fd);
  return path;
}

OutputFile read_output(const IoDir& dir, const std::string& name, std::int64_t cap) {
  OutputFile f;
  std::string path = dir.out_dir() + "/" + name;
  // O_NONBLOCK: a FIFO left by the program must not hang sbx; O_NOFOLLOW: nor may a symlink make
  // sbx read a host file of its choosing.
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) {
      f.present = true;
      f.problem = std::string("cannot open: ") + std::strerror(errno);
    }
    return f;
  }
  f.present = true;
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    f.problem = "not a regular file";
    ::close(fd);
    return f;
  }
  f.size = st.st_size;
  if (st.st_size > cap) {
    f.too_big = true;
    f.problem = "larger than " + std::to_string(cap) + " bytes";
  }
  Sha256 h;
  char buf[65536];
  std::int64_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      f.problem = std::string("read: ") + std::strerror(errno);
      break;
    }
    if (n == 0) break;
    h.update(buf, static_cast<std::size_t>(n));
    total += n;
    if (!f.too_big) {
      if (total > cap) {  // grew after fstat: nothing is running any more, but stay safe
        f.too_big = true;
        f.problem = "larger than " + std::to_string(cap) + " bytes";
        f.bytes.clear();
      } else {
        f.bytes.append(buf, static_cast<std::size_t>(n));
      }
    }
  }
  ::close(fd);
  f.size = total;
  f.sha256 = h.final_hex();
  return f;
}

nlohmann::json file_record(const std::string& path, std::int64_t bytes, const std::string& sha256) {
  return {{"path", path}, {"bytes", bytes}, {"sha256", sha256}};
}

}  // namespace sbx
