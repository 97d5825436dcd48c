#include <doctest/doctest.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "runtime/record/ledger_key.hpp"

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
