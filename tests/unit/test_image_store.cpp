#include <doctest/doctest.h>

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "runtime/image/artifact_export.hpp"
#include "runtime/image/image_manifest.hpp"
#include "runtime/image/image_seal.hpp"
#include "runtime/image/image_store.hpp"
#include "tests/unit/test_util.hpp"

namespace {

using sbx::test::TempDir;

void write(const std::string& path, const std::string& content, mode_t mode = 0644) {
  std::ofstream(path) << content;
  ::chmod(path.c_str(), mode);
}

// A small tree with the kinds of entries an image holds.
void make_tree(const std::string& root) {
  ::mkdir((root + "/bin").c_str(), 0755);
  ::mkdir((root + "/etc").c_str(), 0755);
  write(root + "/bin/tool", "#!/bin/sh\necho hi\n", 04755);  // setuid: must be cleared
  write(root + "/etc/passwd", "root:x:0:0::/root:/bin/sh\n", 0666);  // world-writable: must be cleared
  ::symlink("/bin/tool", (root + "/bin/alias").c_str());
  ::link((root + "/bin/tool").c_str(), (root + "/bin/hard").c_str());
  ::mkfifo((root + "/etc/fifo").c_str(), 0644);  // dropped
}

}  // namespace

TEST_CASE("manifest lines escape names so every entry is one unambiguous line") {
  sbx::TreeEntry e{"dir/a b\nc\\\xff", sbx::TreeEntry::Type::file, 0644, 3, "abc"};
  CHECK(sbx::manifest_line(e) == "dir/a\\x20b\\x0ac\\x5c\\xff\tfile\t0644\t3\tabc\n");
  sbx::TreeEntry l{"link", sbx::TreeEntry::Type::symlink, 0777, 4, "../x"};
  CHECK(sbx::manifest_line(l) == "link\tsymlink\t0777\t4\t../x\n");
}

TEST_CASE("scan_tree is independent of mtimes and creation order, and skips special files") {
  TempDir a, b;
  ::mkdir((a.path + "/d").c_str(), 0755);
  write(a.path + "/d/x", "one");
  write(a.path + "/y", "two");
  // b: same content, created in the other order, with other mtimes.
  write(b.path + "/y", "two");
  ::mkdir((b.path + "/d").c_str(), 0755);
  write(b.path + "/d/x", "one");
  struct timespec ts[2] = {{0, UTIME_OMIT}, {1000, 0}};
  ::utimensat(AT_FDCWD, (b.path + "/d/x").c_str(), ts, 0);
  ::mkfifo((b.path + "/fifo").c_str(), 0644);
  auto sa = sbx::scan_tree(a.path), sb = sbx::scan_tree(b.path);
  REQUIRE(sa);
  REQUIRE(sb);
  CHECK(sbx::manifest_text(sa->entries) == sbx::manifest_text(sb->entries));
  REQUIRE(sb->skipped.size() == 1);
  CHECK(sb->skipped[0].why == "fifo");
  CHECK(sa->bytes == 6);
}

TEST_CASE("import normalises, dedups by digest, and the seal catches a modified file") {
  TempDir src, store_dir;
  make_tree(src.path);
  sbx::ImageStore store(store_dir.path + "/images");
  auto r = store.import(src.path, "tiny", {});
  REQUIRE_MESSAGE(r, (r ? "" : r.error().describe()));
  CHECK(r->names == std::vector<std::string>{"tiny:latest"});
  CHECK(r->meta["normalised"]["dropped"] == 1);
  CHECK(r->meta["normalised"]["special_bits_cleared"] == 1);
  struct stat st;
  REQUIRE(::lstat((r->rootfs + "/bin/tool").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0555);  // setuid and write bits gone, read/exec kept
  REQUIRE(::lstat((r->rootfs + "/etc/passwd").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0444);
  struct stat hard;
  REQUIRE(::lstat((r->rootfs + "/bin/hard").c_str(), &hard) == 0);
  REQUIRE(::lstat((r->rootfs + "/bin/tool").c_str(), &st) == 0);
  CHECK(hard.st_ino == st.st_ino);  // hard links stay links
  CHECK(::access((r->rootfs + "/etc/fifo").c_str(), F_OK) != 0);

  // The same content under another name: one image, two names.
  auto again = store.import(src.path, "tiny:v2", {});
  REQUIRE(again);
  CHECK(again->digest == r->digest);
  CHECK(again->names.size() == 2);
  auto listed = store.list();
  REQUIRE(listed);
  CHECK(listed->size() == 1);

  // References: name, name:tag, digest prefix; bad ones are errors.
  CHECK(store.resolve("tiny")->digest == r->digest);
  CHECK(store.resolve(r->digest.substr(0, 15))->digest == r->digest);
  CHECK_FALSE(store.resolve("nope"));
  CHECK_FALSE(store.resolve("Bad Name"));
  CHECK_FALSE(store.resolve("sha256:zz"));

  CHECK(store.check_seal(*r));
  auto v = store.verify(*r, true);
  REQUIRE(v);
  CHECK(v->ok());

  // Tamper: change a file's content in place, then put its mtime back.
  std::string victim = r->rootfs + "/etc/passwd";
  REQUIRE(::lstat(victim.c_str(), &st) == 0);
  ::chmod(victim.c_str(), 0644);
  write(victim, "root:x:0:0::/root:/bin/evil\n", 0444);
  struct timespec back[2] = {{0, UTIME_OMIT}, st.st_mtim};
  ::utimensat(AT_FDCWD, victim.c_str(), back, 0);
  auto sealed = store.check_seal(*r);
  CHECK_FALSE(sealed);
  if (!sealed) CHECK(sealed.error().message.find("was modified in the store") != std::string::npos);
  auto full = store.verify(*r, true);
  REQUIRE(full);
  CHECK_FALSE(full->content_ok);
  REQUIRE(full->differences.size() == 1);
  CHECK(full->differences[0] == "changed: etc/passwd");

  // rm by name keeps the image while another name points at it; the last name takes it along.
  auto rm1 = store.remove("tiny:v2");
  REQUIRE(rm1);
  CHECK(::access(r->rootfs.c_str(), F_OK) == 0);
  auto rm2 = store.remove("tiny");
  REQUIRE(rm2);
  CHECK(rm2->back() == "deleted " + r->digest);
  CHECK(::access(r->dir.c_str(), F_OK) != 0);
}

TEST_CASE("image names: name[:tag] with a default tag, strict characters") {
  CHECK(*sbx::canonical_image_name("busybox") == "busybox:latest");
  CHECK(*sbx::canonical_image_name("debian:bookworm-python3") == "debian:bookworm-python3");
  CHECK_FALSE(sbx::canonical_image_name("../x"));
  CHECK_FALSE(sbx::canonical_image_name("a/b"));
  CHECK_FALSE(sbx::canonical_image_name("x:"));
  CHECK_FALSE(sbx::canonical_image_name("sha256:abc"));
  // "host" means the host's own root: no stored image may take the name, with any tag.
  for (const char* reserved : {"host", "host:latest", "host:v1"}) {
    auto r = sbx::canonical_image_name(reserved);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("reserved") != std::string::npos);
  }
  CHECK(*sbx::canonical_image_name("hostile") == "hostile:latest");
}

TEST_CASE("import sources: '-' is stdin, PATH:TAG only where PATH exists and PATH:TAG does not") {
  TempDir t;
  ::mkdir((t.path + "/layout").c_str(), 0755);
  ::mkdir((t.path + "/dir:v1").c_str(), 0755);
  auto s = sbx::parse_import_source("-");
  CHECK((s.from_stdin && s.tag.empty()));
  s = sbx::parse_import_source("-:v2");
  CHECK((s.from_stdin && s.tag == "v2"));
  s = sbx::parse_import_source(t.path + "/layout:v1");
  CHECK((!s.from_stdin && s.path == t.path + "/layout" && s.tag == "v1"));
  s = sbx::parse_import_source(t.path + "/dir:v1");  // exists as given: a path with a ':'
  CHECK((s.path == t.path + "/dir:v1" && s.tag.empty()));
  s = sbx::parse_import_source(t.path + "/missing:v1");  // neither exists: the path as given, for its error
  CHECK((s.path == t.path + "/missing:v1" && s.tag.empty()));
  s = sbx::parse_import_source(t.path + "/layout:");
  CHECK((s.path == t.path + "/layout:" && s.tag.empty()));
}

TEST_CASE("export copies regular files and directories only, under caps, never following links") {
  TempDir out, dest_parent;
  ::mkdir((out.path + "/sub").c_str(), 0755);
  write(out.path + "/a.txt", "alpha");
  write(out.path + "/sub/b.txt", "bravo");
  ::symlink("/etc/passwd", (out.path + "/link").c_str());
  ::symlink("..", (out.path + "/up").c_str());
  ::mkfifo((out.path + "/fifo").c_str(), 0644);
  write(out.path + std::string("/bad\nname"), "x");
  write(out.path + std::string("/bad\xff"), "x");
  int fd = ::open(out.path.c_str(), O_PATH | O_DIRECTORY);
  REQUIRE(fd >= 0);
  std::string dest = dest_parent.path + "/dest";
  REQUIRE(sbx::prepare_export_dir(dest));
  auto r = sbx::export_out(fd, dest, {1 << 20, 100});
  REQUIRE(r);
  CHECK_FALSE(r->limit_hit);
  CHECK(r->files.size() == 2);
  CHECK(r->skipped_count == 5);
  std::ifstream a(dest + "/a.txt");
  std::string got((std::istreambuf_iterator<char>(a)), {});
  CHECK(got == "alpha");
  CHECK(::access((dest + "/link").c_str(), F_OK) != 0);
  CHECK(::access((dest + "/sub/b.txt").c_str(), F_OK) == 0);

  // A non-empty destination is refused before the run.
  CHECK_FALSE(sbx::prepare_export_dir(dest));

  // Caps: one file's worth of bytes.
  std::string dest2 = dest_parent.path + "/dest2";
  REQUIRE(sbx::prepare_export_dir(dest2));
  auto capped = sbx::export_out(fd, dest2, {5, 100});
  REQUIRE(capped);
  CHECK(capped->limit_hit);
  CHECK(capped->bytes == 5);
  ::close(fd);
}

TEST_CASE("display_name keeps valid UTF-8 and escapes the rest") {
  CHECK(sbx::display_name("caf\xc3\xa9") == "caf\xc3\xa9");
  CHECK(sbx::display_name("a\nb") == "a\\x0ab");
  CHECK(sbx::display_name("\xff") == "\\xff");
  CHECK(sbx::safe_name("caf\xc3\xa9"));
  CHECK_FALSE(sbx::safe_name("\xc0\xaf"));  // overlong '/'
  CHECK_FALSE(sbx::safe_name("a\tb"));
  // C1 controls and format characters are valid UTF-8 but act on a terminal: refused, and shown escaped.
  CHECK_FALSE(sbx::safe_name("a\xc2\x9b" "b"));      // U+009B CSI
  CHECK_FALSE(sbx::safe_name("a\xe2\x80\xae" "b"));  // U+202E right-to-left override
  CHECK_FALSE(sbx::safe_name("\xe2\x81\xa6"));       // U+2066 left-to-right isolate
  CHECK(sbx::safe_name("\xc2\xa0"));                  // U+00A0 no-break space: printable
  CHECK(sbx::display_name("a\xc2\x9b" "b") == "a\\u009bb");
  CHECK(sbx::display_name("\xe2\x80\xae") == "\\u202e");
}

TEST_CASE("an import cleans up staging directories that killed imports and removals left") {
  TempDir src, store_dir;
  make_tree(src.path);
  std::string tmp = store_dir.path + "/images/tmp";
  std::system(("mkdir -p '" + tmp + "/import-999999999-abcdef/rootfs' '" + tmp + "/rm-0123/x' '" + tmp + "/import-" +
               std::to_string(::getpid()) + "-live'").c_str());
  sbx::ImageStore store(store_dir.path + "/images");
  REQUIRE(store.import(src.path, "tiny", {}));
  CHECK(::access((tmp + "/import-999999999-abcdef").c_str(), F_OK) != 0);  // no such process
  CHECK(::access((tmp + "/rm-0123").c_str(), F_OK) != 0);
  CHECK(::access((tmp + "/import-" + std::to_string(::getpid()) + "-live").c_str(), F_OK) == 0);  // alive: kept
}

TEST_CASE("verify --full reports its hashing progress: every entry and all the bytes, in order") {
  TempDir src, store_dir;
  make_tree(src.path);
  write(src.path + "/big", std::string(3 << 20, 'x'));  // several hash chunks
  sbx::ImageStore store(store_dir.path + "/images");
  auto r = store.import(src.path, "tiny", {});
  REQUIRE_MESSAGE(r, (r ? "" : r.error().describe()));
  std::vector<std::pair<std::int64_t, std::int64_t>> calls;
  auto v = store.verify(*r, true, [&](const char* phase, std::int64_t entries, std::int64_t bytes) {
    CHECK(std::string(phase) == "hashing");
    calls.emplace_back(entries, bytes);
  });
  REQUIRE(v);
  CHECK(v->ok());
  REQUIRE(calls.size() > 2);
  for (std::size_t i = 1; i < calls.size(); ++i) {
    CHECK(calls[i].first >= calls[i - 1].first);
    CHECK(calls[i].second >= calls[i - 1].second);
  }
  CHECK(calls.back().first == r->meta["entries"].get<std::int64_t>());
  CHECK(calls.back().second == r->meta["bytes"].get<std::int64_t>());
  // Without --full nothing is hashed and nothing reported.
  calls.clear();
  REQUIRE(store.verify(*r, false, [&](const char*, std::int64_t e, std::int64_t b) { calls.emplace_back(e, b); }));
  CHECK(calls.empty());
}

TEST_CASE("a file that grows while a directory is imported stops the copy at the byte limit") {
  // The size checked before the copy (stat) is under the limit; the file grows by 200 MiB once
  // the copy has started (appended from the progress callback, which the copy calls after each
  // chunk: deterministic, no racing writer). The copy must stop at the first chunk past the
  // limit, not copy whatever the file became and complain afterwards.
  TempDir src, dst;
  const std::string file = src.path + "/growing";
  write(file, std::string(1 << 20, 'a'));
  bool grown = false;
  auto grow = [&](const char*, std::int64_t, std::int64_t bytes) {
    if (grown || bytes == 0) return;
    grown = true;
    int fd = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    REQUIRE(fd >= 0);
    std::string chunk(1 << 20, 'b');
    for (int i = 0; i < 200; ++i) REQUIRE(::write(fd, chunk.data(), chunk.size()) == static_cast<ssize_t>(chunk.size()));
    ::close(fd);
  };
  sbx::ImportLimits limits;
  limits.max_bytes = 8 << 20;
  auto r = sbx::populate_from_dir(src.path, dst.path, grow, limits);
  CHECK(grown);
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("--max-bytes") != std::string::npos);
  struct stat copied;
  REQUIRE(::stat((dst.path + "/growing").c_str(), &copied) == 0);
  // At most one chunk (64 MiB, copy_file_range's request) past the limit, not the 201 MiB.
  CHECK(copied.st_size <= limits.max_bytes + (std::int64_t{64} << 20));
}
