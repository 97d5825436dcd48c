#include "runtime/launch/pool_job.hpp"

#include "runtime/launch/call_files.hpp"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/openat2.hpp"

namespace sbx {
namespace {

void put_u64(std::string& s, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_str(std::string& s, const std::string& v) {
  put_u64(s, v.size());
  s += v;
}

struct Reader {
  const std::string& s;
  std::size_t at = 0;
  bool u64(std::uint64_t* v) {
    if (s.size() - at < 8) return false;
    *v = 0;
    for (std::size_t i = 0; i < 8; ++i)
      *v |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
    at += 8;
    return true;
  }
  bool str(std::string* v) {
    std::uint64_t n;
    if (!u64(&n) || n > s.size() - at) return false;
    v->assign(s, at, n);
    at += n;
    return true;
  }
};

Error bad_job(const std::string& what) { return make_error("pool", "pooled sandbox's job: " + what, EINVAL); }

// The pool directory `dst` is under, and its path relative to it ("" when under none).
bool split_pool_path(const std::string& dst, std::string* dir, std::string* rel) {
  for (auto& d : kPoolDirs)
    if (dst.size() > d.size() + 1 && dst.compare(0, d.size(), d) == 0 && dst[d.size()] == '/') {
      *dir = d;
      *rel = dst.substr(d.size() + 1);
      return true;
    }
  return false;
}

int openat2_beneath(int dirfd, const std::string& rel, std::uint64_t flags, std::uint64_t mode) {
  return openat2_retrying(dirfd, rel.c_str(), flags | O_CLOEXEC | O_NOFOLLOW,
                          RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
                          static_cast<mode_t>(mode));
}

}  // namespace

std::string encode_pool_job(const PoolJob& job) {
  std::string body;
  put_u64(body, job.argv.size());
  for (auto& a : job.argv) put_str(body, a);
  put_u64(body, job.files.size());
  for (auto& f : job.files) {
    put_str(body, f.dst);
    put_u64(body, static_cast<std::uint64_t>(f.mode));
    put_str(body, f.content);
  }
  std::string frame;
  put_u64(frame, body.size());
  return frame + body;
}

bool plain_relative_path(std::string_view rel) {
  if (rel.empty() || rel.size() > 4096 || rel.find('\0') != std::string_view::npos) return false;
  for (std::size_t start = 0;;) {
    std::size_t slash = rel.find('/', start);
    std::string_view name = rel.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (name.empty() || name == "." || name == ".." || name.size() > 255) return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

Result<PoolJob> decode_pool_job(const std::string& frame) {
  Reader r{frame};
  std::uint64_t len, argc, nfiles;
  if (!r.u64(&len) || len != frame.size() - 8) return bad_job("its length does not match");
  if (len > kMaxPoolJobBytes) return bad_job("longer than " + std::to_string(kMaxPoolJobBytes) + " bytes");
  PoolJob job;
  if (!r.u64(&argc) || argc == 0 || argc > 64) return bad_job("argv count out of range");
  for (std::uint64_t i = 0; i < argc; ++i) {
    std::string a;
    if (!r.str(&a) || a.find('\0') != std::string::npos) return bad_job("argv entry truncated or with a NUL");
    job.argv.push_back(std::move(a));
  }
  if (!r.u64(&nfiles) || nfiles > kMaxRequestFiles + 2) return bad_job("file count out of range");
  for (std::uint64_t i = 0; i < nfiles; ++i) {
    GeneratedFile f;
    std::uint64_t mode;
    if (!r.str(&f.dst) || !r.u64(&mode) || !r.str(&f.content)) return bad_job("a file entry is truncated");
    std::string dir, rel;
    // The rule the exec request was checked with (plain_relative_path, exec.cpp).
    if (!split_pool_path(f.dst, &dir, &rel) || !plain_relative_path(rel))
      return bad_job("file path outside /code and /in, or not plain");
    f.mode = static_cast<mode_t>(mode & 0555);  // never writable, never setuid
    job.files.push_back(std::move(f));
  }
  if (r.at != frame.size()) return bad_job("trailing bytes");
  return job;
}

Result<PoolJob> read_pool_job(int fd) {
  auto read_full = [fd](char* p, std::size_t n) {
    while (n > 0) {
      ssize_t k = ::read(fd, p, n);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return false;
      p += k;
      n -= static_cast<std::size_t>(k);
    }
    return true;
  };
  std::string frame(8, '\0');
  if (!read_full(frame.data(), 8)) return make_error("pool", "read the job's length", EPIPE);
  std::uint64_t len = 0;
  for (std::size_t i = 0; i < 8; ++i)
    len |= static_cast<std::uint64_t>(static_cast<unsigned char>(frame[i])) << (8 * i);
  if (len > kMaxPoolJobBytes) return bad_job("longer than " + std::to_string(kMaxPoolJobBytes) + " bytes");
  frame.resize(8 + len);
  if (!read_full(frame.data() + 8, len)) return make_error("pool", "read the job", EPIPE);
  return decode_pool_job(frame);
}

Status write_pool_files(const PoolJob& job) {
  // Nothing of the sandbox has run yet (init is its only process; a prepared interpreter runs the
  // image's code, but these directories were 0555 to it: child.cpp serve_warm_call), but the paths are still
  // resolved only beneath each pool directory and never through a symlink: the rule for any
  // write sbx makes into a sandbox (artifact_export.cpp reads /out the same way).
  for (auto& f : job.files) {
    std::string dir, rel;
    if (!split_pool_path(f.dst, &dir, &rel)) return bad_job("file path outside the pool directories");
    UniqueFd base(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!base.ok()) return sys_error("pool", "open " + dir);
    // Parents first (the request's files may sit in subdirectories of /code).
    for (std::size_t slash = rel.find('/'); slash != std::string::npos; slash = rel.find('/', slash + 1)) {
      std::string parent = rel.substr(0, slash);
      auto cut = parent.rfind('/');
      UniqueFd pfd(cut == std::string::npos
                       ? ::dup(base.get())
                       : openat2_beneath(base.get(), parent.substr(0, cut), O_PATH | O_DIRECTORY, 0));
      if (!pfd.ok())
        return sys_error("pool", "open " + dir + "/" + parent.substr(0, cut == std::string::npos ? 0 : cut));
      std::string leaf = cut == std::string::npos ? parent : parent.substr(cut + 1);
      if (::mkdirat(pfd.get(), leaf.c_str(), 0755) != 0 && errno != EEXIST)
        return sys_error("pool", "mkdir " + dir + "/" + parent);
    }
    UniqueFd fd(openat2_beneath(base.get(), rel, O_WRONLY | O_CREAT | O_EXCL, f.mode));
    if (!fd.ok()) return sys_error("pool", "create " + f.dst);
    SBX_TRY(write_all(fd.get(), f.content, "write " + f.dst));
    if (::fchmod(fd.get(), f.mode) != 0) return sys_error("pool", "chmod " + f.dst);  // past the umask
  }
  for (auto& d : kPoolDirs) {
    struct statvfs sv {};
    unsigned long keep = MS_NOSUID | MS_NODEV;
    if (::statvfs(d.c_str(), &sv) == 0 && (sv.f_flag & ST_NOEXEC)) keep |= MS_NOEXEC;
    if (::mount(nullptr, d.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | keep, nullptr) != 0)
      return sys_error("pool", "remount " + d + " read-only");
  }
  return {};
}

std::string pool_refusal(const RunSpec& pooled, const RunSpec& call) {
  if (call.image != pooled.image)
    return "the call's image (" + call.image + ") is not the pool's (" + pooled.image + ")";
  auto lowered = [](const std::optional<std::int64_t>& pool, const std::optional<std::int64_t>& want) {
    return !pool || (want && *want <= *pool);
  };
  if (!lowered(pooled.limits.timeout_ms, call.limits.timeout_ms)) return "the call's timeout is above the pool's";
  if (!lowered(pooled.limits.output_limit_bytes, call.limits.output_limit_bytes))
    return "the call's output_limit is above the pool's";
  RunSpec c = call;
  c.argv = pooled.argv;
  c.limits.timeout_ms = pooled.limits.timeout_ms;
  c.limits.output_limit_bytes = pooled.limits.output_limit_bytes;
  if (c == pooled) return "";
  if (!(c.limits == pooled.limits))
    return "the call sets a limit other than timeout or output_limit (the pool's sandbox was made with the profile's)";
  if (!(c.network == pooled.network)) return "the call's network differs from the profile's";
  if (c.binds != pooled.binds || c.inputs != pooled.inputs || c.tmpfs != pooled.tmpfs)
    return "the call's mounts differ from the profile's";
  return "the call's configuration differs from the profile's";
}

}  // namespace sbx
