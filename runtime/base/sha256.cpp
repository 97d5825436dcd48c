#include "runtime/base/sha256.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <cstdlib>
#include <cstdio>

namespace sbx {
namespace {

// The digest, fetched once. OpenSSL 3 would otherwise look the algorithm up in its provider
// registry on every EVP_DigestInit. Configuration loading is switched off before the first use:
// by default the library reads openssl.cnf (or $OPENSSL_CONF) on initialisation, and a config
// file may load engines and providers with dlopen — code from outside the static binary, which a
// hash must never need.
const EVP_MD* sha256_md() {
  static const EVP_MD* md = [] {
    OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG, nullptr);
    return EVP_MD_fetch(nullptr, "SHA256", nullptr);
  }();
  return md;
}

// Failure here means libcrypto cannot allocate a few hundred bytes or lacks its built-in SHA-256:
// nothing a caller could recover from, and a silent wrong digest would be worse than stopping.
[[noreturn]] void crypto_failed(const char* what) {
  std::fprintf(stderr, "sbx: libcrypto: %s failed\n", what);
  std::abort();
}

}  // namespace

void Sha256::Free::operator()(evp_md_ctx_st* ctx) const { EVP_MD_CTX_free(ctx); }

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  const EVP_MD* md = sha256_md();
  if (!ctx_ || !md || EVP_DigestInit_ex(ctx_.get(), md, nullptr) != 1) crypto_failed("SHA-256 init");
}

Sha256::~Sha256() = default;

void Sha256::update(const void* data, std::size_t len) {
  if (len > 0 && EVP_DigestUpdate(ctx_.get(), data, len) != 1) crypto_failed("SHA-256 update");
}

std::string Sha256::final_hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx_.get(), digest, &n) != 1 || n != 32) crypto_failed("SHA-256 final");
  static const char kHex[] = "0123456789abcdef";
  std::string out(64, '0');
  for (unsigned i = 0; i < 32; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 15];
  }
  return out;
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
