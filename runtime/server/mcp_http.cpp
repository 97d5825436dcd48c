// `sbx mcp --listen` (mcp_http.hpp): the HTTP front end, its sessions' stdio children, its metrics.
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it (Boost 1.74)

// Boost 1.74's Asio finds C++20 coroutines for GCC and for clang with libc++ only; clang 14 with
// libstdc++ (the fuzz build, tests/fuzz/) has them too (__cpp_impl_coroutine).
#if defined(__clang__) && defined(__cpp_impl_coroutine) && !defined(BOOST_ASIO_HAS_CO_AWAIT)
#define BOOST_ASIO_HAS_CO_AWAIT 1
#define BOOST_ASIO_HAS_STD_COROUTINE 1
#endif

#include "runtime/server/mcp_http.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <openssl/ssl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <deque>
#include <functional>
#include <initializer_list>
#include <list>
#include <map>
#include <optional>
#include <memory>
#include <set>
#include <type_traits>

#include "runtime/base/json_io.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/server/mcp_protocol.hpp"
#include "runtime/server/mcp_server.hpp"
#include "runtime/session/session_store.hpp"
#include "runtime/base/strings.hpp"

namespace sbx::mcp {
namespace {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using nlohmann::json;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;
constexpr auto kUse = net::use_awaitable;

inline constexpr std::size_t kMaxHeaderBytes = 16u << 10;
// A connection's read buffer at most: a request's headers, then what one read brings before the
// parser takes it into the body (which body_limit bounds). A chunk's size line, with its
// extensions, and a trailer must fit in it too: Boost 1.74 bounds neither, so without this a
// client that never ends a chunk's size line would grow the buffer without end.
inline constexpr std::size_t kReadBufferBytes = kMaxHeaderBytes + (64u << 10);
inline constexpr std::size_t kMaxChildQueueBytes = 64u << 20;     // lines written to a child, not yet taken
inline constexpr std::size_t kMaxLabelSets = 1024;                // distinct metric label sets, each family
inline constexpr std::uint64_t kMaxViolationsPerCall = 1u << 16;  // what one result may add to a counter
inline constexpr const char* kSessionHeader = "Mcp-Session-Id";
inline constexpr const char* kVersionHeader = "MCP-Protocol-Version";
// Seconds: the upper bounds of the latency histograms' buckets.
inline constexpr double kBuckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};

std::string sv(beast::string_view s) { return std::string(s.data(), s.size()); }

// What a client sent, cut for a message or a log line: at most 64 bytes and "...".
std::string excerpt(const std::string& s) { return s.size() <= 64 ? s : s.substr(0, 64) + "..."; }

// A label value as the Prometheus text format writes it (\\, \" and \n escaped).
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// A tool name as a metric label: a client names any tool it likes, so only a plain name of at
// most 64 characters is a label of its own; the rest are "other" (the label sets stay bounded).
std::string tool_label(const std::string& name) {
  if (name.empty() || name.size() > 64) return "other";
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return "other";
  return name;
}

// A metric key's labels, joined with \x1f (Metrics).
std::vector<std::string> split_key(const std::string& k) {
  std::vector<std::string> parts;
  std::size_t a = 0, b;
  while ((b = k.find('\x1f', a)) != std::string::npos) {
    parts.push_back(k.substr(a, b - a));
    a = b + 1;
  }
  parts.push_back(k.substr(a));
  return parts;
}

void prom_head(std::string& o, const char* name, const char* type, const char* help) {
  o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

// A counter family whose map keys are its label values joined with \x1f (Metrics): one sample
// per key ("other", past kMaxLabelSets, only where the family has one label).
void prom_counters(std::string& o, const char* name, const char* help, const std::map<std::string, std::uint64_t>& m,
                   std::initializer_list<const char*> labels) {
  prom_head(o, name, "counter", help);
  for (auto& [k, n] : m) {
    auto values = split_key(k);
    if (values.size() != labels.size()) continue;
    std::string set;
    std::size_t i = 0;
    for (const char* l : labels) set += (set.empty() ? "" : ",") + std::string(l) + "=\"" + label(values[i++]) + "\"";
    o += std::string(name) + "{" + set + "} " + std::to_string(n) + "\n";
  }
}

struct Histogram {
  std::vector<std::uint64_t> counts = std::vector<std::uint64_t>(std::size(kBuckets) + 1, 0);
  double sum = 0;
  std::uint64_t n = 0;
  void observe(double s) {
    std::size_t i = 0;
    while (i < std::size(kBuckets) && s > kBuckets[i]) ++i;
    ++counts[i];
    sum += s;
    ++n;
  }
};

// What /metrics says. Every family's label sets are bounded (kMaxLabelSets): past it, "other".
struct Metrics {
  std::map<std::string, std::uint64_t> calls;     // tool,tenant,outcome -> count
  std::map<std::string, Histogram> call_seconds;  // tool,tenant
  Histogram session_start_seconds;
  std::map<std::string, std::uint64_t> requests;      // path,code
  std::map<std::string, std::uint64_t> refusals;      // reason
  std::map<std::string, std::uint64_t> records;       // tenant: calls whose run has a durable record
  std::map<std::string, std::uint64_t> made_by;       // cold, pooled, template
  std::map<std::string, std::uint64_t> limit_events;  // tenant,status (timeout, oom, output_limit)
  std::map<std::string, std::uint64_t> violations;    // tenant: system calls refused, hosts denied
  std::uint64_t store_errors = 0;                     // runs whose record could not be stored
  std::uint64_t dropped_notifications = 0;
  std::uint64_t children_started = 0, children_failed = 0;
  std::size_t connections = 0;

  template <class Map>
  static auto& at(Map& m, const std::string& key) {
    if (m.size() < kMaxLabelSets || m.count(key)) return m[key];
    // Past the bound: "other" for each of the key's labels, so that the sample is still written.
    std::string other = "other";
    for (char ch : key)
      if (ch == '\x1f') other += "\x1fother";
    return m[other];
  }
};

struct Pending {
  explicit Pending(net::any_io_executor ex) : done(ex, Clock::time_point::max()) {}
  net::steady_timer done;
  bool finished = false;
  json original_id;
  json response;  // the child's, its id restored
  // A request that asked for progress (its _meta.progressToken) from a client that takes
  // text/event-stream: its answer is a stream, and the child's progress notifications for that
  // token wait here until written (at most kMaxQueuedEvents; more are dropped and counted).
  bool sse = false;
  json progress_token;
  std::deque<json> events;
};

inline constexpr std::size_t kMaxQueuedEvents = 64;
// How long a connection that has never sent a valid token may wait between requests.
inline constexpr int kUnauthenticatedIdleMs = 5000;
// What a request cancelled before its answer is answered with (the code LSP and MCP SDKs use).
inline constexpr int kRequestCancelled = -32800;

// One more of something while it lives (a connection, a refusal being written): the count goes
// down however a coroutine ends, an exception included.
struct Counted {
  explicit Counted(std::size_t& n) : n_(n) { ++n_; }
  ~Counted() { --n_; }
  Counted(const Counted&) = delete;
  Counted& operator=(const Counted&) = delete;

 private:
  std::size_t& n_;
};

// A connection as a handler sees it: a handler that streams its answer writes it here itself.
struct Conn {
  std::function<net::awaitable<boost::system::error_code>(std::string)> write;
  bool streamed = false;  // the handler wrote its answer itself
  bool keep = true;       // false: the handler's stream broke, the connection ends
  // What the answer holds until it is written (or its write fails): a tenant's call slot, so
  // that answers its client does not read count against the tenant's calls (forward).
  std::shared_ptr<void> until_written;
};

// A connection's place among the max_connections it is bounded by. At the bound a new connection
// takes the place of one that is not busy (waiting for its next request, or still sending its
// headers): one that never sent a valid token first, the longest waiting first (evict_idle).
struct Slot {
  Clock::time_point since = Clock::now();  // when it last began to wait for a request
  bool busy = false;                       // a request's body is read, or it is handled or answered
  bool authenticated = false;              // it has sent a request to /mcp with a valid token
  bool evicted = false;                    // closed for a newcomer: no longer counted
  std::function<void()> close;             // ends its reads and writes at once
};

// One MCP session: a stdio `sbx mcp` child for one token's calls.
struct Child {
  Child(net::any_io_executor ex, int in_fd, int out_fd, int pid_fd)
      : in(ex, in_fd), out(ex, out_fd), pidfd(ex, pid_fd), idle(ex) {}
  std::string id;      // Mcp-Session-Id ("" for a token's stateless child)
  std::string key;     // which token may use it (its digest; "no-auth" without tokens)
  std::string tenant;  // "" : untenanted
  pid_t pid = -1;
  net::posix::stream_descriptor in, out, pidfd;
  net::steady_timer idle;
  std::map<std::int64_t, std::shared_ptr<Pending>> pending;
  std::int64_t next_id = 1;
  std::deque<std::string> queue;
  std::size_t queued_bytes = 0;
  bool writing = false;
  bool dead = false;    // its stdout or the session is over: nothing more is sent to it
  bool reaped = false;  // its process is waited for
  Clock::time_point last_used = Clock::now();
};

json rpc_error(const json& id, int code, const std::string& message) { return error_response(id, code, message); }

// Why no session's server was started; at_bound: a bound said no (429), else a failure (500).
struct NotStarted {
  std::string why;
  bool at_bound = false;
};

std::string host_of(const std::string& authority);

class HttpServer {
 public:
  explicit HttpServer(const HttpConfig& cfg) : cfg_(cfg), acceptor_(io_) {}

  int run() {
    std::string why;
    if (!load_tls(why) || !listen(why)) {
      std::fprintf(stderr, "sbx: mcp: %s\n", printable(why).c_str());
      return 125;
    }
    if (!watch_signals(why)) {
      std::fprintf(stderr, "sbx: mcp: %s\n", printable(why).c_str());
      return 125;
    }
    if (cfg_.ready_check) net::co_spawn(io_, ready_loop(), net::detached);
    else ready_checked_ = true;
    net::co_spawn(io_, accept_loop(), net::detached);
    net::co_spawn(io_, sweep_idle_sessions(), net::detached);
    io_.run();
    return 0;
  }

 private:
  const HttpConfig& cfg_;
  // The connections max_connections bounds (evicted ones until they end). Before io_: the
  // connections' frames that io_'s end destroys take themselves off it.
  std::list<Slot> slots_;
  std::map<std::string, std::size_t> calls_in_flight_;  // by tenant; before io_ as slots_ (Conn::until_written)
  net::io_context io_;
  tcp::acceptor acceptor_;
  std::unique_ptr<net::posix::stream_descriptor> signals_;
  std::unique_ptr<net::ssl::context> tls_;                   // with --tls-cert: every connection is TLS
  std::map<std::string, std::shared_ptr<Child>> sessions_;   // by Mcp-Session-Id
  std::map<std::string, std::shared_ptr<Child>> stateless_;  // by token key
  std::size_t children_ = 0;
  std::size_t refusing_ = 0;  // connections past max_connections being answered 503
  bool stopping_ = false;
  Metrics m_;
  // The readiness check (HttpConfig::ready_check): its helper, and what it said.
  std::unique_ptr<net::posix::stream_descriptor> ready_pipe_;
  pid_t ready_pid_ = -1;
  // This server's own children (session servers, the readiness helper): reaped by their own
  // waits, never by reap_orphans.
  std::set<pid_t> own_;
  bool ready_checked_ = false;
  std::string ready_why_;

  // The readiness check until it passes: a helper per try (start_ready_helper), its verdict read
  // off the loop's pipe; a failed try is repeated after 5 s, doubling to a minute, so that a
  // passing cause (a slow first start, a node under load) does not keep the server out for good.
  net::awaitable<void> ready_loop() {
    net::steady_timer wait(io_);
    auto backoff = std::chrono::seconds(5);
    while (!stopping_) {
      if (start_ready_helper()) co_await read_ready_check();
      ready_checked_ = true;
      std::fprintf(
          stderr, "sbx: mcp: readiness check: %s\n",
          ready_why_.empty()
              ? "a throwaway sandbox ran: ready"
              : ("not ready: " + ready_why_ + " (again in " + std::to_string(backoff.count()) + " s)").c_str());
      if (ready_why_.empty()) co_return;
      boost::system::error_code ec;
      wait.expires_after(backoff);
      co_await wait.async_wait(net::redirect_error(kUse, ec));
      backoff = std::min<std::chrono::seconds>(backoff * 2, std::chrono::seconds(60));
    }
  }

  // Forks the helper that runs cfg_.ready_check and writes "ok" or why to a pipe the loop reads;
  // false (with ready_why_) when it cannot.
  bool start_ready_helper() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      ready_why_ = std::string("the readiness check could not start: pipe: ") + std::strerror(errno);
      return false;
    }
    const pid_t server = ::getpid();
    pid_t pid = ::fork();
    if (pid == 0) ready_helper(fds[1], server);  // never returns
    ::close(fds[1]);
    if (pid < 0) {
      ::close(fds[0]);
      ready_why_ = std::string("the readiness check could not start: fork: ") + std::strerror(errno);
      return false;
    }
    ::setpgid(pid, pid);  // as the helper does: whichever runs first
    ready_pid_ = pid;
    own_.insert(pid);
    ready_pipe_ = std::make_unique<net::posix::stream_descriptor>(io_, fds[0]);
    return true;
  }

  // The helper: nothing of the loop's (its sockets and signalfd closed, stdin /dev/null), signals
  // as a plain process's, its own process group (shut_down ends it and its run at once), gone with
  // the server. The server is single-threaded, so the fork left no lock held.
  [[noreturn]] void ready_helper(int out, pid_t server) {
    ::close(acceptor_.native_handle());
    if (signals_) ::close(signals_->native_handle());
    if (int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC); null >= 0) ::dup3(null, 0, 0);
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != server) ::_exit(1);  // the server ended before the death signal was set
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    std::string line;
    try {
      std::string why = cfg_.ready_check();
      line = why.empty() ? "ok" : why.substr(0, 4000);
    } catch (...) {
      line = "the readiness check failed unexpectedly";  // never unwind into the server's copy
    }
    [[maybe_unused]] auto n = ::write(out, line.data(), line.size());
    ::_exit(0);
  }

  net::awaitable<void> read_ready_check() {
    std::string said;
    boost::system::error_code ec;
    co_await net::async_read(*ready_pipe_, net::dynamic_buffer(said, 4096), net::redirect_error(kUse, ec));
    int status = 0;
    ::waitpid(ready_pid_, &status, 0);  // its pipe is closed: it has ended or is ending
    own_.erase(ready_pid_);
    ready_pid_ = -1;
    ready_pipe_->close(ec);
    ready_why_.clear();
    if (said != "ok")
      ready_why_ = said.empty() ? "the readiness check ended without a verdict (status " + std::to_string(status) + ")"
                                : printable(said);
  }

  // Why /readyz answers 503, or "" when it answers 200.
  std::string not_ready() const {
    if (stopping_) return "stopping";
    if (!ready_checked_) return "starting: a throwaway sandbox is being built (the readiness check)";
    if (!ready_why_.empty()) return "a sandbox cannot be built here: " + ready_why_;
    if (::access(cfg_.state_dir.c_str(), W_OK) != 0) return "the state directory is not writable";
    return "";
  }

  // A session server's answer: a tools/call result holds its worker's response once (the text
  // block is a summary past 4 KiB of a stream, mcp_protocol.hpp) in an envelope of a few levels.
  JsonBounds child_line_bounds() const {
    JsonBounds b = worker_response_bounds(cfg_.stream_limit_bytes);
    b.max_bytes += 1u << 20;
    b.max_depth += 8;
    b.max_values += 1u << 16;
    return b;
  }

  // TLS 1.2 or later, with the certificate chain and key of --tls-cert and --tls-key (PEM).
  // OpenSSL reads no configuration file: a static binary loads no provider or engine it names.
  bool load_tls(std::string& why) {
    if (cfg_.tls_cert.empty()) return true;
    OPENSSL_init_ssl(OPENSSL_INIT_NO_LOAD_CONFIG, nullptr);
    boost::system::error_code ec;
    tls_ = std::make_unique<net::ssl::context>(net::ssl::context::tls_server);
    tls_->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                          net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 | net::ssl::context::no_tlsv1_1 |
                          net::ssl::context::single_dh_use,
                      ec);
    if (!ec) tls_->use_certificate_chain_file(cfg_.tls_cert, ec);
    if (ec) {
      why = "--tls-cert " + cfg_.tls_cert + ": " + ec.message() + " (a PEM certificate chain)";
      return false;
    }
    tls_->use_private_key_file(cfg_.tls_key, net::ssl::context::pem, ec);
    if (ec) {
      why = "--tls-key " + cfg_.tls_key + ": " + ec.message() + " (the PEM private key of --tls-cert)";
      return false;
    }
    return true;
  }

  bool listen(std::string& why) {
    boost::system::error_code ec;
    auto addr = net::ip::make_address(cfg_.host == "localhost" ? "127.0.0.1" : cfg_.host, ec);
    if (ec) {
      why = "--listen " + cfg_.host + ": not an IP address (sbx resolves no names: give 127.0.0.1, ::1 or 0.0.0.0)";
      return false;
    }
    tcp::endpoint ep(addr, cfg_.port);
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      why = "--listen " + cfg_.host + ":" + std::to_string(cfg_.port) + ": cannot listen: " + ec.message();
      return false;
    }
    auto bound = acceptor_.local_endpoint();
    std::string shown = bound.address().is_v6() ? "[" + bound.address().to_string() + "]" : bound.address().to_string();
    std::fprintf(stderr, "sbx: mcp: listening on %s://%s:%u/mcp (%s)\n", tls_ ? "https" : "http", shown.c_str(),
                 bound.port(),
                 cfg_.no_auth ? "no authentication: loopback only"
                              : (std::to_string(cfg_.tokens.entries.size()) + " token(s)").c_str());
    return true;
  }

  bool watch_signals(std::string& why) {
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
    int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd < 0) {
      why = std::string("signalfd: ") + std::strerror(errno);
      return false;
    }
    signals_ = std::make_unique<net::posix::stream_descriptor>(io_, fd);
    net::co_spawn(io_, on_signal(), net::detached);
    return true;
  }

  net::awaitable<void> on_signal() {
    boost::system::error_code ec;
    co_await signals_->async_wait(net::posix::stream_descriptor::wait_read, net::redirect_error(kUse, ec));
    signalfd_siginfo si{};
    if (::read(signals_->native_handle(), &si, sizeof si) == static_cast<ssize_t>(sizeof si))
      std::fprintf(stderr, "sbx: mcp: signal %u: ending every session (grace %d s)\n", si.ssi_signo,
                   cfg_.grace_ms / 1000);
    co_await shut_down();
  }

  // Stop accepting; end every child (EOF on its stdin: it cancels its calls and records them);
  // past the grace period, SIGKILL what is left (its workers still record: mcp_server.hpp).
  net::awaitable<void> shut_down() {
    stopping_ = true;
    if (ready_pid_ > 0) ::kill(-ready_pid_, SIGKILL);  // the helper and its run; its reader reaps it
    boost::system::error_code ec;
    acceptor_.close(ec);
    for (auto& [id, c] : sessions_) close_child(*c);
    for (auto& [k, c] : stateless_) close_child(*c);
    net::steady_timer t(io_);
    auto until = Clock::now() + std::chrono::milliseconds(cfg_.grace_ms);
    while (children_ > 0 && Clock::now() < until) {
      t.expires_after(std::chrono::milliseconds(50));
      co_await t.async_wait(net::redirect_error(kUse, ec));
    }
    for (auto* m : {&sessions_, &stateless_})
      for (auto& [k, c] : *m)
        if (!c->reaped) ::kill(c->pid, SIGKILL);
    while (children_ > 0) {
      t.expires_after(std::chrono::milliseconds(50));
      co_await t.async_wait(net::redirect_error(kUse, ec));
    }
    io_.stop();
  }

  net::awaitable<void> sweep_idle_sessions() {
    net::steady_timer t(io_);
    boost::system::error_code ec;
    while (!stopping_) {
      t.expires_after(std::chrono::seconds(5));
      co_await t.async_wait(net::redirect_error(kUse, ec));
      auto now = Clock::now();
      for (auto* m : {&sessions_, &stateless_})
        for (auto& [k, c] : *m)
          if (!c->dead && c->pending.empty() && now - c->last_used > std::chrono::milliseconds(cfg_.session_idle_ms))
            close_child(*c);
      reap_orphans();
    }
  }

  // As a container's PID 1 (deploy/'s entrypoint execs `sbx mcp --listen`), this server inherits
  // the orphans of every process below it: the detached trace shippers the calls' runs start
  // (runtime/record/trace_mirror.hpp, kick_trace_shipper) among them. Each is reaped here, a
  // bounded number per sweep, without waiting; an exited child of this server's own is left to
  // its own wait (peeked at with WNOWAIT, never reaped here), and the next sweep goes on.
  void reap_orphans() {
    if (::getpid() != 1) return;  // elsewhere orphans go to the namespace's init, not here
    for (int i = 0; i < 256; ++i) {
      siginfo_t si{};
      if (::waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0) return;
      if (own_.contains(si.si_pid)) return;
      ::waitpid(si.si_pid, nullptr, WNOHANG);
    }
  }

  net::awaitable<void> accept_loop() {
    while (!stopping_) {
      boost::system::error_code ec;
      tcp::socket sock = co_await acceptor_.async_accept(net::redirect_error(kUse, ec));
      if (ec) {
        if (stopping_) co_return;
        // EMFILE and the like: wait a little rather than spin.
        net::steady_timer t(io_, std::chrono::milliseconds(100));
        co_await t.async_wait(net::redirect_error(kUse, ec));
        continue;
      }
      if (slots_held() >= cfg_.max_connections && !evict_idle()) {
        ++m_.refusals["connections"];
        // The 503s being written are bounded too: past as many, a connection is just closed.
        if (refusing_ < cfg_.max_connections) net::co_spawn(io_, open_connection(std::move(sock), true), net::detached);
        continue;
      }
      net::co_spawn(io_, open_connection(std::move(sock), false), net::detached);
    }
  }

  std::size_t slots_held() const {
    return static_cast<std::size_t>(std::count_if(slots_.begin(), slots_.end(), [](auto& s) { return !s.evicted; }));
  }

  // At the bound: closes the connection that is not busy and has waited longest, one that never
  // sent a valid token before any that did; false when every connection is busy.
  bool evict_idle() {
    Slot* pick = nullptr;
    for (auto& s : slots_) {
      if (s.evicted || s.busy || !s.close) continue;
      if (!pick || (pick->authenticated && !s.authenticated) ||
          (pick->authenticated == s.authenticated && s.since < pick->since))
        pick = &s;
    }
    if (!pick) return false;
    pick->evicted = true;
    pick->close();
    ++m_.refusals["idle_evicted"];
    return true;
  }

  // The connection's slot, held while it lives (its stream outlives it: declared before).
  struct SlotHold {
    SlotHold(std::list<Slot>& l, std::list<Slot>::iterator i) : slots(l), it(i) {}
    std::list<Slot>& slots;
    std::list<Slot>::iterator it;
    ~SlotHold() { slots.erase(it); }
    SlotHold(const SlotHold&) = delete;
    SlotHold& operator=(const SlotHold&) = delete;
  };

  template <class Stream>
  std::list<Slot>::iterator take_slot(Stream& stream) {
    slots_.emplace_back();
    slots_.back().close = [&stream] {
      boost::system::error_code ec;
      tcp_of(stream).socket().close(ec);  // its pending reads and writes end with an error
    };
    return std::prev(slots_.end());
  }

  static Response json_response(http::status st, unsigned version, const json& body, bool keep_alive) {
    Response res{st, version};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::cache_control, "no-store");
    json copy = body;  // dump_json may replace invalid UTF-8 in place
    res.body() = dump_json(copy, -1);
    res.keep_alive(keep_alive);
    res.prepare_payload();
    return res;
  }

  static Response text_response(http::status st, unsigned version, std::string body, bool keep_alive,
                                const char* type = "text/plain; charset=utf-8") {
    Response res{st, version};
    res.set(http::field::content_type, type);
    res.set(http::field::cache_control, "no-store");
    res.body() = std::move(body);
    res.keep_alive(keep_alive);
    res.prepare_payload();
    return res;
  }

  // The TCP stream under a plain or a TLS one: where deadlines are set.
  template <class Stream>
  static beast::tcp_stream& tcp_of(Stream& s) {
    return beast::get_lowest_layer(s);
  }

  // An end of the connection: TLS's close_notify (within a second), then the socket's.
  template <class Stream>
  net::awaitable<void> close_stream(Stream& stream) {
    boost::system::error_code ec;
    if constexpr (!std::is_same_v<Stream, beast::tcp_stream>) {
      tcp_of(stream).expires_after(std::chrono::seconds(1));
      co_await stream.async_shutdown(net::redirect_error(kUse, ec));
    }
    tcp_of(stream).socket().shutdown(tcp::socket::shutdown_both, ec);
  }

  // A new connection, TLS first when the server has a certificate (the handshake within the
  // header timeout), or refused with 503 past max_connections (written within a second, nothing read).
  net::awaitable<void> open_connection(tcp::socket sock, bool refused) {
    // Counted from the accept: a TLS handshake in progress holds a descriptor as well.
    Counted counted(refused ? refusing_ : m_.connections);
    if (!tls_) {
      beast::tcp_stream stream(std::move(sock));
      // if/else, not `co_await (c ? a : b)`: GCC 12 resumed such a frame into freed memory.
      if (refused) {
        co_await refuse_connection(stream);
      } else {
        SlotHold hold(slots_, take_slot(stream));
        co_await connection(stream, *hold.it);
      }
      co_return;
    }
    beast::ssl_stream<beast::tcp_stream> stream(std::move(sock), *tls_);
    std::optional<SlotHold> hold;
    if (!refused) hold.emplace(slots_, take_slot(stream));
    boost::system::error_code ec;
    tcp_of(stream).expires_after(std::chrono::milliseconds(refused ? 1000 : cfg_.header_timeout_ms));
    co_await stream.async_handshake(net::ssl::stream_base::server, net::redirect_error(kUse, ec));
    if (ec) {
      ++m_.refusals["tls_handshake"];
      tcp_of(stream).socket().shutdown(tcp::socket::shutdown_both, ec);
      co_return;
    }
    if (refused) co_await refuse_connection(stream);
    else co_await connection(stream, *hold->it);
  }

  template <class Stream>
  net::awaitable<void> refuse_connection(Stream& stream) {
    tcp_of(stream).expires_after(std::chrono::seconds(1));
    Response res = json_response(http::status::service_unavailable, 11,
                                 rpc_error(nullptr, kServerBusy, "too many connections; retry later"), false);
    boost::system::error_code ec;
    co_await http::async_write(stream, res, net::redirect_error(kUse, ec));
    co_await close_stream(stream);
  }

  template <class Stream>
  net::awaitable<void> connection(Stream& stream, Slot& slot) {
    beast::flat_buffer buffer(kReadBufferBytes);  // past it, buffer_overflow: refused (read_request)
    boost::system::error_code ec;
    bool first = true;
    // A handler that streams its answer (stream_answer) writes raw bytes through this, each write
    // within write_timeout_ms.
    Conn conn{[this, &stream](std::string bytes) -> net::awaitable<boost::system::error_code> {
      boost::system::error_code wec;
      tcp_of(stream).expires_after(std::chrono::milliseconds(cfg_.write_timeout_ms));
      co_await net::async_write(stream, net::buffer(bytes), net::redirect_error(kUse, wec));
      tcp_of(stream).expires_never();
      co_return wec;
    }};
    while (!stopping_) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(kMaxHeaderBytes);
      parser.body_limit(cfg_.max_body_bytes);
      slot.busy = false;
      slot.since = Clock::now();
      if (slot.evicted || !co_await read_request(stream, buffer, parser, first, slot)) break;
      first = false;
      Request req = parser.release();
      // A call is bounded by its own timeout (the child's): no deadline while it runs.
      tcp_of(stream).expires_never();
      conn.streamed = false;
      Response res;
      try {
        res = co_await handle(req, conn);
      } catch (const std::exception& e) {
        // A bug, not a client's doing: said, answered 500, and this connection ends.
        std::fprintf(stderr, "sbx: mcp: internal error answering %s: %s\n",
                     printable(excerpt(sv(req.target()))).c_str(), printable(e.what()).c_str());
        res = json_response(http::status::internal_server_error, 11,
                            rpc_error(nullptr, kInternalError, "internal error"), false);
      }
      count_request(sv(req.target()), res.result_int());
      bool keep = res.keep_alive() && conn.keep && !stopping_;
      res.keep_alive(keep);
      tcp_of(stream).expires_after(std::chrono::milliseconds(cfg_.write_timeout_ms));
      if (!conn.streamed) co_await http::async_write(stream, res, net::redirect_error(kUse, ec));
      conn.until_written.reset();
      if (ec || !keep) break;
    }
    co_await close_stream(stream);
  }

  // One request's headers, then its body, each within its deadline. A request to /mcp is admitted
  // (token, Host, Origin, version) before a byte of its body is read: an unauthenticated client
  // never makes the server hold a body. False: the connection ends (a refusal, if any, written).
  template <class Stream>
  net::awaitable<bool> read_request(Stream& stream, beast::flat_buffer& buffer,
                                    http::request_parser<http::string_body>& parser, bool first, Slot& slot) {
    boost::system::error_code ec;
    const std::string too_large = "request body over " + std::to_string(cfg_.max_body_bytes) + " bytes";
    // Between requests: the idle timeout, short for a connection that never sent a valid token.
    int idle_ms = slot.authenticated ? cfg_.idle_timeout_ms : std::min(cfg_.idle_timeout_ms, kUnauthenticatedIdleMs);
    tcp_of(stream).expires_after(std::chrono::milliseconds(first ? cfg_.header_timeout_ms : idle_ms));
    co_await http::async_read_header(stream, buffer, parser, net::redirect_error(kUse, ec));
    // Beast refuses a declared Content-Length past body_limit as the header is parsed.
    if (ec == http::error::body_limit) {
      co_await refuse(stream, http::status::payload_too_large, too_large, "body_size");
      co_return false;
    }
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      co_await refuse(stream, http::status::request_header_fields_too_large, "headers over 16 KiB", "header_size");
      co_return false;
    }
    if (ec) {
      if (ec == beast::error::timeout) ++m_.refusals["header_timeout"];
      co_return false;
    }
    slot.busy = true;  // its headers are in: from here it is answered, never evicted
    std::string target = sv(parser.get().target());
    std::string path = target.substr(0, target.find('?'));
    if (path == "/mcp") {
      std::string key, tenant;
      if (auto r = admit(parser.get(), key, tenant)) {
        r->keep_alive(false);
        co_await write_refusal(stream, *r);
        co_return false;
      }
      slot.authenticated = true;
    } else if (parser.chunked() || parser.content_length().value_or(0) > 0) {
      // Only /mcp takes a body, and only from a client with a token: any other path refuses one
      // before a byte of it is read, so that nobody makes the server hold a body unauthenticated.
      co_await refuse(
          stream, http::status::payload_too_large,
          "a request to " + printable(excerpt(path)) + " carries no body (only POST /mcp, with a token, does)",
          "body_unexpected");
      co_return false;
    }
    tcp_of(stream).expires_after(std::chrono::milliseconds(cfg_.body_timeout_ms));
    co_await http::async_read(stream, buffer, parser, net::redirect_error(kUse, ec));
    if (ec == http::error::body_limit) {
      co_await refuse(stream, http::status::payload_too_large, too_large, "body_size");
      co_return false;
    }
    if (ec == http::error::buffer_overflow) {
      co_await refuse(stream, http::status::bad_request,
                      "a chunk's size line or a trailer over " + std::to_string(kReadBufferBytes) + " bytes",
                      "chunk_header");
      co_return false;
    }
    if (ec) {
      if (ec == beast::error::timeout) ++m_.refusals["body_timeout"];
      co_return false;
    }
    co_return true;
  }

  void count_request(const std::string& target, unsigned code) {
    std::string path = target.substr(0, target.find('?'));
    bool known = path == "/mcp" || path == "/healthz" || path == "/readyz" || path == "/metrics";
    ++Metrics::at(m_.requests, (known ? path : std::string("other")) + "\x1f" + std::to_string(code));
  }

  template <class Stream>
  net::awaitable<void> refuse(Stream& stream, http::status st, const std::string& why, const std::string& reason) {
    ++m_.refusals[reason];
    Response res = json_response(st, 11, rpc_error(nullptr, kInvalidRequest, why), false);
    co_await write_refusal(stream, res);
  }

  // A refusal that ends the connection, written with a lingering close.
  template <class Stream>
  net::awaitable<void> write_refusal(Stream& stream, Response& res) {
    tcp_of(stream).expires_after(std::chrono::milliseconds(cfg_.write_timeout_ms));
    boost::system::error_code ec;
    co_await http::async_write(stream, res, net::redirect_error(kUse, ec));
    // A lingering close: a client still sending its refused body would otherwise get a reset
    // before it reads the refusal. What it sends meanwhile is read and dropped, for at most a
    // second and 1 MiB.
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    tcp_of(stream).expires_after(std::chrono::seconds(1));
    std::array<char, 16384> sink;
    for (std::size_t drained = 0; !ec && drained < (1u << 20);)
      drained += co_await stream.async_read_some(net::buffer(sink), net::redirect_error(kUse, ec));
  }

  net::awaitable<Response> handle(Request& req, Conn& conn) {
    std::string target = sv(req.target());
    std::string path = target.substr(0, target.find('?'));
    unsigned v = req.version();
    bool ka = req.keep_alive();
    if (path == "/healthz") co_return text_response(http::status::ok, v, "ok\n", ka);
    if (path == "/readyz") {
      std::string why = not_ready();
      co_return text_response(why.empty() ? http::status::ok : http::status::service_unavailable, v,
                              why.empty() ? "ready\n" : why + "\n", ka);
    }
    if (path == "/metrics")
      co_return text_response(http::status::ok, v, metrics_text(), ka, "text/plain; version=0.0.4");
    if (path != "/mcp")
      co_return json_response(http::status::not_found, v,
                              rpc_error(nullptr, kInvalidRequest, "no such path: the MCP endpoint is /mcp"), ka);
    co_return co_await handle_mcp(req, conn);
  }

  // The token's key and tenant, or a refusal. Without tokens (--no-auth): everyone is "no-auth".
  bool authenticate(const Request& req, std::string& key, std::string& tenant) {
    if (cfg_.no_auth) {
      key = "no-auth";
      tenant = cfg_.no_auth_tenant;
      return true;
    }
    std::string token = bearer_token(sv(req[http::field::authorization]));
    const TokenEntry* e = cfg_.tokens.find(token);
    if (!e) return false;
    key = e->sha256;
    tenant = e->tenant;
    return true;
  }

  Response refusal(const Request& req, http::status st, int code, const std::string& why, const std::string& reason,
                   const json& id = nullptr) {
    ++m_.refusals[reason];
    return json_response(st, req.version(), rpc_error(id, code, why), req.keep_alive());
  }

  // Who calls (the token's key and tenant) and whether its request may go on: its token, its
  // Origin (DNS rebinding), its protocol version header. A refusal, or nullopt.
  std::optional<Response> admit(const Request& req, std::string& key, std::string& tenant) {
    if (!authenticate(req, key, tenant)) {
      Response r = refusal(req, http::status::unauthorized, kInvalidRequest,
                           "a bearer token is required (Authorization: Bearer TOKEN)", "unauthorized");
      r.set(http::field::www_authenticate, "Bearer");
      return r;
    }
    // Without tokens, a page that rebinds its own name to 127.0.0.1 could call as anyone: its
    // requests name that host, so only a loopback Host is served.
    if (cfg_.no_auth && !is_loopback_host(host_of(sv(req[http::field::host]))))
      return refusal(req, http::status::forbidden, kInvalidRequest,
                     "Host not allowed: without tokens only a loopback Host is served", "host");
    if (!origin_allowed(sv(req[http::field::origin]), sv(req[http::field::host]), cfg_.allowed_origins))
      return refusal(req, http::status::forbidden, kInvalidRequest, "Origin not allowed", "origin");
    std::string version = sv(req[kVersionHeader]);
    auto all = supported_versions();
    if (!version.empty() && std::find(all.begin(), all.end(), version) == all.end())
      return refusal(req, http::status::bad_request, kInvalidRequest,
                     "unsupported MCP-Protocol-Version: " + printable(version), "version");
    return std::nullopt;
  }

  // A POST's one JSON-RPC message, or a refusal.
  std::optional<Response> read_message(Request& req, json& msg) {
    if (sv(req[http::field::content_type]).find("application/json") == std::string::npos)
      return refusal(req, http::status::unsupported_media_type, kInvalidRequest,
                     "Content-Type must be application/json", "content_type");
    // The stdio server's value bound (mcp_protocol.hpp): a message's tree stays within a few times
    // its text, where the general 4M values let a 14 MB body be a 300 MB tree, held until answered.
    auto parsed =
        parse_json_doc(req.body(), {cfg_.max_body_bytes, kMaxJsonDepth, kMaxMessageValues}, "usage", "the request");
    if (!parsed) return refusal(req, http::status::bad_request, kParseError, parsed.error().message, "parse");
    if (parsed->is_array())
      return refusal(req, http::status::bad_request, kInvalidRequest,
                     "JSON-RPC batches are not accepted: one message per POST", "batch");
    if (!parsed->is_object() || !parsed->contains("jsonrpc") || (*parsed)["jsonrpc"] != "2.0")
      return refusal(req, http::status::bad_request, kInvalidRequest, "not a JSON-RPC 2.0 message", "parse");
    msg = std::move(*parsed);
    // The text is not needed again: a connection waiting for its call holds only the message.
    std::string().swap(req.body());
    return std::nullopt;
  }

  // Only a request (a string method, a string or integer id) or a notification (a string method,
  // no id) goes on to a session's server. Anything else would be answered by it with an error
  // carrying the client's id, which in the child's id space is the server's own (forward): a
  // forged answer to another request. A response is refused too: sbx asks its clients nothing.
  std::optional<Response> refuse_unforwardable(const Request& req, const json& msg) {
    bool has_method = msg.contains("method") && msg["method"].is_string();
    if (!has_method && msg.contains("id") && (msg.contains("result") || msg.contains("error")))
      return refusal(req, http::status::bad_request, kInvalidRequest,
                     "a response answers nothing here: sbx sends no requests to its clients", "response");
    if (!has_method)
      return refusal(req, http::status::bad_request, kInvalidRequest,
                     "not a request or a notification: \"method\" (a string) is missing", "parse");
    if (msg.contains("id") && !msg["id"].is_string() && !msg["id"].is_number_integer())
      return refusal(req, http::status::bad_request, kInvalidRequest, "\"id\" must be a string or an integer", "parse");
    return std::nullopt;
  }

  net::awaitable<Response> handle_mcp(Request& req, Conn& conn) {
    std::string key, tenant;
    if (auto r = admit(req, key, tenant)) co_return std::move(*r);
    std::string sid = sv(req[kSessionHeader]);
    std::shared_ptr<Child> session;
    if (!sid.empty()) {
      auto it = sessions_.find(sid);
      // Another token's session is not found either: its id says nothing to whoever guessed it.
      if (it == sessions_.end() || it->second->key != key || it->second->dead)
        co_return refusal(req, http::status::not_found, kInvalidRequest,
                          "no such session (start a new one with initialize)", "session");
      session = it->second;
    }
    if (req.method() == http::verb::delete_) {
      if (!session)
        co_return refusal(req, http::status::bad_request, kInvalidRequest, "DELETE needs an Mcp-Session-Id", "session");
      // Ended for its client at once (404 from now on), while its server winds down its calls
      // and records them (it still counts against max_sessions until it has exited).
      close_child(*session);
      session->dead = true;
      co_return text_response(http::status::ok, req.version(), "", req.keep_alive());
    }
    if (req.method() != http::verb::post) {
      // GET included: no server-initiated stream, which the specification answers with 405.
      Response r = refusal(req, http::status::method_not_allowed, kInvalidRequest,
                           "only POST (and DELETE of a session) are offered at /mcp", "method");
      r.set(http::field::allow, "POST, DELETE");
      co_return r;
    }
    json msg;
    if (auto r = read_message(req, msg)) co_return std::move(*r);
    if (auto r = refuse_unforwardable(req, msg)) co_return std::move(*r);
    bool is_request = msg.contains("id");  // else a notification (refuse_unforwardable)
    std::string method = msg["method"].get<std::string>();
    bool created = false;
    if (!session) {
      auto& params = msg.contains("params") && msg["params"].is_object() ? msg["params"] : msg;
      bool modern = is_request && method != "initialize" && params.contains("_meta") && params["_meta"].is_object() &&
                    params["_meta"].contains(kMetaProtocolVersion);
      if (!is_request || (method != "initialize" && method != "server/discover" && !modern))
        co_return refusal(req, http::status::bad_request, kInvalidRequest,
                          "an Mcp-Session-Id header is needed (initialize first)", "session");
      NotStarted no;
      session = method == "initialize" ? new_session(key, tenant, no) : stateless_child(key, tenant, no);
      if (!session)
        co_return refusal(req, no.at_bound ? http::status::too_many_requests : http::status::internal_server_error,
                          kServerBusy, no.why, "sessions", is_request ? msg["id"] : json(nullptr));
      created = method == "initialize";
    }
    session->last_used = Clock::now();
    if (!is_request && method == "notifications/cancelled") {
      // The client names its own id; the child knows the server's: cancelled by that one, and
      // only when it is a request of this session still waiting.
      if (msg.contains("params") && msg["params"].is_object() && msg["params"].contains("requestId"))
        for (auto& [our_id, p] : session->pending)
          if (p->original_id == msg["params"]["requestId"]) {
            cancel_pending(session, our_id, "cancelled by the client");
            break;
          }
      co_return text_response(http::status::accepted, req.version(), "", req.keep_alive());
    }
    if (!is_request) {
      // A notification (initialized, progress): the child's, nothing to wait for.
      if (!send_line(session, dump_json(msg, -1)))
        co_return refusal(req, http::status::service_unavailable, kServerBusy, "the session is busy; retry later",
                          "queue");
      co_return text_response(http::status::accepted, req.version(), "", req.keep_alive());
    }
    co_return co_await forward(req, conn, session, std::move(msg), tenant, created);
  }

  // A request to the session's child under an id of the server's own (two clients' ids never
  // meet in one child), answered when the child answers.
  net::awaitable<Response> forward(const Request& req, Conn& conn, std::shared_ptr<Child> session, json msg,
                                   std::string tenant, bool created) {
    bool is_call = msg["method"] == "tools/call";
    std::string tool = is_call && msg.contains("params") && msg["params"].is_object() &&
                               msg["params"].contains("name") && msg["params"]["name"].is_string()
                           ? msg["params"]["name"].get<std::string>()
                           : "";
    if (is_call && calls_in_flight_[tenant] >= cfg_.max_calls_per_tenant)
      co_return refusal(req, http::status::too_many_requests, kServerBusy,
                        "tenant " + (tenant.empty() ? std::string("(none)") : tenant) + " has " +
                            std::to_string(cfg_.max_calls_per_tenant) + " calls running; retry later",
                        "tenant_calls", msg["id"]);
    auto t0 = Clock::now();
    auto pending = std::make_shared<Pending>(io_.get_executor());
    pending->original_id = msg["id"];
    if (msg.contains("params") && msg["params"].is_object() && msg["params"].contains("_meta") &&
        msg["params"]["_meta"].is_object() && msg["params"]["_meta"].contains("progressToken") &&
        sv(req[http::field::accept]).find("text/event-stream") != std::string::npos && req.version() == 11 &&
        !created) {  // initialize is answered as JSON: its answer carries the session's id
      pending->sse = true;
      pending->progress_token = msg["params"]["_meta"]["progressToken"];
    }
    std::int64_t our_id = session->next_id++;
    msg["id"] = our_id;
    session->pending[our_id] = pending;
    if (!send_line(session, dump_json(msg, -1))) {
      session->pending.erase(our_id);
      co_return refusal(req, http::status::service_unavailable, kServerBusy, "the session is busy; retry later",
                        "queue", pending->original_id);
    }
    msg = json();  // with the call's text already released (read_message): a waiting request holds neither
    // The tenant's slot is held until the answer is written or its write fails (connection):
    // an answer (up to the streams' limits, escaped) a client leaves unread counts as a call.
    if (is_call) {
      ++calls_in_flight_[tenant];
      conn.until_written = std::shared_ptr<void>(nullptr, [this, tenant](void*) { --calls_in_flight_[tenant]; });
    }
    if (pending->sse) {
      co_await stream_answer(req, conn, session, our_id, *pending);
    } else {
      boost::system::error_code ec;
      while (!pending->finished) co_await pending->done.async_wait(net::redirect_error(kUse, ec));
    }
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    if (created) m_.session_start_seconds.observe(secs);
    if (is_call) count_call(tool, tenant, pending->response, secs);
    Response res = json_response(http::status::ok, req.version(), pending->response, req.keep_alive());
    if (created && pending->response.contains("result")) res.set(kSessionHeader, session->id);
    if (created && !pending->response.contains("result")) close_child(*session);  // no session was made
    co_return res;
  }

  // The answer as server-sent events (text/event-stream, chunked): each progress notification as
  // it comes, then the response. A client that stops reading (a write past write_timeout_ms) has
  // its call cancelled; the call still ends and is recorded, and its answer is dropped.
  net::awaitable<void> stream_answer(const Request& req, Conn& conn, std::shared_ptr<Child> session,
                                     std::int64_t our_id, Pending& p) {
    conn.streamed = true;
    std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
        "Transfer-Encoding: chunked\r\n";
    head += req.keep_alive() ? "\r\n" : "Connection: close\r\n\r\n";
    bool broken = static_cast<bool>(co_await conn.write(std::move(head)));
    auto write_event = [&](json& m) -> net::awaitable<void> {
      std::string e = "event: message\ndata: " + dump_json(m, -1) + "\n\n";
      char size[32];
      std::snprintf(size, sizeof size, "%zx\r\n", e.size());
      if (!(co_await conn.write(size + e + "\r\n")) || broken) co_return;
      broken = true;
      cancel_pending(session, our_id, "the HTTP client went away");
    };
    boost::system::error_code ec;
    for (;;) {
      while (!p.events.empty()) {
        json m = std::move(p.events.front());
        p.events.pop_front();
        if (!broken) co_await write_event(m);
      }
      if (p.finished) break;
      co_await p.done.async_wait(net::redirect_error(kUse, ec));
    }
    if (!broken) co_await write_event(p.response);
    if (!broken) broken = static_cast<bool>(co_await conn.write("0\r\n\r\n"));
    conn.keep = !broken;
  }

  // A call cancelled here or by its client: the child is told (it answers a cancelled request
  // with nothing, mcp_server.cpp), and the request waiting for it is finished now.
  void cancel_pending(const std::shared_ptr<Child>& c, std::int64_t our_id, const std::string& reason) {
    auto it = c->pending.find(our_id);
    if (it == c->pending.end()) return;
    json cancel = {{"jsonrpc", "2.0"},
                   {"method", "notifications/cancelled"},
                   {"params", {{"requestId", our_id}, {"reason", reason}}}};
    send_line(c, dump_json(cancel, -1));
    auto p = it->second;
    c->pending.erase(it);
    p->response = error_response(p->original_id, kRequestCancelled, "cancelled: " + reason);
    p->finished = true;
    p->done.cancel();
  }

  void count_call(const std::string& tool, const std::string& tenant, const json& r, double secs) {
    std::string outcome = r.contains("error") ? "error"
                          : r.contains("result") && r["result"].is_object() && r["result"].contains("isError") &&
                                  r["result"]["isError"] == true
                              ? "tool_error"
                              : "ok";
    // A tool a client merely names (one the server refused with a protocol error) is "other": only
    // tools that answered have labels of their own.
    std::string labels = (outcome == "error" ? std::string("other") : tool_label(tool)) + "\x1f" + tenant;
    ++Metrics::at(m_.calls, labels + "\x1f" + outcome);
    Metrics::at(m_.call_seconds, labels).observe(secs);
    if (r.contains("result") && r["result"].is_object()) count_run(tenant, r["result"].value("_meta", json::object()));
  }

  // What the session's server says of the run in the result's _meta (mcp_protocol.cpp, run_meta).
  void count_run(const std::string& tenant, const json& meta) {
    if (!meta.is_object()) return;
    auto str = [&](const char* k) { return meta.contains(k) && meta[k].is_string() ? meta[k].get<std::string>() : ""; };
    if (!str("sbx/run_id").empty()) ++Metrics::at(m_.records, tenant);
    if (std::string how = str("sbx/made_by"); !how.empty())
      ++Metrics::at(m_.made_by, how == "cold" || how == "pooled" || how == "template" ? how : "other");
    std::string status = str("sbx/status");
    if (status == "timeout" || status == "oom" || status == "output_limit")
      ++Metrics::at(m_.limit_events, tenant + "\x1f" + status);
    std::uint64_t refused = meta.contains("sbx/violations") && meta["sbx/violations"].is_number_unsigned()
                                ? meta["sbx/violations"].get<std::uint64_t>()
                                : 0;
    if (status == "seccomp_violation") refused = std::max<std::uint64_t>(refused, 1);
    refused = std::min<std::uint64_t>(refused, kMaxViolationsPerCall);  // what a child says is bounded
    if (refused > 0) Metrics::at(m_.violations, tenant) += refused;
    if (str("sbx/error_stage") == "record") ++m_.store_errors;
  }

  std::shared_ptr<Child> new_session(const std::string& key, const std::string& tenant, NotStarted& no) {
    // A session ended (DELETE, idle, its server's end) counts until its server has exited and is
    // reaped (reap_child): until then its calls may still be winding down and recording.
    std::size_t mine = 0;
    for (auto& [id, c] : sessions_) mine += c->tenant == tenant ? 1u : 0u;
    if (mine >= cfg_.max_sessions_per_tenant) {
      no = {"a tenant has at most " + std::to_string(cfg_.max_sessions_per_tenant) +
                " sessions open; end one (DELETE) or retry later",
            true};
      return nullptr;
    }
    auto c = start_child(tenant, no);
    if (!c) return nullptr;
    c->id = new_session_id();
    c->key = key;
    sessions_[c->id] = c;
    return c;
  }

  std::shared_ptr<Child> stateless_child(const std::string& key, const std::string& tenant, NotStarted& no) {
    if (auto it = stateless_.find(key); it != stateless_.end() && !it->second->dead) return it->second;
    auto c = start_child(tenant, no);
    if (!c) return nullptr;
    c->key = key;
    stateless_[key] = c;
    return c;
  }

  // A session's server, a token's stateless one included: both count against max_sessions.
  std::shared_ptr<Child> start_child(const std::string& tenant, NotStarted& no) {
    if (stopping_) {
      no.why = "the server is shutting down";
      return nullptr;
    }
    if (sessions_.size() + stateless_.size() >= cfg_.max_sessions) {
      no = {"the server has at most " + std::to_string(cfg_.max_sessions) +
                " sessions open; end one (DELETE) or retry later",
            true};
      return nullptr;
    }
    std::string& why = no.why;
    int to_child[2], from_child[2];
    if (::pipe2(to_child, O_CLOEXEC) != 0) {
      why = std::string("pipe: ") + std::strerror(errno);
      return nullptr;
    }
    if (::pipe2(from_child, O_CLOEXEC) != 0) {
      why = std::string("pipe: ") + std::strerror(errno);
      ::close(to_child[0]);
      ::close(to_child[1]);
      return nullptr;
    }
    auto argv = cfg_.child_argv;
    if (!tenant.empty()) argv.insert(argv.end(), {"--tenant", tenant});
    UniqueFd child_in(to_child[0]);
    auto w = spawn_worker(argv, child_in.get(), UniqueFd(from_child[1]), SIGTERM);
    if (!w) {
      ::close(to_child[1]);
      ::close(from_child[0]);
      ++m_.children_failed;
      why = "cannot start the session's server: " + w.error().describe();
      return nullptr;
    }
    w->response.reset();  // the child's stdout: only the child holds its write end now
    ++m_.children_started;
    ++children_;
    auto c = std::make_shared<Child>(io_.get_executor(), to_child[1], from_child[0], w->pidfd.release());
    c->pid = w->pid;
    own_.insert(c->pid);
    c->tenant = tenant;
    net::co_spawn(io_, read_child(c), net::detached);
    net::co_spawn(io_, reap_child(c), net::detached);
    return c;
  }

  // False when the child's queue is full (a client that writes faster than its calls end).
  bool send_line(const std::shared_ptr<Child>& c, std::string line) {
    if (c->dead || !c->in.is_open()) return false;
    if (c->queued_bytes + line.size() + 1 > kMaxChildQueueBytes) return false;
    line += '\n';
    c->queued_bytes += line.size();
    c->queue.push_back(std::move(line));
    if (!c->writing) {
      c->writing = true;
      net::co_spawn(io_, write_child(c), net::detached);
    }
    return true;
  }

  net::awaitable<void> write_child(std::shared_ptr<Child> c) {
    boost::system::error_code ec;
    while (!c->queue.empty() && c->in.is_open()) {
      // The line leaves the queue before it is written: close_child may empty the queue while
      // the write is under way, and the buffer must outlive it.
      std::string line = std::move(c->queue.front());
      c->queue.pop_front();
      co_await net::async_write(c->in, net::buffer(line), net::redirect_error(kUse, ec));
      c->queued_bytes -= std::min(c->queued_bytes, line.size());
      if (ec) break;  // the child is gone: its reader and reaper say so
    }
    c->writing = false;
  }

  // EOF on its stdin: a stdio server cancels its calls, records them and exits (mcp_server.hpp).
  void close_child(Child& c) {
    boost::system::error_code ec;
    c.queue.clear();
    c.queued_bytes = 0;
    c.in.close(ec);
  }

  // Every line the child writes: a response goes to the request waiting for it (its id given
  // back); a notification has no stream to go to (JSON responses only) and is counted.
  net::awaitable<void> read_child(std::shared_ptr<Child> c) {
    std::string buf;
    boost::system::error_code ec;
    JsonBounds bounds = child_line_bounds();
    std::size_t limit = bounds.max_bytes;
    for (;;) {
      std::size_t n =
          co_await net::async_read_until(c->out, net::dynamic_buffer(buf, limit), '\n', net::redirect_error(kUse, ec));
      if (ec) break;  // EOF, or a line over the limit: the child is ended (below)
      std::string line = buf.substr(0, n - 1);
      buf.erase(0, n);
      auto doc = parse_json_doc(line, bounds, "usage", "the session's server");
      if (!doc || !doc->is_object()) continue;
      if (doc->contains("method")) {
        route_notification(*c, std::move(*doc));
        continue;
      }
      // An answer only to an id this server issued (forward) and not yet answered (erased when
      // it is): no client message with an id of its own reaches the child (refuse_unforwardable).
      if (!doc->contains("id") || !(*doc)["id"].is_number_integer()) continue;
      auto it = c->pending.find((*doc)["id"].get<std::int64_t>());
      if (it == c->pending.end()) continue;
      auto p = it->second;
      c->pending.erase(it);
      (*doc)["id"] = p->original_id;
      p->response = std::move(*doc);
      p->finished = true;
      p->done.cancel();
    }
    if (ec && ec != net::error::eof) {
      std::fprintf(stderr, "sbx: mcp: session %s: its server wrote a line over %zu bytes or broke (%s): ended\n",
                   c->id.c_str(), limit, ec.message().c_str());
      ::kill(c->pid, SIGTERM);
    }
    end_child(*c, "the session's server ended before it answered");
  }

  // A progress notification goes to the streaming request whose token it names; anything else
  // (and progress past a stream's queue) has nowhere to go and is counted.
  void route_notification(Child& c, json note) {
    if (note["method"] == "notifications/progress" && note.contains("params") && note["params"].is_object() &&
        note["params"].contains("progressToken"))
      for (auto& [id, p] : c.pending)
        if (p->sse && p->progress_token == note["params"]["progressToken"] && p->events.size() < kMaxQueuedEvents) {
          p->events.push_back(std::move(note));
          p->done.cancel();
          return;
        }
    ++m_.dropped_notifications;
  }

  void end_child(Child& c, const std::string& why) {
    c.dead = true;
    close_child(c);
    for (auto& [id, p] : c.pending) {
      p->response = rpc_error(p->original_id, kInternalError, why);
      p->finished = true;
      p->done.cancel();
    }
    c.pending.clear();
  }

  net::awaitable<void> reap_child(std::shared_ptr<Child> c) {
    boost::system::error_code ec;
    co_await c->pidfd.async_wait(net::posix::stream_descriptor::wait_read, net::redirect_error(kUse, ec));
    int status = 0;
    ::waitpid(c->pid, &status, 0);
    own_.erase(c->pid);
    c->reaped = true;
    end_child(*c, "the session's server ended before it answered");
    c->out.close(ec);
    c->pidfd.close(ec);
    if (!c->id.empty()) sessions_.erase(c->id);
    if (auto it = stateless_.find(c->key); it != stateless_.end() && it->second == c) stateless_.erase(it);
    --children_;
  }

  // The families counted from the runs' _meta (count_run).
  void run_metrics(std::string& o) const {
    prom_counters(
        o, "sbx_mcp_records_written_total",
        "Calls answered with their run's durable record (a cancelled call's record is in the ledger, not here).",
        m_.records, {"tenant"});
    prom_counters(
        o, "sbx_mcp_sandboxes_total",
        "Calls' sandboxes by how they were made: pooled and template are pool hits, cold a miss (or no pool).",
        m_.made_by, {"made_by"});
    prom_counters(o, "sbx_mcp_limit_events_total",
                  "Calls ended by a limit, by tenant and status (timeout, oom, output_limit).", m_.limit_events,
                  {"tenant", "status"});
    prom_counters(o, "sbx_mcp_violations_total",
                  "Violations in calls' records (system calls refused, hosts denied), by tenant.", m_.violations,
                  {"tenant"});
    prom_head(o, "sbx_mcp_store_errors_total", "counter",
              "Calls whose run's record could not be stored (its result withheld).");
    o += "sbx_mcp_store_errors_total " + std::to_string(m_.store_errors) + "\n";
  }

  std::string metrics_text() const {
    std::string o;
    auto head = [&o](const char* name, const char* type, const char* help) { prom_head(o, name, type, help); };
    auto hist = [&o](const std::string& name, const std::string& labels, const Histogram& h) {
      std::uint64_t cum = 0;
      std::string sep = labels.empty() ? "" : ",";
      for (std::size_t i = 0; i < std::size(kBuckets); ++i) {
        cum += h.counts[i];
        char le[32];
        std::snprintf(le, sizeof le, "%g", kBuckets[i]);
        o += name + "_bucket{" + labels + sep + "le=\"" + le + "\"} " + std::to_string(cum) + "\n";
      }
      cum += h.counts.back();
      o += name + "_bucket{" + labels + sep + "le=\"+Inf\"} " + std::to_string(cum) + "\n";
      char sum[64];
      std::snprintf(sum, sizeof sum, "%.6f", h.sum);
      std::string braces = labels.empty() ? "" : "{" + labels + "}";
      o += name + "_sum" + braces + " " + sum + "\n" + name + "_count" + braces + " " + std::to_string(h.n) + "\n";
    };
    prom_counters(o, "sbx_mcp_calls_total", "Tool calls answered, by tool, tenant and outcome (ok, tool_error, error).",
                  m_.calls, {"tool", "tenant", "outcome"});
    head("sbx_mcp_call_seconds", "histogram", "Tool calls' time from request to response, by tool and tenant.");
    for (auto& [k, h] : m_.call_seconds) {
      auto p = split_key(k);
      if (p.size() != 2) continue;
      hist("sbx_mcp_call_seconds", "tool=\"" + label(p[0]) + "\",tenant=\"" + label(p[1]) + "\"", h);
    }
    head("sbx_mcp_session_start_seconds", "histogram",
         "Sessions' start: initialize to its answer (the session's server started).");
    hist("sbx_mcp_session_start_seconds", "", m_.session_start_seconds);
    run_metrics(o);
    prom_counters(o, "sbx_http_requests_total", "HTTP requests answered, by path and status code.", m_.requests,
                  {"path", "code"});
    prom_counters(o, "sbx_http_refusals_total", "Requests and connections refused, by reason.", m_.refusals,
                  {"reason"});
    head("sbx_http_connections", "gauge", "Connections open.");
    o += "sbx_http_connections " + std::to_string(m_.connections) + "\n";
    head("sbx_mcp_sessions", "gauge", "MCP sessions open.");
    o += "sbx_mcp_sessions " + std::to_string(sessions_.size()) + "\n";
    head("sbx_mcp_session_servers_started_total", "counter", "Session servers (stdio sbx mcp children) started.");
    o += "sbx_mcp_session_servers_started_total " + std::to_string(m_.children_started) + "\n";
    head("sbx_mcp_session_server_failures_total", "counter", "Session servers that could not be started.");
    o += "sbx_mcp_session_server_failures_total " + std::to_string(m_.children_failed) + "\n";
    head("sbx_mcp_dropped_notifications_total", "counter", "Notifications (progress, logs) with no stream to go to.");
    o += "sbx_mcp_dropped_notifications_total " + std::to_string(m_.dropped_notifications) + "\n";
    return o;
  }
};

// "host:port" of an Origin (scheme dropped, default ports filled), lower-cased.
std::string origin_authority(const std::string& origin) {
  std::string o = ascii_lower(origin);
  std::string port = "80";
  if (o.rfind("https://", 0) == 0) {
    o = o.substr(8);
    port = "443";
  } else if (o.rfind("http://", 0) == 0) {
    o = o.substr(7);
  } else {
    return "";
  }
  if (auto slash = o.find('/'); slash != std::string::npos) o = o.substr(0, slash);
  auto colon = o.rfind(':');
  if (colon == std::string::npos || (o.front() == '[' && o.back() == ']')) o += ":" + port;
  return o;
}

std::string host_of(const std::string& authority) {
  if (!authority.empty() && authority.front() == '[') {  // [v6]:port
    auto end = authority.find(']');
    return end == std::string::npos ? authority : authority.substr(0, end + 1);
  }
  auto colon = authority.rfind(':');
  return colon == std::string::npos ? authority : authority.substr(0, colon);
}

}  // namespace

bool is_loopback_host(const std::string& host) {
  if (host == "localhost") return true;
  boost::system::error_code ec;
  std::string h = host.size() > 2 && host.front() == '[' && host.back() == ']' ? host.substr(1, host.size() - 2) : host;
  auto a = net::ip::make_address(h, ec);
  return !ec && a.is_loopback();
}

bool parse_listen_address(const std::string& text, HttpConfig& cfg, std::string& why) {
  std::string host = "127.0.0.1", port = text;
  if (auto colon = text.rfind(':'); colon != std::string::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (host.empty()) host = "127.0.0.1";
  }
  char* end = nullptr;
  long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end || p < 0 || p > 65535) {
    why = "--listen " + text + ": expected HOST:PORT, :PORT or PORT (port 0..65535; 0 picks a free one)";
    return false;
  }
  boost::system::error_code ec;
  net::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) {
    why = "--listen " + text + ": " + host + " is not an IP address (sbx resolves no names: 127.0.0.1, ::1, 0.0.0.0)";
    return false;
  }
  cfg.host = host;
  cfg.port = static_cast<std::uint16_t>(p);
  return true;
}

bool origin_allowed(const std::string& origin, const std::string& host_header,
                    const std::vector<std::string>& allowed) {
  if (origin.empty()) return true;  // not a browser: DNS rebinding needs one
  std::string auth = origin_authority(origin);
  if (auth.empty()) return false;  // "null", a file:// page, anything odd
  if (is_loopback_host(host_of(auth))) return true;
  std::string host = ascii_lower(host_header);
  if (!host.empty() && (auth == host || auth == host + ":80" || auth == host + ":443")) return true;
  for (auto& a : allowed)
    if (origin_authority(a) == auth) return true;
  return false;
}

int serve_http(const HttpConfig& cfg) {
  HttpServer s(cfg);
  return s.run();
}

}  // namespace sbx::mcp
