#include "runtime/server/mcp_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <variant>

#include "runtime/typed/exec.hpp"
#include "runtime/server/fork_server.hpp"
#include "runtime/server/mcp_session.hpp"
#include "runtime/session/session_client.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/raw_syscall.hpp"
#include "runtime/base/signals.hpp"
#include "runtime/base/text_escape.hpp"

namespace sbx::mcp {
namespace {
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// A line on stderr, at most 2 KiB: what a client sends goes in as an excerpt (call_key,
// json_excerpt), and this bounds the rest.
void log_line(const std::string& s) {
  constexpr std::size_t kMaxLogLine = 2048;
  std::string line = "sbx: mcp: " + printable(s);
  if (line.size() > kMaxLogLine) line = line.substr(0, kMaxLogLine) + "...";
  line += "\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

// A call's key (its client's id, as JSON) as a log line shows it: at most 64 bytes.
std::string call_key(const std::string& key) { return key.size() <= 64 ? key : key.substr(0, 64) + "..."; }

// A 2025-03-26 batch: its members' responses go out together, as one array, once all are in.
// Held as their JSON text (a run_code response is spliced, never a DOM), and counted, every held
// batch's together with what is unwritten (Server::batch_bytes_): a member whose response would
// take the held batches past kQueuedResponseBudget is answered with a tool error.
struct Batch {
  std::vector<std::string> responses;
  std::size_t bytes = 0;
  std::size_t pending = 0;  // members still owing a response
};

struct Call {
  json id;
  json progress_token;  // null: the client asked for no progress
  bool modern = false;
  std::string tool;
  bool wrapped_output = false;
  // The worker's job: a tree until it is launched, or, while the call waits for a slot, its text
  // (a tree costs up to ~20 times its text), counted as `held` bytes against kQueuedRequestBudget.
  // A running call keeps neither: only the session it names (session_stop's, for track_session).
  json job;
  std::string job_text;
  std::size_t held = 0;
  std::string session;
  std::optional<Worker> worker;
  bool cancelled = false;
  Clock::time_point arrived, next_progress, kill_at;
  bool kill_armed = false;
  int progress = 0;
  std::shared_ptr<Batch> batch;
};

class Server {
 public:
  Server(const ServerConfig& c, SandboxLauncher& l, int in, int out) : cfg_(c), launcher_(l), in_(in), out_(out) {}
  int run();

 private:
  void on_line(std::string_view line);
  void handle(Incoming in, const std::shared_ptr<Batch>& batch);
  void handle_request(Incoming& in, const std::shared_ptr<Batch>& batch);
  void handle_call(Incoming& in, bool modern, const std::shared_ptr<Batch>& batch);
  void cancel(const json& request_id, const std::string& why);
  void pump();
  void finish(const std::string& key);
  // finish's last step: the response message `envelope` (its result spliced with the worker's
  // text at out[base, base+len) when `splice`) into `out`, then to the client or its batch.
  void deliver(const std::shared_ptr<Batch>& batch, const json& id, bool modern, std::string& out, std::size_t base,
               std::size_t len, std::string envelope, bool splice, std::string& member);
  // run's steps: the poll timeout for the next deadline (kill, stop, progress, the launcher's
  // tick), and the client's bytes split into lines (each handled by on_line).
  int poll_timeout_ms() const;
  void take_input(std::string_view chunk);
  // A call that came now would start without waiting: none waits, and a slot is free.
  bool starts_at_once() const;
  void tick(Clock::time_point now);
  void shutdown(const std::string& why);
  void reply(const std::shared_ptr<Batch>& batch, json msg);
  void reply_line(const std::shared_ptr<Batch>& batch, std::string line);
  void batch_done(const std::shared_ptr<Batch>& batch);
  void send(json msg);
  void send_line(std::string_view line);
  // Bytes written to outbuf_ and not yet to the client.
  std::size_t unwritten() const { return outbuf_.size() - out_off_; }
  // Responses held: unwritten, and every batch's until it is complete (batch_bytes_).
  bool over_budget() const { return unwritten() + batch_bytes_ >= kQueuedResponseBudget; }
  // Whether a finished call's response may be taken now: within the budget, or, when held batches
  // alone fill it, a batch member's (refused then, a small tool error: the batch can complete and
  // leave, where waiting for the budget would wait on itself).
  bool may_take(const Call& c) const { return !over_budget() || (c.batch && batch_bytes_ >= kQueuedResponseBudget); }
  // A call about to be queued that will wait (no slot free, or others wait): its job becomes its
  // text, counted against kQueuedRequestBudget. The refusal's message when it does not fit.
  std::string hold_if_waiting(Call& c, const std::string& key);
  // A waiting call leaves the queue (started, cancelled, dropped): its job's text is let go.
  void unqueue(Call& c);
  void flush_out();
  json tools() const;
  static json server_info() { return {{"name", "sbx"}, {"version", SBX_VERSION}}; }
  // A modern (2026-07-28) result: resultType is required, serverInfo recommended in its _meta.
  static void mark_modern(json& r) {
    r["resultType"] = "complete";
    r["_meta"][kMetaServerInfo] = server_info();
  }
  std::size_t running() const;

  const ServerConfig& cfg_;
  SandboxLauncher& launcher_;
  int in_, out_;
  std::string version_;                // the legacy version `initialize` settled, "" until then
  std::map<std::string, Call> calls_;  // by json id text: queued and running
  std::deque<std::string> queue_;
  std::string inbuf_, outbuf_;
  // What of outbuf_ the client has been sent: a 100 MB line goes out in pipe-sized writes, and
  // erasing each from the front would move the rest every time (quadratic).
  std::size_t out_off_ = 0;
  std::size_t queued_bytes_ = 0;  // what waiting calls hold (Call::held), within kQueuedRequestBudget
  std::size_t batch_bytes_ = 0;   // the responses held in incomplete batches (Batch::bytes)
  bool discarding_ = false;       // inside a line that passed kMaxMessageBytes: dropped up to its newline
  bool in_open_ = true, out_ok_ = true, stopping_ = false;
  Clock::time_point stop_by_;
  // The sessions this client started (mcp_session.hpp): id -> the store its start reported. A
  // client reaches only these; the server stops those left when it stops.
  std::map<std::string, std::string> sessions_;
  void track_session(const std::string& tool, const std::string& session, const json& response);
  void stop_sessions();  // stopping: the server leaves, past this, the workers still recording
};

std::size_t Server::running() const {
  std::size_t n = 0;
  for (auto& [k, c] : calls_) n += c.worker.has_value();
  return n;
}

void Server::send(json msg) {
  if (!out_ok_) return;
  // One message per line: dump never emits a raw newline (strings escape it), and strings that
  // are not UTF-8 (program output) are escaped rather than thrown on (json_io.hpp).
  send_line(dump_json(msg, -1));
}

void Server::send_line(std::string_view line) {
  if (!out_ok_) return;
  outbuf_.append(line);
  outbuf_ += '\n';
  flush_out();
}

void Server::flush_out() {
  while (out_ok_ && unwritten() > 0) {
    ssize_t n = ::write(out_, outbuf_.data() + out_off_, unwritten());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;  // poll says when to go on
    if (n < 0) {
      out_ok_ = false;
      outbuf_.clear();
      out_off_ = 0;
      shutdown(std::string("stdout: ") + std::strerror(errno) + " (the client is gone)");
      return;
    }
    out_off_ += static_cast<std::size_t>(n);
  }
  // What was sent is dropped once it is all of it, or half of the buffer (amortised: each byte
  // is moved at most once more).
  if (out_off_ == outbuf_.size()) {
    outbuf_.clear();
    out_off_ = 0;
    if (outbuf_.capacity() > kQueuedResponseBudget) outbuf_.shrink_to_fit();  // a large line's memory goes back
  } else if (out_off_ > (1u << 20) && out_off_ > outbuf_.size() / 2) {
    outbuf_.erase(0, out_off_);
    out_off_ = 0;
  }
}

void Server::reply(const std::shared_ptr<Batch>& batch, json msg) {
  if (!batch) return send(std::move(msg));
  reply_line(batch, dump_json(msg, -1));
}

void Server::reply_line(const std::shared_ptr<Batch>& batch, std::string line) {
  if (!batch) return send_line(line);
  batch->bytes += line.size() + 1;
  batch_bytes_ += line.size() + 1;
  batch->responses.push_back(std::move(line));
  batch_done(batch);
}

// One member of `batch` answered or dropped: the array goes out once none is owed.
void Server::batch_done(const std::shared_ptr<Batch>& batch) {
  if (--batch->pending != 0 || batch->responses.empty()) return;
  batch_bytes_ -= batch->bytes;  // from here they are outbuf_'s (unwritten)
  batch->bytes = 0;
  std::string all = "[";
  for (auto& r : batch->responses) {
    if (all.size() > 1) all += ',';
    all += r;
    r = std::string();
  }
  all += ']';
  send_line(all);
}

json Server::tools() const {
  json t = json::array();
  for (auto& p : cfg_.packs) t.push_back(p.definition);
  t.push_back(run_code_tool(cfg_.profile));
  for (auto& d : session_tool_definitions()) t.push_back(d);
  return t;
}

void Server::on_line(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.find_first_not_of(" \t") == std::string_view::npos) return;  // blank lines carry nothing
  Incoming in = classify(line);
  if (in.kind == Incoming::bad && in.method == "(batch)") {
    json members = std::move(in.params);
    // Batches exist only in 2025-03-26 (its transport "MUST support receiving" them; 2025-06-18
    // removed them), and `initialize` is never part of one.
    if (version_ != "2025-03-26")
      return send(error_response(nullptr, kInvalidRequest,
                                 "Invalid Request: JSON-RPC batches are not part of protocol version " +
                                     (version_.empty() ? std::string("(not initialized)") : version_)));
    if (members.empty()) return send(error_response(nullptr, kInvalidRequest, "Invalid Request: an empty batch"));
    auto batch = std::make_shared<Batch>();
    batch->pending = 1;  // held until every member is handled, so that a fast member cannot flush early
    for (auto& m : members) {
      Incoming mi = classify_value(std::move(m));
      if (mi.kind == Incoming::request || (mi.kind == Incoming::bad && !mi.reply.is_null())) ++batch->pending;
      handle(std::move(mi), batch);
    }
    batch_done(batch);
    return;
  }
  handle(std::move(in), nullptr);
}

void Server::handle(Incoming in, const std::shared_ptr<Batch>& batch) {
  switch (in.kind) {
    case Incoming::bad:
      if (!in.reply.is_null()) reply(batch, std::move(in.reply));
      return;
    case Incoming::response: return;  // sbx sends no requests; a stray response has nothing to match
    case Incoming::notification:
      if (in.method == "notifications/cancelled") {
        if (in.params.contains("requestId")) {
          std::string reason = in.params.value("reason", json("")).is_string() ? in.params.value("reason", "") : "";
          cancel(in.params["requestId"],
                 reason.empty() ? "cancelled by the client" : "cancelled by the client: " + reason);
        }
      }
      return;  // notifications/initialized and any other notification need nothing
    case Incoming::request: return handle_request(in, batch);
  }
}

void Server::handle_request(Incoming& in, const std::shared_ptr<Batch>& batch) {
  RequestEra era = request_era(in.params);
  if (in.method == "initialize") {
    if (batch)
      return reply(batch, error_response(in.id, kInvalidRequest, "Invalid Request: initialize cannot be batched"));
    if (!version_.empty())
      return reply(batch, error_response(in.id, kInvalidRequest, "Invalid Request: already initialized"));
    const json& p = in.params;
    if (!p.contains("protocolVersion") || !p["protocolVersion"].is_string() || !p.contains("capabilities") ||
        !p["capabilities"].is_object() || !p.contains("clientInfo") || !p["clientInfo"].is_object())
      return reply(batch, error_response(in.id, kInvalidParams,
                                         "Invalid params: initialize needs protocolVersion (a string), capabilities "
                                         "and clientInfo (objects)"));
    version_ = negotiate_legacy_version(p["protocolVersion"]);
    log_line("initialize: client asked for " + json_excerpt(p["protocolVersion"], 64) + ", serving " + version_);
    json r = {{"protocolVersion", version_},
              {"capabilities", {{"tools", {{"listChanged", false}}}}},
              {"serverInfo", server_info()}};
    if (!cfg_.instructions.empty()) r["instructions"] = cfg_.instructions;
    return reply(batch, result_response(in.id, std::move(r)));
  }
  if (era.error) return reply(batch, json{{"jsonrpc", "2.0"}, {"id", in.id}, {"error", *era.error}});
  auto complete = [&](json r) {
    if (era.modern) mark_modern(r);
    return result_response(in.id, std::move(r));
  };
  if (in.method == "ping") return reply(batch, complete(json::object()));
  if (in.method == "server/discover") {
    if (!era.modern)
      return reply(batch, error_response(in.id, kInvalidParams,
                                         std::string("Invalid params: server/discover needs _meta \"") +
                                             kMetaProtocolVersion + "\""));
    json r = {{"supportedVersions", supported_versions()},
              {"capabilities", {{"tools", {{"listChanged", false}}}}},
              {"ttlMs", 0},
              {"cacheScope", "private"}};
    if (!cfg_.instructions.empty()) r["instructions"] = cfg_.instructions;
    return reply(batch, complete(std::move(r)));
  }
  if (!era.modern && version_.empty())
    return reply(batch, error_response(in.id, kInvalidRequest,
                                       "Invalid Request: not initialized (send initialize first, or give _meta \"" +
                                           std::string(kMetaProtocolVersion) + "\": \"" + kModernVersion + "\")"));
  if (in.method == "tools/list") {
    if (in.params.contains("cursor"))  // sbx never hands out a cursor
      return reply(batch, error_response(in.id, kInvalidParams, "Invalid params: unknown cursor"));
    json r = {{"tools", tools()}};
    if (era.modern) {
      r["ttlMs"] = 0;
      r["cacheScope"] = "private";
    }
    return reply(batch, complete(std::move(r)));
  }
  if (in.method == "tools/call") return handle_call(in, era.modern, batch);
  return reply(batch, error_response(in.id, kMethodNotFound, "Method not found: " + json_excerpt(json(in.method))));
}

void Server::handle_call(Incoming& in, bool modern, const std::shared_ptr<Batch>& batch) {
  json& p = in.params;
  if (!p.contains("name") || !p["name"].is_string())
    return reply(batch, error_response(in.id, kInvalidParams, "Invalid params: tools/call needs \"name\" (a string)"));
  std::string name = p["name"];
  // Moved, never copied, from the message to the job: the arguments may be most of a 65 MiB line.
  json args = json::object();
  if (auto a = p.find("arguments"); a != p.end()) args = std::move(*a);
  if (!args.is_object())
    return reply(batch, error_response(in.id, kInvalidParams, "Invalid params: \"arguments\" must be an object"));
  std::string key = in.id.dump();
  if (calls_.count(key))
    return reply(batch, error_response(in.id, kInvalidRequest, "Invalid Request: id " + key + " is already in use"));
  auto tool_reply = [&](json r) {
    if (modern) mark_modern(r);
    reply(batch, result_response(in.id, std::move(r)));
  };
  Call c;
  c.id = in.id;
  c.modern = modern;
  c.tool = name;
  if (name == "run_code") {
    // Checked here, before any process exists: a malformed request is the model's to fix
    // (a tool error it can read), not a protocol error.
    if (auto rq = parse_exec_request(args); !rq) return tool_reply(tool_error(rq.error().message));
    c.job = {{"tool", "run_code"}, {"profile", cfg_.profile}};
    c.job["request"] = std::move(args);
  } else if (is_session_tool(name)) {
    if (auto why = session_arguments_refusal(name, args); !why.empty()) return tool_reply(tool_error(why));
    std::string store;
    if (name != "session_start") {
      c.session = args["session"].get<std::string>();
      auto it = sessions_.find(c.session);
      if (it == sessions_.end())
        return tool_reply(
            tool_error("no session " + c.session + " was started by this client (session_start returns one)"));
      store = it->second;
    }
    c.job = {{"tool", name}, {"profile", cfg_.profile}};
    c.job["arguments"] = std::move(args);
    if (!store.empty()) c.job["store"] = store;
  } else {
    const PackTool* pt = nullptr;
    for (auto& t : cfg_.packs)
      if (t.name == name) pt = &t;
    if (!pt)
      return reply(batch,
                   error_response(in.id, kInvalidParams, "Invalid params: unknown tool " + json_excerpt(json(name))));
    for (auto& [k, v] : args.items())
      if (k != "records")
        return tool_reply(tool_error("unknown argument '" + k + "': a pack tool takes {\"records\": [...]}"));
    if (!args.contains("records") || !args["records"].is_array())
      return tool_reply(tool_error("'records' is required: an array of input records"));
    c.job = pack_job(cfg_, *pt);
    c.job["records"] = std::move(args["records"]);
    c.wrapped_output = pt->wrapped_output;
  }
  // --max-queued bounds the calls that wait: one that starts at once (none waits, a slot is
  // free) is no queued call, so even --max-queued 0 takes it.
  if (!starts_at_once() && queue_.size() >= cfg_.max_queued)
    return reply(batch, error_response(in.id, kServerBusy,
                                       "Server busy: " + std::to_string(queue_.size()) +
                                           " calls already queued (--max-queued); send it once earlier calls have "
                                           "started"));
  if (std::string why = hold_if_waiting(c, key); !why.empty())
    return reply(batch, error_response(in.id, kServerBusy, why));
  if (p.contains("_meta") && p["_meta"].is_object() && p["_meta"].contains("progressToken")) {
    const json& t = p["_meta"]["progressToken"];
    if (t.is_string() || t.is_number_integer()) c.progress_token = t;
  }
  c.arrived = Clock::now();
  c.next_progress = c.arrived + std::chrono::milliseconds(cfg_.progress_interval_ms);
  if (batch) c.batch = batch;
  calls_.emplace(key, std::move(c));
  queue_.push_back(key);
  pump();
}

bool Server::starts_at_once() const { return queue_.empty() && running() < cfg_.max_concurrent; }

std::string Server::hold_if_waiting(Call& c, const std::string& key) {
  if (starts_at_once()) return "";  // pump() starts it at once
  // It waits: as its job's text, counted with its id (the calls map's key, the queue's, the id).
  c.job_text = dump_json(c.job, -1);
  c.job_text.shrink_to_fit();  // what it holds is what is counted
  c.job = json();
  c.held = c.job_text.size() + 3 * key.size();
  std::string why = queued_request_refusal(queued_bytes_, c.held, queue_.size());
  if (why.empty()) queued_bytes_ += c.held;
  return why;
}

void Server::unqueue(Call& c) {
  queued_bytes_ -= c.held;
  c.held = 0;
  std::string().swap(c.job_text);
}

void Server::pump() {
  while (!stopping_ && !queue_.empty() && running() < cfg_.max_concurrent) {
    std::string key = queue_.front();
    queue_.pop_front();
    Call& c = calls_.at(key);
    // The job goes to the launcher and is not kept: a running call holds none of its request.
    json job = std::move(c.job);
    c.job = json();
    std::string unreadable;
    if (!c.job_text.empty()) {
      // A tree sbx dumped: within its own size, and no deeper than the message it came from.
      ParsedJson back = parse_json(c.job_text, {c.job_text.size()});
      unqueue(c);
      if (back.ok()) job = std::move(back.value);
      else unreadable = back.describe();
    }
    Result<Worker> w = unreadable.empty()
                           ? launcher_.launch(job)
                           : make_error("mcp", "its waiting request could not be read back: " + unreadable);
    job = json();
    if (!w) {
      json r = tool_error("sbx: could not start the call's sandbox: " + w.error().describe());
      if (c.modern) mark_modern(r);
      auto batch = c.batch;
      json id = c.id;
      calls_.erase(key);
      reply(batch, result_response(id, std::move(r)));
      continue;
    }
    c.worker = std::move(*w);
    log_line("call " + call_key(key) + " (" + c.tool + "): started worker " + std::to_string(c.worker->pid));
  }
}

void Server::cancel(const json& request_id, const std::string& why) {
  std::string key = request_id.dump();
  auto it = calls_.find(key);
  if (it == calls_.end()) return;  // finished already, or never ours: the spec says ignore it
  Call& c = it->second;
  if (!c.worker) {
    std::erase(queue_, key);
    unqueue(c);
    auto batch = c.batch;
    calls_.erase(it);
    if (batch) batch_done(batch);
    log_line("call " + call_key(key) + ": " + why + " while queued");
    return;
  }
  if (c.cancelled) return;
  c.cancelled = true;
  // Two distinct signals: one would only be forwarded to the program, which may ignore it; the
  // second makes the supervisor kill the sandbox at once (supervisor.cpp). Two of the same kind
  // could merge into one pending signal.
  raw::pidfd_send_signal(c.worker->pidfd.get(), SIGTERM);
  raw::pidfd_send_signal(c.worker->pidfd.get(), SIGINT);
  c.kill_armed = true;
  c.kill_at = Clock::now() + std::chrono::milliseconds(cfg_.kill_wait_ms);
  log_line("call " + call_key(key) + ": " + why + "; killing its sandbox");
}

// Reads the worker's response (its memfd) straight into `out` after what is there. Returns the
// response's length, or an error text. The memfd's size is checked first, so nothing larger than
// the bound is ever read.
namespace {
std::variant<std::size_t, std::string> read_response(int fd, std::size_t max_bytes, std::string& out,
                                                     std::size_t room) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return std::string("cannot stat the worker's response: ") + std::strerror(errno);
  auto size = static_cast<std::size_t>(st.st_size);
  if (size > max_bytes)
    return "the worker's response is larger than " + std::to_string(max_bytes) + " bytes (" + std::to_string(size) +
           ")";
  std::size_t base = out.size();
  out.reserve(base + size + room);
  out.resize(base + size);
  for (std::size_t off = 0; off < size;) {
    ssize_t n = ::pread(fd, out.data() + base + off, size - off, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      out.resize(base);
      return std::string("cannot read the worker's response: ") + (n < 0 ? std::strerror(errno) : "short read");
    }
    off += static_cast<std::size_t>(n);
  }
  while (out.size() > base && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out.size() - base;
}
}  // namespace

void Server::finish(const std::string& key) {
  Call& c = calls_.at(key);
  int status = 0;
  while (::waitpid(c.worker->pid, &status, 0) < 0 && errno == EINTR) {}
  std::string how = WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                      : "signal " + std::to_string(WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  auto batch = c.batch;
  json id = c.id;
  bool cancelled = c.cancelled, modern = c.modern, wrapped = c.wrapped_output;
  std::string tool = c.tool, session = c.session;
  UniqueFd response = std::move(c.worker->response);
  pid_t pid = c.worker->pid;
  calls_.erase(key);
  // The response is read where it goes: at the end of the output buffer (or of a batch member's
  // text), and a run_code response stays the text the worker wrote, spliced in as
  // structuredContent; only a summary of it becomes a DOM (scan_worker_response). So one response
  // costs its own size once, whatever its streams hold (a DOM and a re-dump cost it three times).
  std::string member;            // a batch member's text
  if (!batch && out_off_ > 0) {  // what was sent goes first: the buffer then holds one copy at most
    outbuf_.erase(0, out_off_);
    out_off_ = 0;
  }
  std::string& out = batch ? member : outbuf_;
  std::size_t base = out.size();
  constexpr std::size_t kEnvelopeRoom = 256u
                                        << 10;  // the message around the response: a summary of kSummaryBytes pieces
  JsonBounds bounds = worker_response_bounds(cfg_.stream_limit_bytes);
  auto got = read_response(response.get(), bounds.max_bytes, out, kEnvelopeRoom);
  response.reset();
  std::string problem = std::holds_alternative<std::string>(got) ? std::get<std::string>(got) : "";
  std::size_t len = problem.empty() ? std::get<std::size_t>(got) : 0;
  std::string_view text(out.data() + base, len);
  ScannedResponse scanned;
  if (problem.empty() && len > 0) {
    scanned = scan_worker_response(text, bounds, tool != "run_code");
    if (!scanned.summary.ok()) problem = scanned.summary.describe();
  }
  const json& summary = scanned.summary.value;
  std::string run_id =
      summary.is_object() && summary.value("run_id", json("")).is_string() ? summary.value("run_id", "") : "";
  log_line("call " + call_key(key) + " (" + tool + "): worker " + std::to_string(pid) + " ended (" + how + ")" +
           (run_id.empty() ? "" : ", run " + run_id) + (cancelled ? ", cancelled: no response" : ""));
  if (cancelled) {
    // The spec: after notifications/cancelled, no response for that request.
    out.resize(base);
    if (batch) batch_done(batch);
    return pump();
  }
  json r;
  bool splice = false;
  if (!problem.empty() || len == 0)
    r = tool_error("sbx: the sandbox worker ended (" + how + ") without a response" +
                   (problem.empty() ? std::string() : ": " + problem));
  else if (tool == "run_code") {
    r = run_code_result(summary, scanned.cut, true);
    splice = r.contains("structuredContent");
  } else if (is_session_tool(tool)) {
    r = session_result(tool, summary);
    track_session(tool, session, summary);
  } else r = pack_result(summary, wrapped, scanned.cut);
  if (modern) mark_modern(r);
  json msg = result_response(id, std::move(r));
  std::string envelope = dump_json(msg, -1);
  deliver(batch, id, modern, out, base, len, std::move(envelope), splice, member);
  pump();
}

void Server::deliver(const std::shared_ptr<Batch>& batch, const json& id, bool modern, std::string& out,
                     std::size_t base, std::size_t len, std::string envelope, bool splice, std::string& member) {
  std::string marker = json(kSpliceMarker).dump();
  // The last occurrence: structuredContent is the result's last member (keys are sorted) and the
  // result the message's; the summary text before it holds the marker, if at all, escaped again.
  std::size_t at = splice ? envelope.rfind(marker) : std::string::npos;
  if (at == std::string::npos) {
    out.resize(base);
    out += envelope;
  } else {
    out.resize(base + len);
    out.insert(base, envelope, 0, at);  // within the room reserved: no second copy
    out.append(envelope, at + marker.size());
  }
  if (batch && batch_bytes_ + out.size() > kQueuedResponseBudget) {
    // A batch's members are held until all are in, and every held batch's count against the one
    // budget: past it, this one is refused.
    std::size_t size = out.size();
    out.clear();
    out.shrink_to_fit();
    json e = tool_error("sbx: this call's response (" + std::to_string(size) + " bytes) does not fit in the " +
                        std::to_string(kQueuedResponseBudget) + " bytes that held batch responses share (" +
                        std::to_string(batch_bytes_) + " held); call it outside a batch, or in a smaller one");
    if (modern) mark_modern(e);
    reply(batch, result_response(id, std::move(e)));
  } else if (batch) {
    reply_line(batch, std::move(member));
  } else if (!out_ok_) {
    outbuf_.clear();  // the client is gone: nothing more is written
    out_off_ = 0;
  } else {
    outbuf_ += '\n';
    flush_out();
  }
}

void Server::tick(Clock::time_point now) {
  for (auto& [key, c] : calls_) {
    if (c.kill_armed && now >= c.kill_at && c.worker) {
      // Not killed: the worker has killed its sandbox (the second signal) and is recording the
      // run; under load that can take longer than kill_wait_ms (a sandbox still being built, the
      // ledger's lock), and a SIGKILL then would leave a started call without a record. Every
      // step of the worker is bounded by its own limits (timeout, the ledger lock's wait).
      log_line("call " + call_key(key) + ": worker " + std::to_string(c.worker->pid) + " still running " +
               std::to_string(cfg_.kill_wait_ms) + " ms after its cancellation; waiting for its record");
      c.kill_armed = false;
    }
    // A progress notification is advisory: none is queued for a client that is not reading.
    if (c.progress_token.is_null() || c.cancelled || stopping_ || now < c.next_progress || over_budget()) continue;
    c.next_progress = now + std::chrono::milliseconds(cfg_.progress_interval_ms);
    ++c.progress;
    auto secs = std::chrono::duration_cast<std::chrono::seconds>(now - c.arrived).count();
    std::string msg = c.worker
                          ? "running in its sandbox (" + std::to_string(secs) + " s since the call)"
                          : "queued (" + std::to_string(secs) + " s): " + std::to_string(running()) + " calls running";
    json params = {{"progressToken", c.progress_token}, {"progress", c.progress}, {"message", msg}};
    send({{"jsonrpc", "2.0"}, {"method", "notifications/progress"}, {"params", params}});
  }
}

void Server::shutdown(const std::string& why) {
  if (stopping_) return;
  stopping_ = true;
  in_open_ = false;
  stop_by_ = Clock::now() + std::chrono::milliseconds(cfg_.kill_wait_ms);
  log_line("shutting down: " + why + "; " + std::to_string(running()) + " running, " + std::to_string(queue_.size()) +
           " queued");
  for (auto& key : queue_) {
    auto batch = calls_.at(key).batch;
    unqueue(calls_.at(key));
    calls_.erase(key);
    if (batch) batch_done(batch);  // as cancel() does for a waiting member
  }
  queue_.clear();
  std::vector<json> ids;
  for (auto& [k, c] : calls_) ids.push_back(c.id);
  for (auto& id : ids) cancel(id, "the server is shutting down");
}

int Server::poll_timeout_ms() const {
  auto now = Clock::now();
  auto next = Clock::time_point::max();
  for (auto& [k, c] : calls_) {
    if (c.kill_armed) next = std::min(next, c.kill_at);
    if (stopping_) next = std::min(next, stop_by_);
    if (!c.progress_token.is_null() && !c.cancelled && !stopping_) next = std::min(next, c.next_progress);
  }
  int timeout = -1;
  if (next != Clock::time_point::max())
    timeout = static_cast<int>(
        std::max<long long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1));
  if (int t = launcher_.next_tick_ms(); t >= 0 && !stopping_) timeout = timeout < 0 ? t : std::min(timeout, t);
  return timeout;
}

void Server::take_input(std::string_view chunk) {
  while (!chunk.empty() && !stopping_) {
    auto nl = chunk.find('\n');
    std::string_view part = nl == std::string_view::npos ? chunk : chunk.substr(0, nl);
    if (!discarding_) {
      if (inbuf_.size() + part.size() > kMaxMessageBytes) {
        // Refused before it is held in full: memory stays bounded whatever the client sends.
        discarding_ = true;
        inbuf_.clear();
        send(
            error_response(nullptr, kInvalidRequest,
                           "Invalid Request: a message is longer than " + std::to_string(kMaxMessageBytes) + " bytes"));
      } else {
        inbuf_.append(part);
      }
    }
    if (nl == std::string_view::npos) break;
    chunk.remove_prefix(nl + 1);
    if (!discarding_) {
      std::string line = std::move(inbuf_);
      inbuf_.clear();
      on_line(line);
    }
    discarding_ = false;
  }
}

int Server::run() {
  sigset_t set;
  forwarded_signals(&set);
  sigdelset(&set, SIGQUIT);
  UniqueFd sfd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!sfd.ok()) {
    log_line(std::string("signalfd: ") + std::strerror(errno));
    return 125;
  }
  // A client that stops reading must not stall the loop: stdout is written only as poll allows.
  // Only a pipe or socket is made non-blocking (the flag is on the open file description; a
  // terminal shared with the caller's shell stays as it was).
  struct stat st {};
  if (::fstat(out_, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))
    ::fcntl(out_, F_SETFL, ::fcntl(out_, F_GETFL) | O_NONBLOCK);
  SignalDispositionGuard no_sigpipe(SIGPIPE, SIG_IGN);  // a gone client is EPIPE, handled above
  std::vector<char> buf(1u << 20);
  for (;;) {
    if (stopping_ && calls_.empty()) break;
    if (stopping_ && Clock::now() >= stop_by_) {
      // Each one left is cancelled and records its run by itself (its parent-death signal is
      // SIGTERM, which it already had): leaving it is how its record is kept.
      log_line("leaving " + std::to_string(running()) + " cancelled workers to finish their records");
      break;
    }
    std::vector<pollfd> fds;
    fds.push_back({sfd.get(), POLLIN, 0});
    // A client that sends and never reads would grow the unsent responses without bound: past
    // kQueuedResponseBudget its requests wait in the pipe (back-pressure) and finished calls wait
    // with their responses in their memfds (their pidfds are not polled) until it reads.
    fds.push_back({in_open_ && !over_budget() ? in_ : -1, POLLIN, 0});
    fds.push_back({out_ok_ && unwritten() > 0 ? out_ : -1, POLLOUT, 0});
    std::vector<std::string> keys;
    for (auto& [k, c] : calls_)
      if (c.worker && may_take(c)) {
        fds.push_back({c.worker->pidfd.get(), POLLIN, 0});
        keys.push_back(k);
      }
    int timeout = poll_timeout_ms();
    int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) {
      log_line(std::string("poll: ") + std::strerror(errno));
      shutdown("poll failed");
      continue;
    }
    if (n > 0 && (fds[0].revents & POLLIN)) {
      signalfd_siginfo si{};
      while (::read(sfd.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si))
        shutdown(signal_name(static_cast<int>(si.ssi_signo)));
    }
    if (n > 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t r = ::read(in_, buf.data(), buf.size());
      if (r < 0 && errno != EINTR && errno != EAGAIN) shutdown(std::string("stdin: ") + std::strerror(errno));
      if (r == 0) shutdown("stdin closed");
      if (r > 0) { take_input(std::string_view(buf.data(), static_cast<std::size_t>(r))); }
    }
    if (n > 0 && (fds[2].revents & (POLLOUT | POLLERR | POLLHUP))) flush_out();
    // One response at a time, each only while the budget allows (finish may have filled it).
    for (std::size_t i = 0; n > 0 && i < keys.size(); ++i)
      if ((fds[3 + i].revents & POLLIN) && may_take(calls_.at(keys[i]))) finish(keys[i]);
    tick(Clock::now());
    if (!stopping_) launcher_.tick();
  }
  // Whatever is still buffered goes out if the client still reads; never wait on it for long.
  if (out_ok_ && unwritten() > 0) {
    pollfd p{out_, POLLOUT, 0};
    for (int i = 0; i < 10 && out_ok_ && unwritten() > 0 && ::poll(&p, 1, 100) > 0; ++i) flush_out();
  }
  stop_sessions();
  log_line("stopped: no call left running");
  return 0;
}

void Server::track_session(const std::string& tool, const std::string& session, const json& response) {
  if (!response.is_object() || response.value("status", "") != "ok") return;
  if (tool == "session_start" && response.value("session", json()).is_string() &&
      response.value("store", json()).is_string())
    sessions_[response["session"].get<std::string>()] = response["store"].get<std::string>();
  if (tool == "session_stop") sessions_.erase(session);
}

// The client is gone: its sessions end with it. Each stop waits for its session's records (the
// session's own grace bounds it); the loop is over, so nothing else waits meanwhile.
void Server::stop_sessions() {
  for (auto& [id, store] : sessions_) {
    Dirs dirs;
    dirs.state = store;
    auto stopped = session_stop(dirs, id, true);
    log_line("session " + id +
             (stopped ? " stopped: its client went away" : " could not be stopped: " + stopped.error().message));
  }
  sessions_.clear();
}

}  // namespace

namespace {
ForkServer* g_forks = nullptr;
}  // namespace

UseForkServer::UseForkServer(ForkServer* forks) { g_forks = forks; }
UseForkServer::~UseForkServer() { g_forks = nullptr; }

namespace {
// spawn_worker's child by fork and exec: its pid.
Result<pid_t> exec_worker(const std::vector<std::string>& args, int in_fd, int out_fd, int pdeathsig) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t server = ::getpid();
  pid_t pid = ::fork();  // the server is single-threaded: fork is safe, and exec follows at once
  if (pid < 0) return sys_error("mcp", "fork a worker");
  if (pid == 0) {
    // The forwarded signals stay blocked across exec: one that arrives before the worker's
    // supervisor exists waits for it, and is recorded, instead of killing it (signals.hpp).
    if (::dup2(in_fd, 0) < 0 || ::dup2(out_fd, 1) < 0) ::_exit(125);
    ::prctl(PR_SET_PDEATHSIG, pdeathsig);
    // The server died before the prctl, so its signal was missed: it is sent here instead. Not an
    // exit: the server may have handed this worker its call already (a cold worker's job is in
    // its stdin), and a SIGTERM, blocked, waits for the worker, which records the call as not
    // started (a SIGKILL ends it, as the parent-death signal would have).
    if (::getppid() != server) ::kill(::getpid(), pdeathsig);
    ::setpgid(0, 0);
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  return pid;
}
}  // namespace

Result<Worker> spawn_worker(const std::vector<std::string>& args, int in_fd, UniqueFd response, int pdeathsig) {
  // The fork server's fork, else (it has ended, or this request is too large for it) an exec.
  Result<pid_t> pid = make_error("mcp", "no fork server");
  if (g_forks != nullptr && g_forks->alive()) pid = g_forks->spawn(args, in_fd, response.get(), pdeathsig);
  if (!pid) pid = exec_worker(args, in_fd, response.get(), pdeathsig);
  if (!pid) return pid.error();
  Worker w;
  w.pid = *pid;
  w.pidfd = UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, w.pid, 0)));
  if (!w.pidfd.ok()) {
    int e = errno;
    ::kill(w.pid, SIGKILL);
    ::waitpid(w.pid, nullptr, 0);
    errno = e;
    return sys_error("mcp", "pidfd_open for a worker");
  }
  w.response = std::move(response);
  return w;
}

Result<Worker> ReexecLauncher::launch(const json& job) {
  UniqueFd in(::memfd_create("sbx-mcp-job", MFD_CLOEXEC)), out(::memfd_create("sbx-mcp-response", MFD_CLOEXEC));
  if (!in.ok() || !out.ok()) return sys_error("mcp", "memfd_create for a worker's job and response");
  json copy = job;
  if (Status w = write_all(in.get(), dump_json(copy, -1), "the job to the worker's memfd"); !w) {
    w.error().stage = "mcp";
    w.error().message = "write the job to the worker's memfd";  // the words it always had
    return w.error();
  }
  ::lseek(in.get(), 0, SEEK_SET);
  // Should the server die without cancelling (SIGKILL), its workers cancel themselves.
  return spawn_worker(argv_, in.get(), std::move(out), SIGTERM);
}

json pack_job(const ServerConfig& cfg, const PackTool& pack) {
  json ctx = json::array();
  if (auto it = cfg.contexts.find(pack.name); it != cfg.contexts.end())
    for (auto& [n, path] : it->second) ctx.push_back({n, path});
  json secrets = json::array();
  if (auto it = cfg.secrets.find(pack.name); it != cfg.secrets.end())
    for (auto& [n, source] : it->second) secrets.push_back({n, source});
  return {{"tool", "pack"}, {"profile", cfg.profile}, {"dir", pack.dir}, {"contexts", ctx}, {"secrets", secrets}};
}

int serve(const ServerConfig& config, SandboxLauncher& launcher, int in_fd, int out_fd) {
  Server s(config, launcher, in_fd, out_fd);
  return s.run();
}

}  // namespace sbx::mcp
