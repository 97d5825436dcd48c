# A warm template's driver (issue 34; runtime/server/mcp_template.hpp says how a template is built
# and used and why; man sbx-mcp, "Templates", what it shares). Compiled into sbx after
# runtime/model/python_main.py (its _sbx_main runs each call: cmake/embed_text.cmake) and run
# as `python3 -c DRIVER MODULE...` as the program of the template's sandbox, whose filter
# (kTemplateSeccomp) lets it unshare every namespace but a user namespace, return to its own pid
# namespace (setns) and mount, holding CAP_SYS_ADMIN and CAP_SETPCAP in the sandbox's user namespace.
#
# It becomes pid 1 of a pid namespace of its own (_pid_no_call_has), imports the preload list
# once, says "ready" (or "failed WHY") on stdout, then serves calls
# on /run/sbx-template/sock: for each, a call's supervisor (`sbx mcp-worker`, sandbox.cpp
# spawn_from_template) connects and sends, in one message, "call" and the call's one-time token
# (KEY_DIGEST says why), init's ends of its handshake
# (handshake.hpp) and a memfd holding the job (JSON, a newline, then the files' bytes). The driver
# forks the call's pid 1 straight into a pid namespace of its own (_fork_pid1), which plays init's
# part of the protocol for a call made of fresh mount, network, ipc, uts and cgroup namespaces too,
# and reaps it when it ends (_Calls); the template itself never runs a call's code and never holds
# a call's data past the fork. One interpreter process besides the call's program per call made
# at once, none per call forked ahead (whose pid 1 execs `sbx template-pid1` once its program is
# forked: _pooled_pid1): each is ~1 MiB of pages of its own and ~750 copy-on-write faults
# (bench/README.md).
import ctypes, json, os, select, signal, socket, struct, sys
# Imported once here, not in each call's pid 1 (each import was ~0.5 ms of a call's start:
# bench/README.md, Templates): random is reseeded in every call (_reseed). What _sbx_main
# (python_main.py) needs is made ready in main(), _sbx_ready.
import codecs, gc, hashlib, hmac, io, random, resource, time

_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x08000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 4, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
CAP_SETPCAP, CAP_SYS_ADMIN = 8, 21
SYS_seccomp, SYS_capset, SYS_close_range = 317, 126, 436
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER = 1, 8
K_SETUP_ERROR, K_PROGRAM_STATUS, K_STARTED, K_WARM_READY = 1, 2, 3, 4
CHILD_MSG = 488  # sizeof(ChildMsg), handshake.hpp: kind@0, err@4, wait_status@8, stage[32]@12, body@48
FD_NAMES = ("job", "sync", "msg", "out_sock", "listener_sock", "out", "err", "exe")
CONTROL_DIR = "/run/sbx-template"
MAX_JOB_BYTES = 64 << 20  # the job's memfd: the server's own bound on a call's request is lower
BOUNDING_DROP_ORDER = []  # main(): every capability, CAP_SETPCAP last
FORK_TRIES, FORK_RETRY_S = 50, 0.02  # _fork_pid1: a call's fork waits at most 1 s for a process slot
# The calls whose pid 1 lives, forked ahead or running (_Calls): a server has at most 256 in
# flight (--max-concurrent) and 64 pooled (mcp_pool.hpp, kMaxPooledSandboxes); two fds each.
MAX_LIVE_CALLS = 512
KNOBS = 0  # stage times on stderr when the job asks for them ("trace"): bench/README.md
# main(): as root (SBX_TEMPLATE_PEERS=unmapped, mcp_template.cpp template_spec) the calls' workers
# are host root, whom this user namespace does not map (the kernel's overflow uid here): a
# connection of anyone else's is dropped unread. The control directory was the sandbox's host
# uid's until the server sealed it, and that uid is every default sandbox's: one that reached it
# could have queued a job of its own before then (rootless the workers and the caller's sandboxes
# are one uid, and no such check can tell them apart: man sbx-mcp).
PEER_UID = None
# Who may have a job forked (rootless the uid that reaches the control directory is every
# sandbox's of the caller's too, so no peer check tells the server's workers apart): the server
# itself proves it once, on the first connection that carries the template's key ("ctl" KEY),
# whose SHA-256 alone this driver is given (KEY_DIGEST, from SBX_TEMPLATE_KEY_SHA256, a secret of
# the template's run: mcp_template.cpp, serve_template_host). That connection (CTL) is then the
# server's, and the key is spent. For each call the server makes a one-time token, gives it to
# the call's worker, and sends its SHA-256 on CTL (PENDING); a job is forked only with a pending
# token after its "call" (sandbox.cpp, send_to_template), which it spends. Whatever of these a
# call finds in its memory (the template's, at its fork) is spent or a digest: nothing a sandbox
# that reaches the socket could use.
KEY_DIGEST = None
CTL = None
PENDING = {}  # digest -> None, oldest first
MAX_PENDING = 4096  # tokens of calls whose workers never came (died) are let go, oldest first


class _Fail(Exception):
    def __init__(self, stage, what, err=None):
        super().__init__(what)
        self.stage, self.err = stage, err if err is not None else ctypes.get_errno()


def _check(rc, stage, what):
    if rc != 0:
        raise _Fail(stage, what)


def _mount(src, dst, fstype, flags, data, stage, what):
    _check(_libc.mount(src and src.encode(), dst.encode(), fstype and fstype.encode(), flags,
                       data and data.encode()), stage, what)


def _child_msg(kind, err=0, wait_status=0, stage="", body=b""):
    head = struct.pack("<Iii32s", kind, err, wait_status, stage.encode()[:31])
    return (head + b"\0" * 4 + body).ljust(CHILD_MSG, b"\0")


def _setup_error(fd, err, stage, what):
    # A setup error of the call (K_SETUP_ERROR), its text cut to the message's body, which keeps a
    # closing NUL (CHILD_MSG less its 48-byte head).
    text = what if isinstance(what, bytes) else what.encode()
    _report(fd, _child_msg(K_SETUP_ERROR, err, 0, stage, text[:CHILD_MSG - 49]))


def _report(fd, msg):
    # A report to the call's worker, which may be gone (it ended the call, or discarded a pooled
    # fork): then there is no one left to tell.
    try:
        os.write(fd, msg)
    except OSError:
        pass


def _send_fd(sock_fd, fd, tag):
    s = socket.socket(fileno=os.dup(sock_fd))
    try:
        socket.send_fds(s, [tag], [fd])
    finally:
        s.close()


_T = []


def _mark(what):
    if KNOBS:
        _T.append((what, time.monotonic_ns()))


def _caps_sets():
    sets = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
                sets[k] = int(v, 16)
    return [sets[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")]


def _drop_bounding(caps):
    for cap in caps:
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise _Fail("capabilities", f"drop capability {cap} from the bounding set")


CAPSET_HEADER = struct.pack("<Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
CAPSET_NONE = ctypes.create_string_buffer(24)  # every set empty


def _drop_caps():
    # CAP_SETPCAP (8) last: dropping from the bounding set needs it.
    _drop_bounding(BOUNDING_DROP_ORDER)
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "capabilities", "clear the ambient set")
    _check(_libc.syscall(SYS_capset, ctypes.c_char_p(CAPSET_HEADER), CAPSET_NONE), "capabilities", "capset")


def _install_filter(bpf):
    buf = ctypes.create_string_buffer(bpf, len(bpf))
    prog = struct.pack("<HxxxxxxQ", len(bpf) // 8, ctypes.addressof(buf))
    fd = _libc.syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, ctypes.c_char_p(prog))
    if fd < 0:
        raise _Fail("seccomp", "install the call's filter")
    return fd


def _set_rlimits(job):
    # The job's limits, never above this process's hard limit (the template's, set when it was
    # built: sandbox.cpp fixed_rlimits and the profile's), which no process here may raise: a
    # call planned after the server's own limits rose gets the template's instead of failing.
    for res, value in job.get("rlimits", []):
        value = resource.RLIM_INFINITY if value >= (1 << 63) else value
        hard = resource.getrlimit(res)[1]
        if hard != resource.RLIM_INFINITY and (value == resource.RLIM_INFINITY or value > hard):
            value = hard
        resource.setrlimit(res, (value, value))


def _reseed():
    # Every generator a preload seeded at import, from the kernel: the template's state is shared
    # by every call forked from it, so without this each call would draw the same numbers.
    # Generators a preload made for itself (numpy's default_rng() kept in a module) are not
    # reached: each call draws what the template's drew. Those that notice a fork by a changed
    # getpid() reseed themselves (OpenSSL's): no call's process has the template's pid
    # (_pid_no_call_has). Python's hash secret cannot be reseeded (it is fixed when the interpreter starts): the man
    # page, sbx-mcp(1), says why that does not cross calls.
    random.seed()
    np = sys.modules.get("numpy")
    if np is not None and hasattr(np, "random"):
        np.random.seed()  # from the kernel, the generator's whole state
    # The key a process's multiprocessing connections authenticate with, drawn at import.
    mp = sys.modules.get("multiprocessing.process")
    if mp is not None:
        mp.current_process().authkey = os.urandom(32)


def _cover_proc(masks, covers):
    # As a cold sandbox's /proc (mounts.cpp, cover_proc_entry): the masked entries covered by an
    # empty read-only file or directory, /proc/sys read-only. The covers live on the control
    # directory's tmpfs, which pid 1 made and left mode 0 (no way in for the call, nor for pid 1
    # once it has no CAP_DAC_OVERRIDE): they are reached through the O_PATH fds it kept.
    for m in masks:
        if not os.path.lexists(m):
            continue
        cover = f"/proc/self/fd/{covers['dir' if os.path.isdir(m) else 'file']}"
        _mount(cover, m, None, MS_BIND | MS_REC, None, "proc", "cover " + m)  # the filter takes recursive binds only
        _mount(None, m, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, None, "proc",
               "cover " + m + " read-only")
    _mount("/proc/sys", "/proc/sys", None, MS_BIND | MS_REC, None, "proc", "bind /proc/sys")
    _mount(None, "/proc/sys", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, None, "proc",
           "/proc/sys read-only")


def _bound_sysv_ipc(knobs):
    # As a cold sandbox's init (child.cpp bound_sysv_ipc): without a memory cgroup the call's ipc
    # namespace's SysV limits bound its shared memory, message queues and semaphores by the memory
    # limit; /proc/sys turns read-only after (_cover_proc). A refused write fails the call.
    for name, value in knobs:
        path = "/proc/sys/kernel/" + name
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, (value + "\n").encode())
            finally:
                os.close(fd)
        except OSError as e:
            raise _Fail("sysv_shm", f"write {path} (the run's SysV IPC cap; needs Linux 5.17+)", e.errno)


def _call_pid1(job, fds, report):
    # First: no process of the call, which runs as pid 1's uid, may open pid 1's fds (its report
    # pipe) or memory through /proc/1 (child.cpp makes a cold sandbox's init non-dumpable for the
    # same reason).
    _check(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "init", "make pid 1 non-dumpable")
    sync, out_w, err_w, listener_sock = fds["sync"], fds["out"], fds["err"], fds["listener_sock"]
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None, "proc", "mount /proc")
    _bound_sysv_ipc(job.get("sysv", []))
    _cover_proc(job.get("proc_masks", []), fds["covers"])
    _mark("proc")
    host = job.get("hostname", "sbx").encode()
    _check(_libc.sethostname(host, len(host)), "hostname", "sethostname")
    os.setsid()
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    if job.get("umask", -1) >= 0:
        os.umask(job["umask"])
    if job.get("pooled"):
        _pooled_pid1(job, fds, report)
    _set_rlimits(job)
    _drop_caps()
    _mark("caps")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs", "prctl")
    bpf = bytes.fromhex(job.get("filter", ""))
    if not bpf:
        raise _Fail("seccomp", "the job carries no filter", 22)
    listener = _install_filter(bpf)
    _send_fd(listener_sock, listener, b"L")
    os.close(listener)
    _mark("filter")
    if os.read(sync, 1) != b"s":
        os._exit(125)
    _mark("s")
    os.write(report, _child_msg(K_STARTED, body=struct.pack("<5QIxxxxq", *_caps_sets(), 1, 0)))
    # As a cold sandbox's init: pid 1 reaps, and the call is its child (pid 2), whose end it
    # reports with its usage; every other process of the call dies with pid 1. From the fork on,
    # pid 1 takes its signals one by one (_reap) and the program has them blocked until its code
    # starts (_run_main); the signals held before (_hold) are the program's to take then.
    signal.pthread_sigmask(signal.SIG_BLOCK, _REAPED)
    held = len(_HELD)
    program = os.fork()
    if program != 0:
        _reap(program, report, held, sync)
    _program_signals()
    # Only 0, 1 and 2 reach the call.
    if _libc.syscall(SYS_close_range, 3, 0xFFFFFFFF, 0) != 0:
        os._exit(125)
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as a program after its execve, its fds closed first
    _reseed()
    _mark("reseed")
    if _T:
        t0 = _T[0][1]
        os.write(2, (" ".join(f"{w}:{(t - t0) / 1e6:.2f}" for w, t in _T) + "\n").encode())
    os.chdir(job.get("workdir") or "/")
    os.environ.clear()
    os.environ.update(e.split("=", 1) for e in job.get("env", []) if "=" in e)
    _run_main(job["argv"], _HELD[:held])


def _open_beneath(dst, dirs):
    # The parent directory of dst, opened component by component from its top directory (one
    # of dirs), each made if missing and none followed if it is a link (as init's openat2 with
    # RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS: pool_job.cpp); returns (its fd, the file's name).
    top = next(d for d in dirs if dst.startswith(d + "/"))
    names = dst[len(top) + 1:].split("/")
    fd = os.open(top, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    for name in names[:-1]:
        try:
            os.mkdir(name, 0o755, dir_fd=fd)
        except FileExistsError:
            pass
        try:
            sub = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        finally:
            os.close(fd)
        fd = sub
    return fd, names[-1]


def _write_beneath(dst, mode, content, dirs):
    # One of a call's files, new (O_EXCL), below its top directory and never through a link
    # (_open_beneath), with its mode past the umask.
    parent, name = _open_beneath(dst, dirs)
    try:
        fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    finally:
        os.close(parent)


def _pooled_program(job, fds, report, gate_r, ready_w, held):
    # A pooled call's program, forked by pid 1 before the call exists: everything of its start
    # that does not depend on the call is done here, so that the call's own start is pid 1
    # writing its files and this process reading its argv. Until then it runs no code but the
    # driver's: it gives up its capabilities, sets the call's rlimits, reseeds, enters the
    # profile's working directory and environment (a pooled call cannot change either:
    # pool_refusal), installs the call's filter, and waits on gate_r. After the filter it makes
    # only the system calls a call made on demand makes after its own (sendmsg, write, close,
    # dup2, close_range, prctl, read, and _run_main's kill and rt_sigprocmask): nobody answers
    # the filter's notifications before the hand-out.
    try:
        _program_signals()
        _drop_caps()
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs", "prctl")
        # The call's rlimits are the program's (as a cold init's: child.cpp sets them in the
        # program only): pid 1 reads and writes the call's job under none of them.
        _set_rlimits(job)
        _reseed()
        os.chdir(job.get("workdir") or "/")
        os.environ.clear()
        os.environ.update(e.split("=", 1) for e in job.get("env", []) if "=" in e)
        _rehearse_main()
        ready = b"r" + struct.pack("<5Q", *_caps_sets())
        bpf = bytes.fromhex(job.get("filter", ""))
        if not bpf:
            raise _Fail("seccomp", "the job carries no filter", 22)
        listener = _install_filter(bpf)
        _send_fd(fds["listener_sock"], listener, b"L")
        os.close(listener)
        _mark("filter")
        os.write(ready_w, ready)
    except _Fail as e:
        _setup_error(report, e.err, e.stage, str(e))
        os._exit(125)
    # Only 0, 1, 2 and the gate (as 3) reach the call's code; the gate is closed before it runs.
    if gate_r != 3:
        os.dup2(gate_r, 3)
    if _libc.syscall(SYS_close_range, 4, 0xFFFFFFFF, 0) != 0:
        os._exit(125)
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as a program after its execve (its pid 1 is not)
    argv = _read_argv(3)
    os.close(3)
    if not argv:  # pid 1 ended without the call: nothing to run
        os._exit(125)
    _mark("call")
    if _T:
        t0 = _T[0][1]
        os.write(2, (" ".join(f"{w}:{(t - t0) / 1e6:.2f}" for w, t in _T) + "\n").encode())
    _run_main(argv, _HELD[:held])


def _read_argv(fd):
    # The call's argv from the gate, NUL-terminated words, until EOF. Read a page at a time: a
    # read of 1 MiB made Python map (and fault in) a buffer of that size for each call.
    data = b""
    while True:
        b = os.read(fd, 4096)
        if not b:
            break
        data += b
    return [os.fsdecode(a) for a in data.split(b"\0")[:-1]]


def _pooled_pid1(job, fds, report):
    # Pid 1 of a pooled call (man sbx-mcp, Templates): forks the program ahead of the call
    # (_pooled_program), then becomes `sbx template-pid1` (runtime/launch/template_pid1.hpp),
    # which says the sandbox is ready once the program is (K_WARM_READY, as a cold pool's prepared
    # interpreter: warm_start.hpp), waits for the call ("s" and its job on the sync pipe:
    # pool_job.hpp), writes its files, makes their directories read-only, gives up its own
    # capabilities, releases the program and reaps it. What it keeps until then is CAP_SYS_ADMIN
    # and CAP_SETPCAP (ambient, so that they cross the exec), for that remount and that drop;
    # the rest of its bounding set goes now, before the call. Exec'd rather than waiting here, a
    # fork made ahead holds ~1 MiB less of its own for as long as it waits (bench/README.md).
    sync = fds["sync"]
    gate_r, gate_w = os.pipe()
    ready_r, ready_w = os.pipe()
    signal.pthread_sigmask(signal.SIG_BLOCK, _REAPED)  # taken by template-pid1, across the exec
    held = len(_HELD)
    program = os.fork()
    if program == 0:
        os.close(gate_w)
        os.close(ready_r)
        _pooled_program(job, fds, report, gate_r, ready_w, held)
    os.close(gate_r)
    os.close(ready_w)
    os.close(fds["listener_sock"])
    _drop_bounding([c for c in BOUNDING_DROP_ORDER if c not in (CAP_SETPCAP, CAP_SYS_ADMIN)])
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs", "prctl")
    exe = fds["exe"]
    keep = (report, sync, gate_w, ready_r)
    _close_all_but(exe, *keep)
    for fd in keep:
        os.set_inheritable(fd, True)
    os.set_inheritable(exe, False)
    argv = ["sbx", "template-pid1", *map(str, keep), str(program), *map(str, _HELD[held:])]
    try:
        os.execve(exe, argv, {})
    except OSError as e:
        raise _Fail("pool", f"exec sbx template-pid1 (the sbx binary must be executable by the sandbox's user): "
                            f"{e.strerror}", e.errno)


def _rusage_bytes(usage):
    return struct.pack("<qqqq14q", int(usage.ru_utime), int(usage.ru_utime % 1 * 1e6),
                       int(usage.ru_stime), int(usage.ru_stime % 1 * 1e6), usage.ru_maxrss, usage.ru_ixrss,
                       usage.ru_idrss, usage.ru_isrss, usage.ru_minflt, usage.ru_majflt, usage.ru_nswap,
                       usage.ru_inblock, usage.ru_oublock, usage.ru_msgsnd, usage.ru_msgrcv, usage.ru_nsignals,
                       usage.ru_nvcsw, usage.ru_nivcsw)


# The signals sbx forwards into a sandbox (runtime/base/signals.cpp, forwarded_signals): the
# worker sends them to pid 1, and pid 1 to the call's program's process group (_reap), as a cold
# sandbox's init does.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
# Pid 1 is its pid namespace's init: the kernel drops a signal sent to it from outside unless it
# has a handler or blocks it. Until pid 1 forks the program, the forwarded signals are held here
# (_hold) and the program takes them as its code starts (_run_main), as a cold init holds them for
# its program; from the fork on, pid 1 blocks them and takes them in _reap.
_HELD = []


def _hold(signum, _frame):
    if len(_HELD) < 64:
        _HELD.append(signum)


# The worker's "end the call now" (handshake.hpp, kEndSandboxSignal: a limit reached): pid 1
# kills every other process of the call, reaps them and reports the program's end with the
# whole tree's usage, as a cold init does (init_end.cpp). Blocked in pid 1 from its start, so
# that it waits for _reap (as a namespace's init, pid 1 would otherwise drop it). It only wakes
# pid 1: the end itself is the worker's byte on the sync pipe (_end_requested).
END_SIGNAL = 64
_REAPED = {signal.SIGCHLD, END_SIGNAL, *FORWARDED}


def _program_signals():
    # The program, just forked: its own session and process group (as a cold program's: pid 1
    # signals the group), and the interpreter's default dispositions. Its mask stays as pid 1's
    # (the forwarded signals blocked) until its code starts: _run_main empties it.
    os.setsid()
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _finish(program, report, status):
    # Every other process of the call killed and reaped, then the program's status reported with
    # the whole tree's usage (RUSAGE_CHILDREN), as a cold init's report (init_end.cpp).
    # status: the program's wait status if it was reaped, else SIGKILL's, unless it is read here.
    try:
        os.kill(-1, signal.SIGKILL)  # from a pid namespace's init: every process of it but pid 1
    except ProcessLookupError:
        pass  # none left
    while True:
        try:
            pid, ws = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == program:
            status = ws
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    os.write(report, _child_msg(K_PROGRAM_STATUS, 0, status, "", _rusage_bytes(usage)))
    os._exit(0)


def _end_requested(sync):
    # The worker's end: its byte on the sync pipe, written before its signal (supervisor.cpp,
    # end_sandbox), or the pipe hung up (the worker is gone). Unlike a cold init, pid 1 shares
    # the call's uid, so the call can send it the end signal too, and fill its queue of pending
    # signals, where the worker's then only sets the pending bit and is taken with the call's
    # (or the call's own, queued without a sender, reads as the worker's): the signal cannot
    # say who asked. No process of the call holds the pipe: the programs close it before their
    # code starts.
    return bool(sync.poll(0))


def _close_all_but(*keep):
    # close_range(2) around the fds kept: a few system calls, not one per fd.
    lo = 0
    for fd in sorted(keep):
        if fd > lo:
            _libc.syscall(SYS_close_range, lo, fd - 1, 0)
        lo = fd + 1
    _libc.syscall(SYS_close_range, lo, 0xFFFFFFFF, 0)


def _reap(program, report, held, sync_fd):
    # Pid 1 of the call: reaps every orphan until the program ends, then ends the rest and
    # reports (_finish) and exits, which ends the call's pid namespace. Exit 0 tells the template,
    # which reaps it (_Calls), that the report is made. Its signals, blocked since the program's
    # fork, are taken one by one (sigwaitinfo); the worker's end is looked for after each (the
    # end signal wakes it) and after each orphan reaped (a fork bomb's zombies cannot hold it
    # back); the forwarded ones that come from outside go to the program's group. Those held
    # since `held` (a handler's run delayed past the block) are forwarded first.
    for sig in _HELD[held:]:
        _forward(program, sig)
    # Its streams too: the output ends when the call's processes close theirs. Kept: the report
    # pipe and the sync pipe, whose byte is the worker's end.
    _close_all_but(report, sync_fd)
    sync = select.poll()
    sync.register(sync_fd, select.POLLIN)
    while True:
        # What has ended so far (a SIGCHLD before the block was dropped: its default).
        while True:
            if _end_requested(sync):
                _finish(program, report, signal.SIGKILL)
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                os._exit(1)
            if pid == 0:
                break
            if pid == program:
                _finish(program, report, status)
        info = signal.sigwaitinfo(_REAPED)
        if info.si_signo not in (signal.SIGCHLD, END_SIGNAL) and info.si_pid == 0:
            _forward(program, info.si_signo)


def _forward(program, sig):
    # To the program's process group; once that is gone, to the program (harmless: its end is
    # decided), as init_end.cpp does.
    try:
        os.killpg(program, sig)
    except OSError:
        try:
            os.kill(program, sig)
        except OSError:
            pass


# What a rehearsal runs (_rehearse_main): the commonest things a call's first lines do.
_REHEARSAL = b"""import os, sys
def f(x, *a, **k):
    return [x, (a, k), {'x': x}, f'{x!r} {len(a)}', x * 2.5]
print(f(1, 'a', k=b'b'), file=sink)
"""


def _plain_stdout(out):
    # Python's own stdout on fd 1, as it made it: its classes, no attribute a preload set on them
    # (a write hooked to a log, which could leave the rehearsal's line in a file the call would
    # find), and UTF-8, whose encoder keeps no state a print could use up (utf-8-sig's or
    # utf-16's BOM, written once, would go to /dev/null and be missing from the call's output).
    try:
        raw = out.buffer if type(out.buffer) is io.FileIO else out.buffer.raw
        return (type(out) is io.TextIOWrapper and type(out.buffer) in (io.BufferedWriter, io.FileIO)
                and type(raw) is io.FileIO and not out.closed and raw.fileno() == 1
                and codecs.lookup(out.encoding).name == "utf-8"
                and all(set(vars(o)) <= {"mode", "name"} for o in {out, out.buffer, raw}))
    except Exception:
        return False


def _rehearse_main():
    # What _read_argv, _run_main and _sbx_main do up to and with the call's code, run once on
    # nothing of the call's, in a module thrown away after: on this machine each page that code
    # writes for the first time after the fork is a ~10 us copy-on-write fault (reference counts
    # of the interpreter's own objects, the compiler's and the allocator's pages), and a call's
    # first line met ~40 of them without it (bench/README.md, Templates and Spawn).
    r, w = os.pipe()
    try:
        os.write(w, os.fsencode(sys.executable) + b"\0/code/main.py\0")  # a call's argv, its sizes too
        os.close(w)
        w = -1
        argv = _read_argv(r)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    # _run_main's: sys.argv replaced, sys.path[0] set (and put back: a `-c` call keeps the
    # driver's, as `python3 -c` has it), its closure made and called.
    sys.argv = argv[1:]
    if sys.path:
        first = sys.path[0]
        sys.path[0] = os.path.dirname(os.path.abspath(argv[1]))
        sys.path[0] = first
    start = _starter((), signal.SIG_BLOCK)  # _run_main's, but the mask stays as it is

    # _sbx_main's: the call's module in sys.modules (the driver's put back), its file read.
    main = _sbx_module(argv[1])
    driver = sys.modules["__main__"]
    sys.modules["__main__"] = main
    sys.modules["__main__"] = driver
    start()
    _sbx_read(os.devnull)
    # The code, printing through the call's own sys.stdout (its objects and buffer), with fd 1 on
    # /dev/null until that is flushed: nothing of it reaches the call's output (_plain_stdout says
    # when that holds; otherwise the print goes to a buffer thrown away). A failure here fails
    # this fork made ahead (_call) before any call could see it.
    out = sys.stdout
    plain = _plain_stdout(out)
    main.sink = out if plain else io.StringIO()
    saved, null = os.dup(1), os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.dup2(null, 1)
        exec(compile(_REHEARSAL, argv[1], "exec", dont_inherit=True), main.__dict__)
        if plain:
            out.flush()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)
    main.__dict__.clear()


def _run_main(argv, held=()):
    # The call as `python3 FILE ARGS` or `python3 -c CODE ARGS` would run it, in a fresh __main__,
    # and its end as theirs (python_main.py, _sbx_main, which this driver's text follows).
    # held: signals forwarded to the call before its program existed, taken as its code starts,
    # with every other that came meanwhile (blocked until now: _program_signals).
    if len(argv) >= 3 and argv[1] == "-c":
        path, source, sys.argv = "<string>", argv[2], ["-c"] + argv[3:]
    elif len(argv) >= 2:
        path, source, sys.argv = argv[1], None, argv[1:]
        sys.path[0] = os.path.dirname(os.path.abspath(path))
    else:
        os.write(2, b"sbx: template: a call needs a program (python3 FILE or -c CODE)\n")
        os._exit(125)

    _sbx_main(path, source, _starter(held, signal.SIG_SETMASK))


def _starter(held, how):
    # What runs as the call's code starts (_sbx_main's `start`): the signals held for it sent to
    # itself, then its mask emptied (how=SIG_SETMASK). The rehearsal runs the same code, with
    # nothing held and SIG_BLOCK of nothing, which leaves the mask as it is.
    def start():
        for sig in held:
            os.kill(os.getpid(), sig)
        signal.pthread_sigmask(how, [])

    return start


def _fresh_mounts(job, files):
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None, "mounts", "make / private")
    # The control directory: never the call's to reach. An empty tmpfs over it, which holds the
    # covers of /proc's masked entries (_cover_proc), read-only and mode 0 once they are made.
    _mount("tmpfs", CONTROL_DIR, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=16k,mode=0755", "mounts",
           "hide " + CONTROL_DIR)
    os.mkdir(CONTROL_DIR + "/cover")
    os.mkdir(CONTROL_DIR + "/cover/dir", 0o555)
    os.close(os.open(CONTROL_DIR + "/cover/file", os.O_CREAT | os.O_WRONLY, 0o444))
    covers = {k: os.open(CONTROL_DIR + "/cover/" + k, os.O_PATH) for k in ("dir", "file")}
    os.chmod(CONTROL_DIR, 0)
    _mount(None, CONTROL_DIR, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=16k,mode=0",
           "mounts", "hide " + CONTROL_DIR + " read-only")
    # The call's own scratch, as a cold sandbox's (mount_plan.cpp): /tmp, /dev/shm, the profile's
    # tmpfs, /out; its own ptys.
    # A pooled call's /code and /in (pool_job.hpp, kPoolDirs): empty, writable to pid 1 only
    # until the call's files are in them (_pooled_pid1).
    for d in job.get("pool_dirs", []):
        _mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, f"size={job['pool_dir_bytes']},mode=755", "mounts",
               "tmpfs " + d)
    for t in job.get("tmpfs", []):
        flags = MS_NOSUID | MS_NODEV | (MS_NOEXEC if t.get("noexec") else 0)
        options = f"size={max(t['size'], 4096)},nr_inodes={t['inodes']},mode={t['mode']:o}"
        _mount("tmpfs", t["dst"], "tmpfs", flags, options, "mounts", "tmpfs " + t["dst"])
    if os.path.isdir("/dev/pts"):
        _mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, job["devpts"], "mounts", "devpts")
    # The call's files (/code/main.py, /in/input.json, ...): each top directory a tmpfs of its
    # own, read-only once they are written, as a cold sandbox's generated files are.
    tops = {}
    for f in files:
        top = "/" + f["dst"].strip("/").split("/")[0]
        tops[top] = tops.get(top, 0) + len(f["bytes"]) + 4096
    for top, size in tops.items():
        _mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size + 65536},mode=755", "mounts", "tmpfs " + top)
    for f in files:
        _write_beneath(f["dst"], f["mode"], f["bytes"], list(tops))
    for top in tops:
        _mount(None, top, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None, "mounts", top + " read-only")
    return covers


def _call(job, files, fds):
    # The call's pid 1, forked by the template into a pid namespace of its own (_fork_pid1): its
    # other namespaces and its mounts, then init's part for the call (_call_pid1). Its wait
    # status is the template's to read (_Calls); a setup error is reported here.
    report = fds["msg"]
    try:
        _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP), "namespaces",
               "unshare")
        _mark("unshare")
        fds["covers"] = _fresh_mounts(job, files)
        _mark("mounts")
        out_dir = os.open("/out", os.O_PATH | os.O_DIRECTORY)
        _send_fd(fds["out_sock"], out_dir, b"O")
        os.close(out_dir)
        _mark("g")
        _call_pid1(job, fds, report)
    except _Fail as e:
        _setup_error(report, e.err, e.stage, str(e))
    except BaseException as e:
        _setup_error(report, 71, "template", repr(e))
    os._exit(125)


def _read_job(fd):
    # JSON, a newline, then each file's bytes in the order the JSON lists them.
    size = os.fstat(fd).st_size
    if size > MAX_JOB_BYTES:
        raise ValueError("the job is larger than the template reads")
    data = os.pread(fd, size, 0)
    head, _, body = data.partition(b"\n")
    job = json.loads(head)
    files, at = [], 0
    for f in job.pop("files", []):
        n = int(f["size"])
        if n < 0 or at + n > len(body) or not f["dst"].startswith("/") or ".." in f["dst"].split("/"):
            raise ValueError("a file of the job is out of bounds")
        files.append({"dst": f["dst"], "mode": int(f["mode"]) & 0o777, "bytes": body[at:at + n]})
        at += n
    return job, files


# The template's own pid namespace (main(): opened before any preload), which it returns to after
# each call's fork (_fork_pid1, _back_to_own_pidns).
_OWN_PIDNS = -1
_IN_FORK = False


def _back_to_own_pidns():
    # os.fork()'s first after_in_parent hook (registered before any preload's, which run after
    # it): while the template's namespace for children is a call's, it can start no thread (the
    # kernel refuses CLONE_THREAD then), so a preload's hook that starts one runs after this.
    global _IN_FORK
    if not _IN_FORK:
        return
    _IN_FORK = False
    if _libc.setns(_OWN_PIDNS, CLONE_NEWPID) != 0:
        # A template whose next fork would land in a call's namespace serves no more.
        os.write(2, b"sbx: template: cannot return to its own pid namespace\n")
        os._exit(1)


def _fork_pid1():
    # The call's pid 1: the template's next child after unshare(CLONE_NEWPID) is pid 1 of a new
    # pid namespace; setns back to the template's own (_back_to_own_pidns, as the fork returns in
    # the parent, failed or not) makes the one after it a process of the template's namespace
    # again, ready for the next call's unshare (the kernel allows one per namespace for children).
    # Without run cgroups every call's processes count against RLIMIT_NPROC of the template's user
    # (man sbx-mcp, Templates), and a call's pid namespace is still being torn down when its
    # worker has its report: the previous call's fork bomb, up to its pids limit, can make this
    # fork fail for a moment. EAGAIN is retried for up to FORK_TRIES * FORK_RETRY_S, each try
    # with a namespace of its own.
    global _IN_FORK
    for attempt in range(FORK_TRIES):
        _check(_libc.unshare(CLONE_NEWPID), "namespaces", "unshare pid")
        _IN_FORK = True
        pid = -1
        try:
            pid = os.fork()
        except BlockingIOError:
            if attempt == FORK_TRIES - 1:
                raise
            time.sleep(FORK_RETRY_S)
            continue
        finally:
            if pid != 0:  # in the parent: done already by the hook, unless a preload's hook raised
                _back_to_own_pidns()
        _IN_FORK = False
        return pid


class _Calls:
    # The calls whose pid 1 lives, each (pid, its pidfd, its report pipe): the template is pid
    # 1's parent. When pid 1 ends it is reaped (event); when the call's worker goes away (the
    # report pipe has no reader) pid 1 is killed, and with it the call's pid namespace.
    def __init__(self, listener):
        self.poll = select.poll()
        self.poll.register(listener, select.POLLIN)
        self.by_fd = {}  # pidfd or report fd -> [pid, pidfd, report]

    def __len__(self):
        return len(self.by_fd) // 2

    def add(self, pid, report):
        call = [pid, os.pidfd_open(pid), report]
        self.by_fd[call[1]] = self.by_fd[report] = call
        self.poll.register(call[1], select.POLLIN)
        self.poll.register(report, 0)  # a pipe's write end: POLLERR when no reader is left

    def event(self, fd, ev):
        call = self.by_fd.get(fd)
        if call is None:
            return
        pid, pidfd, report = call
        if fd == report:
            self.poll.unregister(report)
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except OSError:
                pass
            return
        try:
            got, status, usage = os.wait4(pid, os.WNOHANG)
        except ChildProcessError:  # reaped by someone else (never: SIGCHLD is ours): no status
            got, status, usage = pid, signal.SIGKILL, None  # read as killed: nothing reported
        if got != pid:
            return
        # Exit 0: pid 1 reported the program's end. SIGKILL: killed (by the worker, which then
        # decides the call's end, or by the kernel's OOM killer, which the run cgroup's events
        # tell), as a cold init's end without a report is read (outcome.cpp). Any other end is
        # pid 1's own failure, reported as the call's end.
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0) and \
                not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
            _report(report, _child_msg(K_PROGRAM_STATUS, 0, status, "", _rusage_bytes(usage)))
        for f in (pidfd, report):
            try:
                self.poll.unregister(f)
            except KeyError:
                pass
            del self.by_fd[f]
            os.close(f)

    def close_in_child(self):
        for f in list(self.by_fd):
            os.close(f)


def _take_key_digest():
    # The key's SHA-256, never the key: the template's memory is every call's (a fork's).
    digest = os.environ.pop("SBX_TEMPLATE_KEY_SHA256", "")
    try:
        return bytes.fromhex(digest) if len(digest) == 64 else None
    except ValueError:
        return None


def _spend_token(data):
    # A call's job: "call" and a pending token, spent now.
    if data[:4] != b"call":
        return False
    digest = hashlib.sha256(data[4:]).hexdigest().encode()
    if digest not in PENDING:
        return False
    del PENDING[digest]
    return True


def _server_hello(conn, data, calls):
    # The server's control connection ("ctl" KEY), once: the key is spent.
    global KEY_DIGEST, CTL
    if KEY_DIGEST is None or data[:3] != b"ctl" or \
            not hmac.compare_digest(hashlib.sha256(data[3:]).digest(), KEY_DIGEST):
        return False
    KEY_DIGEST = None
    CTL = conn
    CTL.setblocking(False)
    calls.poll.register(CTL, select.POLLIN)
    return True


def _drain_ctl(calls):
    # The digests of the calls' tokens, one message each; the server's end gone: no more calls.
    global CTL
    while CTL is not None:
        try:
            msg = CTL.recv(128)
        except BlockingIOError:
            return
        except OSError:
            msg = b""
        if not msg:
            calls.poll.unregister(CTL)
            CTL.close()
            CTL = None
            return
        if len(msg) == 64:
            PENDING[msg] = None
            while len(PENDING) > MAX_PENDING:
                del PENDING[next(iter(PENDING))]


def _accept(listener, calls):
    # One connection per call: init's ends of its handshake and its job. A connection that sends
    # nothing in time is dropped: the loop never waits long on one call.
    try:
        conn, _ = listener.accept()
    except OSError:  # out of fds or memory for a moment: the connection waits in the backlog
        time.sleep(0.01)
        return
    if PEER_UID is not None:
        _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid != PEER_UID:
            conn.close()
            return
    got = []
    data = b""
    try:
        conn.settimeout(2)
        data, got, _, _ = socket.recv_fds(conn, 256, len(FD_NAMES))
    except OSError:
        pass
    if not got and _server_hello(conn, data, calls):
        return
    conn.close()
    _drain_ctl(calls)  # the digest of this call's token was sent before its worker could connect
    # Spent first, whatever else is wrong with the message: no valid token is left in memory
    # that the next fork would copy while its digest is still pending.
    spent = _spend_token(data)
    if len(got) != len(FD_NAMES) or not spent:
        for fd in got:
            os.close(fd)
        return
    fds = dict(zip(FD_NAMES, got))
    gate = ()
    try:
        if len(calls) >= MAX_LIVE_CALLS:
            raise OSError(11, f"the template has {MAX_LIVE_CALLS} calls already")
        gate = os.pipe()
        pid = _fork_pid1()
    except (OSError, _Fail) as e:
        # Out of processes or memory (a call's fork bomb, without a run cgroup of its own,
        # counts against the template's user): this call fails, the template serves on.
        err = e.err if isinstance(e, _Fail) else (e.errno or 11)
        _setup_error(fds["msg"], err, "template", "fork the call: " + str(e))
        for fd in got + list(gate):
            os.close(fd)
        return
    gate_r, gate_w = gate
    if pid == 0:
        try:
            _pid1_start(listener, calls, gate_r, gate_w, fds)
        finally:
            os._exit(125)  # never back into the template's loop
    os.close(gate_r)
    try:
        calls.add(pid, fds["msg"])
    except OSError as e:  # out of fds: the fork, which has run nothing yet, goes at once
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        _setup_error(fds["msg"], e.errno or 24, "template", "watch the call's pid 1")
    else:
        del fds["msg"]  # the call's now (_Calls), until its pid 1 is reaped
        try:
            pidfd = os.pidfd_open(pid)
            try:
                _send_fd(fds["out_sock"], pidfd, b"I")
            finally:
                os.close(pidfd)
        except OSError:
            pass  # without its pidfd the worker gives up the call and closes its ends: pid 1 is killed
    os.close(gate_w)
    for fd in fds.values():
        os.close(fd)


def _pid1_start(listener, calls, gate_r, gate_w, fds):
    # The call's pid 1, just forked. It dies with the template and holds nothing of the
    # template's or of another call's; it runs nothing until its pidfd is the worker's (the gate).
    global KNOBS
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    signal.pthread_sigmask(signal.SIG_BLOCK, [END_SIGNAL])
    for sig in FORWARDED:
        signal.signal(sig, _hold)
    if os.getpid() != 1:  # not a pid namespace of its own: never a call's
        os._exit(125)
    listener.close()
    if CTL is not None:
        CTL.close()  # the server's: never a call's
    os.close(_OWN_PIDNS)
    calls.close_in_child()
    os.close(gate_w)
    os.read(gate_r, 1)
    os.close(gate_r)
    # The supervisor's go: it has moved us into the call's run cgroup, so that reading the job
    # and writing its files are charged to the call, not to the template.
    if os.read(fds["sync"], 1) != b"g":
        os._exit(125)
    try:
        job, files = _read_job(fds["job"])
    except Exception as e:
        _setup_error(fds["msg"], 22, "template", "the job: " + str(e))
        os._exit(125)
    os.close(fds["job"])
    KNOBS = 1 if job.get("trace") else 0
    _mark("pid1")
    _call(job, files, fds)


def _serve(listener):
    # The calls as they come (_accept) and the pid 1s of those under way (_Calls). Pid 1's pidfd
    # goes back on the call's out socket ('I') before pid 1 may run (a gate): the supervisor
    # signals and watches it, and reads its pid from the pidfd.
    # Each pid 1 is reaped by the template (_Calls), and each pid 1 reaps its call (_reap, with
    # this disposition inherited), whatever a preload made of SIGCHLD.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    calls = _Calls(listener)
    # Two fds per live call, within the template's own fd limit (a profile may lower it).
    global MAX_LIVE_CALLS
    MAX_LIVE_CALLS = max(1, min(MAX_LIVE_CALLS, (resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 64) // 2))
    while True:
        # The calls' ends first: a late report of pid 1's end must reach its worker promptly
        # (supervisor.cpp waits for it while the pipe is open), and an accept may take up to 2 s.
        ready = calls.poll.poll()
        for fd, ev in ready:
            if CTL is not None and fd == CTL.fileno():
                _drain_ctl(calls)
            elif fd != listener.fileno():
                calls.event(fd, ev)
        if any(fd == listener.fileno() for fd, _ in ready):
            _accept(listener, calls)


def _pid_no_call_has():
    # From here on the template is pid 1 of a pid namespace of its own, a pid that no process of
    # a call can have (each call's pid 1 is sbx's, _pid1_start; its program is 2, the rest above).
    # Libraries notice a fork by a changed getpid(), and do nothing else about it: OpenSSL's
    # generator reseeds only then, tempfile's names likewise. As pid 2, the template shared its
    # pid with every call's program, so a preload that had drawn from OpenSSL (tornado.netutil
    # makes an SSL context at import) gave every call the same ssl.RAND_bytes and the same
    # private keys (tests/integration/test_mcp_template.py). The process that was the program
    # waits for it and ends as it does; the template dies with it (PR_SET_PDEATHSIG).
    _check(_libc.unshare(CLONE_NEWPID), "namespaces", "unshare the template's own pid namespace")
    pid = os.fork()
    if pid == 0:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        return
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 125)


def main():
    # The server reads this process's stdout for "ready" or "failed WHY" (mcp_template.cpp): only
    # the driver writes there. What the preloads print goes nowhere.
    say = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # sys.stdout keeps fd 1: a call's pid 1 points it at the call's stdout
    os.close(null)

    def fail(why):
        say.write("failed " + why.replace("\n", " ")[:1000] + "\n")
        say.flush()
        os._exit(1)

    global PEER_UID, KEY_DIGEST
    KEY_DIGEST = _take_key_digest()
    if KEY_DIGEST is None:
        fail("no template key's digest in its environment (SBX_TEMPLATE_KEY_SHA256): a template is started by sbx mcp")
    if os.environ.pop("SBX_TEMPLATE_PEERS", "") == "unmapped":
        with open("/proc/sys/kernel/overflowuid") as f:
            PEER_UID = int(f.read())
    if not (hasattr(os, "pidfd_open") and hasattr(socket, "recv_fds")):
        fail('the image\'s python3 is older than 3.9 (no os.pidfd_open, socket.recv_fds): use "mode": "pool"')
    try:
        _pid_no_call_has()
    except _Fail as e:
        fail(f"{e}: errno {e.err}")
    # The socket first, then the control directory read-only: nothing the preloads do can leave
    # files in it (it is a directory of the host's).
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(CONTROL_DIR + "/sock")
    listener.listen(64)
    try:
        _mount(None, CONTROL_DIR, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, None,
               "mounts", CONTROL_DIR + " read-only")
    except _Fail as e:
        fail(f"{e}: errno {e.err}")
    # The bounding set each call's pid 1 empties, read once.
    global BOUNDING_DROP_ORDER
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    BOUNDING_DROP_ORDER = [c for c in range(last + 1) if c != 8] + [8]
    # Before any preload: its own pid namespace, and the hook that returns to it first.
    global _OWN_PIDNS
    _OWN_PIDNS = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    os.register_at_fork(after_in_parent=_back_to_own_pidns)
    for m in sys.argv[1:]:
        try:
            __import__(m)
        except BaseException as e:
            fail(f"preload {m!r}: {type(e).__name__}: {e}")
    sys.stdout.flush()
    # What each call's _sbx_main needs (its modules, the compiler's state): made once here, it
    # is every fork's, shared, rather than made again in each call's program.
    _sbx_ready()
    # Every object so far (the driver's, the preloads') is left out of the collector's passes,
    # in the template and in every fork: a pass writes to each object it scans, and each write
    # copies a page that the forks would otherwise share (the gc module's advice for fork
    # without exec). None of them is garbage: the template holds them for its life.
    gc.freeze()
    say.write("ready\n")
    say.close()
    _serve(listener)


if __name__ == "__main__":
    main()
