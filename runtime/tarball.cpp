#include "runtime/tarball.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string_view>
#include <utility>

namespace sbx {
namespace {

constexpr const char* kStage = "image";

struct Codec {
  const char* tool;
  std::string_view magic;
  const char* argv[4];
  // gzip and xz exit with 2 after a warning only (e.g. gzip's "decompression OK, trailing garbage
  // ignored", seen with tarballs padded by other tools); for bzip2, 2 means a corrupt file.
  bool status2_is_warning;
};

using namespace std::string_view_literals;
const Codec kCodecs[] = {
    {"gzip", "\x1f\x8b"sv, {"gzip", "-dc", nullptr}, true},
    {"xz", "\xfd" "7zXZ\0"sv, {"xz", "-dc", nullptr}, true},
    {"zstd", "\x28\xb5\x2f\xfd"sv, {"zstd", "-dcq", nullptr}, false},  // -q: no progress on a tty
    {"bzip2", "BZh"sv, {"bzip2", "-dc", nullptr}, false},
};

const Codec* detect(std::string_view head) {
  for (const Codec& c : kCodecs)
    if (head.substr(0, c.magic.size()) == c.magic) return &c;
  return nullptr;
}

const Codec* codec_named(const std::string& tool) {
  for (const Codec& c : kCodecs)
    if (tool == c.tool) return &c;
  return nullptr;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// The tool's path from $PATH, looked up before fork: execvp may allocate, which a child forked
// from a process with threads must not do.
Result<std::string> find_tool(const Codec& codec, const std::string& path) {
  const char* env = std::getenv("PATH");
  std::string_view dirs = env && *env ? env : "/usr/bin:/bin";
  while (true) {
    std::size_t colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    std::string candidate = (dir.empty() ? "." : dir) + "/" + codec.tool;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  return make_error(kStage, std::string("cannot decompress ") + path + ": it is " + codec.tool +
                                "-compressed and there is no " + codec.tool + " in PATH (install it)", ENOENT);
}

// Starts `codec` reading `in` on stdin and writing to a new pipe; returns the pipe's read end.
// Between fork and exec the child only calls async-signal-safe functions (sbx may have threads).
// An exec failure comes back as errno over a CLOEXEC pipe, so it is an error here rather than
// a truncated archive later.
Result<std::pair<int, pid_t>> spawn(const Codec& codec, int in, const std::string& path) {
  auto tool = find_tool(codec, path);
  if (!tool) return tool.error();
  int out[2], report[2];
  if (::pipe2(out, O_CLOEXEC) < 0) return sys_error(kStage, "pipe for " + std::string(codec.tool));
  if (::pipe2(report, O_CLOEXEC) < 0) {
    Error e = sys_error(kStage, "pipe for " + std::string(codec.tool));
    ::close(out[0]);
    ::close(out[1]);
    return e;
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    Error e = sys_error(kStage, "fork for " + std::string(codec.tool));
    for (int fd : {out[0], out[1], report[0], report[1]}) ::close(fd);
    return e;
  }
  if (pid == 0) {
    // Move both fds above 2 first, so that dup2 onto 0/1 cannot clobber one with the other;
    // dup2 clears CLOEXEC on the copies, everything else of sbx's is closed by exec.
    int src_in = ::fcntl(in, F_DUPFD_CLOEXEC, 3), src_out = ::fcntl(out[1], F_DUPFD_CLOEXEC, 3);
    if (src_in < 0 || src_out < 0 || ::dup2(src_in, 0) < 0 || ::dup2(src_out, 1) < 0) {
      int err = errno;
      (void)!::write(report[1], &err, sizeof err);
      ::_exit(127);
    }
    // The decompressor gets default signal handling: SIGPIPE must end it when the reader has
    // gone (sbx ignores SIGPIPE), and a mask inherited from sbx's signal handling must not hold.
    ::signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execv(tool->c_str(), const_cast<char* const*>(codec.argv));
    int err = errno;
    (void)!::write(report[1], &err, sizeof err);
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(report[1]);
  int err = 0;
  ssize_t n;
  do n = ::read(report[0], &err, sizeof err);
  while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n > 0) {
    ::close(out[0]);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return make_error(kStage, "cannot run " + *tool + " to decompress " + path, err);
  }
  return std::pair{out[0], pid};
}

}  // namespace

Result<Tarball> Tarball::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sys_error(kStage, "open tarball " + path);
  struct stat st;
  if (::fstat(fd, &st) < 0) {
    Error e = sys_error(kStage, "stat tarball " + path);
    ::close(fd);
    return e;
  }
  // The magic is read with pread so the offset stays at 0 for the reader or the decompressor;
  // that needs a regular file (not a pipe).
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(kStage, "tarball " + path + " is not a regular file");
  }
  char head[8];
  ssize_t n;
  do n = ::pread(fd, head, sizeof head, 0);
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    Error e = sys_error(kStage, "read tarball " + path);
    ::close(fd);
    return e;
  }
  const Codec* codec = detect(std::string_view(head, static_cast<std::size_t>(n)));
  if (!codec) return Tarball(path, fd, -1, "");
  auto child = spawn(*codec, fd, path);
  ::close(fd);  // the decompressor has its own copy
  if (!child) return child.error();
  return Tarball(path, child->first, child->second, codec->tool);
}

Tarball::Tarball(Tarball&& o) noexcept
    : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, -1)), pid_(std::exchange(o.pid_, -1)),
      tool_(std::move(o.tool_)), result_(std::move(o.result_)) {}

Tarball::~Tarball() {
  close_fd(fd_);
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

Status Tarball::finish() {
  if (pid_ > 0) {
    char scratch[65536];
    for (;;) {
      ssize_t n = ::read(fd_, scratch, sizeof scratch);
      if (n > 0) continue;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) result_ = sys_error(kStage, "reading the output of " + tool_ + " for " + path_);
      break;
    }
    close_fd(fd_);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    const Codec* codec = codec_named(tool_);
    const std::string what = std::string(codec->argv[0]) + " " + codec->argv[1] + " " + path_;
    if (WIFSIGNALED(status)) {
      result_ = make_error(kStage, what + ": killed by signal " + std::to_string(WTERMSIG(status)));
    } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
      const bool warning = WEXITSTATUS(status) == 2 && codec->status2_is_warning;
      if (!warning)
        result_ = make_error(kStage, what + ": exit status " + std::to_string(WEXITSTATUS(status)) +
                                         " (corrupt or truncated; its own message is on stderr)");
    }
  }
  close_fd(fd_);
  return result_;
}

}  // namespace sbx
