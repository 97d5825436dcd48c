#include "runtime/base/proc_title.hpp"

#include <algorithm>
#include <cstring>

namespace sbx {

namespace {
// The area, found at the first call: the strings in it are overwritten then.
char* g_begin = nullptr;
std::size_t g_size = 0;
}  // namespace

void set_proc_title(int argc, char** argv, const std::string& title) {
  if (g_begin == nullptr) {
    if (argc < 1 || argv[0] == nullptr) return;
    // The kernel lays the strings out back to back; the area ends where that stops being true.
    char* begin = argv[0];
    char* end = begin + std::strlen(begin) + 1;
    for (int i = 1; i < argc && argv[i] == end; ++i) end += std::strlen(argv[i]) + 1;
    g_begin = begin;
    g_size = static_cast<std::size_t>(end - begin);
  }
  char* begin = g_begin;
  std::size_t size = g_size;
  if (size < 2) return;
  std::size_t n = std::min(title.size(), size - 2);  // room for the NUL and the last byte
  std::memset(begin, 0, size);
  std::memcpy(begin, title.data(), n);
  begin[size - 1] = ' ';
}

}  // namespace sbx
