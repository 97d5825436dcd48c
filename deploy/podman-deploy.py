#!/usr/bin/env python3
"""Runs deploy/k8s/mcp-server.yaml's Deployment under podman and drives it from outside.

`podman kube play` (4.3.1, Debian 12) cannot run this manifest as written: it ignores
procMount: Unmasked (sbx then cannot mount a fresh /proc), mounts a Secret's data still
base64-encoded, and needs catatonit for its infra container. So this script does what kube play
would, with `podman run`: each setting of the pod and its container becomes the podman option that
means the same (KUBE_TO_PODMAN below); a setting it has no translation for stops it with an error,
so that what runs is exactly what the manifest says. Where Kubernetes itself does the work (probes,
the Service, Secret and ConfigMap volumes, the pod's network), this script does it the way the
kubelet would, and says so:
  - the pod's network: a network namespace of this script's own (ip netns), joined by the
    container (--network ns:PATH), reached over a veth pair from a second namespace where the
    client runs (the host's own network is not touched);
  - Secret and ConfigMap volumes: their keys written as files (defaultMode) into a directory
    bound read-only at the mountPath; emptyDir: a fresh directory;
  - probes: the client polls the readinessProbe's path before any call, as the kubelet would;
  - the Service: its selector and targetPort are checked against the pod; the client connects to
    the endpoint the Service would route to (no kube-proxy here).
The client is the official MCP TypeScript SDK's Streamable HTTP client (deploy/mcp-client.mjs).
Afterwards it prints what the engine enforced (from podman inspect and the container's
/proc/1/status) and what sbx enforced inside each sandbox (from the records).

usage: podman-deploy.py --sbx SBX --manifest YAML --image-root DIR [--image-bind SRC:DST ...]
                        --node-dir DIR --uid-base N --seccomp FILE [--podman 'podman ...']
                        [--host-fit 'OPTIONS'] [--tag T]
       podman-deploy.py --selftest YAML   (the translation refuses settings it cannot carry over)
Exit 0 pass, 1 fail, 77 skipped (the reason on the last line). Needs root, podman, ip, node.
"""
import argparse
import base64
import hashlib
import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile

import yaml

# Every key this translation carries over, by where it sits (a list's items under "[]"); any other
# key stops it (check_keys). FREE: maps whose keys are the user's (labels, a ConfigMap's data).
PROBE = {"httpGet", "periodSeconds", "initialDelaySeconds", "timeoutSeconds", "failureThreshold", "successThreshold"}
C = "spec.template.spec.containers[]"
KNOWN = {
    "Deployment": {
        "": {"apiVersion", "kind", "metadata", "spec"},
        "metadata": {"name", "labels"},
        "spec": {"replicas", "selector", "template"},
        "spec.selector": {"matchLabels"},
        "spec.template": {"metadata", "spec"},
        "spec.template.metadata": {"labels"},
        "spec.template.spec": {"hostUsers", "terminationGracePeriodSeconds", "containers", "volumes"},
        C: {"name", "image", "env", "command", "args", "ports", "livenessProbe", "readinessProbe", "resources",
            "securityContext", "volumeMounts"},
        C + ".env[]": {"name", "value"},
        C + ".ports[]": {"name", "containerPort", "protocol"},
        C + ".livenessProbe": PROBE, C + ".readinessProbe": PROBE,
        C + ".livenessProbe.httpGet": {"path", "port"}, C + ".readinessProbe.httpGet": {"path", "port"},
        C + ".resources": {"requests", "limits"},
        C + ".resources.requests": {"memory", "cpu"}, C + ".resources.limits": {"memory", "cpu"},
        C + ".securityContext": {"runAsUser", "privileged", "allowPrivilegeEscalation", "procMount", "seccompProfile",
                                 "appArmorProfile"},
        C + ".securityContext.seccompProfile": {"type", "localhostProfile"},
        C + ".securityContext.appArmorProfile": {"type"},
        C + ".volumeMounts[]": {"name", "mountPath", "readOnly"},
        "spec.template.spec.volumes[]": {"name", "secret", "configMap", "emptyDir"},
        "spec.template.spec.volumes[].secret": {"secretName", "defaultMode"},
        "spec.template.spec.volumes[].configMap": {"name", "defaultMode"},
        "spec.template.spec.volumes[].emptyDir": set(),
    },
    "Secret": {"": {"apiVersion", "kind", "metadata", "type", "stringData", "data"}, "metadata": {"name"}},
    "ConfigMap": {"": {"apiVersion", "kind", "metadata", "data"}, "metadata": {"name"}},
    "Service": {"": {"apiVersion", "kind", "metadata", "spec"}, "metadata": {"name"}, "spec": {"selector", "ports"},
                "spec.ports[]": {"name", "port", "targetPort", "protocol"}},
}
FREE = {"metadata.labels", "spec.selector.matchLabels", "spec.template.metadata.labels", "stringData", "data",
        "spec.selector", C + ".command", C + ".args"}


def check_keys(kind, node, path=""):
    """Stops at the first key of a `kind` object that KNOWN does not list."""
    if path in FREE:
        return
    if isinstance(node, list):
        for item in node:
            check_keys(kind, item, path + "[]")
        return
    if not isinstance(node, dict):
        return
    known = KNOWN[kind].get(path)
    if known is None:
        raise Untranslatable(f"{kind} {path or '(top)'}: no translation for what it holds")
    for k, v in node.items():
        where = f"{path}.{k}" if path else k
        if k not in known:
            raise Untranslatable(f"{kind} {where}: no podman translation here")
        check_keys(kind, v, where)


class Untranslatable(Exception):
    pass


def quantity_bytes(q):
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10**3, "M": 10**6, "G": 10**9}
    for u, m in units.items():
        if str(q).endswith(u):
            return int(float(str(q)[: -len(u)]) * m)
    return int(q)


def quantity_cpus(q):
    q = str(q)
    return int(q[:-1]) / 1000 if q.endswith("m") else float(q)


def load(manifest):
    docs = [d for d in yaml.safe_load_all(open(manifest)) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    if len(by_kind.get("Deployment", [])) != 1:
        raise Untranslatable("the manifest must hold exactly one Deployment")
    return by_kind


def write_volume(src, objects, where, uid_base):
    """A Secret or ConfigMap volume as the kubelet makes it: a directory of one file per key."""
    os.makedirs(where, mode=0o755)
    if "secret" in src:
        obj = objects.get(("Secret", src["secret"]["secretName"]))
        mode = src["secret"].get("defaultMode", 0o644)
        if obj is None:
            raise Untranslatable(f"Secret {src['secret']['secretName']} is not in the manifest")
        data = {k: v.encode() for k, v in obj.get("stringData", {}).items()}
        data.update({k: base64.b64decode(v) for k, v in obj.get("data", {}).items()})
    else:
        obj = objects.get(("ConfigMap", src["configMap"]["name"]))
        mode = src["configMap"].get("defaultMode", 0o644)
        if obj is None:
            raise Untranslatable(f"ConfigMap {src['configMap']['name']} is not in the manifest")
        data = {k: v.encode() for k, v in obj.get("data", {}).items()}
    for k, v in data.items():
        p = os.path.join(where, k)
        with open(p, "wb") as f:
            f.write(v)
        os.chmod(p, mode)
        os.chown(p, uid_base, uid_base)  # the pod's root owns them, as with fsGroup unset and runAsUser 0


def translate(by_kind, args, work):
    """The Deployment's pod as a podman run command line; refuses what it cannot translate."""
    dep = by_kind["Deployment"][0]
    pod = dep["spec"]["template"]["spec"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    if not dep["spec"]["selector"]["matchLabels"].items() <= labels.items():
        raise Untranslatable("the Deployment's selector does not match its pod's labels")
    for kind, objs in by_kind.items():
        if kind not in KNOWN:
            raise Untranslatable(f"a {kind}: no translation here")
        for o in objs:
            check_keys(kind, o)
    if len(pod["containers"]) != 1:
        raise Untranslatable("one container per pod is translated")
    c = pod["containers"][0]
    sc = c.get("securityContext", {})
    argv, said = [], []

    def opt(what, *flags):
        argv.extend(flags)
        said.append(f"{what:<46} -> {' '.join(flags)}")

    if pod.get("hostUsers") is False:  # Kubernetes maps 65536 ids to a pod with its own user namespace
        u = args.uid_base
        opt("hostUsers: false", f"--uidmap=0:{u}:65536", f"--gidmap=0:{u}:65536")
    if "terminationGracePeriodSeconds" in pod:
        opt("terminationGracePeriodSeconds", f"--stop-timeout={pod['terminationGracePeriodSeconds']}")
    if sc.get("runAsUser") is not None:
        opt("securityContext.runAsUser", f"--user={sc['runAsUser']}")
    if sc.get("privileged"):
        opt("securityContext.privileged", "--privileged")
    if sc.get("allowPrivilegeEscalation") is False:
        opt("securityContext.allowPrivilegeEscalation", "--security-opt=no-new-privileges")
    if sc.get("procMount") == "Unmasked":
        opt("securityContext.procMount: Unmasked", "--security-opt=unmask=ALL")
    prof = sc.get("seccompProfile", {})
    if sc.get("privileged") and prof:
        # Kubernetes runs a privileged container seccomp-unconfined whatever its profile says.
        opt("securityContext.seccompProfile (inert: privileged)", "--security-opt=seccomp=unconfined")
    elif prof.get("type") == "Localhost":
        # The kubelet reads <root>/seccomp/<localhostProfile>; deploy/README.md has it installed
        # there from deploy/seccomp-sbx.json.
        if prof.get("localhostProfile") != "profiles/sbx.json":
            raise Untranslatable(f"seccomp profile {prof.get('localhostProfile')} is not deploy/seccomp-sbx.json")
        opt("securityContext.seccompProfile: Localhost", f"--security-opt=seccomp={args.seccomp}")
    elif prof:
        raise Untranslatable(f"seccompProfile {prof} has no translation here")
    aa = sc.get("appArmorProfile", {}).get("type")
    if aa == "Unconfined":
        opt("securityContext.appArmorProfile: Unconfined", "--security-opt=apparmor=unconfined")
    elif aa not in (None, "RuntimeDefault"):
        raise Untranslatable(f"appArmorProfile {aa} has no translation here")
    if sc.get("procMount") not in (None, "Default", "Unmasked"):
        raise Untranslatable(f"procMount {sc['procMount']} has no translation here")
    if dep["spec"].get("replicas", 1) != 1:
        said.append(f"{'replicas: ' + str(dep['spec']['replicas']):<46} -> one pod here (each replica is the same)")
    for name in ("readinessProbe", "livenessProbe"):
        timing = sorted(set(c.get(name, {})) - {"httpGet"})
        if timing:
            said.append(f"{name + ' ' + ', '.join(timing):<46} -> the kubelet's, played by the client")
    for e in c.get("env", []):
        opt(f"env {e['name']}", f"--env={e['name']}={e['value']}")
    res = c.get("resources", {})
    lim, req = res.get("limits", {}), res.get("requests", {})
    if "memory" in lim:
        opt("resources.limits.memory", f"--memory={quantity_bytes(lim['memory'])}")
    if "cpu" in lim:
        opt("resources.limits.cpu", f"--cpus={quantity_cpus(lim['cpu'])}")
    if "memory" in req:
        opt("resources.requests.memory", f"--memory-reservation={quantity_bytes(req['memory'])}")
    if "cpu" in req:  # the kubelet's cpu.shares for a request: millicores * 1024 / 1000
        opt("resources.requests.cpu", f"--cpu-shares={max(2, int(quantity_cpus(req['cpu']) * 1024))}")
    objects = {(d["kind"], d["metadata"]["name"]): d for k in ("Secret", "ConfigMap") for d in by_kind.get(k, [])}
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    for m in c.get("volumeMounts", []):
        v = vols.get(m["name"])
        if v is None:
            raise Untranslatable(f"volumeMount {m['name']} has no volume")
        host = os.path.join(work, "volumes", m["name"])
        if "secret" in v or "configMap" in v:
            write_volume(v, objects, host, args.uid_base)
            kind = "Secret" if "secret" in v else "ConfigMap"
        elif "emptyDir" in v:
            os.makedirs(host)
            os.chown(host, args.uid_base, args.uid_base)
            kind = "emptyDir"
        else:
            raise Untranslatable(f"volume {m['name']}: only secret, configMap and emptyDir are translated")
        ro = ":ro" if m.get("readOnly") else ""
        opt(f"volumeMount {m['name']} ({kind})", f"--volume={host}:{m['mountPath']}{ro}")
    ports = {p.get("name", str(p["containerPort"])): p["containerPort"] for p in c.get("ports", [])}
    probe = c["readinessProbe"]["httpGet"]
    live = c["livenessProbe"]["httpGet"]
    port_of = lambda p: ports[p] if isinstance(p, str) else int(p)  # noqa: E731
    svc = [s for s in by_kind.get("Service", []) if s["spec"]["selector"].items() <= labels.items()]
    if len(svc) != 1:
        raise Untranslatable("one Service must select the Deployment's pods")
    sp = svc[0]["spec"]["ports"][0]
    return {
        "argv": argv, "said": said, "command": c.get("command", []) + c.get("args", []),
        "grace": pod.get("terminationGracePeriodSeconds", 30), "image": c["image"],
        "ready": (probe["path"], port_of(probe["port"])), "live": (live["path"], port_of(live["port"])),
        "service": (svc[0]["metadata"]["name"], sp["port"], port_of(sp["targetPort"])),
        "volumes": {m["name"]: os.path.join(work, "volumes", m["name"]) for m in c.get("volumeMounts", [])},
        "mounts": {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])},
    }


def sh(cmd, timeout=120, check=True, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)}: exit {r.returncode}: {(r.stderr or r.stdout).strip()[-1500:]}")
    return r


def fill_in(by_kind, args, image_root):
    """What a user puts in the Secret and the ConfigMap: two tokens' hashes, the pack's digest."""
    tokens = {t: f"{t}-{secrets.token_hex(24)}" for t in ("alpha", "beta")}
    sha = {t: hashlib.sha256(v.encode()).hexdigest() for t, v in tokens.items()}
    secret = next(s for s in by_kind["Secret"] if s["metadata"]["name"] == "sbx-mcp-tokens")
    secret["stringData"]["tokens.json"] = json.dumps({"tokens": [{"sha256": sha[t], "tenant": t} for t in sha]})
    pack = os.path.join(image_root, "opt/sbx/packs/tolerance-check")
    digest = json.loads(sh([args.sbx, "pack", "validate", "--json", pack]).stdout)["digest"]
    cm = next(c for c in by_kind["ConfigMap"] if c["metadata"]["name"] == "sbx-mcp-tenants")
    alpha = cm["data"]["alpha.json"]
    if "<digest of the tolerance-check pack>" not in alpha:
        raise Untranslatable("the ConfigMap's alpha.json no longer has the pack digest placeholder")
    cm["data"]["alpha.json"] = alpha.replace("sha256:<digest of the tolerance-check pack>", digest)
    return tokens


class PodNetwork:
    """The pod's network namespace and a client's, joined by a veth pair (10.213.0.0/30)."""

    def __init__(self, tag):
        self.pod, self.cli = f"sbxpod-{tag}", f"sbxcli-{tag}"  # deploy/test.sh removes them if killed
        self.pod_ip = "10.213.0.2"

    def __enter__(self):
        try:
            sh(["ip", "netns", "add", self.pod])
            sh(["ip", "netns", "add", self.cli])
            sh(["ip", "-n", self.cli, "link", "add", "vc", "type", "veth", "peer", "name", "vp", "netns", self.pod])
            for ns, dev, ip in ((self.cli, "vc", "10.213.0.1/30"), (self.pod, "vp", self.pod_ip + "/30")):
                sh(["ip", "-n", ns, "addr", "add", ip, "dev", dev])
                sh(["ip", "-n", ns, "link", "set", dev, "up"])
                sh(["ip", "-n", ns, "link", "set", "lo", "up"])
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for ns in (self.pod, self.cli):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def records(state, tenant):
    p = os.path.join(state, "tenants", tenant, "traces", "ledger.jsonl")
    if not os.path.exists(p):
        return []
    recs = [json.loads(line)["record"] for line in open(p) if line.strip()]
    return [r for r in recs if r.get("schema") == "sbx.trace/v1"]


def engine_facts(podman, name):
    """What podman set up, read back from podman and from the container's own /proc."""
    info = json.loads(sh(podman + ["inspect", name]).stdout)[0]
    hc = info["HostConfig"]
    # The container's pid 1 read from the host's /proc (podman exec cannot enter a container whose
    # network namespace its user namespace does not own).
    pid = info["State"]["Pid"]
    status = open(f"/proc/{pid}/status").read()
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    uid_map = open(f"/proc/{pid}/uid_map").read().split()
    return {
        "user namespace (uid_map of the container)": " ".join(uid_map),
        "memory limit (podman inspect)": hc.get("Memory"),
        "memory reservation": hc.get("MemoryReservation"),
        "cpus (NanoCpus / 1e9)": (hc.get("NanoCpus") or 0) / 1e9,
        "cpu shares": hc.get("CpuShares"),
        "privileged": hc.get("Privileged"),
        "security options": hc.get("SecurityOpt"),
        "seccomp mode of pid 1 (0 none, 2 filter)": fields.get("Seccomp", "?").strip(),
        "effective capabilities of pid 1": fields.get("CapEff", "?").strip(),
        "no_new_privs of pid 1": fields.get("NoNewPrivs", "?").strip(),
    }


def sandbox_facts(rec):
    e = rec.get("enforcement", {})
    ident = e.get("identity", {})
    t = rec.get("tenant", {})
    return {
        "tenant": f"{t.get('name')} (ids separate: {t.get('separation', {}).get('ids')})",
        "made_by": rec.get("sandbox", {}).get("made_by"),
        "identity": f"{ident.get('mode')}, {ident.get('range_source')}, uid_map {ident.get('uid_map')}",
        "namespaces": e.get("namespaces"),
        "seccomp": {k: e.get("seccomp", {}).get(k) for k in ("mode", "default_action")},
        "cgroup": e.get("cgroup"),
        "limits": "; ".join(f"{k} {v.get('value')} by {v.get('mechanism')}{' (degraded)' if v.get('degraded') else ''}"
                            for k, v in e.get("limits_applied", {}).items()),
        "limits not applied": [f"{x.get('limit')}: {x.get('reason', '')[:90]}" for x in e.get("limits_not_applied", [])],
        "capabilities": e.get("capabilities"),
    }


def run(args, work):
    by_kind = load(args.manifest)
    tokens = fill_in(by_kind, args, args.image_root)
    pod = translate(by_kind, args, work)
    print("the Deployment's settings as podman options:")
    for line in pod["said"]:
        print("  " + line)
    image = [f"--volume={b}:ro" for b in args.image_bind] + ["--rootfs", args.image_root]
    print(f"  {'the image (' + pod['image'] + ')':<46} -> {' '.join(image)}")
    name = f"sbx-mcp-deploy-{args.tag}"
    svc, svc_port, target = pod["service"]
    failed = 0
    with PodNetwork(args.tag) as net:
        print(f"  {'the pod' + chr(39) + 's network':<46} -> --network=ns:/run/netns/{net.pod} "
              f"(pod IP {net.pod_ip}; Service {svc}:{svc_port} -> targetPort {target}, no kube-proxy: "
              f"the client uses that endpoint)")
        cmd = args.podman + ["run", "-d", "--name", name, f"--network=ns:/run/netns/{net.pod}"] + pod["argv"] + \
            args.host_fit + image + pod["command"]
        # podman's default sysctl net.ipv4.ping_group_range cannot be written by the container's
        # user namespace in a network namespace it does not own (this one, made by ip netns, as a
        # CNI plugin makes a pod's): none is set, as the kubelet sets none by default.
        conf = os.path.join(work, "containers.conf")
        with open(conf, "w") as f:
            f.write("[containers]\ndefault_sysctls = []\n")
        try:
            sh(cmd, env={**os.environ, "CONTAINERS_CONF": conf})
            client = os.path.join(args.node_dir, "mcp-client.mjs")
            shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "mcp-client.mjs"), client)
            url = f"http://{net.pod_ip}:{target}"
            # The tokens in the environment, not on a command line every user of the host can read.
            r = subprocess.run(["ip", "netns", "exec", net.cli, "node", client, url, pod["ready"][0], pod["live"][0]],
                               text=True, timeout=300 * args.scale,
                               env={**os.environ, "TOKEN_ALPHA": tokens["alpha"], "TOKEN_BETA": tokens["beta"]})
            failed += r.returncode != 0
            facts = engine_facts(args.podman, name)
        finally:
            stop = sh(args.podman + ["stop", name], timeout=pod["grace"] + 60, check=False)
            code = sh(args.podman + ["inspect", name, "--format", "{{.State.ExitCode}}"], check=False).stdout.strip()
            logs = sh(args.podman + ["logs", name], check=False)
            sh(args.podman + ["rm", "-f", name], check=False)
    ok = stop.returncode == 0 and code == "0"
    failed += not ok
    print(f"{'ok  ' if ok else 'FAIL'} podman stop (SIGTERM, grace {pod['grace']} s): the server exits {code}")
    if not ok:
        print("  | " + "\n  | ".join((logs.stdout + logs.stderr).splitlines()[-30:]))
    print("what the engine enforced (podman, on the container):")
    for k, v in facts.items():
        print(f"  {k}: {v}")
    state = pod["volumes"]["sbx-state"]
    by_tenant = {t: records(state, t) for t in ("alpha", "beta")}
    counts = {t: len(r) for t, r in by_tenant.items()}
    ok = counts["alpha"] >= 13 and counts["beta"] >= 10
    failed += not ok
    print(f"{'ok  ' if ok else 'FAIL'} records in the pod's state volume, per tenant's store: {counts}")
    shared = [r.get("tenant", {}).get("separation", {}) for rs in by_tenant.values() for r in rs]
    ok = bool(shared) and all(x.get("ids") is False and "no room" in x.get("why", "") for x in shared)
    failed += not ok
    print(f"{'ok  ' if ok else 'FAIL'} every record says its tenant shares the pod's 65536 ids, and why: "
          f"{shared[0].get('why', '')[:160] if shared else 'none'}")
    # The volume belongs to the container's root (uid 2000000), which sbx on the host does not
    # trust as its state's owner: verify a copy of it owned by root.
    copy = os.path.join(work, "verify-state")
    shutil.copytree(state, copy, symlinks=True)
    for root, dirs, files in os.walk(copy):
        for n in dirs + files:
            os.lchown(os.path.join(root, n), 0, 0)
    os.chown(copy, 0, 0)
    for t, recs in by_tenant.items():
        v = sh([args.sbx, "trace", "verify", "--tenant", t], check=False,
               env={**os.environ, "SBX_STATE_DIR": copy, "SBX_TENANTS_DIR": pod["volumes"]["tenants"]})
        print(f"{'ok  ' if v.returncode == 0 else 'FAIL'} sbx trace verify --tenant {t}: {v.stdout.strip()[-200:]}"
              f"{v.stderr.strip()[-300:]}")
        failed += v.returncode != 0
    if by_tenant["alpha"]:
        print("what sbx enforced inside each sandbox (tenant alpha's first record):")
        for k, v in sandbox_facts(by_tenant["alpha"][0]).items():
            print(f"  {k}: {v}")
    return failed


def selftest(manifest):
    """The translation refuses what it cannot carry over: a setting added to the pod, to the
    container or to its securityContext stops it, naming the setting."""
    args = argparse.Namespace(uid_base=2000000, seccomp="seccomp-sbx.json")
    failed = 0
    for where, key, value in (("pod", "hostNetwork", True), ("container", "workingDir", "/x"),
                              ("securityContext", "capabilities", {"add": ["SYS_ADMIN"]}),
                              ("volumeMount", "subPath", "x"), ("env", "valueFrom", {"fieldRef": {}})):
        by_kind = load(manifest)
        pod = by_kind["Deployment"][0]["spec"]["template"]["spec"]
        c = pod["containers"][0]
        target = {"pod": pod, "container": c, "securityContext": c["securityContext"],
                  "volumeMount": c["volumeMounts"][0], "env": c["env"][0]}[where]
        target[key] = value
        with tempfile.TemporaryDirectory() as work:
            try:
                translate(by_kind, args, work)
                said = "translated"
            except Untranslatable as e:
                said = str(e)
        ok = key in said
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} a {where} with {key}: refused ({said})")
    return 1 if failed else 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--selftest":
        return selftest(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sbx", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--image-root", required=True)
    ap.add_argument("--image-bind", action="append", default=[])
    ap.add_argument("--node-dir", required=True)
    ap.add_argument("--uid-base", type=int, required=True)
    ap.add_argument("--seccomp", required=True)
    ap.add_argument("--podman", default="podman")
    ap.add_argument("--host-fit", default="", help="podman options that fit this host, not the manifest")
    ap.add_argument("--tag", default=str(os.getpid()), help="names the container and network namespaces")
    args = ap.parse_args()
    args.podman = shlex.split(args.podman)
    args.host_fit = shlex.split(args.host_fit)
    args.scale = float(os.environ.get("SBX_TEST_TIME_SCALE", "1") or 1)
    for tool in ("ip", "node"):
        if not shutil.which(tool):
            print(f"skipped: no {tool}")
            return 77
    work = tempfile.mkdtemp(prefix="sbx-podman-deploy-")
    os.chmod(work, 0o755)
    try:
        failed = run(args, work)
    except Untranslatable as e:
        print(f"FAIL: the manifest has a setting this translation does not cover: {e}")
        failed = 1
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"FAIL: {e}")
        failed = 1
    finally:
        shutil.rmtree(work, ignore_errors=True)  # podman's own cgroups: deploy/test.sh removes them
    print("PASS" if not failed else f"FAIL: {failed} check(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
