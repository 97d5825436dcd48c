// The network facility: every run has its own network namespace with loopback only (init's
// bring_up_loopback, net.hpp); in proxy mode the allow rules (egress_policy.hpp) are parsed here,
// init binds the proxy's listening socket inside the namespace and hands it over
// (open_proxy_listener, then InitEnd::send_proxy_listener; child.cpp), and the supervisor serves it (Run::prepare_proxy makes
// the socketpair and the EgressProxy from these rules; proxy.hpp says why this way).
#include "runtime/launch/facility.hpp"

namespace sbx {
namespace {
using nlohmann::json;

json network_record_json(const NetworkSpec& n) {
  json j = trace_object({{"enforcement/network/mode", n.mode},
                         {"enforcement/network/allow", n.allow},
                         {"enforcement/network/interfaces", json::array({"lo"})}});
  if (n.mode == "proxy")
    put(j, "enforcement/network/proxy",
        trace_object({{"enforcement/network/proxy/listen", "127.0.0.1:" + std::to_string(kProxyPort)},
                      {"enforcement/network/proxy/where",
                       "sbx supervisor, outside the sandbox; socket bound in the sandbox's network namespace"},
                      {"enforcement/network/proxy/protocols", json::array({"CONNECT", "http absolute-URI"})},
                      {"enforcement/network/proxy/resolver",
                       "c-ares on the supervisor's poll loop (/etc/hosts, then resolv.conf's servers), for "
                       "allowed names only; 16 lookups in flight, 504 after min(5 s, idle_timeout_ms)"},
                      {"enforcement/network/proxy/resolved_addresses",
                       "checked at connect time: loopback, link-local, private, CGNAT, unique-local, "
                       "unspecified, multicast and broadcast addresses only through an address/CIDR rule; "
                       "IPv4-mapped IPv6 matched as IPv4"},
                      {"enforcement/network/proxy/requests",
                       "strict HTTP/1.x parsing (CRLF only, no control bytes, no CL+TE); plain HTTP: one "
                       "Content-Length-framed request per connection"},
                      {"enforcement/network/proxy/max_connections", n.max_connections},
                      {"enforcement/network/proxy/max_bytes", n.max_bytes ? json(*n.max_bytes) : json(nullptr)},
                      {"enforcement/network/proxy/idle_timeout_ms", n.idle_timeout_ms}}));
  return j;
}

class Network final : public Facility {
 public:
  const char* name() const override { return "network"; }
  Status prepare(RunContext& ctx) const override {
    const NetworkSpec& n = ctx.spec.network;
    // A dry run checks the rules in every mode (they would be refused once the mode is proxy).
    if (n.mode != "proxy" && !ctx.dry_run) return {};
    auto rules = parse_allow_rules(n.allow);
    if (!rules) return rules.error();
    if (n.mode == "proxy") ctx.allow_rules = std::move(*rules);
    return {};
  }
  void record(const RunContext& ctx, const SuperviseResult*, json& out) const override {
    put(out, "enforcement/network", network_record_json(ctx.spec.network));
  }
  void plan(const RunContext& ctx, json& out) const override {
    const NetworkSpec& n = ctx.spec.network;
    json j = {{"mode", n.mode}, {"allow", n.allow}};
    if (n.mode == "proxy") {
      j["proxy"] = "127.0.0.1:" + std::to_string(kProxyPort) + " inside the sandbox, served by the supervisor outside";
      j["loopback_through_proxy"] = loopback_reached(*ctx.allow_rules);
    }
    out["network"] = std::move(j);
  }
};

}  // namespace

const Facility& network_facility() {
  static const Network f;
  return f;
}

}  // namespace sbx
