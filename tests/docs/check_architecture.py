#!/usr/bin/env python3
"""docs/ARCHITECTURE.md names only what exists: every repository file or folder it cites in
backquotes, and every code identifier (a snake_case function, a CamelCase type, A::b), is checked
against the tree, so a rename that leaves the document behind fails the `architecture_doc` test.

  check_architecture.py ROOT            exit 1 listing each stale name with its line, and each
                                        file of cli/ and probe/ and each runtime/ unit the document
                                        never names (a new one must get its line)
  check_architecture.py ROOT --selftest seeds a stale function, type and file into a copy of the
                                        document and exits 1 unless each of them is reported

What is not checked: kernel and libc names (ALL_CAPS constants, the syscalls and library calls the
text cites, listed in KNOWN_EXTERNAL), JSON fields and command lines (anything with a space, '-',
'.', '=' or '/' that is not a repository path), and words in plain text (only `code` spans).
"""
import os
import re
import subprocess
import sys

# Repository folders a path may start with: a path under one of them must exist.
REPO_DIRS = ("runtime/", "cli/", "tests/", "docs/", "man/", "schemas/", "bench/", "examples/",
             "profiles/", "completions/", "packaging/", ".ci/", "generated/", "tools/")
# Names from outside the repository the document cites in backquotes: kernel and libc calls,
# library types. An identifier in neither this list nor the tree is stale.
KNOWN_EXTERNAL = {
    "clone3", "pidfd_open", "pidfd_send_signal", "pivot_root", "execve", "execveat", "openat2",
    "mount_setattr", "open_tree", "move_mount", "fsopen", "fsmount", "seccomp_notify", "prctl",
    "setns", "unshare", "waitid", "close_range", "memfd_create", "signalfd", "timerfd_create",
    "sched_getaffinity", "getrlimit", "setrlimit", "prlimit", "setgroups", "capset", "umount2",
    "epoll_wait", "std::expected", "std::filesystem", "weakly_canonical", "nlohmann::json",
    "sqlite3", "libseccomp", "doctest", "spdlog", "seccomp_export_bpf", "SECCOMP_RET_USER_NOTIF",
}


def code_spans(text):
    """(line number, span) for every `code` span outside fenced blocks."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        for m in re.finditer(r"`([^`\n]+)`", line):
            yield n, m.group(1)


def classify(span):
    """('path', p), ('ident', name) or None for a span this check leaves alone."""
    s = span.strip()
    if re.search(r"[A-Z]{3,}|<", s) and "/" in s:
        return None  # a pattern with a placeholder (tests/unit/test_NAME.cpp, <state>/traces)
    if s.startswith(REPO_DIRS) and " " not in s:
        return "path", s.split(":")[0]  # runtime/x.cpp:28 names a line: the file must exist
    if re.fullmatch(r"\w[\w.-]*\.(cpp|hpp|py|sh|cmake|json)", s):
        return "file", s
    m = re.fullmatch(r"([A-Za-z_~][\w~]*(?:::[A-Za-z_~][\w~]*)*)(?:\(\))?", s)
    if not m:
        return None
    name = m.group(1)
    if "NAME" in name:
        return None  # a pattern (probe_NAME, add_NAME_command)
    if re.fullmatch(r"[A-Z0-9_]+", name.split("::")[-1]):
        return None  # a constant: the kernel's (CLONE_VM, ENOENT) as often as ours
    last = name.split("::")[-1]
    looks_code = "::" in name or "_" in last or re.search(r"[a-z][A-Z]|^[A-Z][a-z]+[A-Z]", last)
    return ("ident", name) if looks_code else None


def tree_words(root):
    """Every identifier-like word in the tracked sources and every tracked path (and its folders)."""
    files = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True, check=True).stdout.split()
    words, paths, basenames = set(), set(), set()
    for f in files:
        paths.add(f)
        basenames.add(os.path.basename(f))
        # A unit is named by its file's stem (`facility_limits`), a layer by its library (`sbx_server`).
        words.add(os.path.splitext(os.path.basename(f))[0])
        if f.startswith("runtime/") and f.count("/") == 2:
            words.add("sbx_" + f.split("/")[1])
        parts = f.split("/")
        for i in range(1, len(parts)):
            paths.add("/".join(parts[:i]) + "/")
            paths.add("/".join(parts[:i]))
        if f.startswith("docs/") or f == "tests/docs/check_architecture.py" or not re.search(r"\.(cpp|hpp|c|h|py|sh|cmake|txt|json)$|^Makefile$", f):
            continue  # the documents (and this check's seeds) do not make a name exist
        try:
            with open(os.path.join(root, f), errors="replace") as fh:
                words.update(re.findall(r"[A-Za-z_~][\w]*", fh.read()))
        except OSError:
            pass
    return words, paths, basenames


def stale_names(root, text):
    words, paths, basenames = tree_words(root)
    # A worked example's names that do not exist on purpose, declared in the document itself:
    # <!-- architecture_doc: hypothetical NAME... -->
    for m in re.finditer(r"<!-- architecture_doc: hypothetical ([^>]*?) -->", text):
        words.update(m.group(1).split())
    out = []
    for n, span in code_spans(text):
        c = classify(span)
        if not c:
            continue
        kind, name = c
        if kind == "path":
            p = name.rstrip("/")
            if "*" in p:
                import glob
                ok = bool(glob.glob(os.path.join(root, p)))
            else:
                ok = p in paths or p + "/" in paths
            if not ok:
                out.append((n, span, "no such file or folder"))
        elif kind == "file":
            if name not in basenames:
                out.append((n, span, "no file of that name"))
        elif name not in KNOWN_EXTERNAL:
            missing = [w for w in re.split(r"::", name.replace("~", "")) if w and w not in words]
            if missing:
                out.append((n, span, "not in the code: " + ", ".join(missing)))
    return out


def unnamed_units(root, text):
    """cli/ and probe/ files and runtime/ units (by stem) no `code` span of the document names."""
    files = subprocess.run(["git", "-C", root, "ls-files", "cli", "probe", "runtime"], capture_output=True,
                           text=True, check=True).stdout.split()
    spans = " ".join(span for _, span in code_spans(text))
    named = set(re.findall(r"[\w.]+", spans))
    out = []
    for f in sorted(files):
        base = os.path.basename(f)
        stem = os.path.splitext(base)[0]
        if f.startswith("runtime/") and not re.search(r"\.(cpp|hpp)$", f):
            continue  # runtime/layers.cmake and the like are named where they matter
        if base in named or stem in named or f in spans:
            continue
        # `systemd_scope.*` names both files of a unit
        if stem + ".*" in spans:
            continue
        out.append(f)
    return sorted(set(out))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    with open(os.path.join(root, "docs/ARCHITECTURE.md")) as fh:
        text = fh.read()
    if "--selftest" in sys.argv:
        seeded = ["prepare_limits_gone", "StaleLaunchKnot", "runtime/launch/no_such_unit.cpp"]
        found = {s for _, s, _ in stale_names(root, text + "\n" + " ".join(f"`{s}`" for s in seeded) + "\n")}
        missed = [s for s in seeded if s not in found]
        if missed:
            print("check_architecture selftest: seeded stale names not reported: " + ", ".join(missed))
            return 1
        print(f"check_architecture selftest: all {len(seeded)} seeded stale names reported")
        return 0
    stale = stale_names(root, text)
    for n, span, why in stale:
        print(f"docs/ARCHITECTURE.md:{n}: `{span}`: {why}")
    missing = unnamed_units(root, text)
    for f in missing:
        print(f"docs/ARCHITECTURE.md: never names {f}: give it a line where its layer or cli/ is described")
    if stale or missing:
        print(f"{len(stale)} stale name(s) and {len(missing)} unnamed file(s) in docs/ARCHITECTURE.md")
        return 1
    print("docs/ARCHITECTURE.md: every file and identifier it names exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
