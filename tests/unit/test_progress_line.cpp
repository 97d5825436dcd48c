// The progress line of `sbx image import` and `sbx image verify --full` (runtime/base/progress_line.hpp):
// silent for a second, then at most one line a second; in place on a terminal, lines elsewhere.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/base/progress_line.hpp"

namespace {

// Captures what a ProgressLine writes, with a clock the test moves.
struct Capture {
  char* buf = nullptr;
  std::size_t len = 0;
  std::FILE* f = ::open_memstream(&buf, &len);
  std::int64_t now = 5000;
  ~Capture() {
    if (f) std::fclose(f);
    std::free(buf);
  }
  std::string text() {
    std::fflush(f);
    return std::string(buf, len);
  }
};

}  // namespace

TEST_CASE("progress line: silent during the first second, then one line a second, each its own line off a tty") {
  Capture c;
  REQUIRE(c.f);
  {
    sbx::ProgressLine line("verifying busybox", c.f, false, [&] { return c.now; });
    for (int i = 0; i < 100; ++i) {  // 990 ms of updates: nothing
      line.update("hashing", i, i * 1024);
      c.now += 10;
    }
    CHECK(c.text().empty());
    c.now += 10;  // 1000 ms since the start
    line.update("hashing", 100, 3 << 20);
    CHECK(c.text() == "verifying busybox: hashing, 100 entries, 3.0 MiB\n");
    c.now += 999;
    line.update("hashing", 101, 4 << 20);  // under a second since the last line
    CHECK(line.printed() == 1);
    c.now += 1;
    line.update("hashing", 102, 5LL << 30);
    CHECK(line.printed() == 2);
  }
  CHECK(c.text() == "verifying busybox: hashing, 100 entries, 3.0 MiB\nverifying busybox: hashing, 102 entries, 5.0 GiB\n");
}

TEST_CASE("progress line: on a terminal the line is rewritten in place and ended once") {
  Capture c;
  REQUIRE(c.f);
  sbx::ProgressLine line("importing /src", c.f, true, [&] { return c.now; });
  c.now += 1500;
  line.update("copying", 7, 512);
  c.now += 1000;
  line.update("hashing", 9, 2048);
  line.finish();
  line.finish();
  CHECK(c.text() == "\r\033[Kimporting /src: copying, 7 entries, 512 B\r\033[Kimporting /src: hashing, 9 entries, 2.0 KiB\n");
}

TEST_CASE("progress line: a quick operation on a terminal leaves nothing, not even a newline") {
  Capture c;
  REQUIRE(c.f);
  {
    sbx::ProgressLine line("importing /src", c.f, true, [&] { return c.now; });
    c.now += 999;
    line.update("copying", 1, 1);
  }
  CHECK(c.text().empty());
}
