#pragma once
// Bounds on JSON that sbx writes around what it read (json_io.hpp bounds what it reads): kept
// apart so that a writer's bound and a reader's bound of the same document derive from one place.
#include <cstddef>

namespace sbx {

// Levels a document sbx writes may wrap around a value it read within kMaxJsonDepth (an exec
// response around a program's result, an MCP message around that response): what dump_json
// accepts past kMaxJsonDepth, and what a reader of such a document may add to the inner bound.
inline constexpr std::size_t kMaxEnvelopeDepth = 16;
// What one byte of a string can become in JSON that dump_json writes: a control character is
// "\u00XX" (6), a byte of invalid UTF-8 "\\xHH" (5). Bounds the text of a document that carries
// program output.
inline constexpr std::size_t kMaxJsonEscapeFactor = 6;

}  // namespace sbx
