#include "runtime/base/sha256.hpp"

// SHA256_Init/Update/Final are deprecated in OpenSSL 3 in favour of EVP, which costs a provider
// registry's initialisation per process (sha256.hpp says why that matters); they remain in every
// OpenSSL 3 build with deprecated APIs (Debian's), and their block function is EVP's.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cstdlib>
#include <cstdio>

#include "runtime/base/strings.hpp"

namespace sbx {
namespace {

// Failure here means libcrypto cannot allocate a few hundred bytes: nothing a caller could recover
// from, and a silent wrong digest would be worse than stopping.
[[noreturn]] void crypto_failed(const char* what) {
  std::fprintf(stderr, "sbx: libcrypto: %s failed\n", what);
  std::abort();
}

}  // namespace

void Sha256::Free::operator()(SHA256state_st* ctx) const { delete ctx; }

Sha256::Sha256() : ctx_(new SHA256state_st) {
  if (SHA256_Init(ctx_.get()) != 1) crypto_failed("SHA-256 init");
}

Sha256::~Sha256() = default;

void Sha256::update(const void* data, std::size_t len) {
  if (len > 0 && SHA256_Update(ctx_.get(), data, len) != 1) crypto_failed("SHA-256 update");
}

std::string Sha256::final_hex() {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  if (SHA256_Final(digest, ctx_.get()) != 1) crypto_failed("SHA-256 final");
  return hex_lower(std::string_view(reinterpret_cast<const char*>(digest), sizeof digest));
}

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.final_hex();
}

bool is_sha256_hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

const char* sha256_backend() {
  static const std::string name = std::string("libcrypto ") + OpenSSL_version(OPENSSL_VERSION_STRING);
  return name.c_str();
}

}  // namespace sbx
