#pragma once
// RunSpec: the one description of a run that the runtime reads. CLI flags, profiles and pack
// manifests are all turned into a RunSpec first (defaults < profile < manifest < flags, see
// profile.hpp). It is pure data, round-trips through JSON, and is embedded in the trace, so it holds
// names and sources of secrets and passed-through variables, never their values.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/base/error.hpp"
#include "runtime/model/limits.hpp"
#include "runtime/model/warm.hpp"

namespace sbx {

struct BindMount {
  std::string src;  // host path (absolute after validation)
  std::string dst;  // path inside the sandbox
  bool rw = false;
  // As root: the source is mounted idmapped (mount_setattr MOUNT_ATTR_IDMAP), its owner's uid and
  // gid shown inside as the program's, so that what the sandbox writes there is the owner's on the
  // host (not the sandbox's unprivileged host uid). Rootless the program already writes as the
  // caller: accepted where the caller owns the source (nothing to change), refused elsewhere.
  bool idmap = false;
  bool operator==(const BindMount&) const = default;
};

// The options of a bind's short form (SRC[:DST][:OPT[,OPT]]) and the profile's binds objects:
// the one list the parser, --help, the man page and the completions follow.
struct BindOption {
  const char* name;
  const char* help;
};
inline constexpr BindOption kBindOptions[] = {
    {"ro", "read-only, the default"},
    {"rw", "read-write"},
    {"idmap", "as root: files of the source's owner appear as the program's, and what it writes is the owner's"},
};

struct TmpfsMount {
  std::string dst;
  std::int64_t size_bytes = 0;
  bool noexec = false;  // nothing on it runs (docker's `--tmpfs DST:size=64m,noexec`)
  bool operator==(const TmpfsMount&) const = default;
};

struct NetworkSpec {
  // "none": own network namespace with only loopback up, no way out.
  // "proxy": the same, plus sbx's filtering HTTP proxy on 127.0.0.1:kProxyPort inside, which
  // reaches exactly the hosts in `allow` (egress_policy.hpp) from outside the sandbox (proxy.hpp).
  // A non-empty `allow` turns "none" into "proxy"; "proxy" with an empty list denies (and records)
  // every attempt.
  std::string mode = "none";
  std::vector<std::string> allow;         // --allow-host rules, as written
  std::int64_t max_connections = 64;      // concurrent proxied connections
  std::optional<std::int64_t> max_bytes;  // total bytes relayed (both directions), per run
  std::int64_t idle_timeout_ms = 60000;   // a proxied connection silent this long is closed
  bool operator==(const NetworkSpec&) const = default;
};

// Where the proxy listens inside the sandbox's own network namespace (its loopback, not the host's).
inline constexpr int kProxyPort = 3128;

struct CapabilitiesSpec {
  // Capabilities the program keeps inside its user namespace (they act only on what the namespace
  // owns and maps), canonical names ("CAP_CHOWN"), in kernel order; empty: none (caps.hpp).
  std::vector<std::string> keep;
  bool operator==(const CapabilitiesSpec&) const = default;
};

// GPUs (gpu.hpp): `devices` is the request ("" none, "all", "0,1", "GPU-<uuid>"); `max` the most
// GPUs a run may get (kGpuMaxAll, -1, for any number): a profile's ceiling, which a manifest or
// request may lower and never raise, and which --gpu cannot pass either.
struct GpuSpec {
  std::string devices;
  int max = 0;
  bool operator==(const GpuSpec&) const = default;
};

struct RunSpec {
  std::vector<std::string> argv;
  std::string profile = "untrusted";  // name (or path) of the profile merged in
  int tier = 4;
  std::uint32_t uid = 0;  // identity inside the sandbox
  std::uint32_t gid = 0;
  std::map<std::string, std::string> env;  // set explicitly (profile or --env)
  std::vector<std::string> env_pass;       // names passed through from the caller's environment
  std::vector<BindMount> binds;
  std::vector<TmpfsMount> tmpfs;
  // --input PATH[:DST]: host files or directories bound read-only (DST defaults to
  // /in/<basename>) and hashed into the trace's inputs.
  std::vector<BindMount> inputs;
  std::string workdir = "/tmp";
  std::string hostname = "sbx";
  // "host": the root assembled from the host's /usr, /bin, /lib* and a minimal /etc; otherwise an
  // image reference (NAME[:TAG] or sha256:<hex prefix>) in the image store (image_store.hpp).
  std::string image = "host";
  NetworkSpec network;
  Limits limits;
  bool require_limits = false;
  // A run whose trace record cannot be stored durably fails (exit 125) instead of warning. Off by
  // default for `sbx run` (its output has already streamed); pack run and exec always require it.
  bool require_record = false;
  // Live events (events.hpp): "" for none, "fd:N" or a path (a file or a FIFO). Set by the
  // profile or --events; never by a pack's manifest or an exec request (they name no host paths).
  std::string events;
  // The trace database the run's record is mirrored to after its durable append (a libpq URL, no
  // password: trace_mirror.hpp); "" for none. Set by the profile or --trace-db, like `events`
  // never by a pack's manifest or an exec request.
  std::string trace_db;
  // Seccomp policy: "default" (built in, profiles/seccomp/default.json), "unconfined" (no filter,
  // loud) or the path of an OCI linux.seccomp JSON file.
  std::string seccomp = "default";
  CapabilitiesSpec capabilities;
  GpuSpec gpu;
  // What a warm pool prepares in each of its sandboxes (warm.hpp); a one-shot run ignores it.
  WarmSpec warm;
  bool operator==(const RunSpec&) const = default;
};

// Serialises every member (so `--dry-run` shows exactly what would be enforced).
nlohmann::json spec_to_json(const RunSpec& spec);
// spec_to_json(RunSpec{}), made once: every profile and manifest is checked against it.
const nlohmann::json& default_spec_json();

// Strict parse: unknown keys and bad values are errors naming `source` and the key path
// ("limits.timeout_ms"). Durations accept a string with a unit or, under a key that names the
// unit (timeout_ms), a number of ms; sizes likewise (memory_bytes: a number of bytes). The public
// spellings (timeout, memory) reach this reader renamed by canonical_limit_keys, which refuses a
// bare number under them (units.hpp).
Result<RunSpec> spec_from_json(const nlohmann::json& j, const std::string& source);

// Applies `patch` onto `base` as an RFC 7386 JSON merge patch (objects merge, everything else
// replaces, null deletes). This is how profiles and manifests layer over defaults.
void merge_patch(nlohmann::json& base, const nlohmann::json& patch);

// The limits' public names (the `sbx run` flags: timeout, memory, cpu_time, output_limit,
// tmp_size, pids, cpus) and the RunSpec keys they become (timeout_ms, memory_bytes, ...): the
// entries of limits_table.hpp that a manifest may set, in its order. Profiles, pack manifests and
// exec requests accept both spellings; docs and error messages use the public one. Keys without a
// flag spelling (out_size_bytes, output_max_bytes, ...) are the same in both.
struct LimitKey {
  const char* name;      // public
  const char* spec_key;  // RunSpec / trace record
};
const std::vector<LimitKey>& limit_keys();
// The public name of a RunSpec limit key (the key itself when it has no other spelling).
std::string public_limit_name(const std::string& spec_key);

// Renames the public keys of a `limits` object to their RunSpec keys, in place. Both spellings of
// one limit is an error ("<source>: /limits: ..."), and so is a bare number for a duration or a
// size under a key that does not name its unit (bare_limit_number). `written` receives spec key
// -> key as written, for as_written(). Every caller-written document's limits pass here (profiles,
// tenants, pack manifests and exec requests through limits_to_spec_patch) before they are read.
// A record sbx wrote (the trace's spec) has RunSpec keys only, and a replay reads it unchanged.
Status canonical_limit_keys(nlohmann::json& limits, const std::string& source,
                            std::map<std::string, std::string>* written = nullptr);
// The one rule for numbers in `limits`: "" when `v` may stand under `key` (a string, a count, CPUs,
// a key named with its unit like timeout_ms), else the refusal ("a bare number is ambiguous; write
// a duration with its unit: \"10s\" or \"10000ms\"").
std::string bare_limit_number(std::string_view key, const nlohmann::json& v);
// `message` with each "/limits/<spec key>" replaced by the key as the caller wrote it.
std::string as_written(std::string message, const std::map<std::string, std::string>& written);

// Parsers shared by the CLI and spec_from_json.
Result<BindMount> parse_bind(const std::string& text);    // SRC[:DST][:OPT[,OPT]] (kBindOptions)
std::vector<std::string> bind_option_names();             // kBindOptions' names, in order
Result<TmpfsMount> parse_tmpfs(const std::string& text);  // DST[:SIZE]
Result<BindMount> parse_input(const std::string& text);   // PATH[:DST]
// The operator's --allow-host rules (`sbx run`, `sbx exec`; never a manifest's or a request's)
// added to `network`'s own: each rule checked (egress_policy.hpp), the list together refused when
// a loopback name in it could never be reached, and a non-empty list turns the mode to "proxy".
Status add_allow_hosts(NetworkSpec& network, const std::vector<std::string>& hosts);

// Checks that hold whatever the source: absolute in-sandbox paths, argv present, sane limits.
Status validate_spec(const RunSpec& spec);

// The `events` destination (events.hpp opens it): "fd:N" with N a number, or a non-empty path.
// Checked when a RunSpec is read, without opening anything.
Status check_events_destination(const std::string& where);
Result<int> parse_events_fd(const std::string& where);  // N of "fd:N"

}  // namespace sbx
