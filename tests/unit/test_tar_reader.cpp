// TarReader and Tarball against archives written by GNU tar (every format it writes, the
// compressions `sbx image import` accepts) and against headers crafted byte by byte for what tar
// will not write: "..", bad checksums, truncation, base-256 sizes, odd pax records.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/image/tar_reader.hpp"
#include "runtime/image/tarball.hpp"

namespace fs = std::filesystem;
using sbx::TarEntry;
using sbx::TarReader;
using Type = sbx::TarEntry::Type;

namespace {

// A fresh directory under /tmp, removed with everything in it (without following symlinks).
struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/sbx-tar-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Runs a command through the shell; every path in these commands comes from mkdtemp and the
// fixed names below, so nothing needs quoting.
int sh(const std::string& cmd) { return std::system(cmd.c_str()); }
bool have(const char* tool) { return sh(std::string("command -v ") + tool + " >/dev/null 2>&1") == 0; }

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const fs::path& p, const std::string& data) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << data;
}

struct Member {
  TarEntry e;
  std::string data;
};
struct Archive {
  std::vector<Member> members;
  std::optional<sbx::Error> error;
  const Member* find(const std::string& path) const {
    for (auto& m : members)
      if (m.e.path == path) return &m;
    return nullptr;
  }
};

// Every member and its data, read in odd-sized chunks (the read-ahead buffer is 64 KiB, so
// reads are served from it, straddle it, or bypass it); stops at the first error.
template <class Source>
Archive read_all(Source&& src, std::size_t chunk = 7777) {
  Archive a;
  TarReader r(src);
  std::vector<char> buf(chunk);
  for (;;) {
    auto e = r.next();
    if (!e) { a.error = e.error(); return a; }
    if (!*e) return a;
    Member m{std::move(**e), {}};
    for (;;) {
      auto n = r.read(buf.data(), buf.size());
      if (!n) { a.error = n.error(); return a; }
      if (*n == 0) break;
      m.data.append(buf.data(), *n);
    }
    CHECK(static_cast<std::int64_t>(m.data.size()) == m.e.size);
    a.members.push_back(std::move(m));
  }
}

// Reads archive bytes from a memfd: sequential reads, like a pipe.
Archive read_bytes(const std::string& bytes, std::size_t chunk = 7777) {
  int fd = ::memfd_create("tar-test", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  REQUIRE(::lseek(fd, 0, SEEK_SET) == 0);
  Archive a = read_all(fd, chunk);
  ::close(fd);
  return a;
}

Archive read_file(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  Archive a = read_all(fd);
  ::close(fd);
  return a;
}

std::string error_of(const Archive& a) { return a.error ? a.error->message : std::string(); }

// ---- Archives from GNU tar ----

const std::string kLong100 = std::string(60, 'd') + "/" + std::string(60, 'f');  // 121 bytes
const std::string kLong255 = [] {  // 6 levels of 50: 306 bytes with the file name
  std::string s;
  for (int i = 0; i < 6; ++i) s += std::string(50, static_cast<char>('a' + i)) + "/";
  return s + "file";
}();
const std::string kLongTarget = "../" + std::string(150, 't');
const std::string kNewline = "new\nline";
const std::string kBadUtf8 = "bad\xff\xfe";

// A tree with one of everything the importer cares about. `very_long` adds the >255-byte path,
// which ustar cannot store.
void make_tree(const fs::path& src, bool very_long) {
  fs::create_directories(src / "dir");
  spit(src / "hello.txt", "hello\n");
  ::chmod((src / "hello.txt").c_str(), 0640);
  ::chmod((src / "dir").c_str(), 0750);
  spit(src / "dir/setuid", "#!/bin/sh\n");
  ::chmod((src / "dir/setuid").c_str(), 04755);
  std::string big(200000, '\0');  // bigger than the read-ahead buffer, not a multiple of 512
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  spit(src / "big.bin", big);
  REQUIRE(::symlink("hello.txt", (src / "link").c_str()) == 0);
  REQUIRE(::symlink("/etc/passwd", (src / "abs").c_str()) == 0);
  REQUIRE(::symlink("../outside", (src / "up").c_str()) == 0);  // targets are kept verbatim
  REQUIRE(::link((src / "hello.txt").c_str(), (src / "hard").c_str()) == 0);
  REQUIRE(::mkfifo((src / "fifo").c_str(), 0600) == 0);
  fs::create_directories(src / fs::path(kLong100).parent_path());
  spit(src / kLong100, "long100");
  if (very_long) {
    fs::create_directories(src / fs::path(kLong255).parent_path());
    spit(src / kLong255, "long255");
    REQUIRE(::symlink(kLongTarget.c_str(), (src / "longlink").c_str()) == 0);  // GNU 'K', pax linkpath
  }
  spit(src / kNewline, "nl");
  spit(src / kBadUtf8, "utf");
  REQUIRE(sh("touch -h -d @1234567890 " + (src / "hello.txt").string()) == 0);
}

void check_tree(const Archive& a, const fs::path& src, bool very_long) {
  INFO("error: " << error_of(a));
  REQUIRE(!a.error);
  auto* root = a.find(".");
  REQUIRE(root);
  CHECK(root->e.type == Type::dir);

  auto* hello = a.find("hello.txt");
  auto* hard = a.find("hard");
  REQUIRE(hello);
  REQUIRE(hard);
  // GNU tar stores whichever of the two it meets first as the file, the other as a hardlink to it.
  const Member* file = hello->e.type == Type::file ? hello : hard;
  const Member* link = file == hello ? hard : hello;
  CHECK(file->e.type == Type::file);
  CHECK(file->data == "hello\n");
  CHECK(file->e.mode == 0640);
  CHECK(file->e.mtime == 1234567890);
  CHECK(link->e.type == Type::hardlink);
  CHECK(link->e.typeflag == '1');
  CHECK(link->e.link == file->e.path);
  CHECK(link->e.size == 0);

  auto* dir = a.find("dir");
  REQUIRE(dir);
  CHECK(dir->e.type == Type::dir);
  CHECK(dir->e.mode == 0750);
  CHECK(dir->e.size == 0);
  auto* setuid = a.find("dir/setuid");
  REQUIRE(setuid);
  CHECK(setuid->e.mode == 04755);

  auto* big = a.find("big.bin");
  REQUIRE(big);
  CHECK(big->e.size == 200000);
  CHECK(big->data == slurp(src / "big.bin"));

  for (auto [name, target] : {std::pair{"link", "hello.txt"}, {"abs", "/etc/passwd"}, {"up", "../outside"}}) {
    auto* m = a.find(name);
    REQUIRE(m);
    CHECK(m->e.type == Type::symlink);
    CHECK(m->e.link == target);
  }
  auto* fifo = a.find("fifo");
  REQUIRE(fifo);
  CHECK(fifo->e.type == Type::other);
  CHECK(fifo->e.typeflag == '6');

  auto* l100 = a.find(kLong100);
  REQUIRE(l100);
  CHECK(l100->data == "long100");
  CHECK(a.find(fs::path(kLong100).parent_path().string()));
  if (very_long) {
    auto* l255 = a.find(kLong255);
    REQUIRE(l255);
    CHECK(l255->data == "long255");
    auto* longlink = a.find("longlink");
    REQUIRE(longlink);
    CHECK(longlink->e.link == kLongTarget);
  }
  auto* nl = a.find(kNewline);
  REQUIRE(nl);
  CHECK(nl->data == "nl");
  auto* utf = a.find(kBadUtf8);
  REQUIRE(utf);
  CHECK(utf->data == "utf");

  for (auto& m : a.members) {
    CHECK(m.e.path.find("./") != 0);
    CHECK(m.e.path.back() != '/');
  }
}

}  // namespace

TEST_CASE("tar reader: GNU tar's gnu, pax, ustar and v7 formats") {
  for (const char* format : {"gnu", "pax", "ustar"}) {
    CAPTURE(format);
    TempDir t;
    bool very_long = std::string(format) != "ustar";
    make_tree(t.path / "src", very_long);
    REQUIRE(sh("tar -C " + (t.path / "src").string() + " --format=" + format + " -cf " +
               (t.path / "a.tar").string() + " .") == 0);
    check_tree(read_file(t.path / "a.tar"), t.path / "src", very_long);
  }

  // v7: no magic, names up to 100 bytes, no FIFOs; a leading "./" and trailing "/" still go.
  TempDir t;
  fs::create_directories(t.path / "src/sub");
  spit(t.path / "src/sub/f", "v7");
  REQUIRE(sh("tar -C " + (t.path / "src").string() + " --format=v7 -cf " + (t.path / "a.tar").string() + " ./sub") == 0);
  Archive a = read_file(t.path / "a.tar");
  INFO(error_of(a));
  REQUIRE(!a.error);
  REQUIRE(a.members.size() == 2);
  CHECK(a.members[0].e.path == "sub");
  CHECK(a.members[0].e.type == Type::dir);
  CHECK(a.members[1].e.path == "sub/f");
  CHECK(a.members[1].data == "v7");
}

TEST_CASE("tar reader: unread data is skipped by next()") {
  TempDir t;
  make_tree(t.path / "src", true);
  REQUIRE(sh("tar -C " + (t.path / "src").string() + " -cf " + (t.path / "a.tar").string() + " .") == 0);
  int fd = ::open((t.path / "a.tar").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  TarReader r(fd);
  int count = 0;
  for (;;) {
    auto e = r.next();
    REQUIRE(e.ok());
    if (!*e) break;
    ++count;
    if ((*e)->path == "big.bin") {  // read part of it only
      char buf[1000];
      auto n = r.read(buf, sizeof buf);
      REQUIRE(n.ok());
      CHECK(*n == sizeof buf);
    }
  }
  ::close(fd);
  CHECK(count >= 15);
}

// ---- Compressed tarballs through Tarball ----

namespace {

void check_compressed(const char* tool, const char* tar_flag) {
  if (!have(tool)) {
    MESSAGE("skipped: no " << tool << " binary on this host");
    return;
  }
  CAPTURE(tool);
  TempDir t;
  make_tree(t.path / "src", true);
  // Named .tar on purpose: the compression is recognised by its magic bytes, not the name.
  const fs::path out = t.path / "image.tar";
  REQUIRE(sh("tar -C " + (t.path / "src").string() + " " + tar_flag + " -cf " + out.string() + " .") == 0);
  auto tb = sbx::Tarball::open(out);
  REQUIRE_MESSAGE(tb.ok(), (tb.ok() ? "" : tb.error().describe()));
  CHECK(tb->compression() == tool);
  check_tree(read_all(*tb), t.path / "src", true);
  auto done = tb->finish();
  CHECK_MESSAGE(done.ok(), (done.ok() ? "" : done.error().describe()));
}

}  // namespace

TEST_CASE("tarball: plain, gzip, xz, zstd and bzip2, detected by magic") {
  TempDir t;
  make_tree(t.path / "src", true);
  REQUIRE(sh("tar -C " + (t.path / "src").string() + " -cf " + (t.path / "plain.tgz").string() + " .") == 0);
  auto tb = sbx::Tarball::open(t.path / "plain.tgz");  // a plain tar despite its name
  REQUIRE(tb.ok());
  CHECK(tb->compression().empty());
  check_tree(read_all(*tb), t.path / "src", true);
  CHECK(tb->finish().ok());

  check_compressed("gzip", "-z");
  check_compressed("xz", "-J");
  check_compressed("zstd", "--zstd");
  check_compressed("bzip2", "-j");
}

TEST_CASE("tarball: corrupt, truncated and concatenated streams") {
  TempDir t;
  make_tree(t.path / "src", false);
  const std::string src = (t.path / "src").string();
  const fs::path gz = t.path / "a.tar.gz";
  REQUIRE(sh("tar -C " + src + " -czf " + gz.string() + " .") == 0);
  const std::string bytes = slurp(gz);

  SUBCASE("a truncated .gz: the reader or finish() fails, finish() names gzip and the offset") {
    spit(gz, bytes.substr(0, bytes.size() / 2));
    auto tb = sbx::Tarball::open(gz);
    REQUIRE(tb.ok());
    Archive a = read_all(*tb);
    auto done = tb->finish();
    CHECK(a.error);  // a truncated tar stream
    REQUIRE(!done.ok());
    CHECK(done.error().stage == sbx::Stage("image"));
    CHECK(done.error().message.find("gzip stream of " + gz.string() + " ends early") != std::string::npos);
  }
  SUBCASE("a flipped byte in the deflate data: zlib's reason, the file and the byte") {
    std::string bad = bytes;
    for (std::size_t i = 20; i < 60 && i < bad.size(); ++i) bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    spit(gz, bad);
    auto tb = sbx::Tarball::open(gz);
    REQUIRE(tb.ok());
    (void)read_all(*tb);
    auto done = tb->finish();
    REQUIRE(!done.ok());
    CHECK(done.error().message.find("cannot decompress " + gz.string() + ": corrupt gzip data (zlib: ") !=
          std::string::npos);
    CHECK(done.error().message.find("at compressed byte") != std::string::npos);
  }
  SUBCASE("a wrong CRC in the trailer is caught, by the reader's read-ahead or by finish()") {
    std::string bad = bytes;
    bad[bad.size() - 8] = static_cast<char>(bad[bad.size() - 8] ^ 1);
    spit(gz, bad);
    auto tb = sbx::Tarball::open(gz);
    REQUIRE(tb.ok());
    (void)read_all(*tb);
    auto done = tb->finish();
    REQUIRE(!done.ok());
    CHECK(done.error().message.find("incorrect data check") != std::string::npos);
  }
  SUBCASE("junk after the gzip stream is ignored, as gzip(1) does") {
    spit(gz, bytes + "trailing garbage");
    auto tb = sbx::Tarball::open(gz);
    REQUIRE(tb.ok());
    CHECK(!read_all(*tb).error);
    auto done = tb->finish();
    CHECK_MESSAGE(done.ok(), (done.ok() ? "" : done.error().describe()));
  }
  SUBCASE("concatenated gzip members and bzip2 streams are one archive") {
    // The tar split in two at a block boundary, each half compressed on its own.
    const fs::path tar = t.path / "a.tar";
    REQUIRE(sh("tar -C " + src + " -cf " + tar.string() + " .") == 0);
    const std::string plain = slurp(tar);
    const std::size_t half = (plain.size() / 1024) * 512;
    spit(t.path / "p1", plain.substr(0, half));
    spit(t.path / "p2", plain.substr(half));
    for (const char* tool : {"gzip", "bzip2", "xz", "zstd"}) {
      if (!have(tool)) continue;
      CAPTURE(tool);
      const fs::path cat = t.path / (std::string("cat.") + tool);
      REQUIRE(sh(std::string("(") + tool + " -c " + (t.path / "p1").string() + "; " + tool + " -c " +
                 (t.path / "p2").string() + ") > " + cat.string()) == 0);
      auto tb = sbx::Tarball::open(cat);
      REQUIRE(tb.ok());
      CHECK(tb->compression() == tool);
      check_tree(read_all(*tb), t.path / "src", false);
      CHECK(tb->finish().ok());
    }
  }
  SUBCASE("no decompressor program is needed: an empty PATH still reads every format") {
    const char* old = std::getenv("PATH");
    std::string saved = old ? old : "";
    ::setenv("PATH", t.path.c_str(), 1);
    auto tb = sbx::Tarball::open(gz);
    REQUIRE(tb.ok());
    Archive a = read_all(*tb);
    ::setenv("PATH", saved.c_str(), 1);
    CHECK(!a.error);
    CHECK(tb->finish().ok());
  }
  SUBCASE("corrupt xz, zstd and bzip2 streams say which library refused them") {
    const fs::path tar = t.path / "a.tar";
    // The same bytes every time (mtimes and order fixed): with the tree's mtimes the compressed
    // stream, and so what the flipped bytes hit, differed from run to run, and once in a while the
    // damage decoded into a bad tar header (the tar reader's error) before any library saw it.
    REQUIRE(sh("tar -C " + src + " --mtime=@1234567890 --sort=name --owner=0 --group=0 --numeric-owner -cf " +
               tar.string() + " .") == 0);
    for (auto [tool, reason] : {std::pair{"xz", "liblzma"}, std::pair{"zstd", "libzstd"}, std::pair{"bzip2", "libbz2"}}) {
      if (!have(tool)) continue;
      CAPTURE(tool);
      const fs::path z = t.path / (std::string("z.") + tool);
      REQUIRE(sh(std::string(tool) + " -c " + tar.string() + " > " + z.string()) == 0);
      std::string bad = slurp(z);
      for (std::size_t i = bad.size() / 2; i < bad.size() / 2 + 16; ++i) bad[i] = static_cast<char>(bad[i] ^ 0xff);
      spit(z, bad);
      auto tb = sbx::Tarball::open(z);
      REQUIRE(tb.ok());
      (void)read_all(*tb);
      auto done = tb->finish();
      REQUIRE(!done.ok());
      CHECK(done.error().message.find(std::string("corrupt ") + tool + " data (" + reason) != std::string::npos);
    }
  }
  SUBCASE("an xz stream whose dictionary needs more memory than the limit is refused") {
    if (!have("xz")) return;
    const fs::path tar = t.path / "a.tar";
    REQUIRE(sh("tar -C " + src + " -cf " + tar.string() + " .") == 0);
    const fs::path z = t.path / "big-dict.xz";
    // A 384 MiB dictionary (300 MiB rounded up by the format): decoding would allocate it whatever
    // the data's size. mf=hc3 keeps the encoder itself small.
    REQUIRE(sh("xz -c --lzma2=dict=300MiB,mf=hc3 " + tar.string() + " > " + z.string()) == 0);
    auto tb = sbx::Tarball::open(z);
    REQUIRE(tb.ok());
    Archive a = read_all(*tb);
    REQUIRE(a.error);
    CHECK(a.error->message.find("needs more than 256 MiB") != std::string::npos);
  }
  SUBCASE("a bomb stops at the output limit, also inside the data of a member nobody extracts") {
    // One member of an unknown type ('Z') holding 64 MiB of zeros: TarReader skips its data, so
    // only the decompressed-size limit can stop it.
    std::string h(512, '\0');
    std::memcpy(&h[0], "bomb", 4);
    std::snprintf(&h[100], 8, "%07o", 0644);
    std::snprintf(&h[124], 12, "%011llo", 64ull << 20);
    std::snprintf(&h[136], 12, "%011o", 0);
    h[156] = 'Z';
    std::memcpy(&h[257], "ustar\0" "00", 8);
    std::memset(&h[148], ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(&h[148], 8, "%06o", sum);
    spit(t.path / "bomb.tar", h);
    REQUIRE(sh("head -c 67108864 /dev/zero >> " + (t.path / "bomb.tar").string() + " && gzip -9 -f " +
               (t.path / "bomb.tar").string()) == 0);
    CHECK(fs::file_size(t.path / "bomb.tar.gz") < 200 * 1024);
    auto tb = sbx::Tarball::open(t.path / "bomb.tar.gz");
    REQUIRE(tb.ok());
    tb->limit_output(1 << 20, "the test's limit");
    Archive a = read_all(*tb);
    REQUIRE(a.error);
    CHECK(a.error->message.find("decompresses to more than 1048576 bytes (the test's limit)") != std::string::npos);
    auto done = tb->finish();
    CHECK(!done.ok());
  }
  SUBCASE("not a regular file, or missing") {
    CHECK(!sbx::Tarball::open("/dev/null").ok());
    auto missing = sbx::Tarball::open((t.path / "nope.tar").string());
    REQUIRE(!missing.ok());
    CHECK(missing.error().err == ENOENT);
  }
}

// ---- Crafted headers ----

namespace {

void put_octal(std::string& h, std::size_t at, std::size_t len, std::int64_t v) {
  std::snprintf(&h[at], len, "%0*llo", static_cast<int>(len - 1), static_cast<unsigned long long>(v));
}

// Recomputes the checksum after a test has edited the header.
void seal(std::string& h) {
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(&h[148], 7, "%06o", sum);
  h[154] = '\0';
  h[155] = ' ';
}

// A POSIX ustar header.
std::string header(const std::string& name, char flag, std::int64_t size = 0, const std::string& link = "") {
  std::string h(512, '\0');
  std::memcpy(&h[0], name.data(), std::min<std::size_t>(name.size(), 100));
  put_octal(h, 100, 8, 0644);
  put_octal(h, 108, 8, 0);
  put_octal(h, 116, 8, 0);
  put_octal(h, 124, 12, size);
  put_octal(h, 136, 12, 1700000000);
  h[156] = flag;
  std::memcpy(&h[157], link.data(), std::min<std::size_t>(link.size(), 100));
  std::memcpy(&h[257], "ustar\0" "00", 8);
  seal(h);
  return h;
}

std::string padded(std::string data) { return data + std::string((512 - data.size() % 512) % 512, '\0'); }
std::string file(const std::string& name, const std::string& data) { return header(name, '0', data.size()) + padded(data); }
const std::string kEnd(1024, '\0');

std::string pax_record(const std::string& kv) {
  // LENGTH counts itself: try lengths until the digits fit.
  for (std::size_t digits = 1;; ++digits) {
    std::size_t len = digits + 1 + kv.size() + 1;
    if (std::to_string(len).size() == digits) return std::to_string(len) + " " + kv + "\n";
  }
}
std::string pax(const std::string& records) { return header("PaxHeaders/x", 'x', records.size()) + padded(records); }

}  // namespace

TEST_CASE("tar reader: names are normalised, '..' is refused with the member named") {
  SUBCASE("leading '/', './', empty and '.' components, trailing '/'") {
    Archive a = read_bytes(file("/etc/passwd", "x") + header(".//a/./b//", '5') + header("./", '5') +
                           header("/", '5') + header("a/b/", '1', 0, "/etc/passwd") + kEnd);
    INFO(error_of(a));
    REQUIRE(a.members.size() == 5);
    CHECK(a.members[0].e.path == "etc/passwd");
    CHECK(a.members[1].e.path == "a/b");
    CHECK(a.members[2].e.path == ".");
    CHECK(a.members[3].e.path == ".");
    CHECK(a.members[4].e.link == "etc/passwd");  // hardlink targets like names
  }
  for (const std::string bad : {"../evil", "a/../../evil", "a/..", "./..//x", ".."}) {
    CAPTURE(bad);
    Archive a = read_bytes(file("ok", "fine") + file(bad, "evil") + kEnd);
    REQUIRE(a.error);
    CHECK(a.members.size() == 1);
    CHECK(a.error->stage == sbx::Stage("image"));
    CHECK(a.error->message.find("'..'") != std::string::npos);
    CHECK(a.error->message.find("byte 1024") != std::string::npos);  // where the member starts
  }
  SUBCASE("a hardlink to '../x'") {
    Archive a = read_bytes(header("h", '1', 0, "../x") + kEnd);
    REQUIRE(a.error);
    CHECK(a.error->message.find("hardlink target") != std::string::npos);
  }
  SUBCASE("GNU tar --absolute-names keeps '../evil' in the archive; the reader refuses it") {
    TempDir t;
    fs::create_directories(t.path / "sub");
    spit(t.path / "evil", "evil");
    REQUIRE(sh("cd " + (t.path / "sub").string() + " && tar --absolute-names -cf ../evil.tar ../evil") == 0);
    Archive a = read_file(t.path / "evil.tar");
    REQUIRE(a.error);
    CHECK(a.error->message.find("'../evil'") != std::string::npos);
  }
  SUBCASE("empty names, NUL in a pax path, '.' as a file, empty symlink target") {
    CHECK(error_of(read_bytes(file("", "x") + kEnd)).find("empty name") != std::string::npos);
    CHECK(error_of(read_bytes(pax(pax_record(std::string("path=a\0b", 8))) + file("x", "") + kEnd))
              .find("NUL") != std::string::npos);
    CHECK(error_of(read_bytes(file("./", "x") + kEnd)).find("root") != std::string::npos);
    CHECK(error_of(read_bytes(header("s", '2') + kEnd)).find("empty target") != std::string::npos);
  }
}

TEST_CASE("tar reader: pax records") {
  const std::string long_name = std::string(300, 'p') + "/\xff\n name";
  Archive a = read_bytes(pax(pax_record("path=" + long_name) + pax_record("mtime=1234567890.75") +
                             pax_record("uid=5") + pax_record("SCHILY.xattr.user.x=y")) +
                         file("short", "data") +
                         pax(pax_record("linkpath=" + std::string(200, 't')) + pax_record("mtime=-1.5")) +
                         header("sym", '2', 0, "ignored") +
                         // a pax size overrides the header's (which GNU tar sets to 0 past 8 GiB)
                         pax(pax_record("size=3")) + header("sized", '0', 0) + padded("abc") +
                         // a global header is skipped; an empty value cancels a key
                         header("g", 'g', 20) + padded(pax_record("path=global")) +
                         pax(pax_record("path=")) + file("plain", "p") + kEnd);
  INFO(error_of(a));
  REQUIRE(!a.error);
  REQUIRE(a.members.size() == 4);
  CHECK(a.members[0].e.path == long_name);
  CHECK(a.members[0].e.mtime == 1234567890);
  CHECK(a.members[0].data == "data");
  CHECK(a.members[0].e.offset == 0);  // the member starts at its extended header
  CHECK(a.members[0].e.uid == 5);      // pax uid over the header's 0
  CHECK(a.members[0].e.gid == 0);
  CHECK(a.members[1].e.link == std::string(200, 't'));
  CHECK(a.members[1].e.mtime == -2);
  CHECK(a.members[2].e.path == "sized");
  CHECK(a.members[2].data == "abc");
  CHECK(a.members[3].e.path == "plain");

  CHECK(error_of(read_bytes(pax("5 path\n") + file("x", "") + kEnd)).find("pax") != std::string::npos);
  CHECK(error_of(read_bytes(pax("99 path=x\n") + file("x", "") + kEnd)).find("pax") != std::string::npos);
  CHECK(error_of(read_bytes(pax(pax_record("size=-1")) + file("x", "") + kEnd)).find("size") != std::string::npos);
  CHECK(error_of(read_bytes(pax(pax_record("GNU.sparse.major=1")) + file("x", "") + kEnd)).find("sparse") !=
        std::string::npos);
  CHECK(error_of(read_bytes(pax(pax_record("path=x")) + kEnd)).find("without its member") != std::string::npos);
}

TEST_CASE("tar reader: owners are numeric ids, from the header or pax, bounded") {
  std::string h = header("owned", '0');
  put_octal(h, 108, 8, 1000);
  put_octal(h, 116, 8, 42);
  seal(h);
  Archive a = read_bytes(h + pax(pax_record("uid=70000") + pax_record("gid=4294967294")) + file("paxed", "") + kEnd);
  INFO(error_of(a));
  REQUIRE(a.members.size() == 2);
  CHECK(a.members[0].e.uid == 1000);
  CHECK(a.members[0].e.gid == 42);
  CHECK(a.members[1].e.uid == 70000);
  CHECK(a.members[1].e.gid == 4294967294u);
  // 2^32 - 1 is the kernel's "no id", a negative or garbled field no id at all: refused, named.
  CHECK(error_of(read_bytes(pax(pax_record("uid=4294967295")) + file("x", "") + kEnd)).find("invalid uid") !=
        std::string::npos);
  std::string bad = header("garbled", '0');
  std::memcpy(&bad[116], "12x4567", 7);
  seal(bad);
  CHECK(error_of(read_bytes(bad + kEnd)).find("invalid gid field '12x4567' in member 'garbled'") != std::string::npos);
}

TEST_CASE("tar reader: base-256 numbers") {
  SUBCASE("a size in base-256 (how GNU tar writes files of 8 GiB and more)") {
    std::string h = header("big", '0');
    std::memset(&h[124], 0, 12);
    h[124] = static_cast<char>(0x80);
    h[134] = 0x03;
    h[135] = static_cast<char>(0xe8);  // 1000
    seal(h);
    std::string data(1000, 'z');
    Archive a = read_bytes(h + padded(data) + kEnd);
    INFO(error_of(a));
    REQUIRE(a.members.size() == 1);
    CHECK(a.members[0].e.size == 1000);
    CHECK(a.members[0].data == data);
  }
  SUBCASE("9 GiB: the size is right, the missing data is a truncation") {
    std::string h = header("huge", '0');
    std::memset(&h[124], 0, 12);
    h[124] = static_cast<char>(0x80);
    h[131] = 0x02;
    h[132] = 0x40;  // 0x2_4000_0000 = 9 GiB
    seal(h);
    int fd = ::memfd_create("tar-test", MFD_CLOEXEC);
    std::string bytes = h + std::string(4096, 'q');
    REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
    ::lseek(fd, 0, SEEK_SET);
    TarReader r(fd);
    auto e = r.next();
    REQUIRE(e.ok());
    REQUIRE(*e);
    CHECK((*e)->size == (std::int64_t{9} << 30));
    auto next = r.next();
    REQUIRE(!next.ok());
    CHECK(next.error().message.find("truncated") != std::string::npos);
    CHECK(next.error().message.find("'huge'") != std::string::npos);
    auto again = r.next();  // errors stick
    REQUIRE(!again.ok());
    CHECK(again.error().message == next.error().message);
    ::close(fd);
  }
  SUBCASE("a negative size or one past int64 is refused; a negative mtime is kept") {
    std::string h = header("neg", '0');
    std::memset(&h[124], 0xff, 12);  // -1
    seal(h);
    CHECK(error_of(read_bytes(h + kEnd)).find("size") != std::string::npos);
    h = header("over", '0');
    std::memset(&h[124], 0xff, 12);
    h[124] = static_cast<char>(0x80);  // 2^88 - 1
    seal(h);
    CHECK(error_of(read_bytes(h + kEnd)).find("size") != std::string::npos);
    h = header("max", '0');
    std::memset(&h[124], 0xff, 12);
    std::memset(&h[124], 0, 4);
    h[124] = static_cast<char>(0x80);
    h[128] = 0x7f;  // INT64_MAX: no room for the padding after it
    seal(h);
    CHECK(error_of(read_bytes(h + kEnd)).find("size") != std::string::npos);
    CHECK(error_of(read_bytes(pax(pax_record("size=9223372036854775807")) + file("x", "") + kEnd))
              .find("size") != std::string::npos);
    h = header("old", '0');
    std::memset(&h[136], 0xff, 12);
    h[147] = static_cast<char>(0x18);  // ...ff18 = -232
    seal(h);
    Archive a = read_bytes(h + kEnd);
    INFO(error_of(a));
    REQUIRE(a.members.size() == 1);
    CHECK(a.members[0].e.mtime == -232);
  }
}

TEST_CASE("tar reader: corrupt and truncated archives") {
  TempDir t;
  fs::create_directories(t.path / "src");
  spit(t.path / "src/a", std::string(3000, 'a'));
  spit(t.path / "src/b", std::string(100, 'b'));
  REQUIRE(sh("tar -C " + (t.path / "src").string() + " --format=gnu -cf " + (t.path / "x.tar").string() + " a b") == 0);
  const std::string good = slurp(t.path / "x.tar");
  // a: header at 0, data 512..3512, padding to 3584; b: header at 3584, data 4096..4196, padding to
  // 4608; then the end-of-archive blocks.
  REQUIRE(read_bytes(good).members.size() == 2);

  SUBCASE("a flipped byte in the second header: checksum error at its offset") {
    std::string bad = good;
    bad[3584] ^= 1;
    Archive a = read_bytes(bad);
    REQUIRE(a.error);
    CHECK(a.members.size() == 1);
    CHECK(a.error->message.find("checksum") != std::string::npos);
    CHECK(a.error->message.find("byte 3584") != std::string::npos);
  }
  SUBCASE("not a tar at all") {
    Archive a = read_bytes(std::string(2048, 'x'));
    REQUIRE(a.error);
    CHECK(a.error->message.find("not a tar archive") != std::string::npos);
  }
  SUBCASE("cut inside data, inside padding, inside a header: errors") {
    for (std::size_t cut : {std::size_t(2000), std::size_t(3512), std::size_t(3600), std::size_t(4150), std::size_t(4196)}) {
      CAPTURE(cut);
      Archive a = read_bytes(good.substr(0, cut));
      REQUIRE(a.error);
      CHECK(a.error->message.find("truncated") != std::string::npos);
    }
  }
  SUBCASE("EOF right after the last member, or after one zero block: the end") {
    for (std::size_t cut : {std::size_t(4608), std::size_t(5120), std::size_t(5200)}) {
      CAPTURE(cut);
      Archive a = read_bytes(good.substr(0, cut));
      INFO(error_of(a));
      CHECK(!a.error);
      CHECK(a.members.size() == 2);
    }
  }
  SUBCASE("a lone zero block followed by a member: an error, not a silent stop") {
    Archive a = read_bytes(good.substr(0, 4608) + std::string(512, '\0') + file("more", "m") + kEnd);
    REQUIRE(a.error);
    CHECK(a.error->message.find("lone zero block") != std::string::npos);
  }
  SUBCASE("a too-big extended header is refused before allocating") {
    Archive a = read_bytes(header("././@LongLink", 'L', std::int64_t{1} << 30) + kEnd);
    REQUIRE(a.error);
    CHECK(a.error->message.find("extended header") != std::string::npos);
  }
  SUBCASE("sparse and multi-volume members are refused") {
    CHECK(error_of(read_bytes(header("s", 'S') + kEnd)).find("sparse") != std::string::npos);
    CHECK(error_of(read_bytes(header("m", 'M') + kEnd)).find("volume") != std::string::npos);
  }
}

TEST_CASE("tar reader: reads from a pipe") {
  std::string bytes = file("a", "alpha") + header("d", '5') + header("dev", '3') + file("b", std::string(700, 'b')) + kEnd;
  int p[2];
  REQUIRE(::pipe(p) == 0);
  REQUIRE(::write(p[1], bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));  // fits the pipe
  ::close(p[1]);
  Archive a = read_all(p[0], 3);
  ::close(p[0]);
  INFO(error_of(a));
  REQUIRE(a.members.size() == 4);
  CHECK(a.members[0].data == "alpha");
  CHECK(a.members[1].e.type == Type::dir);
  CHECK(a.members[2].e.type == Type::other);
  CHECK(a.members[2].e.typeflag == '3');
  CHECK(a.members[3].data == std::string(700, 'b'));
}

TEST_CASE("tar reader: a member nested deeper than 256 directories is refused") {
  std::string deep;
  for (int i = 0; i < 300; ++i) deep += "d/";
  deep += "f";
  // A pax 'x' record carries the long name (over the 100 + 155 bytes of a ustar header).
  std::string rec = "path=" + deep + "\n";
  std::string len = std::to_string(rec.size() + 4);
  rec = std::to_string(rec.size() + len.size() + 1) + " " + rec;
  auto header = [](const std::string& name, char type, std::size_t size) {
    std::string h(512, '\0');
    std::memcpy(&h[0], name.data(), std::min<std::size_t>(name.size(), 99));
    std::snprintf(&h[100], 8, "%07o", 0644);
    std::snprintf(&h[124], 12, "%011llo", static_cast<unsigned long long>(size));
    std::snprintf(&h[136], 12, "%011o", 0);
    h[156] = type;
    std::memcpy(&h[257], "ustar\0" "00", 8);
    std::memset(&h[148], ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(&h[148], 8, "%06o", sum);
    return h;
  };
  std::string tar = header("pax", 'x', rec.size()) + rec + std::string((512 - rec.size() % 512) % 512, '\0') +
                    header("f", '0', 0) + std::string(1024, '\0');
  Archive a = read_bytes(tar);
  REQUIRE(a.error);
  CHECK(a.error->message.find("more than 256 components") != std::string::npos);
}
