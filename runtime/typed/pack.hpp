#pragma once
// Rule packs (man/sbx-pack.5): a directory with pack.json, the program, and the two JSON Schemas
// of its typed IO contract. Loading is strict: every problem is reported with the file, a JSON
// pointer into it and a message, all at once, so `sbx pack validate` can list them together.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/model/warm.hpp"
#include "runtime/typed/schema_validate.hpp"

namespace sbx {

inline constexpr const char* kPackManifest = "pack.json";

struct PackProblem {
  std::string file;     // relative to the pack directory ("pack.json", "schemas/input.json")
  std::string pointer;  // JSON pointer into that file ("" for the whole file)
  std::string message;
  bool warning = false;          // listed with the problems of a pack that failed, but not one of them
  std::string describe() const;  // "pack.json#/limits/memory: ..."
};

struct PackContext {
  std::string name;
  std::string path;  // absolute mount point inside the sandbox
  bool required = false;
};

struct PackSecret {
  std::string name;
  bool required = false;
  std::string delivery = "file";  // "file": /run/secrets/NAME (0400); "env": environment variable NAME
};

class PrivateDir;

struct Pack {
  std::string dir;         // absolute, canonical: what is read and mounted (the private copy of a run)
  std::string source_dir;  // the pack directory as named (canonical), for messages; == dir unless copied
  // The private copy a run mounts (load_pack_copy), removed when the last Pack holding it goes.
  std::shared_ptr<PrivateDir> copy;
  std::string name, version, description;
  std::vector<std::string> entrypoint;
  std::string image = "host";
  std::string input_schema_path, output_schema_path;  // relative to dir
  nlohmann::json input_schema, output_schema;
  // The manifest layer of the RunSpec (defaults < profile < manifest < flags: profile.hpp): the
  // pack's limits under RunSpec key names, argv, network and image.
  nlohmann::json spec_patch;
  std::vector<PackContext> contexts;
  std::vector<PackSecret> secrets;
  // The manifest's `warm` (model/warm.hpp): what the pack's pooled sandboxes prepare before a call
  // (`sbx mcp --pool`); never the profile's, which is run_code's. Its entrypoint is then that
  // interpreter on a script (read_warm checks it).
  WarmSpec warm;
  std::string digest;                 // "sha256:<hex>" over the sorted file manifest (pack_digest)
  std::vector<PackProblem> warnings;  // unknown schema keywords, when not loaded strictly
};

// The manifest's name and version as read, whether or not the pack is valid (`pack validate
// --json` reports them on failure too); unset when absent or not a string.
struct PackIdentity {
  std::optional<std::string> name, version;
};

// Parses and checks a manifest already read as text; schema files are read relative to `dir`.
// Exposed separately for unit tests.
// `strict`: an unknown JSON Schema keyword in a schema file is a problem, not a warning.
Result<Pack> parse_pack_manifest(const std::string& dir, const std::string& text, std::vector<PackProblem>& problems,
                                 bool strict = false, PackIdentity* read = nullptr);

// Loads DIR/pack.json, its schemas (compiled, to catch bad schemas now) and the digest. On any
// problem the Result is an error and `problems` holds each one.
Result<Pack> load_pack(const std::string& dir, std::vector<PackProblem>& problems, bool strict = false,
                       PackIdentity* read = nullptr);

// For a run: copies the pack at `dir` into a private directory (pack_tree.hpp), hashing each file
// as it is copied, and loads the copy (manifest, schemas, digest). The copy is what the run
// mounts at /pack: the pack's owner may change `dir` at any moment, and the program still runs
// exactly the bytes whose digest the record names and a tenant's allowlist was checked against.
Result<Pack> load_pack_copy(const std::string& dir, const std::string& state_dir, std::vector<PackProblem>& problems);

// The pack's digest: sha256 over a manifest of every regular file and directory under `dir`,
// sorted by path, one line each: "<path>\t<mode octal>\t<size>\t<sha256>\n" (the mode as a run
// mounts it, hash_tree; directories with size 0 and "-" for the hash). Symlinks and other file types are refused: a pack is mounted into
// the sandbox, and a link could point anywhere on the host. Read within the bounds of a pack
// (kMaxPackBytes, kMaxPackEntries, kMaxPackDepth in pack_tree.hpp), streaming, never following a
// link (hash_tree).
Result<std::string> pack_digest(const std::string& dir);

// What to do about a pack past the bounds (part of the error).
extern const char* const kPackBoundsHint;

// Pack/exec `limits` (keys spelled like the `sbx run` flags: timeout, memory, pids, cpus, cpu_time,
// output_limit, tmp_size) as the RunSpec `limits` object; each bad key or value is a problem.
Result<nlohmann::json> limits_to_spec_patch(const nlohmann::json& limits, const std::string& file,
                                            std::vector<PackProblem>& problems);

// The JSON Schema `properties` of such a `limits` object (the MCP run_code tool's), one per limit
// a manifest or request may set (limits_table.hpp), typed by its unit.
nlohmann::json limits_properties_schema();

// Writes a working pack skeleton in a new directory `dir` named `name`.
Status init_pack(const std::string& dir, const std::string& name);

// Valid pack names: 1-64 of [a-z0-9._-], starting with a letter or digit.
bool valid_pack_name(const std::string& name);

}  // namespace sbx
