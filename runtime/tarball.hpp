#pragma once
// Opening an image tarball for TarReader: a plain tar is read as it is; a gzip, xz, zstd or bzip2
// one (recognised by its magic bytes, not its name: "image.tar" is often compressed and ".tgz"
// sometimes not) is piped through the system's decompressor, started with fork + exec (no shell,
// so no quoting of the path can go wrong: the decompressor reads the already-open file on stdin).
// Using the tools rather than linking the libraries keeps sbx's start-up free of four more shared
// objects for a command that is rarely run.
#include <sys/types.h>

#include <string>

#include "runtime/error.hpp"

namespace sbx {

class Tarball {
 public:
  static Result<Tarball> open(const std::string& path);

  Tarball(Tarball&& o) noexcept;
  Tarball& operator=(Tarball&&) = delete;
  // Closes the fd; a decompressor not yet finished is killed and reaped (the error paths).
  ~Tarball();

  // The uncompressed tar stream, for TarReader; sequential reads only.
  int fd() const { return fd_; }
  // The decompressor's pid, or -1 for a plain tar.
  pid_t pid() const { return pid_; }
  // "gzip", "xz", "zstd", "bzip2", or "" for a plain tar.
  const std::string& compression() const { return tool_; }

  // Call after reading the archive: reads the stream to its end (so that the decompressor gets to
  // check its trailer: gzip's CRC comes after the data, and the tar reader stops at the
  // end-of-archive block before it), closes it, waits for the decompressor and turns a failure
  // into an Error. After a TarReader error, finish() tells whether the decompressor failed first
  // (a corrupt .gz reads as a truncated tar). Later calls return the same answer.
  Status finish();

 private:
  Tarball(std::string path, int fd, pid_t pid, std::string tool)
      : path_(std::move(path)), fd_(fd), pid_(pid), tool_(std::move(tool)) {}
  std::string path_;
  int fd_ = -1;
  pid_t pid_ = -1;
  std::string tool_;
  Status result_;
};

}  // namespace sbx
