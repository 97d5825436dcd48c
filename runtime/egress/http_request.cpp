#include "runtime/egress/http_request.hpp"
#include "runtime/base/strings.hpp"

#include <algorithm>
#include <cctype>

namespace sbx {
namespace {

// RFC 9110 token characters (header names, methods).
bool is_tchar(char ch) {
  auto c = static_cast<unsigned char>(ch);
  return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(ch) != std::string_view::npos;
}

std::string where(std::size_t line) { return "request line " + std::to_string(line + 1); }

std::string byte_hex(unsigned char c) {
  static const char* d = "0123456789abcdef";
  return std::string("0x") + d[c >> 4] + d[c & 15];
}

Result<std::int64_t> parse_length(std::string_view v) {
  if (v.empty() || v.size() > 15 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return make_error("request", "bad Content-Length '" + std::string(v.substr(0, 40)) + "'");
  return std::stoll(std::string(v));
}

}  // namespace

HeadScan scan_request_head(std::string_view buf) {
  HeadScan s;
  std::size_t line = 0;
  for (std::size_t i = 0; i < buf.size(); ++i) {
    auto c = static_cast<unsigned char>(buf[i]);
    if (c == '\r') {
      if (i + 1 == buf.size()) return s;  // its LF may come with the next read
      if (buf[i + 1] != '\n') {
        s.state = HeadScan::State::bad;
        s.error = "bare CR in " + where(line) + " (lines end with CRLF)";
        return s;
      }
      ++i;
      // A line that is empty ends the head.
      if (i >= 3 && buf[i - 2] == '\n' && buf[i - 3] == '\r') {
        s.state = HeadScan::State::complete;
        s.head_len = i + 1;
        return s;
      }
      if (i == 1) {
        s.state = HeadScan::State::bad;
        s.error = "empty request line";
        return s;
      }
      ++line;
      continue;
    }
    if (c == '\n') {
      s.state = HeadScan::State::bad;
      s.error = "bare LF in " + where(line) + " (lines end with CRLF)";
      return s;
    }
    if ((c < 0x20 && c != '\t') || c == 0x7f) {
      s.state = HeadScan::State::bad;
      s.error = "control byte " + byte_hex(c) + " in " + where(line);
      return s;
    }
  }
  return s;
}

Result<ProxyRequest> parse_request_head(std::string_view head) {
  ProxyRequest r;
  auto eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  auto sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 == sp1) return make_error("request", "malformed request line");
  r.method = std::string(line.substr(0, sp1));
  r.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  r.version = std::string(line.substr(sp2 + 1));
  if (r.method.empty() || !std::all_of(r.method.begin(), r.method.end(), is_tchar))
    return make_error("request", "malformed request line: bad method");
  if (r.target.empty() || r.target.find_first_of(" \t") != std::string::npos)
    return make_error("request", "malformed request line: bad target");
  if (r.version != "HTTP/1.1" && r.version != "HTTP/1.0")
    return make_error("request", "malformed request line: version must be HTTP/1.1 or HTTP/1.0");
  std::size_t pos = eol + 2, n = 1;
  for (; pos < head.size(); ++n) {
    auto e = head.find("\r\n", pos);
    std::string_view h = head.substr(pos, e - pos);
    pos = e + 2;
    if (h.empty()) break;  // the blank line
    if (h[0] == ' ' || h[0] == '\t') return make_error("request", "folded header line in " + where(n) + " (obs-fold)");
    auto colon = h.find(':');
    if (colon == std::string_view::npos) return make_error("request", "header line without ':' in " + where(n));
    std::string_view name = h.substr(0, colon);
    if (name.empty() || !std::all_of(name.begin(), name.end(), is_tchar))
      return make_error("request", "bad header name in " + where(n));
    std::string_view value = h.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    std::string lname = ascii_lower(name);
    if (lname == "content-length") {
      auto len = parse_length(value);
      if (!len) return len.error();
      if (r.content_length && *r.content_length != *len)
        return make_error("request", "conflicting Content-Length headers");
      r.content_length = *len;
    } else if (lname == "transfer-encoding") {
      r.transfer_encoding = true;
    }
    r.headers.emplace_back(std::string(name), std::string(value));
  }
  if (r.content_length && r.transfer_encoding)
    return make_error("request", "both Content-Length and Transfer-Encoding (ambiguous framing)");
  return r;
}

std::string origin_form(const ProxyRequest& req, const std::string& path, const std::string& authority) {
  std::string out = req.method + " " + path + " " + req.version + "\r\nHost: " + authority + "\r\n";
  for (auto& [name, value] : req.headers) {
    std::string l = ascii_lower(name);
    if (l == "proxy-connection" || l == "proxy-authorization" || l == "connection" || l == "keep-alive" || l == "host")
      continue;
    out += name + ": " + value + "\r\n";
  }
  return out + "Connection: close\r\n\r\n";
}

}  // namespace sbx
