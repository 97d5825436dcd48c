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
// Supervisor side: the poll loop asks add_pollfds() for the fds to watch and hands the results
// back to on_events(); nothing here blocks.
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/error.hpp"
#include "runtime/pty.hpp"

namespace sbx {

enum class StdinMode { null, pipe, pty };

struct StdinPlan {
  StdinMode mode = StdinMode::null;
  std::string source = "none";  // sbx's fd 0: terminal, pipe, file, socket, device, null, closed, none
  bool relay = false;           // the caller's input is copied to the program
};

// What `sbx run` gives the program for the flags -i (interactive) and -t (tty) and sbx's fd 0.
// -t without a terminal on fd 0 is the caller's error (stage "usage").
Result<StdinPlan> plan_stdin(bool interactive, bool tty, int fd = 0);

// The caller's stdin, read without blocking and without changing the caller's open file
// description where that can be helped (see open()).
class CallerSource {
 public:
  CallerSource() = default;
  CallerSource(const CallerSource&) = delete;
  CallerSource& operator=(const CallerSource&) = delete;
  ~CallerSource();
  Status open(int fd);
  int poll_fd() const { return fd_; }
  // read(2)'s contract: > 0 bytes, 0 at EOF, -1 with errno (EAGAIN: nothing yet).
  ssize_t read(char* buf, std::size_t len);
  void close();

 private:
  int fd_ = -1;
  bool owned_ = false;     // fd_ is our own reopened description
  bool socket_ = false;    // recv(MSG_DONTWAIT) instead of read
  int restore_flags_ = -1; // fallback: O_NONBLOCK set on the caller's description, undone on close
};

class CallerStdin {
 public:
  static constexpr std::size_t kBufferBytes = 64 * 1024;

  explicit CallerStdin(StdinPlan plan) : plan_(std::move(plan)) {}
  CallerStdin(const CallerStdin&) = delete;
  CallerStdin& operator=(const CallerStdin&) = delete;
  ~CallerStdin();

  // Before clone: the pipe (pipe mode) or the pty handoff socketpair (pty mode), and the window
  // size the pty starts with.
  Status prepare();
  int child_in_fd() const { return child_in_; }    // pipe mode: init's read end
  int child_pty_sock() const { return child_sock_; }  // pty mode: init's end of the handoff
  const struct winsize& initial_size() const { return size_; }
  void close_child_ends();

  // Just before the poll loop starts, and ended by end_session() or the destructor: raw mode on
  // the caller's terminal and SIGWINCH watched (pty mode with -i), the caller's stdin opened.
  Status begin_session();
  void end_session();

  // The poll loop's part. `program_running`: false once init has exited or reported; the relay
  // then stops, and only a pty handoff still in flight is watched.
  void add_pollfds(std::vector<struct pollfd>& p, bool program_running);
  void on_events(const struct pollfd* p, std::size_t n);
  // Pty mode: a duplicate of the master once it has arrived (the stdout pump reads and closes
  // it), handed out once; -1 otherwise.
  int take_output_fd();
  bool output_pending() const { return sock_ >= 0; }

  nlohmann::json to_json() const;

 private:
  enum Role : std::uint8_t { kSource, kSink, kHandoff, kWinch };
  void read_source();
  void flush_sink(short revents);
  void receive_master();
  void forward_window_size();
  void close_sink();

  StdinPlan plan_;
  CallerSource src_;
  bool src_open_ = false;
  bool src_eof_ = false;
  int sink_ = -1;          // pipe mode: write end; pty mode: the master
  int child_in_ = -1, child_sock_ = -1;
  int sock_ = -1;          // supervisor's end of the pty handoff
  int output_fd_ = -1;
  int winch_fd_ = -1;
  sigset_t old_mask_ {};
  bool mask_changed_ = false;
  bool closed_by_program_ = false;
  struct winsize size_ {};
  RawTerminal raw_;
  std::vector<char> buf_;
  std::size_t head_ = 0, tail_ = 0;
  std::uint64_t read_bytes_ = 0, delivered_bytes_ = 0, window_changes_ = 0;
  std::vector<Role> roles_;
};

}  // namespace sbx
