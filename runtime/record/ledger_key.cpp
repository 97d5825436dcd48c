#include "runtime/record/ledger_key.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "runtime/base/paths.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/sha256.hpp"

namespace sbx {
namespace {

constexpr const char* kStage = "key";
constexpr std::size_t kMaxKeyFile = 16 * 1024;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using Bio = std::unique_ptr<BIO, BioFree>;

// Before any key parsing: libcrypto would otherwise read openssl.cnf, which may load code from
// outside the static binary (see runtime/base/sha256.cpp).
void no_config() { OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG, nullptr); }

// A private key anyone but its user can write (or read) is a key someone else may have replaced
// (or copied): records signed with it prove nothing, so it is refused, not used quietly. What was
// opened is checked (fstat), not the name.
Status check_private_key_file(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return sys_error(kStage, "cannot stat key " + path);
  if (!S_ISREG(st.st_mode)) return make_error(kStage, "private key " + path + " is not a regular file");
  if (st.st_uid != ::geteuid())
    return make_error(kStage, "private key " + path + " belongs to uid " + std::to_string(st.st_uid) +
                                  ", not to sbx's user (uid " + std::to_string(::geteuid()) +
                                  "): its owner can replace it; fix: chown " + std::to_string(::geteuid()) + " " +
                                  path + " (if the key is yours), or make a new one");
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return make_error(kStage, "private key " + path + " has mode " + mode + ": other users can " +
                                  (st.st_mode & 022 ? "replace" : "read") +
                                  " it, so a signature made with it proves nothing; "
                                  "fix: chmod 600 " +
                                  path +
                                  (st.st_mode & 022 ? " (and make a new key if others may have written it)" : ""));
  }
  return {};
}

// A public key decides which signatures are accepted (replay, 'trace verify --pubkey'): whoever
// can replace the file swaps in a key of their own and signs what they like. Like the private key
// (checked on what was opened), it must belong to sbx's user or root and be writable by no one else.
Status check_public_key_file(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return sys_error(kStage, "cannot stat key " + path);
  if (!S_ISREG(st.st_mode)) return make_error(kStage, "public key " + path + " is not a regular file");
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    return make_error(kStage, "public key " + path + " belongs to uid " + std::to_string(st.st_uid) +
                                  ", not to sbx's user (uid " + std::to_string(::geteuid()) +
                                  ") or root: its owner can replace it with a key of their own; fix: chown " +
                                  std::to_string(::geteuid()) + " " + path + " (after checking it is your key)");
  if (st.st_mode & 022) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return make_error(kStage, "public key " + path + " has mode " + mode +
                                  ": other users can replace it with a key of their own, "
                                  "so a signature it accepts proves nothing; fix: chmod 644 " +
                                  path + " (after checking it is your key)");
  }
  return {};
}

Result<std::string> read_key_file(const std::string& path, bool priv) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.ok()) return sys_error(kStage, "cannot open key " + path);
  SBX_TRY(priv ? check_private_key_file(fd.get(), path) : check_public_key_file(fd.get(), path));
  std::string text(kMaxKeyFile + 1, '\0');
  ssize_t n = ::read(fd.get(), text.data(), text.size());
  if (n < 0) return sys_error(kStage, "cannot read key " + path);
  if (static_cast<std::size_t>(n) > kMaxKeyFile)
    return make_error(kStage, "key " + path + " is larger than 16 KiB: not a key");
  text.resize(static_cast<std::size_t>(n));
  return text;
}

// `what` names the key in the error ("key /path", "the public key the trace database holds").
Result<Pkey> parse_key_text(const std::string& text, bool priv, const std::string& what) {
  no_config();
  if (text.size() > 64 * 1024) return make_error(kStage, what + " is over 64 KiB: not a key");
  Bio bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
  Pkey k(priv ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr)
              : PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr));
  if (!k || EVP_PKEY_get_id(k.get()) != EVP_PKEY_ED25519)
    return make_error(kStage, what + " is not an Ed25519 " + (priv ? "private" : "public") + " key in PEM");
  return k;
}

Result<Pkey> parse_key(const std::string& path, bool priv) {
  no_config();
  auto text = read_key_file(path, priv);
  if (!text) return text.error();
  return parse_key_text(*text, priv, "key " + path);
}

// A public key's fingerprint: the sha256 of its raw 32 bytes, as `sbx key init` prints it.
Result<std::string> fingerprint_of(EVP_PKEY* k) {
  unsigned char raw[32];
  std::size_t len = sizeof raw;
  if (EVP_PKEY_get_raw_public_key(k, raw, &len) != 1)
    return make_error(kStage, "libcrypto cannot export the public key");
  return sha256_hex(std::string_view(reinterpret_cast<const char*>(raw), len));
}

Result<std::string> pem_of(EVP_PKEY* k, bool priv) {
  Bio bio(BIO_new(BIO_s_mem()));
  int ok = priv ? PEM_write_bio_PrivateKey(bio.get(), k, nullptr, nullptr, 0, nullptr, nullptr)
                : PEM_write_bio_PUBKEY(bio.get(), k);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  if (ok != 1 || n <= 0) return make_error(kStage, "libcrypto cannot encode the key as PEM");
  return std::string(data, static_cast<std::size_t>(n));
}

Status write_new(const std::string& path, const std::string& text, mode_t mode) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode));
  if (!fd.ok()) return sys_error(kStage, "cannot create " + path);
  SBX_TRY(write_all(fd.get(), text, path));
  if (::fsync(fd.get()) != 0) return sys_error(kStage, "cannot sync " + path);
  return {};
}

}  // namespace

void PkeyFree::operator()(evp_pkey_st* k) const { EVP_PKEY_free(k); }

Result<LedgerKeyPaths> ledger_key_paths() {
  LedgerKeyPaths p;
  p.dir = user_config_dir();
  if (p.dir.empty()) return make_error(kStage, "no config dir: neither XDG_CONFIG_HOME nor HOME is set");
  p.priv = p.dir + "/ledger-key.pem";
  p.pub = p.dir + "/ledger-key.pub.pem";
  return p;
}

Result<std::string> cache_mac_secret() {
  auto p = ledger_key_paths();
  if (!p) return p.error();
  const std::string path = p->dir + "/cache-mac.key";
  constexpr std::size_t kLen = 32;
  auto read_secret = [&]() -> Result<std::string> {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd.ok()) return sys_error(kStage, "cannot open " + path);
    SBX_TRY(check_private_key_file(fd.get(), path));
    char buf[kLen + 1];
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n != static_cast<ssize_t>(kLen))
      return make_error(kStage, path + " is not a 32-byte secret: remove it (sbx makes a new one)");
    return Result<std::string>(std::string(buf, kLen));
  };
  if (::access(path.c_str(), F_OK) == 0) return read_secret();
  SBX_TRY(ensure_dir(p->dir, 0700));
  unsigned char raw[kLen];
  if (::getrandom(raw, sizeof raw, 0) != static_cast<ssize_t>(sizeof raw)) return sys_error(kStage, "getrandom");
  // Written whole under a private name, then linked into place: a concurrent first run either
  // wins or reads the winner's complete file.
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd.ok()) return sys_error(kStage, "cannot create " + tmp);
    Status w = write_all(fd.get(), std::string_view(reinterpret_cast<const char*>(raw), sizeof raw), tmp);
    if (!w) {
      ::unlink(tmp.c_str());
      return w.error();
    }
  }
  int linked = ::link(tmp.c_str(), path.c_str());
  int err = errno;
  ::unlink(tmp.c_str());
  if (linked != 0 && err != EEXIST) return make_error(kStage, "cannot create " + path, err);
  return read_secret();
}

Result<std::string> create_ledger_key(const LedgerKeyPaths& p) {
  if (::access(p.priv.c_str(), F_OK) == 0)
    return make_error(kStage, "a ledger key exists already at " + p.priv + "; remove it first to make a new one");
  SBX_TRY(ensure_dir(p.dir, 0700));
  no_config();
  Pkey k(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"));
  if (!k) return make_error(kStage, "libcrypto cannot make an Ed25519 key");
  auto priv = pem_of(k.get(), true);
  if (!priv) return priv.error();
  auto pub = pem_of(k.get(), false);
  if (!pub) return pub.error();
  // The public key first: a private key without its public half would sign what nobody can check.
  ::unlink(p.pub.c_str());
  SBX_TRY(write_new(p.pub, *pub, 0644));
  SBX_TRY(write_new(p.priv, *priv, 0600));
  return fingerprint_of(k.get());
}

Result<std::optional<LedgerSigner>> LedgerSigner::load_default() {
  auto p = ledger_key_paths();
  if (!p) return std::optional<LedgerSigner>{};  // no config dir: no key
  struct stat st;
  if (::lstat(p->priv.c_str(), &st) != 0) {
    // EACCES: a config dir this user cannot search is not this user's (HOME still naming
    // another user's home, as under a plain `su`): no key of its own can be there.
    if (errno == ENOENT || errno == EACCES) return std::optional<LedgerSigner>{};
    return sys_error(kStage, "cannot stat the ledger key " + p->priv);
  }
  auto s = load(p->priv);
  if (!s) return s.error();
  return std::optional<LedgerSigner>(std::move(*s));
}

Result<LedgerSigner> LedgerSigner::load(const std::string& path) {
  auto k = parse_key(path, true);
  if (!k) return k.error();
  LedgerSigner s;
  s.key_ = std::move(*k);
  return s;
}

std::string LedgerSigner::sign(std::string_view message) const {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  unsigned char sig[64];
  std::size_t len = sizeof sig;
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key_.get()) != 1 ||
      EVP_DigestSign(ctx.get(), sig, &len, reinterpret_cast<const unsigned char*>(message.data()), message.size()) !=
          1) {
    std::fprintf(stderr, "sbx: libcrypto: Ed25519 signing failed\n");
    std::abort();
  }
  unsigned char b64[4 * ((sizeof sig + 2) / 3) + 1];
  int n = EVP_EncodeBlock(b64, sig, static_cast<int>(len));
  return std::string(reinterpret_cast<const char*>(b64), static_cast<std::size_t>(n));
}

Result<LedgerVerifier> LedgerVerifier::load(const std::string& pubkey_path) {
  auto k = parse_key(pubkey_path, false);
  if (!k) return k.error();
  LedgerVerifier v;
  v.key_ = std::move(*k);
  return v;
}

Result<LedgerVerifier> LedgerVerifier::from_pem(const std::string& pem, const std::string& what) {
  auto k = parse_key_text(pem, false, what);
  if (!k) return k.error();
  LedgerVerifier v;
  v.key_ = std::move(*k);
  return v;
}

Result<std::string> LedgerSigner::public_pem() const { return pem_of(key_.get(), false); }

std::string LedgerVerifier::fingerprint() const {
  auto fp = fingerprint_of(key_.get());
  return fp ? *fp : "";
}

bool LedgerVerifier::verify(std::string_view message, std::string_view sig_base64) const {
  if (sig_base64.size() != 88) return false;  // 64 bytes in base64
  unsigned char raw[66];
  if (EVP_DecodeBlock(raw, reinterpret_cast<const unsigned char*>(sig_base64.data()), 88) != 66) return false;
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  return ctx && EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key_.get()) == 1 &&
         EVP_DigestVerify(ctx.get(), raw, 64, reinterpret_cast<const unsigned char*>(message.data()), message.size()) ==
             1;
}

}  // namespace sbx
