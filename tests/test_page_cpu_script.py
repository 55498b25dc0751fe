"""lab/scripts/page-cpu.py on the toy pair: it replays a written request through the page and reports both
pacings, the page's drawing pictures while it writes and the other only at the start and end."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import ROOT


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads the page threads' CPU time from /proc")
def test_the_page_cpu_script_reports_both_pacings(toy):
    r = subprocess.run([sys.executable, str(ROOT / "lab" / "scripts" / "page-cpu.py"), str(toy.small), str(toy.related),
                        "16", "1", "20"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    found = dict(re.findall(r"^(the page's pacing|pictures at the start and end only): page threads' CPU .*?"
                            r"pictures while writing: (\d+) a request", r.stdout, re.M))
    assert set(found) == {"the page's pacing", "pictures at the start and end only"}, r.stdout
    assert int(found["the page's pacing"]) >= 2 and int(found["pictures at the start and end only"]) <= 1, r.stdout
