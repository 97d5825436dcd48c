#pragma once
// A warm pool's sandbox (`sbx mcp --pool N`, runtime/server/mcp_pool.hpp): built ahead of its call, it
// waits with init paused before the program's execve; the call's program and files reach it then.
//
// Parent half (the supervisor, sandbox.cpp): encode_pool_job() frames the call's argv and files,
// sent on the sync pipe right after the "s" byte. Child half (init, child.cpp): read_pool_job()
// reads them back, bounded, and write_pool_files() writes the files from inside the sandbox's
// own mount namespace into the pool's tmpfs directories (/code, /in), then makes those mounts
// read-only: the supervisor never follows a path into the sandbox.
//
// pool_refusal() is the rule for which calls a pooled sandbox may serve: the sandbox was made
// for the profile's configuration, so a call may only lower what it can still change at hand-out
// (the wall-time limit, counted by the supervisor, and the output cap); any other difference
// (another image, binds, network, any other limit) is a cold run, and the record says why.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/linux/mounts.hpp"
#include "runtime/model/spec.hpp"

namespace sbx {

// The directories a pooled sandbox keeps writable (to init only) until hand-out.
inline const std::vector<std::string> kPoolDirs = {"/code", "/in"};
// A job's bound: the largest MCP message (runtime/server/mcp_protocol.hpp) and room for the framing.
inline constexpr std::uint64_t kMaxPoolJobBytes = (66u << 20);
// Each pool directory's tmpfs size cap (its pages exist only once init writes the job).
inline constexpr std::int64_t kPoolDirBytes = 66 << 20;

struct PoolJob {
  std::vector<std::string> argv;
  std::vector<GeneratedFile> files;  // dst under one of kPoolDirs
};

std::string encode_pool_job(const PoolJob& job);
// Parses one framed job (the whole frame, length prefix included); bounded by kMaxPoolJobBytes,
// at most 64 argv entries and 4096 files.
Result<PoolJob> decode_pool_job(const std::string& frame);
// Child half: reads the frame from fd (8-byte length first), then decode_pool_job.
Result<PoolJob> read_pool_job(int fd);
// Child half, in init after the root is pivoted: writes each file below its pool directory with
// openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS), then remounts every pool
// directory read-only.
Status write_pool_files(const PoolJob& job);

// "" when a sandbox made for `pooled` can serve a call whose effective spec is `call`; else why not.
std::string pool_refusal(const RunSpec& pooled, const RunSpec& call);

}  // namespace sbx
