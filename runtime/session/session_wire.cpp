#include "runtime/session/session_wire.hpp"

#include <errno.h>
#include <unistd.h>

#include "runtime/base/json_io.hpp"

namespace sbx {
namespace {
constexpr const char* kStage = "sessions";

bool known_type(char t) { return t == 'J' || t == 'O' || t == 'E' || t == 'S'; }
}  // namespace

std::string encode_frame(char type, std::string_view body) {
  std::string out(5, '\0');
  auto n = static_cast<std::uint32_t>(body.size());
  out[0] = static_cast<char>(n >> 24);
  out[1] = static_cast<char>(n >> 16);
  out[2] = static_cast<char>(n >> 8);
  out[3] = static_cast<char>(n);
  out[4] = type;
  out.append(body);
  return out;
}

std::string encode_json_frame(nlohmann::json j) { return encode_frame('J', dump_json(j, -1)); }

Result<std::optional<Frame>> FrameReader::next() {
  if (pending() < 5) return std::optional<Frame>{};
  const auto* p = reinterpret_cast<const unsigned char*>(buf_.data() + at_);
  std::size_t n = (std::size_t{p[0]} << 24) | (std::size_t{p[1]} << 16) | (std::size_t{p[2]} << 8) | p[3];
  char type = static_cast<char>(p[4]);
  if (n > kMaxFrame)
    return make_error(kStage,
                      "a session frame of " + std::to_string(n) + " bytes (at most " + std::to_string(kMaxFrame) + ")");
  if (!known_type(type)) return make_error(kStage, "a session frame of an unknown type");
  if (pending() < 5 + n) return std::optional<Frame>{};
  Frame f{type, buf_.substr(at_ + 5, n)};
  at_ += 5 + n;
  // Compact once the consumed prefix is large: the buffer stays within about one frame.
  if (at_ == buf_.size()) {
    buf_.clear();
    at_ = 0;
  } else if (at_ > (64u << 10)) {
    buf_.erase(0, at_);
    at_ = 0;
  }
  return std::optional<Frame>{std::move(f)};
}

Result<nlohmann::json> frame_json(const Frame& f) {
  if (f.type != 'J') return make_error(kStage, "expected a JSON frame");
  auto j = parse_json_doc(f.body, JsonBounds{kMaxFrame}, kStage, "session message");
  if (!j) return j.error();
  if (!j->is_object()) return make_error(kStage, "session message: not a JSON object");
  return j;
}

std::string json_str(const nlohmann::json& j, const char* key, const std::string& dflt) {
  if (!j.is_object()) return dflt;
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : dflt;
}

Result<std::optional<Frame>> read_frame(int fd, FrameReader& reader) {
  char buf[64 << 10];
  for (;;) {
    auto f = reader.next();
    if (!f || *f) return f;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error(kStage, "cannot read from the session");
    if (n == 0) {
      if (reader.pending() != 0) return make_error(kStage, "the session's connection ended inside a frame");
      return std::optional<Frame>{};
    }
    reader.feed(std::string_view(buf, static_cast<std::size_t>(n)));
  }
}

}  // namespace sbx
