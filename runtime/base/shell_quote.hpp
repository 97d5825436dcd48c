#pragma once
// Quoting argv for display so that a printed command can be pasted back into a POSIX shell
// (trace summaries, `sbx trace show`).
#include <string>
#include <vector>

namespace sbx {

// `arg` as is when every character is in [A-Za-z0-9_./=:,@%+-]; otherwise single-quoted, with
// embedded single quotes written as '\''. The empty string becomes ''. An argument with a control
// byte, invalid UTF-8 or a format character (text_escape.hpp) becomes $'...' with escapes, so
// that printing it never reaches the terminal raw.
std::string shell_quote(const std::string& arg);

// Each argument shell-quoted, joined with single spaces.
std::string shell_join(const std::vector<std::string>& argv);

}  // namespace sbx
