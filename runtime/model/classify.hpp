#pragma once
// sbx classify: a workload described by six answers (code trust, credentials, network, lifetime
// and state, runtime surface, resource limits) -> the lowest isolation tier that serves it.
//
// The tiers (man/sbx.1, CLASSIFY): 0 a scoped API call (no code runs), 1 an in-process function,
// 2 a background job, 3 an isolated process or container (trusted code, limits of its own),
// 4 a hardened sandbox (untrusted or model-written code: ephemeral root, strict limits, egress
// allowlist, task-scoped secrets), 5 a dedicated VM (own kernel, privileged operations,
// long-lived isolation).
//
// The decision is one table (classify_rules()): each rule is a condition on the workload and the
// tier it forces at least. The answer is the highest tier among the rules that fire; "what
// would push it a tier up" is the rules of the next tier that did not fire. No rule is hidden in
// code elsewhere, and tests/unit/test_classify.cpp has a test per rule (and fails when a rule has
// none).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"

namespace sbx {

// The workload file is small by nature; anything bigger is a mistake or an attack.
inline constexpr std::size_t kMaxWorkloadBytes = 64u << 10;

struct Workload {
  std::string name;
  std::string code = "trusted";          // none | trusted | untrusted | model-written
  std::vector<std::string> credentials;  // environment variable names the task is handed
  std::string network = "none";          // none | allowlist | public | private
  std::vector<std::string> allow;        // hosts it must reach (sbx --allow-host rules)
  std::string lifetime = "request";      // request | task | long-lived
  std::string state = "none";            // none | scratch | persistent
  bool shell = false, browser = false, package_install = false, writable_fs = false, kernel_features = false,
       gpu = false;
  std::optional<double> cpus;
  std::optional<std::int64_t> memory_bytes, processes, output_bytes, timeout_ms;
  std::string spend;  // informational: sbx cannot meter money
  bool untrusted() const { return code == "untrusted" || code == "model-written"; }
  bool trusted_code() const { return code == "trusted"; }
};

struct ClassifyRule {
  const char* id;
  int tier;             // the tier this rule forces at least
  const char* when;     // the condition, as a person reads it ("what would push it up")
  const char* because;  // why that condition needs that tier
  bool (*fires)(const Workload&);
};

// The rules, in tier order. The one place the decision lives.
const std::vector<ClassifyRule>& classify_rules();

struct Classification {
  int tier = 0;
  std::vector<const ClassifyRule*> fired;            // every rule that fired, in table order
  std::vector<const ClassifyRule*> reasons() const;  // those that decide (of the answer's tier)
  std::vector<const ClassifyRule*> also() const;     // true but moot (a lower tier)
  std::vector<const ClassifyRule*> up;               // rules of the lowest tier above `tier`: what would push it up
  std::vector<std::string> notes;                    // things sbx does not enforce (spend), advice
  nlohmann::json profile;                            // tiers 3-4: a profile for `sbx run --profile FILE`; else null
};

// Strict parse of a workload description: unknown keys, wrong types and bad values are errors
// (stage "usage") naming `source` and the JSON pointer.
Result<Workload> workload_from_json(const nlohmann::json& j, const std::string& source);

Result<Classification> classify(const Workload& w);

// One line per tier: "hardened sandbox (untrusted or model-written code: ...)".
const char* tier_name(int tier);
// Tiers 0-2: why no sandbox is needed; 3-4: which sbx profile; 5: what to use instead of sbx.
std::string tier_advice(int tier);

// The --json document of a classification.
nlohmann::json classification_to_json(const Workload& w, const Classification& c);
// The text for people (names from the workload escaped for the terminal).
std::string classification_to_text(const Workload& w, const Classification& c);

}  // namespace sbx
