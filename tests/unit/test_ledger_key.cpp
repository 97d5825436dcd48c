#include <doctest/doctest.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "runtime/record/ledger_key.hpp"
#include "runtime/record/trace_ledger.hpp"

namespace {

struct TempKeyDir {
  std::string root;
  sbx::LedgerKeyPaths paths;
  TempKeyDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/sbx-key-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    root = tmpl;
    paths.dir = root + "/sbx";
    paths.priv = paths.dir + "/ledger-key.pem";
    paths.pub = paths.dir + "/ledger-key.pub.pem";
  }
  ~TempKeyDir() { std::system(("rm -rf '" + root + "'").c_str()); }
};

}  // namespace

TEST_CASE("a public key another user can replace is refused, with the fix") {
  TempKeyDir d;
  REQUIRE(sbx::create_ledger_key(d.paths).ok());
  REQUIRE(::chmod(d.paths.pub.c_str(), 0644) == 0);
  CHECK(sbx::LedgerVerifier::load(d.paths.pub).ok());
  // Group- or world-writable: whoever can write it swaps in their own key and signs what they like.
  for (mode_t m : {0664, 0646, 0666}) {
    REQUIRE(::chmod(d.paths.pub.c_str(), m) == 0);
    auto v = sbx::LedgerVerifier::load(d.paths.pub);
    REQUIRE_FALSE(v.ok());
    CHECK(v.error().message.find("chmod 644") != std::string::npos);
  }
  REQUIRE(::chmod(d.paths.pub.c_str(), 0644) == 0);
  // A symlink to it is not followed (O_NOFOLLOW): what is checked is what is read.
  std::string link = d.root + "/link.pem";
  REQUIRE(::symlink(d.paths.pub.c_str(), link.c_str()) == 0);
  CHECK_FALSE(sbx::LedgerVerifier::load(link).ok());
  // Owned by another user (neither sbx's user nor root): only checkable where the test may chown.
  if (::geteuid() == 0) {
    REQUIRE(::chown(d.paths.pub.c_str(), 65534, 65534) == 0);
    auto v = sbx::LedgerVerifier::load(d.paths.pub);
    REQUIRE_FALSE(v.ok());
    CHECK(v.error().message.find("belongs to uid 65534") != std::string::npos);
  }
}

// `sbx key init` on a store with runs: the lines before the key are unsigned. Verification starts
// where signing started; a signature stripped from a later line is still a break.
TEST_CASE("trace verify --pubkey: unsigned lines before signing began are counted, a stripped one after is a break") {
  TempKeyDir d;
  REQUIRE(sbx::create_ledger_key(d.paths).ok());
  auto signer = sbx::LedgerSigner::load(d.paths.priv);
  REQUIRE(signer.ok());
  auto verifier = sbx::LedgerVerifier::load(d.paths.pub);
  REQUIRE(verifier.ok());
  sbx::Dirs dirs;
  dirs.state = d.root + "/state";
  dirs.traces = dirs.state + "/traces";
  auto rec = [](const std::string& id) { return R"({"run_id":")" + id + R"(","schema":"sbx.trace/v1"})"; };
  REQUIRE(sbx::ledger_append(dirs, "r1", rec("r1")).ok());
  REQUIRE(sbx::ledger_append(dirs, "r2", rec("r2")).ok());
  // Only unsigned lines: nothing ties them to the key.
  auto none = sbx::verify_ledger(dirs, std::nullopt, &*verifier);
  REQUIRE(none.ok());
  CHECK_FALSE(none->intact);
  CHECK(none->problem.find("no line is signed") != std::string::npos);

  REQUIRE(sbx::ledger_append(dirs, "r3", rec("r3"), &*signer).ok());
  REQUIRE(sbx::ledger_append(dirs, "r4", rec("r4"), &*signer).ok());
  auto v = sbx::verify_ledger(dirs, std::nullopt, &*verifier);
  REQUIRE(v.ok());
  CHECK(v->intact);
  CHECK(v->records == 4);
  CHECK(v->unsigned_before_signing == 2);
  CHECK(v->signed_records == 2);

  // Strip the last line's "sig" (the hash does not cover it, so the chain alone would not notice).
  std::string path = sbx::ledger_path(dirs);
  std::string text;
  {
    FILE* f = std::fopen(path.c_str(), "rb");
    REQUIRE(f != nullptr);
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    std::fclose(f);
  }
  auto last = text.rfind(",\"sig\":\"");
  REQUIRE(last != std::string::npos);
  auto end = text.find('"', last + 8);
  text.erase(last, end + 1 - last);
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  auto stripped = sbx::verify_ledger(dirs, std::nullopt, &*verifier);
  REQUIRE(stripped.ok());
  CHECK_FALSE(stripped->intact);
  CHECK(stripped->problem.find("seq 4: not signed") != std::string::npos);
}
