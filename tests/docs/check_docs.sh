#!/usr/bin/env bash
# Usage: tests/docs/check_docs.sh SBX_BINARY
#
# Checks that the docs keep up with the binary: every subcommand (nested ones too) and every long
# option that `SBX_BINARY [SUBCOMMAND...] --help` prints appears in its command's man page
# (man/sbx-COMMAND.1; global options and the command list in man/sbx.1) and in the bash, zsh
# and fish completions; that the man pages render without warnings; and that the completion files
# parse; and that every example of README.md and the man pages runs as written, printing what the
# docs show (tests/docs/run_examples.py), as root and rootless. Prints each check, then
# "N passed, N failed"; exits 1 on any failure, 2 on bad usage.
set -u

if [[ $# -ne 1 ]]; then
    echo "usage: $0 SBX_BINARY" >&2
    exit 2
fi
sbx=$1
if [[ ! -x $sbx ]]; then
    echo "check_docs: not an executable: $sbx" >&2
    exit 2
fi

# The repository root, from this script's own location (tests/docs/check_docs.sh).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
man_page=$root/man/sbx.1
man_pages=("$root"/man/*.[15])
bash_comp=$root/completions/sbx.bash
zsh_comp=$root/completions/_sbx
fish_comp=$root/completions/sbx.fish

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok    $*"; }
fail() { failed=$((failed + 1)); echo "FAIL  $*"; }
skip() { echo "skip  $*"; }

# Keep the binary away from the caller's state and profiles while asking it for help.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export SBX_STATE_DIR=$tmp/state XDG_STATE_HOME=$tmp/state XDG_CONFIG_HOME=$tmp/config
export SBX_PROFILE_PATH=$tmp/profiles

# --- what the binary offers -------------------------------------------------------------------

# help_of SUBCOMMAND...: the --help text of that (sub)command.
help_of() {
    "$sbx" "$@" --help 2>&1
}

# Lines of one section ("Options:", "Subcommands:") of a help text: from the heading up to the next
# heading or blank line.
section() {
    awk -v want="$1" '
        /^[^ \t].*:[ \t]*$/ { insec = ($0 == want); next }
        /^[ \t]*$/ { insec = 0; next }
        insec { print }'
}

# Long options of a help text: the option column of "Options:" ("-v,--verbose TEXT  text").
long_options() {
    section "Options:" | awk '{ print $1 }' | tr ',' '\n' | grep -E '^--[A-Za-z0-9][A-Za-z0-9-]*$'
}

subcommands() {
    section "Subcommands:" | awk '{ print $1 }' | grep -E '^[A-Za-z0-9][A-Za-z0-9-]*$'
}

# Walk the command tree: "path|option" lines for options, "path" lines for (sub)commands.
declare -a commands=() options=()
walk() {
    local text sub opt
    text=$(help_of "$@")
    if [[ -z $text ]]; then
        fail "'sbx $* --help' printed nothing"
        return
    fi
    while read -r opt; do
        [[ -n $opt ]] && options+=("$*|$opt")
    done < <(printf '%s\n' "$text" | long_options)
    while read -r sub; do
        [[ -z $sub ]] && continue
        commands+=("${*:+$* }$sub")
        walk "$@" "$sub"
    done < <(printf '%s\n' "$text" | subcommands)
}
walk

echo "binary: $sbx"
echo "found ${#commands[@]} (sub)commands: ${commands[*]}"
echo "found ${#options[@]} long options (per command)"
if [[ ${#commands[@]} -eq 0 ]]; then fail "no subcommands found in '$sbx --help'"; fi
if [[ ${#options[@]} -eq 0 ]]; then fail "no long options found in '$sbx --help'"; fi

# --- where they must appear -------------------------------------------------------------------

for f in "$man_page" "$bash_comp" "$zsh_comp" "$fish_comp"; do
    if [[ -r $f ]]; then pass "exists: ${f#"$root"/}"; else fail "missing: ${f#"$root"/}"; fi
done

# A man page as plain words: roff's \- and font escapes removed, so "\fB\-\-bind\fR" reads
# "--bind" and "\fBprofile ls\fR" reads "profile ls".
declare -A man_texts=()
man_text_of() {  # man_text_of PAGE: sets $man_text (cached per page)
    if [[ -z ${man_texts[$1]+set} ]]; then
        man_texts[$1]=$(sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\f(..//g' -e 's/\\&//g' "$1" 2>/dev/null)
    fi
    man_text=${man_texts[$1]}
}
# The page a command's options are documented on: sbx-COMMAND(1) for "COMMAND ..." (a page per
# command, as git and podman have), sbx(1) for the global options.
page_of() {  # page_of "COMMAND WORDS"
    if [[ -z $1 ]]; then echo "$man_page"; else echo "$root/man/sbx-${1%% *}.1"; fi
}

# A word or option, not part of a longer one.
has_word() {  # has_word TEXT WORD
    grep -qE -- "(^|[^A-Za-z0-9_-])$(sed 's/[.[\*^$]/\\&/g' <<<"$2")([^A-Za-z0-9_-]|\$)" <<<"$1"
}

check_in_all() {  # check_in_all WHAT PAGE MAN_PATTERN_WORD BASH_WORD ZSH_WORD FISH_PATTERN
    local what=$1 page=$2
    shift 2
    man_text_of "$page"
    if has_word "$man_text" "$1"; then pass "${page#"$root"/} has $what"; else fail "${page#"$root"/} lacks $what"; fi
    if has_word "$(cat "$bash_comp" 2>/dev/null)" "$2"; then pass "bash completion has $what"
    else fail "bash completion lacks $what"; fi
    if has_word "$(cat "$zsh_comp" 2>/dev/null)" "$3"; then pass "zsh completion has $what"
    else fail "zsh completion lacks $what"; fi
    if grep -qE -- "$4" "$fish_comp" 2>/dev/null; then pass "fish completion has $what"
    else fail "fish completion lacks $what"; fi
}

for c in "${commands[@]}"; do
    leaf=${c##* }
    # Every command has its page, listed in sbx(1); the page names nested commands in full
    # ("trace ls"); completions list the leaf word.
    page=$(page_of "$c")
    if [[ $c != *" "* ]]; then
        man_text_of "$man_page"
        if [[ -r $page ]] && has_word "$man_text" "sbx-$c"; then pass "man/sbx-$c.1 exists and sbx(1) lists it"
        else fail "man/sbx-$c.1 is missing or sbx(1) does not list it"; fi
    fi
    check_in_all "command '$c'" "$page" "$c" "$leaf" "$leaf" "(-a[[:space:]]+'?$leaf'?([[:space:]]|\$)|__sbx_at $c)"
done

# Global options: every command's help repeats them; sbx(1) documents them once.
declare -A global=()
for entry in "${options[@]}"; do [[ -z ${entry%|*} ]] && global[${entry#*|}]=1; done
declare -A seen=()
for entry in "${options[@]}"; do
    cmd=${entry%|*}
    opt=${entry#*|}
    [[ -n $cmd && -n ${global[$opt]:-} ]] && continue
    page=$(page_of "$cmd")
    # A page that takes another command's options wholesale says so (sbx probe: those of sbx run,
    # '.\" options-of: run'); an option it does not list itself is checked on that page.
    delegate=$(sed -n 's/^\.\\" options-of: \([a-z-]*\).*/\1/p' "$page" 2>/dev/null)
    if [[ -n $delegate ]]; then
        man_text_of "$page"
        has_word "$man_text" "$opt" || page=$root/man/sbx-$delegate.1
    fi
    # An option shared by several commands of one page is checked once there.
    [[ -n ${seen[$page|$opt]:-} ]] && continue
    seen[$page|$opt]=1
    name=${opt#--}
    check_in_all "option $opt${cmd:+ (sbx $cmd)}" "$page" "$opt" "$opt" "$opt" \
        "(-l|--long-option)[[:space:]]+'?$name'?([[:space:]]|\$)"
done

# --- the man page renders cleanly -------------------------------------------------------------

if command -v man >/dev/null 2>&1; then
    # Every page renders without warnings (default width and 80 columns), and without a doubled
    # quote: roff's "" is a literal quote only inside a quoted argument, so an unquoted
    # .B {""mode"": ""none""} shows the doubled marks.
    for page in "${man_pages[@]}"; do
        rel=${page#"$root"/}
        warnings=$(man --warnings -l "$page" 2>&1 >/dev/null; MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null)
        if [[ -z $warnings ]]; then pass "man --warnings -l $rel (default width, 80): no warnings"
        else fail "man --warnings -l $rel:"; printf '      %s\n' "$warnings"; fi
        doubled=$(MANWIDTH=100 man -l "$page" 2>/dev/null | grep -n '""')
        if [[ -z $doubled ]]; then pass "$rel renders no doubled quotes"
        else fail "$rel renders doubled quotes (quote the whole roff argument):"; printf '      %s\n' "$doubled"; fi
    done
else
    fail "man not installed (apt-get install man-db groff): cannot check man/sbx.1"
fi

# --- the completion files parse ---------------------------------------------------------------

if bash -n "$bash_comp" 2>"$tmp/err"; then pass "bash -n completions/sbx.bash"
else fail "bash -n completions/sbx.bash: $(cat "$tmp/err")"; fi

if command -v zsh >/dev/null 2>&1; then
    if zsh -n "$zsh_comp" 2>"$tmp/err"; then pass "zsh -n completions/_sbx"
    else fail "zsh -n completions/_sbx: $(cat "$tmp/err")"; fi
else
    skip "skipped: zsh not installed"
fi

if command -v fish >/dev/null 2>&1; then
    if fish -n "$fish_comp" 2>"$tmp/err"; then pass "fish -n completions/sbx.fish"
    else fail "fish -n completions/sbx.fish: $(cat "$tmp/err")"; fi
else
    skip "skipped: fish not installed"
fi

# --- every example runs as written -------------------------------------------------------------
# tests/docs/run_examples.py runs the README's and the man pages' examples and compares what they
# print where the docs show it: as root and as the unprivileged user `sbxtest` (created like
# tests/integration/run.sh does) when this runs as root, else rootless as the caller. It runs from
# a copy that the unprivileged user can read (the checkout may sit under a root-only directory).
examples() {  # examples MODE [RUNUSER...]
    local mode=$1 out rc
    shift
    out=$("$@" /usr/bin/python3 "$copy/tests/docs/run_examples.py" "$copy/sbx" "$mode" 2>&1)
    rc=$?
    printf '%s\n' "$out" | sed 's/^/      /'
    if [[ $rc -eq 0 ]]; then pass "examples run as written ($mode): $(tail -n 1 <<<"$out")"
    else fail "examples run as written ($mode): $(tail -n 1 <<<"$out")"; fi
}
if [[ ! -x /usr/bin/python3 ]]; then
    fail "examples: /usr/bin/python3 is required to run them"
else
    copy=$tmp/examples-copy
    mkdir -p "$copy/tests/docs" "$copy/man"
    cp "$root/tests/docs/run_examples.py" "$copy/tests/docs/"
    cp "$root/README.md" "$copy/"
    cp "${man_pages[@]}" "$copy/man/"
    cp -r "$root/examples" "$root/rootfs" "$copy/"
    cp "$sbx" "$copy/sbx"
    chmod 755 "$tmp"
    chmod -R a+rX "$copy"
    # The examples keep their own state; the help walk's variables above point into $tmp.
    unset SBX_STATE_DIR XDG_STATE_HOME XDG_CONFIG_HOME SBX_PROFILE_PATH
    if [[ $(id -u) -eq 0 ]]; then
        examples root
        if ! id sbxtest >/dev/null 2>&1; then useradd -m -s /bin/bash sbxtest; fi
        examples rootless runuser -u sbxtest -- env HOME="$(getent passwd sbxtest | cut -d: -f6)" TMPDIR=/tmp
    else
        examples rootless
    fi
fi

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
