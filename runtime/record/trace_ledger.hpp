#pragma once
// The trace ledger: every run's record, appended as one line of <state>/traces/ledger.jsonl and
// chained to the one before it by hash, so that an edited, deleted, inserted or reordered record
// is found by `sbx trace verify`.
//
// One line (JSON; the chain envelope after the record, so that an append finds the head in the
// last few hundred bytes of the file however large the last record is):
//
//   {"record":REC,"seq":N,"run_id":"ID","prev":"H","hash":"H"}\n
//
// REC is the record as compact JSON, stored byte for byte; seq counts from 1; prev is the hash of
// the line before (64 zeros for seq 1); hash = sha256("sbx.ledger/v1\n" N "\n" ID "\n" prev "\n"
// REC), over the exact bytes on the line, so that no re-serialisation can change what was hashed.
// Appends hold an flock on the ledger, write the line with one write(2) to an O_APPEND descriptor
// and fdatasync once. An append killed midway leaves a line without its '\n' (a torn tail):
// `verify` names it, and the next append cuts it off (it was never acknowledged: its sbx died
// before the fdatasync returned and released no result) and says so in its own record.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/base/error.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/paths.hpp"

namespace sbx {

inline constexpr const char* kLedgerName = "ledger.jsonl";
inline constexpr const char* kLedgerDomain = "sbx.ledger/v1";
inline constexpr std::size_t kMaxLedgerRunId = 128;

std::string ledger_path(const Dirs& dirs);

// The envelope of one line, and where its record lies in it.
struct LedgerEntry {
  std::uint64_t seq = 0;
  std::string run_id, prev, hash;
  std::string sig;          // base64 Ed25519 signature of `hash` (ledger_key.hpp), or ""
  std::string_view record;  // the raw record bytes (a view into the line)
};

// The hash a line with these parts must carry (see above).
std::string ledger_hash(std::uint64_t seq, std::string_view run_id, std::string_view prev, std::string_view record);

// The line (without its '\n') that holds these parts, as ledger_append writes it: the trace
// database's rows are put back into this form to be verified as a file's lines are.
std::string ledger_line(const LedgerEntry& e);

// Splits one line (without its '\n') into envelope and record; strict about the envelope's form.
Result<LedgerEntry> parse_ledger_line(std::string_view line);

// A run id that may name a ledger line: what make_run_id makes, or a plain file name of the
// previous store (letters, digits, '.', '_', ':', '-'; not starting with '.'; at most 128).
bool ledger_run_id_ok(std::string_view id);

struct AppendInfo {
  std::uint64_t seq = 0;
  std::string hash;
  std::uint64_t torn_bytes = 0;  // cut off the tail before this append (0: none)
};

// How much of the ledger is on disk, and which file that is. ledger_append releases the lock
// before its own sync (group commit), so a reader can see a line whose sync is still under way;
// one that hands lines on (the trace database's shipper) sends only those that end within `size`
// of this file (scan_ledger's `same_file`), which a crash cannot take back. Read under the
// ledger's lock (no append mid-write) up to the last whole line (a torn tail, which the next
// append cuts, is not counted), then the file and its directory synced. size 0: no ledger yet.
// (A sync that failed in an appender and was reported to it is not reported again here: the
// kernel tells each failure once. Its caller withheld that run's result.)
struct DurableLedger {
  std::uint64_t size = 0;
  std::uint64_t dev = 0, ino = 0;
};
Result<DurableLedger> ledger_durable_size(const Dirs& dirs);

// Appends `record` (compact JSON of one object, no '\n') for `run_id`. Creates the store (0700)
// and the ledger (0600) when missing. A torn tail is cut and reported in the appended record as
// "ledger_repair"; a last line that is complete but not a ledger line is refused (the ledger is
// broken, and an append must not bury that).
// With a signer, the line carries "sig": the Ed25519 signature of its hash (ledger_key.hpp).
class LedgerSigner;
class LedgerVerifier;
Result<AppendInfo> ledger_append(const Dirs& dirs, const std::string& run_id, std::string_view record,
                                 const LedgerSigner* signer = nullptr);

// A pruned ledger's first line (`sbx trace prune`, ledger_prune.hpp): the envelope of the last
// record pruned, without its record, after the time it was pruned:
//
//   {"pruned":"TIME","seq":N,"run_id":"ID","prev":"H","hash":"H"[,"sig":"S"]}\n
//
// The first kept line chains to that hash exactly as it did to the pruned line, so the chain from
// there on is verified as before, and verify reports "pruned through seq N" where it would
// otherwise find seq N+1 where 1 was expected. Only the first line may be one (scan_ledger skips
// it there and hands it to whoever asks); anywhere else it is not a ledger line, a break. Appends
// chain to it when it is the only line (its envelope is the ledger's head).
struct PruneAnchorLine {
  LedgerEntry entry;  // record empty
  std::string pruned_at;
};
bool is_prune_anchor(std::string_view line);
Result<PruneAnchorLine> parse_prune_anchor(std::string_view line);
// The line (with its '\n') that stands for every line up to `last_pruned`.
std::string prune_anchor_line(const LedgerEntry& last_pruned, const std::string& pruned_at);

// Runs `fn` with the ledger open read-write (not appending) and locked as appends lock it (the
// same flock, the same bounded wait), the descriptor being the file the path names once locked:
// for a rewrite that replaces the file by rename (ledger_prune.cpp). Appends check the same after
// taking the lock, so none lands in a file that was replaced while it waited. A missing ledger:
// fn is not called.
Status with_ledger_locked(const Dirs& dirs, const std::function<Status(int fd)>& fn);

// The longest line a reader takes in: a record (bounded by kMaxTraceBytes, json_io.hpp) and its
// envelope. A longer line is never read into memory: readers stream past it and report it.
inline constexpr std::size_t kMaxLedgerLine = kMaxTraceBytes + 4096;
// The last bytes of a line that a reader keeps of a line it skips: the envelope is in them.
inline constexpr std::size_t kLedgerTailRead = 4096;

// Every complete line in file order; `fn` returns false to stop. `offset` is the line's start in
// the file. An I/O error ends the scan with an error; a torn tail is reported through `torn` (its
// byte count) and not passed to fn.
struct LedgerLine {
  std::uint64_t line_no = 0;
  std::uint64_t offset = 0;
  std::string_view text;  // without '\n'
};
// A complete line longer than max_ledger_line(): read past in bounded chunks, never whole, so
// that one bloated line leaves every other record readable. `tail` is its last bytes (at most
// kLedgerTailRead), where its envelope lies (parse_ledger_tail).
struct OversizeLine {
  std::uint64_t line_no = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;  // without '\n'
  std::string_view tail;
};
using OversizeFn = std::function<bool(const OversizeLine&)>;
// "line N at byte B is S bytes, over the M-byte bound of a ledger line" (for warnings and rows).
std::string describe_oversize(const OversizeLine& l);
// `from` (a line's start offset) and `first_line_no` let a reader resume where it stopped.
// `oversize` is told of each line over the bound (returns false to stop); without it the scan
// warns on stderr for each (naming its offset and size) and counts them at the end.
// `max_line` is for tests (0: kMaxLedgerLine).
// A prune anchor as the first line (see above) is never passed to fn: it goes to `anchor` when
// given. With `same_file`, a ledger that is not that file (a prune replaced it since) is not read.
Status scan_ledger(const Dirs& dirs, const std::function<bool(const LedgerLine&)>& fn, std::uint64_t* torn = nullptr,
                   std::uint64_t from = 0, std::uint64_t first_line_no = 1, const OversizeFn& oversize = nullptr,
                   std::size_t max_line = 0, std::optional<PruneAnchorLine>* anchor = nullptr,
                   const DurableLedger* same_file = nullptr);

// The envelope of a line from its last bytes (an OversizeLine's tail); `record` is left empty.
Result<LedgerEntry> parse_ledger_tail(std::string_view tail);

// A run's ledger line as verify_ledger checked it (its `find_run`): what a reader that acts on the
// record (replay) uses, so that the line verified and the record acted on are one read.
struct LedgerRunLine {
  std::uint64_t seq = 0;
  std::string hash, sig, record;
};

// Reads the line starting at `offset` (as scan_ledger reported it). A line over the bound is an
// error that gives its size (streamed past to measure it, not read).
Result<std::string> read_ledger_line(const Dirs& dirs, std::uint64_t offset);

struct LedgerVerifyReport {
  bool intact = true;
  std::uint64_t records = 0;
  std::uint64_t head_seq = 0;
  std::string head_hash, head_run_id;
  std::string problem;  // the first break, in words, when not intact
  // With a verifier: lines whose signature verified, and the unsigned lines before the first signed
  // one (appended before `sbx key init`; the first signed line's chain link covers their hashes).
  std::uint64_t signed_records = 0, unsigned_before_signing = 0;
  // Lines over the size bound: each breaks the chain (its record cannot be checked), but the walk
  // goes on after it from its envelope, so that what follows is still verified.
  std::uint64_t oversize_lines = 0;
  // Not intact only for such lines, each linked into the chain by its envelope (seq and prev as
  // expected), every other line checked: the records around them are the ones that were written,
  // so a reader that needs an intact chain (replay) may still trust them.
  bool broken_only_by_oversize() const { return !intact && oversize_lines > 0 && !other_break; }
  bool other_break = false;
  // A pruned ledger (its first line a prune anchor): the seq and hash of the last pruned record;
  // the walk began after it (0: nothing was pruned).
  std::uint64_t pruned_through = 0;
  std::string pruned_hash, pruned_at;
  // With verify_ledger's `find_run`: the lines that name that run (checked ones and lines over the
  // bound), and the first checked one. A reader must refuse more than one: which is meant is not
  // for it to guess.
  std::uint64_t run_lines = 0;
  std::optional<LedgerRunLine> run_line;
};
// A head recorded elsewhere (`sbx trace head`): the chain must reach seq with this hash.
struct LedgerAnchor {
  std::uint64_t seq = 0;
  std::string hash;
};
// Walks the chain from the first line: hashes, sequence, links, record ids; with an anchor, also
// that the line of the anchor's seq carries its hash (a chain rewritten from some record on, hashes
// recomputed, or cut at its end, is found only this way or by signatures).
// With a verifier, every line from the first signed one on must carry a signature of its hash that
// the public key accepts; unsigned lines before it are counted (unsigned_before_signing), and a
// ledger with no signed line at all is broken.
// With `find_run`, the line of that run is kept as checked (LedgerVerifyReport::run_line).
Result<LedgerVerifyReport> verify_ledger(const Dirs& dirs, const std::optional<LedgerAnchor>& anchor = std::nullopt,
                                         const LedgerVerifier* verifier = nullptr, std::string_view find_run = {});

// Where verify_ledger_lines reads a chain from: it calls `line` for each line in order and
// `oversize` for each line over the bound (each returns false to stop), reports a torn tail's
// bytes through `torn` and a prune anchor (or, for the trace database, where a node's shipped
// records begin) through `start` before the first line. scan_ledger is one; the trace database's
// rows are another (trace_mirror.cpp).
struct LedgerSourceSink {
  std::function<bool(const LedgerLine&)> line;
  OversizeFn oversize;
  std::uint64_t* torn = nullptr;
  std::optional<PruneAnchorLine>* start = nullptr;
};
using LedgerSource = std::function<Status(const LedgerSourceSink&)>;
// verify_ledger over any source: the same walk, checks and words.
Result<LedgerVerifyReport> verify_ledger_lines(const LedgerSource& source, const std::optional<LedgerAnchor>& anchor,
                                               const LedgerVerifier* verifier, std::string_view find_run = {});

struct LedgerHead {
  std::uint64_t seq = 0;  // 0: the ledger is empty or missing
  std::string hash, run_id;
  std::uint64_t torn_bytes = 0;
};
// The last complete line's envelope, read from the end of the file (a torn tail is skipped and
// counted).
Result<LedgerHead> ledger_head(const Dirs& dirs);

}  // namespace sbx
