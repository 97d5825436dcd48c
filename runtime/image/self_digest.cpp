#include "runtime/image/self_digest.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/sha256.hpp"

namespace sbx {
namespace {

constexpr const char* kStage = "trace";

std::string cache_key(const struct stat& st) {
  char key[160];
  std::snprintf(key, sizeof key, "%llu %llu %lld %lld.%09ld %lld.%09ld", static_cast<unsigned long long>(st.st_dev),
                static_cast<unsigned long long>(st.st_ino), static_cast<long long>(st.st_size),
                static_cast<long long>(st.st_mtim.tv_sec), st.st_mtim.tv_nsec,
                static_cast<long long>(st.st_ctim.tv_sec), st.st_ctim.tv_nsec);
  return key;
}

Result<std::string> hash_fd(int fd) {
  Sha256 h;
  std::string buf(1 << 20, '\0');
  for (off_t at = 0;;) {
    ssize_t n = ::pread(fd, buf.data(), buf.size(), at);
    if (n < 0) return sys_error(kStage, "cannot read the sbx binary to hash it");
    if (n == 0) break;
    h.update(buf.data(), static_cast<std::size_t>(n));
    at += n;
  }
  return h.final_hex();
}

// The digest of the binary at /proc/self/exe, from the cache file when its key matches.
Result<std::string> binary_sha256_uncached(const Dirs& dirs) {
  UniqueFd exe(::open("/proc/self/exe", O_RDONLY | O_CLOEXEC));
  struct stat st;
  if (!exe.ok() || ::fstat(exe.get(), &st) != 0)
    return sys_error(kStage, "cannot open the sbx binary (/proc/self/exe)");
  const std::string key = cache_key(st);
  const std::string cache = dirs.state + "/binary-sha256";
  if (auto text = read_file(cache); text && text->size() == key.size() + 66 && text->compare(0, key.size(), key) == 0 &&
                                    (*text)[key.size()] == ' ' && text->back() == '\n')
    return text->substr(key.size() + 1, 64);
  auto digest = hash_fd(exe.get());
  if (!digest) return digest.error();
  // A cache: written atomically, not synced (a lost write only costs the next run a hash).
  std::string tmp = cache + ".tmp." + std::to_string(::getpid());
  UniqueFd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (out.ok() && write_all(out.get(), key + " " + *digest + "\n", tmp).ok()) {
    if (::rename(tmp.c_str(), cache.c_str()) != 0) ::unlink(tmp.c_str());
  } else if (out.ok()) {
    ::unlink(tmp.c_str());
  }
  return digest;
}

}  // namespace

Result<std::string> self_binary_sha256(const Dirs& dirs) {
  // Made once per process: the digest of the binary as this process first asked, which is the
  // one it was exec'd from (most kernels refuse to write a file being executed, ETXTBSY; 6.11
  // and 6.12 allowed it). A pooled worker asks twice, while its sandbox is built and at its call
  // (mcp_worker.cpp, from_template): the second answer, on the call's path, costs no system call.
  static std::mutex lock;
  static std::string made;
  std::lock_guard hold(lock);
  if (!made.empty()) return made;
  auto digest = binary_sha256_uncached(dirs);
  if (digest) made = *digest;
  return digest;
}

}  // namespace sbx
