#pragma once
// The frames of a session (sbx session, session_server.hpp): one format on both hops, a client
// (`sbx session exec`) to the session's server and the server to the agent inside the sandbox
// (session_agent.hpp). A frame is a 4-byte big-endian length, a type byte and that many bytes:
//   'J'  a JSON object: a request, or an event ({"event": "ready" | "done" | "error", ...})
//   'O'  bytes the call wrote to its stdout      'E'  bytes it wrote to its stderr
//   'S'  a Jupyter kernel's stream: a 4-byte stream id, then bytes (session_tunnel.hpp)
// Output travels as raw bytes (JSON strings cannot carry what is not UTF-8). Everything read is
// bounded: a frame longer than kMaxFrame, or of another type, is a protocol error, and the reader
// never holds more than one frame.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"

namespace sbx {

inline constexpr std::size_t kMaxFrame = 4u << 20;      // a request's code, or one output chunk
inline constexpr std::size_t kOutputChunk = 64u << 10;  // the agent sends output in chunks this big

struct Frame {
  char type = 'J';
  std::string body;
};

// One frame's bytes.
std::string encode_frame(char type, std::string_view body);
std::string encode_json_frame(nlohmann::json j);

// Frames out of a byte stream that arrives in pieces.
class FrameReader {
 public:
  // Appends bytes; next() then yields the frames they complete.
  void feed(std::string_view bytes) { buf_.append(bytes); }
  // The next whole frame, nullopt when more bytes are needed; an error for a frame over the
  // bound or of an unknown type (the stream is then unusable).
  Result<std::optional<Frame>> next();
  // Bytes held that no whole frame used yet (at EOF: a torn frame when not 0).
  std::size_t pending() const { return buf_.size() - at_; }
  // Whether feed() may be called without growing past one frame: a reader of a non-blocking fd
  // reads only while this holds.
  bool wants_more() const { return pending() < kMaxFrame + 5; }

 private:
  std::string buf_;
  std::size_t at_ = 0;
};

// A JSON frame's object, parsed with sbx's depth and size bounds (json_limits.hpp); an error for
// anything else.
Result<nlohmann::json> frame_json(const Frame& f);

// The string member `key` of `j`, or `dflt` when `j` is not an object, lacks it or holds another
// type there: how what a peer sent or a state file holds is read (json::value throws on a member
// of another type).
std::string json_str(const nlohmann::json& j, const char* key, const std::string& dflt = "");

// Blocking helpers for a client's single exchange (cli/session_cmd.cpp, the agent's startup).
// read_frame: the next frame from `fd`, nullopt at a clean EOF; `reader` keeps what was read past
// it. An error for a torn frame, a bound broken, or a read error.
Result<std::optional<Frame>> read_frame(int fd, FrameReader& reader);

}  // namespace sbx
