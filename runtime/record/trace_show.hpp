#pragma once
// A trace record as text for people (`sbx trace show --format text`): one "LABEL  VALUE" line per
// fact, in the record's order of events. Read tolerantly: a record of an older version, or one
// edited since, prints what it has ("-" for what it lacks), never fails. Everything taken from the
// record is escaped for the terminal (text_escape.hpp).
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
