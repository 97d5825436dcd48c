#include "runtime/base/progress_line.hpp"

#include <time.h>

#include <utility>

namespace sbx {

std::string human_bytes(std::int64_t b) {
  char buf[32];
  if (b >= (1LL << 30)) std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(b) / (1LL << 30));
  else if (b >= (1LL << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1LL << 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(b) / 1024);
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  return buf;
}

ProgressLine::ProgressLine(std::string what, std::FILE* out, bool tty, Clock clock)
    : what_(std::move(what)), out_(out), tty_(tty), clock_(std::move(clock)), last_(clock_()) {}

void ProgressLine::update(const char* phase, std::int64_t entries, std::int64_t bytes) {
  std::int64_t now = clock_();
  if (now - last_ < 1000) return;
  last_ = now;
  // "\r\033[K": back to the start of the line and erase it, so a shorter line leaves no tail.
  std::fprintf(out_, "%s%s: %s, %lld entries, %s%s", tty_ ? "\r\033[K" : "", what_.c_str(), phase,
               static_cast<long long>(entries), human_bytes(bytes).c_str(), tty_ ? "" : "\n");
  std::fflush(out_);
  ++printed_;
  open_line_ = tty_;
}

void ProgressLine::finish() {
  if (!open_line_) return;
  std::fputc('\n', out_);
  open_line_ = false;
}

}  // namespace sbx
