// The minimal D-Bus client of runtime/base/dbus_wire.hpp: what it marshals, what it accepts and
// refuses from a server, and that a server that does not answer costs a bounded wait.
#include <doctest/doctest.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>

#include "runtime/base/clock.hpp"
#include "runtime/base/dbus_wire.hpp"
#include "runtime/linux/scope_reuse.hpp"

using namespace sbx;
using namespace sbx::dbus;

namespace {

std::string le32(std::uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

// A reply as systemd sends one: header fields REPLY_SERIAL, DESTINATION, SIGNATURE, SENDER
// (in that order), and for ERROR also ERROR_NAME; the body is one string.
std::string reply(std::uint8_t type, std::uint32_t serial, std::uint32_t reply_serial, const std::string& error_name,
                  const std::string& text) {
  BodyWriter f;
  f.struct_start(); f.byte(5); f.sig("u"); f.u32(reply_serial);
  f.struct_start(); f.byte(6); f.sig("s"); f.str(":1.42");
  if (type == kError) { f.struct_start(); f.byte(4); f.sig("s"); f.str(error_name); }
  BodyWriter body;
  if (!text.empty()) {
    f.struct_start(); f.byte(8); f.sig("g"); f.sig("s");
    body.str(text);
  }
  std::string m = "l";
  m.push_back(static_cast<char>(type));
  m += std::string("\0\1", 2) + le32(static_cast<std::uint32_t>(body.bytes().size())) + le32(serial) +
       le32(static_cast<std::uint32_t>(f.bytes().size())) + f.bytes();
  m.resize((m.size() + 7) / 8 * 8, '\0');
  return m + body.bytes();
}

}  // namespace

TEST_CASE("dbus: AttachProcessesToUnit is marshalled as the spec says") {
  BodyWriter b;
  b.str("sbx-runs-1001.scope");
  b.str("/run-42");
  b.u32_array({42});
  std::string m = method_call(7, "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager", "AttachProcessesToUnit",
                              "org.freedesktop.systemd1", "ssau", b.bytes());
  // Fixed header: little-endian, METHOD_CALL, no flags, version 1, body length, serial 7.
  CHECK(m.substr(0, 4) == std::string("l\1\0\1", 4));
  CHECK(m.substr(4, 4) == le32(static_cast<std::uint32_t>(b.bytes().size())));
  CHECK(m.substr(8, 4) == le32(7));
  // The body: "sbx-runs-1001.scope" (19 bytes + NUL) then, aligned to 4, "/run-42" (7 + NUL),
  // then the array's byte length 4 and its one element.
  std::string nul(1, '\0');
  CHECK(b.bytes() == le32(19) + "sbx-runs-1001.scope" + nul + le32(7) + "/run-42" + nul + le32(4) + le32(42));
  // Our own parser reads it back: the header fields are where the spec puts them.
  Message p;
  auto used = parse_message(m, p);
  REQUIRE(used.ok());
  CHECK(*used == m.size());
  CHECK(p.type == kMethodCall);
  CHECK(p.serial == 7);
  CHECK(p.signature == "ssau");
  CHECK(p.body == b.bytes());
  CHECK((m.size() - b.bytes().size()) % 8 == 0);  // the body starts on an 8-byte boundary
}

TEST_CASE("dbus: SASL EXTERNAL sends the uid's decimal digits in hex") {
  CHECK(auth_external_line(1001) == std::string("\0AUTH EXTERNAL 31303031\r\n", 25));
  CHECK(auth_external_line(0) == std::string("\0AUTH EXTERNAL 30\r\n", 19));
}

TEST_CASE("dbus: replies and errors as systemd sends them") {
  Message m;
  std::string ok = reply(kMethodReturn, 9, 1, "", "");
  auto used = parse_message(ok, m);
  REQUIRE(used.ok());
  CHECK(*used == ok.size());
  CHECK(m.type == kMethodReturn);
  CHECK(m.reply_serial == 1);
  CHECK(m.body.empty());

  std::string err = reply(kError, 10, 2, "org.freedesktop.systemd1.NoSuchUnit", "Unit sbx-runs-1001.scope not loaded.");
  used = parse_message(err + ok, m);  // two messages back to back: the first only
  REQUIRE(used.ok());
  CHECK(*used == err.size());
  CHECK(m.type == kError);
  CHECK(m.reply_serial == 2);
  CHECK(m.error_name == "org.freedesktop.systemd1.NoSuchUnit");
  CHECK(first_string(m) == "Unit sbx-runs-1001.scope not loaded.");

  // Every prefix is "need more", never an error or a read past the end.
  for (std::size_t n = 0; n < err.size(); ++n) {
    auto part = parse_message(std::string_view(err).substr(0, n), m);
    REQUIRE(part.ok());
    CHECK(*part == 0);
  }
}

TEST_CASE("dbus: malformed or oversized messages are refused") {
  Message m;
  std::string good = reply(kError, 10, 2, "org.freedesktop.systemd1.NoSuchUnit", "x");
  std::string bad = good;
  bad[0] = 'x';
  CHECK_FALSE(parse_message(bad, m).ok());  // byte order
  bad = good;
  bad[3] = 2;
  CHECK_FALSE(parse_message(bad, m).ok());  // protocol version
  bad = good;
  bad[1] = 9;
  CHECK_FALSE(parse_message(bad, m).ok());  // message type
  bad = good;
  bad.replace(4, 4, le32(1u << 30));
  CHECK_FALSE(parse_message(bad, m).ok());  // body length over the bound, refused before it arrives
  bad = good;
  bad.replace(12, 4, le32(200000));
  CHECK_FALSE(parse_message(bad, m).ok());  // fields length over the bound
  bad = good;
  bad.replace(8, 4, le32(0));
  CHECK_FALSE(parse_message(bad, m).ok());  // serial 0
  // A string whose length runs past the fields array (the REPLY_SERIAL field made a string).
  bad = good;
  bad[16 + 1 + 1] = 's';
  CHECK_FALSE(parse_message(bad, m).ok());
  // An ERROR without its name.
  CHECK_FALSE(parse_message(reply(kError, 3, 1, "", ""), m).ok());
}

namespace {

// A one-connection server on a socketpair-like listening socket: `script` gets the accepted fd.
struct FakeServer {
  std::string path;
  int lfd = -1;
  std::thread t;
  template <typename F>
  explicit FakeServer(F script) {
    char dir[] = "/tmp/sbx-dbus-test.XXXXXX";
    REQUIRE(::mkdtemp(dir) != nullptr);
    path = std::string(dir) + "/s";
    lfd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strcpy(sa.sun_path, path.c_str());
    REQUIRE(::bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    REQUIRE(::listen(lfd, 1) == 0);
    t = std::thread([this, script] {
      int c = ::accept(lfd, nullptr, nullptr);
      if (c >= 0) {
        script(c);
        ::close(c);
      }
    });
  }
  ~FakeServer() {
    t.join();
    ::close(lfd);
    ::unlink(path.c_str());
    ::rmdir(path.substr(0, path.rfind('/')).c_str());
  }
};

std::string read_some(int fd) {
  char b[4096];
  ssize_t n = ::read(fd, b, sizeof b);
  return n > 0 ? std::string(b, static_cast<std::size_t>(n)) : std::string();
}

}  // namespace

TEST_CASE("dbus: a call over a peer-to-peer connection gets its error reply") {
  std::string got;
  FakeServer srv([&](int c) {
    std::string in = read_some(c);  // NUL + AUTH line
    got = in;
    std::string ok = "OK 0123456789abcdef0123456789abcdef\r\n";
    (void)!::write(c, ok.data(), ok.size());
    while (got.find("BEGIN\r\n") == std::string::npos || got.size() < got.find("BEGIN\r\n") + 7 + 16) got += read_some(c);
    // A signal first (skipped by the client), then the error for serial 1.
    std::string sig = reply(kMethodReturn, 5, 99, "", "");  // a reply to someone else's call
    std::string err = reply(kError, 6, 1, "org.freedesktop.systemd1.NoSuchUnit", "Unit x.scope not loaded.");
    std::string both = sig + err;
    (void)!::write(c, both.data(), both.size());
  });
  Connection conn;
  auto st = conn.open(srv.path, false, sbx::monotonic_ms() + 2000);
  REQUIRE(st.ok());
  BodyWriter b;
  b.str("x.scope");
  b.str("/run-1");
  b.u32_array({1});
  auto r = conn.call("/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager", "AttachProcessesToUnit",
                     "org.freedesktop.systemd1", "ssau", b.bytes(), sbx::monotonic_ms() + 2000);
  REQUIRE(r.ok());
  CHECK(r->type == kError);
  CHECK(r->error_name == "org.freedesktop.systemd1.NoSuchUnit");
  CHECK(got.rfind(std::string("\0AUTH EXTERNAL ", 15), 0) == 0);
}

TEST_CASE("dbus: a server that never answers costs the deadline, not more") {
  FakeServer srv([](int c) {
    read_some(c);
    ::usleep(1500 * 1000);  // says nothing
  });
  Connection conn;
  auto t0 = sbx::monotonic_ms();
  auto st = conn.open(srv.path, false, sbx::monotonic_ms() + 300);
  auto waited = sbx::monotonic_ms() - t0;
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().err == ETIMEDOUT);
  CHECK(waited >= 250);
  CHECK(waited < 1200);
}

TEST_CASE("scope reuse: unit name and idle period") {
  CHECK(reused_scope_unit(1001) == "sbx-runs-1001.scope");
  CHECK(*parse_keeper_idle("600", "x") == 600);
  CHECK(*parse_keeper_idle("1", "x") == 1);
  CHECK_FALSE(parse_keeper_idle("0", "x").ok());
  CHECK_FALSE(parse_keeper_idle("", "x").ok());
  CHECK_FALSE(parse_keeper_idle("10s", "x").ok());
  CHECK_FALSE(parse_keeper_idle("-5", "x").ok());
  CHECK_FALSE(parse_keeper_idle("99999999999", "x").ok());
  auto e = parse_keeper_idle("ten", "SBX_SCOPE_KEEPER_IDLE");
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().message.find("SBX_SCOPE_KEEPER_IDLE: 'ten'") == 0);
}
