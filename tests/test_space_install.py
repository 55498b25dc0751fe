"""What a Hugging Face Space gets from our files: a slow test (a source build, minutes).

A Gradio Space runs exactly `pip install -r pre-requirements.txt` and then `pip install -r
requirements.txt`. This test does the same in a fresh virtual environment, with no pip cache (pip's
wheel cache ignores config settings, so a cached native build could stand in for ours), then checks
that the llama.cpp it got was built portably (no AVX-512 or AMX compiled in: with -march=native on an
AMX Xeon quantized models crash on any batch of 2+ tokens) and that a quantized model evaluates a
batch of 8 tokens.

Runs only when asked: `CASCADE_SPACE_TEST=1 bash scripts/test -s -m slow tests/test_space_install.py`
(.ci/run does it when requirements.txt, pre-requirements.txt or scripts/install-llama-cpp changed).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("CASCADE_SPACE_TEST") != "1",
                       reason="slow Space install test (a source build, minutes): set CASCADE_SPACE_TEST=1"),
]

# Compiled-in CPU features that a -march=native build on a recent Xeon has and a portable one must not.
NATIVE_ONLY = ("AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_INT8", "AVX_VNNI")

# Runs inside the Space-like environment: only what the two pip commands installed is importable.
PROBE = r"""
import json, sys
import numpy as np
import llama_cpp
info = llama_cpp.llama_print_system_info().decode()
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, n_threads=2, logits_all=True, verbose=False)
tokens = llm.tokenize(b"The cat sat on the mat. My name is Sam, and this is my cat.", add_bos=False)[:8]
assert len(tokens) == 8, tokens
llm.eval(tokens)  # one batch of 8 tokens: where AMX is compiled in, quantized models crash here
rows = np.asarray(llm.scores[:8])
print(json.dumps({
    "version": llama_cpp.__version__,
    "system_info": info,
    "n_tokens": llm.n_tokens,
    "finite": bool(np.isfinite(rows).all()),
    "argmax": rows.argmax(axis=1).tolist(),
}))
"""


def write_q8_model(path: Path) -> Path:
    """The toy `small` model (tests/toymodels.py) with every weight matrix in Q8_0."""
    import gguf

    from .toymodels import SMALL, main_vocab, random_weights, write_gguf

    vocab = main_vocab()
    write_gguf(path, SMALL, vocab, random_weights(SMALL, vocab), q8_0=True)
    types = {t.tensor_type for t in gguf.GGUFReader(path).tensors}
    assert gguf.GGMLQuantizationType.Q8_0 in types, types
    return path


def space_env(venv: Path) -> dict[str, str]:
    """This process's environment as a Space build would see it: no build flags of ours, no venv leaks."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CMAKE_ARGS", "FORCE_CMAKE", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
           and not k.startswith("SKBUILD_")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


def run_logged(command: list[str], log: Path, env: dict[str, str]) -> float:
    """Run in the repository root (where a Space runs pip), output to `log`; return seconds taken."""
    start = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        pytest.fail(f"{' '.join(command)} failed ({done.returncode}) after {seconds:.0f} s:\n"
                    + log.read_text()[-6000:])
    return seconds


def test_space_install_builds_portable_llama_cpp(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env, python = space_env(venv), str(venv / "bin" / "python")

    # Exactly the Space's two steps, nothing else.
    pre_s = run_logged([python, "-m", "pip", "install", "-r", "pre-requirements.txt"],
                       tmp_path / "pre-requirements.log", env)
    req_s = run_logged([python, "-m", "pip", "install", "--no-cache-dir", "-r", "requirements.txt"],
                       tmp_path / "requirements.log", env)
    log = (tmp_path / "requirements.log").read_text()
    # It was compiled here, with our flags (not a prebuilt wheel from some index).
    assert re.search(r"Building wheel for llama-cpp-python", log), log[-3000:]

    model = write_q8_model(tmp_path / "toy-small-q8_0.gguf")
    done = subprocess.run([python, "-c", PROBE, str(model)], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, f"probe exited {done.returncode} (-11 is the AMX segfault):\n{done.stderr[-4000:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    info = result["system_info"]
    print(f"\nSpace install: pre-requirements.txt {pre_s:.0f} s, requirements.txt {req_s:.0f} s "
          f"(llama-cpp-python {result['version']} built from source, 2 cores here)")
    print(f"llama_print_system_info(): {info.strip()}")

    features = dict(re.findall(r"(\w+) = (\w+)", info))
    assert features.get("AVX2") == "1", info
    compiled_native = {k: features[k] for k in NATIVE_ONLY if features.get(k, "0") != "0"}
    assert not compiled_native, f"native-only CPU features compiled in: {compiled_native}\n{info}"
    assert result["n_tokens"] == 8 and result["finite"], result
