#pragma once
// Text of outside origin (argv, a pack's manifest, names in the store, what a sandboxed program
// wrote) made safe to print. A terminal interprets control bytes: ESC starts colour changes,
// window-title writes and cursor movement, CR and LF forge rows of a listing, and UTF-8 encodes
// C1 controls (U+009B is a one-byte CSI for many terminals) and bidirectional overrides that make
// text read differently from what it is. Everything sbx prints to a terminal from such a source
// goes through printable().
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sbx {

// Length of the valid UTF-8 sequence at s[i] (1 for ASCII), or 0 when the bytes there are not one
// (overlong forms, surrogates and code points past U+10FFFF are invalid).
std::size_t utf8_len(std::string_view s, std::size_t i);

// Whether the valid UTF-8 sequence of `n` bytes at s[i] (utf8_len) is a C1 control or one of the
// format characters printable() escapes as "\uXXXX" (below); its code point in *cp when given.
bool format_control_at(std::string_view s, std::size_t i, std::size_t n, std::uint32_t* cp = nullptr);

// One line, safe for a terminal: printable ASCII and valid UTF-8 as they are; \n \r \t as "\n"
// "\r" "\t"; other C0 bytes, DEL and invalid UTF-8 bytes as "\xNN"; C1 controls and the invisible
// or direction-changing format characters (U+061C, U+200B-U+200F, U+2028-U+202E, U+2060-U+2069,
// U+FEFF) as "\uXXXX". A backslash stays as it is, so text that is already escaped (export's
// names, the manifest's) is not escaped twice; where the form must be unambiguous (shell_quote)
// backslashes are doubled first.
std::string printable(std::string_view s);

}  // namespace sbx
