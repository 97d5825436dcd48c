"""A typed Python client for sbx: model-written code and rule packs run in a fresh sandbox each.

Standard library only. It drives the `sbx` binary (`sbx exec` and `sbx pack run`) as a
subprocess, so it is as safe as sbx itself and needs nothing else installed. With `pool=N`,
`exec` calls go instead to one long-lived `sbx mcp --pool N` the client starts on first use, whose
sandboxes are built ahead of the calls (each still used once, each call its own record);
`close()` (or a `with` block) ends it:

    from sbx_client import Sbx, ContractError

    sbx = Sbx()                                   # "sbx" from PATH; Sbx("/path/to/sbx") otherwise
    r = sbx.exec(code="print(sum(x['v'] for x in __import__('json').load(open('/in/input.json'))))",
                 inputs=[{"v": 1}, {"v": 2}], limits={"timeout": "5s"})
    r.status, r.exit_code, r.stdout               # "ok", 0, "3\\n"

What maps to what:
  - the program's own failure (a non-zero exit, a timeout, an OOM kill, a seccomp kill) is a
    result whose `status` says so (`result.ok` is False; `result.raise_for_status()` raises);
  - a contract failure (records or the result do not match their schema: sbx exit 65) raises
    ContractError, carrying sbx's message and, for exec, the whole result;
  - anything sbx refuses before running (a malformed request, limits above the profile, a missing
    pack: exit 125) raises SbxError with sbx's one-line message.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence

__all__ = ["Sbx", "ExecResult", "PackResult", "Usage", "SbxError", "ContractError", "RunFailed"]

# sbx's exit statuses (man sbx, EXIT STATUS).
EXIT_CONTRACT = 65
EXIT_TIMEOUT = 124
EXIT_SBX_ERROR = 125


# Durations and sizes are strings with their unit everywhere ("10s", "256M"): sbx refuses a bare
# number for them in an exec request (the command line reads `--timeout 10` as seconds, a JSON
# number was once milliseconds). run_pack's limits become flags, where sbx would read a number as
# seconds or bytes, so the client refuses one there in sbx's words: one rule for both calls.
# Counts (pids) and cpus are numbers.
_UNIT_LIMITS = {"timeout": "duration", "cpu_time": "duration", "memory": "size", "output_limit": "size",
                "tmp_size": "size"}


def _check_limit_units(limits: Mapping[str, Any]) -> None:
    for key, value in limits.items():
        kind = _UNIT_LIMITS.get(key)
        if kind and isinstance(value, (int, float)) and not isinstance(value, bool):
            forms = f'"{value}s" or "{value * 1000:g}ms"' if kind == "duration" else f'"{value}M", "{value}K" or "{value}B" (bytes)'
            raise SbxError(f"limits: /limits/{key}: a bare number is ambiguous; write a {kind} with its unit: {forms}",
                           EXIT_SBX_ERROR)


class SbxError(Exception):
    """sbx refused or failed before a result existed (exit 125, or sbx could not be started)."""

    def __init__(self, message: str, exit_status: Optional[int] = None):
        super().__init__(message)
        self.message = message
        self.exit_status = exit_status


class ContractError(SbxError):
    """The input records or the program's result broke the schema (sbx exit 65)."""

    def __init__(self, message: str, exit_status: Optional[int] = None, result: Any = None):
        super().__init__(message, exit_status)
        self.result = result


class RunFailed(SbxError):
    """Raised by raise_for_status(): the program ran but did not succeed."""

    def __init__(self, message: str, result: Any):
        super().__init__(message)
        self.result = result


@dataclass
class Usage:
    wall_ms: Optional[int] = None
    cpu_user_ms: Optional[int] = None
    cpu_sys_ms: Optional[int] = None
    max_rss_bytes: Optional[int] = None
    memory_peak_bytes: Optional[int] = None
    oom_kills: Optional[int] = None
    pids_peak: Optional[int] = None

    @classmethod
    def from_json(cls, j: Optional[Mapping[str, Any]]) -> "Usage":
        j = j if isinstance(j, Mapping) else {}
        return cls(**{k: j.get(k) for k in cls.__dataclass_fields__})


@dataclass
class _Outcome:
    run_id: Optional[str]
    status: str
    exit_code: Optional[int]
    signal: Optional[int]
    usage: Usage
    violations: List[Dict[str, Any]]
    trace_path: Optional[str]

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def raise_for_status(self) -> "_Outcome":
        if not self.ok:
            raise RunFailed(f"run {self.run_id}: status {self.status}, exit code {self.exit_code}", self)
        return self


@dataclass
class ExecResult(_Outcome):
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    result: Any = None  # the validated /out/result.json, when there is one
    result_errors: Optional[List[Any]] = None


@dataclass
class PackResult(_Outcome):
    result: Any = None  # the validated result (what `sbx pack run` prints)
    stderr: str = ""    # the program's stderr as sbx relayed it, and sbx's own warnings
    trace: Dict[str, Any] = field(default_factory=dict)


# The MCP revision the pooled mode speaks (sbx mcp serves it; man sbx-mcp).
_MCP_VERSION = "2025-11-25"
# A response line from sbx mcp is bounded by sbx: a worker's response within 2 x 6 x (64 MiB + the
# output limit) + 1 MiB (runtime/server/mcp_protocol.cpp), escapes included. The client refuses a
# line past 1 GiB rather than buffer without end.
_MAX_LINE = 1 << 30
# How long the server's start and its initialize may take when the client has no timeout.
_START_TIMEOUT = 60.0


def _reap(p: subprocess.Popen) -> None:
    """Ends the server process if it still runs: end of input first (sbx mcp then finishes or
    cancels what runs, each call recorded), SIGTERM after 2 s, SIGKILL after 5 more."""
    if p.poll() is None:
        try:
            p.stdin.close()
        except OSError:
            pass
        for sig, wait in ((None, 2), (signal.SIGTERM, 5), (signal.SIGKILL, None)):
            if sig is not None:
                try:
                    p.send_signal(sig)
                except OSError:
                    pass
            try:
                p.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    for f in (p.stdin, p.stdout):
        try:
            f.close()
        except OSError:
            pass


class _McpServer:
    """One `sbx mcp` process and a line-delimited JSON-RPC exchange with it, one call at a time.
    Its stderr goes to an unlinked temporary file (never a pipe nobody drains), read back for the
    message when the server fails. Every failure is an SbxError, after which the server is ended."""

    def __init__(self, argv: List[str], timeout: Optional[float]):
        self._err = tempfile.TemporaryFile(prefix="sbx-client-mcp-")
        try:
            self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err)
        except OSError as e:
            self._err.close()
            raise SbxError(f"cannot start {argv[0]}: {e.strerror}") from e
        # A forgotten client still ends its server when it is collected.
        self._finalizer = weakref.finalize(self, _reap, self.p)
        self._buf = bytearray()
        self._next_id = 1
        try:
            r = self.request("initialize", {"protocolVersion": _MCP_VERSION, "capabilities": {},
                                            "clientInfo": {"name": "sbx_client", "version": "1"}},
                             timeout if timeout is not None else _START_TIMEOUT)
            if not isinstance(r.get("result"), dict):
                raise self._fail(f"refused the client's initialize: {r.get('error')}")
            self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        except BaseException:
            self.close()
            raise

    def stderr_tail(self) -> str:
        try:
            self._err.seek(0, os.SEEK_END)
            size = self._err.tell()
            self._err.seek(max(0, size - 4096))
            return _one_line(self._err.read().decode(errors="replace"))
        except (OSError, ValueError):
            return ""

    def _fail(self, what: str) -> SbxError:
        tail = self.stderr_tail()  # before close(), which closes the file
        self.close()
        return SbxError(f"sbx mcp {what}" + (f"; its stderr: {tail}" if tail else ""))

    def _send(self, msg: Mapping[str, Any]) -> None:
        try:
            self.p.stdin.write(json.dumps(msg).encode() + b"\n")
            self.p.stdin.flush()
        except (OSError, ValueError) as e:
            raise self._fail(f"is gone ({e})") from e

    def _read_line(self, deadline: Optional[float]) -> bytes:
        fd = self.p.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        end = self._buf.find(b"\n")
        while end < 0:
            if len(self._buf) > _MAX_LINE:
                raise self._fail(f"sent a line of more than {_MAX_LINE} bytes")
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise self._fail("did not answer within the client's timeout (it was ended)")
            if not poller.poll(None if left is None else max(1, int(left * 1000))):
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise self._fail(f"exited ({self.p.wait()}) before it answered")
            start = len(self._buf)
            self._buf += chunk
            found = chunk.find(b"\n")
            end = -1 if found < 0 else start + found
        line = bytes(self._buf[:end])
        del self._buf[:end + 1]
        return line

    def request(self, method: str, params: Mapping[str, Any], timeout: Optional[float]) -> Dict[str, Any]:
        rid = self._next_id
        self._next_id += 1
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:  # notifications, requests to the client and other ids are skipped
            line = self._read_line(deadline)
            try:
                msg = json.loads(line)
            except (ValueError, RecursionError) as e:
                raise self._fail(f"wrote a line that is not JSON ({e})") from e
            if isinstance(msg, dict) and msg.get("id") == rid and ("result" in msg or "error" in msg):
                return msg

    def close(self) -> None:
        _reap(self.p)
        self._finalizer.detach()
        try:
            self._err.close()
        except OSError:
            pass


def _one_line(text: str) -> str:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1] if lines else text.strip()


class Sbx:
    """One sbx binary and its options, shared by every call (each call is its own sandbox)."""

    def __init__(self, binary: str = "sbx", *, state_dir: Optional[str] = None, profile: Optional[str] = None,
                 image: Optional[str] = None, timeout: Optional[float] = None, pool: int = 0):
        """`timeout` (seconds) bounds the whole sbx process from the client's side, as a last resort;
        the run's own wall-time limit (`limits={"timeout": ...}`) is what ends a slow program.
        `pool` > 0 serves `exec` calls from one `sbx mcp --pool N` (started on the first call,
        ended by close()); a call with its own `profile` or `allow_hosts` still runs as `sbx exec`."""
        self.binary = binary
        self.state_dir = state_dir
        self.profile = profile
        self.image = image
        self.timeout = timeout
        self.pool = pool
        self._server: Optional[_McpServer] = None
        self._lock = threading.Lock()

    def close(self) -> None:
        """Ends the pooled mode's `sbx mcp` (its idle sandboxes go with it; a call running in it is
        cancelled and recorded so); a later call starts one. Not under the calls' lock: it may end
        a server another thread is waiting on, whose call then raises SbxError."""
        server, self._server = self._server, None
        if server is not None:
            server.close()

    def __enter__(self) -> "Sbx":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _global_args(self) -> List[str]:
        return ["--state-dir", self.state_dir] if self.state_dir else []

    def _run(self, args: Sequence[str], stdin: Optional[str] = None,
             env: Optional[Mapping[str, str]] = None) -> subprocess.CompletedProcess:
        try:
            return subprocess.run([self.binary, *self._global_args(), *args], input=stdin, capture_output=True,
                                  text=True, errors="replace", timeout=self.timeout,
                                  env=dict(env) if env is not None else None)
        except FileNotFoundError as e:
            raise SbxError(f"cannot start {self.binary}: {e.strerror}") from e
        except subprocess.TimeoutExpired as e:
            raise SbxError(f"sbx did not finish within {self.timeout} s (the client's timeout)") from e

    def exec(self, code: str, language: str = "python", *, inputs: Any = None,
             files: Optional[Mapping[str, str]] = None, limits: Optional[Mapping[str, Any]] = None,
             output_schema: Optional[Mapping[str, Any]] = None, profile: Optional[str] = None,
             allow_hosts: Sequence[str] = ()) -> ExecResult:
        """Runs `code` through `sbx exec`: inputs at /in/input.json, files under /code, the result
        read from /out/result.json and checked against `output_schema` when one is given.
        `limits` take strings with units for durations and sizes ({"timeout": "5s", "memory":
        "256M"}; a bare number raises SbxError) and numbers for pids and cpus; they may lower the
        profile's, never raise them. `profile` (a name or a JSON file; default the client's, else
        sbx's `untrusted`) sets those ceilings; `allow_hosts` are `--allow-host HOST[:PORT]` rules,
        the only hosts the program may reach (through sbx's proxy)."""
        request: Dict[str, Any] = {"language": language, "code": code}
        if inputs is not None:
            request["inputs"] = inputs
        if files:
            request["files"] = dict(files)
        if limits:
            request["limits"] = dict(limits)  # sbx refuses a bare number for a duration or a size
        if output_schema is not None:
            request["output_schema"] = output_schema
        if self.pool > 0 and not allow_hosts and profile in (None, self.profile):
            return self._exec_pooled(request)
        args = ["exec"]
        profile = profile or self.profile
        if profile:
            args += ["--profile", profile]
        for host in allow_hosts:
            args += ["--allow-host", host]
        p = self._run(args, stdin=json.dumps(request))
        try:
            resp = json.loads(p.stdout) if p.stdout.strip() else {}
        except json.JSONDecodeError:
            resp = {}
        if p.returncode == EXIT_SBX_ERROR or (p.returncode != 0 and not resp.get("status")):
            error = resp.get("error")
            message = error.get("message") if isinstance(error, dict) else error
            raise SbxError(message or _one_line(p.stderr) or f"sbx exec exited {p.returncode}", p.returncode)
        return self._exec_result(resp)

    def _exec_pooled(self, request: Dict[str, Any]) -> ExecResult:
        """run_code through the pooled `sbx mcp`: the same request and response as `sbx exec`'s.
        A server that died between calls is replaced; one that fails during a call (it died, passed
        the client's timeout, answered nonsense) is ended and the call raises SbxError."""
        with self._lock:
            if self._server is not None and self._server.p.poll() is not None:
                self._server.close()  # it died between calls: nothing of a call was lost
                self._server = None
            if self._server is None:
                argv = [self.binary, *self._global_args(), "mcp", "--pool", str(self.pool)]
                if self.profile:
                    argv += ["--profile", self.profile]
                self._server = _McpServer(argv, self.timeout)
            server = self._server
            try:
                msg = server.request("tools/call", {"name": "run_code", "arguments": request}, self.timeout)
            except BaseException:
                server.close()
                self._server = None
                raise
        if "error" in msg:  # JSON-RPC: a malformed request, the queue full
            error = msg["error"] if isinstance(msg["error"], dict) else {}
            raise SbxError(f"sbx mcp: {error.get('message') or msg['error']}", EXIT_SBX_ERROR)
        r = msg.get("result")
        resp = r.get("structuredContent") if isinstance(r, dict) else None
        if not isinstance(resp, dict) or not isinstance(resp.get("status"), str):  # refused before any sandbox
            content = r.get("content") if isinstance(r, dict) else None
            texts = [c["text"] for c in content if isinstance(c, dict) and isinstance(c.get("text"), str)] \
                if isinstance(content, list) else []
            raise SbxError("\n".join(texts).strip() or "sbx mcp: run_code failed", EXIT_SBX_ERROR)
        return self._exec_result(resp)

    @staticmethod
    def _exec_result(resp: Mapping[str, Any]) -> ExecResult:
        result = ExecResult(
            run_id=resp.get("run_id"), status=resp.get("status", "error"), exit_code=resp.get("exit_code"),
            signal=resp.get("signal"), usage=Usage.from_json(resp.get("usage")),
            violations=list(resp.get("violations") or []), trace_path=resp.get("trace"),
            stdout=resp.get("stdout") or "", stderr=resp.get("stderr") or "",
            stdout_truncated=bool(resp.get("stdout_truncated")), stderr_truncated=bool(resp.get("stderr_truncated")),
            result=resp.get("result"), result_errors=resp.get("result_errors"))
        if result.status in ("output_invalid", "input_invalid"):
            errors = result.result_errors or []
            shown = [f"{e.get('pointer') or '/'}: {e.get('message')}" if isinstance(e, dict) else str(e) for e in errors[:3]]
            more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
            raise ContractError(f"run {result.run_id}: {result.status}: {'; '.join(shown) or result.status}{more}",
                                EXIT_CONTRACT, result)
        return result

    def run_pack(self, path: str, records: Sequence[Any], *, contexts: Optional[Mapping[str, str]] = None,
                 secrets: Optional[Mapping[str, str]] = None, limits: Optional[Mapping[str, str]] = None) -> PackResult:
        """Runs the pack at `path` on `records` through `sbx pack run`. `contexts` maps a context
        name to a host path; `secrets` maps a secret name to its value, which reaches sbx through
        its environment only (never argv, never a file) and the sandbox as /run/secrets/NAME.
        `limits` are flags such as {"timeout": "5s", "memory": "256M"} (they may lower the pack's;
        a bare number for a duration or a size raises SbxError, as in exec)."""
        _check_limit_units(limits or {})
        env = dict(os.environ)
        args = ["pack", "run", path]
        for name, host_path in (contexts or {}).items():
            args += ["--context", f"{name}={host_path}"]
        for i, (name, value) in enumerate((secrets or {}).items()):
            var = f"SBX_CLIENT_SECRET_{i}"
            env[var] = value
            args += ["--secret", f"{name}=env:{var}"]
        for flag, value in (limits or {}).items():
            args += [f"--{flag.replace('_', '-')}", str(value)]
        if self.profile:
            args += ["--profile", self.profile]
        if self.image:
            args += ["--image", self.image]
        with tempfile.TemporaryDirectory(prefix="sbx-client-") as tmp:
            records_path = os.path.join(tmp, "records.json")
            trace_path = os.path.join(tmp, "trace.json")
            with open(records_path, "w") as f:
                json.dump(list(records), f)
            p = self._run(args + ["--input", records_path, "--trace-file", trace_path], env=env)
            trace: Dict[str, Any] = {}
            if os.path.exists(trace_path):
                with open(trace_path) as f:
                    trace = json.load(f)
        if not trace:  # refused before a run: bad records (65) or the caller's input (125)
            message = _one_line(p.stderr) or f"sbx pack run exited {p.returncode}"
            if p.returncode == EXIT_CONTRACT:
                raise ContractError(message, EXIT_CONTRACT)
            raise SbxError(message, p.returncode)
        outcome = trace.get("result") or {}
        result = PackResult(
            run_id=trace.get("run_id"), status=outcome.get("status", "error"), exit_code=outcome.get("exit_code"),
            signal=outcome.get("signal"), usage=Usage.from_json(trace.get("usage")),
            violations=list(trace.get("violations") or []), trace_path=None, stderr=p.stderr, trace=trace)
        if p.returncode == EXIT_CONTRACT:
            raise ContractError(_one_line(p.stderr), EXIT_CONTRACT, result)
        if p.returncode == EXIT_SBX_ERROR and result.status in ("setup_error", "error"):
            raise SbxError(_one_line(p.stderr), EXIT_SBX_ERROR)
        if result.ok:
            result.result = json.loads(p.stdout) if p.stdout.strip() else None
        return result
