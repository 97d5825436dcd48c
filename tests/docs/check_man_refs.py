#!/usr/bin/env python3
"""Usage: tests/docs/check_man_refs.py REPO_ROOT

Every "see HEADING" in the man pages names a heading (.SH or .SS) that exists in one of them: a
reader sent to "SYSTEMD USER SCOPE" must find it. A reference is the word or quoted words set in
bold right after "see" (".BR "DRY RUN" )." on the next line, or "see \\fBSignals\\fR" inline) that
starts with a capital letter; lower-case ones name commands and files, not headings. Prints each
broken reference as FILE:LINE; exits 1 when there is one.
"""
import glob
import os
import re
import sys


def unescape(text):
    return text.replace("\\-", "-").replace("\\ ", " ").strip()


def bold_target(line):
    """The text a .B line sets in bold (all of it), or a .BR line first ("A B" quoted, or a word)."""
    m = re.match(r'^\.B\s+(.*)$', line)
    if m:
        return unescape(m.group(1).strip('"'))
    m = re.match(r'^\.BR\s+(?:"([^"]*)"|(\S+))', line)
    return unescape(m.group(1) if m.group(1) is not None else m.group(2)) if m else None


def references(lines):
    for i, line in enumerate(lines):
        for m in re.finditer(r"\bsee \\fB(.*?)\\f[RP]", line, re.IGNORECASE):
            yield i + 1, unescape(m.group(1))
        if re.search(r"\bsee$", line.rstrip(), re.IGNORECASE) and i + 1 < len(lines):
            target = bold_target(lines[i + 1])
            if target:
                yield i + 2, target


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    pages = sorted(glob.glob(os.path.join(root, "man", "*.[1-8]")))
    texts = {p: open(p, encoding="utf-8").read().splitlines() for p in pages}
    headings = set()
    for lines in texts.values():
        for line in lines:
            m = re.match(r'^\.S[HS]\s+(.*)$', line)
            if m:
                headings.add(unescape(m.group(1).strip('"')))
    broken = 0
    for page, lines in texts.items():
        for lineno, target in references(lines):
            if not target[:1].isupper() or target in headings:
                continue
            print(f"{os.path.relpath(page, root)}:{lineno}: 'see {target}' names no heading (.SH/.SS) of the man pages")
            broken += 1
    print(f"{len(pages)} man pages, {len(headings)} headings, {broken} broken references")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
