#include "runtime/base/own_pages.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <charconv>
#include <string>

#include "runtime/base/fsutil.hpp"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

namespace sbx {
namespace {

bool parse_hex(std::string_view s, std::uintptr_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

std::vector<PageRange> own_page_ranges(std::string_view maps, std::uintptr_t stack_pointer, std::size_t stack_bytes,
                                       std::size_t max_range_bytes, std::size_t max_total_bytes) {
  std::vector<PageRange> out;
  std::size_t total = 0;
  while (!maps.empty()) {
    std::size_t nl = maps.find('\n');
    std::string_view line = maps.substr(0, nl);
    maps = nl == std::string_view::npos ? std::string_view() : maps.substr(nl + 1);
    // "begin-end perms offset dev inode [path]"
    std::size_t dash = line.find('-'), sp = line.find(' ');
    if (dash == std::string_view::npos || sp == std::string_view::npos || dash > sp) continue;
    PageRange r;
    if (!parse_hex(line.substr(0, dash), r.begin) || !parse_hex(line.substr(dash + 1, sp - dash - 1), r.end) ||
        r.end <= r.begin)
      continue;
    if (line.substr(sp + 1, 4) != "rw-p") continue;
    if (line.ends_with("[stack]")) {
      if (stack_pointer < r.begin || stack_pointer >= r.end) continue;
      r.begin = stack_pointer - std::min<std::uintptr_t>(stack_bytes, stack_pointer - r.begin);
      r.begin &= ~std::uintptr_t{4095};
    }
    std::size_t size = r.end - r.begin;
    if (size > max_range_bytes || total + size > max_total_bytes) continue;
    total += size;
    out.push_back(r);
  }
  return out;
}

std::size_t own_writable_pages() {
  auto maps = read_file("/proc/self/maps");
  if (!maps) return 0;
  int here = 0;
  const auto sp = reinterpret_cast<std::uintptr_t>(&here);
  std::size_t done = 0;
  for (const PageRange& r : own_page_ranges(*maps, sp, 64u << 10, 2u << 20, 4u << 20))
    if (::madvise(reinterpret_cast<void*>(r.begin), r.end - r.begin, MADV_POPULATE_WRITE) == 0) done += r.end - r.begin;
  return done;
}

}  // namespace sbx
