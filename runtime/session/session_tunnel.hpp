#pragma once
// A Jupyter kernel inside a session (`sbx kernel run`, kernel_relay.hpp), agent side: ipykernel
// runs in the sandbox with an ipc connection file whose sockets lie on a tmpfs of the sandbox's
// own (kKernelDir), and each TCP connection a Jupyter client makes outside becomes a stream
// through the session's one channel (session_wire.hpp): no network and no writable host
// directory are given to the sandbox. ZeroMQ speaks the same ZMTP over ipc as over tcp, so the
// streams carry bytes and nothing is parsed.
//   requests  {"op": "kernel", "connection": {key, signature_scheme, ...}}   starts ipykernel
//             {"op": "connect", "stream": N, "channel": C}   C: 1 shell, 2 iopub, 3 stdin,
//                                                            4 control, 5 heartbeat
//             {"op": "close", "stream": N};  'S' frames: a 4-byte stream id, then its bytes
//   events    {"event": "kernel_started"}, {"event": "kernel_exited", "exit_code": N|null}
//             {"event": "closed", "stream": N};  'S' frames back
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

namespace sbx {

inline constexpr std::string_view kKernelDir = "/run/sbx-kernel";  // a tmpfs inside the sandbox
inline constexpr std::size_t kMaxStreams = 64;
inline constexpr std::size_t kStreamQueueBytes = 16u << 20;  // queued towards one socket

// The frame of stream `id`'s bytes, and the parts of one ('S').
std::string encode_stream_frame(std::uint32_t id, std::string_view bytes);
bool decode_stream_frame(std::string_view body, std::uint32_t& id, std::string_view& bytes);

class AgentTunnel {
 public:
  using Send = std::function<void(std::string_view frame)>;
  explicit AgentTunnel(Send send) : send_(std::move(send)) {}
  // A request of the list above; false when it is none of them.
  bool handle(const nlohmann::json& j);
  void to_stream(std::uint32_t id, std::string_view bytes);
  // The poll loop's part: entries for every stream; then their revents, in the same order.
  void add_to(std::vector<struct pollfd>& p) const;
  void dispatch(std::span<const struct pollfd> mine);
  // A child the agent reaped: the kernel's end is reported.
  bool reaped(pid_t pid, int status);

 private:
  struct Conn {
    int fd = -1;
    std::string out;
  };
  void start_kernel(const nlohmann::json& connection);
  void connect(std::uint32_t id, int channel);
  void drop(std::uint32_t id, bool tell);
  void pump(std::uint32_t id, Conn& c, short revents);

  Send send_;
  pid_t kernel_ = -1;
  std::map<std::uint32_t, Conn> conns_;
};

}  // namespace sbx
