#include "runtime/launch/trace.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <time.h>

#include <cstddef>
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
  // stdout's paths name stderr's members too: both are #/definitions/stream.
  return trace_object(
      {{"stdout/bytes", s->bytes},
       {"stdout/sha256", s->sha256},
       {"stdout/truncated", s->truncated},
       {"stdout/dropped_bytes", s->dropped_bytes},
       {"stdout/undelivered_bytes", s->undelivered_bytes},
       {"stdout/reader_closed", s->reader_closed},
       {"stdout/write_error", s->write_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(s->write_error)}});
}

std::int64_t tv_ms(const struct timeval& tv) { return tv.tv_sec * 1000LL + tv.tv_usec / 1000; }

// Compact size as stored. Strings are valid UTF-8 by the time bound_record measures (dump_json
// escaped them); `replace` only keeps a bug from throwing here.
std::size_t compact_size(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
}

// A prefix of `s` of at most `n` bytes, not ending inside a UTF-8 sequence.
std::string utf8_prefix(const std::string& s, std::size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

// Members bound_record never cuts: what every reader lists and verifies a record by.
bool protected_member(const std::string& k) {
  for (const char* p : {"schema", "run_id", "started_at", "ended_at", "result", "sbx", "record_truncated"})
    if (k == p) return true;
  return false;
}

// Cuts `v` to about `budget` bytes of compact JSON, keeping what fits.
void cut_to(nlohmann::json& v, std::size_t budget) {
  if (v.is_array()) cut_list(v, v.size(), budget);
  else if (v.is_string()) v = utf8_prefix(v.get_ref<const std::string&>(), budget > 2 ? budget - 2 : 0);
  else if (v.is_object()) v = nlohmann::json::object();
  else v = nullptr;
}

constexpr int kMaxCuts = 64;                  // rounds of bound_record; each cut brings it closer
constexpr std::size_t kMaxCutPointer = 1024;  // bytes of a cut member's pointer in the note

}  // namespace

nlohmann::json trace_record(TraceParts&& p) {
  using nlohmann::json;
  const Outcome& o = p.outcome;
  json error = nullptr;
  if (o.error)
    error = trace_object({{"result/error/stage", o.error->stage.name()},
                          {"result/error/errno", o.error->err},
                          {"result/error/message", o.error->describe()}});
  json result = trace_object({{"result/status", to_string(o.status)},
                              {"result/exit_code", o.exit_code ? json(*o.exit_code) : json(nullptr)},
                              {"result/signal", o.signal ? json(*o.signal) : json(nullptr)},
                              {"result/error", error},
                              {"result/reason", o.reason},
                              {"result/sbx_exit_status", exit_status_for(o)}});

  json usage = trace_object({{"usage/wall_ms", p.sup ? p.sup->wall_ms : 0},
                             {"usage/cpu_user_ms", p.sup ? json(tv_ms(p.sup->usage.ru_utime)) : json(nullptr)},
                             {"usage/cpu_sys_ms", p.sup ? json(tv_ms(p.sup->usage.ru_stime)) : json(nullptr)},
                             // A run cgroup's cpu.stat replaces both (usage_extra, cgroup_usage_json).
                             {"usage/cpu_source", p.sup ? json("rusage") : json(nullptr)},
                             {"usage/memory_peak_bytes", nullptr},
                             {"usage/max_rss_bytes", p.sup ? json(p.sup->usage.ru_maxrss * 1024LL) : json(nullptr)},
                             {"usage/pids_peak", nullptr},
                             {"usage/oom_kills", nullptr}});
  // usage_extra's members were named by the builder where they were made (TraceParts).
  if (p.usage_extra.is_object())
    for (auto& [k, v] : p.usage_extra.items()) usage[k] = v;

  json record = trace_object({{"schema", kTraceSchema},
                              {"run_id", p.run_id},
                              {"started_at", p.started_at},
                              {"ended_at", p.ended_at},
                              {"sbx", trace_object({{"sbx/version", SBX_VERSION}})},
                              {"inputs", json::array()},
                              {"outputs", json::array()},
                              {"stdout", stream_json(p.sup ? &p.sup->out : nullptr)},
                              {"stderr", stream_json(p.sup ? &p.sup->err : nullptr)}});
  // The parts are moved in, not copied (trace_object copies its values).
  put(record, "host", std::move(p.host));
  put(record, "invocation", std::move(p.invocation));
  put(record, "image", std::move(p.image));
  put(record, "enforcement", std::move(p.enforcement));
  put(record, "result", std::move(result));
  put(record, "usage", std::move(usage));
  put(record, "violations", std::move(p.violations));
  put(record, "violations_summary", std::move(p.violations_summary));
  // When the program's execve returned, as init saw it (microseconds): started_at to it is
  // sbx's start-up; absent when the program did not start.
  if (p.sup && p.sup->program_exec_ns > 0) put(record, "program_started_at", rfc3339_us(p.sup->program_exec_ns));
  return record;
}

bool bound_record(nlohmann::json& record, std::size_t max_bytes) {
  using nlohmann::json;
  if (!record.is_object()) return false;
  try {
    std::string first = dump_json(record, -1);  // escapes what is not UTF-8, as the stored text will be
    if (first.size() <= max_bytes) return true;
    json note = trace_object({{"record_truncated/max_bytes", max_bytes},
                              {"record_truncated/bytes", first.size()},
                              {"record_truncated/cut", json::array()}});
    first.clear();
    first.shrink_to_fit();
    for (int round = 0; round < kMaxCuts; ++round) {
      put(record, "record_truncated", note);
      std::size_t size = compact_size(record);
      if (size <= max_bytes) return true;
      std::size_t excess = size - max_bytes + 256;  // and room for this cut's entry in the note
      // Down from the top, along the biggest member, to the smallest one whose cut alone is
      // enough (or, when none is, the biggest one there is): what a cut loses stays local.
      json* node = &record;
      std::string ptr;
      json* target = nullptr;
      std::string target_ptr;
      std::size_t target_size = 0;
      for (;;) {
        json* best = nullptr;
        std::string best_tok;
        std::size_t best_size = 0;
        if (node->is_object()) {
          for (auto& [k, v] : node->items()) {
            if (node == &record && protected_member(k)) continue;
            std::size_t n = compact_size(v);
            if (n > best_size) best = &v, best_tok = pointer_token(k), best_size = n;
          }
        } else if (node->is_array()) {
          for (std::size_t i = 0; i < node->size(); ++i) {
            std::size_t n = compact_size((*node)[i]);
            if (n > best_size) best = &(*node)[i], best_tok = std::to_string(i), best_size = n;
          }
        }
        if (!best) break;
        target = best, target_ptr = ptr + "/" + best_tok, target_size = best_size;
        if (best_size <= excess || !best->is_structured()) break;  // this one, whole or cut to fit
        // Descend only if one of its members is enough alone; else cut this one to fit.
        bool one_enough = false;
        if (best->is_array() || best->is_object())
          for (auto& v : *best)
            if (compact_size(v) > excess) {
              one_enough = true;
              break;
            }
        if (!one_enough) break;
        node = best, ptr = target_ptr;
      }
      if (!target) return false;
      cut_to(*target, target_size > excess ? target_size - excess : 0);
      json cut = trace_object({{"record_truncated/cut/[]/pointer", utf8_prefix(target_ptr, kMaxCutPointer)},
                               {"record_truncated/cut/[]/bytes", target_size},
                               {"record_truncated/cut/[]/kept_bytes", compact_size(*target)}});
      at(note, "record_truncated/cut").push_back(std::move(cut));
    }
    put(record, "record_truncated", note);
    return compact_size(record) <= max_bytes;
  } catch (const std::exception&) { return false; }
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
    put(f, "record_error", reason);
    return f;
  };
  std::string text = dump_json(record, indent, fallback);
  // The stored record's bound holds for the ledger's compact line and for --trace-file alike
  // (`trace import` reads the file under the same bound): a pretty form over it is written compact.
  if (text.size() > kMaxRecordBytes) {
    if (!bound_record(record)) {
      json f = fallback("the record stayed over " + std::to_string(kMaxRecordBytes) +
                        " bytes after cutting its biggest members");
      text = dump_json(f, indent);
    } else {
      text = dump_json(record, indent, fallback);
      if (text.size() > kMaxRecordBytes) text = dump_json(record, -1, fallback);
    }
  }
  if (indent >= 0) text += "\n";
  return text;
}

}  // namespace sbx
