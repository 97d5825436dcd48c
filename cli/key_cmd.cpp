// sbx key init: the Ed25519 key pair that signs the trace ledger (runtime/record/ledger_key.hpp).
#include <cstdio>

#include "cli/commands.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/record/ledger_key.hpp"
#include "runtime/base/text_escape.hpp"

namespace sbx::cli {

void add_key_command(CLI::App& app, GlobalOptions& /*g*/, std::vector<Command>& out) {
  auto* key = app.add_subcommand("key", "Manage the key that signs the trace ledger");
  key->require_subcommand(1);
  auto* init =
      key->add_subcommand("init", "Make an Ed25519 key pair under the config dir; records are signed from then on");
  static bool as_json = false;
  init->add_flag("--json", as_json, "Print one JSON object: private_key, public_key, fingerprint, verify_command");
  out.push_back({key, [init]() -> int {
                   if (!init->parsed()) return usage_error("key: expected 'init'");
                   auto paths = ledger_key_paths();
                   if (!paths) return usage_error(paths.error().describe());
                   auto fp = create_ledger_key(*paths);
                   if (!fp) return usage_error(fp.error().describe());
                   if (as_json) {
                     nlohmann::json j = {{"private_key", paths->priv},
                                         {"public_key", paths->pub},
                                         {"fingerprint", "sha256:" + *fp},
                                         {"verify_command",
                                          std::vector<std::string>{"sbx", "trace", "verify", "--pubkey", paths->pub}}};
                     std::printf("%s\n", dump_json(j, 2, {}, true).c_str());  // ASCII (json_io.hpp)
                     return 0;
                   }
                   std::printf("private key %s (0600): every trace record is signed with it from now on\n",
                               printable(paths->priv).c_str());
                   std::printf("public key  %s: check the ledger with 'sbx trace verify --pubkey %s'\n",
                               printable(paths->pub).c_str(), printable(paths->pub).c_str());
                   std::printf("fingerprint sha256:%s\n", fp->c_str());
                   return 0;
                 }});
}

}  // namespace sbx::cli
