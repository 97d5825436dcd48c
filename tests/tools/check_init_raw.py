#!/usr/bin/env python3
"""The shared init's rule, checked (docs/ARCHITECTURE.md, "The shared init and its rules"): the code
init runs while the supervisor may run in the same memory -- runtime/launch/init_end.cpp, init's
half of the handshake and its loop -- calls nothing but raw system calls (raw_syscall.hpp). This
lists the undefined symbols of that object with `nm -u` and refuses every one not in ALLOWED
below: an allocation (malloc, operator new), a libc wrapper (close, read, prctl: errno is
thread-local, and shared with the supervisor), logging (spdlog, fmt), std::string, stdio, TLS
(__tls_get_addr), a call of another sbx unit.

Usage:
  check_init_raw.py ARCHIVE_OR_OBJECT [MEMBER]   check MEMBER (default init_end.cpp.o) of a static
                                                 library, or an object file itself
  check_init_raw.py --self-test CXX SOURCE_DIR   proves the check refuses seeded violations and
                                                 passes a raw-only object (compiled with CXX)
Exit 0 when clean, 1 with one line per refused symbol, 2 on a usage or tool error."""
import os
import re
import subprocess
import sys
import tempfile

# Why each is allowed. Nothing here touches errno, a lock, the heap or thread-local storage.
ALLOWED = {
    # The compiler emits these for struct copies and zeroing (ChildMsg, msghdr); glibc's are pure
    # functions of their arguments.
    "memset": "compiler-emitted zeroing",
    "memcpy": "compiler-emitted copy",
    "memmove": "compiler-emitted copy",
    # -fstack-protector's failure path: it aborts the process, it does not return.
    "__stack_chk_fail": "stack protector's abort",
    # model/caps.cpp: raw::open/read/close on a stack buffer and a parser that allocates nothing
    # (caps.hpp says so); the one call of another unit init makes after the program's start.
    "sbx::read_process_caps_raw(int, sbx::ProcessCaps&)": "raw by construction (caps.cpp)",
}
# Instrumentation of sanitizer and coverage builds (make test-asan): their runtimes are what the
# build asked for, not calls the code makes.
ALLOWED_PREFIXES = ("__asan_", "__ubsan_", "__sanitizer_", "__gcov_", "__llvm_gcov", "__msan_")


def undefined_symbols(path, member):
    try:
        out = subprocess.run(["nm", "-u", "-A", "-C", path], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.stderr.write(f"check_init_raw: nm -u {path}: {e}\n")
        sys.exit(2)
    syms, seen = [], False
    for line in out.splitlines():
        # "lib.a:member.o:                 U name" for an archive, "file.o:                 U name" else
        m = re.match(r"^(.*?):\s+U (.+)$", line)
        if not m:
            continue
        where = m.group(1)
        if path.endswith(".a"):
            if not where.endswith(":" + member):
                continue
        seen = True
        syms.append(m.group(2).strip())
    if path.endswith(".a") and not seen:
        # An object with no undefined symbol at all is possible, but then the member must exist.
        names = subprocess.run(["ar", "t", path], capture_output=True, text=True).stdout.split()
        if member not in names:
            sys.stderr.write(f"check_init_raw: no member {member} in {path} (members: {' '.join(names[:20])})\n")
            sys.exit(2)
    return syms


def refused(syms):
    return [s for s in syms if s not in ALLOWED and not s.startswith(ALLOWED_PREFIXES)]


def check(path, member):
    bad = refused(undefined_symbols(path, member))
    where = f"{os.path.basename(path)}[{member}]" if path.endswith(".a") else os.path.basename(path)
    for s in bad:
        print(f"{where}: calls {s}: not a raw system call "
              "(init may share the supervisor's memory here; docs/ARCHITECTURE.md, section 3)")
    return 1 if bad else 0


RAW_OK = r'''
#include "runtime/base/raw_syscall.hpp"
#include <cstring>
struct Msg { int kind; char text[100]; };
void report(int fd, const char* s) {
  Msg m;
  std::memset(&m, 0, sizeof m);
  for (int i = 0; s[i] && i < 99; ++i) m.text[i] = s[i];
  long n;
  do n = sbx::raw::write(fd, &m, sizeof m); while (n == -4);
  sbx::raw::close(fd);
}
'''
# Each seeded violation is the clean body plus one line a careless edit could add.
SEEDED = {
    "libc close (errno)": ("#include <unistd.h>\n", "::close(fd);"),
    "malloc": ("#include <cstdlib>\n", "void* volatile p = std::malloc(16); std::free(p);"),
    "operator new": ("", "int* volatile p = new int(fd); delete p;"),
    "std::string": ("#include <string>\n", "std::string t(s); sbx::raw::write(fd, t.c_str(), t.size());"),
    "errno": ("#include <cerrno>\n", "errno = 0;"),
    "stdio": ("#include <cstdio>\n", "std::printf(\"%d\", fd);"),
    "thread_local": ("extern thread_local int tls_counter;\n", "++tls_counter;"),
}


def self_test(cxx, src):
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        def build(name, text):
            cpp, obj = os.path.join(tmp, name + ".cpp"), os.path.join(tmp, name + ".o")
            with open(cpp, "w") as f:
                f.write(text)
            r = subprocess.run([cxx, "-std=c++20", "-O2", "-fPIC", "-c", "-I", src, cpp, "-o", obj],
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.stderr.write(f"check_init_raw self-test: cannot compile {name}: {r.stderr[:800]}\n")
                sys.exit(2)
            return obj
        clean = build("clean", RAW_OK)
        bad = refused(undefined_symbols(clean, ""))
        if bad:
            print(f"self-test: the raw-only object was refused: {bad}")
            failures += 1
        for i, (what, (head, line)) in enumerate(SEEDED.items()):
            body = RAW_OK.replace("  sbx::raw::close(fd);\n", "  " + line + "\n  sbx::raw::close(fd);\n")
            obj = build(f"seeded{i}", head + body)
            bad = refused(undefined_symbols(obj, ""))
            if bad:
                print(f"self-test: seeded {what}: refused ({', '.join(bad)})")
            else:
                print(f"self-test: seeded {what}: NOT refused")
                failures += 1
    print("self-test:", "FAILED" if failures else "ok")
    return 1 if failures else 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "--self-test":
        if len(argv) != 4:
            sys.stderr.write(__doc__)
            return 2
        return self_test(argv[2], argv[3])
    if len(argv) not in (2, 3):
        sys.stderr.write(__doc__)
        return 2
    return check(argv[1], argv[2] if len(argv) == 3 else "init_end.cpp.o")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
