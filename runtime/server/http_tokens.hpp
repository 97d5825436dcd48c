#pragma once
// `sbx mcp --listen`'s bearer tokens (man sbx-mcp, "Over HTTP"): a file of token hashes, each
// naming the tenant its calls run as (runtime/launch/tenant.hpp). The file holds only SHA-256
// digests, never a token: reading it gives nobody a way in. A presented token is hashed and
// compared with every entry in constant time, so neither a wrong token's timing nor the order of
// the file tells an attacker how close it came.
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.hpp"

namespace sbx::mcp {

inline constexpr std::size_t kMaxTokenFileBytes = 1u << 20;
inline constexpr std::size_t kMaxTokens = 4096;
// A bearer token longer than this is refused unhashed (a header is bounded anyway: mcp_http.cpp).
inline constexpr std::size_t kMaxTokenBytes = 4096;

struct TokenEntry {
  std::string sha256;  // 64 lower-case hex digits
  std::string tenant;  // a tenant's name (tenants/NAME.json), loaded at the server's start
};

struct TokenTable {
  std::vector<TokenEntry> entries;
  // The entry whose digest is the token's, or nullptr. Every entry is compared, in constant time.
  const TokenEntry* find(std::string_view token) const;
};

// {"tokens": [{"sha256": "<hex>", "tenant": "<name>"}, ...]}: at least one token, every digest
// 64 hex digits (upper case is taken and lowered) and unique, every tenant a valid name (whether
// it exists is the caller's check). Errors name the file and the JSON path.
Result<TokenTable> parse_token_file(std::string_view text, const std::string& path);
Result<TokenTable> load_token_file(const std::string& path);

// The token of an "Authorization: Bearer <token>" header's value ("" when it is not that form).
std::string bearer_token(std::string_view authorization);

}  // namespace sbx::mcp
