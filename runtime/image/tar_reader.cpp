#include "runtime/image/tar_reader.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string_view>

#include "runtime/image/image_manifest.hpp"

namespace sbx {
namespace {

constexpr const char* kStage = "image";
constexpr std::size_t kBlock = 512;
// Extended headers (pax records, GNU long names) are read into memory; a real one is a few KiB
// at most, so a bigger one is a broken or hostile archive, not something to allocate for.
constexpr std::int64_t kMaxExtendedHeader = 1 << 20;

// The zero padding after `size` bytes of member data, up to the next block. Sizes are never
// negative here: the header parser refuses a negative size.
std::int64_t block_padding(std::int64_t size) {
  constexpr auto block = static_cast<std::int64_t>(kBlock);
  return (block - size % block) % block;
}
constexpr std::size_t kMaxDepth = kMaxTreeDepth;  // path components of a member name (image_manifest.hpp)
// Sizes beyond any real file (2^62 bytes) are refused, so that size + padding cannot overflow.
constexpr std::int64_t kMaxSize = std::int64_t{1} << 62;
// The largest id: 2^32 - 1 is the kernel's "no id".
constexpr std::int64_t kMaxId = 0xfffffffe;

// Offsets of the header fields (POSIX ustar; GNU uses 345.. for times instead of a prefix).
struct Field {
  std::size_t at, len;
};
constexpr Field kName{0, 100}, kMode{100, 8}, kUid{108, 8}, kGid{116, 8}, kSize{124, 12}, kMtime{136, 12},
    kChksum{148, 8}, kLinkname{157, 100}, kMagic{257, 6}, kPrefix{345, 155};
constexpr std::size_t kTypeflag = 156;

// A name for messages: quoted, at most 200 bytes, control characters and every byte >= 0x80
// escaped. Names may hold newlines or invalid UTF-8; a message goes to terminals and into JSON
// trace records, which must stay valid UTF-8.
std::string quote_for_message(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  std::string out = "'";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i == 200) {
      out += "...";
      break;
    }
    auto c = static_cast<unsigned char>(s[i]);
    if (c == '\n') out += "\\n";
    else if (c == '\\' || c == '\'') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else out += static_cast<char>(c);
  }
  return out + "'";
}

std::string at_byte(std::int64_t off) { return "header at byte " + std::to_string(off); }

std::string_view field_str(const unsigned char* h, Field f) {
  auto* p = reinterpret_cast<const char*>(h + f.at);
  return {p, ::strnlen(p, f.len)};
}

bool all_zero(const unsigned char* p, std::size_t n) {
  return std::all_of(p, p + n, [](unsigned char c) { return c == 0; });
}

// A numeric header field: octal ASCII (leading spaces, ended by space or NUL; all-NUL means 0),
// or GNU base-256 when the first byte has its top bit set: the rest of the field is a big-endian
// two's-complement number, positive when bit 6 of the first byte is clear. std::nullopt when
// malformed, out of int64 range, or negative where that makes no sense.
std::optional<std::int64_t> parse_number(const unsigned char* h, Field f, bool allow_negative) {
  const unsigned char* p = h + f.at;
  if (p[0] & 0x80) {
    const bool negative = p[0] & 0x40;
    if (negative && !allow_negative) return std::nullopt;
    std::int64_t v = negative ? -1 : 0;
    for (std::size_t i = 0; i < f.len; ++i) {
      if (v > std::numeric_limits<std::int64_t>::max() / 256 || v < std::numeric_limits<std::int64_t>::min() / 256)
        return std::nullopt;
      unsigned byte = (i == 0 && !negative) ? (p[0] & 0x7f) : p[i];
      v = v * 256 + byte;
    }
    return v;
  }
  std::size_t i = 0;
  while (i < f.len && p[i] == ' ') ++i;
  std::int64_t v = 0;
  for (; i < f.len && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (v > (std::numeric_limits<std::int64_t>::max() >> 3)) return std::nullopt;
    v = v * 8 + (p[i] - '0');
  }
  for (; i < f.len; ++i)
    if (p[i] != ' ' && p[i] != 0) return std::nullopt;
  return v;
}

// The header sum with the checksum field counted as spaces. Historic tars summed signed chars,
// so both sums are accepted, as GNU tar does.
bool checksum_ok(const unsigned char* h, std::int64_t stored, std::int64_t& computed) {
  std::int64_t usum = 0, ssum = 0;
  for (std::size_t i = 0; i < kBlock; ++i) {
    bool in_field = i >= kChksum.at && i < kChksum.at + kChksum.len;
    usum += in_field ? ' ' : h[i];
    ssum += in_field ? ' ' : static_cast<signed char>(h[i]);
  }
  computed = usum;
  return stored == usum || stored == ssum;
}

// A decimal pax value: an optional '-', digits, and for times an optional fraction (dropped,
// rounding down). std::nullopt when malformed or out of range.
std::optional<std::int64_t> parse_decimal(std::string_view s, bool is_time) {
  bool negative = is_time && !s.empty() && s[0] == '-';
  if (negative) s.remove_prefix(1);
  std::size_t i = 0;
  std::int64_t v = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    if (v > (std::numeric_limits<std::int64_t>::max() - 9) / 10) return std::nullopt;
    v = v * 10 + (s[i] - '0');
  }
  if (i == 0) return std::nullopt;
  bool fraction = false;
  if (is_time && i < s.size() && s[i] == '.') {
    for (++i; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i)
      if (s[i] != '0') fraction = true;
  }
  if (i != s.size()) return std::nullopt;
  return negative ? -v - (fraction ? 1 : 0) : v;
}

// Overrides from extended headers, applied to the next real member and then dropped.
struct Pending {
  std::optional<std::string> path, linkpath;          // pax
  std::optional<std::int64_t> size, mtime, uid, gid;  // pax
  std::optional<std::string> long_name, long_link;    // GNU 'L', 'K'
  std::int64_t first_header = -1;                     // where the first of them started
  bool any() const { return first_header >= 0; }
};

// A sparse member (GNU 'S', or pax GNU.sparse.* records) stores a file's holes as a map rather
// than as zeros. sbx's reader does not interpret the map (which would be one more parser of
// hostile offsets); the fix is on the writer's side, and every container tool writes plain members.
constexpr const char* kSparseRefusal =
    ", which sbx does not read: it was written by tar --sparse (-S) for a file with holes; re-create the "
    "archive or layer without --sparse (podman, buildah, docker and skopeo never write sparse members)";

// pax records: "LENGTH KEY=VALUE\n", LENGTH counting the whole record in decimal.
Status parse_pax(std::string_view data, Pending& p, const std::string& where) {
  auto bad = [&](const std::string& why) {
    return make_error(kStage, "tar: pax extended header (" + where + "): " + why);
  };
  while (!data.empty()) {
    if (all_zero(reinterpret_cast<const unsigned char*>(data.data()), data.size())) break;  // NUL padding
    std::size_t sp = data.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp > 20) return bad("malformed record length");
    auto len = parse_decimal(data.substr(0, sp), false);
    if (!len || *len <= static_cast<std::int64_t>(sp) + 2 || *len > static_cast<std::int64_t>(data.size()))
      return bad("record length out of range");
    std::string_view rec = data.substr(sp + 1, static_cast<std::size_t>(*len) - sp - 1);
    if (rec.back() != '\n') return bad("record does not end with a newline");
    rec.remove_suffix(1);
    std::size_t eq = rec.find('=');
    if (eq == std::string_view::npos || eq == 0) return bad("record without KEY=");
    std::string_view key = rec.substr(0, eq), value = rec.substr(eq + 1);
    data.remove_prefix(static_cast<std::size_t>(*len));

    // An empty value cancels the key: the header's own field applies again (POSIX pax).
    if (key == "path") {
      p.path = value.empty() ? std::nullopt : std::optional<std::string>(value);
    } else if (key == "linkpath") {
      p.linkpath = value.empty() ? std::nullopt : std::optional<std::string>(value);
    } else if (key == "size" || key == "mtime" || key == "uid" || key == "gid") {
      std::optional<std::int64_t> v;
      if (!value.empty()) {
        v = parse_decimal(value, key == "mtime");
        if (!v || (key == "size" && *v > kMaxSize) || ((key == "uid" || key == "gid") && *v > kMaxId))
          return bad("invalid " + std::string(key) + " " + quote_for_message(value));
      }
      (key == "size" ? p.size : key == "mtime" ? p.mtime : key == "uid" ? p.uid : p.gid) = v;
    } else if (key.substr(0, 11) == "GNU.sparse.") {
      return bad(std::string("GNU.sparse.* records: a GNU sparse file") + kSparseRefusal);
    }
    // Other keys (uname, gname, atime, ctime, SCHILY.xattr.*, ...) are not needed: owners are
    // numeric ids in an image (OCI layers are made in the image's own id space).
  }
  return {};
}

// Normalises a member or hardlink-target name (see the header). `where` names it in errors.
Result<std::string> normalise(std::string_view raw, const std::string& what, const std::string& where) {
  if (raw.empty()) return make_error(kStage, "tar: " + where + " has an empty " + what);
  if (raw.find('\0') != std::string_view::npos)
    return make_error(kStage, "tar: " + where + " has a NUL byte in its " + what);
  std::string out;
  std::size_t i = 0, depth = 0;
  while (i <= raw.size()) {
    std::size_t slash = std::min(raw.find('/', i), raw.size());
    std::string_view comp = raw.substr(i, slash - i);
    i = slash + 1;
    if (comp.empty() || comp == ".") continue;
    if (comp == "..")
      return make_error(kStage, "tar: " + where + " has a '..' component in its " + what + " " +
                                    quote_for_message(raw) + " (refused: it would point outside the image)");
    if (!out.empty()) out += '/';
    out += comp;
    // Deeper trees than any real image has would outrun the per-level fds of the importer's own
    // walks (scan, removal of a failed import: one fd per level under RLIMIT_NOFILE).
    if (++depth > kMaxDepth)
      return make_error(kStage, "tar: " + where + " has more than " + std::to_string(kMaxDepth) +
                                    " components in its " + what + " (refused: no image nests that deep)");
  }
  return out.empty() ? std::string(".") : out;
}

}  // namespace

namespace {

class FdSource : public ByteSource {
 public:
  explicit FdSource(int fd) : fd_(fd) {}
  Result<std::size_t> read(void* buf, std::size_t n) override {
    ssize_t got;
    do got = ::read(fd_, buf, n);
    while (got < 0 && errno == EINTR);
    if (got < 0) return sys_error(kStage, "tar: reading the archive");
    return static_cast<std::size_t>(got);
  }

 private:
  int fd_;
};

}  // namespace

TarReader::TarReader(int fd) : owned_(std::make_unique<FdSource>(fd)), src_(owned_.get()), buf_(64 * 1024) {}

TarReader::TarReader(ByteSource& src) : src_(&src), buf_(64 * 1024) {}

Error TarReader::truncated(const std::string& what) const {
  return make_error(kStage, "tar: archive truncated at byte " + std::to_string(offset_) + ": " + what);
}

Result<std::size_t> TarReader::read_some(void* dst, std::size_t n) {
  if (n == 0) return std::size_t{0};
  if (buf_pos_ == buf_len_) {
    // Big reads go straight to the caller's buffer; small ones refill the read-ahead.
    bool direct = n >= buf_.size();
    auto got = src_->read(direct ? dst : buf_.data(), direct ? n : buf_.size());
    if (!got) {
      Error e = got.error();
      e.message += " (at byte " + std::to_string(offset_) + " of the archive)";
      return e;
    }
    offset_ += direct ? static_cast<std::int64_t>(*got) : 0;
    if (direct || *got == 0) return *got;
    buf_pos_ = 0;
    buf_len_ = *got;
  }
  std::size_t take = std::min(n, buf_len_ - buf_pos_);
  std::memcpy(dst, buf_.data() + buf_pos_, take);
  buf_pos_ += take;
  offset_ += static_cast<std::int64_t>(take);
  return take;
}

Result<std::size_t> TarReader::read_full(void* dst, std::size_t n) {
  std::size_t done = 0;
  while (done < n) {
    auto got = read_some(static_cast<char*>(dst) + done, n - done);
    if (!got) return got.error();
    if (*got == 0) break;
    done += *got;
  }
  return done;
}

Status TarReader::skip(std::int64_t n) {
  char scratch[8192];
  while (n > 0) {
    auto got = read_some(scratch, static_cast<std::size_t>(std::min<std::int64_t>(n, sizeof scratch)));
    if (!got) return got.error();
    if (*got == 0) return truncated(std::to_string(n) + " more bytes expected for " + current_);
    n -= static_cast<std::int64_t>(*got);
  }
  return {};
}

Result<std::optional<TarEntry>> TarReader::next() {
  if (failed_) return *failed_;
  auto r = next_entry();
  if (!r) failed_ = r.error();
  return r;
}

Result<std::size_t> TarReader::read(void* buf, std::size_t n) {
  if (failed_) return *failed_;
  auto r = read_data(buf, n);
  if (!r) failed_ = r.error();
  return r;
}

Result<std::size_t> TarReader::read_data(void* buf, std::size_t n) {
  if (!readable_ || data_left_ == 0) return std::size_t{0};
  auto got = read_some(buf, static_cast<std::size_t>(std::min<std::int64_t>(static_cast<std::int64_t>(n), data_left_)));
  if (!got) return got.error();
  if (*got == 0) return truncated(std::to_string(data_left_) + " more bytes of data expected for " + current_);
  data_left_ -= static_cast<std::int64_t>(*got);
  return got;
}

namespace {

Status check_header_sum(const unsigned char* h, std::int64_t at) {
  std::int64_t computed = 0;
  auto stored_sum = parse_number(h, kChksum, false);
  if (!stored_sum || !checksum_ok(h, *stored_sum, computed))
    return make_error(kStage, "tar: bad header checksum at byte " + std::to_string(at) + " (stored " +
                                  quote_for_message(field_str(h, kChksum)) + ", computed " + std::to_string(computed) +
                                  ")" + (at == 0 ? ": not a tar archive, or an unknown compression" : ""));
  return {};
}

// The name: pax path, else GNU long name, else ustar prefix + name (the prefix field exists
// only with the POSIX "ustar\0" magic; GNU's "ustar " header keeps times there).
std::string member_name(const unsigned char* h, const Pending& pending) {
  if (pending.path) return *pending.path;
  if (pending.long_name) return *pending.long_name;
  std::string name_field(field_str(h, kName));
  std::string_view prefix = field_str(h, kPrefix);
  bool posix = std::memcmp(h + kMagic.at, "ustar\0", kMagic.len) == 0;
  return posix && !prefix.empty() ? std::string(prefix) + "/" + name_field : name_field;
}

Result<TarEntry::Type> member_type(char flag, const std::string& where) {
  switch (flag) {
    case '0':
    case '\0':
    case '7': return TarEntry::Type::file;
    case '1': return TarEntry::Type::hardlink;
    case '2': return TarEntry::Type::symlink;
    case '5':
    case 'D': return TarEntry::Type::dir;  // 'D': GNU dumpdir, a dir + listing
    case 'S': return make_error(kStage, "tar: " + where + " is a GNU sparse file (type 'S')" + kSparseRefusal);
    case 'M':
      return make_error(kStage,
                        "tar: " + where + " continues from another volume (multi-volume archives are not supported)");
    default: return TarEntry::Type::other;  // '3' '4' '6' devices and FIFOs, unknown flags
  }
}

Status member_link(const unsigned char* h, const Pending& pending, const std::string& where, TarEntry& e) {
  std::string link = pending.linkpath    ? *pending.linkpath
                     : pending.long_link ? *pending.long_link
                                         : std::string(field_str(h, kLinkname));
  if (e.type == TarEntry::Type::symlink) {
    if (link.empty()) return make_error(kStage, "tar: " + where + " is a symlink with an empty target");
    if (link.find('\0') != std::string::npos)
      return make_error(kStage, "tar: " + where + " has a NUL byte in its symlink target");
    e.link = std::move(link);
    return {};
  }
  auto target = normalise(link, "hardlink target", where);
  if (!target) return target.error();
  if (*target == ".") return make_error(kStage, "tar: " + where + " is a hardlink to the archive's root");
  e.link = std::move(*target);
  return {};
}

// The owner's numeric ids: pax uid/gid, else the header's fields (octal or base-256).
Status member_owner(const unsigned char* h, const Pending& pending, const std::string& where, TarEntry& e) {
  auto uid = pending.uid ? pending.uid : parse_number(h, kUid, false);
  auto gid = pending.gid ? pending.gid : parse_number(h, kGid, false);
  if (!uid || *uid > kMaxId)
    return make_error(kStage, "tar: invalid uid field " + quote_for_message(field_str(h, kUid)) + " in " + where);
  if (!gid || *gid > kMaxId)
    return make_error(kStage, "tar: invalid gid field " + quote_for_message(field_str(h, kGid)) + " in " + where);
  e.uid = static_cast<std::uint32_t>(*uid);
  e.gid = static_cast<std::uint32_t>(*gid);
  return {};
}

// A real member's header (not an extended one), with the overrides of the extended headers
// before it; `where` gets the member's name and header offset for messages.
Result<TarEntry> member_from_header(const unsigned char* h, std::int64_t at, const Pending& pending,
                                    std::string& where) {
  TarEntry e;
  e.typeflag = static_cast<char>(h[kTypeflag]);
  e.offset = pending.any() ? pending.first_header : at;
  const std::string raw = member_name(h, pending);
  where = "member " + quote_for_message(raw) + " (" + at_byte(e.offset) + ")";
  auto type = member_type(e.typeflag, where);
  if (!type) return type.error();
  e.type = *type;
  auto path = normalise(raw, "name", where);
  if (!path) return path.error();
  e.path = std::move(*path);
  e.absolute = !raw.empty() && raw[0] == '/';
  if (e.path == "." && e.type != TarEntry::Type::dir)
    return make_error(kStage, "tar: " + where + " names the archive's root but is not a directory");
  if (e.type == TarEntry::Type::symlink || e.type == TarEntry::Type::hardlink)
    SBX_TRY(member_link(h, pending, where, e));
  auto mode = parse_number(h, kMode, false);
  if (!mode)
    return make_error(kStage, "tar: invalid mode field " + quote_for_message(field_str(h, kMode)) + " in " + where);
  e.mode = static_cast<std::uint32_t>(*mode & 07777);
  auto mtime = pending.mtime ? pending.mtime : parse_number(h, kMtime, true);
  if (!mtime)
    return make_error(kStage, "tar: invalid mtime field " + quote_for_message(field_str(h, kMtime)) + " in " + where);
  e.mtime = *mtime;
  SBX_TRY(member_owner(h, pending, where, e));
  return e;
}

}  // namespace

// EOF after a member, or the end-of-archive zero blocks (GNU tar writes two, some writers one; a
// short zero tail is what is left of record padding). Members after it are refused.
Status TarReader::end_of_archive(std::size_t got, std::int64_t at, std::int64_t pending_header) {
  if (got == kBlock) {
    unsigned char h2[kBlock];
    auto got2 = read_full(h2, kBlock);
    if (!got2) return got2.error();
    if (!all_zero(h2, *got2))
      return make_error(kStage, "tar: data after the end-of-archive block at byte " + std::to_string(at) +
                                    " (a lone zero block followed by more members)");
  }
  if (pending_header >= 0)
    return make_error(kStage, "tar: the archive ends after the extended header at byte " +
                                  std::to_string(pending_header) + ", without its member");
  at_end_ = true;
  return {};
}

// An extended header's data (pax 'x', GNU 'L'/'K'), bounded, and the padding after it.
Result<std::string> TarReader::read_extended(std::int64_t size, std::int64_t at) {
  if (size > kMaxExtendedHeader)
    return make_error(kStage, "tar: extended header of " + std::to_string(size) + " bytes at byte " +
                                  std::to_string(at) + " (more than " + std::to_string(kMaxExtendedHeader) + ")");
  std::string data(static_cast<std::size_t>(size), '\0');
  auto n = read_full(data.data(), data.size());
  if (!n) return n.error();
  current_ = "the extended header at byte " + std::to_string(at);
  if (*n < data.size()) return truncated("in " + current_);
  SBX_TRY(skip(block_padding(size)));
  return data;
}

Result<std::optional<TarEntry>> TarReader::next_entry() {
  if (at_end_) return std::optional<TarEntry>{};
  SBX_TRY(skip(data_left_ + pad_left_));
  data_left_ = pad_left_ = 0;
  readable_ = false;

  Pending pending;
  unsigned char h[kBlock];
  for (;;) {
    const std::int64_t at = offset_;
    auto got = read_full(h, kBlock);
    if (!got) return got.error();
    if (*got == 0 || all_zero(h, *got)) {
      SBX_TRY(end_of_archive(*got, at, pending.first_header));
      return std::optional<TarEntry>{};
    }
    if (*got < kBlock) return truncated("partial header at byte " + std::to_string(at));
    SBX_TRY(check_header_sum(h, at));
    header_seen_ = true;

    const char flag = static_cast<char>(h[kTypeflag]);
    auto size = parse_number(h, kSize, false);
    if (!size || *size > kMaxSize)
      return make_error(kStage, "tar: invalid size field " + quote_for_message(field_str(h, kSize)) + " in member " +
                                    quote_for_message(field_str(h, kName)) + " (" + at_byte(at) + ")");

    // Extended headers: their data describes the next member.
    if (flag == 'x' || flag == 'L' || flag == 'K') {
      auto data = read_extended(*size, at);
      if (!data) return data.error();
      if (!pending.any()) pending.first_header = at;
      if (flag == 'x') {
        SBX_TRY(parse_pax(*data, pending, at_byte(at)));
      } else {
        // GNU writes the name and a NUL; a NUL inside it is caught by normalise().
        while (!data->empty() && data->back() == '\0') data->pop_back();
        (flag == 'L' ? pending.long_name : pending.long_link) = std::move(*data);
      }
      continue;
    }
    // Headers that describe nothing to extract: pax global headers and GNU volume labels.
    if (flag == 'g' || flag == 'V') {
      current_ =
          "the " + std::string(flag == 'g' ? "pax global" : "volume label") + " header at byte " + std::to_string(at);
      SBX_TRY(skip(*size + block_padding(*size)));
      continue;
    }
    auto e = member_from_header(h, at, pending, current_);
    if (!e) return e.error();
    // Links, directories, devices and FIFOs have no data in the archive whatever their size
    // field says (POSIX); everything else has `size` bytes, which read() returns for files
    // and next() skips otherwise.
    const std::int64_t stored = pending.size ? *pending.size : *size;
    const bool has_data = !(flag >= '1' && flag <= '6');
    data_left_ = has_data ? stored : 0;
    pad_left_ = block_padding(data_left_);
    readable_ = e->type == TarEntry::Type::file;
    e->size = readable_ ? data_left_ : 0;
    return std::optional<TarEntry>(std::move(*e));
  }
}

}  // namespace sbx
