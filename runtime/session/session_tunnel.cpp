#include "runtime/session/session_tunnel.hpp"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "runtime/base/json_io.hpp"
#include "runtime/session/session_child.hpp"
#include "runtime/session/session_wire.hpp"

namespace sbx {
namespace {
using json = nlohmann::json;

std::string socket_path(int channel) { return std::string(kKernelDir) + "/k-" + std::to_string(channel); }
}  // namespace

std::string encode_stream_frame(std::uint32_t id, std::string_view bytes) {
  std::string body(4, '\0');
  for (int i = 0; i < 4; ++i) body[static_cast<std::size_t>(i)] = static_cast<char>(id >> (24 - 8 * i));
  body.append(bytes);
  return encode_frame('S', body);
}

bool decode_stream_frame(std::string_view body, std::uint32_t& id, std::string_view& bytes) {
  if (body.size() < 4) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(body.data());
  id = (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
  bytes = body.substr(4);
  return true;
}

bool AgentTunnel::handle(const json& j) {
  std::string op = j.value("op", "");
  auto id = [&j]() { return j.value("stream", json(0)).is_number_unsigned() ? j["stream"].get<std::uint32_t>() : 0u; };
  if (op == "kernel") {
    start_kernel(j.value("connection", json::object()));
  } else if (op == "connect") {
    connect(id(), j.value("channel", json(0)).is_number_integer() ? j["channel"].get<int>() : 0);
  } else if (op == "close") {
    drop(id(), false);
  } else {
    return false;
  }
  return true;
}

// ipykernel with the client's key and an ipc transport on the sandbox's own tmpfs. Its stdout
// and stderr are its logs, not a cell's output (that travels on iopub): dropped.
void AgentTunnel::start_kernel(const json& connection) {
  if (kernel_ > 0) return send_(encode_json_frame({{"event", "error"}, {"message", "the kernel is already running"}}));
  json conn = {{"transport", "ipc"},
               {"ip", std::string(kKernelDir) + "/k"},
               {"shell_port", 1},
               {"iopub_port", 2},
               {"stdin_port", 3},
               {"control_port", 4},
               {"hb_port", 5},
               {"key", connection.value("key", "")},
               {"signature_scheme", connection.value("signature_scheme", "hmac-sha256")},
               {"kernel_name", connection.value("kernel_name", "")}};
  std::string file = std::string(kKernelDir) + "/connection.json";
  std::string text = dump_json(conn, -1);
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool written = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (fd >= 0) ::close(fd);
  if (!written)
    return send_(
        encode_json_frame({{"event", "kernel_exited"}, {"exit_code", nullptr}, {"message", "cannot write " + file}}));
  pid_t pid = ::fork();
  if (pid == 0) {
    int null = ::open("/dev/null", O_WRONLY);
    session_child_setup(null, null, 2);
    const char* argv[] = {"python3", "-m", "ipykernel_launcher", "-f", file.c_str(), nullptr};
    ::execvp(argv[0], const_cast<char**>(argv));
    ::_exit(127);
  }
  if (pid < 0) return send_(encode_json_frame({{"event", "kernel_exited"}, {"exit_code", nullptr}}));
  ::setpgid(pid, pid);
  kernel_ = pid;
  send_(encode_json_frame({{"event", "kernel_started"}}));
}

// A client's connection to channel C: a connection to the kernel's socket. One that is not
// there yet (the kernel is still starting) is closed at once; ZeroMQ on the client's side
// connects again.
void AgentTunnel::connect(std::uint32_t id, int channel) {
  if (conns_.count(id) || conns_.size() >= kMaxStreams || channel < 1 || channel > 5) return drop(id, true);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  struct sockaddr_un a {};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", socket_path(channel).c_str());
  if (fd < 0 || ::connect(fd, reinterpret_cast<struct sockaddr*>(&a), sizeof a) != 0) {
    if (fd >= 0) ::close(fd);
    return drop(id, true);
  }
  conns_[id].fd = fd;
}

void AgentTunnel::drop(std::uint32_t id, bool tell) {
  if (auto it = conns_.find(id); it != conns_.end()) {
    ::close(it->second.fd);
    conns_.erase(it);
  }
  if (tell) send_(encode_json_frame({{"event", "closed"}, {"stream", id}}));
}

void AgentTunnel::to_stream(std::uint32_t id, std::string_view bytes) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  if (it->second.out.size() + bytes.size() > kStreamQueueBytes) return drop(id, true);
  it->second.out.append(bytes);
  pump(id, it->second, POLLOUT);
}

void AgentTunnel::add_to(std::vector<struct pollfd>& p) const {
  for (auto& [id, c] : conns_) p.push_back({c.fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
}

void AgentTunnel::dispatch(std::span<const struct pollfd> mine) {
  std::vector<std::pair<std::uint32_t, short>> ready;
  std::size_t i = 0;
  for (auto& [id, c] : conns_) {
    if (i < mine.size() && mine[i].revents) ready.push_back({id, mine[i].revents});
    ++i;
  }
  for (auto [id, revents] : ready)
    if (auto it = conns_.find(id); it != conns_.end()) pump(id, it->second, revents);
}

void AgentTunnel::pump(std::uint32_t id, Conn& c, short revents) {
  while ((revents & POLLOUT) && !c.out.empty()) {
    ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) return drop(id, true);
    c.out.erase(0, static_cast<std::size_t>(n));
  }
  if (!(revents & (POLLIN | POLLHUP | POLLERR))) return;
  char buf[64 << 10];
  ssize_t n = ::read(c.fd, buf, sizeof buf);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) return drop(id, true);
  send_(encode_stream_frame(id, std::string_view(buf, static_cast<std::size_t>(n))));
}

bool AgentTunnel::reaped(pid_t pid, int status) {
  if (pid != kernel_ || kernel_ < 0) return false;
  kernel_ = -1;
  for (auto it = conns_.begin(); it != conns_.end();) {
    ::close(it->second.fd);
    it = conns_.erase(it);
  }
  send_(encode_json_frame(
      {{"event", "kernel_exited"}, {"exit_code", WIFEXITED(status) ? json(WEXITSTATUS(status)) : json(nullptr)}}));
  return true;
}

}  // namespace sbx
