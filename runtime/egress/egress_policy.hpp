#pragma once
// Egress policy: which HOST:PORT a sandbox may reach through the filtering proxy (proxy.hpp).
// Pure: parsing and matching only, no sockets, no resolver — unit-tested in tests/unit.
//
// Rule forms (`--allow-host`, profile `network.allow`):
//   example.com[:PORT]        exactly this name (case-insensitive, a trailing dot ignored)
//   *.example.com[:PORT]      any name below example.com (not example.com itself)
//   192.0.2.7[:PORT]          an IPv4 literal
//   [2001:db8::1][:PORT]      an IPv6 literal (brackets needed with a port; a bare literal is fine without)
//   10.0.0.0/8[:PORT]         an IPv4 CIDR; [2001:db8::/32][:PORT] an IPv6 CIDR
// PORT is a number or '*' (any port); without one, ports 80 and 443 are allowed.
//
// Names match names and address rules match address literals: a request for a *name* is never
// allowed by an IP/CIDR rule (the proxy would have to resolve a name it has not been allowed to
// look up), and a request for a literal address needs an address rule.
//
// What a name resolves to is checked again when the proxy connects (check_resolved): a name rule
// allows the name, not whatever its DNS answers say — a name the sandbox controls (or a rebinding
// DNS server) could otherwise point an allowed name at the host's loopback, a cloud metadata
// service (169.254.169.254) or the LAN. Internal addresses (internal_address_kind) are reached
// through a name only if an address or CIDR rule names them explicitly.
//
// IPv4-mapped (::ffff:a.b.c.d) and IPv4-compatible (::a.b.c.d) IPv6 addresses are the IPv4
// address they carry — the kernel connects them to it — so they are turned into IPv4 before any
// match, in rules and requests alike: '[::/0]:PORT' does not reach [::ffff:127.0.0.1].
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/base/error.hpp"

namespace sbx {

struct AllowRule {
  enum class Kind { name, wildcard, address, cidr };
  Kind kind = Kind::name;
  std::string text;                     // as written (for the trace and messages)
  std::string name;                     // kind name: the name; wildcard: the suffix without "*." (lower case)
  bool v6 = false;                      // address/cidr
  std::array<std::uint8_t, 16> addr{};  // network byte order; IPv4 uses the first 4 bytes
  int prefix = 0;                       // cidr: prefix length; address: 32 or 128
  std::optional<std::uint16_t> port;    // nullopt: 80 and 443
  bool any_port = false;                // PORT was '*'
};

Result<AllowRule> parse_allow_rule(const std::string& text);
Result<std::vector<AllowRule>> parse_allow_rules(const std::vector<std::string>& texts);

// A requested destination, as written in a CONNECT authority or an absolute URI.
struct EgressTarget {
  std::string host;  // name (lower case, no trailing dot) or literal address (no brackets)
  std::uint16_t port = 0;
  bool is_address = false;
  bool v6 = false;
  std::array<std::uint8_t, 16> addr{};
};

// Parses "host:port" / "[v6]:port" (CONNECT) or a host plus a default port (absolute URI).
Result<EgressTarget> parse_authority(const std::string& authority, std::optional<std::uint16_t> default_port);

struct EgressDecision {
  bool allowed = false;
  int rule = -1;       // index of the matching rule when allowed
  std::string reason;  // why not, when denied
};

EgressDecision check_egress(const std::vector<AllowRule>& rules, const EgressTarget& target);

// IPv4-mapped / IPv4-compatible IPv6 -> IPv4, in place (false: left as it was).
bool normalise_address(bool& v6, std::array<std::uint8_t, 16>& addr);

// Why an address is internal ("loopback", "link-local", "private", "shared (CGNAT)",
// "unique-local", "site-local", "unspecified", "multicast", "broadcast/reserved", or one of those
// "(through NAT64)" for 64:ff9b::/96), nullopt for a public one.
// Expects a normalised address.
std::optional<std::string> internal_address_kind(bool v6, const std::array<std::uint8_t, 16>& addr);

// A name the policy allowed resolved to `addr` (normalised): may the proxy connect to it? Public
// addresses: yes; internal ones only when an address/CIDR rule covers the address and the port.
EgressDecision check_resolved(const std::vector<AllowRule>& rules, const EgressTarget& name, bool v6,
                              const std::array<std::uint8_t, 16>& addr);

// Which of the sandbox's loopback spellings ("localhost", "127.0.0.1", "::1") a rule set sends
// through the proxy to the HOST's loopback: an address or CIDR rule covering 127.0.0.1 or ::1,
// or a name rule for "localhost". The program's NO_PROXY must leave these out, or its HTTP
// clients would connect to the sandbox's own (empty) loopback instead (environment.cpp).
std::vector<std::string> loopback_reached(const std::vector<AllowRule>& rules);

// A name rule for a loopback name ("localhost", "*.localhost", "x.localhost", "ip6-localhost",
// "localhost.localdomain") that no address or CIDR rule of the same set lets reach the host's
// loopback on its ports can never allow anything: the program's NO_PROXY keeps such a name on the
// sandbox's own (empty) loopback, and the proxy never connects a name to an internal address
// (check_resolved). Returns the error for the first such rule, naming the address rule to add;
// nullopt when there is none.
std::optional<std::string> unreachable_loopback_name(const std::vector<AllowRule>& rules);

// An address as text (no brackets).
std::string address_text(bool v6, const std::array<std::uint8_t, 16>& addr);

// "host:port" with brackets around IPv6 literals: the key of per-host usage and violations.
std::string target_key(const EgressTarget& t);

}  // namespace sbx
