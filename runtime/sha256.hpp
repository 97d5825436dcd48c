#pragma once
// SHA-256 (FIPS 180-4), streaming. Used for trace hashes of streams, inputs, outputs, profiles
// and policies. Self-contained so that hashing adds no shared library to sbx's start-up.
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
  void block(const unsigned char* p);
  std::uint32_t h_[8];
  unsigned char buf_[64];
  std::size_t buf_len_ = 0;
  std::uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view data);

}  // namespace sbx
