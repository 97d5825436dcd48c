#pragma once
// `sbx pack run`: the typed IO contract around run_sandbox (man/sbx-pack.5).
//   1 every input record is validated against input_schema before anything is created
//     (input_invalid, exit 65: nothing runs, the record is still written);
//   2 the pack is bound read-only at /pack, a copy of the validated records at /in/records.json,
//     each context read-only at its declared path, a tmpfs at /out (exported after the run:
//     artifact_export.hpp), secrets on a private tmpfs at /run/secrets (or in the environment);
//   3 /out/result.json is read safely and validated against output_schema: only a valid result is
//     handed back; otherwise output_invalid (exit 65) and only its size and hash are recorded.
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/typed/pack.hpp"
#include "runtime/launch/sandbox.hpp"
#include "runtime/model/profile.hpp"

namespace sbx {

struct PackRunRequest {
  Pack pack;
  RunRequest run;          // spec (defaults < profile < manifest < flags), profile, dirs, trace file
  std::string input_path;  // as given (recorded in the trace)
  std::string input_bytes;
  std::vector<std::pair<std::string, std::string>> contexts;  // declared name, host path
  std::vector<std::pair<std::string, std::string>> secrets;   // declared name, value (memory only)
  // --dry-run: check the input contract and plan the mounts, then make the dry run
  // (dry_run.hpp) instead of running: its JSON in `result` (exit 0), or the error (125), or
  // the input's errors (input_invalid, 65). Nothing is created and nothing is recorded.
  bool dry_run = false;
};

struct PackRunResult {
  int exit_status = 125;
  RunStatus status = RunStatus::setup_error;
  nlohmann::json result;            // the validated result; null unless status is ok
  std::vector<std::string> errors;  // contract violations, one line each ("/0/id: ...")
  // Why the run itself failed (its outcome's error: what, where, how to fix), "" when it did not.
  // `sbx pack run` has it on stderr from the run; an MCP client sees only the tool result.
  std::string error;
  nlohmann::json trace;
  bool recorded = false;     // the record is in the ledger: only then may the result be released
  std::string record_error;  // why not, when not
};

// Per-record validation of a records file (a JSON array); pointers are into the whole file. At
// most `max_kept` errors are returned; `omitted` (if given) counts the rest.
std::vector<SchemaError> validate_records(const CompiledSchema& schema, const nlohmann::json& records,
                                          std::size_t* omitted = nullptr, std::size_t max_kept = SIZE_MAX);

PackRunResult run_pack(PackRunRequest& req);

// A warm pool's pack call (`sbx mcp --pool N`, runtime/server/mcp_pool.hpp). The sandbox is built
// for the pack before any call exists, exactly as run_pack would build it: req holds everything
// but the records (req.input_bytes is ignored) and no secrets (a pack given secrets is never
// pooled: a secret is read at each call and exists in that call's sandbox only). The pack's
// private copy (req.pack, load_pack_copy) is bound at /pack and each context's copy at its path;
// /in is left to the call. await_records then waits for the call: its records' bytes (the JSON
// array the client sent), or nullopt when none comes (the sandbox is discarded) or when the pool
// note it fills says "discard" (why the call cannot run here).
//
// Checked at hand-out, each a cold run whose record says why (cold_reason): the profile as it is
// now (profile_changed), the pack's tree and each context's re-hashed against the copies mounted
// (an edit since the build: the cold run copies the tree as it is now), and the records against
// the input schema (an invalid input is refused by the cold run, before anything is created,
// recorded input_invalid, as for any call). What passes runs here under the contract run_pack
// keeps: the records as validated written by init at /in/records.json (a tmpfs of the sandbox's own), the output validated, the result
// released only with a durable record.
using AwaitPackRecords = std::function<std::optional<std::string>(const PoolPause&, nlohmann::json& pool_meta)>;
struct PooledPack {
  bool called = false;               // a call came (it ran here, or is to run cold)
  std::string cold_reason;           // why it is to run cold ("" when it ran here)
  nlohmann::json pool_meta;          // the pool note await_records filled
  std::optional<Error> build_error;  // the sandbox could not be built (no call came)
  PackRunResult result;              // the call's, when it ran here
};
PooledPack run_pack_pooled(PackRunRequest& req, const LoadedProfile& profile, const std::string& profile_name,
                           const AwaitPackRecords& await_records);

// Reads a secret's value from "@FILE" or "env:VAR". Error messages name the source, never the
// value. A file must be a regular one of at most kMaxSecretBytes: `@/dev/zero` or a FIFO would
// otherwise grow or block the reader (sbx mcp reads it again for every call).
inline constexpr std::size_t kMaxSecretBytes = 1u << 20;
Result<std::string> read_secret_source(const std::string& source);

// Overwrites a secret's bytes before the memory is released.
void wipe(std::string& s);

}  // namespace sbx
