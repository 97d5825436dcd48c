#pragma once
// SHA-256, streaming, from OpenSSL's libcrypto (linked statically, like every library of sbx).
// Used for trace hashes of streams, inputs, outputs, profiles and policies, and for image layers.
// libcrypto picks its fastest block function for the CPU itself (the x86 SHA extensions where
// present), so one call path serves every machine. Its low-level SHA256_* functions, not EVP: an
// EVP digest first initialises OpenSSL's provider registry (every algorithm's names into hash
// tables), ~0.4 ms of CPU at the first hash of every sbx process, 7% of a one-shot `sbx run`
// (bench/README.md, "Start-up"); the block function is the same.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

struct SHA256state_st;

namespace sbx {

class Sha256 {
 public:
  Sha256();
  Sha256(Sha256&&) noexcept = default;
  Sha256& operator=(Sha256&&) noexcept = default;
  ~Sha256();
  void update(const void* data, std::size_t len);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::string final_hex();  // lower-case hex; the object must not be updated afterwards

 private:
  struct Free {
    void operator()(SHA256state_st* ctx) const;
  };
  std::unique_ptr<SHA256state_st, Free> ctx_;
};

std::string sha256_hex(std::string_view data);

// Whether `s` is a digest as sha256_hex writes it: 64 lower-case hex digits.
bool is_sha256_hex(std::string_view s);

// Where the digests come from, for `sbx doctor` and the benchmark: "libcrypto <version>".
const char* sha256_backend();

}  // namespace sbx
