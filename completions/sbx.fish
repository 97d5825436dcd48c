# fish completion for sbx. Install as sbx.fish in a completions directory
# (e.g. /usr/share/fish/vendor_completions.d).
# Keep in step with the binary: tests/docs/check_docs.sh fails when a subcommand or long option of
# "sbx ... --help" is missing here.

# Capability names for --cap-add (capabilities(7); sbx also accepts them without CAP_, any case).
set -g __sbx_capabilities CAP_CHOWN CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_FOWNER CAP_FSETID CAP_KILL CAP_SETGID CAP_SETUID CAP_SETPCAP CAP_LINUX_IMMUTABLE CAP_NET_BIND_SERVICE CAP_NET_BROADCAST CAP_NET_ADMIN CAP_NET_RAW CAP_IPC_LOCK CAP_IPC_OWNER CAP_SYS_MODULE CAP_SYS_RAWIO CAP_SYS_CHROOT CAP_SYS_PTRACE CAP_SYS_PACCT CAP_SYS_ADMIN CAP_SYS_BOOT CAP_SYS_NICE CAP_SYS_RESOURCE CAP_SYS_TIME CAP_SYS_TTY_CONFIG CAP_MKNOD CAP_LEASE CAP_AUDIT_WRITE CAP_AUDIT_CONTROL CAP_SETFCAP CAP_MAC_OVERRIDE CAP_MAC_ADMIN CAP_SYSLOG CAP_WAKE_ALARM CAP_BLOCK_SUSPEND CAP_AUDIT_READ CAP_PERFMON CAP_BPF CAP_CHECKPOINT_RESTORE

# The subcommand path so far (e.g. "run", "profile show"), options and their values skipped.
function __sbx_path
    set -l tokens (commandline -opc)
    set -e tokens[1]
    set -l takes_arg --state-dir --log-level --profile --tenant --image --entrypoint --uid --gid --bind --tmpfs --workdir --env \
        --env-pass --timeout --output-limit --memory --pids --cpus --cpu-time --seccomp --cap-add --gpu --allow-host --trace-file --trace-db --db --node --format --pubkey --anchor --keep --before --status --since \
        --input --output --output-max-bytes --output-max-files --context --secret --result --name \
        --packs --max-concurrent --max-queued --keep-days --max-bytes --leaf --events --limit --newest -n --pack -o \
        --idle --max --language --code --connection-file --display-name
    set -l path
    set -l skip 0
    for t in $tokens
        if test $skip -eq 1
            set skip 0
            continue
        end
        switch $t
            case '--'
                if test (count $path) -eq 0; or test "$path[1]" = run
                    set path run CMD
                    break
                end
                # sbx session exec ID -- CMD: the command, completed as a command line of its own.
                if test "$path" = "session exec"
                    set path session exec CMD
                    break
                end
            case '--*=*'
            case '-*'
                if contains -- $t $takes_arg
                    set skip 1
                end
            case '*'
                if test "$path[1]" = run
                    set path run CMD
                    break
                end
                # "pack run DIR", "image import SOURCE", "session exec ID": arguments, not part of the path.
                if contains -- "$path[1]" pack image session; and test (count $path) -ge 2
                    continue
                end
                set -a path $t
        end
    end
    echo $path
end

# True when the subcommand path is exactly the arguments (e.g. __sbx_at run; __sbx_at).
function __sbx_at
    set -l p (__sbx_path)
    test "$p" = "$argv"
end

# True when the subcommand path starts with the arguments.
function __sbx_in
    string match -q -- "$argv*" (__sbx_path)
end

function __sbx_profiles
    # First column of `sbx profile ls`: the names --profile and `profile show` accept.
    sbx profile ls 2>/dev/null | string match -r '^\S+'
end

function __sbx_run_ids
    # First column of `sbx trace ls`, without its header line.
    sbx trace ls 2>/dev/null | tail -n +2 | string match -r '^\S+'
end

function __sbx_images
    # First column of `sbx image ls` (NAME:TAG), without its header line and unnamed images.
    sbx image ls 2>/dev/null | tail -n +2 | string match -r '^\S+' | string match -v -- '<none>'
end

complete -c sbx -e
complete -c sbx -f

# Global options (accepted before the subcommand, and after "run").
complete -c sbx -n 'not __sbx_in run CMD; and not __sbx_in session exec CMD' -l state-dir -r -F -d 'Directory for traces and images'
complete -c sbx -n 'not __sbx_in run CMD; and not __sbx_in session exec CMD' -l log-level -x -a 'trace debug info warn error off' -d 'Log level'
complete -c sbx -n 'not __sbx_in run CMD; and not __sbx_in session exec CMD' -s v -l verbose -d 'More log output (repeat for debug)'
complete -c sbx -n 'not __sbx_in run CMD; and not __sbx_in session exec CMD' -s h -l help -d 'Print help and exit'
complete -c sbx -n '__sbx_at' -l version -d 'Print version and exit'

# Subcommands.
complete -c sbx -n '__sbx_at' -a run -d 'Run a command in a fresh sandbox'
complete -c sbx -n '__sbx_at' -a probe -d 'Test the boundaries of a run configuration from inside'
complete -c sbx -n '__sbx_at' -a classify -d 'Answer the lowest isolation tier a workload needs'
complete -c sbx -n '__sbx_at' -a profile -d 'List and show profiles'
complete -c sbx -n '__sbx_at' -a trace -d 'List and show trace records of past runs'
complete -c sbx -n '__sbx_at' -a doctor -d 'Check what sbx needs on this host'
complete -c sbx -n '__sbx_at' -a pack -d 'Rule packs: validate, init, run'
complete -c sbx -n '__sbx_at' -a exec -d 'Run generated code from a JSON request on stdin'
complete -c sbx -n '__sbx_at' -a image -d 'Manage the content-addressed image store'
complete -c sbx -n '__sbx_at' -a key -d 'Manage the key that signs the trace ledger'
complete -c sbx -n '__sbx_at' -a mcp -d 'Serve rule packs and run_code as MCP tools over stdio'
complete -c sbx -n '__sbx_at' -a session -d 'A long-lived, recorded sandbox for many calls: start, exec, ls, show, stop'
complete -c sbx -n '__sbx_at' -a kernel -d 'Jupyter kernels that run inside an sbx session: install, run'
complete -c sbx -n '__sbx_at' -a cgroup-init -d 'In a container: move its processes into a leaf, enable controllers'
complete -c sbx -n '__sbx_at' -a help -d "Print a command's help (sbx help COMMAND: sbx COMMAND --help)"
complete -c sbx -n '__sbx_at' -a version -d 'Print the version'
complete -c sbx -n '__sbx_at help' -x -a 'run probe classify profile trace doctor pack exec image key mcp session kernel cgroup-init replay gc'

# sbx run
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l profile -x -a '(__sbx_profiles; __fish_complete_suffix .json)' -d 'Profile name or JSON file'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l image -x -a 'host (__sbx_images)' -d 'Root file system: host or a stored image'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l uid -x -d 'User id inside the sandbox'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l gid -x -d 'Group id inside the sandbox'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l bind -r -F -d 'Bind a host path: SRC[:DST][:rw[,idmap]]'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l tmpfs -x -d 'Mount a size-capped tmpfs: DST[:SIZE]'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l workdir -x -d 'Working directory inside the sandbox'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l workspace -d 'The current directory read-write at the same path, .git read-only, cwd there'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l input -r -F -d 'Mount a host file or directory read-only: PATH[:DST]'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l output -x -a '(__fish_complete_directories)' -d 'Export /out to this new or empty directory'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l output-max-bytes -x -d 'Most bytes --output exports (default 256M)'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l output-max-files -x -d 'Most files and directories --output exports (default 10000)'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l env -x -d 'Set an environment variable: NAME=VALUE'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l env-pass -x -a '(set -n -x)' -d 'Pass a variable from the environment'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l secret -x -d 'Deliver a secret as /run/secrets/NAME: NAME=@FILE or NAME=env:VAR'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l timeout -x -a 'none unlimited' -d 'Wall-time limit, e.g. 250ms, 2s, 1m'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l output-limit -x -a 'none unlimited' -d 'Bytes of stdout and of stderr passed through'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l memory -x -a 'none unlimited' -d 'Memory limit, e.g. 256M'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l pids -x -a 'none unlimited' -d 'Maximum number of processes'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l cpus -x -a 'none unlimited' -d 'CPU share, e.g. 0.5'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l cpu-time -x -a 'none unlimited' -d 'CPU-time budget, e.g. 10s'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l require-limits -d 'Fail unless every limit can be enforced'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l require-record -d 'Fail when the trace record cannot be stored durably'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l seccomp -r -F -a 'default unconfined' -d 'Seccomp policy: default, unconfined or an OCI JSON file'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l cap-add -x -a "$__sbx_capabilities" -d 'Keep this capability inside the user namespace (repeatable)'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l allow-host -x -a '(__fish_print_hostnames)' -d 'Allow egress to HOST[:PORT] through the filtering proxy'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l trace-file -r -F -d 'Also write the trace record to this file'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l dry-run -d 'Check everything, print the plan as JSON, run nothing'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -l systemd-scope -d 'Rootless: re-run under a delegated systemd scope'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -s i -l interactive -d 'Relay stdin to the program even from a terminal'
complete -c sbx -n '__sbx_at run; or __sbx_at probe' -s t -l tty -d 'Give the program its own pseudo-terminal (stdin must be a terminal)'
complete -c sbx -n '__sbx_at' -a replay -d 'Re-run a recorded run from its record and kept inputs; compare'
complete -c sbx -n '__sbx_at' -a gc -d 'Delete kept blobs no kept record needs'

# sbx run
complete -c sbx -n '__sbx_at run' -l profile -x -a '(__sbx_profiles; __fish_complete_suffix .json)' -d 'Profile name or JSON file'
complete -c sbx -n '__sbx_at run' -l image -x -a 'host (__sbx_images)' -d 'Root file system: host or a stored image'
complete -c sbx -n '__sbx_at run' -l uid -x -d 'User id inside the sandbox'
complete -c sbx -n '__sbx_at run' -l gid -x -d 'Group id inside the sandbox'
complete -c sbx -n '__sbx_at run' -l entrypoint -x -a '(__fish_complete_command)' -d "With --image: run this instead of the image's Entrypoint and Cmd"
complete -c sbx -n '__sbx_at run' -l bind -r -F -d 'Bind a host path: SRC[:DST][:rw[,idmap]]'
complete -c sbx -n '__sbx_at run' -l tmpfs -x -d 'Mount a size-capped tmpfs: DST[:SIZE]'
complete -c sbx -n '__sbx_at run' -l workdir -x -d 'Working directory inside the sandbox'
complete -c sbx -n '__sbx_at run' -l input -r -F -d 'Mount a host file or directory read-only: PATH[:DST]'
complete -c sbx -n '__sbx_at run' -l output -x -a '(__fish_complete_directories)' -d 'Export /out to this new or empty directory'
complete -c sbx -n '__sbx_at run' -l output-max-bytes -x -d 'Most bytes --output exports (default 256M)'
complete -c sbx -n '__sbx_at run' -l output-max-files -x -d 'Most files and directories --output exports (default 10000)'
complete -c sbx -n '__sbx_at run' -l env -x -d 'Set an environment variable: NAME=VALUE'
complete -c sbx -n '__sbx_at run' -l env-pass -x -a '(set -n -x)' -d 'Pass a variable from the environment'
complete -c sbx -n '__sbx_at run' -l timeout -x -a 'none unlimited' -d 'Wall-time limit, e.g. 250ms, 2s, 1m'
complete -c sbx -n '__sbx_at run' -l output-limit -x -a 'none unlimited' -d 'Bytes of stdout and of stderr passed through'
complete -c sbx -n '__sbx_at run' -l memory -x -a 'none unlimited' -d 'Memory limit, e.g. 256M'
complete -c sbx -n '__sbx_at run' -l pids -x -a 'none unlimited' -d 'Maximum number of processes'
complete -c sbx -n '__sbx_at run' -l cpus -x -a 'none unlimited' -d 'CPU share, e.g. 0.5'
complete -c sbx -n '__sbx_at run' -l cpu-time -x -a 'none unlimited' -d 'CPU-time budget, e.g. 10s'
complete -c sbx -n '__sbx_at run' -l require-limits -d 'Fail unless every limit can be enforced'
complete -c sbx -n '__sbx_at run' -l require-record -d 'Fail when the trace record cannot be stored durably'
complete -c sbx -n '__sbx_at run' -l keep-inputs -d 'Keep the --input files and the profile for sbx replay'
complete -c sbx -n '__sbx_at run' -l seccomp -r -F -a 'default unconfined' -d 'Seccomp policy: default, unconfined or an OCI JSON file'
complete -c sbx -n '__sbx_at run' -l cap-add -x -a "$__sbx_capabilities" -d 'Keep this capability inside the user namespace (repeatable)'
complete -c sbx -n '__sbx_at run' -l gpu -x -a 'all 0 1 2 3' -d 'Give the sandbox GPUs: all, indices (0,1) or a UUID'
complete -c sbx -n '__sbx_at run' -l allow-host -x -a '(__fish_print_hostnames)' -d 'Allow egress to HOST[:PORT] through the filtering proxy'
complete -c sbx -n '__sbx_at run' -l trace-file -r -F -d 'Also write the trace record to this file'
complete -c sbx -n '__sbx_at run' -l trace-db -x -d 'Mirror the trace record to this PostgreSQL database (a libpq URL, no password)'
complete -c sbx -n '__sbx_at run' -l events -r -F -d 'Stream live events as JSON lines to FILE, a FIFO or fd:N'
complete -c sbx -n '__sbx_at run' -l dry-run -d 'Check everything, print the plan as JSON, run nothing'
complete -c sbx -n '__sbx_at run' -l json -d "Print one JSON object at the end; the program's stdout goes to stderr"
complete -c sbx -n '__sbx_at run' -l systemd-scope -d 'Rootless: re-run under a delegated systemd scope, or fail'
complete -c sbx -n '__sbx_at run' -l no-systemd-scope -d 'Never re-run under a systemd user scope'
complete -c sbx -n '__sbx_at run' -s i -l interactive -d 'Relay stdin to the program even from a terminal'
complete -c sbx -n '__sbx_at run' -s t -l tty -d 'Give the program its own pseudo-terminal (stdin must be a terminal)'
complete -c sbx -n '__sbx_at run' -a '(__fish_complete_command)' -d 'Command'
# After the command starts, complete it as a command line of its own.
complete -c sbx -n '__sbx_in run CMD' -a '(__sbx_complete_cmd)'

function __sbx_complete_cmd
    # The sandboxed command starts at the first word after "run" that is not an option of run (or
    # one of their values), or right after "--".
    set -l tokens (commandline -opc)
    set -l takes_arg --state-dir --log-level --profile --tenant --image --entrypoint --uid --gid --bind --tmpfs --workdir --env \
        --env-pass --secret --timeout --output-limit --memory --pids --cpus --cpu-time --seccomp --cap-add --gpu --allow-host --trace-file --trace-db \
        --input --output --output-max-bytes --output-max-files --events
    set -l start 0
    set -l seen_run 0
    set -l skip 0
    for i in (seq 2 (count $tokens))
        set -l t $tokens[$i]
        if test $skip -eq 1
            set skip 0
        else if test "$t" = --
            set start (math $i + 1)
            break
        else if string match -q -- '-*' $t
            contains -- $t $takes_arg; and set skip 1
        else if test $seen_run -eq 0
            set seen_run 1
        else
            set start $i
            break
        end
    end
    test $start -gt 0; or return
    set -l words
    if test $start -le (count $tokens)
        set words (string escape -- $tokens[$start..-1])
    end
    complete -C (string join ' ' -- $words (commandline -ct))
end

# sbx profile
complete -c sbx -n '__sbx_at profile' -a ls -d 'List the profiles sbx can find'
complete -c sbx -n '__sbx_at profile' -a show -d 'Print a profile and the run spec it produces'
complete -c sbx -n '__sbx_at profile ls' -l json -d 'Print a JSON array for scripts'
complete -c sbx -n '__sbx_at profile show' -a '(__sbx_profiles; __fish_complete_suffix .json)' -d 'Profile'

# sbx trace
complete -c sbx -n '__sbx_at trace' -a ls -d 'List stored runs, newest first'
complete -c sbx -n '__sbx_at trace' -a show -d "Print one run's trace record"
complete -c sbx -n '__sbx_at trace' -a export -d "Export a run's record as provenance (in-toto, SLSA)"
complete -c sbx -n '__sbx_at trace export' -a '(__sbx_run_ids)' -d 'Run id'
complete -c sbx -n '__sbx_at trace export' -l format -x -a 'in-toto' -d 'Document format'
complete -c sbx -n '__sbx_at trace export' -s o -l output -r -F -d 'Write to this file instead of stdout'
complete -c sbx -n '__sbx_at trace show' -a '(__sbx_run_ids)' -d 'Run id'
complete -c sbx -n '__sbx_at trace show' -l format -x -a 'json text' -d 'Output format'
complete -c sbx -n '__sbx_at trace show' -l json -d 'The same as --format json'
complete -c sbx -n '__sbx_at trace show' -a last -d 'The newest run'
complete -c sbx -n '__sbx_at trace show' -l db -x -d 'Show a run this trace database holds (a libpq URL)'
complete -c sbx -n '__sbx_at trace show' -l node -x -d 'With --db: only the records of this node'
complete -c sbx -n '__sbx_at trace ls' -s n -l newest -x -d 'List only the N newest runs'
complete -c sbx -n '__sbx_at trace ls' -l limit -x -d 'List only the N newest runs'
complete -c sbx -n '__sbx_at trace ls' -l pack -x -d 'Only runs of this pack: NAME, NAME@VERSION or digest'
complete -c sbx -n '__sbx_at trace ls' -l image -x -d 'Only runs on this image: name or digest'
complete -c sbx -n '__sbx_at trace ls' -l json -d 'Print a JSON array'
complete -c sbx -n '__sbx_at trace ls' -l status -x -a 'ok exit_nonzero timeout signaled oom seccomp_violation output_limit output_invalid input_invalid setup_error' -d 'Only runs with this status'
complete -c sbx -n '__sbx_at trace ls' -l since -x -d 'Only runs started at or after this time (1h, 2d, 2026-12-01)'
complete -c sbx -n '__sbx_at trace ls' -l db -x -d 'List the runs this trace database holds, across nodes (a libpq URL)'
complete -c sbx -n '__sbx_at trace ls' -l node -x -d 'With --db: only the records of this node'
complete -c sbx -n '__sbx_at trace ls' -l limit-events -d 'With --db: only runs ended by a limit (timeout, oom, output_limit)'
complete -c sbx -n '__sbx_at trace' -a reindex -d 'Rebuild the query index from the ledger'
complete -c sbx -n '__sbx_at trace' -a verify -d "Check the ledger's hash chain; name the first break"
complete -c sbx -n '__sbx_at trace' -a head -d "Print the ledger's head for anchoring elsewhere"
complete -c sbx -n '__sbx_at trace' -a import -d 'Append records of the previous store format to the ledger'
complete -c sbx -n '__sbx_at trace verify' -l pubkey -r -F -d 'Ed25519 public key: every record must be signed'
complete -c sbx -n '__sbx_at trace verify' -l anchor -x -d 'SEQ:HASH printed earlier by trace head'
complete -c sbx -n '__sbx_at trace verify' -l json -d 'Print one JSON object'
complete -c sbx -n '__sbx_at trace verify' -l db -x -d "Verify every node's chain from this trace database alone (a libpq URL)"
complete -c sbx -n '__sbx_at trace verify' -l node -x -d 'With --db: only the records of this node'
complete -c sbx -n '__sbx_at trace verify' -l against-ledger -d "With --db: compare this store's ledger with what the database holds for its node"
complete -c sbx -n '__sbx_at trace head' -l json -d 'Print a JSON object'
complete -c sbx -n '__sbx_at trace' -a prune -d 'Remove the oldest records, leaving an anchor verify starts from'
complete -c sbx -n '__sbx_at trace prune' -l keep -x -d 'Keep the newest N records'
complete -c sbx -n '__sbx_at trace prune' -l before -x -d 'Prune records started before this (30d, 2026-12-01)'
complete -c sbx -n '__sbx_at trace prune' -l dry-run -d 'Say what would be pruned; change nothing'
complete -c sbx -n '__sbx_at trace prune' -l json -d 'Print one JSON object'
complete -c sbx -n '__sbx_at trace prune' -l tenant -x -a '(__sbx_tenants)' -d 'The records of this tenant'
complete -c sbx -n '__sbx_at trace' -a ship -d "Send this store's records the trace database lacks, in order"
complete -c sbx -n '__sbx_at trace ship' -l db -x -d "The trace database (a libpq URL; default: the profile's trace_db)"
complete -c sbx -n '__sbx_at trace ship' -l profile -x -a '(__sbx_profiles; __fish_complete_suffix .json)' -d "Take the database from this profile's trace_db"
complete -c sbx -n '__sbx_at trace ship' -l json -d 'Print one JSON object'

# sbx key
complete -c sbx -n '__sbx_at key' -a init -d 'Make the Ed25519 key pair that signs the trace ledger'
complete -c sbx -n '__sbx_at key init' -l json -d 'Print one JSON object'

# sbx pack
complete -c sbx -n '__sbx_at pack' -a validate -d "Check a pack's manifest and schemas"
complete -c sbx -n '__sbx_at pack validate' -l strict -d 'Unknown schema keywords are errors (the default)'
complete -c sbx -n '__sbx_at pack validate' -l no-strict -d 'Unknown schema keywords are warnings'
complete -c sbx -n '__sbx_at pack validate' -l json -d 'Print one JSON object: ok, problems, warnings'
complete -c sbx -n '__sbx_at pack' -a init -d 'Create a pack skeleton'
complete -c sbx -n '__sbx_at pack' -a run -d 'Run a pack on input records'
complete -c sbx -n '__sbx_at pack run' -l input -r -F -d 'Input records (JSON array)'
complete -c sbx -n '__sbx_at pack run' -l context -x -d 'Mount a context read-only: NAME=PATH'
complete -c sbx -n '__sbx_at pack run' -l secret -x -d 'Deliver a secret: NAME=@FILE or NAME=env:VAR'
complete -c sbx -n '__sbx_at pack run' -l result -r -F -d 'Write the validated result to FILE'
complete -c sbx -n '__sbx_at pack run' -l profile -x -a '(__sbx_profiles; __fish_complete_suffix .json)' -d 'Profile name or JSON file'
complete -c sbx -n '__sbx_at pack run' -l image -x -a 'host (__sbx_images)' -d 'Root file system: host or a stored image'
complete -c sbx -n '__sbx_at pack run' -l timeout -x -a 'none unlimited' -d 'Wall-time limit'
complete -c sbx -n '__sbx_at pack run' -l output-limit -x -a 'none unlimited' -d 'Bytes of stdout and of stderr passed through'
complete -c sbx -n '__sbx_at pack run' -l memory -x -a 'none unlimited' -d 'Memory limit'
complete -c sbx -n '__sbx_at pack run' -l pids -x -a 'none unlimited' -d 'Maximum number of processes'
complete -c sbx -n '__sbx_at pack run' -l cpus -x -a 'none unlimited' -d 'CPU share'
complete -c sbx -n '__sbx_at pack run' -l cpu-time -x -a 'none unlimited' -d 'CPU-time budget'
complete -c sbx -n '__sbx_at pack run' -l require-limits -d 'Fail unless every limit can be enforced'
complete -c sbx -n '__sbx_at pack run' -l require-record -d 'Always on for pack run'
complete -c sbx -n '__sbx_at pack run' -l seccomp -r -F -d 'Seccomp policy'
complete -c sbx -n '__sbx_at pack run' -l cap-add -x -a "$__sbx_capabilities" -d 'Keep this capability inside the user namespace (repeatable)'
complete -c sbx -n '__sbx_at pack run' -l gpu -x -a 'all 0 1 2 3' -d 'Give the sandbox GPUs'
complete -c sbx -n '__sbx_at pack run' -l trace-file -r -F -d 'Also write the trace record here'
complete -c sbx -n '__sbx_at pack run' -l trace-db -x -d 'Mirror the trace record to this PostgreSQL database (a libpq URL, no password)'
complete -c sbx -n '__sbx_at pack run' -l events -r -F -d 'Stream live events as JSON lines to FILE, a FIFO or fd:N'
complete -c sbx -n '__sbx_at pack run' -l dry-run -d 'Check everything, print the plan as JSON, run nothing'

# sbx image
complete -c sbx -n '__sbx_at image' -a import -d 'Import a directory or a tarball as an image'
complete -c sbx -n '__sbx_at image' -a ls -d 'List stored images'
complete -c sbx -n '__sbx_at image' -a inspect -d "Print an image's record as JSON"
complete -c sbx -n '__sbx_at image' -a rm -d 'Remove a name, or an image by digest'
complete -c sbx -n '__sbx_at image' -a verify -d "Check an image's seal"
complete -c sbx -n '__sbx_at image ls' -l json -d 'Print a JSON array for scripts'
complete -c sbx -n '__sbx_at image import' -F -d 'Directory or tarball'
complete -c sbx -n '__sbx_at image import' -l name -x -d 'NAME[:TAG] to give the image'
complete -c sbx -n '__sbx_at image import' -s q -l quiet -d 'Print only the digest, no progress'
complete -c sbx -n '__sbx_at image import' -l json -d 'Print the imported image as one JSON object'
complete -c sbx -n '__sbx_at image import' -l max-bytes -r -d 'Stop and store nothing past this much file data (default 4G)'
complete -c sbx -n '__sbx_at image import' -l max-entries -r -d 'Stop and store nothing past this many entries (default 1000000)'
complete -c sbx -n '__sbx_at image import' -l format -x -a 'auto rootfs oci-layout docker-archive' -d 'What SOURCE is'
complete -c sbx -n '__sbx_at image import' -l platform -x -a 'linux/amd64 linux/arm64 linux/arm/v7' -d 'OS/ARCH[/VARIANT] of a multi-platform image'
complete -c sbx -n '__sbx_at image inspect; or __sbx_at image rm; or __sbx_at image verify' -a '(__sbx_images)' -d 'Image'
complete -c sbx -n '__sbx_at image verify' -l full -d 'Re-hash every file and compare with the manifest'
complete -c sbx -n '__sbx_at image verify' -l json -d 'Print one JSON object'

# sbx exec
complete -c sbx -n '__sbx_at exec' -l profile -x -a '(__sbx_profiles; __fish_complete_suffix .json)' -d 'Profile name or JSON file; its limits are ceilings'
complete -c sbx -n '__sbx_at exec' -l allow-host -x -a '(__fish_print_hostnames)' -d 'Allow egress to HOST[:PORT] through the filtering proxy'
complete -c sbx -n '__sbx_at exec' -l trace-file -r -F -d 'Also write the trace record here'
complete -c sbx -n '__sbx_at exec' -l trace-db -x -d 'Mirror the trace record to this PostgreSQL database (a libpq URL, no password)'
complete -c sbx -n '__sbx_at exec' -l events -r -F -d 'Stream live events as JSON lines to FILE, a FIFO or fd:N'
complete -c sbx -n '__sbx_at exec' -l dry-run -d 'Check everything, print the plan as JSON, run nothing'

# sbx mcp
complete -c sbx -n '__sbx_at mcp' -l packs -r -a '(__fish_complete_directories)' -d 'A pack directory, or a directory of packs (repeatable)'
complete -c sbx -n '__sbx_at mcp' -l context -r -d 'Mount a context for every call of a pack: PACK/NAME=PATH'
complete -c sbx -n '__sbx_at mcp' -l secret -r -d 'Deliver a secret to every call of a pack: PACK/NAME=@FILE or PACK/NAME=env:VAR'
complete -c sbx -n '__sbx_at mcp' -l profile -x -a '(__sbx_profiles; __fish_complete_suffix .json)' -d 'Profile every call runs under; its limits are ceilings'
complete -c sbx -n '__sbx_at mcp' -l max-concurrent -r -d 'Calls running at once (default 4)'
complete -c sbx -n '__sbx_at mcp' -l max-queued -r -d 'Calls waiting beyond those (default 256)'
complete -c sbx -n '__sbx_at mcp' -l pool -r -d 'Sandboxes kept built ahead for each tool, run_code and every pack (default 2; 0: off)'
complete -c sbx -n '__sbx_at mcp' -l pool-max-idle -r -d 'Seconds a pooled sandbox may wait before it is rebuilt (default 300; 0: no limit)'
complete -c sbx -n '__sbx_at mcp' -l trace-db -x -d "Mirror each call's trace record to this PostgreSQL database (a libpq URL, no password)"
complete -c sbx -n '__sbx_at mcp' -l listen -r -d 'Serve MCP over Streamable HTTP at HOST:PORT'
complete -c sbx -n '__sbx_at mcp' -l tokens -r -F -d 'Bearer tokens, each naming a tenant (JSON)'
complete -c sbx -n '__sbx_at mcp' -l tls-cert -r -F -d 'Serve HTTPS with this PEM certificate chain'
complete -c sbx -n '__sbx_at mcp' -l tls-key -r -F -d 'The PEM private key of --tls-cert'
complete -c sbx -n '__sbx_at mcp' -l no-auth -d 'No token, on a loopback address only'
complete -c sbx -n '__sbx_at mcp' -l allow-origin -r -d 'A browser Origin allowed besides loopback and the server own'
complete -c sbx -n '__sbx_at mcp' -l max-connections -r -d 'Connections open at once (default 256)'
complete -c sbx -n '__sbx_at mcp' -l max-sessions -r -d 'MCP sessions open at once (default 64)'
complete -c sbx -n '__sbx_at mcp' -l max-calls-per-tenant -r -d 'Tool calls one tenant runs at once (default 8)'
complete -c sbx -n '__sbx_at mcp' -l max-body -r -d 'A request body bytes at most (default 4194304)'

# sbx doctor
complete -c sbx -n '__sbx_at doctor' -l json -d 'Print the checks as a JSON object'

# sbx probe (with the options of run above)
complete -c sbx -n '__sbx_at probe' -l json -d 'Print the results as JSON'
complete -c sbx -n '__sbx_at probe' -l trace-db -x -d 'Mirror the trace record to this PostgreSQL database (a libpq URL, no password)'

# sbx classify
complete -c sbx -n '__sbx_at classify' -l json -d 'Print the answer as JSON'
complete -c sbx -n '__sbx_at classify' -r -F -a '(__fish_complete_suffix .json)' -d 'Workload description (JSON)'
# sbx cgroup-init
complete -c sbx -n '__sbx_at cgroup-init' -l leaf -x -d 'Leaf cgroup for the container processes (default init)'
complete -c sbx -n '__sbx_at cgroup-init' -l json -d 'Print what was done as JSON'
# sbx replay
complete -c sbx -n '__sbx_at replay' -a '(__sbx_run_ids)' -d 'Run id'
complete -c sbx -n '__sbx_at replay' -a last -d 'The newest run'
complete -c sbx -n '__sbx_at replay' -l json -d 'Print the comparison as a JSON object'
complete -c sbx -n '__sbx_at replay' -l tenant -x -a '(__sbx_tenants)' -d 'A run of this tenant, replayed under it'

# sbx gc
complete -c sbx -n '__sbx_at gc' -l keep-days -x -d 'Keep the blobs of records from the last N days'
complete -c sbx -n '__sbx_at gc' -l max-bytes -x -d 'Keep the blob store under this size, oldest runs first'
complete -c sbx -n '__sbx_at gc' -l dry-run -d 'Say what would be deleted; delete nothing'
complete -c sbx -n '__sbx_at gc' -l json -d 'Print the report as one JSON object'
complete -c sbx -n '__sbx_at gc' -l tenant -x -a '(__sbx_tenants)' -d 'The blob store of this tenant'

# sbx session
function __sbx_session_ids
    # First column of `sbx session ls` (the running sessions' ids), without its header line.
    sbx session ls 2>/dev/null | tail -n +2 | string match -r '^\S+'
end

function __sbx_complete_session_cmd
    # sbx session exec ID -- CMD ...: the command starts right after "--".
    set -l tokens (commandline -opc)
    set -l i (contains -i -- -- $tokens)
    test -n "$i"; or return
    set -l words
    if test $i -lt (count $tokens)
        set words (string escape -- $tokens[(math $i + 1)..-1])
    end
    complete -C (string join ' ' -- $words (commandline -ct))
end

complete -c sbx -n '__sbx_at session' -a start -d "Start a session with sbx run's options; print its id"
complete -c sbx -n '__sbx_at session' -a exec -d 'Run a command (-- CMD ...) or code (--language L --code C) in a session'
complete -c sbx -n '__sbx_at session' -a ls -d 'List running sessions (--all: ended ones too)'
complete -c sbx -n '__sbx_at session' -a show -d 'Print a session as JSON'
complete -c sbx -n '__sbx_at session' -a stop -d 'End a session: its processes and /workspace are destroyed, its record written'
# sbx session start: the options of run but those it refuses (-i, -t, --dry-run, a command, --workdir,
# --output, --output-max-bytes, --output-max-files, --keep-inputs, --systemd-scope).
set -l __sbx_ss '__sbx_at session start'
# ... and the same options of sbx kernel run (a session in the foreground), where they mean the same.
set -l __sbx_sk '__sbx_at session start; or __sbx_at kernel run'
complete -c sbx -n $__sbx_sk -l profile -x -a '(__sbx_profiles; __fish_complete_suffix .json)' -d 'Profile name or JSON file'
complete -c sbx -n $__sbx_sk -l image -x -a 'host (__sbx_images)' -d 'Root file system: host or a stored image'
complete -c sbx -n $__sbx_sk -l uid -x -d 'User id inside the sandbox'
complete -c sbx -n $__sbx_sk -l gid -x -d 'Group id inside the sandbox'
complete -c sbx -n $__sbx_sk -l entrypoint -x -a '(__fish_complete_command)' -d "With --image: run this instead of the image's Entrypoint and Cmd"
complete -c sbx -n $__sbx_sk -l bind -r -F -d 'Bind a host path: SRC[:DST][:rw[,idmap]]'
complete -c sbx -n $__sbx_sk -l tmpfs -x -d 'Mount a size-capped tmpfs: DST[:SIZE] (not at /workspace)'
complete -c sbx -n $__sbx_sk -l workspace -d 'The current directory read-write at the same path, .git read-only'
complete -c sbx -n $__sbx_sk -l input -r -F -d 'Mount a host file or directory read-only: PATH[:DST]'
complete -c sbx -n $__sbx_ss -l env -x -d 'Set an environment variable for every call: NAME=VALUE'
complete -c sbx -n $__sbx_sk -l env-pass -x -a '(set -n -x)' -d 'Pass a variable from the environment'
complete -c sbx -n $__sbx_sk -l secret -x -d 'Deliver a secret as /run/secrets/NAME for the session: NAME=@FILE or NAME=env:VAR'
complete -c sbx -n $__sbx_ss -l timeout -x -d "Each call's wall-time ceiling, e.g. 30s"
complete -c sbx -n $__sbx_ss -l output-limit -x -d "Each call's ceiling of bytes of stdout and of stderr"
complete -c sbx -n $__sbx_sk -l memory -x -a 'none unlimited' -d 'Memory limit of the whole session, e.g. 256M'
complete -c sbx -n $__sbx_sk -l pids -x -a 'none unlimited' -d 'Process limit of the whole session'
complete -c sbx -n $__sbx_sk -l cpus -x -a 'none unlimited' -d 'CPU share of the whole session, e.g. 0.5'
complete -c sbx -n $__sbx_sk -l cpu-time -x -a 'none unlimited' -d 'CPU-time budget of the whole session, e.g. 10m'
complete -c sbx -n $__sbx_sk -l require-limits -d 'Fail unless every limit can be enforced'
complete -c sbx -n $__sbx_sk -l require-record -d 'Fail when the trace record cannot be stored durably'
complete -c sbx -n $__sbx_sk -l seccomp -r -F -a 'default unconfined' -d 'Seccomp policy: default, unconfined or an OCI JSON file'
complete -c sbx -n $__sbx_sk -l cap-add -x -a "$__sbx_capabilities" -d 'Keep this capability inside the user namespace (repeatable)'
complete -c sbx -n $__sbx_sk -l gpu -x -a 'all 0 1 2 3' -d 'Give the sandbox GPUs: all, indices (0,1) or a UUID'
complete -c sbx -n $__sbx_sk -l allow-host -x -a '(__fish_print_hostnames)' -d 'Allow egress to HOST[:PORT] through the filtering proxy'
complete -c sbx -n $__sbx_sk -l trace-file -r -F -d "Also write the session run's record (at its end) to this file"
complete -c sbx -n $__sbx_sk -l trace-db -x -d "Mirror the session run's record to this PostgreSQL database (a libpq URL, no password)"
complete -c sbx -n $__sbx_sk -l events -r -F -d 'Stream live events as JSON lines to FILE, a FIFO or fd:N'
complete -c sbx -n $__sbx_sk -l no-systemd-scope -d 'What a session does anyway: no systemd user scope'
complete -c sbx -n $__sbx_ss -l idle -x -d 'End the session after this long without a call (default 10m)'
complete -c sbx -n $__sbx_sk -l max -x -d 'End the session this long after its start (default 1h, at most 24h)'
complete -c sbx -n $__sbx_ss -l json -d 'Print {session, run_id, limits} as JSON instead of the bare id'
# sbx session exec ID, show ID, stop ID
complete -c sbx -n '__sbx_at session exec; or __sbx_at session show; or __sbx_at session stop' -a '(__sbx_session_ids)' -d 'Session id'
complete -c sbx -n '__sbx_at session exec' -l language -x -a 'python sh bash node' -d 'python (its globals stay between calls), sh, bash or node'
complete -c sbx -n '__sbx_at session exec' -l code -x -d 'The code to run with --language'
complete -c sbx -n '__sbx_at session exec' -l timeout -x -d "This call's wall-time limit, at most the session's"
complete -c sbx -n '__sbx_at session exec' -l output-limit -x -d "Bytes of stdout and of stderr this call passes, at most the session's"
complete -c sbx -n '__sbx_at session exec' -l json -d "Print the call's result as JSON; its stdout goes to stderr"
complete -c sbx -n '__sbx_in session exec CMD' -a '(__sbx_complete_session_cmd)'
complete -c sbx -n '__sbx_at session ls' -l all -d 'Ended sessions too'
complete -c sbx -n '__sbx_at session ls' -l json -d 'As a JSON array'
complete -c sbx -n '__sbx_at session stop' -l json -d 'Print {session, calls, ended_by, run_id} as JSON'

# sbx kernel
complete -c sbx -n '__sbx_at kernel' -a install -d 'Write a kernelspec whose kernel runs in an sbx session'
complete -c sbx -n '__sbx_at kernel' -a run -d "Run a kernel in a session (what the kernelspec's argv starts)"
complete -c sbx -n '__sbx_at kernel install' -l name -x -d "The kernelspec's name (e.g. sbx-python3)"
complete -c sbx -n '__sbx_at kernel install' -l user -d "Into the user's Jupyter data dir instead of /usr/local/share/jupyter"
complete -c sbx -n '__sbx_at kernel install' -l profile -x -a '(__sbx_profiles; __fish_complete_suffix .json)' -d 'The profile its sessions run under'
complete -c sbx -n '__sbx_at kernel install' -l display-name -x -d 'The name notebooks show'
complete -c sbx -n '__sbx_at kernel install' -l idle -x -d "End a kernel's session after this long without traffic (default 10m)"
complete -c sbx -n '__sbx_at kernel install' -l max -x -d "End a kernel's session this long after its start (default 1h, at most 24h)"
# sbx kernel run: the options of session start above (\$__sbx_sk) but its --json; here those that
# read differently for a kernel, and the client's connection file.
set -l __sbx_kr '__sbx_at kernel run'
complete -c sbx -n $__sbx_kr -l env -x -d 'Set an environment variable for the kernel: NAME=VALUE'
complete -c sbx -n $__sbx_kr -l timeout -x -d "A session call's ceiling (a kernel takes no calls)"
complete -c sbx -n $__sbx_kr -l output-limit -x -d "A session call's ceiling (a kernel takes no calls)"
complete -c sbx -n $__sbx_kr -l connection-file -r -F -d "The client's connection file (Jupyter's {connection_file})"
complete -c sbx -n $__sbx_kr -l idle -x -d 'End the session after this long without traffic (default 10m)'

# --tenant NAME (man sbx, TENANTS): the NAME.json files of the tenants directory.
function __sbx_tenants
    for d in $SBX_TENANTS_DIR (set -q XDG_CONFIG_HOME; and echo $XDG_CONFIG_HOME/sbx/tenants; or echo $HOME/.config/sbx/tenants) /etc/sbx/tenants
        test -d $d; and for f in $d/*.json
            basename $f .json
        end
    end
end
complete -c sbx -n '__sbx_at run; or __sbx_at probe; or __sbx_at pack run; or __sbx_at exec; or __sbx_at mcp; or __sbx_at session start; or __sbx_at kernel install; or __sbx_at kernel run' -l tenant -x -a '(__sbx_tenants)' -d 'Run as this tenant: its ceilings, own host ids and store'
complete -c sbx -n '__sbx_at session exec; or __sbx_at session ls; or __sbx_at session show; or __sbx_at session stop' -l tenant -x -a '(__sbx_tenants)' -d 'The sessions of this tenant'
complete -c sbx -n '__sbx_at trace ls; or __sbx_at trace show; or __sbx_at trace export; or __sbx_at trace verify; or __sbx_at trace head; or __sbx_at trace reindex; or __sbx_at trace ship' -l tenant -x -a '(__sbx_tenants)' -d 'The records of this tenant'
