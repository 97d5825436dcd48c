#pragma once
// spdlog to stderr: quiet by default (warnings only, so a run prints just the program's output),
// -v for info, -vv for debug, or --log-level NAME.
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "runtime/base/error.hpp"

namespace sbx {

// level: "" (use verbose count), or one of trace, debug, info, warn, error, off.
Status init_logging(const std::string& level, int verbose);

class OutputSink;
// While it lives, sbx's log lines never block on stderr: a line that stderr's reader is not
// taking is dropped and counted, and the count is logged (the same way) when the scope ends.
// run_sandbox and supervise hold one: a stalled stderr must not stop a run, not even with -v.
class NonBlockingLogScope {
 public:
  NonBlockingLogScope();
  ~NonBlockingLogScope();
  NonBlockingLogScope(const NonBlockingLogScope&) = delete;
  NonBlockingLogScope& operator=(const NonBlockingLogScope&) = delete;

 private:
  std::unique_ptr<OutputSink> sink_;
};

}  // namespace sbx
