#!/usr/bin/env python3
"""in_userns.py MAP -- COMMAND...: runs COMMAND as root of a new user namespace whose uid_map and
gid_map are MAP (extents "INSIDE OUTSIDE COUNT" separated by commas), as a pod with `hostUsers:
false` or a podman --uidmap container gives its processes. `unshare --map-users` would need
newuidmap (package uidmap), which CI hosts need not have: as root we write the maps ourselves.
Exits with COMMAND's status; the namespace vanishes with COMMAND's processes.
IN_USERNS_GROUPS=GID[,GID...]: COMMAND keeps these host supplementary groups (set before the
namespace is made, as a container runtime may leave them) instead of none.
IN_USERNS_SETGROUPS=deny: the namespace denies setgroups(2), as `unshare -r` makes it."""
import ctypes
import os
import sys

CLONE_NEWUSER = 0x10000000


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: in_userns.py 'INSIDE OUTSIDE COUNT[,...]' -- COMMAND...")
    id_map = "".join(e.strip() + "\n" for e in sys.argv[1].split(","))
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    groups = [int(g) for g in os.environ.get("IN_USERNS_GROUPS", "").split(",") if g]
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        os.close(go_w)
        if groups:
            os.setgroups(groups)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWUSER) != 0:
            os.write(2, f"in_userns: unshare: {os.strerror(ctypes.get_errno())}\n".encode())
            os._exit(125)
        os.write(ready_w, b"1")
        if os.read(go_r, 1) != b"1":
            os._exit(125)
        # Root of the new namespace, with no supplementary group the namespace cannot name.
        if not groups:
            os.setgroups([])
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)
        os.execvp(sys.argv[3], sys.argv[3:])
    os.close(ready_w)
    os.close(go_r)
    if os.read(ready_r, 1) != b"1":
        os.waitpid(pid, 0)
        sys.exit(125)
    if os.environ.get("IN_USERNS_SETGROUPS") == "deny":
        with open(f"/proc/{pid}/setgroups", "w") as f:
            f.write("deny")
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{name}", "w") as f:
            f.write(id_map)
    os.write(go_w, b"1")
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status) & 0xff)


if __name__ == "__main__":
    main()
