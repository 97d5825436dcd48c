#include <doctest/doctest.h>

#include "runtime/egress/egress_policy.hpp"

using namespace sbx;

namespace {
bool allowed(const std::vector<std::string>& rules, const std::string& authority, std::optional<std::uint16_t> def = std::nullopt) {
  auto r = parse_allow_rules(rules);
  REQUIRE(r.ok());
  auto t = parse_authority(authority, def);
  REQUIRE_MESSAGE(t.ok(), authority);
  return check_egress(*r, *t).allowed;
}
}  // namespace

TEST_CASE("egress: exact names, case and trailing dot, default ports 80 and 443") {
  CHECK(allowed({"example.com"}, "example.com:443"));
  CHECK(allowed({"example.com"}, "EXAMPLE.com.:80"));
  CHECK(allowed({"Example.COM"}, "example.com", 80));
  CHECK_FALSE(allowed({"example.com"}, "example.com:8080"));
  CHECK_FALSE(allowed({"example.com"}, "www.example.com:443"));
  CHECK_FALSE(allowed({"example.com"}, "example.com.evil.net:443"));
  CHECK_FALSE(allowed({}, "example.com:443"));
}

TEST_CASE("egress: wildcards match subdomains only") {
  CHECK(allowed({"*.example.com"}, "a.example.com:443"));
  CHECK(allowed({"*.example.com"}, "a.b.example.com:80"));
  CHECK_FALSE(allowed({"*.example.com"}, "example.com:443"));
  CHECK_FALSE(allowed({"*.example.com"}, "badexample.com:443"));
  CHECK_FALSE(allowed({"*.example.com:8443"}, "a.example.com:443"));
  CHECK(allowed({"*.example.com:8443"}, "a.example.com:8443"));
  CHECK_FALSE(parse_allow_rule("a*.example.com").ok());
  CHECK_FALSE(parse_allow_rule("*.").ok());
}

TEST_CASE("egress: ports, explicit and any") {
  CHECK(allowed({"127.0.0.1:8080"}, "127.0.0.1:8080"));
  CHECK_FALSE(allowed({"127.0.0.1:8080"}, "127.0.0.1:8081"));
  CHECK_FALSE(allowed({"127.0.0.1:8080"}, "127.0.0.1:80"));
  CHECK(allowed({"api.test:*"}, "api.test:1"));
  CHECK_FALSE(parse_allow_rule("example.com:0").ok());
  CHECK_FALSE(parse_allow_rule("example.com:65536").ok());
  CHECK_FALSE(parse_allow_rule("example.com:").ok());
  CHECK_FALSE(parse_allow_rule("example.com:http").ok());
  auto rules = parse_allow_rules({"api.test:8080"});
  auto t = parse_authority("api.test:9090", std::nullopt);
  auto d = check_egress(*rules, *t);
  CHECK_FALSE(d.allowed);
  CHECK(d.reason == "port 9090 is not allowed for api.test (rule 'api.test:8080' allows 8080)");
}

TEST_CASE("egress: literal IPv4 addresses never match names and vice versa") {
  CHECK(allowed({"192.0.2.7"}, "192.0.2.7:443"));
  CHECK_FALSE(allowed({"192.0.2.7"}, "192.0.2.8:443"));
  CHECK_FALSE(allowed({"localhost"}, "127.0.0.1:80"));
  CHECK_FALSE(allowed({"127.0.0.1"}, "localhost:80"));
  // Resolver-style address spellings are neither names nor literals.
  CHECK_FALSE(parse_authority("2130706433:80", std::nullopt).ok());
  CHECK_FALSE(parse_authority("127.1:80", std::nullopt).ok());
  CHECK_FALSE(parse_allow_rule("127.1").ok());
  // A NUL must not cut the host short (inet_pton reads a C string).
  CHECK_FALSE(parse_authority(std::string("127.0.0.1\0.evil:80", 19), std::nullopt).ok());
  CHECK_FALSE(parse_authority(std::string("a.test\0x:80", 11), std::nullopt).ok());
  CHECK_FALSE(parse_allow_rule(std::string("10.0.0.1\0", 9)).ok());
}

TEST_CASE("egress: IPv6 literals, bracketed with a port") {
  CHECK(allowed({"[::1]:8080"}, "[::1]:8080"));
  CHECK(allowed({"::1"}, "[::1]:443"));
  CHECK(allowed({"[2001:db8::1]"}, "[2001:DB8:0::1]:80"));
  CHECK_FALSE(allowed({"[::1]:8080"}, "[::2]:8080"));
  CHECK_FALSE(allowed({"::1"}, "127.0.0.1:443"));
  CHECK_FALSE(parse_authority("::1:80", std::nullopt).ok());
  CHECK_FALSE(parse_allow_rule("[::1").ok());
  auto t = parse_authority("[::1]:8080", std::nullopt);
  REQUIRE(t.ok());
  CHECK(target_key(*t) == "[::1]:8080");
}

TEST_CASE("egress: CIDRs") {
  CHECK(allowed({"10.0.0.0/8:*"}, "10.200.3.4:22"));
  CHECK_FALSE(allowed({"10.0.0.0/8"}, "11.0.0.1:80"));
  CHECK(allowed({"192.168.4.0/22"}, "192.168.7.255:443"));
  CHECK_FALSE(allowed({"192.168.4.0/22"}, "192.168.8.0:443"));
  CHECK(allowed({"[2001:db8::/32]:443"}, "[2001:db8:ffff::9]:443"));
  CHECK_FALSE(allowed({"[2001:db8::/32]:443"}, "[2001:db9::9]:443"));
  CHECK(allowed({"0.0.0.0/0"}, "203.0.113.9:80"));
  CHECK_FALSE(allowed({"0.0.0.0/0"}, "[::1]:80"));
  CHECK_FALSE(parse_allow_rule("10.0.0.0/33").ok());
  CHECK_FALSE(parse_allow_rule("example.com/8").ok());
}

namespace {
// The internal kind of an address literal, after normalisation ("" for a public address).
std::string kind_of(const std::string& text) {
  auto t = parse_authority(text.find(':') != std::string::npos ? "[" + text + "]:80" : text + ":80", std::nullopt);
  REQUIRE_MESSAGE(t.ok(), text);
  auto k = internal_address_kind(t->v6, t->addr);
  return k ? *k : "";
}
EgressDecision resolved(const std::vector<std::string>& rules, const std::string& name, const std::string& addr) {
  auto r = parse_allow_rules(rules);
  REQUIRE(r.ok());
  auto t = parse_authority(name, std::nullopt);
  REQUIRE(t.ok());
  auto a = parse_authority(addr.find(':') != std::string::npos ? "[" + addr + "]:1" : addr + ":1", std::nullopt);
  REQUIRE(a.ok());
  return check_resolved(*r, *t, a->v6, a->addr);
}
}  // namespace

TEST_CASE("egress: internal address classes, IPv4 and IPv6") {
  CHECK(kind_of("127.0.0.1") == "loopback");
  CHECK(kind_of("127.255.0.9") == "loopback");
  CHECK(kind_of("0.0.0.0") == "unspecified");
  CHECK(kind_of("169.254.169.254") == "link-local");
  CHECK(kind_of("10.1.2.3") == "private");
  CHECK(kind_of("172.16.0.1") == "private");
  CHECK(kind_of("172.31.255.255") == "private");
  CHECK(kind_of("172.32.0.1") == "");
  CHECK(kind_of("192.168.1.1") == "private");
  CHECK(kind_of("100.64.0.1") == "shared (CGNAT)");
  CHECK(kind_of("100.127.255.255") == "shared (CGNAT)");
  CHECK(kind_of("100.128.0.1") == "");
  CHECK(kind_of("224.0.0.1") == "multicast");
  CHECK(kind_of("255.255.255.255") == "broadcast/reserved");
  CHECK(kind_of("93.184.216.34") == "");
  CHECK(kind_of("::1") == "loopback");
  CHECK(kind_of("::") == "unspecified");
  CHECK(kind_of("fe80::1") == "link-local");
  CHECK(kind_of("fd00::1") == "unique-local");
  CHECK(kind_of("fc00::1") == "unique-local");
  CHECK(kind_of("ff02::1") == "multicast");
  CHECK(kind_of("2606:4700::1111") == "");
  // IPv4 carried in IPv6 is the IPv4 address it carries.
  CHECK(kind_of("::ffff:127.0.0.1") == "loopback");
  CHECK(kind_of("::ffff:169.254.169.254") == "link-local");
  CHECK(kind_of("::ffff:7f00:1") == "loopback");
  CHECK(kind_of("::127.0.0.1") == "loopback");
  CHECK(kind_of("::ffff:8.8.8.8") == "");
  CHECK(kind_of("64:ff9b::7f00:1") == "loopback (through NAT64)");
  CHECK(kind_of("64:ff9b::a9fe:a9fe") == "link-local (through NAT64)");
  CHECK(kind_of("64:ff9b::808:808") == "");
}

TEST_CASE("egress: IPv4-mapped IPv6 is normalised before any match") {
  CHECK_FALSE(allowed({"[::/0]:8080"}, "[::ffff:127.0.0.1]:8080"));
  CHECK_FALSE(allowed({"[::/0]:8080"}, "[::127.0.0.1]:8080"));
  CHECK(allowed({"[::/0]:8080"}, "[2001:db8::1]:8080"));
  CHECK(allowed({"127.0.0.1:8080"}, "[::ffff:127.0.0.1]:8080"));
  CHECK(allowed({"[::ffff:10.0.0.0/104]:*"}, "10.9.9.9:22"));
  CHECK(allowed({"[::ffff:10.0.0.1]:*"}, "10.0.0.1:22"));
  CHECK_FALSE(parse_allow_rule("[::ffff:0:0/80]").ok());
  auto t = parse_authority("[::ffff:127.0.0.1]:8080", std::nullopt);
  REQUIRE(t.ok());
  CHECK(target_key(*t) == "127.0.0.1:8080");
}

TEST_CASE("egress: a name's resolved address reaches internal ranges only through an address rule") {
  CHECK(resolved({"api.test"}, "api.test:443", "93.184.216.34").allowed);
  CHECK(resolved({"api.test"}, "api.test:443", "2606:4700::1111").allowed);
  auto d = resolved({"api.test"}, "api.test:443", "127.0.0.1");
  CHECK_FALSE(d.allowed);
  CHECK(d.reason.find("api.test resolved to 127.0.0.1, a loopback address") == 0);
  CHECK_FALSE(resolved({"api.test"}, "api.test:80", "169.254.169.254").allowed);
  CHECK_FALSE(resolved({"api.test"}, "api.test:80", "::ffff:169.254.169.254").allowed);
  CHECK_FALSE(resolved({"api.test"}, "api.test:80", "fd12::1").allowed);
  CHECK_FALSE(resolved({"api.test"}, "api.test:80", "10.0.0.5").allowed);
  // An explicit address or range, with the port, opens it.
  CHECK(resolved({"api.test", "10.0.0.0/8"}, "api.test:80", "10.0.0.5").allowed);
  CHECK(resolved({"api.test:8080", "127.0.0.1:8080"}, "api.test:8080", "127.0.0.1").allowed);
  CHECK_FALSE(resolved({"api.test:8080", "127.0.0.1:9090"}, "api.test:8080", "127.0.0.1").allowed);
  CHECK_FALSE(resolved({"api.test", "10.0.0.0/8"}, "api.test:80", "127.0.0.1").allowed);
}

// `--allow-host localhost:3000` was accepted and could never allow anything (NO_PROXY keeps
// localhost inside; the proxy never connects a name to loopback): refused, naming the fix.
TEST_CASE("egress: a loopback name rule without an address rule for loopback is refused") {
  auto why = [](std::vector<std::string> texts) {
    auto rules = parse_allow_rules(texts);
    REQUIRE(rules.ok());
    return unreachable_loopback_name(*rules);
  };
  auto w = why({"localhost:3000"});
  REQUIRE(w);
  CHECK(w->find("--allow-host 127.0.0.1:3000 (or [::1]:3000)") != std::string::npos);
  CHECK(why({"LOCALHOST."}));
  CHECK(why({"*.localhost:*"}));
  CHECK(why({"api.localhost:8080"}));
  CHECK(why({"localhost.localdomain:80", "127.0.0.1:81"}));
  CHECK(why({"localhost:3000", "10.0.0.0/8:3000"}));
  // With an address rule that reaches the host's loopback on those ports, the name works.
  CHECK_FALSE(why({"localhost:3000", "127.0.0.1:3000"}));
  CHECK_FALSE(why({"localhost:3000", "[::1]:*"}));
  CHECK_FALSE(why({"localhost", "127.0.0.0/8"}));
  CHECK_FALSE(why({"*.localhost:8080", "127.0.0.1:8080"}));
  CHECK_FALSE(why({"example.com", "localhost.example.com"}));
}
