#pragma once
// SHA-256 (FIPS 180-4), streaming. Used for trace hashes of streams, inputs, outputs, profiles
// and policies, and for image layers. Self-contained so that hashing adds no shared library to
// sbx's start-up; on x86 CPUs with the SHA extensions the blocks are compressed with them.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sbx {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t len);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::string final_hex();  // lower-case hex; the object must not be updated afterwards

 private:
  void blocks(const unsigned char* p, std::size_t n);  // compresses n whole 64-byte blocks
  std::uint32_t h_[8];
  unsigned char buf_[64];
  std::size_t buf_len_ = 0;
  std::uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view data);

// The block function in use: "sha-ni" (x86 SHA extensions, chosen once per process when the CPU
// has them) or "portable".
const char* sha256_backend();
// For tests and benchmarks, which compare the two paths: true forces the portable code, false
// returns to the CPU's best. Not to be called while other threads hash.
void sha256_force_portable(bool on);

}  // namespace sbx
