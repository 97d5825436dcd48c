#include "runtime/model/spec.hpp"


#include <cctype>

#include <nlohmann/json.hpp>

#include "runtime/model/caps.hpp"
#include "runtime/egress/egress_policy.hpp"
#include "runtime/model/gpu_request.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/units.hpp"

namespace sbx {
using nlohmann::json;

namespace {

json opt(const std::optional<std::int64_t>& v) { return v ? json(*v) : json(nullptr); }

// Upper bounds of the quantities a spec holds (ObjectReader::get_quantity); the string forms are
// bounded alike by parse_duration_ms and parse_size_bytes.
constexpr std::int64_t kMaxDurationMs = 1'000'000'000'000'000;  // ~31,700 years
constexpr std::int64_t kMaxSizeBytes = 1LL << 62;
constexpr std::int64_t kMaxCount = 1LL << 31;
constexpr std::int64_t kMaxPids = 1LL << 22;  // the kernel's PID_MAX_LIMIT

// Every string of a spec ends up as a C string (argv, environment, mount paths, hostname): a NUL
// inside would silently cut it there, so that "/data\0/../etc" named "/data". Refused instead.
bool has_nul(const std::string& s) { return s.find('\0') != std::string::npos; }
constexpr const char* kNulMessage = "must not contain a NUL byte";

// An integer of JSON within [lo, hi]: floats, huge unsigned values and anything not a number fail.
std::optional<std::int64_t> integer_in(const json& v, std::int64_t lo, std::int64_t hi) {
  if (v.is_number_unsigned()) {  // nlohmann keeps every non-negative integer as unsigned
    std::uint64_t u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(hi) || (lo > 0 && u < static_cast<std::uint64_t>(lo))) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (!v.is_number_integer()) return std::nullopt;
  std::int64_t n = v.get<std::int64_t>();
  if (n < lo || n > hi) return std::nullopt;
  return n;
}

// Reads one JSON object strictly: each member is consumed by a typed getter, and `finish()` reports
// the first member nobody asked for. Every error names the source file and the key path.
class ObjectReader {
 public:
  ObjectReader(const json& j, std::string source, std::string path)
      : j_(j), source_(std::move(source)), path_(std::move(path)) {}

  Status check_object() const {
    if (!j_.is_object()) return fail(path_, "must be a JSON object");
    return {};
  }
  bool has(const char* key) { return j_.contains(key) && !j_.at(key).is_null(); }
  const json& at(const char* key) {
    seen_.push_back(key);
    return j_.at(key);
  }
  // Key paths are JSON pointers into the document ("/limits/timeout_ms").
  std::string key_path(const std::string& key) const { return path_ + "/" + pointer_token(key); }
  std::string index_path(const char* key, std::size_t i) const { return key_path(key) + "/" + std::to_string(i); }
  Error fail(const std::string& pointer, const std::string& what) const {
    return make_error("spec", source_ + ": " + (pointer.empty() ? "" : pointer + ": ") + what);
  }
  Error fail_key(const char* key, const std::string& what) const { return fail(key_path(key), what); }

  Status finish() const {
    for (auto& [k, v] : j_.items()) {
      bool known = false;
      for (auto& s : seen_) known = known || s == k;
      if (!known) return fail(key_path(k), "unknown key");
    }
    return {};
  }
  void ignore(const char* key) { seen_.push_back(key); }

  Status get_string(const char* key, std::string& out) {
    seen_.push_back(key);
    if (!has(key)) return {};
    if (!j_.at(key).is_string()) return fail_key(key, "must be a string");
    out = j_.at(key).get<std::string>();
    if (has_nul(out)) return fail_key(key, kNulMessage);
    return {};
  }
  Status get_bool(const char* key, bool& out) {
    seen_.push_back(key);
    if (!has(key)) return {};
    if (!j_.at(key).is_boolean()) return fail_key(key, "must be true or false");
    out = j_.at(key).get<bool>();
    return {};
  }
  Status get_u32(const char* key, std::uint32_t& out) {
    seen_.push_back(key);
    if (!has(key)) return {};
    auto n = integer_in(j_.at(key), 0, 4294967294LL);
    if (!n) return fail_key(key, "must be an integer between 0 and 4294967294");
    out = static_cast<std::uint32_t>(*n);
    return {};
  }
  Status get_int(const char* key, int& out, int lo, int hi) {
    seen_.push_back(key);
    if (!has(key)) return {};
    auto n = integer_in(j_.at(key), lo, hi);
    if (!n) return fail_key(key, "must be an integer between " + std::to_string(lo) + " and " + std::to_string(hi));
    out = static_cast<int>(*n);
    return {};
  }
  // A number in the key's base unit, or a string with a unit parsed by `parse`.
  // `max` bounds what the rest of sbx computes with (deadlines, mount options, cgroup files): a
  // value past it is an error here, not an overflow there.
  template <typename Parse>
  Status get_quantity(const char* key, std::optional<std::int64_t>& out, Parse parse, bool positive,
                      std::int64_t max) {
    seen_.push_back(key);
    if (!j_.contains(key)) return {};
    const json& v = j_.at(key);
    if (v.is_null()) {
      out.reset();
      return {};
    }
    std::int64_t n;
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(max)) {
      return fail_key(key, "must be at most " + std::to_string(max));
    } else if (v.is_number_integer()) {
      n = v.get<std::int64_t>();
    } else if (v.is_string()) {
      auto r = parse(v.get<std::string>());
      if (!r) return fail_key(key, r.error().message);
      n = *r;
    } else {
      return fail_key(key, "must be a number or a string with a unit");
    }
    if (n < 0 || (positive && n == 0)) return fail_key(key, positive ? "must be greater than zero" : "must not be negative");
    if (n > max) return fail_key(key, "must be at most " + std::to_string(max));
    out = n;
    return {};
  }
  Status get_strings(const char* key, std::vector<std::string>& out) {
    seen_.push_back(key);
    if (!has(key)) return {};
    const json& v = j_.at(key);
    if (!v.is_array()) return fail_key(key, "must be an array of strings");
    out.clear();
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) return fail(index_path(key, i), "must be a string");
      out.push_back(v[i].get<std::string>());
      if (has_nul(out.back())) return fail(index_path(key, i), kNulMessage);
    }
    return {};
  }

  const std::string& source() const { return source_; }

 private:
  const json& j_;
  std::string source_;
  std::string path_;
  std::vector<std::string> seen_;
};

Status read_limits(ObjectReader& parent, Limits& l) {
  if (!parent.has("limits")) {
    parent.ignore("limits");
    return {};
  }
  ObjectReader r(parent.at("limits"), parent.source(), parent.key_path("limits"));
  SBX_TRY(r.check_object());
  SBX_TRY(r.get_quantity("timeout_ms", l.timeout_ms, parse_duration_ms, true, kMaxDurationMs));
  SBX_TRY(r.get_quantity("output_limit_bytes", l.output_limit_bytes, parse_size_bytes, false, kMaxSizeBytes));
  SBX_TRY(r.get_quantity("memory_bytes", l.memory_bytes, parse_size_bytes, true, kMaxSizeBytes));
  SBX_TRY(r.get_quantity("pids", l.pids, [](const std::string& s) -> Result<std::int64_t> {
    return make_error("spec", "bad process count '" + s + "'");
  }, true, kMaxPids));
  SBX_TRY(r.get_quantity("cpu_time_ms", l.cpu_time_ms, parse_duration_ms, true, kMaxDurationMs));
  std::optional<std::int64_t> tmp = l.tmp_size_bytes;
  SBX_TRY(r.get_quantity("tmp_size_bytes", tmp, parse_size_bytes, true, kMaxSizeBytes));
  if (!tmp) return r.fail_key("tmp_size_bytes", "must be set");
  l.tmp_size_bytes = *tmp;
  std::optional<std::int64_t> out = l.out_size_bytes, max_bytes = l.output_max_bytes, max_files = l.output_max_files;
  SBX_TRY(r.get_quantity("out_size_bytes", out, parse_size_bytes, true, kMaxSizeBytes));
  SBX_TRY(r.get_quantity("output_max_bytes", max_bytes, parse_size_bytes, false, kMaxSizeBytes));
  SBX_TRY(r.get_quantity("output_max_files", max_files, [](const std::string& t) -> Result<std::int64_t> {
    return make_error("spec", "bad file count '" + t + "'");
  }, false, kMaxCount));
  if (!out || !max_bytes || !max_files) return r.fail_key("out_size_bytes", "out_size_bytes, output_max_bytes and output_max_files must be set");
  l.out_size_bytes = *out;
  l.output_max_bytes = *max_bytes;
  l.output_max_files = *max_files;
  r.ignore("cpus");
  if (r.has("cpus")) {
    const json& v = r.at("cpus");
    if (!v.is_number() || v.get<double>() <= 0 || v.get<double>() > 4096)
      return r.fail_key("cpus", "must be a number of CPUs greater than 0, e.g. 0.5");
    l.cpus = v.get<double>();
  } else if (parent.at("limits").contains("cpus")) {
    l.cpus.reset();
  }
  return r.finish();
}

// capabilities.keep: names in either spelling ("CAP_CHOWN", "chown"), kept canonical and in
// kernel order, so that two layers naming one capability differently compare equal.
Status read_capabilities(ObjectReader& parent, CapabilitiesSpec& c) {
  if (!parent.has("capabilities")) {
    parent.ignore("capabilities");
    return {};
  }
  ObjectReader r(parent.at("capabilities"), parent.source(), parent.key_path("capabilities"));
  SBX_TRY(r.check_object());
  std::vector<std::string> names;
  SBX_TRY(r.get_strings("keep", names));
  if (names.size() > 64) return r.fail_key("keep", "at most 64 names");
  CapMask mask = 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    auto canon = canonical_capability(names[i]);
    if (!canon) return r.fail(r.index_path("keep", i), canon.error().message);
    mask |= capability_mask({*canon});
  }
  c.keep = capability_names(mask);
  return r.finish();
}

// gpu: {"devices": "0,1" | "all" | "GPU-<uuid>" | "" | null, "max": N | "all"} (gpu.hpp).
Status read_gpu(ObjectReader& parent, GpuSpec& g) {
  if (!parent.has("gpu")) {
    parent.ignore("gpu");
    return {};
  }
  ObjectReader r(parent.at("gpu"), parent.source(), parent.key_path("gpu"));
  SBX_TRY(r.check_object());
  SBX_TRY(r.get_string("devices", g.devices));
  if (auto req = parse_gpu_request(g.devices); !req) return r.fail_key("devices", req.error().message);
  if (r.has("max") && r.at("max").is_string()) {
    if (r.at("max") != "all") return r.fail_key("max", "must be a count of GPUs (0-64) or \"all\"");
    g.max = kGpuMaxAll;
  } else {
    SBX_TRY(r.get_int("max", g.max, 0, 64));
  }
  return r.finish();
}

}  // namespace

json spec_to_json(const RunSpec& s) {
  json binds = json::array();
  for (auto& b : s.binds) binds.push_back({{"src", b.src}, {"dst", b.dst}, {"rw", b.rw}});
  json tmpfs = json::array();
  for (auto& t : s.tmpfs) tmpfs.push_back({{"dst", t.dst}, {"size_bytes", t.size_bytes}});
  json inputs = json::array();
  for (auto& i : s.inputs) inputs.push_back({{"src", i.src}, {"dst", i.dst}});
  return json{
      {"argv", s.argv},
      {"profile", s.profile},
      {"tier", s.tier},
      {"uid", s.uid},
      {"gid", s.gid},
      {"env", s.env},
      {"env_pass", s.env_pass},
      {"binds", binds},
      {"tmpfs", tmpfs},
      {"inputs", inputs},
      {"workdir", s.workdir},
      {"hostname", s.hostname},
      {"image", s.image},
      {"network",
       {{"mode", s.network.mode},
        {"allow", s.network.allow},
        {"max_connections", s.network.max_connections},
        {"max_bytes", opt(s.network.max_bytes)},
        {"idle_timeout_ms", s.network.idle_timeout_ms}}},
      {"limits",
       {{"timeout_ms", opt(s.limits.timeout_ms)},
        {"output_limit_bytes", opt(s.limits.output_limit_bytes)},
        {"memory_bytes", opt(s.limits.memory_bytes)},
        {"pids", opt(s.limits.pids)},
        {"cpus", s.limits.cpus ? json(*s.limits.cpus) : json(nullptr)},
        {"cpu_time_ms", opt(s.limits.cpu_time_ms)},
        {"tmp_size_bytes", s.limits.tmp_size_bytes},
        {"out_size_bytes", s.limits.out_size_bytes},
        {"output_max_bytes", s.limits.output_max_bytes},
        {"output_max_files", s.limits.output_max_files}}},
      {"require_limits", s.require_limits},
      {"require_record", s.require_record},
      {"events", s.events.empty() ? json(nullptr) : json(s.events)},
      {"seccomp", s.seccomp},
      {"capabilities", {{"keep", s.capabilities.keep}}},
      {"gpu", {{"devices", s.gpu.devices}, {"max", s.gpu.max == kGpuMaxAll ? json("all") : json(s.gpu.max)}}},
  };
}

Result<RunSpec> spec_from_json(const json& j, const std::string& source) {
  RunSpec s;
  ObjectReader r(j, source, "");
  SBX_TRY(r.check_object());
  r.ignore("description");  // free text for humans, shown by `sbx profile ls`
  if (r.has("description") && !j.at("description").is_string())
    return r.fail_key("description", "must be a string");
  SBX_TRY(r.get_strings("argv", s.argv));
  SBX_TRY(r.get_string("profile", s.profile));
  SBX_TRY(r.get_int("tier", s.tier, 3, 4));
  SBX_TRY(r.get_u32("uid", s.uid));
  SBX_TRY(r.get_u32("gid", s.gid));
  r.ignore("env");
  if (r.has("env")) {
    const json& e = j.at("env");
    if (!e.is_object()) return r.fail_key("env", "must be an object of NAME: value");
    for (auto& [k, v] : e.items()) {
      if (k.empty() || k.find('=') != std::string::npos)
        return r.fail(r.key_path("env") + "/" + pointer_token(k), "variable names must be non-empty and contain no '='");
      if (!v.is_string()) return r.fail(r.key_path("env") + "/" + pointer_token(k), "must be a string");
      if (has_nul(k) || has_nul(v.get_ref<const std::string&>()))
        return r.fail(r.key_path("env") + "/" + pointer_token(k), kNulMessage);
      s.env[k] = v.get<std::string>();
    }
  }
  SBX_TRY(r.get_strings("env_pass", s.env_pass));
  r.ignore("binds");
  if (r.has("binds")) {
    const json& a = j.at("binds");
    if (!a.is_array()) return r.fail_key("binds", "must be an array");
    for (std::size_t i = 0; i < a.size(); ++i) {
      std::string p = r.index_path("binds", i);
      if (a[i].is_string()) {
        if (has_nul(a[i].get_ref<const std::string&>())) return r.fail(p, kNulMessage);
        auto b = parse_bind(a[i].get<std::string>());
        if (!b) return r.fail(p, b.error().message);
        s.binds.push_back(*b);
        continue;
      }
      ObjectReader br(a[i], source, p);
      SBX_TRY(br.check_object());
      BindMount b;
      SBX_TRY(br.get_string("src", b.src));
      SBX_TRY(br.get_string("dst", b.dst));
      SBX_TRY(br.get_bool("rw", b.rw));
      SBX_TRY(br.finish());
      if (b.src.empty()) return br.fail_key("src", "is required");
      if (b.dst.empty()) b.dst = b.src;
      s.binds.push_back(b);
    }
  }
  r.ignore("tmpfs");
  if (r.has("tmpfs")) {
    const json& a = j.at("tmpfs");
    if (!a.is_array()) return r.fail_key("tmpfs", "must be an array");
    for (std::size_t i = 0; i < a.size(); ++i) {
      std::string p = r.index_path("tmpfs", i);
      if (a[i].is_string()) {
        if (has_nul(a[i].get_ref<const std::string&>())) return r.fail(p, kNulMessage);
        auto t = parse_tmpfs(a[i].get<std::string>());
        if (!t) return r.fail(p, t.error().message);
        s.tmpfs.push_back(*t);
        continue;
      }
      ObjectReader tr(a[i], source, p);
      SBX_TRY(tr.check_object());
      TmpfsMount t;
      std::optional<std::int64_t> size = 64LL << 20;
      SBX_TRY(tr.get_string("dst", t.dst));
      SBX_TRY(tr.get_quantity("size_bytes", size, parse_size_bytes, true, kMaxSizeBytes));
      SBX_TRY(tr.finish());
      t.size_bytes = size.value_or(64LL << 20);
      s.tmpfs.push_back(t);
    }
  }
  r.ignore("inputs");
  if (r.has("inputs")) {
    const json& a = j.at("inputs");
    if (!a.is_array()) return r.fail_key("inputs", "must be an array");
    for (std::size_t i = 0; i < a.size(); ++i) {
      std::string p = r.index_path("inputs", i);
      if (a[i].is_string()) {
        if (has_nul(a[i].get_ref<const std::string&>())) return r.fail(p, kNulMessage);
        auto in = parse_input(a[i].get<std::string>());
        if (!in) return r.fail(p, in.error().message);
        s.inputs.push_back(*in);
        continue;
      }
      ObjectReader ir(a[i], source, p);
      SBX_TRY(ir.check_object());
      BindMount b;
      SBX_TRY(ir.get_string("src", b.src));
      SBX_TRY(ir.get_string("dst", b.dst));
      SBX_TRY(ir.finish());
      if (b.src.empty()) return ir.fail_key("src", "is required");
      if (b.dst.empty()) {
        // The short form's default (/in/<basename>); a source without a usable name ("/", "..")
        // has none, and that is this entry's error, not a crash.
        auto in = parse_input(b.src);
        if (!in) return ir.fail_key("dst", "is required: " + in.error().message);
        b.dst = in->dst;
      }
      s.inputs.push_back(b);
    }
  }
  SBX_TRY(r.get_string("workdir", s.workdir));
  SBX_TRY(r.get_string("hostname", s.hostname));
  SBX_TRY(r.get_string("image", s.image));
  r.ignore("network");
  if (r.has("network")) {
    ObjectReader nr(j.at("network"), source, "/network");
    SBX_TRY(nr.check_object());
    SBX_TRY(nr.get_string("mode", s.network.mode));
    SBX_TRY(nr.get_strings("allow", s.network.allow));
    std::optional<std::int64_t> conns = s.network.max_connections;
    SBX_TRY(nr.get_quantity("max_connections", conns, [](const std::string& t) -> Result<std::int64_t> {
      return make_error("spec", "bad connection count '" + t + "'");
    }, true, kMaxCount));
    if (conns) s.network.max_connections = *conns;
    SBX_TRY(nr.get_quantity("max_bytes", s.network.max_bytes, parse_size_bytes, true, kMaxSizeBytes));
    std::optional<std::int64_t> idle = s.network.idle_timeout_ms;
    SBX_TRY(nr.get_quantity("idle_timeout_ms", idle, parse_duration_ms, true, kMaxDurationMs));
    if (!idle) return nr.fail_key("idle_timeout_ms", "must be set");
    s.network.idle_timeout_ms = *idle;
    SBX_TRY(nr.finish());
    if (s.network.mode != "none" && s.network.mode != "proxy")
      return nr.fail_key("mode", "unknown network mode '" + s.network.mode + "' (supported: none, proxy)");
    if (s.network.max_connections > 100000) return nr.fail_key("max_connections", "must be at most 100000");
    for (std::size_t i = 0; i < s.network.allow.size(); ++i)
      if (auto rule = parse_allow_rule(s.network.allow[i]); !rule)
        return nr.fail(nr.index_path("allow", i), rule.error().message);
    if (!s.network.allow.empty()) s.network.mode = "proxy";
  }
  SBX_TRY(read_limits(r, s.limits));
  SBX_TRY(r.get_bool("require_limits", s.require_limits));
  SBX_TRY(r.get_bool("require_record", s.require_record));
  SBX_TRY(r.get_string("events", s.events));
  if (!s.events.empty())
    if (auto st = check_events_destination(s.events); !st) return r.fail_key("events", st.error().message);
  SBX_TRY(r.get_string("seccomp", s.seccomp));
  if (s.seccomp.empty()) return r.fail_key("seccomp", "must be 'default', 'unconfined' or a policy file");
  SBX_TRY(read_capabilities(r, s.capabilities));
  SBX_TRY(read_gpu(r, s.gpu));
  SBX_TRY(r.finish());
  return s;
}

const std::vector<LimitKey>& limit_keys() {
  static const std::vector<LimitKey> keys = {
      {"timeout", "timeout_ms"},          {"memory", "memory_bytes"}, {"pids", "pids"},
      {"cpus", "cpus"},                   {"cpu_time", "cpu_time_ms"}, {"output_limit", "output_limit_bytes"},
      {"tmp_size", "tmp_size_bytes"}};
  return keys;
}

std::string public_limit_name(const std::string& spec_key) {
  for (auto& k : limit_keys())
    if (spec_key == k.spec_key) return k.name;
  return spec_key;
}

Status canonical_limit_keys(json& limits, const std::string& source, std::map<std::string, std::string>* written) {
  if (!limits.is_object()) return {};
  for (auto& k : limit_keys()) {
    if (std::string(k.name) == k.spec_key || !limits.contains(k.name)) continue;
    if (limits.contains(k.spec_key))
      return make_error("spec", source + ": /limits: '" + k.name + "' and '" + k.spec_key +
                                    "' are two spellings of one limit; keep one ('" + k.name + "')");
    limits[k.spec_key] = std::move(limits[k.name]);
    limits.erase(k.name);
    if (written) (*written)[k.spec_key] = k.name;
  }
  return {};
}

std::string as_written(std::string message, const std::map<std::string, std::string>& written) {
  for (auto& [spec_key, name] : written) {
    const std::string from = "/limits/" + spec_key, to = "/limits/" + name;
    for (auto at = message.find(from); at != std::string::npos; at = message.find(from, at + to.size())) {
      // Only the whole key: "/limits/timeout_ms" must not touch "/limits/timeout_msx".
      char next = at + from.size() < message.size() ? message[at + from.size()] : '\0';
      if (std::isalnum(static_cast<unsigned char>(next)) || next == '_') continue;
      message.replace(at, from.size(), to);
    }
  }
  return message;
}

void merge_patch(json& base, const json& patch) {
  if (!patch.is_object()) {
    base = patch;
    return;
  }
  if (!base.is_object()) base = json::object();
  for (auto& [k, v] : patch.items()) {
    if (v.is_null()) base.erase(k);
    else merge_patch(base[k], v);
  }
}

Result<BindMount> parse_bind(const std::string& text) {
  // SRC[:DST][:rw|:ro]; paths containing ':' are not supported in this short form.
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    auto pos = text.find(':', start);
    parts.push_back(text.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  BindMount b;
  if (parts.size() > 1 && (parts.back() == "rw" || parts.back() == "ro")) {
    b.rw = parts.back() == "rw";
    parts.pop_back();
  }
  if (parts.empty() || parts.size() > 2 || parts[0].empty())
    return make_error("usage", "bad bind '" + text + "' (use SRC[:DST][:rw])");
  b.src = parts[0];
  b.dst = parts.size() == 2 && !parts[1].empty() ? parts[1] : parts[0];
  return b;
}

Result<TmpfsMount> parse_tmpfs(const std::string& text) {
  TmpfsMount t;
  auto pos = text.find(':');
  t.dst = text.substr(0, pos);
  t.size_bytes = 64LL << 20;
  if (t.dst.empty()) return make_error("usage", "bad tmpfs '" + text + "' (use DST[:SIZE])");
  if (pos != std::string::npos) {
    auto size = parse_size_bytes(text.substr(pos + 1));
    if (!size) return make_error("usage", "bad tmpfs '" + text + "': " + size.error().message);
    if (*size <= 0) return make_error("usage", "bad tmpfs '" + text + "': size must be positive");
    t.size_bytes = *size;
  }
  return t;
}

Result<BindMount> parse_input(const std::string& text) {
  // PATH[:DST]; the destination defaults to /in/<last component of PATH>.
  auto pos = text.find(':');
  BindMount b;
  b.src = text.substr(0, pos);
  if (pos != std::string::npos) b.dst = text.substr(pos + 1);
  std::string trimmed = b.src;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  std::string base = trimmed.substr(trimmed.rfind('/') + 1);
  if (b.src.empty() || (pos != std::string::npos && b.dst.empty()))
    return make_error("usage", "bad input '" + text + "' (use PATH[:DST])");
  if (b.dst.empty()) {
    if (base.empty() || base == "." || base == "..")
      return make_error("usage", "input '" + text + "' needs a destination (PATH:DST): its name gives none");
    b.dst = "/in/" + base;
  }
  return b;
}

namespace {
// In-sandbox paths are absolute and free of ".." so that a spec cannot aim a mount outside the new root.
bool clean_abs_path(const std::string& p) {
  if (p.empty() || p[0] != '/') return false;
  std::size_t i = 0;
  while (i < p.size()) {
    auto j = p.find('/', i);
    std::string part = p.substr(i, j == std::string::npos ? std::string::npos : j - i);
    if (part == "..") return false;
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return true;
}
}  // namespace

Status validate_spec(const RunSpec& s) {
  if (s.argv.empty()) return make_error("usage", "no command given (usage: sbx run [OPTIONS] -- CMD [ARGS...])");
  for (auto& b : s.binds) {
    if (!clean_abs_path(b.dst)) return make_error("usage", "bind destination '" + b.dst + "' must be an absolute path without '..'");
    if (b.dst == "/") return make_error("usage", "bind destination '/' would replace the sandbox root");
  }
  for (auto& t : s.tmpfs)
    if (!clean_abs_path(t.dst) || t.dst == "/")
      return make_error("usage", "tmpfs destination '" + t.dst + "' must be an absolute path other than '/' without '..'");
  if (!clean_abs_path(s.workdir)) return make_error("usage", "workdir '" + s.workdir + "' must be an absolute path without '..'");
  if (s.hostname.empty() || s.hostname.size() > 64) return make_error("usage", "hostname must be 1 to 64 characters");
  for (auto& [k, v] : s.env)
    if (k.empty() || k.find('=') != std::string::npos) return make_error("usage", "bad environment variable name '" + k + "'");
  for (auto& k : s.env_pass)
    if (k.empty() || k.find('=') != std::string::npos) return make_error("usage", "bad --env-pass name '" + k + "'");
  for (auto& i : s.inputs)
    if (!clean_abs_path(i.dst) || i.dst == "/")
      return make_error("usage", "input destination '" + i.dst + "' must be an absolute path other than '/' without '..'");
  if (s.image.empty()) return make_error("usage", "image must be 'host' or an image reference (NAME[:TAG] or sha256:<hex>)");
  return {};
}

Result<int> parse_events_fd(const std::string& where) {
  std::string n = where.substr(3);
  if (n.empty() || n.size() > 9 || n.find_first_not_of("0123456789") != std::string::npos)
    return make_error("usage", "--events " + where + ": 'fd:' wants a file descriptor number (fd:3)");
  return std::stoi(n);
}

Status check_events_destination(const std::string& where) {
  if (where.empty()) return make_error("usage", "--events: an empty destination (a file, a FIFO or fd:N)");
  if (where.rfind("fd:", 0) == 0) {
    auto fd = parse_events_fd(where);
    if (!fd) return fd.error();
  }
  return {};
}

}  // namespace sbx
