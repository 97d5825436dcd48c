#include "runtime/model/foreign_flags.hpp"

namespace sbx {

namespace {
struct ForeignOption {
  std::string_view names[2];  // the second one "" where there is one name
  std::string_view hint;      // the whole line, tool's name first
};

// One row per habit. Options sbx has itself (--env, --workdir, --memory, --cpus, --tmpfs,
// --cap-add, -i, -t) never reach this table.
constexpr ForeignOption kForeign[] = {
    {{"-e"}, "docker's -e is --env NAME=VALUE here"},
    {{"--env-file"},
     "docker's --env-file has no sbx form: give each variable with --env NAME=VALUE or --env-pass NAME"},
    {{"-v", "--volume"},
     "docker's -v SRC:DST is --bind SRC:DST:rw here (binds are read-only unless :rw; sbx's -v is --verbose)"},
    {{"--mount"}, "docker's --mount is --bind SRC:DST[:rw] here (read-only unless :rw)"},
    {{"-w"}, "docker's -w is --workdir DIR here"},
    {{"--chdir"}, "bwrap's --chdir is --workdir DIR here"},
    {{"--rm"}, "docker's --rm is what every sbx run does (its sandbox is gone when it ends): drop it"},
    {{"--network", "--net"},
     "docker's --network is not needed: a run has no network at all unless --allow-host HOST[:PORT] lets it "
     "reach a host"},
    {{"--unshare-net", "--unshare-all"},
     "bwrap's --unshare-net is what every sbx run does (no network unless --allow-host HOST[:PORT]): drop it"},
    {{"--share-net"},
     "bwrap's --share-net has no sbx form: a run reaches only the hosts --allow-host HOST[:PORT] names"},
    {{"-u", "--user"}, "docker's --user UID[:GID] is --uid UID --gid GID here"},
    {{"--read-only"},
     "docker's --read-only is what every sbx run does (a read-only root; /tmp and /out are tmpfs): drop it"},
    {{"--ro-bind"}, "bwrap's --ro-bind SRC DST is --bind SRC:DST here (read-only unless :rw)"},
    {{"--setenv"}, "bwrap's --setenv VAR VALUE is --env VAR=VALUE here"},
    {{"--die-with-parent"}, "bwrap's --die-with-parent is what every sbx run does: drop it"},
    {{"--proc"}, "bwrap's --proc is what every sbx run does (a /proc of its own): drop it"},
    {{"-m"}, "docker's -m is --memory SIZE here (e.g. 512M)"},
    {{"--pids-limit"}, "docker's --pids-limit is --pids N here"},
    {{"--gpus"}, "docker's --gpus is --gpu all|N[,N]|UUID here"},
    {{"--security-opt"}, "docker's --security-opt seccomp=FILE is --seccomp FILE here"},
    {{"--entrypoint"},
     "docker's --entrypoint has no sbx form: put the program first after -- (sbx run -- PROGRAM ARGS...)"},
    {{"--privileged"}, "docker's --privileged has no sbx form: keep one capability with --cap-add NAME"},
    {{"--cap-drop"},
     "docker's --cap-drop is not needed: a run keeps no capability unless --cap-add NAME or its profile keeps it"},
    {{"-d", "--detach"},
     "docker's -d has no sbx form: a run lasts as long as sbx does (run sbx itself in the background)"},
    {{"--init"}, "docker's --init is what every sbx run does (sbx's own init reaps every process): drop it"},
};
}  // namespace

std::string foreign_option_hint(std::string_view option) {
  std::string_view name = option.substr(0, option.find('='));
  for (const ForeignOption& f : kForeign)
    for (std::string_view n : f.names)
      if (!n.empty() && n == name) return std::string(f.hint);
  return {};
}

bool looks_like_volume(std::string_view word) {
  auto colon = word.find(':');
  return colon != std::string_view::npos && colon > 0 && word.substr(colon + 1).starts_with('/');
}

}  // namespace sbx
