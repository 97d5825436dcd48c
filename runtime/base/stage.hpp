#pragma once
// Where a run or a command failed: the value of every Error's `stage`, which sbx prints ("setup
// failed at <stage>: ...") and writes into result.error.stage of a record and of `sbx exec` /
// run_code's responses, where agents and scripts branch on it. One table (kStages) is the whole
// set: a Stage is made only from a name in it, checked when the program is compiled (a string
// literal not in the table is a compile error, see Stage's constructor), and the trace schema's
// enum of result.error.stage is this table's names (tests/unit/test_stage.cpp compares them).
//
// The names are public and kept as they were written before the table existed (some with a
// space or a hyphen): renaming one breaks whoever matches on it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sbx {

struct StageInfo {
  const char* name;
  const char* what;  // one line: what was being done (docs, `sbx help`-style listings)
};

// Sorted by name. A new stage: a line here, then the schema's enum (schemas/trace.schema.json,
// result.error.stage; the unit test prints the list to paste) and man/sbx.1 if users meet it.
inline constexpr StageInfo kStages[] = {
    {"blobs", "the content-addressed blob store (images, inputs, outputs a replay needs)"},
    {"capabilities", "dropping the program's capabilities and locking securebits"},
    {"cgroup", "creating, configuring or reading the run's cgroup"},
    {"cgroup-init", "moving a container's processes into a leaf (sbx cgroup-init)"},
    {"classify", "reading a workload's answers (sbx classify)"},
    {"clone", "creating the sandbox's init in its new namespaces"},
    {"cpu_time", "the CPU-time limit (RLIMIT_CPU)"},
    {"dbus", "talking to systemd over D-Bus (--systemd-scope, scope reuse)"},
    {"doctor", "the host checks of sbx doctor"},
    {"exec", "starting a typed call (sbx exec, run_code)"},
    {"execve", "executing the program: not found, not executable, or refused"},
    {"export", "exporting /out to the --output directory"},
    {"fork", "starting the program from init"},
    {"fs", "a file or directory sbx reads or writes on the host"},
    {"gpu", "planning or binding GPU devices"},
    {"hostname", "setting the sandbox's host name"},
    {"identity", "the user and group ids inside the sandbox and their mapping"},
    {"image", "importing, opening, sealing or checking an image"},
    {"input", "hashing or mounting an --input file"},
    {"key", "the ledger signing key"},
    {"limits", "planning or applying resource limits"},
    {"mcp", "the MCP server and its per-call workers"},
    {"mounts", "building the sandbox's root and its mounts"},
    {"network", "the network namespace, loopback or egress proxy"},
    {"no_new_privs", "setting no_new_privs before the seccomp filter"},
    {"output", "reading the program's output"},
    {"pack", "reading or checking a rule pack"},
    {"pool", "a warm pool's sandbox and the call handed to it"},
    {"prepare", "preparing the run before the sandbox exists"},
    {"probe", "the host-side checks around the run sbx probe starts"},
    {"profile", "finding, reading or layering a profile"},
    {"record", "writing the run's trace record durably"},
    {"replay", "rebuilding a recorded run (sbx replay)"},
    {"request", "reading a typed call's request"},
    {"rlimits", "setting the program's resource limits (setrlimit)"},
    {"schema", "compiling or applying a JSON Schema"},
    {"seccomp", "compiling, caching or installing the seccomp filter"},
    {"secrets", "reading or mounting the run's secrets"},
    {"session", "the program's terminal session"},
    {"sessions", "a long-lived session (sbx session): its server, agent and calls"},
    {"signal", "a signal that ended the call before it started"},
    {"spec", "checking the run's merged settings"},
    {"stdin", "relaying the caller's standard input"},
    {"stdio", "the program's standard input, output and error"},
    {"supervise", "supervising the running sandbox"},
    {"systemd-scope", "placing the run in a systemd scope (--systemd-scope)"},
    {"sysv_shm", "bounding System V IPC (shared memory, message queues, semaphores)"},
    {"template", "a template's fork of a call (warm mode template)"},
    {"timeout", "the wall-clock timeout: arming it or killing the sandbox at it"},
    {"timer", "the wall-clock timeout's timer"},
    {"trace", "reading or verifying the trace store and its ledger"},
    {"trace db", "the trace database (PostgreSQL) a store's records are mirrored to"},
    {"trace export", "exporting a record as in-toto provenance"},
    {"trace index", "the trace store's SQLite index"},
    {"tty", "the caller's terminal or the sandbox's pty"},
    {"usage", "the caller's mistake: a flag, a file or a request sbx refuses"},
    {"userns", "the user namespace's id maps"},
    {"workdir", "the program's working directory"},
};
inline constexpr std::size_t kStageCount = sizeof kStages / sizeof kStages[0];
// The longest name's length: init's report carries a stage in a fixed field (ChildMsg::stage,
// handshake.hpp), which a static_assert there keeps longer than this.
inline constexpr std::size_t kMaxStageNameLength = [] {
  std::size_t n = 0;
  for (auto& s : kStages) n = std::max(n, std::string_view(s.name).size());
  return n;
}();

// One stage of kStages, held as its index.
class Stage {
 public:
  // From a name known when compiling: `make_error("mounts", ...)`, `e.stage == "usage"`. consteval,
  // so a name not in kStages does not compile (the throw is not a constant expression).
  consteval Stage(const char* name) : index_(index_of(name)) {}
  // The stage a message names at run time (init's report, a worker's response): nullopt for a
  // name not in the table.
  static constexpr std::optional<Stage> from_name(std::string_view name) {
    for (std::size_t i = 0; i < kStageCount; ++i)
      if (kStages[i].name == name) return Stage(static_cast<std::uint8_t>(i));
    return std::nullopt;
  }
  const char* name() const { return kStages[index_].name; }
  const char* what() const { return kStages[index_].what; }
  friend constexpr bool operator==(Stage a, Stage b) { return a.index_ == b.index_; }

 private:
  explicit constexpr Stage(std::uint8_t index) : index_(index) {}
  static consteval std::uint8_t index_of(const char* name) {
    for (std::size_t i = 0; i < kStageCount; ++i)
      if (std::string_view(kStages[i].name) == name) return static_cast<std::uint8_t>(i);
    throw "not a stage of kStages (runtime/base/stage.hpp): add it there";
  }
  std::uint8_t index_;
};

}  // namespace sbx
