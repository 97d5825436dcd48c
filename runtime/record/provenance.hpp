#pragma once
// Provenance export (`sbx trace export RUN --format in-toto`): a run's trace record as an in-toto
// Statement v1 (https://github.com/in-toto/attestation, spec/v1/statement.md) whose predicate is
// SLSA Provenance v1 (https://slsa.dev/provenance/v1):
//
//   subject               the run's outputs (/out/result.json of a pack or exec run, exported
//                         artifacts), name + digest.sha256 from the record; a run without
//                         outputs attests its stdout stream instead (what `sbx run` produced)
//   buildDefinition
//     buildType           kBuildType: sbx's own, documented in sbx(1), TRACE EXPORT
//     externalParameters  what the caller chose: argv (sbx's own), command, profile {name,
//                         sha256}, pack {name, version, digest}, image, network, inputs' paths
//     internalParameters  what sbx decided: limits applied, seccomp policy, namespaces, cwd,
//                         kernel, the record's schema
//     resolvedDependencies  ResourceDescriptors: the image (digest), the pack (digest), each
//                         input (digest.sha256 of a file, digest.sbxManifestSha256 of a
//                         directory: the sha256 of its sbx-manifest v1 text), with uri file://
//                         for a host path
//   runDetails
//     builder.id          pkg:generic/sbx@VERSION?checksum=sha256:<binary sha256> (a Package
//                         URL: the exact build that ran the sandbox and wrote the record)
//     metadata            invocationId = run id, startedOn / finishedOn (RFC 3339, UTC)
//     byproducts          the stdout/stderr streams that are not subjects
//     sbx_result          extension: the run's status, exit code, signal
//
// Everything comes from the stored record, which may be old or edited: a digest that is not 64
// lower-case hex digits is left out (with the reason in `skipped`), never passed on.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/error.hpp"

namespace sbx {

inline constexpr const char* kInTotoStatementType = "https://in-toto.io/Statement/v1";
inline constexpr const char* kSlsaProvenanceType = "https://slsa.dev/provenance/v1";
// Not resolvable on purpose (RFC 2606 reserves .invalid): sbx has no web home; sbx(1) documents it.
inline constexpr const char* kBuildType = "https://sbx.invalid/provenance/run/v1";

struct ProvenanceDoc {
  nlohmann::json statement;
  std::vector<std::string> skipped;  // what of the record could not be attested, and why
};

// Fails (stage "trace export") when the record has nothing to attest: no run id, or not one
// output or stream with a valid sha256.
Result<ProvenanceDoc> intoto_statement(const nlohmann::json& record);

// "sha256:<hex>" or "<hex>" (64 lower-case hex digits) as a DigestSet {"sha256": hex}; null if not.
nlohmann::json sha256_digest_set(const nlohmann::json& v);
// RFC 3339 in UTC with a "Z" (in-toto's Timestamp): YYYY-MM-DDThh:mm:ss[.frac]Z.
bool is_rfc3339_utc(const std::string& s);
// file:// URI of an absolute path, percent-encoding everything but unreserved characters and '/'.
std::string file_uri(const std::string& path);

}  // namespace sbx
