#pragma once
// The server's workers forked from a prepared sbx instead of exec'd.
//
// Every call of `sbx mcp` gets a worker (mcp_server.hpp says why), and every pooled call's
// replacement is one more. An exec of sbx's static binary costs ~0.9 ms of CPU on the VMs this
// runs on, a quarter of it the start-up's cpuid instructions, each a trap to the hypervisor; a
// fork of a small single-threaded process ~0.12 ms (bench/README.md, Throughput of trivial calls).
// So `sbx mcp` starts one `sbx mcp-fork-server` (exec'd once, before any call) and asks it for
// each worker: the fork server clones itself with CLONE_PARENT, so the worker is the server's
// child as an exec'd one is (the server waits for it, signals it and reads its exit status as
// before), and the child runs main()'s commands on the worker's argv (cli/main.cpp, sbx_main):
// what an exec of `sbx ...argv` would run, in a process that is the same binary, started the
// same way, with the same environment, mask and limits (the fork server is exec'd from the server
// with them and changes none; it installs no signal handler, ignores SIGPIPE as the server's
// loop does while it spawns workers, and holds nothing of a call). The clone gets a stack
// canary of its own (an exec'd worker did); the layout of its heap, stack and mappings is the
// fork server's.
//
// Protocol: the fork server's first message is kForkReady, once it serves (start waits for it at
// the server's start). Then one SOCK_SEQPACKET message per worker, the server to the fork server: a header
// (ForkRequest), then argv, each entry NUL-terminated; with it, by SCM_RIGHTS, exactly two fds,
// the worker's stdin and stdout. The answer: one int32, the worker's pid or -errno. A message
// that breaks the protocol ends the fork server (the server then execs its workers itself). The
// child runs nothing until the fork server has sent its pid (a pipe gives it a byte then), so a
// worker the server was not told of never runs its job: a fork server that dies or is killed
// after its clone and before its answer leaves that child to exit at once (a zombie the server
// does not know of, in that case alone). A fork server that does not answer within
// kForkAnswerMs is killed first, then its answer read if it sent one (a worker whose byte it had
// not yet given then ends at once, as a worker that dies at its start does, and its call is
// answered as such a call is).
// A request larger than kMaxForkRequest (that one alone), or a fork server that has ended or gave
// no answer (from then on, said once on stderr): spawn_worker (mcp_server.hpp) forks and execs the
// worker as before.
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"

namespace sbx::mcp {

// Well under a unix socket's default send buffer (~208 KiB), which bounds one SEQPACKET message.
inline constexpr std::size_t kMaxForkRequest = 64 * 1024;
inline constexpr int kForkAnswerMs = 2000;
// Its first message, once it serves: start() waits this long for it (its exec and start-up).
inline constexpr std::int32_t kForkReady = 0x72656479;
inline constexpr int kForkReadyMs = 10000;
inline constexpr unsigned kMaxForkRefusals = 3;

struct ForkRequest {
  std::uint32_t magic = 0x73627866;  // "sbxf"
  std::int32_t pdeathsig = 0;
  std::int32_t server_pid = 0;  // the worker's parent: a worker that finds another took its parent's death signal
  std::uint32_t argc = 0;
};

class ForkServer {
 public:
  // Forks and execs /proc/self/exe as `argv` (`sbx mcp-fork-server`), its stdin one end of a
  // socket pair; the fork server dies with the server (parent-death signal SIGKILL).
  static Result<ForkServer> start(const std::vector<std::string>& argv);
  // A fork server at the other end of `sock` (start's, or the unit tests'), child `pid` of this
  // process (-1: not ours to reap), once it has said kForkReady (an error, and it is killed, if
  // not within kForkReadyMs).
  static Result<ForkServer> attach(UniqueFd sock, pid_t pid);
  ForkServer(ForkServer&&) noexcept;
  ForkServer& operator=(ForkServer&&) = delete;
  ForkServer(const ForkServer&) = delete;
  // Closes the socket (the fork server exits on EOF) and reaps it: at most ~1 s, then SIGKILL.
  ~ForkServer();

  // A worker running `argv` with `in_fd` as its stdin and `out_fd` as its stdout, in a process
  // group of its own, `pdeathsig` its parent-death signal (spawn_worker's contract, mcp_server.hpp).
  // Its pid. An error when the fork server is gone, refuses or gave no answer: no worker runs,
  // and the caller execs one instead.
  Result<pid_t> spawn(const std::vector<std::string>& argv, int in_fd, int out_fd, int pdeathsig);
  bool alive() const { return sock_.ok(); }
  pid_t pid() const { return pid_; }

 private:
  ForkServer(UniqueFd sock, pid_t pid) : sock_(std::move(sock)), pid_(pid) {}
  // SIGKILL and reap the fork server; what it sent before stays readable on the socket.
  void stop_now();
  // Never asked again: the socket closed, the process reaped, and one line on stderr saying why.
  void end(const std::string& why);
  UniqueFd sock_;
  pid_t pid_ = -1;
  unsigned refused_ = 0;  // clones refused in a row
};

// One request on `sock` (ForkRequest, argv, the two fds), without waiting: E2BIG past
// kMaxForkRequest.
Status send_fork_request(int sock, const std::vector<std::string>& argv, int in_fd, int out_fd, int pdeathsig);

// The fork server's loop (`sbx mcp-fork-server`, cli/mcp_cmd.cpp) on `sock`: kForkReady, then for each request, a
// child of its parent that puts the two fds on 0 and 1, takes its death signal, gets a process
// group of its own and then calls run(argv), exiting with what it returns. Returns 0 at EOF, 1
// after a request that breaks the protocol.
int serve_forks(int sock, const std::function<int(std::vector<std::string>&)>& run);

}  // namespace sbx::mcp
