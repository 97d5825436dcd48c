#pragma once
// The program's stdin, and how the caller's input reaches it. None of the caller's own
// descriptors enters the sandbox: an inherited terminal fd would let the program write to the
// user's terminal past --output-limit, change its settings (echo off, window size) or read what
// the user types next; an inherited pipe, file or socket may be writable, or the caller's only
// copy. So the program's fd 0 is one of
//   null  /dev/null of the sandbox: the caller's stdin is a terminal (and no -i), /dev/null, or
//         closed; also every sbx exec and pack run (their input is a typed request);
//   pipe  a pipe that the supervisor feeds from the caller's stdin (a pipe, file, socket, or with
//         -i a terminal): non-blocking, through a bounded buffer, EOF passed on; the relay stops
//         when the program closes its end;
//   pty   -t: a pseudo-terminal of the sandbox's own devpts (pty.hpp) on fds 0, 1 and 2; with -i
//         the caller's keystrokes are relayed to its master, and its output is the program's
//         stdout stream (capped and hashed like any other: stderr is merged into it).
//
// Supervisor side (supervisor.cpp): the bytes are moved by an OutputRelay (output_relay.hpp),
// the same bounded, non-blocking relay as the program's stdout and stderr, from the caller's
// stdin to the program's pipe or pty master; this unit adds what a terminal needs (raw mode,
// window size, the pty's handoff) and what the trace records. Nothing here blocks.
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/output_relay.hpp"
#include "runtime/linux/pty.hpp"

namespace sbx {

enum class StdinMode { null, pipe, pty };

struct StdinPlan {
  StdinMode mode = StdinMode::null;
  // sbx's fd 0: terminal, pipe, file, socket, device, anonymous inode, null, closed, none
  std::string source = "none";
  bool relay = false;  // the caller's input is copied to the program
};

// What `sbx run` gives the program for the flags -i (interactive) and -t (tty) and sbx's fd 0.
// -t without a terminal on fd 0 is the caller's error (stage "usage").
Result<StdinPlan> plan_stdin(bool interactive, bool tty, int fd = 0);

// The hint for an interactive program (a shell or a REPL with no script: `sbx run -- bash`) run
// at a terminal without -i or -t: it would read an empty stdin and exit at once, silently. ""
// when the plan relays the terminal, or the command is not one of those.
std::string terminal_unused_hint(const std::vector<std::string>& argv, const StdinPlan& plan);

// The caller's stdin as a relay source: an fd of sbx's own, readable without blocking and without
// changing the caller's open file description where that can be helped (see open()).
class CallerSource {
 public:
  CallerSource() = default;
  CallerSource(const CallerSource&) = delete;
  CallerSource& operator=(const CallerSource&) = delete;
  ~CallerSource() { restore(); }
  // A new fd for `fd`'s file, owned by the caller of open() (the relay closes it).
  Result<int> open(int fd);
  // Puts back the caller's file status flags if open() had to change them.
  void restore();

 private:
  int fd_ = -1;             // the caller's fd whose flags were changed
  int restore_flags_ = -1;  // fallback: O_NONBLOCK set on the caller's description, undone here
};

class CallerStdin {
 public:
  explicit CallerStdin(StdinPlan plan) : plan_(std::move(plan)) {}
  CallerStdin(const CallerStdin&) = delete;
  CallerStdin& operator=(const CallerStdin&) = delete;
  ~CallerStdin();

  // Before clone: the pipe (pipe mode) or the pty handoff socketpair (pty mode), and the window
  // size the pty starts with.
  Status prepare();
  int child_in_fd() const { return child_in_.get(); }       // pipe mode: init's read end
  int child_pty_sock() const { return child_sock_.get(); }  // pty mode: init's end of the handoff
  const struct winsize& initial_size() const { return size_; }
  void close_child_ends();

  // Just before the poll loop starts, and ended by end_session() or the destructor: raw mode on
  // the caller's terminal and SIGWINCH watched (pty mode with -i), the caller's stdin opened and
  // (pipe mode) its relay to the program started.
  Status begin_session();
  // The relay's statistics are final from here on; the caller's terminal is as it was.
  void end_session();

  // The poll loop's part (supervisor.cpp). The relay toward the program (null: none, or the pty
  // has not arrived yet) is polled like the output relays, except that an idle pty master is
  // not watched: it reports POLLHUP for as long as its slave is closed.
  OutputRelay* relay() { return relay_ ? &*relay_ : nullptr; }
  int relay_sink_poll_fd() const;
  // Pty mode: init's handoff of the master, until it has come (or init ended without one).
  int handoff_fd() const { return sock_.get(); }
  // The master has come (or the handoff ended): a duplicate of it for the stdout relay to read,
  // or -1.
  int on_handoff_ready();
  void abandon_handoff();
  // The reader of sbx's stdout has gone: with a pty, sbx's copies of the master are closed, the
  // last ones (init keeps none), so the kernel hangs the pty up: SIGHUP for the program's
  // session, EIO for its writes, as when a terminal goes away. Without a pipe between them
  // this is the program's EPIPE (output_relay.hpp).
  void hang_up();
  // SIGWINCH: the caller's terminal was resized; the pty follows.
  int winch_fd() const { return winch_fd_.get(); }
  void on_winch();

  nlohmann::json to_json() const;

 private:
  void forward_window_size();

  StdinPlan plan_;
  CallerSource caller_;
  UniqueFd src_;     // sbx's own fd of the caller's stdin, until the relay owns it
  UniqueFd pipe_w_;  // pipe mode: the write end, until the relay owns it
  UniqueFd master_;  // pty mode: the master (window size), once it has come
  UniqueFd child_in_, child_sock_;
  UniqueFd sock_;  // supervisor's end of the pty handoff
  UniqueFd winch_fd_;
  sigset_t old_mask_{};
  bool mask_changed_ = false;
  struct winsize size_ {};
  std::uint64_t window_changes_ = 0;
  RawTerminal raw_;
  std::optional<OutputRelay> relay_;
  std::optional<StreamStats> stats_;  // the relay's, once end_session() finished it
};

}  // namespace sbx
