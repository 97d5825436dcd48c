#pragma once
// A trace record as text for people (`sbx trace show --format text`): one "LABEL  VALUE" line per
// fact, in the record's order of events. Read tolerantly: a record of an older version, or one
// edited since, prints what it has ("-" for what it lacks), never fails. Everything taken from the
// record is escaped for the terminal (text_escape.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sbx {

std::string trace_show_text(const nlohmann::json& record);
// JSON with every non-ASCII character, control character and DEL as \uXXXX, and bytes that are
// not UTF-8 replaced: a record's values as they may reach a terminal.
std::string dump_ascii_json(const nlohmann::json& v, int indent = -1);

// A refused system call that programs expect and recover from: clone3 answered ENOSYS (the
// policy's way to make libc fall back to clone, whose flags a filter can check). Every threaded
// program makes it; it stays in the record, and is counted as expected where violations are
// summed up (violations_line, trace show), not as something the program was refused.
bool seccomp_refusal_expected(const nlohmann::json& violation);

// What a record's violations add up to: system calls refused (expected refusals left out, the
// calls past the record's list counted) and connections denied. violations_line and `sbx run
// --json` both count through it, so the line and the object never disagree. The names, when
// asked for, are the distinct ones in the record's order.
struct ViolationCounts {
  std::uint64_t system_calls = 0, hosts = 0;
};
ViolationCounts count_violations(const nlohmann::json& record, std::vector<std::string>* call_names = nullptr,
                                 std::vector<std::string>* host_names = nullptr);

// Where a run's record went: the ledger line (seq and hash when stored) or why it was not stored.
struct RecordPlace {
  bool stored = false;
  std::string ledger;  // the ledger's path
  std::uint64_t seq = 0;
  std::string hash, error, trace_file;
};
// `sbx run --json`'s object, read from the run's record (not from a second list of the run's
// facts): run_id, started_at, ended_at, the record's `result` whole (status, exit_code, signal,
// error, reason: the status names the limit that ended the run, the reason details it),
// exit_status (what sbx exits with), wall_ms, violations {system_calls, hosts} (count_violations)
// and record {stored, ledger, seq, hash, error, trace_file}.
nlohmann::json run_summary_json(const nlohmann::json& record, const RecordPlace& place, int exit_status);

// The one line a run with violations ends with, at the default log level, e.g.
// "1 system call refused (unshare), 1 host denied (example.com): see 'sbx trace show RUN_ID
// --format text'"; "" when the record has none (expected refusals do not count).
std::string violations_line(const nlohmann::json& record);
// Whether `message` (a log line without its "sbx: warning: " prefix) is a violations_line: for a
// caller that reports the refusals itself (sbx probe, whose helper makes them on purpose).
bool is_violations_line(const std::string& message);

// A limit's value as trace show prints it: durations and sizes in units (format_duration_ms,
// format_size), by the limit's name in the record: limits_table.hpp's plan_name ("timeout",
// "memory", ...) or a tmpfs size ("tmp_size"). The record layer cannot reach that table (it sits
// below model/), so the units are named here; a limit it does not know prints as its number.
std::string shown_limit_value(const std::string& plan_name, const nlohmann::json& value);

}  // namespace sbx
