// The tar reader of `sbx image import` (runtime/image/tar_reader.cpp) behind its decompressors
// (runtime/image/tarball.cpp, runtime/base/decompress.cpp). The archive bytes are served from a memfd opened
// as the importer opens a file; every member's data is read in small
// odd-sized chunks. Checked besides "no crash": names the reader hands out are relative and hold
// no ".." component (the importer relies on that), and a file yields exactly its size in data.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "runtime/image/tar_reader.hpp"
#include "runtime/image/tarball.hpp"

namespace {

bool has_dotdot(const std::string& p) {
  std::size_t start = 0;
  for (;;) {
    auto slash = p.find('/', start);
    if (p.compare(start, slash == std::string::npos ? std::string::npos : slash - start, "..") == 0) return true;
    if (slash == std::string::npos) return false;
    start = slash + 1;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  int fd = ::memfd_create("fuzz-tar", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  for (std::size_t done = 0; done < size;) {
    ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) std::abort();
    done += static_cast<std::size_t>(n);
  }
  ::lseek(fd, 0, SEEK_SET);
  // Through Tarball, as `sbx image import` reads: compressed inputs exercise the decoders too.
  auto tb = sbx::Tarball::open("/proc/self/fd/" + std::to_string(fd));
  if (!tb) {
    ::close(fd);
    return 0;
  }
  // A few KiB of zstd or bzip2 can expand to gigabytes; the importer bounds it the same way.
  tb->limit_output(64 << 20, "fuzz bound");
  sbx::TarReader r(*tb);
  char buf[333];
  for (int members = 0; members < 10000; ++members) {
    auto e = r.next();
    if (!e || !*e) break;
    const sbx::TarEntry& ent = **e;
    if (ent.path.empty() || ent.path[0] == '/' || has_dotdot(ent.path)) std::abort();
    if (ent.type == sbx::TarEntry::Type::hardlink && (ent.link.empty() || ent.link[0] == '/' || has_dotdot(ent.link)))
      std::abort();
    std::int64_t got = 0;
    bool failed = false;
    for (;;) {
      auto n = r.read(buf, sizeof buf);
      if (!n) failed = true;
      if (!n || *n == 0) break;
      got += static_cast<std::int64_t>(*n);
    }
    std::int64_t want = ent.type == sbx::TarEntry::Type::file ? ent.size : 0;
    if (failed ? got > want : got != want) std::abort();
  }
  ::close(fd);
  return 0;
}
