// The trace store's reading of its ledger (runtime/record/trace_ledger.hpp, runtime/record/trace_store.hpp):
// the input is the whole of <state>/traces/ledger.jsonl — anyone with write access to the state
// directory can edit it, and a torn append leaves half a line — read by every reader sbx has:
// scan_ledger with parse_ledger_line on each line (the envelope parser), and with a tiny line
// bound (the skipping of lines over it, parse_ledger_tail on what it keeps), verify_ledger (the
// chain), ledger_head (read from the end), list_traces and load_trace (records parsed and
// summarised for `trace ls` / `trace show`).
// Checked besides "no crash": an envelope that parses has its record inside its line and a
// record that begins with '{'; a chain verify calls intact has one record per complete line and
// a head that ledger_head agrees with.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/base/fsutil.hpp"
#include "runtime/record/trace_ledger.hpp"
#include "runtime/record/trace_store.hpp"

namespace {

sbx::Dirs g_dirs;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  char t[] = "/tmp/sbx-fuzz-ledger-XXXXXX";
  if (!::mkdtemp(t)) std::abort();
  g_dirs.state = t;
  g_dirs.traces = g_dirs.state + "/traces";
  g_dirs.data = g_dirs.state + "/data";
  g_dirs.images = g_dirs.data + "/images";
  ::mkdir(g_dirs.traces.c_str(), 0700);
  std::atexit([] { (void)sbx::remove_tree(g_dirs.state); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  {
    sbx::UniqueFd fd(::open(sbx::ledger_path(g_dirs).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd.ok() || ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) std::abort();
  }
  // The query index (trace_index.hpp) beside the ledger describes the previous input: dropped, so
  // that list_traces builds it again from this one.
  for (auto f : {"/index.sqlite", "/index.sqlite-wal", "/index.sqlite-shm", "/index.sqlite-journal"})
    ::unlink((g_dirs.traces + f).c_str());
  std::uint64_t lines = 0, torn = 0;
  auto scanned = sbx::scan_ledger(
      g_dirs,
      [&](const sbx::LedgerLine& l) {
        ++lines;
        auto e = sbx::parse_ledger_line(l.text);
        if (e) {
          if (e->record.data() < l.text.data() || e->record.data() + e->record.size() > l.text.data() + l.text.size())
            std::abort();
          (void)sbx::ledger_hash(e->seq, e->run_id, e->prev, e->record);
        } else {
          (void)e.error().describe();
        }
        return true;
      },
      &torn);
  // Again with a tiny line bound, so that the skipping path (lines streamed past, keeping only
  // their last bytes) sees every input: each line is either passed on or skipped, never lost.
  std::uint64_t short_lines = 0, skipped = 0, torn_small = 0;
  auto small = sbx::scan_ledger(
      g_dirs, [&](const sbx::LedgerLine& l) { return ++short_lines, l.text.size() <= 64 || (std::abort(), false); },
      &torn_small, 0, 1,
      [&](const sbx::OversizeLine& l) {
        ++skipped;
        if (l.size <= 64 || l.tail.size() > sbx::kLedgerTailRead || l.tail.size() > l.size) std::abort();
        (void)sbx::parse_ledger_tail(l.tail);
        return true;
      },
      64);
  if (scanned && small && (short_lines + skipped != lines || torn_small != torn)) std::abort();
  auto verified = sbx::verify_ledger(g_dirs);
  auto head = sbx::ledger_head(g_dirs);
  if (scanned && verified && verified->intact) {
    if (verified->records != lines) std::abort();
    if (head && (head->seq != verified->head_seq || head->hash != verified->head_hash)) std::abort();
  }
  if (auto l = sbx::list_traces(g_dirs, 4)) {
    for (auto& s : *l) (void)s.command.size();
  }
  if (auto j = sbx::load_trace(g_dirs, "last")) (void)j->dump();
  return 0;
}
