"""--gpu on stand-in GPU hosts (CI has no GPU).

run.sh builds two trees as root (gpu_fixture.sh): `discovery` (/dev/nvidia0, nvidia1, nvidiactl,
nvidia-uvm, nvidia-uvm-tools as mknod'ed copies of /dev/null, /proc/driver/nvidia/gpus/*/information,
a driver under /usr/local/nvidia) and `cdi` (the same plus /etc/cdi/nvidia.json). SBX_TEST_GPU_HOST
points sbx's discovery at one of them (runtime/linux/gpu.hpp); inside, the nodes appear at /dev/nvidia*.
A stand-in node is /dev/null: writing to it succeeds only when its mount allows devices (no nodev),
which is what makes a real GPU node usable.
"""
import json
import os
import unittest

from sbxtest import MODE, SbxTestCase

GPU_HOST = os.environ.get("SBX_IT_GPU_HOST", "")
SKIP = "" if GPU_HOST else ("no stand-in GPU host: run.sh builds it with mknod, which needs root "
                            "(run the suite as root; rootless mode builds it before dropping privileges)")


def env_for(tree):
    env = dict(os.environ)
    env["SBX_TEST_GPU_HOST"] = os.path.join(GPU_HOST, tree)
    return env


@unittest.skipIf(SKIP, SKIP)
class GpuTest(SbxTestCase):
    def run_gpu(self, cmd, opts=(), tree="discovery", **kw):
        return self.run_sbx(["sh", "-c", cmd], list(opts), env=env_for(tree), **kw)

    def test_no_gpu_node_without_the_flag(self):
        r = self.run_gpu("ls -a /dev; test -e /opt/nvidia && echo DRIVER_VISIBLE; echo LD=$LD_LIBRARY_PATH")
        self.assertEqual(r.rc, 0, r.describe())
        self.assertNotIn("nvidia", r.out, r.describe())
        self.assertNotIn("DRIVER_VISIBLE", r.out, r.describe())
        self.assertEqual(r.trace["enforcement"]["gpu"], {"granted": False, "nodes": []})
        self.assertNotIn("gpu", r.trace["usage"])

    def test_granted_nodes_are_usable_not_nodev_and_openable_by_the_sandbox_user(self):
        script = ("ls /dev | grep nvidia | tr '\\n' ' '; echo; "
                  "stat -c '%n %F %t:%T %a' /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm; "
                  "echo hello > /dev/nvidia0 && echo WRITE_OK; "
                  "head -c 4 /dev/nvidiactl | wc -c; "
                  "grep ' /dev/nvidia0 ' /proc/self/mountinfo; id -u")
        for uid in ("0", "1000"):
            with self.subTest(uid=uid):
                r = self.run_gpu(script, ["--gpu", "0", "--uid", uid, "--gid", uid])
                self.assertEqual(r.rc, 0, r.describe())
                lines = r.out.splitlines()
                self.assertEqual(lines[0].split(), ["nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidiactl"], r.describe())
                self.assertIn("/dev/nvidia0 character special file 1:3 666", r.out)
                self.assertIn("WRITE_OK", r.out, r.describe())
                mount = [l for l in lines if " /dev/nvidia0 " in l]
                self.assertEqual(len(mount), 1, r.describe())
                opts = mount[0].split(" ")[5].split(",")
                self.assertNotIn("nodev", opts, mount[0])
                self.assertEqual(lines[-1], uid)
                # /dev itself stays read-only: no node can be added or renamed there.
        r = self.run_gpu("touch /dev/nvidia9 2>&1; mknod /dev/x c 1 3 2>&1; echo rc=$?", ["--gpu", "0"])
        self.assertIn("Read-only file system", r.out, r.describe())

    def test_a_plain_bind_of_the_node_is_nodev_and_useless(self):
        # What --gpu fixes: the same node through --bind cannot be opened (nodev), as the issue saw
        # with nvidia-smi ("Insufficient Permissions").
        node = os.path.join(GPU_HOST, "discovery", "dev", "nvidia0")
        r = self.run_gpu("echo hi > /mnt 2>&1 || echo OPEN_FAILED", ["--bind", f"{node}:/mnt:rw"])
        self.assertIn("OPEN_FAILED", r.out, r.describe())

    def test_driver_files_are_read_only_with_the_loader_path_set(self):
        # Discovery: the stand-in host's loader cache names /opt/nvidia/lib's libraries; the
        # driver's are bound read-only, libother is not a driver library.
        r = self.run_gpu("cat /opt/nvidia/lib/libcuda.so.1; echo LD=$LD_LIBRARY_PATH; ls /opt/nvidia/lib; "
                         "{ echo x > /opt/nvidia/lib/libcuda.so.1; } 2>&1; "
                         "grep ' /opt/nvidia/lib/libcuda.so.1 ' /proc/self/mountinfo", ["--gpu", "0"])
        self.assertEqual(r.rc, 0, r.describe())
        self.assertIn("stand-in libcuda", r.out)
        self.assertIn("LD=/opt/nvidia/lib\n", r.out)
        self.assertNotIn("libother", r.out)
        self.assertIn("Read-only file system", r.out)
        mount = [l for l in r.out.splitlines() if "libcuda.so.1" in l and " - " in l]
        self.assertTrue(mount and mount[0].split(" ")[5].split(",")[0] == "ro", r.describe())
        files = {f["dst"]: f for f in r.trace["enforcement"]["gpu"]["driver_files"]}
        self.assertEqual(sorted(files), ["/opt/nvidia/lib/libcuda.so.1", "/opt/nvidia/lib/libnvidia-ml.so.1"])
        self.assertFalse(any(f["rw"] for f in files.values()))

    def test_trace_names_the_gpus(self):
        r = self.run_gpu("true", ["--gpu", "GPU-66666666"])
        self.assertEqual(r.rc, 0, r.describe())
        g = r.trace["enforcement"]["gpu"]
        self.assertEqual(g["granted_by"], "discovery")
        self.assertEqual(g["driver_version"], "550.54.15")
        self.assertEqual(g["devices"], [{"index": 1, "minor": 1, "uuid": "GPU-66666666-7777-8888-9999-000000000000",
                                         "name": "NVIDIA Stand-in H200", "bus_id": "0000:02:00.0"}])
        self.assertEqual([n["path"] for n in g["nodes"]], ["/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm",
                                                            "/dev/nvidia-uvm-tools"])
        self.assertEqual(g["nodes"][0]["mode"], "0666")
        self.assertIn("no GPU memory or compute limit", g["not_isolated"])
        self.assertIsNone(r.trace["usage"]["gpu"]["memory_peak_bytes"])
        self.assertIn("not sampled", r.trace["usage"]["gpu"]["memory_reason"])
        self.assertEqual(r.trace["invocation"]["spec"]["gpu"], {"devices": "GPU-66666666", "max": 1})

    def test_profile_ceiling_refuses_with_the_layers_named(self):
        r = self.run_gpu("true", ["--gpu", "0,1"])
        self.assertEqual(r.rc, 125, r.describe())
        line = r.err.strip().splitlines()[-1]
        self.assertTrue(line.startswith("sbx: "), r.describe())
        self.assertIn("flag --gpu asks for 2 GPUs (0,1); profile 'untrusted' allows at most 1", line)
        r = self.run_gpu("true", ["--gpu", "all"])  # two GPUs on this stand-in host
        self.assertEqual(r.rc, 125, r.describe())
        self.assertIn("asks for 2 GPUs (all)", r.err)
        r = self.run_gpu("true", ["--gpu", "0", "--profile", "browser"])  # no gpu.max: none
        self.assertEqual(r.rc, 125, r.describe())
        self.assertIn("sbx's defaults (profile 'browser' sets no gpu.max) allows at most 0", r.err)
        r = self.run_gpu("ls /dev | grep -c '^nvidia[0-9]'", ["--gpu", "all", "--profile", "trusted"])
        self.assertEqual(r.rc, 0, r.describe())
        self.assertEqual(r.out.strip(), "2")

    def test_cdi_spec_is_applied_and_its_hooks_listed(self):
        r = self.run_gpu("ls /dev | grep nvidia | tr '\\n' ' '; echo; echo $SBX_CDI_STANDIN; /opt/nvidia/bin/nvidia-smi; "
                         "echo x > /dev/nvidia1 && echo WRITE_OK", ["--gpu", "GPU-66666666-7777-8888-9999-000000000000"],
                         tree="cdi")
        self.assertEqual(r.rc, 0, r.describe())
        self.assertEqual(r.out.splitlines()[0].split(), ["nvidia-uvm", "nvidia1", "nvidiactl"])
        self.assertIn("yes", r.out)
        self.assertIn("stand-in nvidia-smi", r.out)
        self.assertIn("WRITE_OK", r.out)
        g = r.trace["enforcement"]["gpu"]
        self.assertEqual(g["granted_by"], "cdi")
        self.assertTrue(g["cdi_spec"].endswith("/etc/cdi/nvidia.json"))
        self.assertEqual(g["devices"][0]["uuid"], "GPU-66666666-7777-8888-9999-000000000000")
        notes = "\n".join(g["notes"])
        self.assertIn("CDI hook not run: \"createContainer\"", notes)
        self.assertIn("other.yaml skipped", notes)
        r = self.run_gpu("true", ["--gpu", "1"], tree="cdi")
        self.assertEqual(r.rc, 125, r.describe())
        self.assertIn("has no device of that name", r.err)

    def test_memory_without_cgroup_is_not_capped_by_rlimits_and_require_limits_refuses(self):
        r = self.run_gpu("cat /proc/self/limits | grep -E 'Max data size|Max file size'", ["--gpu", "0", "--memory", "64M"])
        self.assertEqual(r.rc, 0, r.describe())
        if r.trace["enforcement"]["cgroup"].startswith("v2"):
            self.skipTest("this host gives sbx a cgroup v2 memory controller: the fallback is not in play")
        not_applied = {l["limit"]: l for l in r.trace["enforcement"]["limits_not_applied"]}
        self.assertIn("memory", not_applied)
        self.assertIn("Host memory is NOT bounded", not_applied["memory"]["reason"])
        self.assertIn("NOT applied", r.err)
        for line in r.out.splitlines():
            self.assertIn("unlimited", line, r.out)  # no RLIMIT_DATA/RLIMIT_FSIZE
        r = self.run_gpu("true", ["--gpu", "0", "--memory", "64M", "--require-limits"])
        self.assertEqual(r.rc, 125, r.describe())
        self.assertIn("memory", r.err)

    def test_bad_requests(self):
        for bad, why in (("zero", "bad GPU 'zero'"), ("0,", "bad GPU ''"), ("7", "--gpu 7: no such GPU")):
            r = self.run_gpu("true", ["--gpu", bad, "--profile", "trusted"])
            self.assertEqual(r.rc, 125, r.describe())
            self.assertIn(why, r.err)
            self.assertEqual(len(r.err.strip().splitlines()), 1, r.describe())


if __name__ == "__main__":
    unittest.main()
