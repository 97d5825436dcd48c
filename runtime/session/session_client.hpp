#pragma once
// A client of a running session's server (session_server.hpp): `sbx session exec` and `stop`,
// and `sbx mcp`'s session tools. Blocking: a command's or a worker's own process waits here,
// never a server loop.
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"
#include "runtime/base/paths.hpp"

namespace sbx {

// One call: `request` ({"op": "exec"|"code", ...}, session_agent.hpp) sent to session `id` of
// the store `dirs`; each 'O' or 'E' chunk of its output goes to `on_output` as it comes; a
// readable `interrupt_fd` (a signalfd; -1 for none) interrupts the call. Returns the server's
// answer: {"event": "done", ...} or {"event": "error", "message": ...}. An error when the
// session cannot be reached or ended before it answered.
Result<nlohmann::json> session_call(const Dirs& dirs, const std::string& id, const nlohmann::json& request,
                                    const std::function<void(char type, std::string_view bytes)>& on_output,
                                    int interrupt_fd = -1);

// Ends session `id` and waits until its records are written: {"event": "stopped", ...}. The
// record's ended_by is "stop", or "client_gone" when `client_gone` (sbx mcp's client went away).
Result<nlohmann::json> session_stop(const Dirs& dirs, const std::string& id, bool client_gone = false);

}  // namespace sbx
