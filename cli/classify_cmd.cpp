// sbx classify [FILE|-] [--json]: a workload's six answers -> the lowest tier that serves it
// (runtime/model/classify.hpp). With no FILE on a terminal, the six questions are asked one by one.
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "cli/commands.hpp"
#include "runtime/model/classify.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/text_escape.hpp"

namespace sbx::cli {
namespace {
using nlohmann::json;

// One answer line, bounded: a line longer than the buffer is an error, not two answers.
Result<std::optional<std::string>> read_answer() {
  char buf[1024];
  if (!std::fgets(buf, sizeof buf, stdin)) return std::optional<std::string>();
  std::size_t n = std::strlen(buf);
  if (n == sizeof buf - 1 && buf[n - 1] != '\n') return make_error("usage", "classify: answer longer than 1022 bytes");
  std::string s(buf, n);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  while (!s.empty() && s.front() == ' ') s.erase(0, 1);
  return std::optional<std::string>(s);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s + ",") {
    if (c == ',' || c == ' ') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return out;
}

// Asks `question` (every prompt ends in "? ", and no question holds one); an empty answer takes `def`; with `choices`, the answer must be one of them
// (three tries). End of input is an error: half a workload is not one.
Result<std::string> ask(const std::string& question, const std::vector<std::string>& choices, const std::string& def) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::string list;
    for (auto& c : choices) list += (list.empty() ? "" : "/") + c;
    std::fprintf(stderr, "%s%s%s? ", question.c_str(), list.empty() ? "" : (" [" + list + "]").c_str(),
                 def.empty() ? "" : (" (default " + def + ")").c_str());
    std::fflush(stderr);
    auto line = read_answer();
    if (!line) return line.error();
    if (!*line) return make_error("usage", "classify: input ended before every question was answered");
    std::string a = line->value().empty() ? def : line->value();
    if (choices.empty() || std::find(choices.begin(), choices.end(), a) != choices.end()) return a;
    std::fprintf(stderr, "  '%s' is not one of %s\n", printable(a).c_str(), list.c_str());
  }
  return make_error("usage", "classify: no valid answer to '" + question + "' in three tries");
}

// The six questions, answered into the same JSON a workload file holds (so one parser checks both).
Result<json> interview() {
  json j = json::object();
  std::fprintf(stderr, "sbx classify: six questions about the workload (Enter takes the default)\n");
  auto name = ask("name", {}, "");
  if (!name) return name.error();
  if (!name->empty()) j["name"] = *name;
  auto code = ask("1. code (does any run, and who wrote it)", {"none", "trusted", "untrusted", "model-written"}, "");
  if (!code) return code.error();
  j["code"] = *code;
  auto creds = ask("2. credentials it is handed (environment variable names, comma-separated)", {}, "");
  if (!creds) return creds.error();
  j["credentials"] = split_list(*creds);
  auto net = ask("3. network", {"none", "allowlist", "public", "private"}, "none");
  if (!net) return net.error();
  j["network"] = *net;
  if (*net != "none") {
    auto hosts = ask("   hosts it must reach (HOST[:PORT], *.domain, IP or CIDR; comma-separated)", {}, "");
    if (!hosts) return hosts.error();
    j["allow"] = split_list(*hosts);
  }
  auto life = ask("4. lifetime", {"request", "task", "long-lived"}, "task");
  if (!life) return life.error();
  j["lifetime"] = *life;
  auto state = ask("   state kept between runs", {"none", "scratch", "persistent"}, "none");
  if (!state) return state.error();
  j["state"] = *state;
  if (*code != "none") {
    auto rt =
        ask("5. runtime surface (comma-separated: shell, browser, package_install, writable_fs, kernel_features, gpu)",
            {}, "");
    if (!rt) return rt.error();
    json surf = json::object();
    for (auto& s : split_list(*rt)) surf[s] = true;  // an unknown word is named by the parser
    j["runtime"] = surf;
  }
  json lim = json::object();
  std::fprintf(stderr, "6. limits (Enter for none)\n");
  for (const char* k : {"cpus", "memory", "processes", "output", "timeout", "spend"}) {
    auto a = ask(std::string("   ") + k, {}, "");
    if (!a) return a.error();
    if (a->empty()) continue;
    if (std::string(k) == "cpus" || std::string(k) == "processes") {
      char* end = nullptr;
      double d = std::strtod(a->c_str(), &end);
      if (*end != '\0') return make_error("usage", "classify: answers: /limits/" + std::string(k) + ": not a number");
      if (std::string(k) == "processes") lim[k] = static_cast<std::int64_t>(d);
      else lim[k] = d;
    } else {
      lim[k] = *a;
    }
  }
  j["limits"] = lim;
  return j;
}

}  // namespace

void add_classify_command(CLI::App& app, GlobalOptions& g, std::vector<Command>& out) {
  static std::string file;
  static bool as_json = false;
  auto* cmd = app.add_subcommand(
      "classify", "Answer which isolation tier (0-5) a workload needs, from its six answers; a profile for tiers 3-4");
  cmd->add_option("file", file, "Workload description (JSON; - for stdin). None on a terminal: asked interactively");
  cmd->add_flag("--json", as_json, "Print the answer as JSON");
  add_global_options(*cmd, g);
  out.push_back({cmd, []() -> int {
                   json doc;
                   std::string source = file.empty() ? "answers" : file == "-" ? "stdin" : file;
                   if (file.empty()) {
                     if (::isatty(STDIN_FILENO) != 1)
                       return usage_error(
                           "classify: give a workload file (JSON; - for stdin), or run on a terminal to be asked");
                     auto j = interview();
                     if (!j) return usage_error(j.error().message);
                     doc = std::move(*j);
                   } else {
                     // YAML is not read: no YAML parser is linked into sbx (JSON is a subset of YAML 1.2, so a
                     // JSON workload file is also valid YAML).
                     auto j = file == "-" ? [&]() -> Result<json> {
                       auto text = read_bounded_fd(STDIN_FILENO, kMaxWorkloadBytes, "usage", "workload on stdin");
                       if (!text) return text.error();
                       return parse_json_doc(*text, {kMaxWorkloadBytes, 16, 10000}, "usage", "stdin");
                     }()
                         : read_json_file(file, {kMaxWorkloadBytes, 16, 10000}, "usage", file);
                     if (!j) return usage_error("classify: " + j.error().message);
                     doc = std::move(*j);
                   }
                   auto w = workload_from_json(doc, source);
                   if (!w) return usage_error("classify: " + w.error().message);
                   auto c = classify(*w);
                   if (!c) return usage_error("classify: " + c.error().message);
                   if (as_json) {
                     json j = classification_to_json(*w, *c);
                     std::printf("%s\n", dump_json(j, 2, {}, true).c_str());
                   } else {
                     std::fputs(classification_to_text(*w, *c).c_str(), stdout);
                   }
                   return 0;
                 }});
}

}  // namespace sbx::cli
