#include "runtime/log.hpp"

#include <cstdio>
#include <memory>

#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>

#include "runtime/text_escape.hpp"

namespace sbx {
namespace {

// stderr, with every message made printable() first: messages carry paths, argv, names from a
// pack or the store and errors about what a sandbox produced, and a message is one line. The
// sink is unsynchronised: sbx is single-threaded by design (no threads may exist at clone time).
class PrintableStderrSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::string safe = printable(std::string_view(msg.payload.data(), msg.payload.size()));
    spdlog::details::log_msg copy(msg);
    copy.payload = spdlog::string_view_t(safe.data(), safe.size());
    spdlog::memory_buf_t formatted;
    formatter_->format(copy, formatted);
    std::fwrite(formatted.data(), 1, formatted.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }
};

}  // namespace

Status init_logging(const std::string& level, int verbose) {
  spdlog::level::level_enum lvl = spdlog::level::warn;
  if (!level.empty()) {
    lvl = spdlog::level::from_str(level);
    // from_str maps unknown names to "off"; only accept it when asked for.
    if (lvl == spdlog::level::off && level != "off")
      return make_error("usage", "bad --log-level '" + printable(level) + "' (trace, debug, info, warn, error, off)");
  } else if (verbose >= 2) {
    lvl = spdlog::level::debug;
  } else if (verbose == 1) {
    lvl = spdlog::level::info;
  }
  auto logger = std::make_shared<spdlog::logger>("sbx", std::make_shared<PrintableStderrSink>());
  logger->set_pattern("sbx: %l: %v");
  logger->set_level(lvl);
  spdlog::set_default_logger(logger);
  return {};
}

}  // namespace sbx
