#include "runtime/image/tarball.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

namespace sbx {
namespace {

constexpr const char* kStage = "image";
constexpr std::size_t kInputBuffer = 256 * 1024;

}  // namespace

Result<Tarball> Tarball::open(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return sys_error(kStage, "open tarball " + path);
  struct stat st;
  if (::fstat(fd.get(), &st) < 0) return sys_error(kStage, "stat tarball " + path);
  // The magic is read with pread so the offset stays at 0 for the reader; that needs a regular
  // file (not a pipe, whose bytes pread cannot look at twice).
  if (!S_ISREG(st.st_mode)) return make_error(kStage, "tarball " + path + " is not a regular file");
  char head[8];
  ssize_t n;
  do n = ::pread(fd.get(), head, sizeof head, 0);
  while (n < 0 && errno == EINTR);
  if (n < 0) return sys_error(kStage, "read tarball " + path);
  auto decoder = decoder_for(std::string_view(head, static_cast<std::size_t>(n)));
  if (!decoder) return decoder.error();
  Tarball t(path, std::move(fd), std::move(*decoder));
  if (t.decoder_) t.in_ = std::make_unique<unsigned char[]>(kInputBuffer);
  return t;
}

// Moves the unconsumed input to the front and reads after it, so that a decoder that needs to
// look further (a member's header split across reads) always gets more than it had.
Status Tarball::fill() {
  if (in_pos_ > 0) {
    std::memmove(in_.get(), in_.get() + in_pos_, in_len_ - in_pos_);
    in_len_ -= in_pos_;
    in_pos_ = 0;
  }
  if (in_len_ == kInputBuffer) return {};
  ssize_t n;
  do n = ::read(fd_.get(), in_.get() + in_len_, kInputBuffer - in_len_);
  while (n < 0 && errno == EINTR);
  if (n < 0) return sys_error(kStage, "read tarball " + path_);
  if (n == 0) input_done_ = true;
  if (hasher_) hasher_->update(in_.get() + in_len_, static_cast<std::size_t>(n));
  in_len_ += static_cast<std::size_t>(n);
  return {};
}

Result<std::size_t> Tarball::decode(unsigned char* out, std::size_t n) {
  const std::string what = "the " + std::string(decoder_->name()) + " stream of " + path_;
  for (;;) {
    if (output_done_) return std::size_t{0};
    if (in_pos_ == in_len_ && !input_done_) SBX_TRY(fill());
    auto step = decoder_->step(in_.get() + in_pos_, in_len_ - in_pos_, out, n, input_done_ && in_pos_ == in_len_);
    if (!step) {
      Error e = step.error();
      e.message = "cannot decompress " + path_ + ": " + e.message + " at compressed byte " + std::to_string(in_offset_);
      return e;
    }
    in_pos_ += step->consumed;
    in_offset_ += static_cast<std::int64_t>(step->consumed);
    if (step->stream_end) {
      // Another member may follow: make sure the decoder sees its header, not a partial read.
      if (in_len_ - in_pos_ < 8 && !input_done_) SBX_TRY(fill());
      auto again =
          decoder_->next_member(std::string_view(reinterpret_cast<char*>(in_.get() + in_pos_), in_len_ - in_pos_));
      if (!again) return again.error();
      if (!*again) output_done_ = true;
    } else if (step->produced == 0 && step->consumed == 0) {
      if (input_done_ && in_pos_ == in_len_)
        return make_error(kStage, what + " ends early at compressed byte " + std::to_string(in_offset_) +
                                      " (truncated file or incomplete download)");
      // The decoder needs more input than it has before it can go on. If there is none to give
      // (a full buffer, or the end of the file), it never will: stop rather than spin.
      const std::size_t had = in_len_ - in_pos_;
      const bool was_done = input_done_;
      SBX_TRY(fill());
      if (in_len_ - in_pos_ == had && input_done_ == was_done)
        return make_error(kStage, what + " makes no progress at compressed byte " + std::to_string(in_offset_));
    }
    if (step->produced > 0) return step->produced;
  }
}

Result<std::size_t> Tarball::read(void* buf, std::size_t n) {
  if (!result_) return result_.error();
  if (!decoder_) {
    ssize_t got;
    do got = ::read(fd_.get(), buf, n);
    while (got < 0 && errno == EINTR);
    if (got < 0) return sys_error(kStage, "read tarball " + path_);
    if (hasher_) hasher_->update(buf, static_cast<std::size_t>(got));
    return static_cast<std::size_t>(got);
  }
  auto got = decode(static_cast<unsigned char*>(buf), n);
  if (!got) {
    result_ = got.error();
    return got;
  }
  out_total_ += static_cast<std::int64_t>(*got);
  if (out_total_ > out_limit_) {
    result_ = make_error("usage", path_ + " decompresses to more than " + std::to_string(out_limit_) + " bytes (" +
                                      out_limit_why_ + ")");
    return result_.error();
  }
  return got;
}

Status Tarball::finish() {
  if (result_ && decoder_ && !output_done_) {
    unsigned char scratch[65536];
    for (;;) {
      auto got = read(scratch, sizeof scratch);
      if (!got || *got == 0) break;
    }
  }
  if (result_ && hasher_) {
    // The rest of the file, past the tar's end (or the compressed stream's): the digest covers
    // every byte of it.
    std::vector<char> rest(1 << 16);
    for (;;) {
      ssize_t n = ::read(fd_.get(), rest.data(), rest.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        result_ = sys_error(kStage, "read tarball " + path_);
        break;
      }
      if (n == 0) break;
      hasher_->update(rest.data(), static_cast<std::size_t>(n));
    }
    if (result_) {
      std::string got = hasher_->final_hex();
      if (got != expect_hex_)
        result_ =
            make_error(kStage, expect_what_ + " does not match its digest sha256:" + expect_hex_ +
                                   " (its content is sha256:" + got + "); the image is corrupt or was tampered with");
    }
    hasher_.reset();
  }
  return result_;
}

}  // namespace sbx
