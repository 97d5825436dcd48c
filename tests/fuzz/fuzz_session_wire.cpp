// The frames a session's server reads from its agent and its clients (runtime/session/
// session_wire.hpp): whatever the bytes and however they are split, the reader never holds more
// than one frame plus one read, never crashes, and every frame it yields is within the bound and of
// a known type; JSON frames parse or are refused (frame_json), stream frames decode or are refused.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "runtime/session/session_tunnel.hpp"
#include "runtime/session/session_wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::size_t step = 1 + data[0] % 64;
  std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  sbx::FrameReader r;
  for (std::size_t at = 0; at < bytes.size(); at += step) {
    if (!r.wants_more()) std::abort();
    r.feed(bytes.substr(at, step));
    for (;;) {
      auto f = r.next();
      if (!f) return 0;
      if (!*f) break;
      const sbx::Frame& fr = **f;
      if (fr.body.size() > sbx::kMaxFrame) std::abort();
      if (fr.type == 'J') (void)sbx::frame_json(fr);
      if (fr.type == 'S') {
        std::uint32_t id = 0;
        std::string_view payload;
        if (sbx::decode_stream_frame(fr.body, id, payload) && payload.size() + 4 != fr.body.size()) std::abort();
      }
      if (fr.type != 'J' && fr.type != 'O' && fr.type != 'E' && fr.type != 'S') std::abort();
    }
  }
  return 0;
}
