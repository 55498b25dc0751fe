"""llama.cpp's own speculative decoding (`llama-speculative-simple`, `scripts/build-llama-cpp-tools`) on the
same models and prompts: the peer we compare with."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..serving.examples import Example
from ..engine.models import ModelPair
from ..engine.prompt import render_chat


@dataclass(frozen=True)
class PeerResult:
    """llama.cpp's speculative decoding at one k, averaged over the prompts; or why it did not run."""

    k: int
    decode_tok_s: float | None = None  # llama.cpp's "decoded" speed: prompt processing excluded
    accept: float | None = None
    error: str | None = None

    def to_dict(self) -> dict:
        return {"decode_tok_s": self.decode_tok_s, "accept": self.accept} if self.error is None \
            else {"error": self.error}


def llama_cpp_tools() -> Path | None:
    found = shutil.which("llama-speculative-simple")
    if found:
        return Path(found).parent
    default = Path(os.environ.get("CASCADE_LLAMA_TOOLS", Path.home() / ".cache/cascade/llama.cpp-tools"))
    hits = sorted(default.glob("*/bin/llama-speculative-simple"))
    return hits[-1].parent if hits else None


def run_speculative(tools: Path, pair: ModelPair, example: Example, k: int, max_tokens: int) -> dict:
    """One run of llama-speculative-simple, greedy: its decoded speed and acceptance, or an error."""
    prompt = render_chat(pair.target.llm, example.prompt) if example.chat else example.prompt
    threads = str(pair.config.n_threads)
    cmd = [str(tools / "llama-speculative-simple"), "-m", str(pair.target_path), "-md", str(pair.draft_path),
           "-p", prompt, "-n", str(max_tokens), "-t", threads, "-td", threads, "--temp", "0",
           "--spec-type", "draft-simple", "--spec-draft-n-max", str(k), "--spec-draft-n-min", "0",
           "--spec-draft-p-min", "0", "-c", "2048", "--seed", "0", "-ngl", "0"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}
    log = r.stdout + r.stderr
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", log)
    acc = re.search(r"accept\s+=\s+([\d.]+)%", log)
    if r.returncode != 0 or not m:
        return {"error": f"exit {r.returncode}: {log[-300:]}"}
    return {"tok_s": float(m.group(3)), "accept": float(acc.group(1)) / 100 if acc else None}


def llama_cpp_peer(pair: ModelPair, examples: list[Example], ks: Sequence[int], max_tokens: int,
                   log: Callable[[str], None] = print) -> list[PeerResult] | None:
    """llama.cpp's speculative decoding at each k; None when its tools are not built."""
    tools = llama_cpp_tools()
    if tools is None:
        log("llama.cpp peer skipped: build it with scripts/build-llama-cpp-tools")
        return None
    out = []
    for k in ks:
        runs = [run_speculative(tools, pair, ex, k, max_tokens) for ex in examples]
        ok = [r for r in runs if "error" not in r]
        if not ok:
            out.append(PeerResult(k, error=runs[0]["error"] if runs else "no prompts"))
            continue
        out.append(PeerResult(k, decode_tok_s=sum(r["tok_s"] for r in ok) / len(ok),
                              accept=sum(r["accept"] or 0 for r in ok) / len(ok)))
        log(f"  llama.cpp speculative k={k}: {out[-1].decode_tok_s:.2f} tok/s (decode)")
    return out
