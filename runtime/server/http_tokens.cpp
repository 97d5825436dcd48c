#include "runtime/server/http_tokens.hpp"

#include <set>

#include "runtime/base/json_io.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/base/strings.hpp"

namespace sbx::mcp {
namespace {

Error token_error(const std::string& path, const std::string& where, const std::string& what) {
  return Error{"usage", 0,
               "--tokens " + path + ": " + where + ": " + what +
                   " (expected {\"tokens\": [{\"sha256\": \"<hex of the token>\", \"tenant\": \"<name>\"}]})"};
}

}  // namespace

const TokenEntry* TokenTable::find(std::string_view token) const {
  if (token.empty() || token.size() > kMaxTokenBytes) return nullptr;
  std::string digest = sha256_hex(token);
  const TokenEntry* found = nullptr;
  for (auto& e : entries) {
    unsigned char diff = 0;
    for (std::size_t i = 0; i < digest.size() && i < e.sha256.size(); ++i)
      diff |= static_cast<unsigned char>(digest[i] ^ e.sha256[i]);
    // No early exit: every entry costs the same whichever matches.
    bool match = diff == 0 && digest.size() == e.sha256.size();
    if (match && !found) found = &e;
  }
  return found;
}

Result<TokenTable> parse_token_file(std::string_view text, const std::string& path) {
  auto doc = parse_json_doc(text, {kMaxTokenFileBytes}, "usage", "--tokens " + path);
  if (!doc) return doc.error();
  if (!doc->is_object() || !doc->contains("tokens") || !(*doc)["tokens"].is_array())
    return token_error(path, "/tokens", "missing or not an array");
  for (auto& [k, v] : doc->items())
    if (k != "tokens") return token_error(path, "/" + k, "unknown key");
  auto& list = (*doc)["tokens"];
  if (list.empty()) return token_error(path, "/tokens", "no token: nobody could call the server");
  if (list.size() > kMaxTokens)
    return token_error(path, "/tokens", "more than " + std::to_string(kMaxTokens) + " tokens");
  TokenTable table;
  std::set<std::string> seen;
  for (std::size_t i = 0; i < list.size(); ++i) {
    std::string at = "/tokens/" + std::to_string(i);
    auto& t = list[i];
    if (!t.is_object()) return token_error(path, at, "not an object");
    for (auto& [k, v] : t.items())
      if (k != "sha256" && k != "tenant") return token_error(path, at + "/" + k, "unknown key");
    if (!t.contains("sha256") || !t["sha256"].is_string())
      return token_error(path, at + "/sha256", "missing or not a string");
    std::string digest = ascii_lower(t["sha256"].get<std::string>());
    if (!is_sha256_hex(digest))
      return token_error(path, at + "/sha256",
                         "not 64 hex digits (sha256sum of the token: printf %s TOKEN | sha256sum)");
    if (!seen.insert(digest).second) return token_error(path, at + "/sha256", "the same token twice");
    if (!t.contains("tenant") || !t["tenant"].is_string() || t["tenant"].get<std::string>().empty())
      return token_error(path, at + "/tenant", "missing, empty or not a string");
    table.entries.push_back({digest, t["tenant"].get<std::string>()});
  }
  return table;
}

Result<TokenTable> load_token_file(const std::string& path) {
  auto text = read_regular_bounded(path, kMaxTokenFileBytes, "usage", "--tokens " + path);
  if (!text) return text.error();
  return parse_token_file(*text, path);
}

std::string bearer_token(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size() || ascii_lower(authorization.substr(0, kScheme.size())) != kScheme)
    return "";
  auto token = authorization.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  return std::string(token);
}

}  // namespace sbx::mcp
