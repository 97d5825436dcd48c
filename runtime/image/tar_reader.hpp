#pragma once
// A streaming reader of tar archives for `sbx image import`. It only parses: the importer creates
// every entry itself (relative to its own directory fd, never following symlinks), so the reader's
// job is to hand it names it can trust and the exact bytes of each file.
//
// Formats: v7, ustar (name + prefix), GNU (long names/links in 'L'/'K' entries, base-256 numbers
// for big sizes and old times) and pax ('x' extended headers: path, linkpath, size, mtime; 'g'
// global headers are skipped). Sparse and multi-volume archives are refused rather than unpacked
// wrongly. Owners are reported as numeric ids (header fields, pax uid/gid); other pax keys
// (uname/gname, atime/ctime, xattrs) are not reported.
//
// Safety: every header's checksum is verified; names are normalised (leading "/" and "./", empty
// and "." components, trailing "/" removed) and any ".." component is an error naming the member,
// never silently rewritten; empty names and names with a NUL are errors. Other bytes, newlines
// and invalid UTF-8 included, are kept as they are. An archive that ends early is an error.
// Every error has stage "image" and says what is wrong and where (member name, byte offset in
// the uncompressed stream). After an error the reader returns that same error from every call.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/base/error.hpp"

namespace sbx {

struct TarEntry {
  enum class Type { file, dir, symlink, hardlink, other };
  Type type = Type::other;
  char typeflag = 0;               // raw flag, for messages ('3', '4', '6' char/block device and FIFO are other)
  std::string path;                // normalised relative path; "." only for a directory member naming the
                                   // archive's root itself ("./" or "/", common at the start of tarballs)
  std::string link;                // symlink target (verbatim, may be absolute or contain "..": the importer
                                   // creates it and never follows it) or hardlink target (normalised like path)
  std::uint32_t mode = 0;          // permission bits incl. setuid/setgid/sticky as stored (mode & 07777)
  std::int64_t size = 0;           // data bytes; 0 for everything but files
  std::int64_t mtime = 0;          // seconds since the epoch (pax fractions rounded down)
  std::uint32_t uid = 0, gid = 0;  // the owner, as numeric ids in the image's own id space
  std::int64_t offset = 0;         // byte offset of the member's (first) header, for the importer's messages
  bool absolute = false;           // the name began with "/" (removed in `path`; a container layer refuses it)
};

// Where the archive's bytes come from: a file descriptor, or a decompressor (runtime/image/tarball.hpp).
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Up to n bytes; 0 only at the end of the stream.
  virtual Result<std::size_t> read(void* buf, std::size_t n) = 0;
};

class TarReader {
 public:
  // Reads from fd, which it does not own, only sequentially: a pipe or memfd is fine.
  explicit TarReader(int fd);
  // Reads from src, which must outlive the reader.
  explicit TarReader(ByteSource& src);

  // The next member's header, with pax 'x' records and GNU 'L'/'K' long names applied. Unread
  // data of the previous member is skipped first. std::nullopt at the end of the archive: the
  // end-of-archive zero block(s), or EOF right after a member. Data after a lone zero block is an
  // error, not ignored: an importer must not silently drop the rest of an image.
  Result<std::optional<TarEntry>> next();

  // Up to n bytes of the current member's data; 0 at its end (and always 0 for non-files).
  Result<std::size_t> read(void* buf, std::size_t n);

  // Bytes consumed from fd so far (the offset into the uncompressed archive).
  std::int64_t offset() const { return offset_; }
  // Whether a header with a valid checksum was read: the input is a tar, whatever failed after.
  bool header_seen() const { return header_seen_; }

 private:
  Result<std::optional<TarEntry>> next_entry();
  Status end_of_archive(std::size_t got, std::int64_t at, std::int64_t pending_header);
  Result<std::string> read_extended(std::int64_t size, std::int64_t at);
  Result<std::size_t> read_data(void* buf, std::size_t n);
  Result<std::size_t> read_some(void* dst, std::size_t n);  // 0 only at EOF
  Result<std::size_t> read_full(void* dst, std::size_t n);  // short only at EOF
  Status skip(std::int64_t n);
  Error truncated(const std::string& what) const;

  std::unique_ptr<ByteSource> owned_;  // the fd's source, for TarReader(int)
  ByteSource* src_;
  std::int64_t offset_ = 0;
  bool header_seen_ = false;
  std::int64_t data_left_ = 0;  // unread data bytes of the current member
  std::int64_t pad_left_ = 0;   // zero padding after them, up to the next 512-byte block
  bool readable_ = false;       // the current member is a file (read() returns its data)
  bool at_end_ = false;
  std::string current_;             // "member 'NAME' (header at byte N)", for messages
  std::optional<Error> failed_;     // the first error, returned from then on
  std::vector<unsigned char> buf_;  // read-ahead: one read() per many small members
  std::size_t buf_pos_ = 0, buf_len_ = 0;
};

}  // namespace sbx
