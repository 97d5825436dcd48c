#include "runtime/model/warm.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "runtime/base/sha256.hpp"

namespace sbx {

namespace {

// The drivers: the prepared interpreter's own code (`python3 -c`, `node -e`), started by init
// before any call (runtime/launch/warm_start.hpp has the protocol on their stdin):
//   1. import the preload list (argv) with stdout and stderr sent to /dev/null (node: its stream
//      writes muted; it cannot move fds), not from the working directory (Python: '' off
//      sys.path; node: resolved from /);
//   2. write "ok\n" on fd 0 (a socket to init), or "fail WHAT\n" and exit 1;
//   3. read the call's argv, each entry NUL-terminated, up to EOF; put /dev/null on fd 0;
//   4. run the call: argv[1] as the main module when argv[0] is this interpreter, as
//      `python3 FILE ARGS` / `node FILE ARGS` would; else exec argv as it is (python3 only).
//      Python's end is `python3 FILE`'s but for the teardown of every module (man/sbx-mcp.1):
//      threads joined, atexit handlers run, the main module's globals released, streams
//      flushed, then _exit: _sbx_main, in runtime/model/python_main.py, which comes first.
constexpr const char* kPythonDriver = R"PY(
def _sbx_warm():
    import os, sys
    mods = sys.argv[1:]
    if sys.path and sys.path[0] == '':
        del sys.path[0]
    keep = (os.dup(1), os.dup(2))
    null = os.open('/dev/null', os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    failed = None
    try:
        import importlib
        for m in mods:
            importlib.import_module(m)
    except BaseException as e:
        failed = 'preload %s: %s: %s' % (m, type(e).__name__, e)
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass
    os.dup2(keep[0], 1)
    os.dup2(keep[1], 2)
    os.close(keep[0])
    os.close(keep[1])
    # What the call's start needs that no call changes, done before the call: the interpreter's
    # own path resolved, /dev/null open for the call's stdin, _sbx_main's modules and the
    # compiler's state (_sbx_ready), and _sbx_module run once on a module nobody sees.
    if not failed:
        try:
            exe = os.path.realpath(sys.executable)
            stdin = os.open('/dev/null', os.O_RDONLY)
            _sbx_ready()
            _sbx_module('/')
        except BaseException as e:
            failed = 'prepare for the call: %s: %s' % (type(e).__name__, e)
    if failed:
        os.write(0, ('fail ' + failed.replace('\n', ' ')).encode('utf-8', 'replace')[:400] + b'\n')
        os._exit(1)
    os.write(0, b'ok\n')
    data = b''
    while True:
        chunk = os.read(0, 65536)
        if not chunk:
            break
        data += chunk
        if len(data) > (1 << 20):
            os._exit(125)
    os.dup2(stdin, 0)
    os.close(stdin)
    argv = [os.fsdecode(a) for a in data.split(b'\0')[:-1]]
    if not argv:
        os._exit(125)
    same = argv[0] in (sys.executable, exe) or os.path.realpath(argv[0]) == exe
    if not same or len(argv) < 2 or argv[1].startswith('-'):
        os.execv(argv[0], argv)
    path = argv[1]
    sys.argv = argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    _sbx_main(path)


_sbx_warm()
)PY";

constexpr const char* kNodeDriver = R"JS(
(() => {
  const fs = require('fs');
  const mods = process.argv.slice(1);
  const out = process.stdout.write, err = process.stderr.write;
  process.stdout.write = process.stderr.write = function () { return true; };
  let failed = null;
  // Resolved from / (the image's node_modules, NODE_PATH, node's global folders), not from the
  // working directory, which the call may write.
  const load = require('module').createRequire('/');
  for (const m of mods) {
    try { load(m); } catch (e) { failed = 'preload ' + m + ': ' + String(e && e.message || e); break; }
  }
  process.stdout.write = out;
  process.stderr.write = err;
  if (failed) {
    fs.writeSync(0, Buffer.concat([Buffer.from('fail ' + failed.replace(/\n/g, ' ')).subarray(0, 400), Buffer.from('\n')]));
    process.exit(1);
  }
  fs.writeSync(0, 'ok\n');
  const parts = [];
  let total = 0;
  const buf = Buffer.alloc(65536);
  for (;;) {
    const n = fs.readSync(0, buf, 0, buf.length, null);
    if (n <= 0) break;
    parts.push(Buffer.from(buf.subarray(0, n)));
    total += n;
    if (total > (1 << 20)) process.exit(125);
  }
  fs.closeSync(0);
  fs.openSync('/dev/null', 'r');
  const argv = Buffer.concat(parts).toString().split('\0').slice(0, -1);
  if (argv.length < 2 || argv[1].startsWith('-')) {
    process.stderr.write('sbx: the warm node serves only `node FILE ARGS`\n');
    process.exit(125);
  }
  process.argv = [process.argv[0]].concat(argv.slice(1));
  require('module').runMain();
})();
)JS";

const WarmInterpreter kInterpreters[] = {
    {"python3", "/usr/bin/python3", "python", true},
    {"node", "/usr/bin/node", "node", true},
    {"sh", "/bin/sh", "sh", false},
    {"bash", "/bin/bash", "bash", false},
};

bool ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool ident_char(char c) { return ident_start(c) || (c >= '0' && c <= '9'); }

// python3: a dotted module name ("numpy", "os.path").
bool python_module(std::string_view m) {
  bool start = true;
  for (char c : m) {
    if (c == '.') {
      if (start) return false;
      start = true;
    } else if (start ? !ident_start(c) : !ident_char(c)) {
      return false;
    } else {
      start = false;
    }
  }
  return !start;
}

// node: a package name ("lodash", "@scope/pkg", "lodash/fp", "node:fs"): no relative or absolute
// path (those would load the sandbox's files, which a call writes), no "..".
bool node_module(std::string_view m) {
  if (m.empty() || m.front() == '.' || m.front() == '/' || m.front() == '-' || m.find("..") != std::string_view::npos)
    return false;
  return std::all_of(m.begin(), m.end(),
                     [](char c) { return ident_char(c) || c == '-' || c == '.' || c == '/' || c == '@' || c == ':'; });
}

}  // namespace

const std::vector<WarmInterpreter>& warm_interpreters() {
  static const std::vector<WarmInterpreter> all(std::begin(kInterpreters), std::end(kInterpreters));
  return all;
}

const WarmInterpreter* find_warm_interpreter(std::string_view name) {
  for (auto& i : warm_interpreters())
    if (name == i.name) return &i;
  return nullptr;
}

std::vector<WarmProblem> check_warm(const WarmSpec& spec) {
  // In the order of the key each check names, so that the error points at what is wrong (the
  // interpreter's own check last: a bad mode or preload with no interpreter is named as such).
  std::vector<WarmProblem> out;
  if (spec.mode == "template" && spec.interpreter != "python3")
    out.push_back(
        {"mode",
         "\"template\" (calls forked copy-on-write from a prepared interpreter) needs "
         "\"interpreter\": \"python3\": use \"pool\" for " +
             (spec.interpreter.empty() ? std::string("a profile that prepares no interpreter") : spec.interpreter)});
  else if (spec.mode != "pool" && spec.mode != "template")
    out.push_back({"mode", "must be \"pool\" or \"template\" (got '" + spec.mode + "')"});
  if (spec.preload.size() > kMaxPreloads)
    out.push_back({"preload", "at most " + std::to_string(kMaxPreloads) + " modules"});
  // No interpreter: nothing prepared (the default every profile layers over, spec_to_json).
  if (spec.interpreter.empty()) {
    if (!spec.preload.empty()) out.push_back({"preload", "needs an interpreter to import it (warm.interpreter)"});
    return out;
  }
  std::string names;
  for (auto& i : warm_interpreters()) names += (names.empty() ? "" : ", ") + std::string(i.name);
  const WarmInterpreter* interp = find_warm_interpreter(spec.interpreter);
  if (!interp) {
    out.push_back({"interpreter", "must be one of " + names + " (got '" + spec.interpreter + "')"});
    return out;
  }
  if (!interp->has_driver && !spec.preload.empty())
    out.push_back({"preload", std::string(interp->name) + " has no modules to preload: leave preload empty"});
  const bool python = std::string_view(interp->name) == "python3";
  for (std::size_t i = 0; interp->has_driver && i < spec.preload.size() && i < kMaxPreloads; ++i) {
    const std::string& m = spec.preload[i];
    bool ok = m.size() <= kMaxPreloadNameBytes && (python ? python_module(m) : node_module(m));
    if (!ok)
      out.push_back(
          {"preload/" + std::to_string(i), "'" + m + "' is not a " +
                                               (python ? "Python module name (dotted identifiers: numpy, os.path)"
                                                       : "node package name (lodash, @scope/pkg, node:fs; no paths)")});
  }
  return out;
}

std::vector<std::string> warm_driver_argv(const WarmSpec& spec) {
  const WarmInterpreter* interp = find_warm_interpreter(spec.interpreter);
  if (!interp || !interp->has_driver) return {};
  bool python = std::string_view(interp->name) == "python3";
  std::vector<std::string> argv{interp->path, python ? "-c" : "-e",
                                python ? std::string(python_main_text()) + kPythonDriver : kNodeDriver};
  argv.insert(argv.end(), spec.preload.begin(), spec.preload.end());
  return argv;
}

std::vector<std::string> template_driver_argv(const WarmSpec& spec) {
  const WarmInterpreter* interp = find_warm_interpreter(spec.interpreter);
  if (!interp || std::string_view(interp->name) != "python3") return {};
  std::vector<std::string> argv{interp->path, "-c", std::string(template_driver_text())};
  argv.insert(argv.end(), spec.preload.begin(), spec.preload.end());
  return argv;
}

std::string template_digest(const std::string& profile_sha256, const std::string& image, const WarmSpec& warm,
                            const std::string& binary_sha256) {
  nlohmann::json d = {{"profile_sha256", profile_sha256},
                      {"image", image},
                      {"interpreter", warm.interpreter},
                      {"preload", warm.preload},
                      {"driver_sha256", std::string(template_driver_sha256())},
                      {"sbx", SBX_VERSION},
                      {"binary_sha256", binary_sha256}};
  return "sha256:" + sha256_hex(d.dump());
}

}  // namespace sbx
