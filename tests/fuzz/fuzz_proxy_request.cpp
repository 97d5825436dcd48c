// The egress proxy's request-head parser (runtime/proxy.cpp, parse_request_head) and, for a head
// that parses, the authority parser it hands the target to. Input: the bytes a sandboxed client
// sends, cut at the first blank line the way the proxy's read loop does (at most 16 KiB).
// Checked besides "no crash": the head sent upstream for plain HTTP is one request — it ends with
// the only blank line in it, and carries exactly one Host header (the allowed one).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "runtime/egress_policy.hpp"
#include "runtime/proxy.hpp"

namespace {

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto pos = s.find(what); pos != std::string::npos; pos = s.find(what, pos + 1)) ++n;
  return n;
}

std::string lower(std::string s) {
  for (auto& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string head(reinterpret_cast<const char*>(data), size < 16384 ? size : 16384);
  auto end = head.find("\r\n\r\n");
  if (end == std::string::npos) head += "\r\n\r\n";
  else head.resize(end + 4);
  auto r = sbx::parse_request_head(head);
  if (!r) return 0;
  (void)sbx::parse_authority(r->authority, r->default_port);
  if (r->is_connect) return 0;
  const std::string& up = r->upstream_head;
  if (up.find("\r\n\r\n") != up.size() - 4) std::abort();
  if (count(lower(up), "\r\nhost:") != 1) std::abort();
  return 0;
}
