// The egress proxy's request-head reader (runtime/egress/http_request.hpp: scan_request_head, then
// parse_request_head) and, for a head that parses, the authority parser it hands the target to
// and the origin-form head it sends upstream. Input: the bytes a sandboxed client sends (at most
// 16 KiB, the proxy's head limit). Checked besides "no crash": the head sent upstream for plain
// HTTP is one request — its only blank line ends it, every line ends in CRLF (no bare LF or CR
// that a lenient upstream could split on), and it carries exactly one Host header.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/egress/egress_policy.hpp"
#include "runtime/egress/http_request.hpp"

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
  std::string_view buf(reinterpret_cast<const char*>(data), size < 16384 ? size : 16384);
  auto scan = sbx::scan_request_head(buf);
  if (scan.state != sbx::HeadScan::State::complete) return 0;
  auto r = sbx::parse_request_head(buf.substr(0, scan.head_len));
  if (!r) return 0;
  if (r->method == "CONNECT") {
    (void)sbx::parse_authority(r->target, std::nullopt);
    return 0;
  }
  if (lower(r->target.substr(0, 7)) != "http://") return 0;
  auto slash = r->target.find('/', 7);
  std::string authority = r->target.substr(7, slash == std::string::npos ? std::string::npos : slash - 7);
  std::string path = slash == std::string::npos ? "/" : r->target.substr(slash);
  (void)sbx::parse_authority(authority, 80);
  std::string up = sbx::origin_form(*r, path, authority);
  if (up.find("\r\n\r\n") != up.size() - 4) std::abort();
  if (count(lower(up), "\r\nhost:") != 1) std::abort();
  if (count(up, "\n") != count(up, "\r\n") || count(up, "\r") != count(up, "\r\n")) std::abort();
  return 0;
}
