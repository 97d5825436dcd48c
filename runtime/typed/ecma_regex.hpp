#pragma once
// JSON Schema's "pattern" and "patternProperties" are ECMA-262 regular expressions. sbx matches
// them with RE2, whose automata run in time linear in the input: a backtracking engine
// (std::regex) takes exponential time on patterns like ^(a+)+$ and recurses once per character,
// so a hostile schema or document could hang or crash the supervisor. ECMA syntax is translated
// where the two differ; what RE2 cannot do (lookaround, backreferences) is refused when the
// schema is compiled, never silently ignored.
#include <memory>
#include <string>

#include "runtime/base/error.hpp"

namespace re2 {
class RE2;
}

namespace sbx {

// The ECMA-262 pattern rewritten in RE2 syntax, or an error saying what is not supported.
Result<std::string> ecma_to_re2(const std::string& pattern);

// A compiled pattern; search semantics (unanchored, like ECMA's RegExp.prototype.test).
class EcmaRegex {
 public:
  static Result<EcmaRegex> compile(const std::string& pattern);
  bool search(const std::string& text) const;

 private:
  std::shared_ptr<const re2::RE2> re_;
};

}  // namespace sbx
