#pragma once
// The handshake between the supervisor and init as one typed channel with a named step for each
// thing that crosses it, in the order it happens (docs/ARCHITECTURE.md, "Spawn" and "The shared
// init and its rules"). Two halves:
//
//  - InitChannel, the supervisor's: owns every pipe and socketpair of the handshake (UniqueFd),
//    gives init its ends by number (ChildConfig), and sends "go" and "start", waits for a shared
//    init, takes init's fd hand-offs;
//  - InitEnd, init's: the same channel seen from inside, holding init's ends by number only. It
//    allocates nothing and calls nothing but the raw system calls of raw_syscall.hpp, so that a
//    shared init may use it while the supervisor runs in the same memory. Its code and init's
//    own loop are compiled apart (init_end.cpp), and the ctest `init_raw` reads that object's
//    undefined symbols and refuses any call outside an allowlist (tests/tools/check_init_raw.py).
//
// On the wire (unchanged by this type):
//   sync   pipe, supervisor -> init:  'g' once the id maps are written, 's' once the image's
//          seal matched (a shared init gets "gs" at once); a pooled sandbox's job follows 's'.
//   msg    pipe, init -> supervisor:  ChildMsg, one atomic write each (kSetupError, kStarted,
//          kProgramStatus).
//   out    SEQPACKET socketpair, init -> supervisor: the O_PATH fd of the sandbox's /out ('O').
//   seccomp  SEQPACKET socketpair, init -> supervisor: the seccomp listener ('L'); the pty's
//          master travels on the caller's stdin socket ('T', stdin_relay.hpp).
//   proxy  SEQPACKET socketpair, init -> supervisor: the egress proxy's listening socket ('P').
#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string_view>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"

namespace sbx {

struct ChildMsg {
  // kStarted: the program has exec'd (or its start failed, and a kSetupError came first); from
  // here on init makes raw system calls only (raw_syscall.hpp), so a supervisor that shares its
  // memory may run again.
  // kWarmReady: a warm pool's prepared interpreter (model/warm.hpp) imported its preloads and
  // waits for the call; message: what init saw meanwhile ("refused N calls, first NAME" or "").
  // Sent before 's' only, and read by the pooled worker's wait (runtime/server/mcp_worker.cpp).
  enum Kind : std::uint32_t { kSetupError = 1, kProgramStatus = 2, kStarted = 3, kWarmReady = 4 };
  std::uint32_t kind = 0;
  std::int32_t err = 0;          // errno for kSetupError
  std::int32_t wait_status = 0;  // for kProgramStatus
  char stage[32] = {};           // a name of kStages (stage.hpp), NUL-terminated
  static_assert(kMaxStageNameLength < sizeof stage);
  union {
    char message[440] = {};  // kSetupError; fits one atomic pipe write (PIPE_BUF) with the rest
    struct rusage usage;     // kProgramStatus: the program's and its descendants' (RUSAGE_CHILDREN)
    // kStarted: the program's capability sets right after its execve (caps.hpp ProcessCaps order:
    // inheritable, permitted, effective, bounding, ambient); read == 0 when they could not be read.
    // exec_ns: the realtime clock when init saw the program's execve return (the record's
    // program_started_at; 0 when unknown).
    struct {
      std::uint64_t sets[5];
      std::uint32_t read;
      std::int64_t exec_ns;
    } caps;
  };
};
static_assert(sizeof(ChildMsg) <= 512, "ChildMsg must be written atomically");

// What one read of init's report pipe gave (read_init_report).
enum class ReportRead {
  kReport,  // a whole ChildMsg
  kAgain,   // nothing yet (non-blocking pipe) or EINTR: poll again
  kEnd,     // EOF: init and everything holding its end are gone
  kBroken,  // a short message (init writes whole ones atomically: it died mid-way) or an error
};
// One non-blocking read of a report; the supervisor's loop calls it when the pipe is readable.
ReportRead read_init_report(int fd, ChildMsg& m);

// The supervisor's half. Each fd is owned here until a phase hands it on (take_*), so every early
// return of a run closes what it opened.
class InitChannel {
 public:
  // Before clone: the sync and report pipes and the /out socketpair always; the listener's and
  // the proxy's socketpairs only when the run has a filter, resp. proxy mode.
  Status open_pipes();
  Status open_out_socket();
  Status open_listener_socket();
  Status open_proxy_socket();
  // Init's ends, by number, for ChildConfig's InitFds (-1 when not opened).
  int init_sync() const { return sync_r_.get(); }
  // Our own end of the sync pipe, which init inherits and closes first (InitEnd::arm_parent_death).
  int supervisor_sync() const { return sync_w_.get(); }
  int init_reports() const { return msg_w_.get(); }
  int init_out_socket() const { return out_w_.get(); }
  int init_listener_socket() const { return listener_w_.get(); }
  int init_proxy_socket() const { return proxy_w_.get(); }
  // After clone: init has its own fd table (no CLONE_FILES, also a shared init), so our copies of
  // its ends go.
  void close_init_ends();

  // Step 1, "go" ('g'): the id maps are written. A failed write means init is gone, which its
  // pidfd shows; it is logged, not an error here.
  void send_go();
  // A shared init, steps 1 and 2 at once ("gs"), then the wait in raw calls until init reports
  // (kStarted or a setup error) or is gone: init runs ordinary code in our memory meanwhile. A
  // wall-time limit that ran out kills init: returns true then, once init is dead.
  bool go_and_wait_shared_init(int pidfd, std::optional<std::int64_t> timeout_ms);
  // Step 2, "start" ('s'): the image's seal matched; init starts the program.
  void send_start();
  // Step 2 for a pooled sandbox: 's' and the call's job in one stream (pool_job.hpp).
  Status send_start_with_job(std::string_view job);

  // What the later phases take over.
  int reports() const { return msg_r_.get(); }  // for a pooled sandbox's pause (PoolPause)
  int take_reports() { return msg_r_.release(); }
  int take_listener_socket() { return listener_r_.release(); }
  int take_proxy_socket() { return proxy_r_.release(); }
  // The O_PATH fd of /out, which waited in its socket since init built the root: once every
  // process of the sandbox is dead. Not ok() when init never sent it.
  UniqueFd recv_out_dir();
  // A template's fork (RunRequest::from_template): the pidfd of the process that plays init,
  // which the template sends on the out socket ('I') before /out. Waits at most timeout_ms.
  Result<UniqueFd> recv_template_pidfd(int timeout_ms);

 private:
  UniqueFd sync_r_, sync_w_, msg_r_, msg_w_, out_r_, out_w_, listener_r_, listener_w_, proxy_r_, proxy_w_;
};

// Init's fds, by number: every fd of the supervisor's that init keeps past "go", besides 0, 1, 2
// and the image's (which is the mount plan's, MountPlan::image_fd). The one list of them:
// ChildConfig holds it, run_init keeps exactly these and closes the rest (child.cpp,
// close_all_except), and InitEnd holds it. -1: not opened for this run. A new fd of init's is a
// member here and in for_each, and nowhere else.
struct InitFds {
  // The handshake: init's ends of InitChannel's pipes and socketpairs.
  int sync = -1;           // read end: 'g' once the id maps are in place, then 's' (or a pool's job)
  int msg = -1;            // write end of the ChildMsg pipe (close-on-exec)
  int out_sock = -1;       // /out's O_PATH fd goes here once the root is built (artifact_export.hpp)
  int listener_sock = -1;  // the program child's seccomp listener goes here (-1: unconfined)
  int proxy_sock = -1;     // the egress proxy's listener, made in the sandbox's netns (net.hpp)
  // The program's stdio: the write ends of the stdout/stderr pipes, and its stdin
  // (stdin_relay.hpp): the read end of the pipe the supervisor feeds, or -1 for the sandbox's
  // /dev/null. With pty_sock >= 0 the program gets a pty of the sandbox's devpts on fds 0, 1
  // and 2 instead (out and err unused), and init sends its master on pty_sock.
  int out = -1;
  int err = -1;
  int in = -1;
  int pty_sock = -1;

  // Calls f(fd) for every member, -1 included.
  template <class F>
  void for_each(F&& f) const {
    for (int fd : {sync, msg, out_sock, listener_sock, proxy_sock, out, err, in, pty_sock}) f(fd);
  }
  static constexpr int kCount = 9;
};
static_assert(sizeof(InitFds) == InitFds::kCount * sizeof(int), "InitFds::for_each lists every member");

// An fd init owns: closed with a raw call, nothing allocated (the shared init's rules).
class InitFd {
 public:
  explicit InitFd(int fd = -1) : fd_(fd) {}
  InitFd(const InitFd&) = delete;
  InitFd& operator=(const InitFd&) = delete;
  ~InitFd() { reset(); }
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_;
};

// Init's half. Every method is raw system calls on fixed buffers (init_end.cpp); a failure
// returns the kernel's -errno, or, where the run cannot go on, reports and ends init.
class InitEnd {
 public:
  explicit InitEnd(const InitFds& fds) : fds_(fds) {}
  // Init's very first step, before anything that can wait: the parent-death signal (SIGKILL),
  // then init's inherited copy of the supervisor's end of the sync pipe closed, so that no
  // process of the sandbox holds it. A supervisor killed before the signal was armed (between
  // clone and this call) is then EOF at wait_go; killed after, the signal ends init. Either way
  // init never outlives sbx, nor keeps the caller's stdout it inherited open.
  void arm_parent_death(int inherited_supervisor_end) const;
  // Step 1: waits for 'g'. EOF (the supervisor died before the maps were written) ends init.
  void wait_go() const;
  // True when the supervisor's end of the sync pipe has hung up (it died meanwhile).
  bool supervisor_gone() const;
  // Hands /out's O_PATH fd over and closes init's copy of the socket; 0 or -errno.
  long send_out_dir(int dir_fd);
  // Hands the proxy's listening socket over and closes init's copy of the socket; 0 or -errno.
  long send_proxy_listener(int listener);
  // Step 2: waits for 's'. Anything else, or EOF (the supervisor died or killed us), ends init.
  void wait_start() const;
  // For a pooled sandbox, whose job follows 's' on the sync pipe (pool_job.hpp).
  int sync_fd() const { return fds_.sync; }
  // A stage that failed: one ChildMsg, then init exits 125. `message` is cut to fit.
  [[noreturn]] void report_setup_error(Stage stage, int err, const char* message) const;
  // Once the program child is back: its seccomp listener, then the pty's master (on `sock`); a
  // failure is reported as a setup error and ends init (a run whose listener or terminal the
  // supervisor never got must not go on). Init's copy of `fd` is closed either way.
  void send_listener(int listener) const;
  void send_pty_master(int sock, int master) const;
  // Closes every fd of init but the report pipe.
  void keep_only_reports() const;
  // A message built before (the program child's failed execve), sent as it is.
  void report(const ChildMsg& m) const;
  // kStarted, with the program's capability sets when read (sets: 5 values, or null) and the
  // realtime clock when its execve returned.
  void report_started(const std::uint64_t* sets, long long exec_ns) const;
  // kWarmReady, with `note` (cut to fit).
  void report_warm_ready(const char* note) const;
  // kProgramStatus: the sandbox is empty.
  void report_program_status(int wait_status, const struct rusage& usage) const;
  int reports_fd() const { return fds_.msg; }

 private:
  void hand_over(int sock, int fd, char tag, Stage stage, const char* what) const;
  InitFds fds_;  // a copy on init's stack: out_sock and proxy_sock turn -1 once used
};

// The program child as init finds it when clone(CLONE_VFORK) returns (child.cpp, spawn_program).
struct StartedProgram {
  pid_t pid = -1;
  int listener = -1;  // its seccomp listener, in the fd table it shared with init; -1: none
  int pty_sock = -1;  // where the pty's master goes (-t), and the master (-1: none)
  int pty_master = -1;
  const ChildMsg* exec_failed = nullptr;  // kind kSetupError when its execve failed
  long long exec_ns = 0;                  // the realtime clock when its spawn returned
  // Its five capability sets (inheritable, permitted, effective, bounding, ambient) as read while
  // it waited for its call (a prepared interpreter's: child.cpp, serve_warm_call), or null:
  // watch_program reads them itself.
  const std::uint64_t* caps_sets = nullptr;
};
// A process's five capability sets as StartedProgram::caps_sets orders them, from
// /proc/PID/status (raw calls on a stack buffer: read_process_caps_raw, caps.hpp); false when
// they could not be read.
bool read_caps_sets(pid_t pid, std::uint64_t* sets);
// Init once the program child is back: raw system calls only (init_end.cpp). Hands the listener
// and the pty's master over, closes all but the report pipe, sends kStarted, then forwards
// signals and reaps until the program ends, kills and reaps everything else, reports the
// program's status and exits.
[[noreturn]] void watch_program(const InitEnd& end, const StartedProgram& program);
// A pid 1's end of its sandbox (watch_program's, and a template fork's: template_pid1.cpp): kills
// and reaps every other process, then reports the program's status (its own if reaped among them,
// else program_ws) with the whole tree's usage, and exits 0.
[[noreturn]] void end_sandbox_and_report(const InitEnd& end, pid_t program, int program_ws);

// Waits, with raw system calls only, until a shared init reports (kStarted or a setup error) or
// is gone. A wall-time limit that runs out meanwhile kills init: returns true then, once init
// is dead.
bool wait_for_shared_init(int msg_fd, int pidfd, std::optional<std::int64_t> timeout_ms);

// Signals the supervisor blocks before clone (for its signalfd) and init waits for.
void supervised_signals(sigset_t* set);

// The supervisor's "end the sandbox now" to init (wall-time limit, CPU budget, seccomp kill): init
// kills and reaps every other process, then reports the program's status and the CPU time of the
// whole tree (RUSAGE_CHILDREN). SIGKILL to init alone would lose that time: a dying pid
// namespace's init ignores SIGCHLD while the kernel kills the rest (zap_pid_ns_processes), so they
// are reaped without being added to its children's usage, and the record showed init's 1 ms for a
// 2 s busy loop. The supervisor still SIGKILLs init if no report comes within kEndReportMs (init
// blocked by a process stuck in the kernel): it never waits on the sandbox's cooperation. Init
// obeys it only from outside its pid namespace sent as by kill(2) (si_pid 0 and SI_USER: a
// process inside can forge si_pid only with a queued, non-SI_USER code), so the program cannot
// end the run through it, and init looks for it before any other signal (init_end.cpp), so a
// program keeping init busy cannot hold it back until the fallback SIGKILL. The last
// signal number (the kernel's SIGRTMAX; glibc's SIGRTMAX is a function call, and init may make
// none): one nothing else in sbx uses.
inline constexpr int kEndSandboxSignal = 64;
inline constexpr int kEndReportMs = 2000;

}  // namespace sbx
