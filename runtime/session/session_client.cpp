#include "runtime/session/session_client.hpp"

#include <errno.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/base/fsutil.hpp"
#include "runtime/session/session_store.hpp"
#include "runtime/session/session_wire.hpp"

namespace sbx {
namespace {
using json = nlohmann::json;
constexpr const char* kStage = "sessions";

}  // namespace

Result<json> session_call(const Dirs& dirs, const std::string& id, const json& request,
                          const std::function<void(char, std::string_view)>& on_output, int interrupt_fd) {
  auto conn = connect_session(dirs, id);
  if (!conn) return conn.error();
  SBX_TRY(write_all(conn->get(), encode_json_frame(request), "to session " + id));
  FrameReader reader;
  int interrupts = 0;
  for (;;) {
    struct pollfd p[2] = {{conn->get(), POLLIN, 0}, {interrupt_fd, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0 && errno != EINTR) return sys_error(kStage, "cannot wait for the session");
    if (p[1].revents) {
      struct signalfd_siginfo si;
      while (::read(interrupt_fd, &si, sizeof si) == sizeof si) ++interrupts;
      // The first interrupts the call and waits for its answer; a second leaves (the call is
      // then interrupted and recorded all the same: the server sees its client go).
      if (interrupts > 1) return make_error("signal", "interrupted again: left the call without its answer");
      SBX_TRY(write_all(conn->get(), encode_json_frame({{"op", "interrupt"}}), "to session " + id));
    }
    if (!p[0].revents) continue;
    char buf[64 << 10];
    ssize_t n = ::read(conn->get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    reader.feed(std::string_view(buf, static_cast<std::size_t>(n)));
    for (;;) {
      auto f = reader.next();
      if (!f) return f.error();
      if (!*f) break;
      if ((*f)->type == 'O' || (*f)->type == 'E') on_output((*f)->type, (*f)->body);
      if ((*f)->type != 'J') continue;
      return frame_json(**f);
    }
  }
  return make_error(kStage, "session " + id + " ended before the call did");
}

Result<json> session_stop(const Dirs& dirs, const std::string& id, bool client_gone) {
  auto conn = connect_session(dirs, id);
  if (!conn) return conn.error();
  SBX_TRY(write_all(conn->get(), encode_json_frame({{"op", "stop"}, {"reason", client_gone ? "client_gone" : "stop"}}),
                    "to session " + id));
  FrameReader reader;
  // The server answers once its runner recorded the session: its own grace bounds that (20 s at
  // most, session_server.cpp); a server that answers not even then is not waited for.
  struct timeval tv {
    60, 0
  };
  ::setsockopt(conn->get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  for (;;) {
    auto f = read_frame(conn->get(), reader);
    if (!f) return f.error();
    if (!*f) break;
    if ((*f)->type != 'J') continue;
    auto j = frame_json(**f);
    if (j && j->value("event", "") == "stopped") return j;
  }
  return make_error(kStage, "session " + id + "'s server went away before it said it stopped");
}

}  // namespace sbx
