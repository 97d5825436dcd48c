#pragma once
// Opening an image tarball for TarReader: a plain tar is read as it is; a gzip, xz, zstd or bzip2
// one (recognised by its magic bytes, not its name: "image.tar" is often compressed and ".tgz"
// sometimes not) is decompressed in process with zlib, liblzma, libzstd or libbz2 (runtime/
// decompress.hpp). No helper process, so nothing depends on $PATH, no exit statuses to interpret,
// and a corrupt stream is reported with the library's own reason and the byte where it failed.
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/base/decompress.hpp"
#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/image/tar_reader.hpp"

namespace sbx {

class Tarball : public ByteSource {
 public:
  static Result<Tarball> open(const std::string& path);

  // The uncompressed tar stream, for TarReader; sequential reads only.
  Result<std::size_t> read(void* buf, std::size_t n) override;

  // A compressed stream that decompresses to more than `bytes` fails with `why` (a bomb: a few
  // KiB of zstd or bzip2 can expand to terabytes, and the tar reader skips the data of members
  // it does not extract, so the importer's own limits never see those bytes).
  void limit_output(std::int64_t bytes, std::string why) {
    out_limit_ = bytes;
    out_limit_why_ = std::move(why);
  }

  // Checks the file's bytes, all of them and exactly as they are read for the tar reader, against
  // the SHA-256 `hex`: finish() reads on to the end of the file and fails on a mismatch. (A
  // container layer's digest is checked this way, on what is extracted, not on an earlier read.)
  void expect_sha256(std::string hex, std::string what) {
    expect_hex_ = std::move(hex);
    expect_what_ = std::move(what);
    hasher_ = std::make_unique<Sha256>();
  }
  // Uncompressed bytes handed out so far (for a budget shared by several tarballs).
  std::int64_t output_bytes() const { return out_total_; }

  // "gzip", "xz", "zstd", "bzip2", or "" for a plain tar.
  std::string compression() const { return decoder_ ? decoder_->name() : ""; }

  // Call after reading the archive: decompresses the stream to its end (so that its trailer is
  // checked: gzip's CRC comes after the data, and the tar reader stops at the end-of-archive
  // block before it). After a TarReader error, finish() tells whether the decompression failed
  // first (a corrupt .gz reads as a truncated tar). Later calls return the same answer.
  Status finish();

 private:
  Tarball(std::string path, UniqueFd fd, std::unique_ptr<Decoder> decoder)
      : path_(std::move(path)), fd_(std::move(fd)), decoder_(std::move(decoder)) {}
  Status fill();  // reads more compressed input; sets input_done_ at EOF
  Result<std::size_t> decode(unsigned char* out, std::size_t n);

  std::string path_;
  UniqueFd fd_;
  std::unique_ptr<Decoder> decoder_;     // null: a plain tar
  std::unique_ptr<unsigned char[]> in_;  // compressed input not yet consumed: in_[in_pos_, in_len_)
  std::size_t in_pos_ = 0, in_len_ = 0;
  std::int64_t in_offset_ = 0;  // compressed bytes consumed, for messages
  bool input_done_ = false;
  bool output_done_ = false;
  std::int64_t out_total_ = 0;
  std::int64_t out_limit_ = INT64_MAX;
  std::string out_limit_why_;
  std::unique_ptr<Sha256> hasher_;  // set by expect_sha256
  std::string expect_hex_, expect_what_;
  Status result_;
};

}  // namespace sbx
