#include <doctest/doctest.h>

#include "runtime/base/shell_quote.hpp"
#include "runtime/base/text_escape.hpp"

using sbx::printable;
using sbx::shell_quote;

TEST_CASE("printable: plain text and valid UTF-8 pass as they are") {
  CHECK(printable("") == "");
  CHECK(printable("hello world ~!@#$%^&*()") == "hello world ~!@#$%^&*()");
  CHECK(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  CHECK(printable("a\\x1b") == "a\\x1b");  // already escaped text is not escaped again
}

TEST_CASE("printable: control bytes, DEL and invalid UTF-8 are escaped") {
  CHECK(printable("\x1b[31mred") == "\\x1b[31mred");
  CHECK(printable("a\r\nb\tc") == "a\\r\\nb\\tc");
  CHECK(printable(std::string("nul\0x", 5)) == "nul\\x00x");
  CHECK(printable("\x07\x7f") == "\\x07\\x7f");
  CHECK(printable("\xff\xfe") == "\\xff\\xfe");
  CHECK(printable("\xc3") == "\\xc3");                 // truncated sequence
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");         // overlong '/'
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // a surrogate
  CHECK(printable("\xf5\x80\x80\x80") == "\\xf5\\x80\\x80\\x80");
}

TEST_CASE("printable: C1 controls and direction overrides are escaped") {
  CHECK(printable("\xc2\x9b" "31m") == "\\u009b31m");     // CSI
  CHECK(printable("\xe2\x80\xae" "txt") == "\\u202etxt");  // RIGHT-TO-LEFT OVERRIDE
  CHECK(printable("\xe2\x81\xa6") == "\\u2066");
  CHECK(printable("\xef\xbb\xbf") == "\\ufeff");
  CHECK(printable("\xc2\xa0") == "\xc2\xa0");  // NO-BREAK SPACE is printable
}

TEST_CASE("shell_quote: control characters use ANSI-C quoting, nothing raw") {
  CHECK(shell_quote("plain") == "plain");
  CHECK(shell_quote("two words") == "'two words'");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(shell_quote("a\\b") == "'a\\b'");
  CHECK(shell_quote("\x1b[2J") == "$'\\x1b[2J'");
  CHECK(shell_quote("x\ny'z\\") == "$'x\\ny\\'z\\\\'");
  CHECK(shell_quote("\xff") == "$'\\xff'");
}
