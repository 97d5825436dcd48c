#include "runtime/sandbox.hpp"
namespace sbx {
RunReport run_sandbox(const RunRequest&) { return {}; }
}
