#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "runtime/base/sha256.hpp"

using sbx::sha256_hex;

TEST_CASE("sha256 known vectors (FIPS 180-4 examples)") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("sha256 streaming equals one-shot at every split point") {
  std::string data;
  for (int i = 0; i < 300; ++i) data.push_back(static_cast<char>(i * 7));
  std::string whole = sha256_hex(data);
  for (std::size_t split = 0; split <= data.size(); split += 13) {
    sbx::Sha256 h;
    h.update(std::string_view(data).substr(0, split));
    h.update(std::string_view(data).substr(split));
    CHECK(h.final_hex() == whole);
  }
}

namespace {

std::string random_bytes(std::size_t n, std::uint64_t seed) {
  std::string s(n, '\0');
  for (auto& c : s) {  // xorshift64: reproducible, no <random> distribution differences
    seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
    c = static_cast<char>(seed >> 56);
  }
  return s;
}

}  // namespace

// Runs of whole blocks, partial blocks carried across calls and the padding boundaries (55/56/64
// bytes) must give the one-shot digest whatever the chunking; the one-shot digests themselves are
// pinned by the known answers above and by this one, computed with coreutils' sha256sum.
TEST_CASE("sha256 chunking never changes the digest") {
  std::string data = random_bytes(300, 1);
  for (std::size_t len = 0; len <= data.size(); ++len) {
    std::string_view v = std::string_view(data).substr(0, len);
    sbx::Sha256 h;
    for (char c : v) h.update(&c, 1);
    INFO("length " << len);
    CHECK(h.final_hex() == sha256_hex(v));
  }
  std::string big = random_bytes((std::size_t(3) << 20) + 37, 42);
  std::string expect = sha256_hex(big);
  CHECK(expect == "4de93490ae18e9e1a012d25b825aa4bf9b20b8ae6298962e4f8770c53ec52df4");
  for (std::size_t chunk : {std::size_t(4099), std::size_t(65537)}) {
    sbx::Sha256 h;
    for (std::size_t i = 0; i < big.size(); i += chunk) h.update(std::string_view(big).substr(i, chunk));
    CHECK(h.final_hex() == expect);
  }
}

TEST_CASE("sha256 names its implementation") {
  CHECK(std::string(sbx::sha256_backend()).rfind("libcrypto ", 0) == 0);
}

TEST_CASE("is_sha256_hex: 64 lower-case hex digits, as sha256_hex writes them") {
  CHECK(sbx::is_sha256_hex(sha256_hex("abc")));
  CHECK_FALSE(sbx::is_sha256_hex(std::string(63, 'a')));
  CHECK_FALSE(sbx::is_sha256_hex(std::string(65, 'a')));
  CHECK_FALSE(sbx::is_sha256_hex(std::string(64, 'A')));
  CHECK_FALSE(sbx::is_sha256_hex(std::string(63, 'a') + "g"));
}
