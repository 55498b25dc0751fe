"""lab/scripts/page-cpu.py on the toy pair: it replays a written request through the page and reports both
pacings, the page's drawing pictures while it writes and the other only at the start and end. The script runs
as `__main__` in this process, whose imports (Gradio's, seconds) it then shares; what it patches is put back."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

from cascade.ui import run as page_run

from .helpers import ROOT, TOY_THREADS


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads the page threads' CPU time from /proc")
def test_the_page_cpu_script_reports_both_pacings(toy, monkeypatch, capsys):
    script = ROOT / "lab" / "scripts" / "page-cpu.py"
    monkeypatch.setattr(sys, "argv", [str(script), str(toy.small), str(toy.related), "16", "1", "20"])
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(page_run.Pacer, "draw", page_run.Pacer.draw)  # the script counts pictures by wrapping it
    monkeypatch.setattr(page_run, "UPDATE_EVERY_S", page_run.UPDATE_EVERY_S)
    monkeypatch.setenv("CASCADE_THREADS", str(TOY_THREADS))
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    found = dict(re.findall(r"^(the page's pacing|pictures at the start and end only): page threads' CPU .*?"
                            r"pictures while writing: (\d+) a request", out, re.M))
    assert set(found) == {"the page's pacing", "pictures at the start and end only"}, out
    assert int(found["the page's pacing"]) >= 2 and int(found["pictures at the start and end only"]) <= 1, out
