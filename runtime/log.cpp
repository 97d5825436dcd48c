#include "runtime/log.hpp"

#include <spdlog/sinks/stdout_sinks.h>

namespace sbx {

Status init_logging(const std::string& level, int verbose) {
  spdlog::level::level_enum lvl = spdlog::level::warn;
  if (!level.empty()) {
    lvl = spdlog::level::from_str(level);
    // from_str maps unknown names to "off"; only accept it when asked for.
    if (lvl == spdlog::level::off && level != "off")
      return make_error("usage", "bad --log-level '" + level + "' (trace, debug, info, warn, error, off)");
  } else if (verbose >= 2) {
    lvl = spdlog::level::debug;
  } else if (verbose == 1) {
    lvl = spdlog::level::info;
  }
  // Unsynchronised sink: sbx is single-threaded by design (no threads may exist at clone time).
  auto logger = spdlog::stderr_logger_st("sbx");
  logger->set_pattern("sbx: %l: %v");
  logger->set_level(lvl);
  spdlog::set_default_logger(logger);
  return {};
}

}  // namespace sbx
