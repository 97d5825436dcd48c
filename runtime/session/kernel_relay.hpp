#pragma once
// A Jupyter kernel inside a session (`sbx kernel run`, man sbx-kernel), host side: the TCP ports
// of the client's connection file, each accepted connection relayed as a stream through the
// session's channel to the kernel's ipc socket inside (session_tunnel.hpp, the agent's side).
// Part of the session's server loop (session_server.cpp): it adds its fds to the server's poll
// and sends frames through the server's queue to the agent.
#include <netinet/in.h>
#include <poll.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/fsutil.hpp"

namespace sbx {

inline constexpr std::size_t kMaxConnectionFileBytes = 64u << 10;
inline constexpr std::size_t kMaxKernelClients = 32;  // TCP connections at once
inline constexpr int kListenBacklog = 128;
inline constexpr int kAcceptsPerWake = 16;
inline constexpr int kSelfCheckMs = 2000;  // its own connection, at the start (check_owner_is_told)

// A client's connection file (jupyter_client writes it): the TCP address of each channel, in
// session_tunnel.hpp's order (shell, iopub, stdin, control, hb), and the message key.
struct KernelConnection {
  std::string ip = "127.0.0.1";
  int ports[5] = {0, 0, 0, 0, 0};
  std::string key, signature_scheme = "hmac-sha256", kernel_name;
};
Result<KernelConnection> read_connection_file(const std::string& path);

class KernelRelay {
 public:
  using Send = std::function<void(std::string frame)>;
  // Binds the five ports: an error names the one taken.
  static Result<KernelRelay> open(const KernelConnection& c);
  // Where frames for the agent go (the server's queue), and whether that queue is full (the
  // relay then reads nothing more from its clients).
  void connect_to_agent(Send send, std::function<bool()> agent_full) {
    send_ = std::move(send);
    agent_full_ = std::move(agent_full);
  }
  // What the agent is sent once it is ready: ipykernel's start, with the client's key.
  nlohmann::json start_request() const;
  // The agent's 'S' frames and its "closed" events.
  void from_agent(std::uint32_t id, std::string_view bytes);
  void closed(std::uint32_t id);
  // Whether a stream waits for the client to read what it was sent (the server then reads no
  // more from the agent: back-pressure instead of an unbounded queue).
  bool backlogged() const;
  void add_to(std::vector<struct pollfd>& p) const;
  // Returns whether any bytes moved (activity that keeps an idle timer from firing).
  bool dispatch(std::span<const struct pollfd> mine);
  std::uint64_t streams_opened() const { return next_id_ - 1; }

 private:
  struct Conn {
    UniqueFd fd;
    std::string out;
  };
  explicit KernelRelay(const KernelConnection& c) : conn_(c) {}
  void accept_on(int channel);
  bool admitted(int fd, int channel);
  struct Refusal {
    std::string why;         // "" when the connection may be kept
    bool other_uid = false;  // another user's socket (not one that could not be told)
  };
  Refusal refusal(int fd) const;
  Status check_owner_is_told(struct in_addr addr) const;
  void drop(std::uint32_t id, bool tell);
  bool pump(std::uint32_t id, Conn& c, short revents);

  KernelConnection conn_;
  Send send_;
  std::function<bool()> agent_full_;
  UniqueFd listeners_[5];
  std::map<std::uint32_t, Conn> conns_;
  std::uint32_t next_id_ = 1;
  uid_t owner_ = 0;                                     // sbx's effective uid: the user who started the kernel
  bool told_other_uid_ = false, told_unknown_ = false;  // the first refusal of each kind is printed
};

}  // namespace sbx
