#pragma once
// spdlog to stderr: quiet by default (warnings only, so a run prints just the program's output),
// -v for info, -vv for debug, or --log-level NAME.
#include <string>

#include <spdlog/spdlog.h>

#include "runtime/error.hpp"

namespace sbx {

// level: "" (use verbose count), or one of trace, debug, info, warn, error, off.
Status init_logging(const std::string& level, int verbose);

}  // namespace sbx
