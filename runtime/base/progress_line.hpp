#pragma once
// A progress line on stderr for long store operations (`sbx image import`, `sbx image verify
// --full`): at most one line a second, and only once the operation has taken a second, so quick
// ones stay silent. On a terminal the line is rewritten in place; anywhere else (a log, a pipe)
// each update is a line of its own, so nothing is left half-written in a file.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include "runtime/base/clock.hpp"

namespace sbx {

// "12.3 MiB", "512 B".
std::string human_bytes(std::int64_t bytes);

class ProgressLine {
 public:
  using Clock = std::function<std::int64_t()>;  // milliseconds, monotonic
  // `what` ("importing SRC") must already be printable (text_escape.hpp): it goes to a terminal.
  ProgressLine(std::string what, std::FILE* out, bool tty, Clock clock = monotonic_ms);
  ~ProgressLine() { finish(); }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  void update(const char* phase, std::int64_t entries, std::int64_t bytes);
  // Ends a line rewritten in place with its newline, so that what follows starts on a line of its
  // own; idempotent.
  void finish();
  int printed() const { return printed_; }

 private:
  std::string what_;
  std::FILE* out_;
  bool tty_;
  Clock clock_;
  std::int64_t last_;  // start, then the time of the last line
  int printed_ = 0;
  bool open_line_ = false;
};

}  // namespace sbx
