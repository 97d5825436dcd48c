#!/usr/bin/python3
"""Runs every example of README.md and the man pages (man/*.1, man/*.5) as written.

Usage: tests/docs/run_examples.py SBX_BINARY MODE [--list]

MODE is root or rootless (the caller's own uid: run it as the unprivileged user for rootless).
Each example block runs in a fresh directory with `sbx` on PATH; every command must exit 0, and
where the docs show output it must match (see "Output" below). Prints one line per block
("ok", "FAIL" or "skip" with the reason), then "N passed, N failed, N skipped"; exits 1 on a
failure.

Which blocks are examples:
  README.md   every ```sh fenced block;
  man pages   every .EX/.EE block in an EXAMPLE(S) section, and any other .EX block preceded by an
              `example:` marker.
Markers, on the lines just before a block (README: `<!-- example: ... -->`, roff: `.\\" example: ...`):
  example: skip REASON         not run (a network, GPU or terminal is needed): printed as skip
  example: skip-rootless REASON / skip-root REASON   the same, in that mode only
  example: setup SHELL         run first in the block's directory (which holds a copy of the
                               repository's examples/ and rootfs/); nothing it prints is compared
  example: status N            the block's last command exits N, not 0
  example: run                 marks a block outside EXAMPLES as one
Output: a command written as `$ cmd` is followed by the lines it prints (up to the next `$ ` line);
in blocks without prompts, comment lines (`# ...`) right below a command are what it prints, and
a trailing `# prints TEXT` (up to a "; " that starts a note) is the last line it prints. Other
trailing comments are explanations. "..." matches any text (also across lines); blanks do not
count (the docs wrap and indent JSON their own way); everything else must match.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 60


def roff_to_text(line):
    for a, b in (("\\-", "-"), ("\\e", "\\"), ("\\(aq", "'"), ("\\(dq", '"'), ("\\(em", "--"),
                 ("\\&", ""), ("\\fB", ""), ("\\fI", ""), ("\\fR", ""), ("\\fP", "")):
        line = line.replace(a, b)
    return line


def markdown_blocks(path):
    blocks, markers, lines, inside = [], [], None, False
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if not inside:
            m = re.match(r"<!--\s*example:\s*(.*?)\s*-->\s*$", line)
            if m:
                markers.append(m.group(1))
            elif line.startswith("```sh"):
                inside, lines, start = True, [], n
            elif line.strip():
                markers = []
        elif line.startswith("```"):
            blocks.append((f"{os.path.basename(path)}:{start}", markers, lines))
            inside, markers = False, []
        else:
            lines.append(line)
    return blocks


def roff_blocks(path):
    blocks, markers, lines, inside, section = [], [], None, False, ""
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if line.startswith(".SH"):
            section = line[3:].strip().strip('"')
        if not inside:
            m = re.match(r'\.\\"\s*example:\s*(.*?)\s*$', line)
            if m:
                markers.append(m.group(1))
            elif line.startswith(".EX"):
                inside, lines, start = True, [], n
            elif line not in (".PP", ".RS", ".RE", ".IP"):
                if not line.startswith('.\\"'):
                    markers = [] if not line.startswith(".") or line.startswith(".SH") else markers
        elif line.startswith(".EE"):
            if section in ("EXAMPLE", "EXAMPLES") or markers:
                blocks.append((f"{os.path.basename(path)}:{start}", markers, lines))
            inside, markers = False, []
        else:
            lines.append(roff_to_text(line))
    return blocks


def commands_of(lines):
    """[(command, expected output or None)] of one block."""
    joined, cur = [], ""
    for line in lines:
        if cur:
            cur += "\n" + line
        elif line.startswith("$ ") or not line.startswith("#") or not joined:
            cur = line
        else:
            joined.append(line)  # a comment line: output shown, or a note
            continue
        if cur.endswith("\\"):
            continue
        joined.append(cur)
        cur = ""
    if cur:
        joined.append(cur)
    prompts = any(j.startswith("$ ") for j in joined)
    out = []
    for j in joined:
        if prompts:
            if j.startswith("$ "):
                out.append([j[2:], []])
            elif out:
                out[-1][1].append(j)
        elif j.startswith("#"):
            if out:
                out[-1][1].append(j[1:].lstrip() if j.startswith("# ") or j == "#" else j[1:])
        elif j.strip():
            out.append([j, []])
    result = []
    for c, e in out:
        # "cmd   # prints 124; why" shows the last line the command prints.
        m = re.search(r"#\s*prints\s+(.+?)(?:;\s.*)?$", c.splitlines()[-1])
        if m and not e:
            result.append((c, m.group(1), True))
        else:
            result.append((c, "\n".join(e) if e else None, False))
    return result


def matches(expected, actual, last_line):
    """Blanks do not count (the docs wrap and indent JSON their own way); "..." is any text."""
    if last_line:
        lines = actual.strip().splitlines()
        actual = lines[-1] if lines else ""
    exp = re.sub(r"\s+", "", expected)
    act = re.sub(r"\s+", "", actual)
    pattern = ".*?".join(re.escape(part) for part in re.split(r"\.\.\.|\u2026", exp))
    return re.fullmatch(pattern, act, re.S) is not None


def run_block(where, markers, lines, mode, sbx_dir, repo, work):
    skip_for = {"skip": None, f"skip-{mode}": None}
    setup, status = [], 0
    for m in markers:
        key, _, rest = m.partition(" ")
        if key in skip_for:
            return "skip", rest or key
        if key == "setup":
            setup.append(rest)
        elif key == "status":
            status = int(rest)
    cmds = commands_of(lines)
    if not cmds:
        return "skip", "no command in the block"
    # The docs are written for a checkout: each block starts in a fresh directory holding the
    # repository's examples/ and rootfs/. 0755, like a user's directory: as root the sandbox's ids
    # are unprivileged on the host (sbx(1), IDENTITY) and must be able to reach what it binds.
    d = tempfile.mkdtemp(prefix="ex-", dir=work)
    os.chmod(d, 0o755)
    for sub in ("examples", "rootfs"):
        shutil.copytree(os.path.join(repo, sub), os.path.join(d, sub), symlinks=True)
    env = dict(os.environ, PATH=sbx_dir + ":" + os.environ.get("PATH", "/usr/bin:/bin"), REPO=repo,
               SBX_STATE_DIR=os.path.join(work, "state"), LANG="C.UTF-8")
    env.pop("NO_PROXY", None)
    for s in setup:
        r = subprocess.run(["bash", "-c", s], cwd=d, env=env, capture_output=True, text=True, timeout=TIMEOUT)
        if r.returncode != 0:
            return "FAIL", f"setup '{s}' exited {r.returncode}: {(r.stdout + r.stderr).strip()[-400:]}"
    for i, (cmd, expected, last_line) in enumerate(cmds):
        want = status if i == len(cmds) - 1 else 0
        try:
            r = subprocess.run(["bash", "-c", cmd], cwd=d, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, errors="replace", timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            return "FAIL", f"'{cmd}' ran past {TIMEOUT} s"
        if r.returncode != want:
            return "FAIL", f"'{cmd}' exited {r.returncode} (want {want}): {r.stdout.strip()[-600:]}"
        if expected is not None and not matches(expected, r.stdout, last_line):
            return "FAIL", f"'{cmd}' printed:\n{r.stdout.rstrip()}\n  the docs show:\n{expected}"
    return "ok", f"{len(cmds)} command(s)"


def main():
    if len(sys.argv) < 3 or sys.argv[2] not in ("root", "rootless"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    sbx, mode = os.path.abspath(sys.argv[1]), sys.argv[2]
    blocks = []
    for doc in ("README.md",):
        blocks += markdown_blocks(os.path.join(ROOT, doc))
    for doc in sorted(glob.glob(os.path.join(ROOT, "man", "*.[15]"))):
        blocks += roff_blocks(doc)
    if "--list" in sys.argv:
        for where, markers, lines in blocks:
            print(where, markers, commands_of(lines))
        return 0
    work = tempfile.mkdtemp(prefix="sbx-doc-examples-")
    try:
        os.chmod(work, 0o755)
        sbx_dir = os.path.join(work, "bin")
        os.mkdir(sbx_dir)
        shutil.copy(sbx, os.path.join(sbx_dir, "sbx"))
        repo = os.path.join(work, "repo")
        for sub in ("examples", "rootfs"):
            shutil.copytree(os.path.join(ROOT, sub), os.path.join(repo, sub), symlinks=True)
        counts = {"ok": 0, "FAIL": 0, "skip": 0}
        for where, markers, lines in blocks:
            verdict, why = run_block(where, markers, lines, mode, sbx_dir, repo, work)
            counts[verdict] += 1
            print(f"{verdict:5} {mode}: {where}: {why}")
        print(f"{counts['ok']} passed, {counts['FAIL']} failed, {counts['skip']} skipped")
        return 1 if counts["FAIL"] else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
