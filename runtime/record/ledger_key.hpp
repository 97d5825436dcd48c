#pragma once
// Ed25519 signing of the trace ledger (trace_ledger.hpp), with libcrypto. `sbx key init` makes the
// key pair under the config dir; while the private key is there, every appended line carries
// "sig": the base64 signature of its hash. `sbx trace verify --pubkey FILE` then checks every
// line against the public key: a ledger rewritten with recomputed hashes no longer verifies
// unless its forger also holds the private key.
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/base/error.hpp"

struct evp_pkey_st;

namespace sbx {

struct LedgerKeyPaths {
  std::string dir;        // $XDG_CONFIG_HOME/sbx, else $HOME/.config/sbx
  std::string priv, pub;  // <dir>/ledger-key.pem (0600), <dir>/ledger-key.pub.pem
};
Result<LedgerKeyPaths> ledger_key_paths();

// 32 random bytes of sbx's user, <config dir>/cache-mac.key (0600, made on first use): they key
// the MACs that make the seccomp cache trustworthy (seccomp_policy.hpp). It lives beside the ledger
// key, outside the state dir the cache is in, so that whoever can write the cache cannot also
// forge its MAC. An error when there is no config dir, or when the file is not sbx's user's alone.
Result<std::string> cache_mac_secret();

struct PkeyFree {
  void operator()(evp_pkey_st* k) const;
};
using Pkey = std::unique_ptr<evp_pkey_st, PkeyFree>;

// Makes the key pair; refuses to replace an existing private key. Returns the public key's
// fingerprint (sha256 of its raw 32 bytes).
Result<std::string> create_ledger_key(const LedgerKeyPaths& p);

class LedgerSigner {
 public:
  // The private key when one exists; nullopt when there is none (signing is optional); an error
  // when it exists but cannot be used (the operator asked for signatures: a run must not quietly
  // go unsigned).
  static Result<std::optional<LedgerSigner>> load_default();
  static Result<LedgerSigner> load(const std::string& path);
  std::string sign(std::string_view message) const;  // base64; aborts only if libcrypto cannot sign
  // Its public key in PEM: what a node registers in the trace database (trace_mirror.hpp).
  Result<std::string> public_pem() const;

 private:
  Pkey key_;
};

class LedgerVerifier {
 public:
  static Result<LedgerVerifier> load(const std::string& pubkey_path);
  // From PEM text held elsewhere (a node's key registered in the trace database); `what` names it.
  static Result<LedgerVerifier> from_pem(const std::string& pem, const std::string& what);
  bool verify(std::string_view message, std::string_view sig_base64) const;
  // The sha256 of the raw public key, as `sbx key init` prints it ("" if libcrypto cannot say).
  std::string fingerprint() const;

 private:
  Pkey key_;
};

}  // namespace sbx
