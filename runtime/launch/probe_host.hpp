#pragma once
// The host side of `sbx probe` (cli/probe_cmd.cpp): the targets the helper (probe/sbx_probe.c) is
// given, and the checks made on the host after `sbx run` has returned — nothing of the run may be
// left (mounts, cgroup, processes, files, secrets), its --output export and its record must be
// what they claim. Each check appends its ProbeResult (probe_report.hpp) to `results`.
#include <sys/types.h>

#include <ctime>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/paths.hpp"
#include "runtime/record/probe_report.hpp"

namespace sbx {

using SecretValues = std::vector<std::pair<std::string, std::string>>;  // NAME, value

// Every pid on the host now (the processes that were there before the probe run are not its).
std::set<pid_t> host_pids();
// The host's mount table as seen by sbx (the caller's mount namespace, where the supervisor
// runs): "POINT FSTYPE SOURCE" per mount, counted. Mount ids are left out: they are what changes
// between two reads of the same table.
std::map<std::string, int> mount_table();

// The allowlist's own targets (net.proxy_allowed, net.proxy_other_ports in probe/sbx_probe.c):
// for each rule (at most 8) one host:port it allows, and for each host one port it does not
// (the first of a few well-known ports the rules leave out; a host whose rules allow every port
// gets 22, which must then pass: the probe reports what the configuration does).
struct EgressTargets {
  std::vector<std::string> allowed, other;
};
EgressTargets egress_targets(const nlohmann::json& plan);

// --tenant NAME: LABEL PATH pairs for the helper, one per resource of every other tenant that a
// sandbox of NAME must not reach: its store directory and ledger, and (as root, where tenants'
// ids differ) the files in this run's bind sources owned by its host id slice. Host paths are
// mapped through the run's binds (`plan`, run's --dry-run) to where they would appear inside; a
// path no bind covers is probed as it is (absent, unless the root itself holds it).
std::vector<std::string> foreign_probes(const std::string& tenant, const Dirs& dirs, const nlohmann::json& plan);

// At most `max` items, ", "-separated and made printable, with the count when some are left out.
std::string joined(const std::vector<std::string>& v, std::size_t max = 5);

// The host paths under which a mount made by the run could appear in the caller's table: /tmp
// (where the sandbox's base tmpfs is mounted before the pivot), every bind source of `plan` (the
// run's --dry-run), and `extra` (its TMPDIR, sbx's state directory).
std::vector<std::string> run_mount_roots(const nlohmann::json& plan, const std::vector<std::string>& extra);
// Whether the mount_table() key "POINT FSTYPE SOURCE" is one the run could have made: its point
// under one of `roots`, or a source sbx names its own mounts by ("sbx-...").
bool mount_within_reach(const std::string& key, const std::vector<std::string>& roots);

// Cleanup, judged on the host after `sbx run` has returned: no mount added to the host's table
// where the run reaches (`reachable`, run_mount_roots; others' new mounts are named, not judged),
// the run's cgroup gone, no process of its pid namespace or with the probe's token in its host id
// range, its TMPDIR empty and nothing in /dev/shm naming it.
void cleanup_checks(std::vector<ProbeResult>& results, const ProbeOutput& po, const nlohmann::json& record,
                    const std::map<std::string, int>& mounts_before, const std::set<pid_t>& pids_before,
                    const std::string& run_tmp, const std::string& token, const std::vector<std::string>& reachable);
// A limit probe ("limit.memory") that held, where the record says the limit was enforced by a
// degraded mechanism (enforcement.limits_applied.KEY.degraded: per process, not per run),
// becomes "degraded", naming the mechanism: the helper's one process cannot show the rest.
void degraded_limits(std::vector<ProbeResult>& results, const nlohmann::json& record);
// --secret NAME: readable at /run/secrets/NAME during the run, with all its bytes (the helper's
// "I secret.K" count against the value sbx read).
void secret_file_check(std::vector<ProbeResult>& results, const ProbeOutput& po, const SecretValues& secrets);
// After the run no copy of a secret is left on the host: no mount of /run/secrets in the host's
// table, no process started since holding a value in its environment, no file changed since the
// run began (under `roots`, the last named in the evidence) holding a value. Values under 8 bytes
// are not searched for (they would match by chance).
void secret_after_check(std::vector<ProbeResult>& results, const SecretValues& secrets,
                        const std::set<pid_t>& pids_before, const std::map<std::string, int>& mounts_before,
                        const std::vector<std::string>& roots, std::time_t since);
// term.survivor: the helper's double-forked, signal-ignoring survivor (its command line holds
// `token`) is gone; one still there is killed. Replaces the helper's term.survivor_started.
void survivor_check(std::vector<ProbeResult>& results, const std::string& token);
// export.entries: what --output made of the helper's hostile /out in `exported` (a regular file
// copied; a symlink and a FIFO skipped; a hard link a copy or skipped). Replaces export.prepared.
void export_check(std::vector<ProbeResult>& results, const std::string& exported);
// The record as written (the --trace-file copy byte for byte, else `record` dumped) and the
// ledger's newest 8 MiB: what secret_record_check searches.
std::string record_and_ledger_text(const std::string& trace_file, const nlohmann::json& record,
                                   const std::string& ledger);
// secret.record: no value (of 4 bytes or more), raw or JSON-escaped, in `text`.
void secret_record_check(std::vector<ProbeResult>& results, const std::string& text, const SecretValues& secrets);
// record.names: the record names the image, the profile's digest, the probe's command (with its
// token), the seccomp policy and the identity; `status` is the run's.
void record_names_check(std::vector<ProbeResult>& results, const nlohmann::json& record, const std::string& token,
                        const std::string& status);

}  // namespace sbx
