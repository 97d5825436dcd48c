# bash completion for sbx                                  -*- shell-script -*-
# Install as /usr/share/bash-completion/completions/sbx (or source it from ~/.bashrc).
# Keep in step with the binary: tests/docs/check_docs.sh fails when a subcommand or long option of
# "sbx ... --help" is missing here.

# Capability names for --cap-add (capabilities(7); sbx also accepts them without CAP_, any case).
_sbx_capabilities() {
    echo "CAP_CHOWN CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_FOWNER CAP_FSETID CAP_KILL CAP_SETGID CAP_SETUID CAP_SETPCAP CAP_LINUX_IMMUTABLE CAP_NET_BIND_SERVICE CAP_NET_BROADCAST CAP_NET_ADMIN CAP_NET_RAW CAP_IPC_LOCK CAP_IPC_OWNER CAP_SYS_MODULE CAP_SYS_RAWIO CAP_SYS_CHROOT CAP_SYS_PTRACE CAP_SYS_PACCT CAP_SYS_ADMIN CAP_SYS_BOOT CAP_SYS_NICE CAP_SYS_RESOURCE CAP_SYS_TIME CAP_SYS_TTY_CONFIG CAP_MKNOD CAP_LEASE CAP_AUDIT_WRITE CAP_AUDIT_CONTROL CAP_SETFCAP CAP_MAC_OVERRIDE CAP_MAC_ADMIN CAP_SYSLOG CAP_WAKE_ALARM CAP_BLOCK_SUSPEND CAP_AUDIT_READ CAP_PERFMON CAP_BPF CAP_CHECKPOINT_RESTORE"
}

_sbx_tenants() {
    # NAME of each NAME.json in the tenants directory (man sbx, TENANTS).
    local d
    for d in ${SBX_TENANTS_DIR:-${XDG_CONFIG_HOME:-$HOME/.config}/sbx/tenants /etc/sbx/tenants}; do
        [[ -d $d ]] && (cd "$d" && ls -1 -- *.json 2>/dev/null) | sed 's/\.json$//'
    done
}

_sbx_profiles() {
    # First column of `sbx profile ls`: the names --profile and `profile show` accept.
    "${COMP_WORDS[0]}" profile ls 2>/dev/null | awk 'NF { print $1 }'
}

_sbx_profile_files() {
    # Profile files: *.json, and directories to descend into.
    compgen -f -X '!*.json' -- "$1"
    compgen -d -- "$1"
}

_sbx_run_ids() {
    # First column of `sbx trace ls`, without its header line.
    "${COMP_WORDS[0]}" "${_sbx_state_args[@]}" trace ls 2>/dev/null | awk 'NR > 1 && NF { print $1 }'
}

_sbx_session_ids() {
    # First column of `sbx session ls` (the running sessions' ids), without its header line.
    "${COMP_WORDS[0]}" "${_sbx_state_args[@]}" session ls 2>/dev/null | awk 'NR > 1 && NF { print $1 }'
}

_sbx_images() {
    # First column of `sbx image ls` (NAME:TAG), without its header line and unnamed images.
    "${COMP_WORDS[0]}" "${_sbx_state_args[@]}" image ls 2>/dev/null |
        awk 'NR > 1 && NF && $1 != "<none>" { print $1 }'
}

_sbx_image_refs() {
    # Image references matching $1, the whole word being completed (NAME:TAG, colon included).
    # Bash splits words at ':' (COMP_WORDBREAKS) and replaces only the part after the last colon,
    # so that part is what each candidate keeps. $2: extra words (e.g. "host").
    local word=$1 ref
    local head=""
    [[ $word == *:* ]] && head=${word%"${word##*:}"}
    COMPREPLY=()
    for ref in $(compgen -W "$2 $(_sbx_images)" -- "$word"); do
        COMPREPLY+=("${ref#"$head"}")
    done
}

_sbx() {
    local cur prev word first
    cur=${COMP_WORDS[COMP_CWORD]}
    # Bash splits words at ':' and '=' (COMP_WORDBREAKS): "busybox:latest" arrives as busybox, :,
    # latest, and "--state-dir=DIR" as --state-dir, =, DIR. $word is the whole word being
    # completed (colons included), $first the index where it starts, $prev the word (or option)
    # before it, and $cur the part after the last break, the part bash replaces.
    first=$COMP_CWORD
    word=$cur
    while ((first > 1)) && [[ ${COMP_WORDS[first]} == : || ${COMP_WORDS[first-1]} == : ]]; do
        first=$((first - 1))
        word=${COMP_WORDS[first]}$word
    done
    prev=${COMP_WORDS[first-1]}
    [[ $prev == = ]] && ((first > 1)) && prev=${COMP_WORDS[first-2]}
    [[ $first -gt 0 ]] || prev=""
    [[ $cur == [=:] ]] && cur=""

    local global_opts="--state-dir --log-level -v --verbose --version -h --help"
    local run_opts="--profile --tenant --image --entrypoint --uid --gid --bind --tmpfs --workdir --workspace --input --output --output-max-bytes
        --output-max-files --env --env-pass --secret --timeout --output-limit --memory --pids --cpus --cpu-time --require-limits
        --require-record --seccomp --cap-add --gpu --allow-host --trace-file --trace-db --events --dry-run --systemd-scope --no-systemd-scope -i --interactive -t --tty
        --keep-inputs --json"
    # Options that take a value (the next word is not a subcommand or the command).
    local takes_arg="--state-dir --log-level --profile --tenant --image --entrypoint --uid --gid --bind --tmpfs --workdir --env
        --env-pass --timeout --output-limit --memory --pids --cpus --cpu-time --seccomp --cap-add --gpu --allow-host --trace-file --trace-db --db --node --format
        --pubkey --anchor --keep --before --status --since --input --output --output-max-bytes --output-max-files --context --secret --result --name --leaf
        --keep-days --max-bytes --packs --max-concurrent --max-queued --events --limit --newest -n --pack -o
        --idle --max --language --code --connection-file --display-name"
    # sbx session start: the options of run but those it refuses (-i, -t, --dry-run, --workdir, --output,
    # --output-max-bytes, --output-max-files, --keep-inputs, --systemd-scope), and its own.
    local session_start_opts="--profile --tenant --image --entrypoint --uid --gid --bind --tmpfs --workspace --input
        --env --env-pass --secret --timeout --output-limit --memory --pids --cpus
        --cpu-time --require-limits --require-record --seccomp --cap-add --gpu --allow-host --trace-file --trace-db --events
        --no-systemd-scope --idle --max --json"
    # sbx kernel run: the same as session start's (its --json aside), and the client's connection file.
    local kernel_run_opts="--profile --tenant --image --entrypoint --uid --gid --bind --tmpfs --workspace --input
        --env --env-pass --secret --timeout --output-limit --memory --pids --cpus
        --cpu-time --require-limits --require-record --seccomp --cap-add --gpu --allow-host --trace-file --trace-db --events
        --no-systemd-scope --idle --max --connection-file"

    # Find the subcommand path (run | profile ls|show | trace ls|show | doctor | pack ... |
    # image ... | session ... | kernel ...) and, for run and session exec, where the sandboxed command
    # starts.
    local cmd="" sub="" i w skip=0 cmd_start=0 npos=0
    _sbx_state_args=()
    for ((i = 1; i < first; i++)); do
        w=${COMP_WORDS[i]}
        # The rest of a word bash split at ':' or '=' (SRC:DST, NAME:TAG, --opt=VALUE) belongs to
        # the word before; after --opt=, it is the option's value.
        [[ $w == [=:] ]] && continue
        if [[ ${COMP_WORDS[i-1]} == [=:] ]]; then skip=0; continue; fi
        if ((skip)); then skip=0; continue; fi
        if [[ $w == --state-dir ]]; then
            [[ ${COMP_WORDS[i+1]} == = ]] && _sbx_state_args=(--state-dir "${COMP_WORDS[i+2]}") ||
                _sbx_state_args=(--state-dir "${COMP_WORDS[i+1]}")
        fi
        if [[ $w == --state-dir=* ]]; then _sbx_state_args=("$w"); fi
        if [[ $w == -- ]]; then
            [[ $cmd == run || -z $cmd ]] && { cmd=run; cmd_start=$((i + 1)); break; }
            [[ $cmd == session && $sub == exec ]] && { cmd_start=$((i + 1)); break; }
            continue
        fi
        if [[ $w == -* ]]; then
            [[ $w != *=* && " ${takes_arg//$'\n'/ } " == *" $w "* ]] && skip=1
            continue
        fi
        if [[ -z $cmd ]]; then
            cmd=$w
        elif [[ $cmd == run ]]; then
            cmd_start=$i; break
        elif [[ -z $sub && ( $cmd == profile || $cmd == trace || $cmd == pack || $cmd == image || $cmd == key || $cmd == session || $cmd == kernel ) ]]; then
            sub=$w
        else
            npos=$((npos + 1))
        fi
    done

    # Inside the sandboxed command (sbx run, sbx session exec ID --): complete it as a command line
    # of its own.
    if [[ ( $cmd == run || $cmd == session ) && $cmd_start -gt 0 && $cmd_start -le $COMP_CWORD ]]; then
        if declare -F _command_offset >/dev/null; then
            _command_offset "$cmd_start"
        elif ((cmd_start == COMP_CWORD)); then
            COMPREPLY=($(compgen -c -- "$cur"))
        else
            COMPREPLY=($(compgen -f -- "$cur"))
        fi
        return
    fi

    # Values of options. A session's --timeout and --output-limit are a call's ceilings: "none" is
    # not one of their values.
    [[ ( $cmd == session || $cmd == kernel ) && ( $prev == --timeout || $prev == --output-limit ) ]] && return
    case $prev in
        --state-dir|--workdir|--output|--packs)
            COMPREPLY=($(compgen -d -- "$cur")); compopt -o filenames 2>/dev/null; return ;;
        --image)
            _sbx_image_refs "$word" host; return ;;
        --bind|--trace-file|--input|--result|--events|-o|--connection-file)
            COMPREPLY=($(compgen -f -- "$cur")); compopt -o filenames 2>/dev/null; return ;;
        --cap-add)
            COMPREPLY=($(compgen -W "$(_sbx_capabilities)" -- "$cur")); return ;;
        --tenant)
            COMPREPLY=($(compgen -W "$(_sbx_tenants)" -- "$cur")); return ;;
        --gpu)
            COMPREPLY=($(compgen -W "all 0 1 2 3 4 5 6 7" -- "$cur")); return ;;
        --seccomp)
            COMPREPLY=($(compgen -W "default unconfined" -- "$cur") $(compgen -f -- "$cur"))
            compopt -o filenames 2>/dev/null; return ;;
        --profile)
            COMPREPLY=($(compgen -W "$(_sbx_profiles)" -- "$cur") $(_sbx_profile_files "$cur"))
            compopt -o filenames 2>/dev/null; return ;;
        --log-level)
            COMPREPLY=($(compgen -W "trace debug info warn error off" -- "$cur")); return ;;
        --format)
            [[ $COMP_LINE == *" export "* ]] && COMPREPLY=($(compgen -W "in-toto" -- "$cur")) ||
                COMPREPLY=($(compgen -W "json text" -- "$cur")); return ;;
        --env-pass)
            COMPREPLY=($(compgen -e -- "$cur")); return ;;
        --timeout|--memory|--pids|--cpus|--cpu-time|--output-limit)
            # A number with a unit is typed; "none" (or "unlimited") clears the profile's limit.
            COMPREPLY=($(compgen -W "none unlimited" -- "$cur")); return ;;
        --language)
            COMPREPLY=($(compgen -W "python sh bash node" -- "$cur")); return ;;
        --idle|--max|--code|--display-name)
            return ;;
        --context|--secret|--tmpfs|--uid|--gid|--env|\
        --output-max-bytes|--output-max-files|--name|--allow-host|--max-concurrent|--max-queued|--keep-days|--max-bytes|\
        --trace-db|--db|--node)
            return ;;
    esac

    case $cmd in
        "")
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "$global_opts" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "run probe classify profile trace doctor pack exec image key mcp session kernel cgroup-init replay gc help version" -- "$cur"))
            fi ;;
        help)
            # sbx help COMMAND [SUBCOMMAND]: that command's --help.
            ((npos == 0)) && COMPREPLY=($(compgen -W "run probe classify profile trace doctor pack exec image key mcp session kernel cgroup-init replay gc" -- "$cur")) ;;
        run)
            COMPREPLY=($(compgen -W "$run_opts $global_opts --" -- "$cur"))
            if [[ $cur != -* ]]; then COMPREPLY=($(compgen -c -- "$cur")); fi ;;
        profile)
            if [[ -z $sub ]]; then
                [[ $cur == -* ]] && COMPREPLY=($(compgen -W "--help" -- "$cur")) ||
                    COMPREPLY=($(compgen -W "ls show" -- "$cur"))
            elif [[ $cur == -* ]]; then
                [[ $sub == ls ]] && COMPREPLY=($(compgen -W "--json --help" -- "$cur")) ||
                    COMPREPLY=($(compgen -W "--help" -- "$cur"))
            elif [[ $sub == show && $npos -eq 0 ]]; then
                COMPREPLY=($(compgen -W "$(_sbx_profiles)" -- "$cur") $(_sbx_profile_files "$cur"))
                compopt -o filenames 2>/dev/null
            fi ;;
        trace)
            if [[ -z $sub ]]; then
                [[ $cur == -* ]] && COMPREPLY=($(compgen -W "--help" -- "$cur")) ||
                    COMPREPLY=($(compgen -W "ls show export verify head prune import reindex ship" -- "$cur"))
            elif [[ $cur == -* && $sub == prune ]]; then
                COMPREPLY=($(compgen -W "--keep --before --dry-run --json --tenant --help" -- "$cur"))
            elif [[ $cur == -* && $sub == verify ]]; then
                COMPREPLY=($(compgen -W "--pubkey --anchor --json --db --node --against-ledger --help" -- "$cur"))
            elif [[ $cur == -* && $sub == ship ]]; then
                COMPREPLY=($(compgen -W "--db --profile --json --tenant --help" -- "$cur"))
            elif [[ $cur == -* && $sub == head ]]; then
                COMPREPLY=($(compgen -W "--json --help" -- "$cur"))
            elif [[ $sub == export ]]; then
                if [[ $cur == -* ]]; then
                    COMPREPLY=($(compgen -W "--format -o --output --tenant --help" -- "$cur"))
                elif [[ $prev == --format ]]; then
                    COMPREPLY=($(compgen -W "in-toto" -- "$cur"))
                elif ((npos == 0)); then
                    COMPREPLY=($(compgen -W "last $(_sbx_run_ids)" -- "$cur"))
                fi
            elif [[ $sub == show ]]; then
                if [[ $cur == -* ]]; then
                    COMPREPLY=($(compgen -W "--format --json --db --node --help" -- "$cur"))
                elif ((npos == 0)); then
                    COMPREPLY=($(compgen -W "last $(_sbx_run_ids)" -- "$cur"))
                fi
            elif [[ $cur == -* && $sub == ls ]]; then
                COMPREPLY=($(compgen -W "-n --newest --limit --json --status --since --pack --image --db --node --limit-events --help" -- "$cur"))
            elif [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--help" -- "$cur"))
            fi ;;
        doctor)
            COMPREPLY=($(compgen -W "--json --help" -- "$cur")) ;;
        probe)
            # The options of run (the probe run is configured by them), and --json.
            COMPREPLY=($(compgen -W "$run_opts $global_opts --json" -- "$cur")) ;;
        classify)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--json --help" -- "$cur"))
            elif ((npos == 0)); then
                COMPREPLY=($(compgen -f -X '!*.json' -- "$cur") $(compgen -d -- "$cur")); compopt -o filenames 2>/dev/null
            fi ;;
        cgroup-init)
            [[ $cur == -* ]] && COMPREPLY=($(compgen -W "--leaf --json --help" -- "$cur")) ;;
        pack)
            if [[ -z $sub ]]; then
                [[ $cur == -* ]] && COMPREPLY=($(compgen -W "--help" -- "$cur")) ||
                    COMPREPLY=($(compgen -W "validate init run" -- "$cur"))
            elif [[ $cur == -* && $sub == validate ]]; then
                COMPREPLY=($(compgen -W "--strict --no-strict --json --help" -- "$cur"))
            elif [[ $cur == -* && $sub == run ]]; then
                COMPREPLY=($(compgen -W "--input --context --secret --result --profile --tenant --image --timeout
                    --output-limit --memory --pids --cpus --cpu-time --require-limits --require-record --seccomp --cap-add --gpu --trace-file
                    --trace-db --events --dry-run --help" -- "$cur"))
            elif [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--help" -- "$cur"))
            elif [[ $sub != init ]]; then
                COMPREPLY=($(compgen -d -- "$cur")); compopt -o filenames 2>/dev/null
            fi ;;
        exec)
            COMPREPLY=($(compgen -W "--profile --allow-host --trace-file --trace-db --tenant --events --dry-run --help" -- "$cur")) ;;
        mcp)
            COMPREPLY=($(compgen -W "--packs --context --secret --profile --tenant --max-concurrent --max-queued --pool --pool-max-idle --trace-db
                --listen --tokens --tls-cert --tls-key --no-auth --allow-origin --max-connections --max-sessions --max-calls-per-tenant --max-body
                --help" -- "$cur")) ;;
        session)
            if [[ -z $sub ]]; then
                [[ $cur == -* ]] && COMPREPLY=($(compgen -W "--help" -- "$cur")) ||
                    COMPREPLY=($(compgen -W "start exec ls show stop" -- "$cur"))
            elif [[ $sub == start ]]; then
                COMPREPLY=($(compgen -W "$session_start_opts $global_opts" -- "$cur"))
            elif [[ $cur == -* ]]; then
                case $sub in
                    exec) COMPREPLY=($(compgen -W "--language --code --timeout --output-limit --json --tenant --help --" -- "$cur")) ;;
                    ls) COMPREPLY=($(compgen -W "--all --json --tenant --help" -- "$cur")) ;;
                    show) COMPREPLY=($(compgen -W "--tenant --help" -- "$cur")) ;;
                    stop) COMPREPLY=($(compgen -W "--json --tenant --help" -- "$cur")) ;;
                    *) COMPREPLY=($(compgen -W "--help" -- "$cur")) ;;
                esac
            elif [[ ( $sub == exec || $sub == show || $sub == stop ) && $npos -eq 0 ]]; then
                COMPREPLY=($(compgen -W "$(_sbx_session_ids)" -- "$cur"))
            fi ;;
        kernel)
            if [[ -z $sub ]]; then
                [[ $cur == -* ]] && COMPREPLY=($(compgen -W "--help" -- "$cur")) ||
                    COMPREPLY=($(compgen -W "install run" -- "$cur"))
            elif [[ $sub == install ]]; then
                COMPREPLY=($(compgen -W "--name --user --profile --tenant --display-name --idle --max $global_opts" -- "$cur"))
            elif [[ $sub == run ]]; then
                COMPREPLY=($(compgen -W "$kernel_run_opts $global_opts" -- "$cur"))
            fi ;;
        replay)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--json --tenant --help" -- "$cur"))
            elif ((npos == 0)); then
                COMPREPLY=($(compgen -W "last $(_sbx_run_ids)" -- "$cur"))
            fi ;;
        gc)
            COMPREPLY=($(compgen -W "--keep-days --max-bytes --dry-run --json --tenant --help" -- "$cur")) ;;
        key)
            if [[ -z $sub ]]; then
                [[ $cur == -* ]] && COMPREPLY=($(compgen -W "--help" -- "$cur")) ||
                    COMPREPLY=($(compgen -W "init" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "--json --help" -- "$cur"))
            fi ;;
        image)
            if [[ -z $sub ]]; then
                [[ $cur == -* ]] && COMPREPLY=($(compgen -W "--help" -- "$cur")) ||
                    COMPREPLY=($(compgen -W "import ls inspect rm verify" -- "$cur"))
            elif [[ $cur == -* ]]; then
                case $sub in
                    import) COMPREPLY=($(compgen -W "--name -q --quiet --json --max-bytes --max-entries --format --platform --help" -- "$cur")) ;;
                    verify) COMPREPLY=($(compgen -W "--full --json --help" -- "$cur")) ;;
                    ls) COMPREPLY=($(compgen -W "--json --tenant --help" -- "$cur")) ;;
                    *) COMPREPLY=($(compgen -W "--help" -- "$cur")) ;;
                esac
            else
                case $sub in
                    import)  # SOURCE: a directory or a tarball
                        ((npos == 0)) && { COMPREPLY=($(compgen -f -- "$cur")); compopt -o filenames 2>/dev/null; } ;;
                    inspect|verify)
                        ((npos == 0)) && _sbx_image_refs "$word" ;;
                    rm)
                        _sbx_image_refs "$word" ;;
                esac
            fi ;;
    esac
}

complete -F _sbx sbx
