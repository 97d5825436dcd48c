#include "runtime/session/session_server.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "runtime/base/clock.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/sha256.hpp"
#include "runtime/record/trace_store.hpp"
#include "runtime/session/session_agent.hpp"
#include "runtime/session/session_store.hpp"
#include "runtime/session/session_tunnel.hpp"
#include "runtime/session/session_wire.hpp"

namespace sbx {
namespace {
using json = nlohmann::json;
constexpr const char* kStage = "sessions";
// A call the agent has not ended this long after its own timeout: the agent is not answering.
constexpr std::int64_t kAgentGraceMs = 5000;
// After the agent's stdin is closed: how long the runner has to end the sandbox and store the
// record before it is sent SIGTERM (it then kills the sandbox and records that).
constexpr std::int64_t kRunnerGraceMs = 10000;
// Bytes queued to one client: a call's output is bounded by its limit; past this the client is
// not reading and is dropped (the call goes on and is recorded).
constexpr std::size_t kClientQueueBytes = 64u << 20;
// An agent's count is believed up to this (a hostile agent's number cannot overflow the record's).
constexpr std::int64_t kMaxSizeCounted = 1LL << 50;

struct Client {
  UniqueFd fd;
  FrameReader in;
  std::string out;
  bool closing = false;  // close once `out` is written
};

struct Stream {
  std::int64_t bytes = 0, dropped = 0;
  Sha256 hash;
};

struct ActiveCall {
  Client* client = nullptr;  // nullptr once the client went away
  bool interrupted = false;  // an interrupt went to the agent (one per call)
  std::uint64_t seq = 0;
  std::string run_id, started_at;
  std::int64_t started = 0;
  json request;
  Stream out, err;
};

void set_nonblock(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Members of what a client or the agent sent, read without trusting their types (json::value
// throws on a member of another type): the default for anything else.
std::string str_of(const json& j, const char* key, const std::string& dflt = "") { return json_str(j, key, dflt); }
bool flag_of(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}
// An integer member within [lo, hi], else null: what the agent says of an exit is believed only
// where it can be one.
json int_in(const json& j, const char* key, std::int64_t lo, std::int64_t hi) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return nullptr;
  std::int64_t v = it->get<std::int64_t>();
  return v >= lo && v <= hi ? json(v) : json(nullptr);
}
// A client whose replies pile up this far is not read from until it reads (status requests that
// are never read must not grow the server).
constexpr std::size_t kClientReplyBacklog = 1u << 20;

// What the record keeps of a request: the command, or the language and the code's digest and size
// (the code itself is the caller's, as a run's argv is: kept whole).
json request_summary(const json& r) {
  if (r.value("op", "") == "exec") return {{"argv", r["argv"]}};
  std::string code = r.value("code", "");
  return {{"language", r.value("language", "")},
          {"code", code},
          {"code_sha256", sha256_hex(code)},
          {"code_bytes", code.size()}};
}

class Server {
 public:
  Server(SessionSettings s, UniqueFd listen, UniqueFd agent_in, UniqueFd agent_out, pid_t runner, UniqueFd ready,
         std::optional<KernelRelay> kernel)
      : s_(std::move(s)),
        listen_(std::move(listen)),
        agent_in_(std::move(agent_in)),
        agent_out_(std::move(agent_out)),
        runner_(runner),
        ready_(std::move(ready)),
        relay_(std::move(kernel)) {
    if (relay_)
      relay_->connect_to_agent([this](std::string frame) { queue_to_agent(std::move(frame)); },
                               [this]() { return to_agent_.size() > kClientQueueBytes; });
  }

  int run() {
    sigset_t sigs;
    sigemptyset(&sigs);
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGCHLD}) sigaddset(&sigs, sig);
    ::sigprocmask(SIG_BLOCK, &sigs, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    sfd_ = UniqueFd(::signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK));
    set_nonblock(agent_in_.get());
    set_nonblock(agent_out_.get());
    started_ = monotonic_ms();
    last_activity_ = started_;
    while (!done_) loop_once();
    return exit_status_;
  }

 private:
  void loop_once() {
    std::vector<struct pollfd> p;
    p.push_back({sfd_.get(), POLLIN, 0});
    bool held = client_full() || (relay_ && relay_->backlogged());
    p.push_back({agent_out_.get(), static_cast<short>(agent_reader_.wants_more() && !held ? POLLIN : 0), 0});
    p.push_back({agent_in_.get(), static_cast<short>(to_agent_.empty() ? 0 : POLLOUT), 0});
    // While it ends too: a session that answers is one `ls` and `start` do not take for gone.
    p.push_back({listen_.get(), POLLIN, 0});
    for (auto& c : clients_)
      p.push_back({c->fd.get(),
                   static_cast<short>((c->closing || c->out.size() > kClientReplyBacklog ? 0 : POLLIN) |
                                      (c->out.empty() ? 0 : POLLOUT)),
                   0});
    const std::size_t relay_at = p.size();
    if (relay_) relay_->add_to(p);
    ::poll(p.data(), p.size(), poll_timeout());
    if (p[0].revents) signals();
    if (p[1].revents) from_agent();
    if (p[2].revents) flush_agent();
    if (p[3].revents) accept_client();
    if (relay_ && !stopping_ && relay_->dispatch(std::span<const struct pollfd>(p).subspan(relay_at)))
      last_activity_ = monotonic_ms();
    for (std::size_t i = 0; i < clients_.size() && 4 + i < relay_at; ++i) {
      Client* c = clients_[i].get();
      if (p[4 + i].revents & POLLOUT) flush_client(*c);
      if (p[4 + i].revents & (POLLIN | POLLHUP | POLLERR)) read_client(*c);
    }
    std::erase_if(clients_, [this](const std::unique_ptr<Client>& c) {
      bool gone = !c->fd.ok() || (c->closing && c->out.empty());
      if (gone && call_ && call_->client == c.get()) call_->client = nullptr;
      return gone;
    });
    timers();
  }

  int poll_timeout() const {
    std::int64_t now = monotonic_ms(), next = now + 60000;
    if (!stopping_) {
      next = std::min(next, started_ + s_.max_ms);
      if (!call_) next = std::min(next, last_activity_ + s_.idle_ms);
      if (call_) next = std::min(next, call_->started + call_timeout(call_->request) + kAgentGraceMs);
    } else {
      next = std::min(next, stop_at_ + (runner_termed_ ? 2 : 1) * kRunnerGraceMs);
    }
    return static_cast<int>(std::clamp<std::int64_t>(next - now, 0, 60000));
  }

  bool client_full() const { return call_ && call_->client && call_->client->out.size() > kClientQueueBytes; }

  // --- the runner and the signals sent to the server
  void signals() {
    struct signalfd_siginfo si;
    while (::read(sfd_.get(), &si, sizeof si) == sizeof si) {
      if (si.ssi_signo == SIGCHLD) {
        reap_runner();
      } else if (si.ssi_signo == SIGINT && relay_) {
        // A kernel is interrupted by a message on its control channel: a terminal's Ctrl-C that
        // reached this process group is not the client's shutdown.
      } else {
        stop("signal");
      }
    }
  }

  void reap_runner() {
    int st = 0;
    if (runner_ > 0 && ::waitpid(runner_, &st, WNOHANG) == runner_) {
      runner_ = -1;
      end_session(stopping_ ? ended_by_ : "sandbox_ended");
    }
  }

  // --- the agent
  void from_agent() {
    char buf[64 << 10];
    ssize_t n = ::read(agent_out_.get(), buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
      agent_gone("the session's sandbox ended");
      return;
    }
    agent_reader_.feed(std::string_view(buf, static_cast<std::size_t>(n)));
    for (;;) {
      auto f = agent_reader_.next();
      if (!f) return agent_gone("the session's agent broke the protocol: " + f.error().message);
      if (!*f) return;
      try {
        if (!on_agent_frame(**f)) return;
      } catch (const json::exception&) {
        return agent_gone("the session's agent broke the protocol: a malformed message");
      }
    }
  }

  bool on_agent_frame(Frame& f) {
    if (f.type == 'S' && relay_) {
      std::uint32_t id = 0;
      std::string_view bytes;
      if (decode_stream_frame(f.body, id, bytes)) relay_->from_agent(id, bytes);
      last_activity_ = monotonic_ms();
      return true;
    }
    if (f.type == 'O' || f.type == 'E') {
      if (!call_) return true;  // not a call's: dropped
      Stream& st = f.type == 'O' ? call_->out : call_->err;
      std::int64_t limit = call_output_limit(call_->request);
      auto room = static_cast<std::size_t>(std::max<std::int64_t>(0, limit - st.bytes));
      std::string_view pass(f.body.data(), std::min(room, f.body.size()));
      st.bytes += static_cast<std::int64_t>(pass.size());
      st.dropped += static_cast<std::int64_t>(f.body.size() - pass.size());
      st.hash.update(pass.data(), pass.size());
      if (call_->client && !pass.empty()) call_->client->out += encode_frame(f.type, pass);
      return true;
    }
    auto j = frame_json(f);
    if (!j) {
      agent_gone("the session's agent broke the protocol: " + j.error().message);
      return false;
    }
    std::string event = str_of(*j, "event");
    if (event == "ready" && !ready_seen_) {
      ready_seen_ = true;
      record_start();
      s_.meta["state"] = "running";
      (void)write_session_meta(session_dir(s_.dirs, s_.id) + "/session.json", s_.meta);
      if (ready_.ok()) (void)write_all(ready_.get(), "ok\n", "the start's pipe");
      ready_.reset();
      if (relay_) to_agent(relay_->start_request());
    } else if (relay_ && event == "closed" && j->value("stream", json(0)).is_number_unsigned()) {
      relay_->closed((*j)["stream"].get<std::uint32_t>());
    } else if (relay_ && event == "kernel_exited") {
      stop("kernel_exited");
    } else if ((event == "done" || event == "error") && call_) {
      finish_call(*j);
    }
    return true;
  }

  void agent_gone(const std::string& why) {
    agent_out_.reset();
    if (call_) fail_call(why);
    stop(stopping_ ? ended_by_ : "sandbox_ended");
  }

  void to_agent(const json& j) { queue_to_agent(encode_json_frame(j)); }
  void queue_to_agent(std::string frame) {
    if (!agent_in_.ok()) return;
    to_agent_ += frame;
    flush_agent();
  }

  void flush_agent() {
    while (!to_agent_.empty() && agent_in_.ok()) {
      ssize_t n = ::write(agent_in_.get(), to_agent_.data(), to_agent_.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      if (n <= 0) {
        to_agent_.clear();
        return;
      }
      to_agent_.erase(0, static_cast<std::size_t>(n));
    }
  }

  // --- clients
  void accept_client() {
    UniqueFd fd(::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.ok()) return;
    struct ucred cred {};
    socklen_t len = sizeof cred;
    // Only the user who started the session (its directory is 0700 too).
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != ::getuid()) return;
    if (clients_.size() >= kMaxSessionClients) {
      // Full: the oldest connection that neither runs the call nor waits for the stop makes room
      // (idle connections cannot lock the owner out of stop and exec).
      auto busy = [this](const Client* c) {
        return (call_ && call_->client == c) ||
               std::find(stop_waiters_.begin(), stop_waiters_.end(), c) != stop_waiters_.end();
      };
      auto it = std::find_if(clients_.begin(), clients_.end(),
                             [&](const std::unique_ptr<Client>& c) { return !busy(c.get()); });
      if (it == clients_.end()) return;
      (*it)->fd.reset();
      clients_.erase(it);
    }
    auto c = std::make_unique<Client>();
    c->fd = std::move(fd);
    clients_.push_back(std::move(c));
  }

  void flush_client(Client& c) {
    while (!c.out.empty()) {
      ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      if (n <= 0) {
        c.fd.reset();
        return;
      }
      c.out.erase(0, static_cast<std::size_t>(n));
    }
    if (c.out.size() > kClientQueueBytes) c.fd.reset();
  }

  void read_client(Client& c) {
    char buf[64 << 10];
    ssize_t n = ::read(c.fd.get(), buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
      // A client that went away mid-call: the call is interrupted, and still recorded.
      if (call_ && call_->client == &c) {
        call_->client = nullptr;
        interrupt_call();
      }
      c.fd.reset();
      return;
    }
    c.in.feed(std::string_view(buf, static_cast<std::size_t>(n)));
    for (;;) {
      auto f = c.in.next();
      if (!f) return reply_and_close(c, f.error().message);
      if (!*f) return;
      auto j = frame_json(**f);
      if (!j) return reply_and_close(c, j.error().message);
      try {
        on_request(c, *j);
      } catch (const json::exception&) { return reply_and_close(c, "a malformed session request"); }
      if (!c.fd.ok() || c.closing || c.out.size() > kClientReplyBacklog) return;
    }
  }

  void reply(Client& c, const json& j) {
    c.out += encode_json_frame(j);
    if (c.out.size() > kClientQueueBytes) c.fd.reset();  // not reading: dropped
  }

  void interrupt_call() {
    if (!call_ || call_->interrupted) return;
    call_->interrupted = true;
    to_agent({{"op", "interrupt"}});
  }
  void reply_and_close(Client& c, const std::string& why) {
    reply(c, {{"event", "error"}, {"stage", kStage}, {"message", why}});
    c.closing = true;
  }

  std::int64_t call_timeout(const json& r) const {
    auto it = r.find("timeout_ms");
    return it != r.end() && it->is_number_integer() ? it->get<std::int64_t>() : s_.call_timeout_ms;
  }
  std::int64_t call_output_limit(const json& r) const {
    auto it = r.find("output_limit");
    return it != r.end() && it->is_number_integer() ? it->get<std::int64_t>() : s_.call_output_limit;
  }

  // A request's checks: a call may lower its timeout and output limit, never raise them.
  std::string check_call(json& r) const {
    // What goes to the agent must fit one frame with the limits added (the agent would take a
    // longer one for a broken stream and end the session).
    if (std::size_t n = dump_json(r, -1).size(); n > kMaxFrame - 4096)
      return "the request is " + std::to_string(n) + " bytes; a session call takes at most " +
             std::to_string(kMaxFrame - 4096);
    std::string op = r.value("op", "");
    if (op == "exec") {
      auto it = r.find("argv");
      if (it == r.end() || !it->is_array() || it->empty() ||
          !std::all_of(it->begin(), it->end(), [](const json& a) { return a.is_string(); }))
        return "exec needs \"argv\": a non-empty list of strings";
    } else {
      std::string lang = r.value("language", "");
      if (lang != "python" && lang != "sh" && lang != "bash" && lang != "node")
        return "unknown language '" + lang + "' (python, sh, bash or node)";
      if (!r.contains("code") || !r["code"].is_string()) return "a code call needs \"code\": a string";
    }
    for (auto [key, ceiling] : {std::pair<const char*, std::int64_t>{"timeout_ms", s_.call_timeout_ms},
                                {"output_limit", s_.call_output_limit}}) {
      auto it = r.find(key);
      if (it == r.end()) {
        r[key] = ceiling;
      } else if (!it->is_number_integer() || it->get<std::int64_t>() < 1 || it->get<std::int64_t>() > ceiling) {
        return std::string(key) + " must be from 1 to " + std::to_string(ceiling) + " (the session's limit)";
      }
    }
    return "";
  }

  void on_request(Client& c, json& r) {
    std::string op = str_of(r, "op");
    if (op == "status") return reply(c, status_json());
    if (op == "stop") {
      if (std::find(stop_waiters_.begin(), stop_waiters_.end(), &c) == stop_waiters_.end()) stop_waiters_.push_back(&c);
      return stop(str_of(r, "reason") == "client_gone" ? "client_gone" : "stop");
    }
    if (op == "interrupt") {
      if (call_ && call_->client == &c) interrupt_call();
      return;
    }
    if (op != "exec" && op != "code") return reply_and_close(c, "unknown request '" + op + "'");
    if (relay_)
      return reply_and_close(
          c, "session " + s_.id + " is a Jupyter kernel's (sbx kernel run): it takes no calls; use its client");
    if (stopping_) return reply_and_close(c, "session " + s_.id + " is ending");
    if (call_)
      return reply_and_close(c, "session " + s_.id + " is busy with call " + std::to_string(call_->seq) +
                                    ": one call at a time (try again when it ends)");
    if (std::string why = check_call(r); !why.empty()) return reply_and_close(c, why);
    call_.emplace();
    call_->client = &c;
    call_->seq = ++calls_;
    call_->run_id = make_run_id();
    call_->started_at = rfc3339_now();
    call_->started = monotonic_ms();
    call_->request = r;
    json to = r;
    to_agent(to);
  }

  json status_json() const {
    json j = s_.meta;
    j["event"] = "status";
    j["state"] = stopping_ ? "ending" : "running";
    j["calls"] = calls_;
    j["busy"] = call_.has_value();
    return j;
  }

  // --- a call's end: its record first, then the answer (no result without its record)
  void finish_call(const json& agent) {
    json result = {{"status", "ok"}};
    if (str_of(agent, "event") == "error") {
      result = {{"status", "error"}, {"error", {{"stage", kStage}, {"message", str_of(agent, "message", "?")}}}};
    } else {
      json ec = int_in(agent, "exit_code", 0, 255), sig = int_in(agent, "signal", 1, 64);
      result["exit_code"] = ec;
      result["signal"] = sig;
      if (flag_of(agent, "timed_out")) result["status"] = "timeout";
      else if (flag_of(agent, "interrupted")) result["status"] = "interrupted";
      else if (sig.is_number_integer()) result["status"] = "killed";
      else if (!ec.is_number_integer() || ec.get<std::int64_t>() != 0) result["status"] = "exit_nonzero";
    }
    // What the agent read past the limit and never sent: its own count (the server counts only
    // what it was sent beyond the limit).
    for (auto [key, st] : {std::pair{"stdout_dropped", &call_->out}, std::pair{"stderr_dropped", &call_->err}}) {
      auto it = agent.find(key);
      if (it != agent.end() && it->is_number_integer() && it->get<std::int64_t>() > 0)
        st->dropped += std::min<std::int64_t>(it->get<std::int64_t>(), kMaxSizeCounted);
    }
    json extra;
    if (std::string i = str_of(agent, "interpreter"); i == "kept" || i == "new" || i == "lost")
      extra["interpreter"] = i;
    record_and_answer(result, extra);
  }

  void fail_call(const std::string& why) {
    record_and_answer({{"status", "error"}, {"error", {{"stage", kStage}, {"message", why}}}}, json::object());
  }

  void record_and_answer(const json& result, const json& extra) {
    ActiveCall& c = *call_;
    auto stream = [](Stream& s) {
      return json{{"bytes", s.bytes}, {"dropped", s.dropped}, {"sha256", s.hash.final_hex()}};
    };
    json rec = {
        {"schema", "sbx.session-call/v1"},
        {"run_id", c.run_id},
        {"started_at", c.started_at},
        {"ended_at", rfc3339_now()},
        {"session", {{"id", s_.id}, {"run_id", s_.run_id}, {"call", c.seq}}},
        {"invocation",
         {{"request", request_summary(c.request)},
          {"limits", {{"timeout_ms", call_timeout(c.request)}, {"output_limit", call_output_limit(c.request)}}}}},
        {"stdout", stream(c.out)},
        {"stderr", stream(c.err)},
        {"result", result},
        {"usage", {{"wall_ms", monotonic_ms() - c.started}}}};
    if (c.request.value("op", "") == "exec") rec["invocation"]["spec"] = {{"argv", c.request["argv"]}};
    else rec["invocation"]["spec"] = {{"argv", {c.request.value("language", ""), "<code>"}}};
    for (auto& [k, v] : extra.items()) rec["session"][k] = v;
    json answer = {{"event", "done"},
                   {"session", s_.id},
                   {"call", c.seq},
                   {"run_id", c.run_id},
                   {"timeout_ms", call_timeout(c.request)},
                   {"result", result},
                   {"stdout", rec["stdout"]},
                   {"stderr", rec["stderr"]},
                   {"wall_ms", rec["usage"]["wall_ms"]}};
    if (extra.contains("interpreter")) answer["interpreter"] = extra["interpreter"];
    std::string text = dump_json(rec, -1);
    auto stored = store_trace(s_.dirs, c.run_id, text);
    if (stored) {
      answer["record"] = {{"seq", stored->seq}, {"hash", stored->hash}};
    } else {
      answer["result"] = {{"status", "error"},
                          {"error", {{"stage", "record"}, {"message", stored.error().describe()}}}};
    }
    if (c.client) reply(*c.client, answer);
    call_.reset();
    last_activity_ = monotonic_ms();
    s_.meta["calls"] = calls_;
    s_.meta["last_call_at"] = rfc3339_now();
    (void)write_session_meta(session_dir(s_.dirs, s_.id) + "/session.json", s_.meta);
  }

  // The session's record at its start (the end record is the session run's own, written by the
  // runner): who started it, under which profile, image and limits.
  void record_start() {
    json rec = {
        {"schema", "sbx.session-start/v1"},
        {"run_id", make_run_id()},
        {"started_at", s_.meta.value("started_at", "")},
        {"ended_at", rfc3339_now()},
        {"session", s_.meta},
        {"invocation", {{"spec", {{"argv", relay_ ? json{"sbx", "kernel", "run"} : json{"sbx", "session", "start"}}}}}},
        {"result", {{"status", "started"}}},
        {"usage", {{"wall_ms", monotonic_ms() - started_}}}};
    rec["session"].erase("state");
    std::string text = dump_json(rec, -1);
    if (auto st = store_trace(s_.dirs, rec["run_id"].get<std::string>(), text); !st)
      std::fprintf(stderr, "sbx: session %s: its start record could not be stored: %s\n", s_.id.c_str(),
                   st.error().describe().c_str());
  }

  // --- the end
  void timers() {
    if (done_) return;
    std::int64_t now = monotonic_ms();
    if (stopping_) {
      // The runner ends the sandbox and records it on SIGTERM; SIGKILL is the last resort (its
      // sandbox then dies with it: init's parent-death signal).
      if (runner_ > 0 && now >= stop_at_ + 2 * kRunnerGraceMs) ::kill(runner_, SIGKILL);
      else if (runner_ > 0 && now >= stop_at_ + kRunnerGraceMs && !runner_termed_) ::kill(runner_, SIGTERM);
      runner_termed_ = runner_termed_ || now >= stop_at_ + kRunnerGraceMs;
      return;
    }
    if (now >= started_ + s_.max_ms) return stop("max");
    if (!call_ && now >= last_activity_ + s_.idle_ms) return stop("idle");
    if (call_ && now >= call_->started + call_timeout(call_->request) + kAgentGraceMs) {
      fail_call("the session's agent did not end the call within its timeout; the session ends");
      stop("agent_unresponsive");
    }
  }

  // Ends the session: the agent's stdin closes, so it kills every process of the session and
  // exits; the runner then records the session run and exits; end_session follows its reaping.
  void stop(const std::string& why) {
    if (stopping_) return;
    stopping_ = true;
    ended_by_ = why;
    stop_at_ = monotonic_ms();
    if (call_) to_agent({{"op", "interrupt"}});
    json end = {{"calls", calls_}, {"ended_by", why}};
    (void)write_session_meta(session_dir(s_.dirs, s_.id) + "/end.json", end);
    to_agent_.clear();
    agent_in_.reset();
  }

  // Why a session that never answered did not start: the runner's last line (sbx's own setup
  // error), read before its directory goes, and the session run's record.
  std::string start_failure(const std::string& why) const {
    std::string line;
    if (auto log = read_bounded(session_dir(s_.dirs, s_.id) + "/runner.log", kMaxSessionMetaBytes, kStage, "log")) {
      std::string text = *log;
      while (!text.empty() && text.back() == '\n') text.pop_back();
      line = text.substr(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
      if (line.rfind("sbx: ", 0) == 0) line.erase(0, 5);
    }
    return "the session ended (" + why + ") before it was ready" + (line.empty() ? "" : ": " + line) +
           " (its record: sbx trace show " + s_.run_id + ")";
  }

  void end_session(const std::string& why) {
    if (call_) fail_call("the session ended (" + why + ") during the call");
    json end = s_.meta;
    end["state"] = "ended";
    end["ended_by"] = why;
    end["ended_at"] = rfc3339_now();
    end["calls"] = calls_;
    // A start that never got its answer learns why, once the session is gone from `ls`; a kernel
    // (no start waiting) says it on stderr, where jupyter_client logs it.
    std::string failure = ready_seen_ ? "" : start_failure(why);
    retire_session_dir(s_.dirs, s_.id, end);
    listen_.reset();
    if (ready_.ok()) (void)write_all(ready_.get(), "error: " + failure + "\n", "the start's pipe");
    else if (!ready_seen_) std::fprintf(stderr, "sbx: kernel run: %s\n", failure.c_str());
    ready_.reset();
    if (!ready_seen_) exit_status_ = 125;
    for (Client* c : stop_waiters_)
      for (auto& owned : clients_)
        if (owned.get() == c)
          reply(
              *c,
              {{"event", "stopped"}, {"session", s_.id}, {"ended_by", why}, {"calls", calls_}, {"run_id", s_.run_id}});
    // The answers go out within a second at most: a client that does not read is not waited for.
    std::int64_t until = monotonic_ms() + 1000;
    for (;;) {
      std::vector<struct pollfd> p;
      for (auto& c : clients_)
        if (c->fd.ok() && !c->out.empty()) p.push_back({c->fd.get(), POLLOUT, 0});
      std::int64_t left = until - monotonic_ms();
      if (p.empty() || left <= 0 || ::poll(p.data(), p.size(), static_cast<int>(left)) <= 0) break;
      for (auto& c : clients_)
        if (c->fd.ok() && !c->out.empty()) flush_client(*c);
    }
    done_ = true;
  }

  SessionSettings s_;
  UniqueFd listen_, agent_in_, agent_out_;
  pid_t runner_;
  UniqueFd ready_, sfd_;
  FrameReader agent_reader_;
  std::string to_agent_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<Client*> stop_waiters_;
  std::optional<ActiveCall> call_;
  std::optional<KernelRelay> relay_;
  bool ready_seen_ = false;
  std::uint64_t calls_ = 0;
  std::int64_t started_ = 0, last_activity_ = 0, stop_at_ = 0;
  bool stopping_ = false, runner_termed_ = false, done_ = false;
  int exit_status_ = 0;  // 125: the session never became ready
  std::string ended_by_;
};

}  // namespace

int serve_session(SessionSettings s, UniqueFd listen, UniqueFd agent_in, UniqueFd agent_out, pid_t runner,
                  UniqueFd ready_fd, std::optional<KernelRelay> kernel) {
  return Server(std::move(s), std::move(listen), std::move(agent_in), std::move(agent_out), runner, std::move(ready_fd),
                std::move(kernel))
      .run();
}

}  // namespace sbx
