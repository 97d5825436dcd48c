#pragma once
// Small filesystem helpers with errors that carry the path and errno.
#include <sys/types.h>

#include <string>
#include <string_view>

#include "runtime/error.hpp"

namespace sbx {

// mkdir -p with `mode` for the directories it creates.
Status ensure_dir(const std::string& path, mode_t mode = 0700);

// Durable, atomic replace: write to a temp file beside `path`, fsync it, rename over `path`,
// fsync the directory. A reader sees the old file or the new one, never a torn one.
Status write_file_durable(const std::string& path, std::string_view data, mode_t mode = 0644);

Result<std::string> read_file(const std::string& path);

}  // namespace sbx

namespace sbx {
// rm -rf without following symlinks (unlinkat relative to each directory's fd); directories the
// caller owns but cannot write are made writable first.
Status remove_tree(const std::string& path);
}  // namespace sbx
