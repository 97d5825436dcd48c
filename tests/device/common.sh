# shellcheck shell=bash disable=SC2034  # AS_USER is for the sourcing script
# Shared by the device scripts (run-all.sh, limits-check.sh): sourced, not run.

# as_user_prefix UID: sets AS_USER to the prefix that runs a command as UID with no supplementary
# groups (setpriv, or python where it is missing); a command, not a function, so that it can
# follow `exec` in a shell.
as_user_prefix() {
  if command -v setpriv >/dev/null; then AS_USER=(setpriv --reuid="$1" --regid="$1" --clear-groups)
  else AS_USER=(python3 -c 'import os, sys; os.setgroups([]); os.setgid(int(sys.argv[1])); os.setuid(int(sys.argv[1])); os.execvp(sys.argv[2], sys.argv[2:])' "$1")
  fi
}

# delegate_cgroup DIR UID: makes the cgroup DIR and delegates it to UID as systemd's Delegate=yes
# does: the directory and its cgroup.procs, cgroup.subtree_control and cgroup.threads chowned.
delegate_cgroup() {
  mkdir -p "$1" && chown "$2:$2" "$1" "$1/cgroup.procs" "$1/cgroup.subtree_control" "$1/cgroup.threads"
}

# remove_cgroup_tree DIR: the cgroups below DIR bottom-up, then DIR; 1 when DIR is left.
remove_cgroup_tree() {
  find "$1" -mindepth 1 -depth -type d -exec rmdir {} \; 2>/dev/null
  rmdir "$1" 2>/dev/null
}
