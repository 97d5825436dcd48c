#pragma once
// A process's private writable pages made its own ahead of time (MADV_POPULATE_WRITE, Linux
// 5.14+), for a process that waits before a latency-bound step: a pooled `sbx mcp-worker` whose
// sandbox's init is a fork of it (runtime/server/mcp_worker.cpp, await_pooled_job). It shares
// every page it has written with that init until it writes the page again: each first write is
// then a copy-on-write fault, ~5-15 us on the VMs this runs on, and a warm call's plan met ~25 of
// them (heap, stack, malloc's and the binary's data; bench/README.md, Spawn). Made while it idles,
// the copies cost the call nothing; the cost is memory: the populate also makes resident the
// pages of those mappings nothing had touched, ~0.75-1.3 MiB more per idle pooled sandbox, and
// is bounded (own_writable_pages) so that a large lazily touched mapping is never made resident.
#include <cstdint>
#include <string_view>
#include <vector>

namespace sbx {

struct PageRange {
  std::uintptr_t begin = 0, end = 0;
};

// The ranges of /proc/self/maps text `maps` to make one's own: every private writable mapping
// ("rw-p"), the stack only from `stack_pointer` less `stack_bytes` to its top (below it is
// untouched), none larger than `max_range_bytes`, in all at most `max_total_bytes` (each range in
// address order that still fits). Malformed lines are skipped.
std::vector<PageRange> own_page_ranges(std::string_view maps, std::uintptr_t stack_pointer, std::size_t stack_bytes,
                                       std::size_t max_range_bytes, std::size_t max_total_bytes);

// Reads /proc/self/maps and populates those ranges for writing: 64 KiB of stack, at most 4 MiB
// in ranges of at most 2 MiB. Best effort: a kernel without MADV_POPULATE_WRITE, or a range it
// refuses, is left to fault as before. Returns the bytes populated. Populating never changes a
// page's contents, so it is safe beside other threads too.
std::size_t own_writable_pages();

}  // namespace sbx
