#include "runtime/sha256.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define SBX_SHA256_X86 1
#endif

namespace sbx {
namespace {

alignas(16) constexpr std::uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

// A block function compresses n consecutive 64-byte blocks into the state h[0..7] (A..H). Taking
// whole runs of blocks lets the SHA-NI version keep the state in registers from one block to the
// next instead of converting its lane order per block.
using BlockFn = void (*)(std::uint32_t* h, const unsigned char* p, std::size_t n);

inline std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void blocks_portable(std::uint32_t* hs, const unsigned char* p, std::size_t n) {
  for (; n > 0; --n, p += 64) {
    std::uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = (std::uint32_t(p[4 * i]) << 24) | (std::uint32_t(p[4 * i + 1]) << 16) |
             (std::uint32_t(p[4 * i + 2]) << 8) | std::uint32_t(p[4 * i + 3]);
    for (int i = 16; i < 64; ++i) {
      std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::uint32_t a = hs[0], b = hs[1], c = hs[2], d = hs[3], e = hs[4], f = hs[5], g = hs[6], h = hs[7];
    for (int i = 0; i < 64; ++i) {
      std::uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
      std::uint32_t ch = (e & f) ^ (~e & g);
      std::uint32_t t1 = h + S1 + ch + K[i] + w[i];
      std::uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
      std::uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
      std::uint32_t t2 = S0 + maj;
      h = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    hs[0] += a; hs[1] += b; hs[2] += c; hs[3] += d; hs[4] += e; hs[5] += f; hs[6] += g; hs[7] += h;
  }
}

#ifdef SBX_SHA256_X86
// The SHA extensions work on the state split across two registers in their own lane order:
// "ABEF" holds A,B,E,F in lanes 3,2,1,0 and "CDGH" holds C,D,G,H likewise. sha256rnds2 does two
// rounds: given CDGH, ABEF and the two next W[t]+K[t] in the low lanes, it returns the new ABEF;
// the old ABEF is then the new CDGH, so the two registers swap roles every two rounds and are
// back in place after four. sha256msg1/msg2 compute the message schedule four words at a time.
// Only compiled for these instructions in this one function; called only when the CPU has them.
__attribute__((target("sha,sse4.1,ssse3")))
void blocks_shani(std::uint32_t* hs, const unsigned char* p, std::size_t n) {
  // Big-endian words in memory -> little-endian lanes: reverse the bytes of each 32-bit lane.
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);

  // h[0..3] = lanes A,B,C,D and h[4..7] = lanes E,F,G,H (lane 0 first) -> ABEF and CDGH.
  __m128i abcd = _mm_loadu_si128(reinterpret_cast<const __m128i*>(hs));
  __m128i efgh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(hs + 4));
  __m128i badc = _mm_shuffle_epi32(abcd, 0xB1);           // lanes B,A,D,C
  __m128i hgfe = _mm_shuffle_epi32(efgh, 0x1B);           // lanes H,G,F,E
  __m128i abef = _mm_alignr_epi8(badc, hgfe, 8);          // lanes F,E,B,A
  __m128i cdgh = _mm_blend_epi16(hgfe, badc, 0xF0);       // lanes H,G,D,C

  for (; n > 0; --n, p += 64) {
    const __m128i abef_in = abef, cdgh_in = cdgh;
    // m[j] holds four consecutive schedule words; only the last 16 words are ever needed, so the
    // four registers are reused in rotation: in group g (rounds 4g..4g+3), m[g%4] is replaced
    // by W[4g..4g+3] computed from the groups g-4 .. g-1.
    __m128i m[4];
    for (int j = 0; j < 4; ++j)
      m[j] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * j)), bswap);
#pragma GCC unroll 16
    for (int g = 0; g < 16; ++g) {
      if (g >= 4) {
        __m128i& w16 = m[g % 4];             // W[t-16..t-13], becomes W[t..t+3]
        const __m128i w12 = m[(g + 1) % 4];  // W[t-12..t-9]
        const __m128i w8 = m[(g + 2) % 4];   // W[t-8..t-5]
        const __m128i w4 = m[(g + 3) % 4];   // W[t-4..t-1]
        // W[t] = W[t-16] + s0(W[t-15]) + W[t-7] + s1(W[t-2]): msg1 adds the s0 terms, alignr
        // picks W[t-7..t-4] out of the two groups it straddles, msg2 adds the s1 terms (which
        // for W[t+2], W[t+3] depend on the W[t], W[t+1] it has just computed).
        __m128i x = _mm_sha256msg1_epu32(w16, w12);
        x = _mm_add_epi32(x, _mm_alignr_epi8(w4, w8, 4));
        w16 = _mm_sha256msg2_epu32(x, w4);
      }
      const __m128i wk = _mm_add_epi32(m[g % 4], _mm_load_si128(reinterpret_cast<const __m128i*>(K + 4 * g)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);                         // rounds 4g, 4g+1
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E));  // rounds 4g+2, 4g+3
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }

  // Back to A..H in memory order.
  __m128i feba = _mm_shuffle_epi32(abef, 0x1B);           // lanes A,B,E,F
  __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);           // lanes G,H,C,D
  abcd = _mm_blend_epi16(feba, dchg, 0xF0);               // lanes A,B,C,D
  efgh = _mm_alignr_epi8(dchg, feba, 8);                  // lanes E,F,G,H
  _mm_storeu_si128(reinterpret_cast<__m128i*>(hs), abcd);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(hs + 4), efgh);
}
#endif

#ifdef SBX_SHA256_X86
// CPUID rather than __builtin_cpu_supports("sha"), which some compilers (clang before 16) reject.
bool cpu_has_sha_ni() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool ssse3 = c & (1u << 9), sse41 = c & (1u << 19);
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool sha = b & (1u << 29);
  return sha && ssse3 && sse41;
}
#endif

// Chosen on first use rather than at static initialisation, so that hashing from another
// translation unit's static constructor still sees a valid choice.
BlockFn best_blocks() {
  static const BlockFn fn = [] {
#ifdef SBX_SHA256_X86
    if (cpu_has_sha_ni()) return &blocks_shani;
#endif
    return &blocks_portable;
  }();
  return fn;
}

std::atomic<bool> g_force_portable{false};

BlockFn current_blocks() {
  return g_force_portable.load(std::memory_order_relaxed) ? &blocks_portable : best_blocks();
}

}  // namespace

const char* sha256_backend() { return current_blocks() == &blocks_portable ? "portable" : "sha-ni"; }

void sha256_force_portable(bool on) { g_force_portable.store(on, std::memory_order_relaxed); }

Sha256::Sha256()
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::blocks(const unsigned char* p, std::size_t n) { current_blocks()(h_, p, n); }

void Sha256::update(const void* data, std::size_t len) {
  auto* p = static_cast<const unsigned char*>(data);
  total_ += len;
  if (buf_len_) {
    std::size_t take = std::min(len, 64 - buf_len_);
    std::memcpy(buf_ + buf_len_, p, take);
    buf_len_ += take; p += take; len -= take;
    if (buf_len_ == 64) { blocks(buf_, 1); buf_len_ = 0; }
  }
  // Everything whole goes to the block function in one call, however large.
  if (std::size_t n = len / 64) { blocks(p, n); p += 64 * n; len -= 64 * n; }
  if (len) { std::memcpy(buf_, p, len); buf_len_ = len; }
}

std::string Sha256::final_hex() {
  std::uint64_t bits = total_ * 8;
  unsigned char pad[72] = {0x80};
  std::size_t padlen = (buf_len_ < 56) ? 56 - buf_len_ : 120 - buf_len_;
  for (int i = 0; i < 8; ++i) pad[padlen + i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
  std::uint64_t saved = total_;
  update(pad, padlen + 8);
  total_ = saved;
  static const char* hex = "0123456789abcdef";
  std::string out(64, '0');
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) {
      unsigned char byte = static_cast<unsigned char>(h_[i] >> (24 - 8 * j));
      out[i * 8 + j * 2] = hex[byte >> 4];
      out[i * 8 + j * 2 + 1] = hex[byte & 15];
    }
  return out;
}

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.final_hex();
}

}  // namespace sbx
