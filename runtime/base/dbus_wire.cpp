#include "runtime/base/dbus_wire.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/base/clock.hpp"
#include "runtime/base/strings.hpp"

namespace sbx::dbus {

namespace {

Error wire_error(std::string message) { return make_error("dbus", "D-Bus: " + std::move(message), EPROTO); }

std::size_t pad_to(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

// Reads values out of a message in its byte order; every read is checked against `end`.
struct Reader {
  std::string_view buf;
  std::size_t pos = 0;
  bool big = false;
  bool ok = true;

  bool align(std::size_t n) {
    std::size_t p = pad_to(pos, n);
    if (p > buf.size()) return ok = false;
    pos = p;
    return true;
  }
  std::uint32_t u32() {
    if (!align(4) || buf.size() - pos < 4) return ok = false, 0;
    auto b = reinterpret_cast<const unsigned char*>(buf.data() + pos);
    pos += 4;
    return big ? (std::uint32_t(b[0]) << 24 | std::uint32_t(b[1]) << 16 | std::uint32_t(b[2]) << 8 | b[3])
               : (std::uint32_t(b[3]) << 24 | std::uint32_t(b[2]) << 16 | std::uint32_t(b[1]) << 8 | b[0]);
  }
  std::uint8_t byte() {
    if (pos >= buf.size()) return ok = false, 0;
    return static_cast<std::uint8_t>(buf[pos++]);
  }
  // A string of `len` bytes and its terminating NUL (none inside: the spec forbids them).
  std::string chars(std::size_t len) {
    if (!ok || buf.size() - pos < len + 1 || buf[pos + len] != '\0') return ok = false, std::string();
    std::string s(buf.substr(pos, len));
    if (s.find('\0') != std::string::npos) return ok = false, std::string();
    pos += len + 1;
    return s;
  }
  std::string str() {  // 's', 'o'
    std::uint32_t len = u32();
    if (!ok || len > buf.size()) return ok = false, std::string();
    return chars(len);
  }
  std::string sig() {  // 'g'
    std::uint8_t len = byte();
    return ok ? chars(len) : std::string();
  }
  // Skips a value of one basic type; false for containers and unknown codes (not in a header).
  bool skip_basic(char t) {
    switch (t) {
      case 'y': byte(); return ok;
      case 'n':
      case 'q':
        if (!align(2) || buf.size() - pos < 2) return ok = false;
        pos += 2;
        return true;
      case 'b':
      case 'i':
      case 'u':
      case 'h': u32(); return ok;
      case 'x':
      case 't':
      case 'd':
        if (!align(8) || buf.size() - pos < 8) return ok = false;
        pos += 8;
        return true;
      case 's':
      case 'o': str(); return ok;
      case 'g': sig(); return ok;
      default: return ok = false;
    }
  }
};

void put_u32(std::string& b, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

void BodyWriter::align(std::size_t n) { buf_.resize(pad_to(buf_.size(), n), '\0'); }

void BodyWriter::u32(std::uint32_t v) {
  align(4);
  put_u32(buf_, v);
}

void BodyWriter::str(std::string_view s) {
  u32(static_cast<std::uint32_t>(s.size()));
  buf_.append(s);
  buf_.push_back('\0');
}

void BodyWriter::sig(std::string_view s) {
  buf_.push_back(static_cast<char>(s.size()));
  buf_.append(s);
  buf_.push_back('\0');
}

void BodyWriter::u32_array(const std::vector<std::uint32_t>& v) {
  u32(static_cast<std::uint32_t>(v.size() * 4));  // the array's length in bytes; u32 needs no padding after it
  for (auto x : v) u32(x);
}

std::string method_call(std::uint32_t serial, std::string_view path, std::string_view interface,
                        std::string_view member, std::string_view destination, std::string_view signature,
                        const std::string& body) {
  // The header fields, a(yv): each struct starts on an 8-byte boundary of the message; the array
  // starts at offset 16, so offsets inside `f` plus 16 keep the same alignment modulo 8.
  BodyWriter f;
  auto field = [&](std::uint8_t code, char type, std::string_view value) {
    f.struct_start();
    f.byte(code);
    f.sig(std::string(1, type));
    if (type == 'g') f.sig(value);
    else f.str(value);
  };
  field(1, 'o', path);
  if (!interface.empty()) field(2, 's', interface);
  field(3, 's', member);
  if (!destination.empty()) field(6, 's', destination);
  if (!signature.empty()) field(8, 'g', signature);
  std::string m;
  m.push_back('l');
  m.push_back(static_cast<char>(kMethodCall));
  m.push_back('\0');  // flags
  m.push_back('\1');  // protocol version
  put_u32(m, static_cast<std::uint32_t>(body.size()));
  put_u32(m, serial);
  put_u32(m, static_cast<std::uint32_t>(f.bytes().size()));
  m += f.bytes();
  m.resize(pad_to(m.size(), 8), '\0');
  m += body;
  return m;
}

Result<std::size_t> parse_message(std::string_view buf, Message& out) {
  if (buf.size() < 16) return std::size_t{0};
  Reader r{buf.substr(0, 16)};
  if (buf[0] == 'B') r.big = true;
  else if (buf[0] != 'l') return wire_error("bad byte-order mark in a message");
  r.pos = 4;
  std::uint32_t body_len = r.u32(), serial = r.u32(), fields_len = r.u32();
  if (buf[3] != 1)
    return wire_error("protocol version " + std::to_string(static_cast<unsigned char>(buf[3])) + " (not 1)");
  if (fields_len > kMaxMessage || body_len > kMaxMessage)
    return wire_error("message over " + std::to_string(kMaxMessage) + " bytes");
  std::size_t body_at = pad_to(16 + std::size_t{fields_len}, 8);
  std::size_t total = body_at + body_len;
  if (total > kMaxMessage) return wire_error("message over " + std::to_string(kMaxMessage) + " bytes");
  if (buf.size() < total) return std::size_t{0};
  Message m;
  m.type = static_cast<std::uint8_t>(buf[1]);
  m.flags = static_cast<std::uint8_t>(buf[2]);
  m.serial = serial;
  m.big_endian = r.big;
  if (m.type < kMethodCall || m.type > kSignal) return wire_error("unknown message type " + std::to_string(m.type));
  if (serial == 0) return wire_error("message with serial 0");
  // The fields: bounded by the array's own length (a field running past it is malformed).
  Reader f{buf.substr(0, 16 + std::size_t{fields_len}), 16, r.big};
  while (f.ok && f.pos < f.buf.size()) {
    if (!f.align(8) || f.pos >= f.buf.size()) break;
    std::uint8_t code = f.byte();
    std::string type = f.sig();
    if (!f.ok) break;
    if (type.size() != 1) return wire_error("header field " + std::to_string(code) + " of a container type");
    std::string s;
    std::uint32_t u = 0;
    if (type == "s" || type == "o") s = f.str();
    else if (type == "g") s = f.sig();
    else if (type == "u") u = f.u32();
    else if (!f.skip_basic(type[0])) return wire_error("header field " + std::to_string(code) + " of unknown type");
    if (!f.ok) break;
    switch (code) {  // a field of the wrong type is malformed (spec: "Header Fields")
      case 4:
        if (type != "s") return wire_error("ERROR_NAME not a string");
        m.error_name = s;
        break;
      case 5:
        if (type != "u") return wire_error("REPLY_SERIAL not a uint32");
        m.reply_serial = u;
        break;
      case 8:
        if (type != "g") return wire_error("SIGNATURE not a signature");
        m.signature = s;
        break;
      default: break;  // path, interface, member, destination, sender, unix fds: not needed here
    }
  }
  if (!f.ok) return wire_error("malformed header fields");
  if (body_len && m.signature.empty()) return wire_error("a body without a signature");
  if ((m.type == kMethodReturn || m.type == kError) && m.reply_serial == 0)
    return wire_error("a reply without REPLY_SERIAL");
  if (m.type == kError && m.error_name.empty()) return wire_error("an error without ERROR_NAME");
  m.body.assign(buf.substr(body_at, body_len));
  out = std::move(m);
  return total;
}

std::string first_string(const Message& m) {
  if (m.signature.empty() || m.signature[0] != 's') return "";
  Reader r{m.body, 0, m.big_endian};
  std::string s = r.str();
  return r.ok ? s : "";
}

std::string auth_external_line(uid_t uid) {
  return std::string("\0AUTH EXTERNAL ", 15) + hex_lower(std::to_string(uid)) + "\r\n";
}

namespace {

// Waits for `events` on fd until the deadline: 0, or an errno (ETIMEDOUT past it).
int wait_fd(int fd, short events, std::int64_t deadline_ms) {
  for (;;) {
    std::int64_t left = deadline_ms - monotonic_ms();
    if (left <= 0) return ETIMEDOUT;
    struct pollfd p {
      fd, events, 0
    };
    int n = ::poll(&p, 1, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return ETIMEDOUT;
    if (p.revents & (POLLERR | POLLNVAL)) return ECONNRESET;
    return 0;  // readable/writable, or hung up (the read says so)
  }
}

}  // namespace

Connection::~Connection() = default;

Status Connection::write_all(std::string_view data, std::int64_t deadline_ms) {
  while (!data.empty()) {
    ssize_t n = ::send(fd_.get(), data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) return sys_error("dbus", "D-Bus: write");
    if (int e = wait_fd(fd_.get(), POLLOUT, deadline_ms)) return make_error("dbus", "D-Bus: write", e);
  }
  return {};
}

Status Connection::open(const std::string& socket_path, bool bus, std::int64_t deadline_ms) {
  struct sockaddr_un sa {};
  if (socket_path.size() >= sizeof sa.sun_path)
    return make_error("dbus", "D-Bus: socket path too long: " + socket_path, ENAMETOOLONG);
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path, socket_path.c_str(), socket_path.size() + 1);
  fd_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd_.ok()) return sys_error("dbus", "D-Bus: socket");
  // A unix connect() never waits for the server to accept: EAGAIN means its backlog is full.
  if (::connect(fd_.get(), reinterpret_cast<struct sockaddr*>(&sa), sizeof sa) != 0)
    return sys_error("dbus", "D-Bus: connect " + socket_path);
  SBX_TRY(write_all(auth_external_line(::geteuid()), deadline_ms));
  // The server's answer: one line, "OK <guid>" on success ("REJECTED <mechanisms>" otherwise).
  std::string line;
  while (line.find("\r\n") == std::string::npos) {
    if (line.size() > 512) return wire_error("authentication answer over 512 bytes");
    char b[256];
    ssize_t n = ::recv(fd_.get(), b, sizeof b, 0);
    if (n > 0) {
      line.append(b, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) return make_error("dbus", "D-Bus: " + socket_path + " closed during authentication", ECONNRESET);
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return sys_error("dbus", "D-Bus: read");
    if (int e = wait_fd(fd_.get(), POLLIN, deadline_ms)) return make_error("dbus", "D-Bus: authentication", e);
  }
  std::size_t eol = line.find("\r\n");
  if (line.compare(0, 3, "OK ") != 0)
    return make_error("dbus", "D-Bus: authentication refused by " + socket_path, EACCES);
  in_ = line.substr(eol + 2);  // nothing should follow before BEGIN; kept rather than lost
  SBX_TRY(write_all("BEGIN\r\n", deadline_ms));
  if (bus) {
    auto hello =
        call("/org/freedesktop/DBus", "org.freedesktop.DBus", "Hello", "org.freedesktop.DBus", "", "", deadline_ms);
    if (!hello) return hello.error();
    if (hello->type == kError) return make_error("dbus", "D-Bus: Hello refused: " + hello->error_name, EPROTO);
  }
  return {};
}

Result<Message> Connection::read_message(std::int64_t deadline_ms) {
  for (;;) {
    Message m;
    auto used = parse_message(in_, m);
    if (!used) return used.error();
    if (*used) {
      in_.erase(0, *used);
      return m;
    }
    char b[4096];
    ssize_t n = ::recv(fd_.get(), b, sizeof b, 0);
    if (n > 0) {
      in_.append(b, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) return make_error("dbus", "D-Bus: connection closed before the reply", ECONNRESET);
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return sys_error("dbus", "D-Bus: read");
    if (int e = wait_fd(fd_.get(), POLLIN, deadline_ms)) return make_error("dbus", "D-Bus: waiting for the reply", e);
  }
}

Result<Message> Connection::call(std::string_view path, std::string_view interface, std::string_view member,
                                 std::string_view destination, std::string_view signature, const std::string& body,
                                 std::int64_t deadline_ms) {
  if (!fd_.ok()) return make_error("dbus", "D-Bus: not connected", ENOTCONN);
  std::uint32_t serial = ++serial_;
  SBX_TRY(write_all(method_call(serial, path, interface, member, destination, signature, body), deadline_ms));
  for (int skipped = 0; skipped < 32; ++skipped) {
    auto m = read_message(deadline_ms);
    if (!m) return m.error();
    if ((m->type == kMethodReturn || m->type == kError) && m->reply_serial == serial) return m;
  }
  return wire_error("no reply among 32 messages");
}

}  // namespace sbx::dbus
