#include "runtime/server/fork_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/base/proc_title.hpp"

namespace sbx::mcp {

namespace {

constexpr const char* kStage = "mcp";

// The header, argv and two fds in one message; the buffer bounds it (kMaxForkRequest).
struct Message {
  ForkRequest head;
  std::vector<std::string> argv;
  int fds[2] = {-1, -1};
};

// One request, or false (EOF, or a message that breaks the protocol: its fds are closed).
bool receive(int sock, std::vector<char>& buf, Message& m, bool& eof) {
  iovec iov{buf.data(), buf.size()};
  alignas(cmsghdr) char cbuf[CMSG_SPACE(4 * sizeof(int))];
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof cbuf;
  ssize_t n;
  do n = ::recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  eof = n == 0;
  if (n <= 0) return false;  // EOF or an error: no control data was written
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len >= CMSG_LEN(0))
      for (std::size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        fds.push_back(fd);
      }
  bool ok =
      n >= static_cast<ssize_t>(sizeof(ForkRequest)) && !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) && fds.size() == 2;
  if (ok) {
    std::memcpy(&m.head, buf.data(), sizeof m.head);
    m.argv.clear();
    const char* p = buf.data() + sizeof m.head;
    const char* end = buf.data() + n;
    while (p < end) {
      const char* z = static_cast<const char*>(std::memchr(p, '\0', static_cast<std::size_t>(end - p)));
      if (z == nullptr) break;
      m.argv.emplace_back(p, z);
      p = z + 1;
    }
    ok = m.head.magic == ForkRequest{}.magic && p == end && m.argv.size() == m.head.argc && !m.argv.empty() &&
         m.head.pdeathsig > 0 && m.head.pdeathsig < NSIG;
  }
  if (!ok) {
    for (int fd : fds) ::close(fd);
    return false;
  }
  m.fds[0] = fds[0];
  m.fds[1] = fds[1];
  return true;
}

// A stack-protector canary of the clone's own: an exec'd worker got a fresh one, and a clone
// would otherwise share the fork server's with every other worker. Safe here: no frame entered
// before it returns in the clone (become_worker ends in _exit). glibc keeps the canary in the
// thread's TCB at %fs:0x28 on x86-64; elsewhere the clone keeps the fork server's (the layout of
// its heap, stack and mappings is the fork server's in any case, and the binary is not
// position-independent, so its code and data addresses were the same in every exec'd worker).
void new_stack_canary() {
#if defined(__x86_64__) && defined(__GLIBC__)
  std::uintptr_t canary = 0;
  if (::getrandom(&canary, sizeof canary, 0) != static_cast<ssize_t>(sizeof canary)) ::_exit(125);
  canary &= ~static_cast<std::uintptr_t>(0xff);  // glibc's low NUL byte, which stops string overflows
  __asm__ volatile("movq %0, %%fs:0x28" : : "r"(canary) : "memory");
#endif
}

// The worker's side, in the clone: spawn_worker's child as it was before its exec.
// It runs nothing until the fork server has sent the server its pid (`gate` then gives a byte;
// EOF: the answer was not sent, and the server execs the worker itself).
[[noreturn]] void become_worker(int sock, int gate, Message& m,
                                const std::function<int(std::vector<std::string>&)>& run) {
  new_stack_canary();
  set_proc_title(0, nullptr, "sbx");  // not the fork server's title, until sbx_main sets its own
  ::close(sock);
  char go = 0;
  ssize_t n;
  do n = ::read(gate, &go, 1);
  while (n < 0 && errno == EINTR);
  if (n != 1) ::_exit(0);
  ::close(gate);
  if (::dup2(m.fds[0], 0) < 0 || ::dup2(m.fds[1], 1) < 0) ::_exit(125);
  for (int fd : m.fds)
    if (fd > 2) ::close(fd);
  ::prctl(PR_SET_PDEATHSIG, m.head.pdeathsig);
  // The server died before the prctl: its signal is sent here instead (spawn_worker says why).
  if (::getppid() != m.head.server_pid) ::kill(::getpid(), m.head.pdeathsig);
  ::setpgid(0, 0);
  ::_exit(run(m.argv));
}

}  // namespace

Status send_fork_request(int sock, const std::vector<std::string>& argv, int in_fd, int out_fd, int pdeathsig) {
  std::string strings;
  for (auto& a : argv) (strings += a) += '\0';
  if (sizeof(ForkRequest) + strings.size() > kMaxForkRequest)
    return make_error(kStage, "a worker's command line is larger than the fork server takes", E2BIG);
  ForkRequest head;
  head.pdeathsig = pdeathsig;
  head.server_pid = ::getpid();
  head.argc = static_cast<std::uint32_t>(argv.size());
  iovec iov[2] = {{&head, sizeof head}, {strings.data(), strings.size()}};
  alignas(cmsghdr) char cbuf[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr mh{};
  mh.msg_iov = iov;
  mh.msg_iovlen = 2;
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof cbuf;
  cmsghdr* c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(2 * sizeof(int));
  int fds[2] = {in_fd, out_fd};
  std::memcpy(CMSG_DATA(c), fds, sizeof fds);
  ssize_t n;
  do n = ::sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n < 0) return sys_error(kStage, "send a request to the fork server");
  return {};
}

Result<ForkServer> ForkServer::start(const std::vector<std::string>& args) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return sys_error(kStage, "socketpair for the fork server");
  UniqueFd ours(sv[0]), theirs(sv[1]);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t server = ::getpid();
  pid_t pid = ::fork();  // the server is single-threaded, and exec follows at once
  if (pid < 0) return sys_error(kStage, "fork the fork server");
  if (pid == 0) {
    // stdin the socket; stdout /dev/null: the server's is its client's channel, which no worker
    // holds either (mcp_server.hpp); stderr the server's, for the workers' log lines.
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (::dup2(theirs.get(), 0) < 0 || null < 0 || ::dup2(null, 1) < 0) ::_exit(125);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != server) ::_exit(0);
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  return attach(std::move(ours), pid);
}

Result<ForkServer> ForkServer::attach(UniqueFd sock, pid_t pid) {
  ForkServer forks(std::move(sock), pid);
  // Ready once it says so: its exec and start-up are not counted against a worker's answer.
  pollfd p{forks.sock_.get(), POLLIN, 0};
  int r;
  do r = ::poll(&p, 1, kForkReadyMs);
  while (r < 0 && errno == EINTR);
  std::int32_t ready = 0;
  if (r <= 0 || ::recv(forks.sock_.get(), &ready, sizeof ready, MSG_DONTWAIT) != static_cast<ssize_t>(sizeof ready) ||
      ready != kForkReady) {
    forks.stop_now();
    return make_error(kStage, "it did not start within " + std::to_string(kForkReadyMs) + " ms", ETIMEDOUT);
  }
  return forks;
}

ForkServer::ForkServer(ForkServer&& o) noexcept : sock_(std::move(o.sock_)), pid_(o.pid_) { o.pid_ = -1; }

void ForkServer::end(const std::string& why) {
  if (!sock_.ok()) return;
  sock_.reset();
  stop_now();  // reaped now, not left a zombie until the server ends
  std::string line = "sbx: mcp: fork server: " + why + "; workers are exec'd from now on\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

void ForkServer::stop_now() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {}
  pid_ = -1;
}

ForkServer::~ForkServer() {
  sock_.reset();
  if (pid_ <= 0) return;
  for (int i = 0; i < 100; ++i) {
    pid_t r = ::waitpid(pid_, nullptr, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) return;
    ::usleep(10000);
  }
  ::kill(pid_, SIGKILL);
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {}
}

Result<pid_t> ForkServer::spawn(const std::vector<std::string>& args, int in_fd, int out_fd, int pdeathsig) {
  if (!sock_.ok()) return make_error(kStage, "the fork server has ended");
  if (Status st = send_fork_request(sock_.get(), args, in_fd, out_fd, pdeathsig); !st) {
    if (st.error().err != E2BIG) end(st.error().describe());  // too large: this request alone
    return st.error();
  }
  pollfd p{sock_.get(), POLLIN, 0};
  int r;
  do r = ::poll(&p, 1, kForkAnswerMs);
  while (r < 0 && errno == EINTR);
  // Too slow (or poll failed): killed first, so that no worker of this request can start later;
  // its answer, if it sent one, is still read.
  if (r <= 0) stop_now();
  std::int32_t answer = 0;
  ssize_t n = ::recv(sock_.get(), &answer, sizeof answer, MSG_DONTWAIT);
  if (r <= 0) end(r == 0 ? "it did not answer within " + std::to_string(kForkAnswerMs) + " ms" : "poll failed");
  if (n != static_cast<ssize_t>(sizeof answer)) {
    if (r > 0) end("it ended");
    return make_error(kStage, "the fork server gave no answer", r == 0 ? ETIMEDOUT : EPIPE);
  }
  if (answer <= 0) {
    // A clone it cannot make (pids.max, a filter that refuses CLONE_PARENT) costs each call a
    // round trip before the exec: after a few in a row, it is not asked again.
    if (++refused_ >= kMaxForkRefusals) end("it could not fork " + std::to_string(refused_) + " workers in a row");
    return make_error(kStage, "the fork server could not fork a worker", -answer);
  }
  refused_ = 0;
  return static_cast<pid_t>(answer);
}

int serve_forks(int sock, const std::function<int(std::vector<std::string>&)>& run) {
  // As the server's loop has it while it spawns workers (mcp_server.cpp, Server::run), and so as
  // its exec'd workers inherited it: a reader gone away is EPIPE, not death.
  ::signal(SIGPIPE, SIG_IGN);
  if (::send(sock, &kForkReady, sizeof kForkReady, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof kForkReady)) return 1;
  std::vector<char> buf(kMaxForkRequest);
  for (;;) {
    Message m;
    bool eof = false;
    if (!receive(sock, buf, m, eof)) return eof ? 0 : 1;
    int gate[2] = {-1, -1};
    long pid = -1;
    int err = 0;
    if (::pipe2(gate, O_CLOEXEC) == 0) {
      // CLONE_PARENT: the worker is the server's child (its exit signal, its wait), not ours. A
      // fork-like clone: the child runs on a copy of this stack.
      pid = ::syscall(SYS_clone, CLONE_PARENT, nullptr, nullptr, nullptr, 0);
      if (pid == 0) {
        ::close(gate[1]);
        become_worker(sock, gate[0], m, run);
      }
      if (pid < 0) err = errno;
      ::close(gate[0]);
    } else {
      err = errno;
    }
    std::int32_t answer = pid > 0 ? static_cast<std::int32_t>(pid) : -(err != 0 ? err : EAGAIN);
    ::close(m.fds[0]);
    ::close(m.fds[1]);
    bool sent = ::send(sock, &answer, sizeof answer, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof answer);
    if (pid > 0 && sent) (void)!::write(gate[1], "g", 1);
    if (gate[1] >= 0) ::close(gate[1]);
    if (!sent) return 1;
  }
}

}  // namespace sbx::mcp
