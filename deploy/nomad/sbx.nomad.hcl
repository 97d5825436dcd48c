# sbx under Nomad with the raw_exec driver: Nomad schedules, sbx isolates. raw_exec runs the task
# as the Nomad client's user (root) directly on the node, with no isolation of its own — sbx is
# the isolation. As root on a cgroup v2 node, sbx puts each run's cgroup under
# /sys/fs/cgroup/sbx whatever cgroup Nomad started it in, so --memory/--pids/--cpus are enforced
# by cgroup v2 (check: sbx doctor on the node). raw_exec must be enabled in the client config:
#   plugin "raw_exec" { config { enabled = true } }
# Install the static binary on each node: install -m 0755 build/sbx /usr/local/bin/sbx
job "sbx-task" {
  type = "batch"

  group "sbx" {
    count = 1

    restart {
      attempts = 0
      mode     = "fail"
    }

    task "run" {
      driver = "raw_exec"

      config {
        command = "/usr/local/bin/sbx"
        args = [
          "run", "--profile", "untrusted",
          "--memory", "256M", "--pids", "64", "--cpus", "1", "--timeout", "60s",
          "--require-limits",
          "--", "python3", "-c", "print('hello from the sandbox')",
        ]
      }

      env {
        # Traces and the ledger: one state directory per node, outside the allocation dir.
        SBX_STATE_DIR = "/var/lib/sbx"
      }

      # What Nomad reserves for the task; sbx's own flags bound each run inside it.
      resources {
        cpu    = 1000
        memory = 512
      }
    }
  }
}
