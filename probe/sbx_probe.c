/* sbx-probe: the boundary probes `sbx probe` runs inside a sandbox (cli/probe_cmd.cpp).
 *
 * Plain C, linked statically, so that it needs nothing from the sandbox's root: it runs on the
 * host-assembled root and on a busybox image alike. sbx carries its bytes (cli/probe_blob.cpp) and
 * binds them read-only into the sandbox for the probe run.
 *
 * Output, one line per probe on stdout:  P <TAB> name <TAB> held|breached|skipped <TAB> evidence
 * and "END" when every probe ran. Evidence is plain ASCII (printable() here); sbx escapes it again
 * before it reaches a terminal, since a breached sandbox may write anything to this stream.
 *
 * argv: sbx-probe TOKEN HOST_MARKER LOOPBACK_PORT HOST_PID PIDS_LIMIT MEMORY_LIMIT_BYTES [KEY VALUE]...
 *       (limits: 0 = none configured; KEY VALUE pairs: see main)
 *
 * Besides results, "I <TAB> key <TAB> value" lines carry facts the host side judges after the run
 * (this sandbox's pid namespace, the byte count of a declared secret).
 *       sbx-probe survive TOKEN   (the termination probe's survivor, re-executed under this name)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *token;

static void result(const char *name, const char *status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void result(const char *name, const char *status, const char *fmt, ...) {
  char ev[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ev, sizeof ev, fmt, ap);
  va_end(ap);
  for (char *p = ev; *p; ++p)
    if (*p < 0x20 || *p > 0x7e) *p = '?';
  printf("P\t%s\t%s\t%s\n", name, status, ev);
  fflush(stdout);
}

/* Appends to a bounded evidence buffer; a full buffer ends in "...". */
static void add(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(char *buf, size_t cap, const char *fmt, ...) {
  size_t n = strlen(buf);
  if (n + 4 >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + n, cap - n, fmt, ap);
  va_end(ap);
  if (w < 0 || (size_t)w >= cap - n) strcpy(buf + cap - 4, "...");
}

static size_t read_file(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t n = 0;
  ssize_t r;
  while (n + 1 < cap && (r = read(fd, buf + n, cap - 1 - n)) > 0) n += (size_t)r;
  close(fd);
  buf[n] = 0;
  return n;
}

/* ---- file system ---- */

static void probe_host_marker(const char *marker) {
  struct stat st;
  if (stat(marker, &st) == 0)
    result("fs.host_files", "breached", "a file sbx probe made on the host is visible: %s", marker);
  else if (access("/etc/shadow", R_OK) == 0)
    result("fs.host_files", "breached", "the host's /etc/shadow is readable");
  else
    result("fs.host_files", "held", "host marker %s: %s; /etc/shadow not readable", marker, strerror(errno));
}

/* One mountinfo line's fields we need. */
struct mnt {
  char point[256], opts[128], fstype[32], source[128];
};

static int next_mount(FILE *f, struct mnt *m) {
  char line[2048];
  while (fgets(line, sizeof line, f)) {
    /* id parent maj:min root point opts [optional...] - fstype source superopts */
    char *save = NULL, *tok = strtok_r(line, " ", &save);
    int i = 0;
    m->point[0] = m->opts[0] = m->fstype[0] = m->source[0] = 0;
    int after_dash = -1;
    for (; tok; tok = strtok_r(NULL, " \n", &save), ++i) {
      if (i == 4) snprintf(m->point, sizeof m->point, "%s", tok);
      else if (i == 5) snprintf(m->opts, sizeof m->opts, "%s", tok);
      else if (after_dash < 0 && i > 5 && strcmp(tok, "-") == 0) after_dash = i;
      else if (after_dash > 0 && i == after_dash + 1) snprintf(m->fstype, sizeof m->fstype, "%s", tok);
      else if (after_dash > 0 && i == after_dash + 2) snprintf(m->source, sizeof m->source, "%s", tok);
    }
    if (m->point[0]) return 1;
  }
  return 0;
}

static int has_opt(const char *opts, const char *o) {
  size_t n = strlen(o);
  for (const char *p = opts; (p = strstr(p, o)); p += n)
    if ((p == opts || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
  return 0;
}

/* Scratch space the sandbox owns (dies with it) vs host-backed storage. */
static int scratch_fs(const char *fstype) {
  return !strcmp(fstype, "tmpfs") || !strcmp(fstype, "overlay") || !strcmp(fstype, "devpts") ||
         !strcmp(fstype, "mqueue") || !strcmp(fstype, "proc") || !strcmp(fstype, "sysfs");
}

static void probe_mounts(void) {
  FILE *f = fopen("/proc/self/mountinfo", "re");
  if (!f) {
    result("fs.writable", "breached", "cannot read /proc/self/mountinfo: %s", strerror(errno));
    return;
  }
  char host_rw[800] = "", scratch[400] = "", weak_flags[800] = "";
  struct mnt m;
  int n = 0;
  while (next_mount(f, &m)) {
    ++n;
    struct stat st;
    int is_dir = stat(m.point, &st) == 0 && S_ISDIR(st.st_mode);
    /* Device nodes bound one by one (/dev/null, ...) are files: fs.devices judges them. */
    if (!is_dir) continue;
    if (!has_opt(m.opts, "nosuid") || (!has_opt(m.opts, "nodev") && strcmp(m.fstype, "devpts") != 0 &&
                                       strcmp(m.point, "/dev") != 0))
      add(weak_flags, sizeof weak_flags, "%s%s (%s %s)", weak_flags[0] ? ", " : "", m.point, m.fstype, m.opts);
    if (!strcmp(m.fstype, "proc") || !strcmp(m.fstype, "devpts")) continue;
    char path[300];
    snprintf(path, sizeof path, "%s/.sbx-probe-w-%s", strcmp(m.point, "/") ? m.point : "", token);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) continue;
    close(fd);
    unlink(path);
    if (scratch_fs(m.fstype))
      add(scratch, sizeof scratch, "%s%s", scratch[0] ? " " : "", m.point);
    else
      add(host_rw, sizeof host_rw, "%s%s (%s from %s)", host_rw[0] ? ", " : "", m.point, m.fstype, m.source);
  }
  fclose(f);
  int fd = open("/proc/sys/kernel/hostname", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    add(host_rw, sizeof host_rw, "%s/proc/sys (writable)", host_rw[0] ? ", " : "");
    close(fd);
  }
  if (host_rw[0])
    result("fs.writable", "breached", "host-backed storage is writable: %s", host_rw);
  else
    result("fs.writable", "held", "%d mounts; writable only scratch space the sandbox owns: %s", n,
           scratch[0] ? scratch : "none");
  if (weak_flags[0])
    result("fs.mount_flags", "breached", "mounts without nosuid/nodev: %s", weak_flags);
  else
    result("fs.mount_flags", "held", "every mount is nosuid, and nodev except /dev and devpts");
}

static int allowed_device(unsigned maj, unsigned min) {
  if (maj == 1) return min == 3 || min == 5 || min == 7 || min == 8 || min == 9; /* null zero full random urandom */
  if (maj == 5) return min == 0 || min == 2;                                      /* tty ptmx */
  return maj == 136;                                                             /* pts */
}

static void scan_devices(const char *dir, int depth, char *bad, size_t cap, int *count) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(p, &st) != 0) continue;
    if (S_ISDIR(st.st_mode) && depth < 2) scan_devices(p, depth + 1, bad, cap, count);
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
      ++*count;
      if (!allowed_device(major(st.st_rdev), minor(st.st_rdev)))
        add(bad, cap, "%s%s (%c %u:%u)", bad[0] ? ", " : "", p, S_ISBLK(st.st_mode) ? 'b' : 'c', major(st.st_rdev),
            minor(st.st_rdev));
    }
  }
  closedir(d);
}

static void probe_devices(void) {
  char bad[800] = "";
  int count = 0;
  scan_devices("/dev", 0, bad, sizeof bad, &count);
  char node[300];
  snprintf(node, sizeof node, "/tmp/.sbx-probe-dev-%s", token);
  int made = mknod(node, S_IFCHR | 0600, makedev(1, 3)) == 0;
  int mknod_errno = errno;
  if (made) unlink(node);
  if (bad[0] || made)
    result("fs.devices", "breached", "%s%s%s", bad, bad[0] && made ? "; " : "", made ? "mknod of a device node worked" : "");
  else
    result("fs.devices", "held", "%d device nodes, all of null/zero/full/random/urandom/tty/ptmx/pts; mknod: %s", count,
           strerror(mknod_errno));
}

/* ---- processes ---- */

static void probe_processes(long host_pid) {
  DIR *d = opendir("/proc");
  int n = 0;
  char others[600] = "";
  pid_t self = getpid();
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      char *end;
      long pid = strtol(e->d_name, &end, 10);
      if (*end || pid <= 0) continue;
      ++n;
      char path[64], cmd[256];
      snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
      size_t len = read_file(path, cmd, sizeof cmd);
      for (size_t i = 0; i < len; ++i)
        if (!cmd[i]) cmd[i] = ' ';
      if (pid != self && pid != 1) add(others, sizeof others, "%s%ld:%s", others[0] ? ", " : "", pid, cmd);
    }
    closedir(d);
  }
  /* The host's `sbx run` that supervises this sandbox: its pid is not in this pid namespace. */
  int sig = kill((pid_t)host_pid, 0) == 0;
  int sig_errno = errno;
  char path[64], cmd[4096];
  snprintf(path, sizeof path, "/proc/%ld/cmdline", host_pid);
  size_t len = read_file(path, cmd, sizeof cmd);
  for (size_t i = 0; i + 1 < len; ++i)
    if (!cmd[i]) cmd[i] = ' ';
  int seen = len > 0 && strstr(cmd, token) != NULL;
  if (seen)
    result("proc.host_visible", "breached", "the host's sbx (pid %ld) is visible: %.200s", host_pid, cmd);
  else
    result("proc.host_visible", "held", "%d processes visible (pid 1 = sandbox init, self = %d)%s%s", n, (int)self,
           others[0] ? "; others: " : "", others);
  if (sig && seen)
    result("proc.signal_host", "breached", "kill(%ld, 0) reached the host's sbx", host_pid);
  else
    result("proc.signal_host", "held", "kill(host sbx pid %ld, 0): %s", host_pid, sig ? "a sandbox process of that number" : strerror(sig_errno));
}

/* ---- kernel surface ---- */

static void probe_kernel(void) {
  char status[8192];
  read_file("/proc/self/status", status, sizeof status);
  const char *s = strstr(status, "Seccomp:");
  int mode = s ? atoi(s + 8) : -1;
  if (mode == 2)
    result("sys.seccomp", "held", "Seccomp: 2 (filter) in /proc/self/status");
  else
    result("sys.seccomp", "breached", "Seccomp: %d in /proc/self/status: no system-call filter", mode);

  /* A new user namespace re-grants every capability inside it: the default policy refuses it. */
  pid_t c = fork();
  if (c == 0) _exit(unshare(CLONE_NEWUSER) == 0 ? 0 : (errno & 0x7f) + 1);
  int st = 0;
  waitpid(c, &st, 0);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
    result("sys.userns", "breached", "unshare(CLONE_NEWUSER) succeeded: a nested user namespace with full capabilities");
  else
    result("sys.userns", "held", "unshare(CLONE_NEWUSER): %s", WIFEXITED(st) ? strerror(WEXITSTATUS(st) - 1) : "killed");

  const char *e = strstr(status, "CapEff:");
  unsigned long long eff = e ? strtoull(e + 7, NULL, 16) : ~0ULL;
  /* SYS_ADMIN, NET_ADMIN, SYS_PTRACE, SYS_MODULE, SYS_RAWIO, MKNOD, SYS_BOOT, BPF, PERFMON */
  static const int dangerous[] = {21, 12, 19, 16, 17, 27, 22, 39, 38};
  char held[200] = "";
  for (size_t i = 0; i < sizeof dangerous / sizeof *dangerous; ++i)
    if (eff & (1ULL << dangerous[i])) add(held, sizeof held, "%s%d", held[0] ? "," : "", dangerous[i]);
  if (held[0])
    result("sys.capabilities", "breached", "CapEff %016llx holds capability numbers %s", eff, held);
  else
    result("sys.capabilities", "held", "CapEff %016llx: none of SYS_ADMIN, NET_ADMIN, SYS_PTRACE, SYS_MODULE, "
           "SYS_RAWIO, MKNOD, SYS_BOOT, BPF, PERFMON", eff);
}

/* ---- network ---- */

/* 0: connected; else the errno (ETIMEDOUT after `ms`). */
static int try_connect(const char *ip, int port, int ms, int *fd_out) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
  inet_pton(AF_INET, ip, &a.sin_addr);
  int r = connect(fd, (struct sockaddr *)&a, sizeof a);
  int err = r == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    if (poll(&p, 1, ms) == 1) {
      socklen_t l = sizeof err;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l);
    } else {
      err = ETIMEDOUT;
    }
  }
  if (err == 0 && fd_out) *fd_out = fd;
  else close(fd);
  return err;
}

/* CONNECT through sbx's proxy (127.0.0.1:3128 inside): the status code (0 if none), the status
 * line in `reply`. */
static int proxy_connect(const char *target, char *reply, size_t cap) {
  int fd = -1;
  snprintf(reply, cap, "(no answer)");
  int err = try_connect("127.0.0.1", 3128, 1500, &fd);
  if (err != 0) {
    snprintf(reply, cap, "proxy not reachable: %s", strerror(err));
    return 0;
  }
  int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  struct timeval tv = {.tv_sec = 5};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char req[300];
  int n = snprintf(req, sizeof req, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target);
  if (write(fd, req, (size_t)n) != n) {
    close(fd);
    return 0;
  }
  char buf[512];
  ssize_t r = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (r <= 0) return 0;
  buf[r] = 0;
  char *eol = strpbrk(buf, "\r\n");
  if (eol) *eol = 0;
  buf[cap > 1 && cap - 1 < sizeof buf ? cap - 1 : sizeof buf - 1] = 0;
  memcpy(reply, buf, strlen(buf) + 1);
  int code = 0;
  if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1) code = 0;
  return code;
}

static void probe_network(int loopback_port) {
  char ifs[4096], names[300] = "";
  read_file("/proc/net/dev", ifs, sizeof ifs);
  int others = 0;
  for (char *line = strchr(ifs, '\n'); line && (line = strchr(line + 1, '\n'));) {
    char *colon = strchr(line, ':');
    if (!colon) break;
    char name[64] = "";
    sscanf(line + 1, " %63[^:]", name);
    if (name[0]) {
      add(names, sizeof names, "%s%s", names[0] ? " " : "", name);
      if (strcmp(name, "lo") != 0) ++others;
    }
  }
  if (others)
    result("net.interfaces", "breached", "interfaces besides loopback: %s", names);
  else
    result("net.interfaces", "held", "interfaces: %s", names[0] ? names : "(none)");

  static const struct { const char *name, *ip; int port; } direct[] = {
      {"net.direct_egress", "1.1.1.1", 443},
      {"net.metadata", "169.254.169.254", 80},
      {"net.private", "10.0.0.1", 80},
  };
  for (size_t i = 0; i < sizeof direct / sizeof *direct; ++i) {
    int err = try_connect(direct[i].ip, direct[i].port, 1500, NULL);
    if (err == 0)
      result(direct[i].name, "breached", "connected to %s:%d directly", direct[i].ip, direct[i].port);
    else
      result(direct[i].name, "held", "connect %s:%d: %s", direct[i].ip, direct[i].port, strerror(err));
  }
  /* sbx probe listens on the host's 127.0.0.1:PORT; the sandbox's loopback is its own. */
  int fd = -1;
  int err = try_connect("127.0.0.1", loopback_port, 1500, &fd);
  if (err == 0) {
    close(fd);
    result("net.host_loopback", "breached", "connected to the host's 127.0.0.1:%d (sbx probe's listener)", loopback_port);
  } else {
    result("net.host_loopback", "held", "127.0.0.1:%d (sbx probe's listener on the host): %s", loopback_port, strerror(err));
  }

  /* Through sbx's proxy (network proxy mode): internal addresses stay denied whatever the allowlist. */
  const char *proxy = getenv("http_proxy");
  if (!proxy) {
    result("net.proxy_internal", "skipped", "no proxy in this configuration (network none)");
    return;
  }
  char target[64], reply[300];
  /* The metadata address: never, whatever the allowlist says about names. */
  int code = proxy_connect("169.254.169.254:80", reply, sizeof reply);
  if (code >= 200 && code < 300)
    result("net.proxy_internal", "breached", "proxy CONNECT 169.254.169.254:80 answered: %s", reply);
  else
    result("net.proxy_internal", "held", "proxy CONNECT 169.254.169.254:80 answered: %s", reply);
  /* The host's loopback through the proxy (which runs on the host): only an allowlist that names
   * a loopback address or range opens it, e.g. --allow-host 127.0.0.0/8:*. */
  snprintf(target, sizeof target, "127.0.0.1:%d", loopback_port);
  code = proxy_connect(target, reply, sizeof reply);
  if (code >= 200 && code < 300)
    result("net.proxy_host_loopback", "breached", "proxy CONNECT %s (sbx probe's listener on the host) answered: %s",
           target, reply);
  else
    result("net.proxy_host_loopback", "held", "proxy CONNECT %s (sbx probe's listener on the host) answered: %s",
           target, reply);
}

/* The allowlist, end to end (sbx probe picks the targets from the run's own rules,
 * cli/probe_cmd.cpp): each ALLOWED host:port must pass the proxy (2xx: the configuration works as
 * written; 403: the proxy refuses what the allowlist names), and for each allowed host a port the
 * rules do not name must be refused (403). Any other answer to an OTHER port (a tunnel, or a 502/504
 * from an upstream the proxy tried) means the policy let it through. */
static void probe_egress(char **allowed, int na, char **other, int no) {
  if (na == 0 && no == 0) return;
  if (!getenv("http_proxy")) {
    result("net.proxy_allowed", "skipped", "no proxy in this configuration (network none)");
    result("net.proxy_other_ports", "skipped", "no proxy in this configuration (network none)");
    return;
  }
  char ev[800] = "", reply[300];
  int passed = 0, refused = 0;
  for (int i = 0; i < na; ++i) {
    int code = proxy_connect(allowed[i], reply, sizeof reply);
    if (code >= 200 && code < 300) ++passed;
    else if (code == 403) ++refused;
    add(ev, sizeof ev, "%s%s -> %s", ev[0] ? "; " : "", allowed[i], reply);
  }
  if (refused)
    result("net.proxy_allowed", "breached", "the proxy refused an allowed host:port: %s", ev);
  else if (passed)
    result("net.proxy_allowed", "held", "allowed host:port passed the proxy: %s", ev);
  else
    result("net.proxy_allowed", "skipped", "the proxy did not refuse the allowed host:port, but no upstream answered "
           "from this host: %s", ev);
  /* What passed and what was refused, apart, so the evidence leads with what breached. */
  char open_ev[400] = "", shut_ev[400] = "";
  int open_ports = 0;
  for (int i = 0; i < no; ++i) {
    int code = proxy_connect(other[i], reply, sizeof reply);
    /* An unreachable proxy passes nothing: not an open port. */
    int open = code != 403 && strncmp(reply, "proxy not reachable", 19) != 0;
    char *to = open ? open_ev : shut_ev;
    open_ports += open;
    add(to, 400, "%s%s -> %s", to[0] ? "; " : "", other[i],
        code == 0 && !strcmp(reply, "(no answer)") ? "no answer in 5 s (not refused)" : reply);
  }
  if (no == 0)
    result("net.proxy_other_ports", "skipped", "no allowed host to try other ports of");
  else if (open_ports)
    result("net.proxy_other_ports", "breached",
           "a port other than the allowed ones passed the proxy (a rule with port * opens every port of its "
           "hosts): %s%s%s", open_ev, shut_ev[0] ? "; refused: " : "", shut_ev);
  else
    result("net.proxy_other_ports", "held", "other ports of the allowed hosts were refused: %s", shut_ev);
}

/* ---- secrets ---- */

static void probe_secret(void) {
  const char *v = getenv("SBX_PROBE_CANARY");
  if (v && *v)
    result("secret.present", "held", "SBX_PROBE_CANARY passed by name is present inside (%zu bytes)", strlen(v));
  else
    result("secret.present", "breached", "SBX_PROBE_CANARY (passed with --env-pass) is missing inside");
}

/* The secrets the run declares with --secret NAME=...: an info line per secret (its index K in the
 * run's options) with the bytes read at /run/secrets/NAME, or -errno. sbx probe compares the count
 * with the value it knows and judges "present during"; the value itself never leaves the sandbox
 * on this stream. */
static void probe_declared_secret(int k, const char *name) {
  char path[300];
  snprintf(path, sizeof path, "/run/secrets/%s", name);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    printf("I\tsecret.%d\t-%d\n", k, errno);
    fflush(stdout);
    return;
  }
  struct stat st;
  long long n = 0;
  char b[4096];
  ssize_t r;
  while ((r = read(fd, b, sizeof b)) > 0) n += r;
  int ok = fstat(fd, &st) == 0;
  close(fd);
  memset(b, 0, sizeof b);
  printf("I\tsecret.%d\t%lld\n", k, n);
  if (ok) printf("I\tsecret.%d.mode\t%04o uid %u\n", k, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
  fflush(stdout);
}

/* This sandbox's pid namespace, by inode: sbx probe looks on the host, after the run, for any
 * process still in it (nsfs inode numbers are the same seen from every namespace). */
static void report_pid_namespace(void) {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) == 0) printf("I\tpidns\t%llu\n", (unsigned long long)st.st_ino);
  fflush(stdout);
}

/* ---- limits ---- */

static void probe_pids(long limit) {
  if (limit <= 0) {
    result("limit.pids", "skipped", "no process limit configured");
    return;
  }
  long cap = limit + 32;
  pid_t kids[8192];
  long n = 0;
  int err = 0;
  while (n < cap && n < (long)(sizeof kids / sizeof *kids)) {
    pid_t c = fork();
    if (c < 0) {
      err = errno;
      break;
    }
    if (c == 0) {
      pause();
      _exit(0);
    }
    kids[n++] = c;
  }
  for (long i = 0; i < n; ++i) kill(kids[i], SIGKILL);
  for (long i = 0; i < n; ++i) waitpid(kids[i], NULL, 0);
  if (err && n < limit)
    result("limit.pids", "held", "fork failed after %ld children (limit %ld processes): %s", n, limit, strerror(err));
  else
    result("limit.pids", "breached", "%ld children forked, limit %ld processes", n, limit);
}

static void probe_memory(long long limit) {
  if (limit <= 0) {
    result("limit.memory", "skipped", "no memory limit configured");
    return;
  }
  int p[2];
  if (pipe(p) != 0) return;
  pid_t c = fork();
  if (c == 0) {
    close(p[0]);
    long long mib = 0, cap = limit / (1 << 20) + 64;
    for (; mib < cap; ++mib) {
      char *b = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (b == MAP_FAILED) break;
      memset(b, 0x5a, 1 << 20);
      if (write(p[1], "m", 1) != 1) break;
    }
    _exit(mib >= cap ? 0 : 3);
  }
  close(p[1]);
  long long got = 0;
  char buf[4096];
  ssize_t r;
  while ((r = read(p[0], buf, sizeof buf)) > 0) got += r;
  close(p[0]);
  int st = 0;
  waitpid(c, &st, 0);
  long long limit_mib = limit >> 20;
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
    result("limit.memory", "breached", "touched %lld MiB, limit %lld MiB", got, limit_mib);
  else
    result("limit.memory", "held", "allocation stopped at %lld MiB (limit %lld MiB): %s", got, limit_mib,
           WIFSIGNALED(st) ? "killed by a signal" : "mmap refused");
}

/* ---- artifact export ---- */

/* Hostile entries in /out for `--output` (which sbx probe asks for): a symlink to a host path, a
 * FIFO and a hard link. sbx probe checks on the host what the export made of them. */
static void prepare_export(void) {
  int fd = open("/out/probe-file", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int ok = fd >= 0 && write(fd, "probe\n", 6) == 6;
  if (fd >= 0) close(fd);
  ok = ok && symlink("/etc/passwd", "/out/probe-link") == 0;
  ok = ok && mkfifo("/out/probe-fifo", 0644) == 0;
  ok = ok && link("/out/probe-file", "/out/probe-hard") == 0;
  if (ok)
    result("export.prepared", "skipped", "/out holds a file, a symlink to /etc/passwd, a FIFO and a hard link");
  else
    result("export.prepared", "skipped", "could not prepare /out: %s", strerror(errno));
}

/* ---- termination ---- */

static void start_survivor(const char *self) {
  pid_t c = fork();
  if (c != 0) {
    waitpid(c, NULL, 0);
    result("term.survivor_started", "skipped", "a double-forked process ignoring SIGTERM/SIGHUP/SIGINT was left "
           "running; sbx probe checks it is gone after the run");
    return;
  }
  setsid();
  if (fork() != 0) _exit(0);
  signal(SIGTERM, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  int fd = open("/dev/null", O_RDWR);
  if (fd >= 0) {
    dup2(fd, 0);
    dup2(fd, 1);
    dup2(fd, 2);
  }
  char *argv[] = {"sbx-probe-survivor", "survive", (char *)token, NULL};
  execv(self, argv);
  for (;;) pause();
}

/* ---- tenants ---- */

/* Another tenant's resource, at the path it has inside this sandbox (sbx probe --tenant maps the
 * host path through the run's binds): held when it is absent or refused, breached when this
 * sandbox can read it (a directory it can list, a file it can read a byte of). */
static void probe_foreign(const char *label, const char *path) {
  char name[128];
  snprintf(name, sizeof name, "tenant.%s", label);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    result(name, "held", "%s: %s", path, strerror(errno));
    return;
  }
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    DIR *d = fdopendir(fd);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) ++n;
    if (d) closedir(d);
    else close(fd);
    if (n > 0) result(name, "breached", "%s: listed %d entries from inside", path, n);
    else result(name, "held", "%s: opened but holds nothing this sandbox can see", path);
    return;
  }
  char b[16];
  ssize_t r = read(fd, b, sizeof b);
  int err = errno;
  close(fd);
  if (r > 0) result(name, "breached", "%s: read %zd bytes from inside", path, r);
  else result(name, "held", "%s: %s", path, r < 0 ? strerror(err) : "empty");
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "survive")) {
    for (;;) pause();
  }
  if (argc < 7 || (argc - 7) % 2 != 0) {
    fprintf(stderr, "usage: sbx-probe TOKEN HOST_MARKER LOOPBACK_PORT HOST_PID PIDS_LIMIT MEMORY_LIMIT [KEY VALUE]...\n");
    return 2;
  }
  token = argv[1];
  probe_host_marker(argv[2]);
  probe_mounts();
  probe_devices();
  probe_processes(atol(argv[4]));
  probe_kernel();
  probe_network(atoi(argv[3]));
  probe_secret();
  report_pid_namespace();
  /* KEY VALUE pairs: "allow HOST:PORT", "other HOST:PORT", "secret NAME", or a tenant probe's
   * LABEL PATH (labels end in .store, .ledger or .fileN, never one of those words). */
  char *allowed[32], *other[32];
  int na = 0, no = 0, secrets = 0;
  for (int i = 7; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "allow")) {
      if (na < 32) allowed[na++] = argv[i + 1];
    } else if (!strcmp(argv[i], "other")) {
      if (no < 32) other[no++] = argv[i + 1];
    } else if (!strcmp(argv[i], "secret")) {
      probe_declared_secret(secrets++, argv[i + 1]);
    }
  }
  probe_egress(allowed, na, other, no);
  for (int i = 7; i + 1 < argc; i += 2)
    if (strcmp(argv[i], "allow") && strcmp(argv[i], "other") && strcmp(argv[i], "secret")) probe_foreign(argv[i], argv[i + 1]);
  probe_pids(atol(argv[5]));
  prepare_export();
  start_survivor(argv[0]);
  /* Last: with cgroup v2 and memory.oom.group the kernel may end the whole run here; sbx probe
   * then reads the run's status (oom) as the limit holding. */
  printf("MEM\n");
  fflush(stdout);
  probe_memory(atoll(argv[6]));
  printf("END\n");
  fflush(stdout);
  return 0;
}
