#!/bin/sh
# Container entrypoint for sbx (deploy/Containerfile). With SBX_CGROUP_INIT=1 it first moves the
# container's processes out of its cgroup namespace root into /sys/fs/cgroup/init and enables the
# memory, pids and cpu controllers there (`sbx cgroup-init`), so that every `sbx run` in this
# container gets real cgroup v2 limits. Without it, sbx runs with rlimit fallbacks and says so.
# Needs a writable cgroup v2 mount (deploy/README.md explains the pod settings).
set -eu
if [ "${SBX_CGROUP_INIT:-0}" = 1 ]; then
  # Prints "nothing to do" (exit 0) where the container shares the host's cgroup namespace.
  if ! sbx cgroup-init; then
    # Not fatal: sbx still runs, with the rlimit fallback, and records that in every trace.
    echo "sbx-entrypoint: sbx cgroup-init failed; limits fall back to rlimits (see: sbx doctor)" >&2
  fi
fi
exec "$@"
