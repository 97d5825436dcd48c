#pragma once
// A minimal D-Bus client: just enough of the wire protocol to call one method of systemd's
// manager (runtime/linux/scope_reuse.hpp: AttachProcessesToUnit) without libdbus or sd-bus, which a
// static binary cannot link. Two halves:
//   - the wire format (marshalling a METHOD_CALL, unmarshalling whatever comes back), pure and
//     bounded: a message over kMaxMessage, a header field of an unknown or nested type, a string
//     without its NUL or running past the end is an error, never a read out of bounds
//     (tests/unit/test_dbus_wire.cpp; the parser is fuzzed by tests/fuzz/fuzz_dbus_reply.cpp);
//   - a connection with a deadline on every step (connect, SASL, write, read): the supervisor
//     never waits on a manager that hangs; a step past the deadline fails with ETIMEDOUT.
// Spec: https://dbus.freedesktop.org/doc/dbus-specification.html (Message Protocol, Auth Protocol).
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"

namespace sbx::dbus {

// Replies of systemd's manager are small; anything bigger is not one we asked for.
inline constexpr std::size_t kMaxMessage = 64 * 1024;

enum MessageType : std::uint8_t { kMethodCall = 1, kMethodReturn = 2, kError = 3, kSignal = 4 };

// Builds a message body in little-endian wire format. Alignment is relative to the body's start,
// which the header pads to 8, so it is also the message's alignment.
class BodyWriter {
 public:
  void byte(std::uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void u32(std::uint32_t v);
  void struct_start() { align(8); }                     // structs and dict entries start on 8
  void str(std::string_view s);                         // 's' and 'o'
  void sig(std::string_view s);                         // 'g'
  void u32_array(const std::vector<std::uint32_t>& v);  // 'au'
  const std::string& bytes() const { return buf_; }

 private:
  void align(std::size_t n);
  std::string buf_;
};

// A METHOD_CALL message (little-endian). `destination` empty: none (peer-to-peer connections
// such as systemd's private socket have no bus to route by it).
std::string method_call(std::uint32_t serial, std::string_view path, std::string_view interface,
                        std::string_view member, std::string_view destination, std::string_view signature,
                        const std::string& body);

struct Message {
  std::uint8_t type = 0;
  std::uint8_t flags = 0;
  std::uint32_t serial = 0;
  std::uint32_t reply_serial = 0;  // 0: none
  std::string error_name;          // ERROR messages
  std::string signature;           // of the body
  std::string body;                // raw, in the message's byte order
  bool big_endian = false;
};

// Parses the first message in `buf`. Returns 0 when `buf` holds only part of one (read more),
// else the number of bytes the message takes (it is in `out`); an error for a malformed message
// or one over kMaxMessage.
Result<std::size_t> parse_message(std::string_view buf, Message& out);

// The first string of a body whose signature starts with 's' (an ERROR's human message), made
// safe to print by the caller; "" when there is none or it is malformed.
std::string first_string(const Message& m);

// SASL EXTERNAL's initial line for `uid`: a NUL byte, then "AUTH EXTERNAL <hex of the decimal
// uid>\r\n" (the server checks it against SO_PEERCRED).
std::string auth_external_line(uid_t uid);

// One connection to a D-Bus server on a unix socket, every step bounded by `deadline_ms`
// (monotonic_ms(), runtime/base/clock.hpp).
class Connection {
 public:
  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  // Connects and authenticates (EXTERNAL as the effective uid). `bus`: a message bus, which
  // needs Hello before anything else; false for a peer-to-peer socket (systemd/private).
  Status open(const std::string& socket_path, bool bus, std::int64_t deadline_ms);
  // Sends a METHOD_CALL and waits for its reply (METHOD_RETURN or ERROR), skipping signals and
  // other messages (at most 32 of them).
  Result<Message> call(std::string_view path, std::string_view interface, std::string_view member,
                       std::string_view destination, std::string_view signature, const std::string& body,
                       std::int64_t deadline_ms);

 private:
  Status write_all(std::string_view data, std::int64_t deadline_ms);
  Result<Message> read_message(std::int64_t deadline_ms);
  UniqueFd fd_;
  std::uint32_t serial_ = 0;
  std::string in_;  // bytes read but not yet parsed
};

}  // namespace sbx::dbus
