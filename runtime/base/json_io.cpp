#include "runtime/base/json_io.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <unordered_set>
#include <utility>

#include "runtime/base/clock.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_limits.hpp"
#include "runtime/base/signals.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/base/bytes.hpp"

namespace sbx {
using nlohmann::json;

namespace {

// Forwards every event to nlohmann's own DOM builder once it has passed the bounds; the first
// event past one returns false, which stops the parser there, so the DOM never holds more than
// max_depth levels or max_values values. It also tracks where it is, for a JSON pointer.
class BoundedSax {
 public:
  BoundedSax(json& root, const JsonBounds& b) : dom_(root, /*allow_exceptions=*/false), b_(b) {}

  bool null() { return value() && dom_.null(); }
  bool boolean(bool v) { return value() && dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return value() && dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return value() && dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return value() && dom_.number_float(v, s); }
  bool string(json::string_t& v) { return value() && dom_.string(v); }
  bool binary(json::binary_t& v) { return value() && dom_.binary(v); }
  bool start_object(std::size_t n) { return open(false) && dom_.start_object(n); }
  bool start_array(std::size_t n) { return open(true) && dom_.start_array(n); }
  bool end_object() { return close() && dom_.end_object(); }
  bool end_array() { return close() && dom_.end_array(); }
  bool key(json::string_t& k) {
    if (!frames_.empty()) {
      Frame& f = frames_.back();
      f.key = k;
      f.has_key = true;
      // A repeated member name would silently replace the first (last wins in nlohmann, first in
      // other readers): two readers of one document could see two different values. Refused,
      // named by its pointer. The names seen are bounded by the document's size.
      if (!f.names.insert(k).second) return fail("duplicate member name " + json_excerpt(json(escape_utf8(k))));
    }
    return dom_.key(k);
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    // nlohmann quotes the offending token raw: escaped, the message is safe in any document. Its
    // "[json.exception.parse_error.101] parse error at line L, column C: why" loses the prefix:
    // "not valid JSON at line L, column C: why".
    std::string what = ex.what();
    static constexpr std::string_view kAt = "parse error at ";
    if (auto at = what.find(kAt); at != std::string::npos)
      return fail("not valid JSON at " + escape_utf8(what.substr(at + kAt.size())));
    if (auto close = what.find("] "); what.rfind("[json.exception.", 0) == 0 && close != std::string::npos)
      what = what.substr(close + 2);
    return fail("not valid JSON: " + escape_utf8(what));
  }

  std::string pointer() const {
    std::string p;
    for (auto& f : frames_) {
      // Inside a container, before its first element or member.
      if (f.array ? f.next_index == 0 : !f.has_key) break;
      p += '/';
      p += f.array ? std::to_string(f.next_index - 1) : pointer_token(f.key);
    }
    return p;
  }
  const std::string& problem() const { return problem_; }

 private:
  struct Frame {
    bool array;
    std::size_t next_index = 0;
    std::string key;
    bool has_key = false;
    std::unordered_set<std::string> names;  // an object's member names so far
  };

  bool fail(std::string why) {
    if (problem_.empty()) problem_ = std::move(why);
    return false;
  }
  // A value starts: counted, and its index in the enclosing array advanced.
  bool value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().next_index;
    if (++values_ > b_.max_values) return fail("more than " + std::to_string(b_.max_values) + " values");
    return true;
  }
  bool open(bool array) {
    if (!value()) return false;
    if (frames_.size() >= b_.max_depth) return fail("nested deeper than " + std::to_string(b_.max_depth) + " levels");
    frames_.push_back({array});
    return true;
  }
  bool close() {
    if (!frames_.empty()) frames_.pop_back();
    return true;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  const JsonBounds& b_;
  std::vector<Frame> frames_;
  std::size_t values_ = 0;
  std::string problem_;
};

std::string size_text(std::size_t n) {
  if (n >= (1u << 20) && n % (1u << 20) == 0) return std::to_string(n >> 20) + " MiB";
  if (n >= 1024 && n % 1024 == 0) return std::to_string(n >> 10) + " KiB";
  return std::to_string(n) + " bytes";
}

void append_hex_byte(std::string& out, unsigned char b) {
  char buf[5];
  std::snprintf(buf, sizeof buf, "\\x%02x", b);
  out += buf;
}

// Renames the members of object `o` whose names are not valid UTF-8 and returns the new names.
std::vector<std::string> escape_keys(json& o) {
  auto& obj = o.get_ref<json::object_t&>();
  std::vector<std::string> bad, renamed;
  for (auto& [k, v] : obj)
    if (!valid_utf8(k)) bad.push_back(k);
  for (auto& k : bad) {
    auto node = obj.extract(k);
    std::string name = escape_utf8(k);
    if (obj.count(name)) {
      // A valid name already reads like the escape: spell every byte out instead.
      name.clear();
      for (unsigned char b : bytes_of(k)) append_hex_byte(name, b);
    }
    node.key() = name;
    obj.insert(std::move(node));
    renamed.push_back(std::move(name));
  }
  return renamed;
}

}  // namespace

std::string ParsedJson::describe() const { return pointer.empty() ? problem : pointer + ": " + problem; }

ParsedJson parse_json(std::string_view text, const JsonBounds& bounds) {
  ParsedJson r;
  if (text.size() > bounds.max_bytes) {
    r.problem = "larger than " + size_text(bounds.max_bytes) + " (" + std::to_string(text.size()) + " bytes)";
    return r;
  }
  BoundedSax sax(r.value, bounds);
  bool ok = json::sax_parse(text, &sax, json::input_format_t::json, /*strict=*/true, /*ignore_comments=*/false);
  if (!ok) {
    r.problem = sax.problem().empty() ? "not valid JSON" : sax.problem();
    r.pointer = sax.pointer();
    r.value = nullptr;  // the partial DOM is within the bounds; release it now
  }
  return r;
}

Result<json> parse_json_doc(std::string_view text, const JsonBounds& bounds, Stage stage, const std::string& what) {
  ParsedJson p = parse_json(text, bounds);
  if (!p.ok()) return make_error(stage, what + ": " + p.describe());
  return std::move(p.value);
}

Result<std::string> read_bounded_fd(int fd, std::size_t max_bytes, Stage stage, const std::string& what) {
  std::string s;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error(stage, "cannot read " + what);
    if (n == 0) return s;
    if (s.size() + static_cast<std::size_t>(n) > max_bytes)
      return make_error(stage, what + ": larger than " + size_text(max_bytes));
    s.append(buf, static_cast<std::size_t>(n));
  }
}

Result<std::string> read_to_end_holding_signals(int fd, std::size_t max_bytes, int grace_ms, int* interrupted,
                                                Stage stage, const std::string& what) {
  *interrupted = 0;
  sigset_t fwd;
  forwarded_signals(&fwd);
  // Readable while a forwarded signal is pending (and blocked): what wakes the poll below.
  UniqueFd sfd(::signalfd(-1, &fwd, SFD_CLOEXEC | SFD_NONBLOCK));
  std::string s;
  char buf[65536];
  int sig = 0;
  std::int64_t deadline_ms = 0;
  for (;;) {
    if (!sig && (sig = peek_pending_forwarded_signal()) != 0) deadline_ms = monotonic_ms() + grace_ms;
    int timeout = -1;
    if (sig) {
      std::int64_t left = deadline_ms - monotonic_ms();
      timeout = static_cast<int>(left < 0 ? 0 : left);
    }
    // Without a signalfd (out of fds) only the request is waited for: a signal still stays
    // pending and is recorded once the request is complete.
    struct pollfd p[2] = {{fd, POLLIN, 0}, {sfd.get(), POLLIN, 0}};
    int n = ::poll(p, !sig && sfd.ok() ? 2 : 1, timeout);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_error(stage, "cannot wait for " + what);
    if (n == 0) {
      *interrupted = sig;
      return make_error("signal", signal_name(sig) + " while reading " + what + ", which did not end within " +
                                      std::to_string(grace_ms / 1000) +
                                      " s: no call was made and nothing was recorded "
                                      "(close the request's stream to have the call recorded as signaled)");
    }
    if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL))) continue;  // only the signal
    ssize_t k = ::read(fd, buf, sizeof buf);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k < 0) return sys_error(stage, "cannot read " + what);
    if (k == 0) return s;
    if (s.size() + static_cast<std::size_t>(k) > max_bytes)
      return make_error(stage, what + ": larger than " + size_text(max_bytes));
    s.append(buf, static_cast<std::size_t>(k));
  }
}

const json& json_member(const json& j, const char* key) {
  static const json null_value;
  if (!j.is_object()) return null_value;
  auto it = j.find(key);
  return it == j.end() ? null_value : *it;
}

Result<std::string> read_bounded(const std::string& path, std::size_t max_bytes, Stage stage, const std::string& what) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd.ok()) return sys_error(stage, "cannot read " + what);
  return read_bounded_fd(fd.get(), max_bytes, stage, what);
}

Result<std::string> read_regular_bounded(const std::string& path, std::size_t max_bytes, Stage stage,
                                         const std::string& what, bool no_follow) {
  // O_NONBLOCK: opening a FIFO for reading would wait for a writer; this way the open returns at
  // once and the fstat below refuses it (O_NONBLOCK does not change how a regular file reads).
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | (no_follow ? O_NOFOLLOW : 0)));
  if (!fd.ok() && errno == ELOOP && no_follow) return make_error(stage, what + ": a symbolic link, not a regular file");
  if (!fd.ok()) return sys_error(stage, "cannot read " + what);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return sys_error(stage, "cannot read " + what);
  if (S_ISDIR(st.st_mode)) return Error{stage, EISDIR, "cannot read " + what};  // as read() would say
  if (!S_ISREG(st.st_mode)) return make_error(stage, what + ": not a regular file");
  return read_bounded_fd(fd.get(), max_bytes, stage, what);
}

Result<json> read_json_file(const std::string& path, const JsonBounds& bounds, Stage stage, const std::string& what) {
  auto text = read_bounded(path, bounds.max_bytes, stage, what);
  if (!text) return text.error();
  return parse_json_doc(*text, bounds, stage, what);
}

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    std::size_t n = utf8_len(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string escape_utf8(std::string_view raw, bool* changed) {
  bool bad = !valid_utf8(raw);
  if (changed) *changed = bad;
  if (!bad) return std::string(raw);
  std::string out;
  out.reserve(raw.size() + 16);
  for (std::size_t i = 0; i < raw.size();) {
    std::size_t n = utf8_len(raw, i);
    if (n == 0 || raw[i] == '\\') {
      append_hex_byte(out, static_cast<unsigned char>(raw[i]));
      ++i;
    } else {
      out.append(raw.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::vector<std::string> escape_json_strings(json& j) {
  std::vector<std::string> escaped;
  std::vector<std::pair<json*, std::string>> todo{{&j, ""}};
  while (!todo.empty()) {
    auto [v, ptr] = std::move(todo.back());
    todo.pop_back();
    if (v->is_string()) {
      auto& s = v->get_ref<std::string&>();
      bool changed = false;
      std::string e = escape_utf8(s, &changed);
      if (changed) s = std::move(e), escaped.push_back(ptr);
    } else if (v->is_array()) {
      for (std::size_t i = 0; i < v->size(); ++i) todo.push_back({&(*v)[i], ptr + "/" + std::to_string(i)});
    } else if (v->is_object()) {
      for (auto& name : escape_keys(*v)) escaped.push_back(ptr + "/" + pointer_token(name));
      for (auto& [k, val] : v->get_ref<json::object_t&>()) todo.push_back({&val, ptr + "/" + pointer_token(k)});
    }
  }
  std::sort(escaped.begin(), escaped.end());
  return escaped;
}

std::size_t json_depth(const json& j) {
  std::size_t deepest = 0;
  std::vector<std::pair<const json*, std::size_t>> todo{{&j, 0}};
  while (!todo.empty()) {
    auto [v, d] = todo.back();
    todo.pop_back();
    if (!v->is_structured()) continue;
    deepest = std::max(deepest, d + 1);
    for (auto& child : *v) todo.push_back({&child, d + 1});
  }
  return deepest;
}

std::string dump_json(json& j, int indent, const std::function<json(const std::string& reason)>& fallback, bool ascii) {
  auto last_resort = [&](const std::string& why) -> std::string {
    try {
      json f = fallback ? fallback(why) : json{{"error", {{"stage", "record"}, {"message", why}}}};
      escape_json_strings(f);
      return f.dump(indent, ' ', false, json::error_handler_t::replace);
    } catch (...) {
      return "{\"error\": {\"stage\": \"record\", \"message\": \"the document could not be serialised\"}}";
    }
  };
  try {
    // dump() recurses once per level; sbx's documents are shallow and what they embed was parsed
    // within kMaxJsonDepth, so this only trips on a bug, and then without a crash.
    if (json_depth(j) > kMaxJsonDepth + kMaxEnvelopeDepth)
      return last_resort("nested deeper than " + std::to_string(kMaxJsonDepth + kMaxEnvelopeDepth) + " levels");
    std::vector<std::string> escaped = escape_json_strings(j);
    if (!escaped.empty() && j.is_object()) {
      json& list = j["escaped_strings"];
      if (!list.is_array()) list = json::array();
      for (auto& p : escaped) list.push_back(p);
    }
    return j.dump(indent, ' ', ascii, json::error_handler_t::replace);
  } catch (const std::exception& e) {
    return last_resort(std::string("the document could not be serialised: ") + e.what());
  }
}

ListCut cut_list(nlohmann::json& list, std::size_t max_items, std::size_t max_bytes) {
  ListCut c;
  if (!list.is_array()) return c;
  c.total = list.size();
  std::size_t bytes = 2;  // []
  while (c.listed < c.total && c.listed < max_items) {
    std::size_t add = list[c.listed].dump(-1, ' ', false, json::error_handler_t::replace).size() + (c.listed ? 1 : 0);
    if (bytes + add > max_bytes) break;
    bytes += add;
    ++c.listed;
  }
  if (c.listed < c.total) list.erase(list.begin() + static_cast<std::ptrdiff_t>(c.listed), list.end());
  return c;
}

std::string json_excerpt(const json& v, std::size_t max) {
  json copy = v;
  std::string s = dump_json(copy, -1);
  if (s.size() <= max) return s;
  // Cut on a character boundary, so the message stays valid UTF-8.
  std::size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...";
}

std::string pointer_token(std::string_view key) {
  std::string t;
  for (char c : key) {
    if (c == '~') t += "~0";
    else if (c == '/') t += "~1";
    else t += c;
  }
  return t;
}

}  // namespace sbx
