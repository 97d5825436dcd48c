/* Attacks that a sandboxed program must not get away with.
 *
 *   attack NAME      runs one attack, prints "NAME: blocked (...)" or "NAME: SUCCEEDED (...)"
 *   attack handoff-forge ADDR
 *                    sendmsg from code mapped at ADDR (hex: the address right after the `syscall`
 *                    instruction), on fds 0-1023; blocked when the policy refused every call
 *                    with EACCES (the test's policy: sendmsg -> SCMP_ACT_ERRNO, errnoRet 13)
 *
 * Exit status: 0 when the attack was blocked, 1 when it succeeded, 2 on bad usage. An attack the
 * seccomp policy answers with a kill never returns: sbx then reports seccomp_violation (159).
 * Built by tests/integration/test_seccomp.py with the host's cc; plain C, no libraries. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

static int result(const char* name, long rc) {
  if (rc < 0) {
    printf("%s: blocked (errno %d: %s)\n", name, errno, strerror(errno));
    return 0;
  }
  printf("%s: SUCCEEDED (returned %ld)\n", name, rc);
  return 1;
}

static long status_field(const char* key) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  size_t n = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, key, n) == 0 && line[n] == ':') v = strtol(line + n + 1, NULL, 16);
  if (f) fclose(f);
  return v;
}

/* sbx's seccomp filter once allowed sendmsg on its hand-off fd from the one `syscall` instruction
 * of its own hand-off stub (seccomp_data.instruction_pointer), and sbx is linked without PIE, so
 * that address is the same in every run. A program maps "mov $46, %eax; syscall; ret" so that the
 * `syscall` ends exactly there, and calls sendmsg through it on every fd the hand-off fd could be. */
static int handoff_forge(const char* addr_text) {
  uintptr_t after = (uintptr_t)strtoull(addr_text, NULL, 16);
  static const unsigned char code[] = {0xb8, 46, 0, 0, 0, 0x0f, 0x05, 0xc3};  /* mov; syscall; ret */
  uintptr_t start = after - 7;
  uintptr_t page = start & ~(uintptr_t)4095;
  void* m = mmap((void*)page, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (m != (void*)page) {
    printf("handoff-forge: cannot map 0x%lx (errno %d: %s)\n", (unsigned long)page, errno, strerror(errno));
    return 3;
  }
  memcpy((void*)start, code, sizeof code);
  if (mprotect(m, 8192, PROT_READ | PROT_EXEC) != 0) {
    printf("handoff-forge: mprotect (errno %d: %s)\n", errno, strerror(errno));
    return 3;
  }
  long (*forged)(long, const struct msghdr*, long) = (long (*)(long, const struct msghdr*, long))start;
  char byte = 'x';
  struct iovec iov = {&byte, 1};
  struct msghdr mh = {0};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  int refused = 0, through = 0;
  for (long fd = 0; fd < 1024; fd++) {
    long rc = forged(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (rc == -EACCES) {
      refused++;
    } else {
      if (!through) printf("handoff-forge: fd %ld: sendmsg got past the policy (returned %ld)\n", fd, rc);
      through++;
    }
  }
  if (through) {
    printf("handoff-forge: SUCCEEDED (%d of 1024 calls not refused by the policy)\n", through);
    return 1;
  }
  printf("handoff-forge: blocked (%d of 1024 calls refused by the policy)\n", refused);
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  if (argc == 3 && !strcmp(argv[1], "handoff-forge")) return handoff_forge(argv[2]);
  if (argc != 2) {
    fprintf(stderr, "usage: attack NAME\n");
    return 2;
  }
  const char* a = argv[1];
  if (!strcmp(a, "flood-then-escape")) {
    /* Hide the real attempts behind 1,100 distinct junk calls (numbers no kernel has, each a new
     * (arch, number, action) entry), then try mount, ptrace and bpf: the trace must still name
     * them, and say how many refused calls it did not list. */
    for (long nr = 5000; nr < 6100; nr++) syscall(nr, 0, 0, 0);
    int blocked = 0;
    blocked += mount("none", "/tmp", "tmpfs", 0, NULL) < 0;
    blocked += ptrace(PTRACE_TRACEME, 0, NULL, NULL) < 0;
    blocked += syscall(SYS_bpf, BPF_MAP_CREATE, NULL, 0) < 0;
    printf("flood-then-escape: %s (%d of 3 refused)\n", blocked == 3 ? "blocked" : "SUCCEEDED", blocked);
    return blocked == 3 ? 0 : 1;
  }
  if (!strcmp(a, "mount")) return result(a, mount("none", "/tmp", "tmpfs", 0, NULL));
  if (!strcmp(a, "umount2")) return result(a, umount2("/proc", MNT_DETACH));
  if (!strcmp(a, "unshare")) return result(a, unshare(CLONE_NEWUSER));
  if (!strcmp(a, "clone-newuser")) {
    long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
    if (pid == 0) _exit(0);
    if (pid > 0) waitpid((pid_t)pid, NULL, 0);
    return result(a, pid);
  }
  if (!strcmp(a, "setns")) {
    int fd = open("/proc/self/ns/net", O_RDONLY);
    if (fd < 0) return result("setns (open /proc/self/ns/net)", -1);
    return result(a, setns(fd, CLONE_NEWNET));
  }
  if (!strcmp(a, "ptrace")) {
    /* Two children: the first attaches to its sibling. */
    pid_t victim = fork();
    if (victim == 0) {
      pause();
      _exit(0);
    }
    pid_t tracer = fork();
    if (tracer == 0) {
      long rc = ptrace(PTRACE_ATTACH, victim, NULL, NULL);
      _exit(result("ptrace (attach to sibling)", rc));
    }
    int ws = 0;
    waitpid(tracer, &ws, 0);
    kill(victim, SIGKILL);
    waitpid(victim, NULL, 0);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 1;
  }
  if (!strcmp(a, "keyctl")) return result(a, syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3 /* session */, 1));
  if (!strcmp(a, "bpf")) {
    union bpf_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.map_type = BPF_MAP_TYPE_ARRAY;
    attr.key_size = 4;
    attr.value_size = 4;
    attr.max_entries = 1;
    return result(a, syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr));
  }
  if (!strcmp(a, "perf_event_open")) {
    struct perf_event_attr pe;
    memset(&pe, 0, sizeof pe);
    pe.type = PERF_TYPE_SOFTWARE;
    pe.size = sizeof pe;
    pe.config = PERF_COUNT_SW_CPU_CLOCK;
    pe.exclude_kernel = 1;
    return result(a, syscall(SYS_perf_event_open, &pe, 0, -1, -1, 0));
  }
  if (!strcmp(a, "kexec_load")) return result(a, syscall(SYS_kexec_load, 0, 0, NULL, 0));
  if (!strcmp(a, "open_by_handle_at")) {
    struct {
      unsigned int handle_bytes;
      int handle_type;
      unsigned char f_handle[8];
    } fh = {8, 1, {2, 0, 0, 0, 0, 0, 0, 0}}; /* the root inode of most filesystems ("shocker") */
    return result(a, syscall(SYS_open_by_handle_at, AT_FDCWD, &fh, O_RDONLY));
  }
  if (!strcmp(a, "inotify")) {
    /* A watch on the host's read-only /usr would show what the host and every concurrent sandbox
     * open there (another run's imports, another user's compiler): an inotify instance must not
     * be had, by either call, and a watch not be added (an fd that is no inotify instance: the
     * kernel's own answer would be EINVAL, the policy's is EPERM). */
    int bad = 0;
    long fd = syscall(SYS_inotify_init1, IN_CLOEXEC);
    bad |= result("inotify_init1", fd);
    if (fd >= 0) {
      long wd = syscall(SYS_inotify_add_watch, fd, "/usr", IN_OPEN | IN_ACCESS);
      if (wd >= 0) printf("inotify: SUCCEEDED (a watch on /usr)\n");
      close((int)fd);
    }
    long old = syscall(SYS_inotify_init);
    bad |= result("inotify_init", old);
    if (old >= 0) close((int)old);
    long wd = syscall(SYS_inotify_add_watch, 0, "/usr", IN_OPEN);
    if (wd < 0 && errno != EPERM) {
      printf("inotify_add_watch: SUCCEEDED (reached the kernel: errno %d: %s)\n", errno, strerror(errno));
      bad = 1;
    } else {
      bad |= result("inotify_add_watch", wd);
    }
    printf("inotify: %s\n", bad ? "SUCCEEDED" : "blocked");
    return bad;
  }
  if (!strcmp(a, "fanotify_init")) return result(a, syscall(SYS_fanotify_init, 0 /* FAN_CLASS_NOTIF */, O_RDONLY));
  if (!strcmp(a, "io_uring_setup")) {
    unsigned char params[120];
    memset(params, 0, sizeof params);
    return result(a, syscall(SYS_io_uring_setup, 4, params));
  }
  if (!strcmp(a, "int80")) {
    /* A 32-bit system call from a 64-bit process: getpid (i386 number 20). */
    long ret;
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory");
    if (ret < 0 && ret > -4096) {
      errno = (int)-ret;
      return result("int 0x80 getpid", -1);
    }
    return result("int 0x80 getpid", ret);
  }
  if (!strcmp(a, "x32")) {
    long ret = syscall(0x40000000L | SYS_getpid);
    return result("x32 getpid", ret);
  }
  if (!strcmp(a, "tiocsti")) {
    /* Push a character into the input queue of the terminal on fd 0 (CVE-2017-5226), once
       plainly and once with junk in the upper 32 bits of the request, which the kernel ignores. */
    char c = 'X';
    int bad = 0;
    bad |= result("tiocsti", ioctl(0, TIOCSTI, &c));
    bad |= result("tiocsti (upper bits set)", syscall(SYS_ioctl, 0, 0xdead000000000000UL | TIOCSTI, &c));
    int tty = open("/dev/tty", O_RDWR);
    if (tty >= 0) bad |= result("tiocsti (/dev/tty)", ioctl(tty, TIOCSTI, &c));
    else printf("tiocsti: /dev/tty: no controlling terminal (errno %d: %s)\n", errno, strerror(errno));
    return bad;
  }
  if (!strcmp(a, "setuid")) {
    /* Run as a setuid binary: nothing may be gained (no_new_privs, no capabilities, locked securebits). */
    uid_t r = getuid(), e = geteuid();
    long eff = status_field("CapEff"), prm = status_field("CapPrm"), bnd = status_field("CapBnd"),
         amb = status_field("CapAmb"), nnp = status_field("NoNewPrivs");
    printf("setuid: ruid=%u euid=%u CapEff=%lx CapPrm=%lx CapBnd=%lx CapAmb=%lx NoNewPrivs=%ld\n", r, e, eff, prm, bnd,
           amb, nnp);
    int gained = e != r || eff != 0 || prm != 0 || bnd != 0 || amb != 0;
    if (r != 0 && setuid(0) == 0) gained = 1;
    if (gained) {
      printf("setuid: SUCCEEDED (privilege gained)\n");
      return 1;
    }
    printf("setuid: blocked (no privilege gained%s)\n", r != 0 ? ", setuid(0) refused" : "");
    return 0;
  }
  fprintf(stderr, "attack: unknown attack '%s'\n", a);
  return 2;
}
