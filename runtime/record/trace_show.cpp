// `sbx trace show --format text` (trace_show.hpp): a record for people, read tolerantly.
#include "runtime/record/trace_show.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "runtime/base/json_io.hpp"
#include "runtime/base/shell_quote.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/base/units.hpp"

namespace sbx {
using nlohmann::json;

// Records hold text of outside origin (argv, a pack's manifest, what the program named), and a
// stored record may have been edited: everything printed from one is escaped for the terminal.
// ASCII-only JSON: control characters, DEL, C1 and every other non-ASCII character as \uXXXX, and
// bytes that are not UTF-8 replaced instead of aborting the listing.
std::string dump_ascii_json(const json& v, int indent) {
  return v.dump(indent, ' ', true, json::error_handler_t::replace);
}

namespace {
// The tolerant member read (json_io.hpp), by this file's short name.
constexpr auto at = json_member;

// A scalar for people: strings without quotes (made printable), null as "-", everything else as
// compact JSON.
std::string text(const json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return printable(v.get<std::string>());
  return dump_ascii_json(v);
}

// "LABEL        VALUE": the label padded to 12 columns (as printf's "%-12s %s\n" would, which the
// text format was first written with: a value ends at a NUL byte).
void line(std::string& o, const char* label, const std::string& value) {
  std::size_t n = std::strlen(label);
  o += label;
  if (n < 12) o.append(12 - n, ' ');
  o += ' ';
  o.append(value, 0, value.find('\0'));
  o += '\n';
}

std::string command_of(const json& argv) {
  std::vector<std::string> args;
  if (argv.is_array())
    for (auto& a : argv) args.push_back(a.is_string() ? a.get<std::string>() : dump_ascii_json(a));
  return shell_join(args);
}

std::string stream_line(const json& s) {
  if (!s.is_object()) return "-";
  std::string out = text(at(s, "bytes")) + " bytes, sha256 " + text(at(s, "sha256"));
  if (at(s, "truncated") == true) out += ", truncated";
  return out;
}

// "pipe from a pipe: 10485760 bytes, eof" (records of older versions have no stdin member).
std::string stdin_line(const json& s) {
  if (!s.is_object()) return "-";
  std::string out = text(at(s, "mode")) + " (sbx's stdin: " + text(at(s, "source")) + ")";
  if (at(s, "relayed") == true) {
    out += ", " + text(at(s, "bytes")) + " bytes relayed";
    if (at(s, "undelivered_bytes").is_number_integer() && at(s, "undelivered_bytes") != 0)
      out += ", " + text(at(s, "undelivered_bytes")) + " read but undelivered";
    if (at(s, "eof") == true) out += ", eof";
    if (at(s, "closed_by_program") == true) out += ", closed by the program";
  }
  if (at(s, "tty").is_object())
    out += ", pty " + text(at(at(s, "tty"), "rows")) + "x" + text(at(at(s, "tty"), "cols")) +
           ", stderr merged into stdout";
  return out;
}

void print_files(std::string& o, const char* label, const json& files) {
  if (!files.is_array() || files.empty()) return line(o, label, "none");
  for (auto& f : files) {
    line(o, label, text(at(f, "path")) + "  " + text(at(f, "bytes")) + " bytes, sha256 " + text(at(f, "sha256")));
    label = "";
  }
}

// The network mode, and for proxied runs what went through the proxy, host by host, with the
// reason the latest failed connection failed (denials are listed under violations).
void print_network(std::string& o, const json& enf, const json& usage) {
  std::string mode = text(at(enf, "mode"));
  const json& allow = at(enf, "allow");
  if (allow.is_array() && !allow.empty()) {
    std::string list;
    for (auto& a : allow) list += (list.empty() ? "" : ", ") + text(a);
    mode += " (allow " + list + ")";
  }
  line(o, "network", mode);
  if (!usage.is_object()) return;
  line(o, "",
       text(at(usage, "connections")) + " connection(s), " + text(at(usage, "denied")) + " denied, " +
           text(at(usage, "bytes_out")) + " bytes out, " + text(at(usage, "bytes_in")) + " bytes in");
  const json& hosts = at(usage, "hosts");
  if (!hosts.is_array()) return;
  for (auto& h : hosts) {
    std::string out = text(at(h, "host")) + ": " + text(at(h, "connections")) + " connection(s)";
    for (const char* k : {"denied", "failed", "idle_closed", "lookups_timed_out"})
      if (at(h, k).is_number_integer() && at(h, k) != 0) out += ", " + text(at(h, k)) + " " + k;
    out += ", " + text(at(h, "bytes_out")) + " bytes out, " + text(at(h, "bytes_in")) + " bytes in";
    if (at(h, "last_failure").is_string()) out += "; last failure: " + text(at(h, "last_failure"));
    line(o, "", out);
  }
  const json& hs = at(usage, "hosts_summary");
  if (at(hs, "truncated") == true)
    line(o, "",
         "... and " + text(at(hs, "unlisted_requests")) + " requests to destinations past the first " +
             text(at(hs, "listed_cap")) + " (" + text(at(hs, "unlisted_denied")) + " denied), not listed");
}

// What ran: the run's id and times, its command, profile, pack and image.
void print_invocation(std::string& o, const json& r) {
  line(o, "run", text(at(r, "run_id")));
  line(o, "started", text(at(r, "started_at")));
  line(o, "ended", text(at(r, "ended_at")));

  const json& inv = at(r, "invocation");
  const json& spec_argv = at(at(inv, "spec"), "argv");
  line(o, "command", command_of(spec_argv.is_array() ? spec_argv : at(inv, "argv")));
  line(o, "sbx argv", command_of(at(inv, "argv")));
  line(o, "cwd", text(at(inv, "cwd")));
  const json& prof = at(inv, "profile");
  line(o, "profile",
       text(at(prof, "name")) + " (" + text(at(prof, "origin")) + ", sha256 " + text(at(prof, "sha256")) + ")");
  const json& pack = at(inv, "pack");
  if (!pack.is_null())
    line(o, "pack", text(at(pack, "name")) + " " + text(at(pack, "version")) + " " + text(at(pack, "digest")));
  const json& image = at(r, "image");
  line(o, "image", text(at(image, "name")) + " (digest " + text(at(image, "digest")) + ")");
}

// How it ended: status, exit code or signal, the setup error and the reason.
void print_result(std::string& o, const json& res) {
  std::string status = text(at(res, "status"));
  if (at(res, "exit_code").is_number_integer()) status += ", exit " + text(at(res, "exit_code"));
  if (at(res, "signal").is_number_integer()) {
    int sig = at(res, "signal").get<int>();
    const char* name = sig > 0 && sig < 65 ? ::strsignal(sig) : nullptr;
    status += ", signal " + std::to_string(sig) + (name ? std::string(" (") + name + ")" : "");
  }
  line(o, "status", status);
  const json& err = at(res, "error");
  if (err.is_object()) {
    std::string msg = "at " + text(at(err, "stage")) + ": " + text(at(err, "message"));
    if (at(err, "errno").is_number_integer() && at(err, "errno").get<int>() != 0) {
      // The runtime's message may already end with the strerror text (Error::describe()).
      std::string why = ::strerror(at(err, "errno").get<int>());
      bool has_why = msg.size() >= why.size() && msg.compare(msg.size() - why.size(), why.size(), why) == 0;
      msg += (has_why ? "" : ": " + why) + " (errno " + text(at(err, "errno")) + ")";
    }
    line(o, "error", msg);
  }
  if (at(res, "reason").is_string() && !at(res, "reason").get<std::string>().empty())
    line(o, "reason", text(at(res, "reason")));
}

// "refused unshare (x86_64 #272) 3 times with EPERM, first at 12 ms".
std::string seccomp_sentence(const json& v) {
  std::string action = text(at(v, "action"));
  std::string how;
  if (action.starts_with("SCMP_ACT_ERRNO(") && action.ends_with(")"))
    how = "with " + action.substr(15, action.size() - 16);
  else if (action.starts_with("SCMP_ACT_KILL")) how = "by killing the sandbox";
  else how = "with " + action;
  const json& count = at(v, "count");
  std::string times = count == 1 ? "once" : text(count) + " times";
  std::string out = "seccomp: refused " + text(at(v, "name")) + " (" + text(at(v, "arch")) + " #" +
                    text(at(v, "number")) + ") " + times + " " + how + ", first at " + text(at(v, "first_at_ms")) +
                    " ms";
  if (seccomp_refusal_expected(v)) out += " (expected: libc falls back to clone)";
  return out;
}

// The limits applied (and how) and those that were not (and why).
void print_limits(std::string& o, const json& enf) {
  const json& applied = at(enf, "limits_applied");
  if (!applied.is_object() || applied.empty()) line(o, "limits", "none applied");
  const char* label = "limits";
  if (applied.is_object()) {
    for (auto& [name, v] : applied.items()) {
      line(o, label,
           printable(name) + " = " + shown_limit_value(name, at(v, "value")) + " (" + text(at(v, "mechanism")) + ")");
      label = "";
    }
  }
  const json& not_applied = at(enf, "limits_not_applied");
  label = "not applied";
  if (not_applied.is_array()) {
    for (auto& n : not_applied) {
      line(o, label,
           text(at(n, "limit")) +
               (at(n, "value").is_null() ? "" : " = " + shown_limit_value(text(at(n, "limit")), at(n, "value"))) +
               ": " + text(at(n, "reason")));
      label = "";
    }
  }
}

// What went in and came out: files, and the three streams.
void print_files_and_streams(std::string& o, const json& r) {
  print_files(o, "inputs", at(r, "inputs"));
  print_files(o, "outputs", at(r, "outputs"));
  const json& os = at(r, "outputs_summary");
  if (at(os, "truncated") == true)
    line(
        o, "",
        "... and " + text(at(os, "unlisted_outputs")) + " outputs not listed (" + text(at(os, "outputs")) + " in all)");
  if (at(r, "record_truncated").is_object())
    line(o, "record",
         "over " + text(at(at(r, "record_truncated"), "max_bytes")) + " bytes: members cut (record_truncated)");
  line(o, "stdin", stdin_line(at(r, "stdin")));
  line(o, "stdout", stream_line(at(r, "stdout")));
  line(o, "stderr", stream_line(at(r, "stderr")));
}

// Time, memory and processes used.
void print_usage(std::string& o, const json& u) {
  auto ms = [&](const char* k) { return at(u, k).is_null() ? std::string("-") : text(at(u, k)) + " ms"; };
  line(o, "usage", "wall " + ms("wall_ms") + ", cpu user " + ms("cpu_user_ms") + ", cpu sys " + ms("cpu_sys_ms"));
  line(o, "",
       "memory peak " +
           (at(u, "memory_peak_bytes").is_number_integer() ? format_size(at(u, "memory_peak_bytes").get<std::int64_t>())
                                                           : text(at(u, "memory_peak_bytes"))) +
           ", pids peak " + text(at(u, "pids_peak")) + ", oom kills " + text(at(u, "oom_kills")));
}

// What the sandbox refused: one line each, and a note of those left out of the record. Refusals
// programs expect (seccomp_refusal_expected) get a line of their own after them.
void print_violations(std::string& o, const json& r) {
  const json& viol = at(r, "violations");
  const char* label = "violations";
  std::vector<const json*> expected;
  if (viol.is_array()) {
    for (auto& v : viol) {
      if (seccomp_refusal_expected(v)) {
        expected.push_back(&v);
        continue;
      }
      // A refused connection or system call reads as a sentence; other kinds as their JSON.
      if (at(v, "kind") == "network")
        line(o, label,
             "network: denied " + text(at(v, "host")) + ":" + text(at(v, "port")) + " at " + text(at(v, "time_ms")) +
                 " ms: " + text(at(v, "reason")));
      else if (at(v, "kind") == "seccomp") line(o, label, seccomp_sentence(v));
      else line(o, label, dump_ascii_json(v));
      label = "";
    }
  }
  if (*label) line(o, "violations", "none");
  for (auto* v : expected) line(o, "expected", seccomp_sentence(*v));
  const json& cut = at(at(r, "violations_summary"), "seccomp");
  if (at(cut, "truncated") == true)
    line(o, "",
         "... and " + text(at(cut, "unlisted_calls")) + " refused system calls not listed (" +
             text(at(cut, "unlisted_distinct")) + " distinct kinds; " + text(at(cut, "calls")) + " in all)");
}
}  // namespace

bool seccomp_refusal_expected(const json& v) {
  return at(v, "kind") == "seccomp" && at(v, "name") == "clone3" && at(v, "action") == "SCMP_ACT_ERRNO(ENOSYS)";
}

std::string shown_limit_value(const std::string& plan_name, const json& value) {
  if (!value.is_number_integer()) return text(value);
  auto n = value.get<std::int64_t>();
  if (plan_name == "timeout" || plan_name == "cpu_time") return format_duration_ms(n);
  if (plan_name == "memory" || plan_name == "output" || plan_name.ends_with("_size")) return format_size(n);
  return text(value);
}

// violations_line's end, which is_violations_line recognises.
constexpr const char* kViolationsSee = ": see 'sbx trace show ";
constexpr const char* kViolationsSeeEnd = " --format text'";

ViolationCounts count_violations(const json& r, std::vector<std::string>* call_names_out,
                                 std::vector<std::string>* host_names_out) {
  std::uint64_t calls = 0, hosts = 0;
  std::vector<std::string> call_names, host_names;
  auto add_name = [](std::vector<std::string>& names, const std::string& n) {
    if (n.empty()) return;
    for (auto& x : names)
      if (x == n) return;
    names.push_back(n);
  };
  const json& viol = at(r, "violations");
  if (viol.is_array())
    for (auto& v : viol) {
      if (at(v, "kind") == "seccomp" && !seccomp_refusal_expected(v)) {
        const json& c = at(v, "count");
        calls += c.is_number_integer() && c.get<std::int64_t>() > 0 ? c.get<std::uint64_t>() : 1;
        add_name(call_names, text(at(v, "name")));
      } else if (at(v, "kind") == "network" && at(v, "host").is_string() && !at(v, "host").get<std::string>().empty()) {
        ++hosts;
        add_name(host_names, text(at(v, "host")));
      }
    }
  // Calls past the record's list are counted in its summary (never listed: their names are not known).
  const json& unlisted = at(at(at(r, "violations_summary"), "seccomp"), "unlisted_calls");
  if (unlisted.is_number_integer() && unlisted.get<std::int64_t>() > 0) calls += unlisted.get<std::uint64_t>();
  if (call_names_out) *call_names_out = std::move(call_names);
  if (host_names_out) *host_names_out = std::move(host_names);
  return {calls, hosts};
}

std::string violations_line(const json& r) {
  std::vector<std::string> call_names, host_names;
  auto [calls, hosts] = count_violations(r, &call_names, &host_names);
  if (calls == 0 && hosts == 0) return "";
  auto names = [](const std::vector<std::string>& v) {
    std::string out;
    for (std::size_t i = 0; i < v.size() && i < 5; ++i) out += (i ? ", " : "") + v[i];
    if (v.size() > 5) out += ", ...";
    return out.empty() ? std::string() : " (" + out + ")";
  };
  std::string out;
  if (calls)
    out += std::to_string(calls) + (calls == 1 ? " system call refused" : " system calls refused") + names(call_names);
  if (hosts)
    out += (out.empty() ? "" : ", ") + std::to_string(hosts) +
           (hosts == 1 ? " connection denied" : " connections denied") + names(host_names);
  std::string id = text(at(r, "run_id"));
  return out + kViolationsSee + id + kViolationsSeeEnd;
}

json run_summary_json(const json& r, const RecordPlace& place, int exit_status) {
  auto [calls, hosts] = count_violations(r);
  auto text_or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  const json& wall = at(at(r, "usage"), "wall_ms");
  return json{{"run_id", at(r, "run_id")},
              {"started_at", at(r, "started_at")},
              {"ended_at", at(r, "ended_at")},
              {"result", at(r, "result")},
              {"exit_status", exit_status},
              {"wall_ms", wall},
              {"violations", {{"system_calls", calls}, {"hosts", hosts}}},
              {"record",
               {{"stored", place.stored},
                {"ledger", text_or_null(place.ledger)},
                {"seq", place.stored ? json(place.seq) : json(nullptr)},
                {"hash", place.stored ? text_or_null(place.hash) : json(nullptr)},
                {"error", text_or_null(place.error)},
                {"trace_file", text_or_null(place.trace_file)}}}};
}

bool is_violations_line(const std::string& message) {
  return (message.find(" refused") != std::string::npos || message.find(" denied") != std::string::npos) &&
         message.find(kViolationsSee) != std::string::npos && message.ends_with(kViolationsSeeEnd);
}

std::string trace_show_text(const json& r) {
  std::string o;
  print_invocation(o, r);
  print_result(o, at(r, "result"));
  print_limits(o, at(r, "enforcement"));
  print_files_and_streams(o, r);
  print_usage(o, at(r, "usage"));
  print_network(o, at(at(r, "enforcement"), "network"), at(at(r, "usage"), "network"));
  print_violations(o, r);
  return o;
}

}  // namespace sbx
