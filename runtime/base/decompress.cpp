#include "runtime/base/decompress.hpp"

#include <bzlib.h>
#include <lzma.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <climits>
#include <string>

namespace sbx {
namespace {

constexpr const char* kStage = "image";
using namespace std::string_view_literals;

// The libraries count in unsigned int; tarball.cpp's buffers are far smaller, but a clamp keeps
// a larger caller correct.
unsigned clamp_uint(std::size_t n) { return static_cast<unsigned>(std::min<std::size_t>(n, UINT_MAX)); }

Error corrupt(const char* format, const std::string& why) {
  return make_error(kStage, std::string("corrupt ") + format + " data (" + why + ")");
}

class GzipDecoder : public Decoder {
 public:
  static Result<std::unique_ptr<Decoder>> make() {
    auto d = std::unique_ptr<GzipDecoder>(new GzipDecoder);
    // 16 + 15: gzip wrapper only (not raw deflate or zlib), the largest window (32 KiB of state).
    if (inflateInit2(&d->z_, 16 + MAX_WBITS) != Z_OK) return make_error(kStage, "zlib: cannot initialise", ENOMEM);
    d->live_ = true;
    return std::unique_ptr<Decoder>(std::move(d));
  }
  ~GzipDecoder() override {
    if (live_) inflateEnd(&z_);
  }
  const char* name() const override { return "gzip"; }

  Result<Step> step(const unsigned char* in, std::size_t in_len, unsigned char* out, std::size_t out_len,
                    bool) override {
    z_.next_in = const_cast<unsigned char*>(in);  // zlib's API predates const; it does not write
    z_.avail_in = clamp_uint(in_len);
    z_.next_out = out;
    z_.avail_out = clamp_uint(out_len);
    int rc = inflate(&z_, Z_NO_FLUSH);
    Step s{clamp_uint(in_len) - z_.avail_in, clamp_uint(out_len) - z_.avail_out, rc == Z_STREAM_END};
    // Z_BUF_ERROR only means "no progress possible now" (more input or output needed).
    if (rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR) return s;
    if (rc == Z_MEM_ERROR) return make_error(kStage, "zlib: out of memory", ENOMEM);
    return corrupt("gzip", std::string("zlib: ") + (z_.msg ? z_.msg : "error " + std::to_string(rc)));
  }

  Result<bool> next_member(std::string_view head) override {
    if (head.substr(0, 2) != "\x1f\x8b"sv) return false;
    if (inflateReset(&z_) != Z_OK) return make_error(kStage, "zlib: cannot reset for the next member");
    return true;
  }

 private:
  GzipDecoder() = default;
  z_stream z_{};
  bool live_ = false;
};

class XzDecoder : public Decoder {
 public:
  // A stream's headers choose the dictionary size (up to 1.5 GiB in the format); decoding
  // allocates that much. 256 MiB covers `xz -9` (64 MiB dictionary) with room to spare and keeps
  // a hostile header from taking the machine's memory.
  static constexpr std::uint64_t kMemLimit = 256ull << 20;

  static Result<std::unique_ptr<Decoder>> make() {
    auto d = std::unique_ptr<XzDecoder>(new XzDecoder);
    // LZMA_CONCATENATED: concatenated .xz streams and stream padding, as xz(1) reads them.
    if (lzma_stream_decoder(&d->s_, kMemLimit, LZMA_CONCATENATED) != LZMA_OK)
      return make_error(kStage, "liblzma: cannot initialise", ENOMEM);
    return std::unique_ptr<Decoder>(std::move(d));
  }
  ~XzDecoder() override { lzma_end(&s_); }
  const char* name() const override { return "xz"; }

  Result<Step> step(const unsigned char* in, std::size_t in_len, unsigned char* out, std::size_t out_len,
                    bool input_done) override {
    s_.next_in = in;
    s_.avail_in = in_len;
    s_.next_out = out;
    s_.avail_out = out_len;
    // With LZMA_CONCATENATED the decoder reports the end only when told that no input follows.
    lzma_ret rc = lzma_code(&s_, input_done ? LZMA_FINISH : LZMA_RUN);
    Step s{in_len - s_.avail_in, out_len - s_.avail_out, rc == LZMA_STREAM_END};
    switch (rc) {
      case LZMA_OK:
      case LZMA_STREAM_END:
      case LZMA_BUF_ERROR:  // no progress possible: the caller tells truncation from a pause
        return s;
      case LZMA_MEMLIMIT_ERROR:
        return make_error(kStage, "the xz stream needs more than " + std::to_string(kMemLimit >> 20) +
                                      " MiB of memory to decompress (its dictionary); sbx refuses that");
      case LZMA_MEM_ERROR: return make_error(kStage, "liblzma: out of memory", ENOMEM);
      case LZMA_FORMAT_ERROR: return corrupt("xz", "liblzma: not an .xz stream");
      case LZMA_OPTIONS_ERROR: return corrupt("xz", "liblzma: unsupported options");
      default: return corrupt("xz", "liblzma: compressed data is corrupt (error " + std::to_string(rc) + ")");
    }
  }

 private:
  XzDecoder() = default;
  lzma_stream s_ = LZMA_STREAM_INIT;
};

class ZstdDecoder : public Decoder {
 public:
  static Result<std::unique_ptr<Decoder>> make() {
    auto d = std::unique_ptr<ZstdDecoder>(new ZstdDecoder);
    d->ctx_ = ZSTD_createDCtx();
    if (!d->ctx_) return make_error(kStage, "libzstd: cannot initialise", ENOMEM);
    // The window a frame may ask for: 2^27 = 128 MiB, zstd(1)'s own default limit (frames made
    // with --long=31 are refused rather than given 2 GiB).
    ZSTD_DCtx_setParameter(d->ctx_, ZSTD_d_windowLogMax, 27);
    return std::unique_ptr<Decoder>(std::move(d));
  }
  ~ZstdDecoder() override { ZSTD_freeDCtx(ctx_); }
  const char* name() const override { return "zstd"; }

  Result<Step> step(const unsigned char* in, std::size_t in_len, unsigned char* out, std::size_t out_len,
                    bool input_done) override {
    ZSTD_inBuffer ib{in, in_len, 0};
    ZSTD_outBuffer ob{out, out_len, 0};
    std::size_t rc = ZSTD_decompressStream(ctx_, &ob, &ib);
    if (ZSTD_isError(rc)) return corrupt("zstd", std::string("libzstd: ") + ZSTD_getErrorName(rc));
    // rc == 0: a frame is complete and flushed. Frames may follow one another (zstd(1) writes one
    // per input, and concatenation is valid), so only the end of the input ends the stream, and
    // only if it ends a frame: a call with no input left after a finished frame already asks for
    // the next frame's header (rc > 0), so the finished state is remembered from the call before.
    if (rc == 0) frame_done_ = true;
    else if (ib.pos > 0 || ob.pos > 0) frame_done_ = false;
    bool end = frame_done_ && input_done && ib.pos == in_len;
    return Step{ib.pos, ob.pos, end};
  }

 private:
  ZstdDecoder() = default;
  ZSTD_DCtx* ctx_ = nullptr;
  bool frame_done_ = false;
};

class Bzip2Decoder : public Decoder {
 public:
  static Result<std::unique_ptr<Decoder>> make() {
    auto d = std::unique_ptr<Bzip2Decoder>(new Bzip2Decoder);
    SBX_TRY(d->init());
    return std::unique_ptr<Decoder>(std::move(d));
  }
  ~Bzip2Decoder() override {
    if (live_) BZ2_bzDecompressEnd(&b_);
  }
  const char* name() const override { return "bzip2"; }

  Result<Step> step(const unsigned char* in, std::size_t in_len, unsigned char* out, std::size_t out_len,
                    bool) override {
    b_.next_in = reinterpret_cast<char*>(const_cast<unsigned char*>(in));  // libbz2 does not write
    b_.avail_in = clamp_uint(in_len);
    b_.next_out = reinterpret_cast<char*>(out);
    b_.avail_out = clamp_uint(out_len);
    int rc = BZ2_bzDecompress(&b_);
    Step s{clamp_uint(in_len) - b_.avail_in, clamp_uint(out_len) - b_.avail_out, rc == BZ_STREAM_END};
    if (rc == BZ_OK || rc == BZ_STREAM_END) return s;
    if (rc == BZ_MEM_ERROR) return make_error(kStage, "libbz2: out of memory", ENOMEM);
    return corrupt("bzip2",
                   rc == BZ_DATA_ERROR_MAGIC ? "libbz2: bad stream header" : "libbz2: error " + std::to_string(rc));
  }

  // pbzip2 and `cat a.bz2 b.bz2` write one stream per block of input; bzip2(1) reads them all.
  Result<bool> next_member(std::string_view head) override {
    if (head.substr(0, 3) != "BZh"sv) return false;
    BZ2_bzDecompressEnd(&b_);
    live_ = false;
    SBX_TRY(init());
    return true;
  }

 private:
  Bzip2Decoder() = default;
  Status init() {
    b_ = bz_stream{};
    if (BZ2_bzDecompressInit(&b_, 0, 0) != BZ_OK) return make_error(kStage, "libbz2: cannot initialise", ENOMEM);
    live_ = true;
    return {};
  }
  bz_stream b_{};
  bool live_ = false;
};

}  // namespace

Result<std::unique_ptr<Decoder>> decoder_for(std::string_view head) {
  if (head.substr(0, 2) == "\x1f\x8b"sv) return GzipDecoder::make();
  if (head.substr(0, 6) ==
      "\xfd"
      "7zXZ\0"sv)
    return XzDecoder::make();
  if (head.substr(0, 4) == "\x28\xb5\x2f\xfd"sv) return ZstdDecoder::make();
  if (head.substr(0, 3) == "BZh"sv) return Bzip2Decoder::make();
  return std::unique_ptr<Decoder>();
}

}  // namespace sbx
