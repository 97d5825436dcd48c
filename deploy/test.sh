#!/bin/sh
# Tests deploy/ without a registry or a cluster (run as root):
#  1. the manifests parse and carry the settings deploy/README.md explains (k8s/*.yaml with
#     python3-yaml; seccomp-sbx.json as JSON; the Nomad job's HCL by a structural check — no HCL
#     parser or Nomad is packaged here);
#  2. a root is assembled from deploy/Containerfile's steps (its COPY lines as written; its apt
#     packages cannot be installed without a Debian mirror, so busybox-static stands in for the
#     userland and the workload is a shell command) and sbx runs in it, container-like: new mount,
#     pid, uts, ipc and cgroup namespaces, cgroup2 mounted afresh at /sys/fs/cgroup, through the
#     image's entrypoint with SBX_CGROUP_INIT=1;
#  3. where podman is installed: sbx in a real user-namespaced podman container (--uidmap of 65536
#     ids, as a pod with hostUsers: false), from the same root (--rootfs, no registry): with podman's
#     defaults every run and `sbx doctor` fail naming the fix (masked /proc); with
#     --security-opt unmask=ALL and seccomp-sbx.json runs work, mapped to the container's ids 1-65535;
#  4. the same in a rootless podman container, run by a test user with /etc/subuid ids (newuidmap);
#  5. (before 4) k8s/mcp-server.yaml's Deployment under root podman, with the manifest's settings
#     translated by deploy/podman-deploy.py, driven from another network namespace by the official
#     MCP TypeScript SDK's Streamable HTTP client (from BUILD_DIR/mcp-node: make mcp-test-deps).
# Limits being enforced in such a container needs cgroup v2 controllers, which this project's
# hosts do not have: that is the qemu guest's test "cgroup namespace with processes at its root"
# (tests/vm/guest-tests.sh).
# usage: deploy/test.sh SBX_BINARY [BUILD_DIR]   exit 0 pass, 1 fail, 77 skipped (reason on the last line)
set -u
SBX=$(readlink -f "${1:?usage: deploy/test.sh SBX_BINARY}")
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "skipped: needs root (unshare of mount/pid/cgroup namespaces, pivot_root)"; exit 77; }
for t in python3 unshare pivot_root; do command -v $t >/dev/null || { echo "skipped: no $t"; exit 77; }; done
BUSYBOX=$(command -v busybox) || { echo "skipped: no busybox (apt-get install busybox-static)"; exit 77; }
file -L "$BUSYBOX" 2>/dev/null | grep -q 'statically linked' || ldd "$BUSYBOX" 2>&1 | grep -q 'not a dynamic' ||
  { echo "skipped: $BUSYBOX is not static (apt-get install busybox-static)"; exit 77; }

echo "== manifests"
python3 - "$HERE" <<'PY' || exit 1
import json, re, sys, yaml
d = sys.argv[1]
def need(cond, what):
    if not cond:
        print("FAIL:", what); sys.exit(1)
    print("ok:", what)
for name, kind in (("k8s/job.yaml", "Job"), ("k8s/worker-daemonset.yaml", "DaemonSet"), ("k8s/mcp-server.yaml", "Deployment")):
    docs = [x for x in yaml.safe_load_all(open(f"{d}/{name}")) if x is not None]
    need(len([x for x in docs if x["kind"] == kind]) == 1, f"{name}: one {kind}")
    m = next(x for x in docs if x["kind"] == kind)
    need(m["apiVersion"] in ("batch/v1", "apps/v1") and m["metadata"]["name"], f"{name}: apiVersion and name")
    pod = m["spec"]["template"]["spec"]
    if kind == "Deployment":  # sbx mcp --listen: probes, the Service, the token file from the Secret
        c0 = pod["containers"][0]
        args = c0["args"]
        need(args[:2] == ["sbx", "mcp"] and "--listen" in args and "--tokens" in args, f"{name}: sbx mcp --listen --tokens")
        tokens = args[args.index("--tokens") + 1]
        mounts = {v["mountPath"]: v["name"] for v in c0["volumeMounts"]}
        vol = {v["name"]: v for v in pod["volumes"]}[mounts[tokens.rsplit("/", 1)[0]]]
        secret = next(x for x in docs if x["kind"] == "Secret" and x["metadata"]["name"] == vol["secret"]["secretName"])
        need("tokens" in json.loads(secret["stringData"][tokens.rsplit("/", 1)[1]]), f"{name}: --tokens is the Secret's tokens.json")
        need(c0["livenessProbe"]["httpGet"]["path"] == "/healthz" and c0["readinessProbe"]["httpGet"]["path"] == "/readyz",
             f"{name}: liveness /healthz, readiness /readyz")
        port = args[args.index("--listen") + 1].rsplit(":", 1)[1]
        svc = next(x for x in docs if x["kind"] == "Service")
        need(svc["spec"]["selector"].items() <= m["spec"]["template"]["metadata"]["labels"].items()
             and {p["name"]: p["containerPort"] for p in c0["ports"]}[svc["spec"]["ports"][0]["targetPort"]] == int(port),
             f"{name}: the Service selects the pods and targets --listen's port")
        need(c0["resources"]["requests"] and c0["resources"]["limits"], f"{name}: resource requests and limits")
    if kind in ("DaemonSet", "Deployment"):
        need(m["spec"]["selector"]["matchLabels"].items() <= m["spec"]["template"]["metadata"]["labels"].items(),
             f"{name}: selector matches the template's labels")
    else:
        need(pod["restartPolicy"] in ("Never", "OnFailure"), f"{name}: a Job's restartPolicy")
    need(pod.get("hostUsers") is False, f"{name}: user namespaces (hostUsers: false)")
    c = pod["containers"][0]
    sc = c["securityContext"]
    need(sc["seccompProfile"] == {"type": "Localhost", "localhostProfile": "profiles/sbx.json"}, f"{name}: seccomp profile")
    need(sc["appArmorProfile"]["type"] == "Unconfined" and sc["procMount"] == "Unmasked", f"{name}: AppArmor, procMount")
    need(sc.get("privileged") is True, f"{name}: writable cgroup v2 (privileged)")
    need({"name": "SBX_CGROUP_INIT", "value": "1"} in c["env"] and c["command"] == ["/usr/local/bin/sbx-entrypoint"],
         f"{name}: entrypoint with SBX_CGROUP_INIT=1")
    vols = {v["name"] for v in pod["volumes"]}
    need(all(v["name"] in vols for v in c["volumeMounts"]), f"{name}: every volumeMount has a volume")
sec = json.load(open(f"{d}/seccomp-sbx.json"))
denied = {n for r in sec["syscalls"] if r["action"] != "SCMP_ACT_ALLOW" for n in r["names"]}
need(sec["defaultAction"] == "SCMP_ACT_ALLOW", "seccomp-sbx.json: default allow")
for s in ("clone", "clone3", "unshare", "mount", "umount2", "setns", "pivot_root", "mount_setattr", "open_tree", "move_mount"):
    need(s not in denied, f"seccomp-sbx.json: {s} permitted")
hcl = open(f"{d}/nomad/sbx.nomad.hcl").read()
body = re.sub(r'"(?:[^"\\]|\\.)*"', '""', re.sub(r"(?m)^\s*#.*$", "", hcl))
need(body.count("{") == body.count("}") and body.count("[") == body.count("]"), "nomad: braces and brackets balance")
need(re.search(r'driver\s*=\s*"raw_exec"', hcl) and re.search(r'command\s*=\s*"/usr/local/bin/sbx"', hcl), "nomad: raw_exec running sbx")
PY
python3 "$HERE/podman-deploy.py" --selftest "$HERE/k8s/mcp-server.yaml" || exit 1

# The image carries the static release binary (Containerfile: COPY build/sbx); a sanitizer build
# is dynamically linked and would find no loader or libraries in this root.
if ! ldd "$SBX" 2>&1 | grep -q 'not a dynamic'; then
  echo "skipped: $SBX is dynamically linked (a sanitizer build?); the recipe's root holds only the static release binary"
  exit 77
fi
echo "== root from deploy/Containerfile"
ROOT=$(mktemp -d /tmp/sbx-deploy-root.XXXXXX) || exit 1
chmod 755 "$ROOT"
trap 'rm -rf "$ROOT"' EXIT
trap 'exit 130' INT; trap 'exit 143' TERM HUP  # a signal ends the script through its EXIT trap
CF=$HERE/Containerfile
grep -q '^FROM debian:12' "$CF" || { echo "FAIL: the recipe is not on Debian 12"; exit 1; }
pkgs=$(sed -n 's/.*apt-get install -y --no-install-recommends \([a-z0-9. +-]*\).*/\1/p' "$CF")
echo "recipe packages: $pkgs (not installable here without a Debian mirror: busybox stands in)"
mkdir -p "$ROOT/bin" "$ROOT/etc" "$ROOT/proc" "$ROOT/dev" "$ROOT/sys" "$ROOT/tmp" "$ROOT/root" "$ROOT/var/lib/sbx"
cp "$BUSYBOX" "$ROOT/bin/busybox"
for a in sh echo cat ls id env sleep true umount rmdir; do ln -s busybox "$ROOT/bin/$a"; done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$ROOT/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$ROOT/etc/group"
# The recipe's COPY steps, as written (paths relative to the repository root; build/sbx is the
# binary under test).
grep '^COPY ' "$CF" | while read -r _ src dst; do
  [ "$src" = build/sbx ] && src=$SBX || src=$REPO/$src
  mkdir -p "$ROOT$(dirname "$dst")" && cp -a "$src" "$ROOT$dst" || exit 1
  echo "COPY $src -> $dst"
done || exit 1
entry=$(sed -n 's/^ENTRYPOINT \["\([^"]*\)"\]/\1/p' "$CF")
statedir=$(sed -n 's/^ENV SBX_STATE_DIR=//p' "$CF")
[ -x "$ROOT$entry" ] && [ -x "$ROOT/usr/local/bin/sbx" ] || { echo "FAIL: entrypoint $entry or sbx missing in the root"; exit 1; }

echo "== sbx in the container-like setup"
OUT=$ROOT/out; mkdir -p "$OUT"
unshare --mount --pid --fork --uts --ipc --cgroup --propagation private sh -c '
  R=$1; E=$2; S=$3
  mount --bind "$R" "$R" || exit 1
  mount --rbind /dev "$R/dev" && mount -t proc proc "$R/proc" && mount -t tmpfs -o mode=1777 tmpfs "$R/tmp" || exit 1
  mount -t sysfs sysfs "$R/sys" 2>/dev/null
  # cgroup2 mounted afresh shows this cgroup namespace'"'"'s root, as a container runtime does.
  if grep -q " cgroup2 " /proc/self/mounts && [ -d "$R/sys/fs/cgroup" ]; then mount -t cgroup2 none "$R/sys/fs/cgroup"; fi
  # pivot_root, as container runtimes do: a user namespace cannot be created from a chroot
  # (the kernel requires the caller'"'"'s root to be its mount namespace'"'"'s root).
  cd "$R" && mkdir -p .oldroot && pivot_root . .oldroot || exit 1
  exec /bin/busybox sh -c "umount -l /.oldroot && rmdir /.oldroot && exec \"\$@\"" sh env -i PATH=/usr/local/bin:/bin SBX_STATE_DIR="$S" SBX_CGROUP_INIT=1 "$E" \
    sbx run --timeout 20s --trace-file /out/trace.json -- sh -c "echo hello from the sandbox; id -u"
' sh "$ROOT" "$entry" "$statedir" >"$ROOT/stdout.txt" 2>"$ROOT/stderr.txt"; rc=$?
echo "exit $rc; stdout: $(tr '\n' ' ' <"$ROOT/stdout.txt")"
sed 's/^/  stderr| /' "$ROOT/stderr.txt"
[ -f "$OUT/trace.json" ] || { echo "FAIL: no trace written"; exit 1; }
python3 - "$OUT/trace.json" "$rc" "$ROOT/stdout.txt" <<'PY' || exit 1
import json, sys
t = json.load(open(sys.argv[1])); rc = int(sys.argv[2]); out = open(sys.argv[3]).read().splitlines()
cg = t["host"]["cgroup"]
print(f"trace: status {t['result']['status']}, exit_code {t['result'].get('exit_code')}, enforcement.cgroup "
      f"'{t['enforcement']['cgroup']}', host.cgroup mount {cg['mount']} self_path {cg['self_path']} "
      f"namespace_root {cg.get('namespace_root')}, identity {t['enforcement']['identity']['mode']}")
# stdout: the entrypoint's cgroup-init ("nothing to do" here), then the sandboxed program's lines.
ok = rc == 0 and out[-2:] == ["hello from the sandbox", "0"] and t["result"]["status"] == "ok" \
     and cg["mount"] == "/sys/fs/cgroup" and "namespace_root" in cg
print("PASS" if ok else "FAIL: expected exit 0, the greeting, status ok, cgroup2 at /sys/fs/cgroup in the trace")
sys.exit(0 if ok else 1)
PY

# 3. sbx in a real user-namespaced container: podman with 65536 ids (--uidmap, what a pod with
#    hostUsers: false gets), the root of step 2 as --rootfs (no registry). Without podman this
#    step is skipped, and says so.
echo "== sbx in a user-namespaced podman container (--uidmap 0:2000000:65536)"
command -v podman >/dev/null || { echo "skipped: steps 1-2 passed; no podman for steps 3-4 (apt-get install podman runc uidmap)"; exit 77; }
PROOT=$(mktemp -d /tmp/sbx-deploy-podman.XXXXXX) || exit 1
# Root podman with the cgroupfs manager makes libpod_parent (and its conmon) in each cgroup v1
# hierarchy of this host and leaves them, empty, behind: those it made are removed on exit.
CG_BEFORE=$(ls -d /sys/fs/cgroup/*/libpod_parent 2>/dev/null)
podman_cgroups_cleanup() {
  # conmon can outlive `podman run --rm` for a moment, its cgroup busy: tried for up to 10 s.
  for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
    left=0
    for d in /sys/fs/cgroup/*/libpod_parent; do
      [ -d "$d" ] && ! printf '%s\n' "$CG_BEFORE" | grep -qxF "$d" || continue
      find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
      [ -d "$d" ] && left=1
    done
    [ $left = 0 ] && return
    sleep 0.5
  done
  echo "note: podman's cgroups under /sys/fs/cgroup/*/libpod_parent are still busy; left in place" >&2
}
trap 'rm -rf "$ROOT" "$PROOT"; podman_cgroups_cleanup' EXIT
cp -a "$ROOT/." "$PROOT/" && rm -rf "$PROOT/out" "$PROOT/stdout.txt" "$PROOT/stderr.txt" || exit 1
mkdir -p "$PROOT/run" "$PROOT/out" && touch "$PROOT/etc/hosts" "$PROOT/etc/resolv.conf" "$PROOT/etc/hostname"
chmod 755 "$PROOT" && chown -R 2000000:2000000 "$PROOT" || exit 1  # owned by the container's root, as an image's files
# Fitting the host, not sbx: crun refuses a hybrid cgroup layout (runc with cgroupfs takes it), and
# no rlimit above the caller's hard one can be set.
PODMAN=podman
if ! grep -q '^[^ ]* /sys/fs/cgroup cgroup2 ' /proc/self/mounts && command -v runc >/dev/null; then
  PODMAN="podman --runtime runc --cgroup-manager cgroupfs"
fi
# The podman steps, for one way of calling podman ($PODMAN, a word list) and a root it can read.
#  a. podman's defaults mask /proc: every run fails, and says which settings fix it; so does doctor.
#  b. with deploy/'s settings: runs work, mapped to the container's own ids 1-65535.
pod_steps() {  # LABEL ROOT
  label=$1; root=$2
  prun() {
    $PODMAN run --rm --network none --uidmap 0:$UIDBASE:65536 --gidmap 0:$UIDBASE:65536 \
      --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 \
      --env SBX_STATE_DIR="$statedir" --env PATH=/usr/local/bin:/bin "$@"
  }
  prun --rootfs "$root" sbx run --timeout 20s -- true >"$root/masked.txt" 2>&1; rc=$?
  echo "$label, default settings: sbx run exit $rc: $(grep 'sbx:' "$root/masked.txt" | head -1)"
  if [ $rc = 125 ] && grep -q "unmask=ALL" "$root/masked.txt"; then :; else
    if grep -q "Error: .*OCI\|Error: crun\|Error: runc" "$root/masked.txt"; then
      sed 's/^/  | /' "$root/masked.txt"; echo "skipped: $label cannot start a container on this host (above)"; return 77
    fi
    echo "FAIL: expected exit 125 naming --security-opt unmask=ALL"; sed 's/^/  | /' "$root/masked.txt"; return 1
  fi
  prun --rootfs "$root" sbx doctor >"$root/doctor.txt" 2>&1; rc=$?
  grep -q "sbx cannot run on this host" "$root/doctor.txt" && [ $rc = 1 ] && grep -q "unmask=ALL" "$root/doctor.txt" ||
    { echo "FAIL: doctor (exit $rc) must say sbx cannot run, with the fix:"; sed 's/^/  | /' "$root/doctor.txt"; return 1; }
  echo "$label, default settings: sbx doctor exit 1, says it cannot run, with the fix"
  prun --security-opt unmask=ALL --security-opt seccomp="$HERE/seccomp-sbx.json" --rootfs "$root" \
    sbx run --timeout 20s --trace-file /out/trace.json -- sh -c "echo hello from the sandbox; id -u" \
    >"$root/ok.txt" 2>&1; rc=$?
  echo "$label --security-opt unmask=ALL,seccomp=deploy/seccomp-sbx.json: exit $rc: $(tr '\n' ' ' <"$root/ok.txt")"
  python3 - "$root/out/trace.json" "$rc" "$root/ok.txt" <<'PY'
import json, sys
try:
    t = json.load(open(sys.argv[1]))
except OSError as e:
    sys.exit(f"FAIL: no trace ({e})")
rc = int(sys.argv[2]); out = open(sys.argv[3]).read().splitlines(); ident = t["enforcement"]["identity"]
print(f"trace: status {t['result']['status']}, identity {ident['mode']} {ident['range_source']} uid_map {ident['uid_map']}")
ok = rc == 0 and out[-2:] == ["hello from the sandbox", "0"] and ident["range_source"] == "own user namespace (65535 ids)" \
     and ident["uid_map"] == [{"inside": 0, "outside": 1, "count": 65535}]
print("PASS" if ok else "FAIL: expected exit 0, the greeting, and the sandbox mapped to the container's ids 1-65535")
sys.exit(0 if ok else 1)
PY
}
UIDBASE=2000000
pod_steps "root podman" "$PROOT" || exit $?

# 5. deploy/k8s/mcp-server.yaml's Deployment under root podman: sbx mcp --listen with the manifest's
#    settings (deploy/podman-deploy.py translates each; kube play cannot run it, deploy/README.md
#    says why), the token file from its Secret, in a network namespace of its own, driven from
#    another by the official MCP TypeScript SDK's HTTP client (installed by `make mcp-test-deps`).
#    The image's userland (the recipe's apt step: Debian 12 with python3) is this Debian 12 host's
#    /usr/bin, /usr/lib and /usr/lib64, bound read-only; busybox stays at /bin.
echo "== deploy/k8s/mcp-server.yaml under podman, driven by the MCP SDK's Streamable HTTP client"
NODE_DIR=$(readlink -f "${2:-$(dirname "$SBX")}")/mcp-node
skip5=
if [ ! -d "$NODE_DIR/node_modules/@modelcontextprotocol/sdk" ] || ! command -v node >/dev/null || ! command -v ip >/dev/null; then
  skip5="step 5 (no MCP SDK in $NODE_DIR, node or ip: make mcp-test-deps)"
  echo "skipped: $skip5"
else
  DROOT=$(mktemp -d /tmp/sbx-deploy-mcp.XXXXXX) || exit 1
  # Named after this shell: what a killed run of podman-deploy.py left is removed here.
  deploy5_cleanup() {
    $PODMAN rm -f "sbx-mcp-deploy-$$" >/dev/null 2>&1
    ip netns del "sbxpod-$$" 2>/dev/null; ip netns del "sbxcli-$$" 2>/dev/null
  }
  trap 'deploy5_cleanup; rm -rf "$ROOT" "$PROOT" "$DROOT"; podman_cgroups_cleanup' EXIT
  cp -a "$PROOT/." "$DROOT/" && rm -rf "$DROOT"/*.txt "$DROOT/out" || exit 1
  mkdir -p "$DROOT/usr/bin" "$DROOT/usr/lib" "$DROOT/usr/lib64" && ln -s usr/lib "$DROOT/lib" && ln -s usr/lib64 "$DROOT/lib64" || exit 1
  chown -R -h 2000000:2000000 "$DROOT" || exit 1
  nofile=$(ulimit -Hn); [ "$nofile" = unlimited ] || [ "$nofile" -gt 65536 ] && nofile=65536
  python3 "$HERE/podman-deploy.py" --sbx "$SBX" --manifest "$HERE/k8s/mcp-server.yaml" --image-root "$DROOT" \
    --image-bind /usr/bin:/usr/bin --image-bind /usr/lib:/usr/lib --image-bind /usr/lib64:/usr/lib64 \
    --node-dir "$NODE_DIR" --uid-base 2000000 --seccomp "$HERE/seccomp-sbx.json" --podman "$PODMAN" \
    --host-fit "--ulimit=nofile=$nofile:$nofile --ulimit=nproc=4096:4096" --tag $$ || exit $?
  deploy5_cleanup
fi

# 4. Rootless podman: the same steps as a user with subordinate ids (/etc/subuid), the container's
#    65536 ids being the user's own uid and 65535 of its subordinate ones (--uidmap 0:0:65536 inside
#    podman's rootless namespace). Its storage, run dir and pause process are this test's own, in a
#    temporary dir, ended and removed on exit.
[ -z "$skip5" ] && passed="1-3 and 5" || passed="1-3"
echo "== sbx in a rootless podman container (a user with /etc/subuid ids, --uidmap 0:0:65536)"
command -v newuidmap >/dev/null && command -v newgidmap >/dev/null && command -v runuser >/dev/null ||
  { echo "skipped: steps $passed passed; no newuidmap/newgidmap for step 4 (apt-get install uidmap)"; exit 77; }
PUSER=sbxpodman
if ! id "$PUSER" >/dev/null 2>&1; then
  useradd --system --user-group --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin "$PUSER" ||
    id "$PUSER" >/dev/null || exit 1  # another run may have created it meanwhile
fi
# useradd gives subordinate ids to regular users only: add 65536 of each where the user has none,
# after the highest range in use, and below sbx's own default range at 1879048192.
for f in subuid subgid; do
  grep -q "^$PUSER:" /etc/$f 2>/dev/null && continue
  start=$(awk -F: 'BEGIN{m=100000} $3+0>0 && $2+0<1879048192 && $2+$3>m {m=$2+$3} END{print m}' /etc/$f 2>/dev/null)
  start=${start:-100000}
  [ $((start + 65536)) -le 1879048192 ] ||
    { echo "FAIL: no free range of 65536 ids in /etc/$f below 1879048192 for $PUSER"; exit 1; }
  [ $f = subuid ] && opt=--add-subuids || opt=--add-subgids
  usermod $opt "$start-$((start + 65535))" "$PUSER" || exit 1
  echo "gave $PUSER /etc/$f ids $start-$((start + 65535))"
done
PTMP=$(mktemp -d /tmp/sbx-deploy-rootless.XXXXXX) || exit 1
RLROOT=$PTMP/root
chmod 755 "$PTMP"
stop_pause() {  # podman's rootless pause process keeps its user namespace: this test started it
  p=$(cat "$PTMP/xdg/libpod/tmp/pause.pid" 2>/dev/null) && [ -n "$p" ] && runuser -u "$PUSER" -- kill "$p" 2>/dev/null
  :  # root removes the storage's files of subordinate ids with the rest (the trap below)
}
trap 'stop_pause; rm -rf "$ROOT" "$PROOT" "${DROOT:-}" "$PTMP"; podman_cgroups_cleanup' EXIT  # step 5 cleaned up after itself
mkdir -p "$PTMP/home" "$PTMP/xdg" "$PTMP/storage" "$PTMP/runroot" && cp -a "$PROOT/." "$RLROOT/" || exit 1
rm -rf "$RLROOT/out" "$RLROOT"/*.txt && mkdir -p "$RLROOT/out" || exit 1
chmod 700 "$PTMP/xdg" && chown -R "$PUSER:$PUSER" "$PTMP/home" "$PTMP/xdg" "$PTMP/storage" "$PTMP/runroot" "$RLROOT" || exit 1
PODMAN="runuser -u $PUSER -- env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=$PTMP/home XDG_RUNTIME_DIR=$PTMP/xdg
  podman --root $PTMP/storage --runroot $PTMP/runroot --storage-driver vfs --runtime runc --cgroup-manager cgroupfs"
# A host that refuses rootless containers (no unprivileged user namespaces, newuidmap without its
# setuid bit, an AppArmor userns restriction) cannot run step 4: said, and skipped.
if ! $PODMAN unshare true >"$PTMP/unshare.txt" 2>&1; then
  sed 's/^/  | /' "$PTMP/unshare.txt"
  echo "skipped: steps $passed passed; $PUSER cannot start a rootless podman namespace here (above)"; exit 77
fi
UIDBASE=0
pod_steps "rootless podman" "$RLROOT" || exit $?
[ -z "$skip5" ] || { echo "skipped: steps 1-4 passed; $skip5"; exit 77; }
