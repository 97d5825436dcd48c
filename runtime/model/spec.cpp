#include "runtime/model/spec.hpp"

#include <algorithm>
#include <cctype>
#include <functional>

#include <nlohmann/json.hpp>

#include "runtime/model/caps.hpp"
#include "runtime/egress/egress_policy.hpp"
#include "runtime/model/gpu_request.hpp"
#include "runtime/model/limits_table.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/base/doc_reader.hpp"
#include "runtime/base/suggest.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/base/units.hpp"

namespace sbx {
using nlohmann::json;

namespace {

// The bounds of a spec's quantities (kMaxDurationMs, kMaxSizeBytes, ...) are limits_table.hpp's.

// Every string of a spec ends up as a C string (argv, environment, mount paths, hostname): a NUL
// inside would silently cut it there, so that "/data\0/../etc" named "/data". Refused instead
// (DocSource::refuse_nul, on for every spec reader).
bool has_nul(const std::string& s) { return s.find('\0') != std::string::npos; }
constexpr const char* kNulMessage = "must not contain a NUL byte";

// A RunSpec member, declared once: its key, how it is read (strictly, from the reader of the
// object that holds it) and how it is written (spec_to_json, and so `--dry-run`, the trace's
// spec and the profile's list of keys). spec_from_json and spec_to_json both walk these tables,
// in this order, which is also the order in which a document's errors are found. A member with
// no writer is read but never written (a profile's description).
template <typename T>
struct Field {
  const char* key;
  std::function<Status(DocReader&, T&)> read;
  std::function<json(const T&)> write;
};
template <typename T>
using Fields = std::vector<Field<T>>;

template <typename T>
Status read_fields(DocReader& r, T& out, const Fields<T>& fields) {
  for (auto& f : fields) SBX_TRY(f.read(r, out));
  return {};
}

template <typename T>
json write_fields(const T& in, const Fields<T>& fields) {
  json out = json::object();
  for (auto& f : fields)
    if (f.write) out[f.key] = f.write(in);
  return out;
}

json opt(const std::optional<std::int64_t>& v) { return v ? json(*v) : json(nullptr); }

// Field makers: one line per member in the tables below.
template <typename T, typename M>
Field<T> plain(const char* key, M T::*m) {
  return {key,
          [key, m](DocReader& r, T& t) -> Status {
            if constexpr (std::is_same_v<M, std::string>) return r.get_string(key, t.*m);
            else if constexpr (std::is_same_v<M, bool>) return r.get_bool(key, t.*m);
            else return r.get_strings(key, t.*m);
          },
          [m](const T& t) { return json(t.*m); }};
}
template <typename T, typename M>
Field<T> integer(const char* key, M T::*m, std::int64_t lo, std::int64_t hi) {
  return {key, [=](DocReader& r, T& t) { return r.get_integer(key, t.*m, lo, hi); },
          [m](const T& t) { return json(t.*m); }};
}
using Parse = Result<std::int64_t> (*)(std::string_view);
// A count given as a string ("bad process count '12x'"): counts have no units.
template <const char* Noun>
Result<std::int64_t> no_unit(std::string_view t) {
  return make_error("spec", std::string("bad ") + Noun + " '" + std::string(t) + "'");
}
constexpr char kConnectionCount[] = "connection count";

// An optional quantity: null clears it, and it is written as null when unset.
template <typename T>
Field<T> quantity(const char* key, std::optional<std::int64_t> T::*m, Parse parse, bool positive, std::int64_t max) {
  return {key, [=](DocReader& r, T& t) { return r.get_quantity(key, t.*m, parse, positive, max); },
          [m](const T& t) { return opt(t.*m); }};
}
// A quantity that always has a value: null is `if_null` (an error, or "keep the default").
template <typename T>
Field<T> required_quantity(const char* key, std::int64_t T::*m, Parse parse, bool positive, std::int64_t max,
                           const char* if_null) {
  return {key,
          [=](DocReader& r, T& t) -> Status {
            std::optional<std::int64_t> v = t.*m;
            SBX_TRY(r.get_quantity(key, v, parse, positive, max));
            if (v) t.*m = *v;
            else if (if_null) return r.fail_key(key, if_null);
            return {};
          },
          [m](const T& t) { return json(t.*m); }};
}
// A member that is itself an object read by its own table, then checked as a whole by `check`
// (after its unknown members: a misspelt key is named before what it left at the default).
template <typename T, typename M>
Field<T> object(const char* key, M T::*m, const Fields<M>& fields, Status (*check)(DocReader&, M&) = nullptr) {
  return {key,
          [=, &fields](DocReader& parent, T& t) -> Status {
            if (!parent.has(key)) {
              parent.ignore(key);
              return {};
            }
            DocReader r = parent.member(key);
            SBX_TRY(r.check_object());
            SBX_TRY(read_fields(r, t.*m, fields));
            SBX_TRY(r.finish());
            return check ? check(r, t.*m) : Status{};
          },
          [m, &fields](const T& t) { return write_fields(t.*m, fields); }};
}

// An array member whose elements are a short string form (`parse`, shared with the flags) or an
// object read by `read_one`.
template <typename E>
Status read_list(DocReader& r, const char* key, std::vector<E>& out, Result<E> (*parse)(const std::string&),
                 Status (*read_one)(DocReader&, E&)) {
  r.ignore(key);
  if (!r.has(key)) return {};
  DocReader list = r.member(key);
  SBX_TRY(list.check_array());
  for (std::size_t i = 0; i < list.value().size(); ++i) {
    DocReader el = list.element(i);
    if (el.value().is_string()) {
      SBX_TRY(el.check_string(el.value(), el.pointer()));
      auto e = parse(el.value().get<std::string>());
      if (!e) return el.fail(e.error().message);
      out.push_back(*e);
      continue;
    }
    SBX_TRY(el.check_object());
    E e;
    SBX_TRY(read_one(el, e));
    SBX_TRY(el.finish());
    out.push_back(std::move(e));
  }
  return {};
}

Status read_bind(DocReader& r, BindMount& b) {
  SBX_TRY(r.get_string("src", b.src));
  SBX_TRY(r.get_string("dst", b.dst));
  SBX_TRY(r.get_bool("rw", b.rw));
  SBX_TRY(r.get_bool("idmap", b.idmap));
  SBX_TRY(r.finish());
  if (b.src.empty()) return r.fail_key("src", "is required");
  if (b.dst.empty()) b.dst = b.src;
  return {};
}

Status read_tmpfs(DocReader& r, TmpfsMount& t) {
  std::optional<std::int64_t> size = 64LL << 20;
  SBX_TRY(r.get_string("dst", t.dst));
  SBX_TRY(r.get_quantity("size_bytes", size, parse_size_bytes, true, kMaxSizeBytes));
  t.size_bytes = size.value_or(64LL << 20);
  if (r.has("noexec")) SBX_TRY(r.get_bool("noexec", t.noexec));
  return {};
}

Status read_input(DocReader& r, BindMount& b) {
  SBX_TRY(r.get_string("src", b.src));
  SBX_TRY(r.get_string("dst", b.dst));
  SBX_TRY(r.finish());
  if (b.src.empty()) return r.fail_key("src", "is required");
  if (b.dst.empty()) {
    // The short form's default (/in/<basename>); a source without a usable name ("/", "..")
    // has none, and that is this entry's error, not a crash.
    auto in = parse_input(b.src);
    if (!in) return r.fail_key("dst", "is required: " + in.error().message);
    b.dst = in->dst;
  }
  return {};
}

Status read_env(DocReader& r, RunSpec& s) {
  r.ignore("env");
  if (!r.has("env")) return {};
  DocReader e = r.member("env");
  SBX_TRY(e.check_object("must be an object of NAME: value"));
  for (auto& [k, v] : e.value().items()) {
    if (k.empty() || k.find('=') != std::string::npos)
      return e.fail_key(k, "variable names must be non-empty and contain no '='");
    if (!v.is_string()) return e.fail_key(k, "must be a string");
    if (has_nul(k) || has_nul(v.get_ref<const std::string&>())) return e.fail_key(k, kNulMessage);
    s.env[k] = v.get<std::string>();
  }
  return {};
}

json write_binds(const std::vector<BindMount>& list, bool with_rw) {
  json out = json::array();
  for (auto& b : list) {
    out.push_back({{"src", b.src}, {"dst", b.dst}});
    if (with_rw) out.back()["rw"] = b.rw;
    if (b.idmap) out.back()["idmap"] = true;  // only when set: records without it read as before
  }
  return out;
}

const Fields<NetworkSpec>& network_fields() {
  static const Fields<NetworkSpec> f = {
      plain("mode", &NetworkSpec::mode),
      plain("allow", &NetworkSpec::allow),
      required_quantity("max_connections", &NetworkSpec::max_connections, no_unit<kConnectionCount>, true, kMaxCount,
                        nullptr),
      quantity("max_bytes", &NetworkSpec::max_bytes, parse_size_bytes, true, kMaxSizeBytes),
      required_quantity("idle_timeout_ms", &NetworkSpec::idle_timeout_ms, parse_duration_ms, true, kMaxDurationMs,
                        "must be set"),
  };
  return f;
}

Status check_network(DocReader& r, NetworkSpec& n) {
  if (n.mode != "none" && n.mode != "proxy")
    return r.fail_key("mode", "unknown network mode '" + n.mode + "' (supported: none, proxy)");
  if (n.max_connections > 100000) return r.fail_key("max_connections", "must be at most 100000");
  std::vector<AllowRule> rules;
  for (std::size_t i = 0; i < n.allow.size(); ++i) {
    auto rule = parse_allow_rule(n.allow[i]);
    if (!rule) return r.fail_at(r.pointer_of("allow") + "/" + std::to_string(i), rule.error().message);
    rules.push_back(std::move(*rule));
  }
  if (auto why = unreachable_loopback_name(rules)) return r.fail_key("allow", *why);
  if (!n.allow.empty()) n.mode = "proxy";
  return {};
}

// cpus: a plain number, fractions allowed (no unit, no string form).
Field<Limits> cpus_field(const LimitKind& k, std::optional<double> Limits::*m) {
  const char* key = k.spec_key;
  const double max = static_cast<double>(k.max);
  return {key,
          [=](DocReader& r, Limits& l) -> Status {
            r.ignore(key);
            if (!r.has(key)) {
              if (r.contains(key)) (l.*m).reset();
              return {};
            }
            const json& v = r.at(key);
            if (!v.is_number() || v.get<double>() <= 0 || v.get<double>() > max)
              return r.fail_key(key, "must be a number of CPUs greater than 0, e.g. 0.5");
            l.*m = v.get<double>();
            return {};
          },
          [m](const Limits& l) { return l.*m ? json(*(l.*m)) : json(nullptr); }};
}

// One field per limit of limits_table.hpp, in the order the spec has always read them (cpus
// last: its error follows those of the sizes).
const Fields<Limits>& limits_fields() {
  static const Fields<Limits> f = [] {
    Fields<Limits> out;
    for (const LimitKind* k : limit_kinds_by(&LimitOrder::read))
      out.push_back(std::visit(
          [k](auto m) -> Field<Limits> {
            using M = decltype(m);
            if constexpr (std::is_same_v<M, std::optional<double> Limits::*>) return cpus_field(*k, m);
            else if constexpr (std::is_same_v<M, std::optional<std::int64_t> Limits::*>)
              return quantity(k->spec_key, m, k->parse, k->positive, k->max);
            else return required_quantity(k->spec_key, m, k->parse, k->positive, k->max, "must be set");
          },
          k->member));
    return out;
  }();
  return f;
}

// capabilities.keep: names in either spelling ("CAP_CHOWN", "chown"), kept canonical and in
// kernel order, so that two layers naming one capability differently compare equal.
const Fields<CapabilitiesSpec>& capabilities_fields() {
  static const Fields<CapabilitiesSpec> f = {
      {"keep",
       [](DocReader& r, CapabilitiesSpec& c) -> Status {
         std::vector<std::string> names;
         SBX_TRY(r.get_strings("keep", names));
         if (names.size() > 64) return r.fail_key("keep", "at most 64 names");
         CapMask mask = 0;
         for (std::size_t i = 0; i < names.size(); ++i) {
           auto canon = canonical_capability(names[i]);
           if (!canon) return r.fail_at(r.pointer_of("keep") + "/" + std::to_string(i), canon.error().message);
           mask |= capability_mask({*canon});
         }
         c.keep = capability_names(mask);
         return {};
       },
       [](const CapabilitiesSpec& c) { return json(c.keep); }},
  };
  return f;
}

// gpu: {"devices": "0,1" | "all" | "GPU-<uuid>" | "" | null, "max": N | "all"} (gpu.hpp).
const Fields<GpuSpec>& gpu_fields() {
  static const Fields<GpuSpec> f = {
      {"devices",
       [](DocReader& r, GpuSpec& g) -> Status {
         SBX_TRY(r.get_string("devices", g.devices));
         if (auto req = parse_gpu_request(g.devices); !req) return r.fail_key("devices", req.error().message);
         return {};
       },
       [](const GpuSpec& g) { return json(g.devices); }},
      {"max",
       [](DocReader& r, GpuSpec& g) -> Status {
         if (r.has("max") && r.at("max").is_string()) {
           if (r.at("max") != "all") return r.fail_key("max", "must be a count of GPUs (0-64) or \"all\"");
           g.max = kGpuMaxAll;
           return {};
         }
         return r.get_integer("max", g.max, 0, 64);
       },
       [](const GpuSpec& g) { return g.max == kGpuMaxAll ? json("all") : json(g.max); }},
  };
  return f;
}

// warm: {"interpreter", "preload", "mode"} (warm.hpp), checked as a whole once read.
const Fields<WarmSpec>& warm_fields() {
  static const Fields<WarmSpec> f = {
      plain("interpreter", &WarmSpec::interpreter),
      plain("preload", &WarmSpec::preload),
      plain("mode", &WarmSpec::mode),
  };
  return f;
}

Status check_warm_spec(DocReader& r, WarmSpec& w) {
  auto problems = check_warm(w);
  if (problems.empty()) return {};
  const std::string& key = problems.front().key;  // "preload/2": a member, then its index
  auto slash = key.find('/');
  std::string pointer =
      slash == std::string::npos ? r.pointer_of(key) : r.pointer_of(key.substr(0, slash)) + key.substr(slash);
  return r.fail_at(pointer, problems.front().message);
}

// The RunSpec: a profile's keys are exactly these (profile.cpp), plus `description`.
const Fields<RunSpec>& spec_fields() {
  static const Fields<RunSpec> f =
      {
          {"description",  // free text for humans, shown by `sbx profile ls`; not part of a run
           [](DocReader& r, RunSpec&) -> Status {
             r.ignore("description");
             if (r.has("description") && !r.value().at("description").is_string())
               return r.fail_key("description", "must be a string");
             return {};
           },
           nullptr},
          plain("argv", &RunSpec::argv),
          plain("profile", &RunSpec::profile),
          integer("tier", &RunSpec::tier, 3, 4),
          integer("uid", &RunSpec::uid, 0, 4294967294LL),
          integer("gid", &RunSpec::gid, 0, 4294967294LL),
          {"env", read_env, [](const RunSpec& s) { return json(s.env); }},
          plain("env_pass", &RunSpec::env_pass),
          {"binds", [](DocReader& r, RunSpec& s) { return read_list(r, "binds", s.binds, parse_bind, read_bind); },
           [](const RunSpec& s) { return write_binds(s.binds, true); }},
          {"tmpfs", [](DocReader& r, RunSpec& s) { return read_list(r, "tmpfs", s.tmpfs, parse_tmpfs, read_tmpfs); },
           [](const RunSpec& s) {
    json out = json::array();
    for (auto& t : s.tmpfs) {
      out.push_back({{"dst", t.dst}, {"size_bytes", t.size_bytes}});
      if (t.noexec) out.back()["noexec"] = true;
    }
    return out;
           }},
          {"inputs", [](DocReader& r, RunSpec& s) { return read_list(r, "inputs", s.inputs, parse_input, read_input); },
           [](const RunSpec& s) { return write_binds(s.inputs, false); }},
          plain("workdir", &RunSpec::workdir),
          plain("hostname", &RunSpec::hostname),
          plain("image", &RunSpec::image),
          object("network", &RunSpec::network, network_fields(), check_network),
          object("limits", &RunSpec::limits, limits_fields()),
          plain("require_limits", &RunSpec::require_limits),
          plain("require_record", &RunSpec::require_record),
          {"events",
           [](DocReader& r, RunSpec& s) -> Status {
             SBX_TRY(r.get_string("events", s.events));
             if (!s.events.empty())
               if (auto st = check_events_destination(s.events); !st) return r.fail_key("events", st.error().message);
             return {};
           },
           [](const RunSpec& s) { return s.events.empty() ? json(nullptr) : json(s.events); }},
          {"trace_db",
           [](DocReader& r, RunSpec& s) -> Status {
             SBX_TRY(r.get_string("trace_db", s.trace_db));
             // Checked in full (a libpq URL without a password) where a run starts: run_sandbox.
             if (s.trace_db.size() > 4096) return r.fail_key("trace_db", "is over 4096 bytes");
             return {};
           },
           [](const RunSpec& s) { return s.trace_db.empty() ? json(nullptr) : json(s.trace_db); }},
          {"seccomp",
           [](DocReader& r, RunSpec& s) -> Status {
             SBX_TRY(r.get_string("seccomp", s.seccomp));
             if (s.seccomp.empty()) return r.fail_key("seccomp", "must be 'default', 'unconfined' or a policy file");
             if (s.seccomp == kTemplateSeccomp)
               return r.fail_key("seccomp", "'" + s.seccomp +
                                                "' is sbx's own filter for warm templates, not a policy "
                                                "a run may ask for: use 'default', 'unconfined' or a policy file");
             return {};
           },
           [](const RunSpec& s) { return json(s.seccomp); }},
          object("capabilities", &RunSpec::capabilities, capabilities_fields()),
          object("gpu", &RunSpec::gpu, gpu_fields()),
          object("warm", &RunSpec::warm, warm_fields(), check_warm_spec),
  };
  return f;
}

}  // namespace

json spec_to_json(const RunSpec& s) { return write_fields(s, spec_fields()); }

const json& default_spec_json() {
  static const json defaults = spec_to_json(RunSpec{});
  return defaults;
}

Result<RunSpec> spec_from_json(const json& j, const std::string& source) {
  RunSpec s;
  DocSource src{source, "spec"};
  DocReader r(j, src);
  SBX_TRY(r.check_object());
  SBX_TRY(read_fields(r, s, spec_fields()));
  SBX_TRY(r.finish());
  return s;
}

const std::vector<LimitKey>& limit_keys() {
  static const std::vector<LimitKey> keys = [] {
    std::vector<LimitKey> out;
    for (auto& k : limit_kinds())
      if (k.in_manifests) out.push_back({k.name, k.spec_key});
    return out;
  }();
  return keys;
}

std::string public_limit_name(const std::string& spec_key) {
  for (auto& k : limit_keys())
    if (spec_key == k.spec_key) return k.name;
  return spec_key;
}

std::string bare_limit_number(std::string_view key, const json& v) {
  if (!v.is_number() || key_names_unit(key)) return "";
  for (auto& k : limit_kinds()) {
    if (key != k.name && key != k.spec_key) continue;
    if (k.unit == LimitUnit::duration_ms) return bare_number_refusal(v.get<double>(), QuantityUnit::duration);
    if (k.unit == LimitUnit::size_bytes) return bare_number_refusal(v.get<double>(), QuantityUnit::size);
  }
  return "";
}

Status canonical_limit_keys(json& limits, const std::string& source, std::map<std::string, std::string>* written) {
  if (!limits.is_object()) return {};
  for (auto& [key, v] : limits.items())
    if (std::string why = bare_limit_number(key, v); !why.empty())
      return make_error("spec", source + ": /limits/" + pointer_token(key) + ": " + why);
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

namespace {
// The last part of a bind's short form when it is a list of kBindOptions ("rw", "ro,idmap"):
// nullopt when it is not one (then it is a path); an error for a list with an unknown word.
std::optional<Result<BindMount>> read_bind_options(const std::string& text, const std::string& part, bool third) {
  BindMount b;
  bool any = false, unknown = false;
  std::string bad;
  for (std::string_view rest = part;;) {
    std::string_view opt = rest.substr(0, rest.find(','));
    auto known = std::find_if(std::begin(kBindOptions), std::end(kBindOptions),
                              [&](const BindOption& o) { return opt == o.name; });
    if (known == std::end(kBindOptions)) {
      unknown = true;
      if (bad.empty()) bad = std::string(opt);
    } else {
      any = true;
      if (opt == "rw") b.rw = true;
      if (opt == "ro") b.rw = false;
      if (opt == "idmap") b.idmap = true;
    }
    if (opt.size() == rest.size()) break;
    rest.remove_prefix(opt.size() + 1);
  }
  if (!unknown) return Result<BindMount>(b);
  // SRC:DST:WORD or a list with one known word: options, one of them misspelt.
  if (third || (any && part.find(',') != std::string::npos)) {
    std::string names;
    for (auto& o : kBindOptions) names += std::string(names.empty() ? "" : ", ") + o.name;
    return Result<BindMount>(make_error("usage", "bad bind '" + text + "': option '" + bad + "' not known" +
                                                     did_you_mean(bad, bind_option_names()) + " (use " + names + ")"));
  }
  return std::nullopt;
}
}  // namespace

std::vector<std::string> bind_option_names() {
  std::vector<std::string> out;
  for (auto& o : kBindOptions) out.push_back(o.name);
  return out;
}

Result<BindMount> parse_bind(const std::string& text) {
  // SRC[:DST][:OPT[,OPT]]; paths containing ':' are not supported in this short form.
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    auto pos = text.find(':', start);
    parts.push_back(text.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  BindMount b;
  if (parts.size() > 1) {
    auto opts = read_bind_options(text, parts.back(), parts.size() == 3);
    if (opts && !*opts) return opts->error();
    if (opts) {
      b = **opts;
      parts.pop_back();
    }
  }
  if (parts.empty() || parts.size() > 2 || parts[0].empty())
    return make_error("usage", "bad bind '" + text + "' (use SRC[:DST][:rw][,idmap])");
  b.src = parts[0];
  b.dst = parts.size() == 2 && !parts[1].empty() ? parts[1] : parts[0];
  return b;
}

namespace {
// docker's form after DST: size=SIZE and mount options, comma-separated. nosuid, nodev and rw are
// what every tmpfs of a run already is; anything else would be a promise sbx does not keep.
Status read_tmpfs_options(const std::string& text, std::string_view options, TmpfsMount& t) {
  for (std::string_view rest = options; !rest.empty();) {
    std::string_view opt = rest.substr(0, rest.find(','));
    rest.remove_prefix(std::min(rest.size(), opt.size() + 1));
    if (opt.starts_with("size=")) {
      auto size = parse_size_bytes(opt.substr(5));
      if (!size) return make_error("usage", "bad tmpfs '" + text + "': " + size.error().message);
      t.size_bytes = *size;
    } else if (opt == "noexec") {
      t.noexec = true;
    } else if (opt != "nosuid" && opt != "nodev" && opt != "rw") {
      return make_error("usage", "bad tmpfs '" + text + "': option '" + std::string(opt) +
                                     "' not supported (use DST[:SIZE] or DST:size=SIZE[,noexec])");
    }
  }
  return {};
}
}  // namespace

Result<TmpfsMount> parse_tmpfs(const std::string& text) {
  TmpfsMount t;
  auto pos = text.find(':');
  t.dst = text.substr(0, pos);
  t.size_bytes = 64LL << 20;
  if (t.dst.empty()) return make_error("usage", "bad tmpfs '" + text + "' (use DST[:SIZE] or DST:size=SIZE[,noexec])");
  if (pos != std::string::npos) {
    std::string rest = text.substr(pos + 1);
    if (rest.find('=') != std::string::npos || rest.find(',') != std::string::npos || rest == "noexec") {
      SBX_TRY(read_tmpfs_options(text, rest, t));
    } else {
      auto size = parse_size_bytes(rest);
      if (!size) return make_error("usage", "bad tmpfs '" + text + "': " + size.error().message);
      t.size_bytes = *size;
    }
    if (t.size_bytes <= 0) return make_error("usage", "bad tmpfs '" + text + "': size must be positive");
  }
  return t;
}

Status add_allow_hosts(NetworkSpec& network, const std::vector<std::string>& hosts) {
  for (auto& h : hosts) {
    if (auto r = parse_allow_rule(h); !r) return r.error();
    network.allow.push_back(h);
  }
  if (auto rules = parse_allow_rules(network.allow); rules)  // the profile's rules and these together
    if (auto why = unreachable_loopback_name(*rules)) return make_error("usage", *why);
  if (!network.allow.empty()) network.mode = "proxy";
  return {};
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
    if (!clean_abs_path(b.dst))
      return make_error("usage", "bind destination '" + b.dst + "' must be an absolute path without '..'");
    if (b.dst == "/") return make_error("usage", "bind destination '/' would replace the sandbox root");
  }
  for (auto& t : s.tmpfs)
    if (!clean_abs_path(t.dst) || t.dst == "/")
      return make_error("usage",
                        "tmpfs destination '" + t.dst + "' must be an absolute path other than '/' without '..'");
  if (!clean_abs_path(s.workdir))
    return make_error("usage", "workdir '" + s.workdir + "' must be an absolute path without '..'");
  if (s.hostname.empty() || s.hostname.size() > 64) return make_error("usage", "hostname must be 1 to 64 characters");
  // It is written into the sandbox's /etc/hosts and /etc/hostname: a newline or a space would add
  // entries there ("x\n10.0.0.9 api.example"). RFC 1123's letters, digits, '-' and '.'.
  if (s.hostname.front() == '-' || s.hostname.front() == '.' ||
      s.hostname.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.") !=
          std::string::npos)
    return make_error("usage", "hostname '" + printable(s.hostname) +
                                   "' may hold only letters, digits, '-' and '.' (and not begin with '-' or '.')");
  for (auto& [k, v] : s.env)
    if (k.empty() || k.find('=') != std::string::npos)
      return make_error("usage", "bad environment variable name '" + k + "'");
  for (auto& k : s.env_pass)
    if (k.empty() || k.find('=') != std::string::npos) return make_error("usage", "bad --env-pass name '" + k + "'");
  for (auto& i : s.inputs)
    if (!clean_abs_path(i.dst) || i.dst == "/")
      return make_error("usage",
                        "input destination '" + i.dst + "' must be an absolute path other than '/' without '..'");
  if (s.image.empty())
    return make_error("usage", "image must be 'host' or an image reference (NAME[:TAG] or sha256:<hex>)");
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
