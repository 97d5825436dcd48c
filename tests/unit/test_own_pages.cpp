#include <doctest/doctest.h>

#include "runtime/base/own_pages.hpp"

using namespace sbx;

TEST_CASE("own pages: private writable mappings, the stack from below its pointer, within the bounds") {
  const char* maps =
      "00400000-00401000 r--p 00000000 fe:00 1 /bin/sbx\n"
      "015f2000-015ff000 rw-p 011f2000 fe:00 1 /bin/sbx\n"
      "015ff000-01619000 rw-p 00000000 00:00 0 \n"
      "1feb7000-1ff02000 rw-p 00000000 00:00 0                                  [heap]\n"
      "7f0000000000-7f0000800000 rw-s 00000000 00:01 7 /memfd:shared (deleted)\n"
      "7f0001000000-7f0002000000 rw-p 00000000 00:00 0 \n"
      "7f0003000000-7f0003001000 ---p 00000000 00:00 0 \n"
      "7fff73121000-7fff73142000 rw-p 00000000 00:00 0                          [stack]\n"
      "garbage line\n"
      "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]";
  const std::uintptr_t sp = 0x7fff73140123;
  auto r = own_page_ranges(maps, sp, 0x4000, 8u << 20, 64u << 20);
  REQUIRE(r.size() == 4);  // data, bss, heap and the stack's top; not the shared, the 16 MiB or the guard
  CHECK(r[0].begin == 0x015f2000);
  CHECK(r[1].end == 0x01619000);
  CHECK(r[2].begin == 0x1feb7000);
  CHECK(r[2].end == 0x1ff02000);
  CHECK(r[3].begin == 0x7fff7313c000);  // 16 KiB below the pointer, page-aligned
  CHECK(r[3].end == 0x7fff73142000);
  // The total bound keeps the ranges that fit, in address order: the heap would pass it.
  auto few = own_page_ranges(maps, sp, 0x4000, 8u << 20, 0x30000);
  REQUIRE(few.size() == 3);
  CHECK(few[1].begin == 0x015ff000);
  CHECK(few[2].begin == 0x7fff7313c000);
  // A stack pointer outside the stack: no stack range.
  CHECK(own_page_ranges(maps, 0x1000, 0x4000, 8u << 20, 64u << 20).size() == 3);
  // Asked for more stack than the mapping has: the whole mapping.
  auto deep = own_page_ranges(maps, sp, 1u << 20, 8u << 20, 64u << 20);
  CHECK(deep.back().begin == 0x7fff73121000);
}

TEST_CASE("own pages: populating this process's pages leaves their contents as they were") {
  static char data[8192] = {1, 2, 3};
  std::size_t done = own_writable_pages();
  CHECK(data[0] == 1);
  CHECK(data[2] == 3);
  MESSAGE("populated " << done << " bytes");
}
