#include "runtime/record/trace_ledger.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "runtime/base/fsutil.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/record/ledger_key.hpp"
#include "runtime/base/sha256.hpp"

namespace sbx {
namespace {

constexpr const char* kStage = "trace";
constexpr std::string_view kHead = "{\"record\":";
constexpr std::string_view kSeqKey = ",\"seq\":";
constexpr std::string_view kPrunedHead = "{\"pruned\":\"";
const std::string kZeroHash(64, '0');
// The envelope after the record: seq (20 digits), a run id, two hashes, a signature: well under 1 KiB.
constexpr std::size_t kTailRead = kLedgerTailRead;
// How long an append waits for another sbx's append: those hold the lock for the read of the last
// line and one write (the first line's append also for its syncs), well under a second;
// a lock held for seconds is a stuck or hostile holder, and the run must not hang behind it.
constexpr long kLockWaitMs = 10'000;

// A cursor over the envelope: each step consumes an exact literal or a token of a known form.
struct Cursor {
  std::string_view s;
  bool lit(std::string_view l) {
    if (s.substr(0, l.size()) != l) return false;
    s.remove_prefix(l.size());
    return true;
  }
  // Characters up to the next '"' (the envelope's strings never hold quotes or escapes).
  std::optional<std::string_view> str() {
    auto q = s.find('"');
    if (q == std::string_view::npos) return std::nullopt;
    auto v = s.substr(0, q);
    s.remove_prefix(q + 1);
    return v;
  }
};

Error envelope_error(const std::string& what) { return make_error(kStage, "not a ledger line: " + what); }

// `env` begins at ",\"seq\":" and runs to the line's end.
Status parse_envelope(std::string_view env, LedgerEntry& e) {
  Cursor c{env};
  if (!c.lit(kSeqKey)) return envelope_error("no \"seq\"");
  std::size_t digits = 0;
  while (digits < c.s.size() && c.s[digits] >= '0' && c.s[digits] <= '9') ++digits;
  if (digits == 0 || digits > 19 || (digits > 1 && c.s[0] == '0'))
    return envelope_error("\"seq\" is not a sequence number");
  e.seq = std::stoull(std::string(c.s.substr(0, digits)));
  c.s.remove_prefix(digits);
  if (!c.lit(",\"run_id\":\"")) return envelope_error("no \"run_id\" after \"seq\"");
  auto id = c.str();
  if (!id || !ledger_run_id_ok(*id)) return envelope_error("\"run_id\" is not a run id");
  e.run_id = *id;
  if (!c.lit(",\"prev\":\"")) return envelope_error("no \"prev\" after \"run_id\"");
  auto prev = c.str();
  if (!prev || !is_sha256_hex(*prev)) return envelope_error("\"prev\" is not a sha256");
  e.prev = *prev;
  if (!c.lit(",\"hash\":\"")) return envelope_error("no \"hash\" after \"prev\"");
  auto hash = c.str();
  if (!hash || !is_sha256_hex(*hash)) return envelope_error("\"hash\" is not a sha256");
  e.hash = *hash;
  if (c.lit(",\"sig\":\"")) {
    auto sig = c.str();
    if (!sig || sig->empty() || sig->size() > 256 ||
        sig->find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") !=
            std::string_view::npos)
      return envelope_error("\"sig\" is not base64");
    e.sig = *sig;
  }
  if (c.s != "}") return envelope_error("unexpected text after the envelope");
  return {};
}

// The offset just past the last '\n' before `end` (0 when there is none), reading backwards.
Result<std::uint64_t> after_last_newline(int fd, std::uint64_t end) {
  std::string buf(64 * 1024, '\0');
  while (end > 0) {
    std::uint64_t start = end > buf.size() ? end - buf.size() : 0;
    ssize_t n = ::pread(fd, buf.data(), end - start, static_cast<off_t>(start));
    if (n != static_cast<ssize_t>(end - start)) return sys_error(kStage, "cannot read the trace ledger");
    std::string_view chunk(buf.data(), static_cast<std::size_t>(n));
    if (auto nl = chunk.rfind('\n'); nl != std::string_view::npos) return start + nl + 1;
    end = start;
  }
  return std::uint64_t{0};
}

Result<std::string> read_tail(int fd, std::uint64_t size) {
  std::uint64_t start = size > kTailRead ? size - kTailRead : 0;
  std::string buf(size - start, '\0');
  ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(start));
  if (n != static_cast<ssize_t>(buf.size())) return sys_error(kStage, "cannot read the trace ledger's tail");
  return buf;
}

// The envelope of the last line, from the file's tail (which ends with '\n').
Result<LedgerEntry> last_envelope(const std::string& tail) {
  std::string_view t(tail);
  t.remove_suffix(1);  // the '\n'
  auto at = t.rfind(kSeqKey);
  if (at == std::string_view::npos || t.find('\n', at) != std::string_view::npos)
    return make_error(kStage, "the trace ledger's last line is not a ledger line; run 'sbx trace verify'");
  LedgerEntry e;
  if (auto st = parse_envelope(t.substr(at), e); !st)
    return make_error(kStage,
                      "the trace ledger's last line is broken (" + st.error().message + "); run 'sbx trace verify'");
  return e;
}

class LedgerLock {
 public:
  static Result<LedgerLock> acquire(int fd) {
    int e = flock_waiting(fd, LOCK_EX, kLockWaitMs);
    if (e == 0) return LedgerLock(fd);
    if (e != EWOULDBLOCK) return make_error(kStage, "cannot lock the trace ledger", e);
    return make_error(kStage,
                      "the trace ledger is locked by another process for over " + std::to_string(kLockWaitMs / 1000) +
                          " s (a stuck sbx?)",
                      EWOULDBLOCK);
  }
  LedgerLock(LedgerLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  LedgerLock(const LedgerLock&) = delete;
  LedgerLock& operator=(const LedgerLock&) = delete;
  LedgerLock& operator=(LedgerLock&&) = delete;
  ~LedgerLock() {
    if (fd_ >= 0) ::flock(fd_, LOCK_UN);
  }

 private:
  explicit LedgerLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Opens the ledger for appending, creating it (0600) when missing; `created` says whether this
// call made it, so that the directory entry is synced once.
Result<UniqueFd> open_for_append(const std::string& path, bool& created) {
  constexpr int kFlags = O_RDWR | O_APPEND | O_CLOEXEC | O_NOFOLLOW;
  for (int attempt = 0; attempt < 3; ++attempt) {
    int fd = ::open(path.c_str(), kFlags);
    if (fd >= 0) return UniqueFd(fd);
    if (errno != ENOENT) return sys_error(kStage, "cannot open the trace ledger " + path);
    fd = ::open(path.c_str(), kFlags | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) {
      created = true;
      return UniqueFd(fd);
    }
    if (errno != EEXIST) return sys_error(kStage, "cannot create the trace ledger " + path);
  }
  return make_error(kStage, "cannot open the trace ledger " + path + ": it keeps appearing and vanishing");
}

// The ledger open and locked, checked after the lock to still be the file the path names: a
// prune replaces the ledger by rename (ledger_prune.cpp) while holding the lock, and whoever
// waited on the old file's lock would otherwise write to a file no one reads any more.
struct LockedLedger {
  UniqueFd fd;  // declared first: the lock is released before the descriptor is closed
  std::optional<LedgerLock> lock;
};
Result<LockedLedger> open_locked(const std::string& path, bool& created,
                                 const std::function<Result<UniqueFd>(bool&)>& open) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    LockedLedger l;
    auto fd = open(created);
    if (!fd) return fd.error();
    l.fd = std::move(*fd);
    auto lock = LedgerLock::acquire(l.fd.get());
    if (!lock) return lock.error();
    l.lock.emplace(std::move(*lock));
    struct stat held, named;
    if (::fstat(l.fd.get(), &held) != 0) return sys_error(kStage, "cannot stat the trace ledger");
    if (::stat(path.c_str(), &named) == 0 && named.st_ino == held.st_ino && named.st_dev == held.st_dev) return l;
  }
  return make_error(kStage, "the trace ledger " + path + " keeps being replaced while sbx waits for its lock");
}

// The record with "ledger_repair" added as its first member (REC is a JSON object).
std::string with_repair_note(std::string_view rec, std::uint64_t torn, std::uint64_t at) {
  std::string note = "\"ledger_repair\":{\"torn_bytes\":" + std::to_string(torn) +
                     ",\"at_offset\":" + std::to_string(at) +
                     ",\"reason\":\"an interrupted append left an incomplete last line; it was cut off\"}";
  std::string out = "{" + note;
  std::string_view rest = rec.substr(1);
  if (rest.find_first_not_of(" \t") != std::string_view::npos && rest.substr(rest.find_first_not_of(" \t"), 1) != "}")
    out += ",";
  out += rest;
  return out;
}

// Cuts a torn tail (a line without its '\n') off the locked ledger; returns the new size.
Result<std::uint64_t> cut_torn_tail(int fd, std::uint64_t size, AppendInfo& info) {
  auto cut = after_last_newline(fd, size);
  if (!cut) return cut.error();
  if (::ftruncate(fd, static_cast<off_t>(*cut)) != 0)
    return sys_error(kStage, "cannot cut the torn tail of the trace ledger");
  info.torn_bytes = size - *cut;
  return *cut;
}

}  // namespace

std::string ledger_path(const Dirs& dirs) { return dirs.traces + "/" + kLedgerName; }

bool ledger_run_id_ok(std::string_view id) {
  if (id.empty() || id.size() > kMaxLedgerRunId || id.front() == '.') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' || c == '_' ||
           c == ':' || c == '-';
  });
}

std::string ledger_hash(std::uint64_t seq, std::string_view run_id, std::string_view prev, std::string_view record) {
  std::string head = kLedgerDomain;
  head.push_back('\n');
  head.append(std::to_string(seq)).push_back('\n');
  head.append(run_id).push_back('\n');
  head.append(prev).push_back('\n');
  Sha256 h;
  h.update(head);
  h.update(record);
  return h.final_hex();
}

Result<LedgerEntry> parse_ledger_line(std::string_view line) {
  if (line.substr(0, kHead.size()) != kHead) return envelope_error("it does not begin with {\"record\":");
  auto at = line.rfind(kSeqKey);
  if (at == std::string_view::npos || at < kHead.size()) return envelope_error("no \"seq\" after the record");
  LedgerEntry e;
  SBX_TRY(parse_envelope(line.substr(at), e));
  e.record = line.substr(kHead.size(), at - kHead.size());
  return e;
}

Result<AppendInfo> ledger_append(const Dirs& dirs, const std::string& run_id, std::string_view record,
                                 const LedgerSigner* signer) {
  if (!ledger_run_id_ok(run_id)) return make_error(kStage, "run id '" + run_id + "' cannot name a ledger record");
  if (record.empty() || record.front() != '{' || record.find('\n') != std::string_view::npos)
    return make_error(kStage, "a ledger record must be one line of JSON object");
  if (auto st = ensure_dir(dirs.traces, 0700); !st)
    return make_error(kStage, "cannot create trace store: " + st.error().message, st.error().err);
  const std::string path = ledger_path(dirs);
  bool created = false;
  auto locked = open_locked(path, created, [&path](bool& made) { return open_for_append(path, made); });
  if (!locked) return locked.error();
  UniqueFd* fd = &locked->fd;
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return sys_error(kStage, "cannot stat the trace ledger");
  if (!S_ISREG(st.st_mode)) return make_error(kStage, "the trace ledger " + path + " is not a regular file");
  AppendInfo info;
  std::uint64_t size = static_cast<std::uint64_t>(st.st_size);
  auto tail = read_tail(fd->get(), size);
  if (!tail) return tail.error();
  if (size > 0 && tail->back() != '\n') {
    auto cut = cut_torn_tail(fd->get(), size, info);
    if (!cut) return cut.error();
    size = *cut;
    tail = read_tail(fd->get(), size);
    if (!tail) return tail.error();
  }
  std::uint64_t seq = 1;
  std::string prev = kZeroHash;
  if (size > 0) {
    auto last = last_envelope(*tail);
    if (!last) return last.error();
    seq = last->seq + 1;
    prev = last->hash;
  }
  std::string rec = info.torn_bytes ? with_repair_note(record, info.torn_bytes, size) : std::string(record);
  // Every reader refuses a record over kMaxTraceBytes (json_io.hpp; kMaxLedgerLine adds the
  // envelope): a longer one appended would be a line no one can read, that breaks the chain there.
  // Writers bound their records below it (kMaxRecordBytes, trace.hpp, leaves room for the repair note).
  if (rec.size() > kMaxTraceBytes)
    return make_error(kStage, "record of run " + run_id + " is " + std::to_string(rec.size()) + " bytes, over the " +
                                  std::to_string(kMaxTraceBytes) +
                                  "-byte bound every ledger reader takes; it is not appended");
  info.seq = seq;
  info.hash = ledger_hash(seq, run_id, prev, rec);
  LedgerEntry entry{seq, run_id, prev, info.hash, signer ? signer->sign(info.hash) : "", rec};
  std::string line = ledger_line(entry) + "\n";
  if (auto w = write_all(fd->get(), line, "the trace ledger " + path); !w) {
    // A short write leaves a torn line; cut it now rather than leave it to the next append.
    if (::ftruncate(fd->get(), static_cast<off_t>(size)) != 0) { /* the next append cuts it */
    }
    return w.error();
  }
  // Group commit: the line is whole and the next link of the chain can be made from it, so the
  // lock goes before the sync. Appenders that arrive meanwhile write their lines and sync too,
  // and the file system serves syncs that overlap with one journal commit, where holding the lock
  // made each wait for the one before. Each caller still returns only once its own line is on
  // disk (a sync covers all that was written to the file before it). A failed sync is reported to
  // its caller, and later lines may already follow it, as when an append came after a failure.
  // The first line's append (the file was empty when it took the lock, whoever created it) keeps
  // the lock until the directory holds the file's name durably too, so that no append after it
  // returns before the name would survive a crash.
  const bool first_line = created || size == 0;
  if (!first_line) locked->lock.reset();
  if (::fdatasync(fd->get()) != 0) return sys_error(kStage, "cannot sync the trace ledger " + path);
  if (first_line) SBX_TRY(sync_dir(dirs.traces));
  return info;
}

Result<DurableLedger> ledger_durable_size(const Dirs& dirs) {
  const std::string path = ledger_path(dirs);
  bool created = false;
  // O_NONBLOCK: a FIFO in its place must not hold the shipper (it is refused below).
  auto locked = open_locked(path, created, [&path](bool&) -> Result<UniqueFd> {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    if (!fd.ok()) return sys_error(kStage, "cannot open the trace ledger " + path);
    return fd;
  });
  if (!locked) {
    if (locked.error().err == ENOENT) return DurableLedger{};
    return locked.error();
  }
  struct stat st;
  if (::fstat(locked->fd.get(), &st) != 0) return sys_error(kStage, "cannot stat the trace ledger " + path);
  if (!S_ISREG(st.st_mode)) return make_error(kStage, "the trace ledger " + path + " is not a regular file");
  // Under the lock no append is writing, and no later one cuts below the last whole line.
  auto whole = after_last_newline(locked->fd.get(), static_cast<std::uint64_t>(st.st_size));
  if (!whole) return whole.error();
  locked->lock.reset();
  // Every byte below `whole` was written before this sync, which covers it.
  if (::fdatasync(locked->fd.get()) != 0) return sys_error(kStage, "cannot sync the trace ledger " + path);
  SBX_TRY(sync_dir(dirs.traces));
  return DurableLedger{*whole, static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
}

std::string ledger_line(const LedgerEntry& e) {
  std::string line;
  line.reserve(e.record.size() + 256);
  line.append(kHead).append(e.record).append(kSeqKey).append(std::to_string(e.seq));
  line.append(",\"run_id\":\"").append(e.run_id).append("\",\"prev\":\"").append(e.prev);
  line.append("\",\"hash\":\"").append(e.hash).append("\"");
  if (!e.sig.empty()) line.append(",\"sig\":\"").append(e.sig).append("\"");
  return line.append("}");
}

bool is_prune_anchor(std::string_view line) { return line.starts_with(kPrunedHead); }

Result<PruneAnchorLine> parse_prune_anchor(std::string_view line) {
  Cursor c{line};
  if (!c.lit(kPrunedHead)) return envelope_error("not a prune anchor");
  PruneAnchorLine a;
  auto at = c.str();
  if (!at || at->empty() || at->size() > 64 || at->find_first_of("\\") != std::string_view::npos)
    return envelope_error("the prune anchor's time is not a time");
  a.pruned_at = *at;
  SBX_TRY(parse_envelope(c.s, a.entry));
  return a;
}

std::string prune_anchor_line(const LedgerEntry& e, const std::string& pruned_at) {
  std::string line(kPrunedHead);
  line.append(pruned_at).append("\"").append(kSeqKey).append(std::to_string(e.seq));
  line.append(",\"run_id\":\"").append(e.run_id).append("\",\"prev\":\"").append(e.prev);
  line.append("\",\"hash\":\"").append(e.hash).append("\"");
  if (!e.sig.empty()) line.append(",\"sig\":\"").append(e.sig).append("\"");
  return line.append("}\n");
}

Status with_ledger_locked(const Dirs& dirs, const std::function<Status(int fd)>& fn) {
  const std::string path = ledger_path(dirs);
  bool missing = false;
  auto locked = open_locked(path, missing, [&path](bool& gone) -> Result<UniqueFd> {
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
      gone = errno == ENOENT;
      return sys_error(kStage, "cannot open the trace ledger " + path);
    }
    return UniqueFd(fd);
  });
  if (missing) return {};
  if (!locked) return locked.error();
  return fn(locked->fd.get());
}

std::string describe_oversize(const OversizeLine& l) {
  return "line " + std::to_string(l.line_no) + " at byte " + std::to_string(l.offset) + " is " +
         std::to_string(l.size) + " bytes, over the " + std::to_string(kMaxLedgerLine) + "-byte bound of a ledger line";
}

Result<LedgerEntry> parse_ledger_tail(std::string_view tail) {
  auto at = tail.rfind(kSeqKey);
  if (at == std::string_view::npos) return envelope_error("no \"seq\" in the line's last bytes");
  LedgerEntry e;
  SBX_TRY(parse_envelope(tail.substr(at), e));
  return e;
}

namespace {

// Keeps the last kLedgerTailRead bytes of a line being skipped.
void keep_tail(std::string& tail, std::string_view more) {
  if (more.size() >= kLedgerTailRead) {
    tail.assign(more.substr(more.size() - kLedgerTailRead));
    return;
  }
  tail.append(more);
  if (tail.size() > kLedgerTailRead) tail.erase(0, tail.size() - kLedgerTailRead);
}

// The default report of a skipped line: a warning each (the first few), then a count.
struct OversizeWarner {
  static constexpr std::uint64_t kNamed = 10;
  std::uint64_t count = 0;
  bool operator()(const OversizeLine& l) {
    if (++count <= kNamed) {
      auto e = parse_ledger_tail(l.tail);
      spdlog::warn("trace ledger: skipping {}{}; 'sbx trace verify' reports it", describe_oversize(l),
                   e ? " (run " + e->run_id + ")" : "");
    }
    return true;
  }
  ~OversizeWarner() {
    if (count > kNamed) spdlog::warn("trace ledger: ... and {} more such line(s)", count - kNamed);
    if (count) spdlog::warn("trace ledger: {} line(s) over the size bound skipped; every other record was read", count);
  }
};

// The ledger opened for a scan from `from`; an fd that is not ok() when there is nothing to read:
// no ledger yet, or with `same_file` another file than it (a prune replaced it since).
Result<UniqueFd> open_to_scan(const std::string& path, std::uint64_t from, const DurableLedger* same_file) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.ok()) {
    if (errno == ENOENT) return UniqueFd();
    return sys_error(kStage, "cannot open the trace ledger " + path);
  }
  if (same_file) {
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return sys_error(kStage, "cannot stat the trace ledger " + path);
    if (static_cast<std::uint64_t>(st.st_dev) != same_file->dev ||
        static_cast<std::uint64_t>(st.st_ino) != same_file->ino)
      return UniqueFd();
  }
  if (from > 0 && ::lseek(fd.get(), static_cast<off_t>(from), SEEK_SET) < 0)
    return sys_error(kStage, "cannot seek in the trace ledger " + path);
  return fd;
}

}  // namespace

Status scan_ledger(const Dirs& dirs, const std::function<bool(const LedgerLine&)>& fn, std::uint64_t* torn,
                   std::uint64_t from, std::uint64_t first_line_no, const OversizeFn& oversize, std::size_t max_line,
                   std::optional<PruneAnchorLine>* anchor, const DurableLedger* same_file) {
  if (torn) *torn = 0;
  if (max_line == 0) max_line = kMaxLedgerLine;
  const std::string path = ledger_path(dirs);
  auto opened = open_to_scan(path, from, same_file);
  if (!opened) return opened.error();
  if (!opened->ok()) return {};  // nothing recorded yet, or not the file asked for
  const UniqueFd& fd = *opened;
  std::optional<OversizeWarner> warner;
  if (!oversize) warner.emplace();
  auto report = [&](const OversizeLine& l) { return oversize ? oversize(l) : (*warner)(l); };
  // At most max_line bytes of an unfinished line are held, plus one chunk: a longer line is
  // skipped from there on, keeping only its last bytes.
  std::string buf;
  std::uint64_t buf_offset = from;  // file offset of buf[0]
  std::uint64_t line_no = first_line_no - 1;
  bool skipping = false;
  OversizeLine skipped;
  std::string tail;
  std::string chunk(1 << 20, '\0');
  for (;;) {
    ssize_t n = ::read(fd.get(), chunk.data(), chunk.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error(kStage, "cannot read the trace ledger " + path);
    }
    if (n == 0) break;
    std::string_view data(chunk.data(), static_cast<std::size_t>(n));
    if (skipping) {
      auto nl = data.find('\n');
      keep_tail(tail, data.substr(0, nl));
      if (nl == std::string_view::npos) {
        skipped.size += data.size();
        continue;
      }
      skipped.size += nl;
      skipped.tail = tail;
      skipping = false;
      if (!report(skipped)) return {};
      data.remove_prefix(nl + 1);
      buf_offset = skipped.offset + skipped.size + 1;
    }
    buf.append(data);
    std::size_t start = 0;
    for (std::size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1) {
      std::string_view text = std::string_view(buf).substr(start, nl - start);
      if (text.size() > max_line) {  // whole in this buffer, but over the bound all the same
        OversizeLine o{++line_no, buf_offset + start, text.size(),
                       text.substr(text.size() - std::min(text.size(), kLedgerTailRead))};
        if (!report(o)) return {};
        continue;
      }
      LedgerLine l{++line_no, buf_offset + start, text};
      if (l.offset == 0 && is_prune_anchor(text))
        if (auto a = parse_prune_anchor(text)) {  // an unreadable one goes to fn: a break, reported
          if (anchor) *anchor = std::move(*a);
          continue;
        }
      if (!fn(l)) return {};
    }
    buf.erase(0, start);
    buf_offset += start;
    if (buf.size() > max_line) {
      skipping = true;
      skipped = OversizeLine{++line_no, buf_offset, buf.size(), {}};
      tail.clear();
      keep_tail(tail, buf);
      buf.clear();
    }
  }
  if (torn) *torn = skipping ? skipped.size : buf.size();
  return {};
}

Result<std::string> read_ledger_line(const Dirs& dirs, std::uint64_t offset) {
  const std::string path = ledger_path(dirs);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.ok()) return sys_error(kStage, "cannot open the trace ledger " + path);
  std::string out, chunk(64 * 1024, '\0');
  std::uint64_t size = 0;  // of the line so far
  for (std::uint64_t at = offset;;) {
    ssize_t n = ::pread(fd.get(), chunk.data(), chunk.size(), static_cast<off_t>(at));
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error(kStage, "cannot read the trace ledger " + path);
    }
    std::string_view c(chunk.data(), static_cast<std::size_t>(n));
    auto nl = c.find('\n');
    auto part = c.substr(0, nl);
    size += part.size();
    // Past the bound the line is only measured, so that the error can say how large it is.
    if (size <= kMaxLedgerLine) out.append(part);
    else out.clear();
    if (nl != std::string_view::npos) {
      if (size > kMaxLedgerLine)
        return make_error(kStage,
                          "the trace ledger's line at byte " + std::to_string(offset) + " is " + std::to_string(size) +
                              " bytes, over the " + std::to_string(kMaxLedgerLine) +
                              "-byte bound of a ledger line: no reader takes it in ('sbx trace verify' names it)");
      return out;
    }
    if (n == 0) return make_error(kStage, "the trace ledger ends inside the line at byte " + std::to_string(offset));
    at += static_cast<std::uint64_t>(n);
  }
}

Result<LedgerHead> ledger_head(const Dirs& dirs) {
  LedgerHead head;
  const std::string path = ledger_path(dirs);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.ok()) {
    if (errno == ENOENT) return head;
    return sys_error(kStage, "cannot open the trace ledger " + path);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return sys_error(kStage, "cannot stat the trace ledger");
  std::uint64_t size = static_cast<std::uint64_t>(st.st_size);
  auto tail = read_tail(fd.get(), size);
  if (!tail) return tail.error();
  if (size > 0 && tail->back() != '\n') {
    auto cut = after_last_newline(fd.get(), size);
    if (!cut) return cut.error();
    head.torn_bytes = size - *cut;
    size = *cut;
    tail = read_tail(fd.get(), size);
    if (!tail) return tail.error();
  }
  if (size == 0) return head;
  auto e = last_envelope(*tail);
  if (!e) return e.error();
  head.seq = e->seq;
  head.hash = e->hash;
  head.run_id = e->run_id;
  return head;
}

}  // namespace sbx
