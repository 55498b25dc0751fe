#!/usr/bin/env python3
"""Where the test suite's time goes: each test's wall time and the whole machine's CPU time over it (from
/proc/stat, so Chromium and every process a test starts count), in one pytest run; then the totals, the tests
that cost most, and the cost by file. Extra arguments go to pytest (one process: run it with nothing beside it).

    env -u CASCADE_REAL_DRAFT -u CASCADE_REAL_TARGET python lab/scripts/test-cpu.py [--top 25] [PYTEST ARGS]
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def busy_s() -> float:
    """Seconds of CPU the machine has spent busy since boot, all cores together."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (sum(v) - v[3] - v[4]) / 100  # less idle and iowait (USER_HZ is 100 on Linux)


class Recorder:
    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float]] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        cpu, wall = busy_s(), time.perf_counter()
        yield
        self.rows.append((item.nodeid, time.perf_counter() - wall, busy_s() - cpu))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--top", type=int, default=25)
    args, pytest_args = parser.parse_known_args()
    recorder = Recorder()
    cpu, wall = busy_s(), time.perf_counter()
    code = pytest.main(["-q", "-p", "no:cacheprovider", *pytest_args], plugins=[recorder])
    cpu, wall = busy_s() - cpu, time.perf_counter() - wall
    rows = recorder.rows
    in_tests = sum(r[1] for r in rows)
    print(f"\n{len(rows)} tests: {wall:.1f} s in all ({in_tests:.1f} s in tests), the machine busy {cpu:.1f} CPU-s "
          f"({cpu / wall:.2f} cores on average)")
    print(f"\nthe {args.top} tests that cost the machine most (wall s, CPU-s):")
    for node, w, c in sorted(rows, key=lambda r: -r[2])[:args.top]:
        print(f"{w:7.2f} {c:7.2f}  {node}")
    by_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for node, w, c in rows:
        by_file[node.split("::")[0]][0] += w
        by_file[node.split("::")[0]][1] += c
    print(f"\nthe {args.top} files that cost most (wall s, CPU-s):")
    for name, (w, c) in sorted(by_file.items(), key=lambda kv: -kv[1][1])[:args.top]:
        print(f"{w:7.1f} {c:7.1f}  {name}")
    sys.exit(code)


if __name__ == "__main__":
    main()
