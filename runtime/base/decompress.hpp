#pragma once
// Streaming decoders for compressed image tarballs: gzip (zlib), xz (liblzma), zstd (libzstd) and
// bzip2 (libbz2), behind one small interface so that runtime/image/tarball.cpp drives them all with the
// same loop. Each owns its library state and releases it; each is bounded in memory (see the
// limits in decompress.cpp) whatever the stream's headers ask for.
#include <cstddef>
#include <memory>
#include <string_view>

#include "runtime/base/error.hpp"

namespace sbx {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual const char* name() const = 0;

  struct Step {
    std::size_t consumed = 0, produced = 0;
    // The stream ended here: for gzip and bzip2 one member (another may follow: next_member), for
    // xz and zstd the whole input (their libraries read concatenated streams themselves).
    bool stream_end = false;
  };
  // Decodes from in[0, in_len) into out[0, out_len). input_done: nothing follows `in`. A step
  // that neither consumes nor produces while input_done means the stream is incomplete. The
  // error's message is the library's reason, without the file's name (the caller adds it).
  virtual Result<Step> step(const unsigned char* in, std::size_t in_len, unsigned char* out, std::size_t out_len,
                            bool input_done) = 0;
  // After stream_end: whether `head` (the bytes that follow) starts another member, in which
  // case the decoder is ready for it. Bytes that start none are left unread, as gzip(1) and
  // bzip2(1) ignore trailing bytes after a valid stream (tools pad archives to block sizes).
  virtual Result<bool> next_member(std::string_view /*head*/) { return false; }
};

// The decoder for a stream that begins with `head` (its first 8 bytes or fewer), or null when
// `head` is no compressed format sbx reads.
Result<std::unique_ptr<Decoder>> decoder_for(std::string_view head);

}  // namespace sbx
