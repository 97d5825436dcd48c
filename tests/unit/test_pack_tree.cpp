// runtime/typed/pack_tree: the bounded, streaming reader of packs and contexts; opens that never
// follow a link nor block on a FIFO and check what was opened; the private copy a run mounts.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "runtime/base/sha256.hpp"
#include "runtime/linux/cgroup.hpp"
#include "runtime/typed/pack.hpp"
#include "runtime/typed/pack_tree.hpp"

namespace fs = std::filesystem;

namespace {

struct Tmp {
  std::string dir;
  Tmp() {
    char t[] = "/tmp/sbx-unit-tree-XXXXXX";
    dir = ::mkdtemp(t);
  }
  ~Tmp() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string write(const std::string& rel, const std::string& text, mode_t mode = 0644) {
    std::string p = dir + "/" + rel;
    fs::create_directories(fs::path(p).parent_path());
    std::ofstream(p) << text;
    ::chmod(p.c_str(), mode);
    return p;
  }
};

std::string contains_error(const sbx::Error& e) { return e.message; }

}  // namespace

TEST_CASE("hash_copy_bounded: hashes and copies exactly what it read, within its bounds") {
  Tmp t;
  std::string src = t.write("a", std::string(200000, 'x'));
  sbx::UniqueFd in(::open(src.c_str(), O_RDONLY | O_CLOEXEC));
  std::string dst = t.dir + "/copy";
  sbx::UniqueFd out(::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  sbx::Sha256 h;
  auto n = sbx::hash_copy_bounded(in.get(), out.get(), 200000, 1 << 20, h, "a");
  REQUIRE(n.ok());
  CHECK(*n == 200000);
  CHECK(h.final_hex() == sbx::sha256_hex(std::string(200000, 'x')));
  CHECK(fs::file_size(dst) == 200000);

  SUBCASE("a file past the cap is refused, naming the cap") {
    ::lseek(in.get(), 0, SEEK_SET);
    sbx::Sha256 h2;
    auto r = sbx::hash_copy_bounded(in.get(), -1, 200000, 1000, h2, "a");
    REQUIRE_FALSE(r.ok());
    CHECK(contains_error(r.error()).find("larger than") != std::string::npos);
  }
  SUBCASE("a file longer or shorter than stat said changed while it was read") {
    ::lseek(in.get(), 0, SEEK_SET);
    sbx::Sha256 h2, h3;
    auto longer = sbx::hash_copy_bounded(in.get(), -1, 100, 1 << 20, h2, "a");
    REQUIRE_FALSE(longer.ok());
    CHECK(longer.error().message.find("changed while it was read") != std::string::npos);
    ::lseek(in.get(), 0, SEEK_SET);
    auto shorter = sbx::hash_copy_bounded(in.get(), -1, 300000, 1 << 20, h3, "a");
    REQUIRE_FALSE(shorter.ok());
    CHECK(shorter.error().message.find("changed while it was read") != std::string::npos);
  }
}

TEST_CASE("hash_copy_bounded: an endless source is read one byte past what stat said, no further") {
  sbx::UniqueFd zero(::open("/dev/zero", O_RDONLY | O_CLOEXEC));
  REQUIRE(zero.ok());
  sbx::Sha256 h;
  auto r = sbx::hash_copy_bounded(zero.get(), -1, 0, sbx::kMaxPackBytes, h, "zero");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("changed while it was read") != std::string::npos);
  sbx::Sha256 h2;
  auto big = sbx::hash_copy_bounded(zero.get(), -1, std::int64_t{2} << 30, 4096, h2, "zero");
  REQUIRE_FALSE(big.ok());
  CHECK(big.error().message.find("larger than") != std::string::npos);
}

TEST_CASE("open_regular_at refuses a symlink, a FIFO (without blocking) and a swapped file") {
  Tmp t;
  t.write("f", "data");
  struct stat st;
  REQUIRE(::lstat((t.dir + "/f").c_str(), &st) == 0);
  sbx::UniqueFd dir(::open(t.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  CHECK(sbx::open_regular_at(dir.get(), "f", st, "f").ok());
  // Swapped: another file renamed over it after the listing.
  t.write("g", "evil");
  REQUIRE(::rename((t.dir + "/g").c_str(), (t.dir + "/f").c_str()) == 0);
  auto swapped = sbx::open_regular_at(dir.get(), "f", st, "f");
  REQUIRE_FALSE(swapped.ok());
  CHECK(swapped.error().message.find("replaced") != std::string::npos);
  // A symlink to /dev/zero is not followed.
  REQUIRE(::symlink("/dev/zero", (t.dir + "/l").c_str()) == 0);
  auto link = sbx::open_regular_at(dir.get(), "l", st, "l");
  REQUIRE_FALSE(link.ok());
  CHECK(link.error().message.find("symlink") != std::string::npos);
  // A FIFO with no writer: the open does not block, and it is refused.
  REQUIRE(::mkfifo((t.dir + "/p").c_str(), 0644) == 0);
  auto fifo = sbx::open_regular_at(dir.get(), "p", st, "p");
  REQUIRE_FALSE(fifo.ok());
  CHECK(fifo.error().message.find("fifo") != std::string::npos);
}

TEST_CASE("hash_tree: a sparse file past the bound is refused before a byte is read") {
  Tmp t;
  t.write("run.sh", "echo hi\n");
  std::string big = t.dir + "/big";
  sbx::UniqueFd fd(::open(big.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  REQUIRE(::ftruncate(fd.get(), std::int64_t{2} << 30) == 0);
  auto r = sbx::hash_tree(t.dir, "", "pack " + t.dir, sbx::kPackBoundsHint);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("more than 64M of file data") != std::string::npos);
  CHECK(r.error().message.find("big") != std::string::npos);
  CHECK(r.error().message.find("pack " + t.dir) == 0);
}

TEST_CASE("hash_tree: too many entries, too deep, special files") {
  Tmp t;
  // Built with append: GCC 12 warns falsely (-Wrestrict) about "f" + to_string(i).
  for (std::size_t i = 0; i <= sbx::kMaxPackEntries; ++i) t.write(std::string("f").append(std::to_string(i)), "");
  auto many = sbx::hash_tree(t.dir, "", "pack p", sbx::kPackBoundsHint);
  REQUIRE_FALSE(many.ok());
  CHECK(many.error().message.find("more than " + std::to_string(sbx::kMaxPackEntries) + " files and directories") !=
        std::string::npos);

  Tmp d;
  std::string rel = "d";
  for (int i = 0; i < sbx::kMaxPackDepth; ++i) rel += "/d";
  d.write(rel + "/f", "x");
  auto deep = sbx::hash_tree(d.dir, "", "pack p", sbx::kPackBoundsHint);
  REQUIRE_FALSE(deep.ok());
  CHECK(deep.error().message.find("nested deeper") != std::string::npos);

  Tmp f;
  REQUIRE(::mkfifo((f.dir + "/p").c_str(), 0644) == 0);
  auto fifo = sbx::hash_tree(f.dir, "", "pack p", sbx::kPackBoundsHint);
  REQUIRE_FALSE(fifo.ok());
  CHECK(fifo.error().message.find("only regular files and directories") != std::string::npos);
}

TEST_CASE("hash_tree with a copy: the copy has the digest taken, and nobody else may write it") {
  Tmp t;
  t.write("run.sh", "echo hi\n", 0775);
  t.write("schemas/in.json", "{}", 0666);
  ::chmod((t.dir + "/schemas").c_str(), 0555);
  std::string copy = t.dir + "-copy";
  auto d = sbx::hash_tree(t.dir, copy, "pack p", sbx::kPackBoundsHint);
  auto source = sbx::pack_digest(t.dir);
  ::chmod((t.dir + "/schemas").c_str(), 0755);
  REQUIRE_MESSAGE(d.ok(), d.error().message);
  CHECK(*d == *source);  // the same digest as the source's
  // ...which names the modes as mounted (in.json is 0666 in the source, 0644 in the copy): the
  // copy's own digest is the same, as a replay's tree rebuilt from the copy's blobs is.
  auto again = sbx::pack_digest(copy);
  struct stat st;
  REQUIRE(::stat((copy + "/run.sh").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0755);
  REQUIRE(::stat((copy + "/schemas/in.json").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0644);
  REQUIRE(::stat((copy + "/schemas").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0555);
  std::ifstream in(copy + "/run.sh");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text == "echo hi\n");
  REQUIRE(again.ok());
  CHECK(*again == *d);
  ::chmod((copy + "/schemas").c_str(), 0755);
  fs::remove_all(copy);

  SUBCASE("a single file (a context) is hashed as its content") {
    std::string file_copy = t.dir + "-file";
    auto f = sbx::hash_tree(t.dir + "/run.sh", file_copy, "context c", sbx::kPackBoundsHint);
    REQUIRE(f.ok());
    CHECK(*f == "sha256:" + sbx::sha256_hex("echo hi\n"));
    CHECK(fs::file_size(file_copy) == 8);
    fs::remove(file_copy);
  }
}

TEST_CASE("load_pack_copy: the pack is read from a private copy, removed with the last Pack") {
  Tmp t;
  t.write("schemas/in.json", R"({"type":"object"})");
  t.write("schemas/out.json", R"({"type":"object"})");
  t.write("run.sh", "echo hi\n");
  t.write("pack.json", R"({"name":"p","version":"1","entrypoint":["/bin/sh","/pack/run.sh"],
    "input_schema":"schemas/in.json","output_schema":"schemas/out.json"})");
  std::vector<sbx::PackProblem> problems;
  std::string copy_dir;
  Tmp state;
  {
    auto p = sbx::load_pack_copy(t.dir, state.dir, problems);
    REQUIRE_MESSAGE(p.ok(), (problems.empty() ? p.error().message : problems[0].describe()));
    CHECK(p->source_dir == fs::canonical(t.dir).string());
    CHECK(p->dir != p->source_dir);
    CHECK(p->digest == *sbx::pack_digest(t.dir));
    copy_dir = p->dir;
    // Changing the pack now changes nothing in the copy.
    t.write("run.sh", "echo evil\n");
    std::ifstream in(copy_dir + "/run.sh");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(text == "echo hi\n");
    CHECK(::access(copy_dir.c_str(), F_OK) == 0);
    // Under the state dir (guarded against rw binds), not $TMPDIR.
    CHECK(copy_dir.rfind(state.dir + "/tmp/pack-", 0) == 0);
  }
  CHECK(::access(copy_dir.c_str(), F_OK) != 0);
}

TEST_CASE("sweep_stale_copies: removes the copies of dead owners only") {
  Tmp state;
  std::string base = state.dir + "/tmp";
  fs::create_directories(base);
  std::string self = std::to_string(::getpid());
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto start = sbx::parse_stat_starttime(stat);
  REQUIRE(start);
  auto mk = [&](const std::string& n) {
    fs::create_directories(base + "/" + n + "/pack");
    std::ofstream(base + "/" + n + "/pack/run.sh") << "x";
  };
  mk("pack-" + self + "-" + std::to_string(*start) + "-live01");  // this process: in use
  mk("pack-" + self + "-1-reused");                                // same pid, another start: dead
  mk("context-999999999-5-dead01");                                // no such pid
  mk("other-999999999-5-keep01");                                  // not a copy's name
  CHECK(sbx::sweep_stale_copies(state.dir) == 2);
  CHECK(fs::exists(base + "/pack-" + self + "-" + std::to_string(*start) + "-live01"));
  CHECK(!fs::exists(base + "/pack-" + self + "-1-reused"));
  CHECK(!fs::exists(base + "/context-999999999-5-dead01"));
  CHECK(fs::exists(base + "/other-999999999-5-keep01"));
}

TEST_CASE("load_pack never follows a link to its manifest or schemas") {
  Tmp t;
  t.write("schemas/out.json", R"({"type":"object"})");
  t.write("pack.json", R"({"name":"p","version":"1","entrypoint":["/bin/sh"],
    "input_schema":"schemas/in.json","output_schema":"schemas/out.json"})");
  REQUIRE(::symlink("/dev/zero", (t.dir + "/schemas/in.json").c_str()) == 0);
  std::vector<sbx::PackProblem> problems;
  auto p = sbx::load_pack(t.dir, problems);
  CHECK_FALSE(p.ok());
}
