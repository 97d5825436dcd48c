#!/bin/sh
# The per-run cost of the automatic systemd user scope (cli/systemd_scope.hpp): rootless, from a
# cgroup that is not delegated (or holds other processes), `sbx run` re-executes itself under
# `systemd-run --user --scope -p Delegate=yes`. Three ways to run the same command, N times each,
# in one process so that the ratios compare like with like:
#   auto:       sbx run --memory 64M -- true, from a fresh non-delegated scope with another process,
#               with SBX_SCOPE_REUSE=0 (the re-exec under systemd-run happens on every run)
#   reuse:      the same with the default: each run joins the long-lived sbx-runs-UID.scope over
#               D-Bus (runtime/linux/scope_reuse.hpp); the scope is started before the timed runs
#   in-scope:   the same from a scope already delegated (no re-exec; what a long-lived scope would
#               cost per run)
#   no-scope:   --no-systemd-scope from the same place as auto (no cgroup: rlimits)
# usage: bench/systemd_scope.sh SBX [N]     (as the user whose systemd --user answers on
#        $XDG_RUNTIME_DIR/systemd/private; prints medians and ratios)
set -u
SBX=${1:?usage: bench/systemd_scope.sh SBX [N]}
N=${2:-20}
command -v systemd-run >/dev/null || { echo "skipped: no systemd-run"; exit 77; }
[ -S "${XDG_RUNTIME_DIR:-/nonexistent}/systemd/private" ] || { echo "skipped: no systemd user manager at \$XDG_RUNTIME_DIR"; exit 77; }
# Each way runs inside a scope made once for it (its setup is not timed); a sleep beside the
# timing loop makes the auto and no-scope scopes "busy", as a terminal's scope is.
exec python3 - "$SBX" "$N" <<'PY'
import os, statistics, subprocess, sys
sbx, n = sys.argv[1], int(sys.argv[2])
run = [sbx, "run", "--memory", "64M", "--timeout", "30s", "--", "true"]
# The loop that runs in each scope: prints each run's wall time in ms. With LEAF set, the scope is
# delegated: the loop moves itself into a leaf, enables memory/pids/cpu for the scope's children
# and starts each sbx alone in a fresh child cgroup (what a long-lived scope would give a run).
LOOP = r"""
import os, subprocess, sys, time
args, n, leaf = sys.argv[1].split("\x1f"), int(sys.argv[2]), sys.argv[3] == "1"
mine = "/sys/fs/cgroup" + open("/proc/self/cgroup").read().strip().split("::", 1)[1]
if leaf:
    os.mkdir(mine + "/drv"); open(mine + "/drv/cgroup.procs", "w").write(str(os.getpid()))
    open(mine + "/cgroup.subtree_control", "w").write("+memory +pids +cpu")
else:
    busy = subprocess.Popen(["sleep", "600"])  # the terminal's other process
for i in range(n):
    pre = None
    if leaf:
        d = f"{mine}/c{i}"; os.mkdir(d)
        pre = lambda d=d: open(d + "/cgroup.procs", "w").write(str(os.getpid()))
    t = time.monotonic(); r = subprocess.run(args, stderr=subprocess.DEVNULL, preexec_fn=pre)
    print((time.monotonic() - t) * 1000 if r.returncode == 0 else -1000 - r.returncode, flush=True)
if not leaf: busy.kill()
"""
def timed(props, args, leaf):
    cmd = ["systemd-run", "--user", "--scope", "--quiet", "--collect"] + props + \
          ["--", "python3", "-c", LOOP, "\x1f".join(args), str(n), "1" if leaf else "0"]
    v = [float(x) for x in subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True).stdout.split()]
    if any(x < 0 for x in v): sys.exit(f"a run failed: {v}")
    return statistics.median(v)
os.environ["SBX_SCOPE_REUSE"] = "0"
auto = timed([], run, False)
os.environ.pop("SBX_SCOPE_REUSE")
subprocess.run(run, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # starts the long-lived scope (untimed)
reuse = timed([], run, False)
in_scope = timed(["-p", "Delegate=yes"], run, True)
no_scope = timed([], [sbx, "run", "--no-systemd-scope"] + run[2:], False)
print(f"sbx run --memory 64M -- true, median of {n} runs each (ms): auto {auto:.1f}, reuse {reuse:.1f}, in-scope {in_scope:.1f}, no-scope {no_scope:.1f}")
print(f"ratio auto/in-scope {auto / in_scope:.2f}, auto/no-scope {auto / no_scope:.2f}; the re-exec costs {auto - in_scope:.1f} ms per run")
print(f"ratio auto/reuse {auto / reuse:.2f}, reuse/in-scope {reuse / in_scope:.2f}; joining the long-lived scope costs {reuse - in_scope:.1f} ms per run")
PY
