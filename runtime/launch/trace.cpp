#include "runtime/launch/trace.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <time.h>

#include <cstdio>

#include "runtime/base/clock.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/sha256.hpp"

namespace sbx {
namespace {

nlohmann::json stream_json(const StreamStats* s) {
  StreamStats none;
  if (!s) {
    none.sha256 = sha256_hex("");
    s = &none;
  }
  return {{"bytes", s->bytes},
          {"sha256", s->sha256},
          {"truncated", s->truncated},
          {"dropped_bytes", s->dropped_bytes},
          {"undelivered_bytes", s->undelivered_bytes},
          {"reader_closed", s->reader_closed},
          {"write_error", s->write_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(s->write_error)}};
}

std::int64_t tv_ms(const struct timeval& tv) { return tv.tv_sec * 1000LL + tv.tv_usec / 1000; }

}  // namespace


nlohmann::json trace_record(TraceParts&& p) {
  using nlohmann::json;
  const Outcome& o = p.outcome;
  json error = nullptr;
  if (o.error) error = {{"stage", o.error->stage}, {"errno", o.error->err}, {"message", o.error->describe()}};
  json result = {{"status", to_string(o.status)},
                 {"exit_code", o.exit_code ? json(*o.exit_code) : json(nullptr)},
                 {"signal", o.signal ? json(*o.signal) : json(nullptr)},
                 {"error", error},
                 {"reason", o.reason},
                 {"sbx_exit_status", exit_status_for(o)}};

  json usage = {{"wall_ms", p.sup ? p.sup->wall_ms : 0},
                {"cpu_user_ms", p.sup ? json(tv_ms(p.sup->usage.ru_utime)) : json(nullptr)},
                {"cpu_sys_ms", p.sup ? json(tv_ms(p.sup->usage.ru_stime)) : json(nullptr)},
                {"memory_peak_bytes", nullptr},
                {"max_rss_bytes", p.sup ? json(p.sup->usage.ru_maxrss * 1024LL) : json(nullptr)},
                {"pids_peak", nullptr},
                {"oom_kills", nullptr}};
  if (p.usage_extra.is_object())
    for (auto& [k, v] : p.usage_extra.items()) usage[k] = v;

  json record{{"schema", kTraceSchema},
              {"run_id", p.run_id},
              {"started_at", p.started_at},
              {"ended_at", p.ended_at},
              {"sbx", {{"version", SBX_VERSION}}},
              {"host", std::move(p.host)},
              {"invocation", std::move(p.invocation)},
              {"image", std::move(p.image)},
              {"enforcement", std::move(p.enforcement)},
              {"inputs", json::array()},
              {"outputs", json::array()},
              {"stdout", stream_json(p.sup ? &p.sup->out : nullptr)},
              {"stderr", stream_json(p.sup ? &p.sup->err : nullptr)},
              {"result", result},
              {"usage", usage},
              {"violations", std::move(p.violations)},
              {"violations_summary", std::move(p.violations_summary)}};
  // When the program's execve returned, as init saw it (microseconds): started_at to it is
  // sbx's start-up; absent when the program did not start.
  if (p.sup && p.sup->program_exec_ns > 0) record["program_started_at"] = rfc3339_us(p.sup->program_exec_ns);
  return record;
}

std::string trace_text(nlohmann::json& record, int indent) {
  using nlohmann::json;
  // Copied before dump_json touches the record: the fallback must not depend on what failed.
  json keep = json::object();
  if (record.is_object())
    for (const char* k : {"schema", "run_id", "started_at", "ended_at", "result"})
      if (auto it = record.find(k); it != record.end() && (it->is_string() || k == std::string("result")))
        keep[k] = *it;
  auto fallback = [&keep](const std::string& reason) {
    json f = keep;
    f["record_error"] = reason;
    return f;
  };
  std::string text = dump_json(record, indent, fallback);
  if (indent >= 0) text += "\n";
  return text;
}

}  // namespace sbx
