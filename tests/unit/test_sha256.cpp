#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "runtime/sha256.hpp"

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

// Hashes `data` with the portable block function forced (restored afterwards, also on failure).
std::string portable_hex(std::string_view data, std::size_t chunk = 0) {
  struct Force {
    Force() { sbx::sha256_force_portable(true); }
    ~Force() { sbx::sha256_force_portable(false); }
  } force;
  REQUIRE(std::string(sbx::sha256_backend()) == "portable");
  sbx::Sha256 h;
  if (chunk == 0) chunk = data.size() + 1;
  for (std::size_t i = 0; i < data.size(); i += chunk) h.update(data.substr(i, chunk));
  return h.final_hex();
}

std::string random_bytes(std::size_t n, std::uint64_t seed) {
  std::string s(n, '\0');
  for (auto& c : s) {  // xorshift64: reproducible, no <random> distribution differences
    seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
    c = static_cast<char>(seed >> 56);
  }
  return s;
}

}  // namespace

// On a CPU with the SHA extensions the default path is SHA-NI and this compares it with the
// portable code; elsewhere both sides are portable and the test still checks streaming.
TEST_CASE("sha256 portable and accelerated block functions agree") {
  INFO("backend: " << sbx::sha256_backend());
  CHECK(portable_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");

  // Every length around the padding boundaries (55/56/64 bytes) and several whole blocks.
  std::string data = random_bytes(300, 1);
  for (std::size_t len = 0; len <= data.size(); ++len) {
    std::string_view v = std::string_view(data).substr(0, len);
    INFO("length " << len);
    CHECK(sha256_hex(v) == portable_hex(v));
  }

  // Large buffers, fed in one piece and in odd-sized chunks (partial blocks carried across calls,
  // runs of whole blocks handed to the block function in one call).
  for (std::size_t len : {std::size_t(1) << 20, std::size_t(3 << 20) + 37, std::size_t(999999)}) {
    std::string big = random_bytes(len, len);
    std::string expect = portable_hex(big);
    INFO("length " << len);
    CHECK(sha256_hex(big) == expect);
    CHECK(portable_hex(big, 4099) == expect);
    sbx::Sha256 h;
    for (std::size_t i = 0; i < big.size(); i += 65537) h.update(std::string_view(big).substr(i, 65537));
    CHECK(h.final_hex() == expect);
  }
  CHECK(sha256_hex(std::string(1000000, 'a')) == portable_hex(std::string(1000000, 'a')));
}

// The runtime selection must pick the SHA extensions where the kernel reports them.
TEST_CASE("sha256 uses SHA-NI where /proc/cpuinfo lists sha_ni") {
  std::ifstream in("/proc/cpuinfo");
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().find(" sha_ni") == std::string::npos) return;  // nothing to check on this CPU
  CHECK(std::string(sbx::sha256_backend()) == "sha-ni");
}
