#include <doctest/doctest.h>

#include "runtime/base/sha256.hpp"
#include "runtime/server/http_tokens.hpp"
#include "runtime/server/mcp_http.hpp"

using namespace sbx;
using namespace sbx::mcp;

TEST_CASE("a token file holds digests that name tenants; a token is found only by its own digest") {
  std::string a = sha256_hex("secret-a"), b = sha256_hex("secret-b");
  std::string upper = b;
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto t = parse_token_file(R"({"tokens": [{"sha256": ")" + a + R"(", "tenant": "A"}, {"sha256": ")" + upper +
                                R"(", "tenant": "B"}]})",
                            "t.json");
  REQUIRE(t);
  REQUIRE(t->entries.size() == 2);
  CHECK(t->entries[1].sha256 == b);  // taken in upper case, kept in lower
  REQUIRE(t->find("secret-a"));
  CHECK(t->find("secret-a")->tenant == "A");
  CHECK(t->find("secret-b")->tenant == "B");
  CHECK(t->find("secret-") == nullptr);
  CHECK(t->find("secret-aa") == nullptr);
  CHECK(t->find("") == nullptr);
  CHECK(t->find(a) == nullptr);  // the digest itself is no token
  CHECK(t->find(std::string(kMaxTokenBytes + 1, 'x')) == nullptr);
}

TEST_CASE("a bad token file names the JSON path and the fix") {
  std::string d = sha256_hex("x");
  auto refused = [](const std::string& text, const std::string& words) {
    auto t = parse_token_file(text, "t.json");
    REQUIRE_FALSE(t);
    INFO(t.error().message);
    CHECK(t.error().message.find(words) != std::string::npos);
    CHECK(t.error().message.find("t.json") != std::string::npos);
  };
  refused("[]", "/tokens");
  refused(R"({"tokens": []})", "no token");
  refused(R"({"tokens": [], "extra": 1})", "/extra: unknown key");
  refused(R"({"tokens": [{"sha256": "abc", "tenant": "A"}]})", "/tokens/0/sha256: not 64 hex digits");
  refused(R"({"tokens": [{"sha256": ")" + d + R"(", "tenant": ""}]})", "/tokens/0/tenant");
  refused(R"({"tokens": [{"sha256": ")" + d + R"("}]})", "/tokens/0/tenant");
  refused(R"({"tokens": [{"sha256": ")" + d + R"(", "tenant": "A", "role": "admin"}]})", "/tokens/0/role: unknown key");
  refused(R"({"tokens": [{"sha256": ")" + d + R"(", "tenant": "A"}, {"sha256": ")" + d + R"(", "tenant": "B"}]})",
          "/tokens/1/sha256: the same token twice");
  refused("{\"tokens\": [" + std::string(200, '[') + "]}", "t.json");
}

TEST_CASE("an Authorization header gives its bearer token only in that scheme") {
  CHECK(bearer_token("Bearer abc") == "abc");
  CHECK(bearer_token("bearer  abc ") == "abc");
  CHECK(bearer_token("Basic abc") == "");
  CHECK(bearer_token("Bearer") == "");
  CHECK(bearer_token("") == "");
}

TEST_CASE("--listen takes HOST:PORT, :PORT or PORT, and IP addresses only") {
  HttpConfig c;
  std::string why;
  CHECK(parse_listen_address("127.0.0.1:8080", c, why));
  CHECK(c.host == "127.0.0.1");
  CHECK(c.port == 8080);
  CHECK(parse_listen_address(":0", c, why));
  CHECK(c.host == "127.0.0.1");
  CHECK(parse_listen_address("[::1]:9", c, why));
  CHECK(c.host == "::1");
  CHECK(parse_listen_address("7000", c, why));
  CHECK(c.port == 7000);
  CHECK_FALSE(parse_listen_address("example.com:80", c, why));
  CHECK(why.find("not an IP address") != std::string::npos);
  CHECK_FALSE(parse_listen_address("127.0.0.1:65536", c, why));
  CHECK_FALSE(parse_listen_address("127.0.0.1:x", c, why));
  CHECK(is_loopback_host("127.0.0.1"));
  CHECK(is_loopback_host("::1"));
  CHECK(is_loopback_host("localhost"));
  CHECK_FALSE(is_loopback_host("0.0.0.0"));
  CHECK_FALSE(is_loopback_host("10.0.0.1"));
}

TEST_CASE("a browser's Origin passes when loopback, the server's own or listed; nothing else (DNS rebinding)") {
  CHECK(origin_allowed("", "sbx.internal:8080", {}));
  CHECK(origin_allowed("http://localhost:3000", "sbx.internal:8080", {}));
  CHECK(origin_allowed("http://127.0.0.1", "sbx.internal:8080", {}));
  CHECK(origin_allowed("http://sbx.internal:8080", "sbx.internal:8080", {}));
  CHECK(origin_allowed("https://sbx.internal", "sbx.internal", {}));
  CHECK(origin_allowed("https://app.example", "sbx.internal", {"https://app.example"}));
  CHECK_FALSE(origin_allowed("http://evil.example", "sbx.internal:8080", {}));
  CHECK_FALSE(origin_allowed("http://sbx.internal:9999", "sbx.internal:8080", {}));
  CHECK_FALSE(origin_allowed("null", "sbx.internal:8080", {}));
  CHECK_FALSE(origin_allowed("file://", "sbx.internal:8080", {}));
  CHECK_FALSE(origin_allowed("http://localhost.evil.example", "sbx.internal:8080", {}));
}
