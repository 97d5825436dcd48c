#include "runtime/egress/egress_policy.hpp"
#include "runtime/base/strings.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <span>

namespace sbx {
namespace {

Result<std::uint16_t> parse_port(const std::string& s, const std::string& context) {
  if (s.empty() || s.size() > 5 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return make_error("usage", context + ": bad port '" + s + "' (1-65535)");
  long n = std::stol(s);
  if (n < 1 || n > 65535) return make_error("usage", context + ": bad port '" + s + "' (1-65535)");
  return static_cast<std::uint16_t>(n);
}

bool parse_address(const std::string& s, bool& v6, std::array<std::uint8_t, 16>& out) {
  out.fill(0);
  // inet_pton reads a C string: "127.0.0.1\0.evil" would pass as 127.0.0.1.
  if (s.find('\0') != std::string::npos) return false;
  if (::inet_pton(AF_INET, s.c_str(), out.data()) == 1) {
    v6 = false;
    return true;
  }
  if (::inet_pton(AF_INET6, s.c_str(), out.data()) == 1) {
    v6 = true;
    normalise_address(v6, out);
    return true;
  }
  return false;
}

// ::ffff:0:0/96 (mapped) or ::/96 (compatible, but not :: and ::1, which are IPv6's own).
bool embeds_ipv4(const std::array<std::uint8_t, 16>& a) {
  for (int i = 0; i < 10; ++i)
    if (a[static_cast<std::size_t>(i)] != 0) return false;
  if (a[10] == 0xff && a[11] == 0xff) return true;
  if (a[10] != 0 || a[11] != 0) return false;
  return !(a[12] == 0 && a[13] == 0 && a[14] == 0 && a[15] <= 1);
}

// DNS names: letters, digits, '-' and '.', at most 253 characters, and not all digits and dots
// (so "127.1" or "2130706433", which resolvers read as addresses, never pass as names).
bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 253 || n.front() == '.' || n.front() == '-') return false;
  if (n.find("..") != std::string::npos) return false;
  bool letter = false;
  for (char c : n) {
    if (std::isalpha(static_cast<unsigned char>(c))) letter = true;
    else if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.')) return false;
  }
  return letter;
}

// Splits "host[:port]" / "[v6][:port]" / bare "v6"; `port` is empty when there is none.
Result<std::pair<std::string, std::string>> split_host_port(const std::string& text, const std::string& context) {
  if (!text.empty() && text[0] == '[') {
    auto close = text.find(']');
    if (close == std::string::npos) return make_error("usage", context + ": missing ']'");
    std::string host = text.substr(1, close - 1);
    std::string rest = text.substr(close + 1);
    if (rest.empty()) return std::pair{host, std::string()};
    if (rest[0] != ':' || rest.size() == 1) return make_error("usage", context + ": expected ':PORT' after ']'");
    return std::pair{host, rest.substr(1)};
  }
  auto colons = std::count(text.begin(), text.end(), ':');
  if (colons > 1) return std::pair{text, std::string()};  // a bare IPv6 literal or CIDR
  auto pos = text.find(':');
  if (pos == std::string::npos) return std::pair{text, std::string()};
  if (pos + 1 == text.size()) return make_error("usage", context + ": empty port");
  return std::pair{text.substr(0, pos), text.substr(pos + 1)};
}

bool in_prefix(const std::array<std::uint8_t, 16>& a, const std::array<std::uint8_t, 16>& net, int prefix) {
  int full = prefix / 8, rest = prefix % 8;
  if (std::memcmp(a.data(), net.data(), static_cast<std::size_t>(full)) != 0) return false;
  if (rest == 0) return true;
  std::uint8_t mask = static_cast<std::uint8_t>(0xff << (8 - rest));
  return (a[static_cast<std::size_t>(full)] & mask) == (net[static_cast<std::size_t>(full)] & mask);
}

bool host_matches(const AllowRule& r, const EgressTarget& t) {
  switch (r.kind) {
    case AllowRule::Kind::name: return !t.is_address && t.host == r.name;
    case AllowRule::Kind::wildcard:
      return !t.is_address && t.host.size() > r.name.size() + 1 &&
             t.host.compare(t.host.size() - r.name.size(), r.name.size(), r.name) == 0 &&
             t.host[t.host.size() - r.name.size() - 1] == '.';
    case AllowRule::Kind::address:
    case AllowRule::Kind::cidr: return t.is_address && t.v6 == r.v6 && in_prefix(t.addr, r.addr, r.prefix);
  }
  return false;
}

bool port_matches(const AllowRule& r, std::uint16_t port) {
  if (r.any_port) return true;
  if (r.port) return *r.port == port;
  return port == 80 || port == 443;
}

std::string ports_of(const AllowRule& r) {
  if (r.any_port) return "any";
  if (r.port) return std::to_string(*r.port);
  return "80, 443";
}

}  // namespace

Result<AllowRule> parse_allow_rule(const std::string& text) {
  std::string ctx = "--allow-host '" + text + "'";
  if (text.empty()) return make_error("usage", ctx + ": empty rule");
  if (auto scheme = text.find("://"); scheme != std::string::npos) {
    // A URL where a host was meant: say which host rule it would be.
    std::string host = text.substr(scheme + 3);
    host = host.substr(0, host.find_first_of("/?#"));
    return make_error("usage",
                      ctx + ": expected HOST[:PORT] (a name, *.domain, an IP address, [IPv6] or a CIDR), not a URL" +
                          (host.empty() ? std::string() : "; e.g. --allow-host " + host));
  }
  auto hp = split_host_port(text, ctx);
  if (!hp) return hp.error();
  auto [host, port] = *hp;
  AllowRule r;
  r.text = text;
  if (port == "*") {
    r.any_port = true;
  } else if (!port.empty()) {
    auto p = parse_port(port, ctx);
    if (!p) return p.error();
    r.port = *p;
  }
  host = ascii_lower(host);
  if (!host.empty() && host.back() == '.') host.pop_back();
  if (host.empty()) return make_error("usage", ctx + ": empty host");
  if (auto slash = host.find('/'); slash != std::string::npos) {
    std::string bits = host.substr(slash + 1);
    if (!parse_address(host.substr(0, slash), r.v6, r.addr))
      return make_error("usage", ctx + ": '" + host.substr(0, slash) + "' is not an IPv4 or IPv6 address");
    bool written_v6 = host.substr(0, slash).find(':') != std::string::npos;  // before normalisation
    int max = written_v6 ? 128 : 32;
    if (bits.empty() || bits.size() > 3 ||
        !std::all_of(bits.begin(), bits.end(), [](char c) { return c >= '0' && c <= '9'; }) || std::stoi(bits) > max)
      return make_error("usage", ctx + ": bad prefix length '/" + bits + "' (0-" + std::to_string(max) + ")");
    r.kind = AllowRule::Kind::cidr;
    r.prefix = std::stoi(bits);
    // parse_address made an IPv4-mapped network IPv4; its prefix shrinks by the 96 bits before it.
    if (!r.v6 && written_v6) {
      if (r.prefix < 96) return make_error("usage", ctx + ": an IPv4-mapped network needs a prefix of at least /96");
      r.prefix -= 96;
    }
    return r;
  }
  if (parse_address(host, r.v6, r.addr)) {
    r.kind = AllowRule::Kind::address;
    r.prefix = r.v6 ? 128 : 32;
    return r;
  }
  if (host.rfind("*.", 0) == 0) {
    r.kind = AllowRule::Kind::wildcard;
    r.name = host.substr(2);
    if (!valid_name(r.name)) return make_error("usage", ctx + ": bad name after '*.'");
    return r;
  }
  if (host.find('*') != std::string::npos)
    return make_error("usage", ctx + ": '*' is only allowed as a whole first label ('*.example.com')");
  if (!valid_name(host))
    return make_error("usage", ctx + ": '" + host + "' is neither a host name nor an IP address or CIDR");
  r.kind = AllowRule::Kind::name;
  r.name = host;
  return r;
}

Result<std::vector<AllowRule>> parse_allow_rules(const std::vector<std::string>& texts) {
  std::vector<AllowRule> v;
  for (auto& t : texts) {
    auto r = parse_allow_rule(t);
    if (!r) return r.error();
    v.push_back(*r);
  }
  return v;
}

std::vector<std::string> loopback_reached(const std::vector<AllowRule>& rules) {
  std::array<std::uint8_t, 16> v4{127, 0, 0, 1}, v6{};
  v6[15] = 1;
  bool lo4 = false, lo6 = false;
  for (auto& r : rules) {
    bool addr = r.kind == AllowRule::Kind::address || r.kind == AllowRule::Kind::cidr;
    if (addr && !r.v6) lo4 = lo4 || in_prefix(v4, r.addr, r.prefix);
    if (addr && r.v6) lo6 = lo6 || in_prefix(v6, r.addr, r.prefix);
  }
  std::vector<std::string> out;
  // "localhost" resolves to both inside the sandbox (mounts.cpp's /etc/hosts): a client that
  // bypasses the proxy for it would miss an allowed host on either family. A *name* rule for
  // localhost does not count: the proxy never connects a name rule to an internal address
  // (check_resolved), so sending localhost through it would only turn the sandbox's own loopback
  // into 403s; an address rule (127.0.0.1:P, [::1]:P) is how the host's loopback is allowed.
  if (lo4 || lo6) out.emplace_back("localhost");
  if (lo4) out.emplace_back("127.0.0.1");
  if (lo6) out.emplace_back("::1");
  return out;
}

std::optional<std::string> unreachable_loopback_name(const std::vector<AllowRule>& rules) {
  auto loopback_name = [](const std::string& n) {
    return n == "localhost" || n.ends_with(".localhost") || n == "ip6-localhost" || n == "ip6-loopback" ||
           n == "localhost.localdomain";
  };
  std::array<std::uint8_t, 16> v4{127, 0, 0, 1}, v6{};
  v6[15] = 1;
  // Does some address rule reach the host's loopback on every port the name rule allows?
  auto reached = [&](const AllowRule& name) {
    for (auto& r : rules) {
      if (r.kind != AllowRule::Kind::address && r.kind != AllowRule::Kind::cidr) continue;
      if (!in_prefix(r.v6 ? v6 : v4, r.addr, r.prefix)) continue;
      if (r.any_port) return true;
      if (name.any_port) continue;
      if (name.port ? port_matches(r, *name.port) : port_matches(r, 80) && port_matches(r, 443)) return true;
    }
    return false;
  };
  for (auto& r : rules) {
    if (r.kind == AllowRule::Kind::address || r.kind == AllowRule::Kind::cidr) continue;
    std::string n = r.kind == AllowRule::Kind::wildcard ? "x." + r.name : r.name;
    if (!loopback_name(n) || reached(r)) continue;
    std::string port = r.any_port ? "*" : r.port ? std::to_string(*r.port) : "";
    std::string suffix = port.empty() ? "" : ":" + port;
    return "--allow-host '" + r.text + "' can never allow anything: '" +
           (r.kind == AllowRule::Kind::wildcard ? "*." : "") + r.name +
           "' is a loopback name, which the sandbox keeps on its own (empty) loopback (NO_PROXY) and the proxy never "
           "connects to an internal address; to reach a server on the host's loopback, allow its address: "
           "--allow-host 127.0.0.1" +
           suffix + " (or [::1]" + suffix + ")";
  }
  return std::nullopt;
}

Result<EgressTarget> parse_authority(const std::string& authority, std::optional<std::uint16_t> default_port) {
  std::string ctx = "destination '" + authority + "'";
  if (authority.empty()) return make_error("request", "empty destination");
  auto hp = split_host_port(authority, ctx);
  if (!hp) return hp.error();
  auto [host, port] = *hp;
  // A bare IPv6 literal without brackets is not a valid authority.
  if (authority[0] != '[' && host.find(':') != std::string::npos)
    return make_error("request", ctx + ": IPv6 literals must be in brackets");
  EgressTarget t;
  if (port.empty()) {
    if (!default_port) return make_error("request", ctx + ": a port is required");
    t.port = *default_port;
  } else {
    auto p = parse_port(port, ctx);
    if (!p) return make_error("request", p.error().message);
    t.port = *p;
  }
  host = ascii_lower(host);
  if (!host.empty() && host.back() == '.') host.pop_back();
  if (parse_address(host, t.v6, t.addr)) {
    t.is_address = true;
    host = address_text(t.v6, t.addr);  // one spelling (and IPv4 for a mapped address)
  } else if (authority[0] == '[' || !valid_name(host)) {
    return make_error("request", ctx + ": not a valid host name or address");
  }
  t.host = host;
  return t;
}

EgressDecision check_egress(const std::vector<AllowRule>& rules, const EgressTarget& t) {
  EgressDecision d;
  const AllowRule* host_only = nullptr;
  for (std::size_t i = 0; i < rules.size(); ++i) {
    if (!host_matches(rules[i], t)) continue;
    if (port_matches(rules[i], t.port)) {
      d.allowed = true;
      d.rule = static_cast<int>(i);
      return d;
    }
    if (!host_only) host_only = &rules[i];
  }
  if (host_only)
    d.reason = "port " + std::to_string(t.port) + " is not allowed for " + t.host + " (rule '" + host_only->text +
               "' allows " + ports_of(*host_only) + ")";
  else if (rules.empty()) d.reason = "no host is allowed for this run (use --allow-host)";
  else d.reason = t.host + " is not in the allowlist";
  return d;
}

bool normalise_address(bool& v6, std::array<std::uint8_t, 16>& addr) {
  if (!v6 || !embeds_ipv4(addr)) return false;
  std::array<std::uint8_t, 16> v4{};
  std::memcpy(v4.data(), addr.data() + 12, 4);
  addr = v4;
  v6 = false;
  return true;
}

std::optional<std::string> internal_address_kind(bool v6, const std::array<std::uint8_t, 16>& a) {
  struct Net {
    const char* net;
    int prefix;
    const char* kind;
  };
  static const Net v4nets[] = {
      {"0.0.0.0", 8, "unspecified"},        {"127.0.0.0", 8, "loopback"},  {"169.254.0.0", 16, "link-local"},
      {"10.0.0.0", 8, "private"},           {"172.16.0.0", 12, "private"}, {"192.168.0.0", 16, "private"},
      {"100.64.0.0", 10, "shared (CGNAT)"}, {"224.0.0.0", 4, "multicast"}, {"240.0.0.0", 4, "broadcast/reserved"},
  };
  static const Net v6nets[] = {
      {"::", 128, "unspecified"},   {"::1", 128, "loopback"},      {"fe80::", 10, "link-local"},
      {"fec0::", 10, "site-local"}, {"fc00::", 7, "unique-local"}, {"ff00::", 8, "multicast"},
  };
  // NAT64's well-known prefix (RFC 6052) reaches the IPv4 address in its last 32 bits, through
  // the network's translator: it is internal when that address is.
  static const std::array<std::uint8_t, 12> nat64 = {0x00, 0x64, 0xff, 0x9b};
  if (v6 && std::equal(nat64.begin(), nat64.end(), a.begin())) {
    std::array<std::uint8_t, 16> v4{};
    std::memcpy(v4.data(), a.data() + 12, 4);
    if (auto k = internal_address_kind(false, v4)) return *k + " (through NAT64)";
    return std::nullopt;
  }
  for (const Net& n : v6 ? std::span<const Net>(v6nets) : std::span<const Net>(v4nets)) {
    std::array<std::uint8_t, 16> net{};
    ::inet_pton(v6 ? AF_INET6 : AF_INET, n.net, net.data());
    if (in_prefix(a, net, n.prefix)) return std::string(n.kind);
  }
  return std::nullopt;
}

EgressDecision check_resolved(const std::vector<AllowRule>& rules, const EgressTarget& name, bool v6,
                              const std::array<std::uint8_t, 16>& addr) {
  EgressDecision d;
  auto kind = internal_address_kind(v6, addr);
  if (!kind) {
    d.allowed = true;
    return d;
  }
  EgressTarget literal = name;
  literal.is_address = true;
  literal.v6 = v6;
  literal.addr = addr;
  literal.host = address_text(v6, addr);
  for (std::size_t i = 0; i < rules.size(); ++i) {
    if (rules[i].kind != AllowRule::Kind::address && rules[i].kind != AllowRule::Kind::cidr) continue;
    if (host_matches(rules[i], literal) && port_matches(rules[i], name.port)) {
      d.allowed = true;
      d.rule = static_cast<int>(i);
      return d;
    }
  }
  d.reason = name.host + " resolved to " + literal.host + ", a " + *kind +
             " address: a name rule does not reach internal addresses (allow the address or its range explicitly)";
  return d;
}

std::string address_text(bool v6, const std::array<std::uint8_t, 16>& addr) {
  char buf[INET6_ADDRSTRLEN];
  ::inet_ntop(v6 ? AF_INET6 : AF_INET, addr.data(), buf, sizeof buf);
  return buf;
}

std::string target_key(const EgressTarget& t) {
  return (t.v6 && t.is_address ? "[" + t.host + "]" : t.host) + ":" + std::to_string(t.port);
}

}  // namespace sbx
