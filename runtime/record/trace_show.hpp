#pragma once
// A trace record as text for people (`sbx trace show --format text`): one "LABEL  VALUE" line per
// fact, in the record's order of events. Read tolerantly: a record of an older version, or one
// edited since, prints what it has ("-" for what it lacks), never fails. Everything taken from the
// record is escaped for the terminal (text_escape.hpp).
#include <string>

#include <nlohmann/json.hpp>

namespace sbx {

std::string trace_show_text(const nlohmann::json& record);
// JSON with every non-ASCII character, control character and DEL as \uXXXX, and bytes that are
// not UTF-8 replaced: a record's values as they may reach a terminal.
std::string dump_ascii_json(const nlohmann::json& v, int indent = -1);

}  // namespace sbx
