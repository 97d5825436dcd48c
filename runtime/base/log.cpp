#include "runtime/base/log.hpp"

#include <cstdio>
#include <memory>
#include <utility>

#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>

#include "runtime/base/output_relay.hpp"
#include "runtime/base/text_escape.hpp"

namespace sbx {
namespace {

// stderr, written as stdio does, except while a run is supervised (NonBlockingLogScope): then a
// line goes through a private non-blocking description of stderr (output_relay.hpp) and is
// dropped and counted when stderr's reader is not taking it, because the supervisor never blocks.
// Every message is made printable() first: messages carry paths, argv, names from a pack or the
// store and errors about what a sandbox produced, and a message is one line.
class StderrSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 public:
  OutputSink* nonblocking = nullptr;
  std::uint64_t dropped = 0;

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::string safe = printable(std::string_view(msg.payload.data(), msg.payload.size()));
    spdlog::details::log_msg copy(msg);
    copy.payload = spdlog::string_view_t(safe.data(), safe.size());
    spdlog::memory_buf_t line;
    formatter_->format(copy, line);
    if (!nonblocking) {
      std::fwrite(line.data(), 1, line.size(), stderr);
      return;
    }
    std::fflush(stderr);
    // A line of up to PIPE_BUF bytes goes into a pipe whole or not at all.
    ssize_t w = nonblocking->write_some(line.data(), line.size());
    if (w != static_cast<ssize_t>(line.size())) ++dropped;
  }
  void flush_() override { std::fflush(stderr); }
};

std::shared_ptr<StderrSink> g_sink;

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
  // Unsynchronised sink: sbx is single-threaded by design (no threads may exist at clone time).
  g_sink = std::make_shared<StderrSink>();
  auto logger = std::make_shared<spdlog::logger>("sbx", g_sink);
  logger->set_pattern("sbx: %l: %v");
  logger->set_level(lvl);
  spdlog::set_default_logger(logger);
  return {};
}

// Scopes nest (run_sandbox holds one, supervise another): only the outermost one switches.
NonBlockingLogScope::NonBlockingLogScope() {
  if (!g_sink || g_sink->nonblocking) return;
  sink_ = std::make_unique<OutputSink>(OutputSink::open(2));
  g_sink->nonblocking = sink_.get();
}

NonBlockingLogScope::~NonBlockingLogScope() {
  if (!sink_) return;
  // The count goes out the same way, while stderr is still written without blocking.
  if (std::uint64_t n = std::exchange(g_sink->dropped, 0))
    spdlog::warn("{} log line(s) dropped: stderr was not being read", n);
  g_sink->nonblocking = nullptr;
}

}  // namespace sbx
