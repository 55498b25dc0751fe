"""What a Hugging Face Space reads from this repository agrees with itself.

A Space reads README.md's front matter (gradio version, files to fetch while it builds), installs
pre-requirements.txt then requirements.txt, and runs app.py. These checks are fast; the slow one that
really installs both files in a fresh environment is tests/test_space_install.py.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from cascade.engine.config import ModelConfig

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def front_matter() -> dict:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.match(r"---\n(.*?)\n---\n", text, re.S)
    assert match, "README.md must start with a --- YAML front matter block ---"
    return yaml.safe_load(match.group(1))


def requirement_lines(path: Path) -> list[str]:
    """Requirement specifiers as pip reads them: comments dropped, per-line options cut off."""
    specs = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = re.sub(r"(^|\s+)#.*$", "", raw).strip()
        if line:
            specs.append(re.split(r"\s+-", line, maxsplit=1)[0].strip())
    return specs


def pin(specs: list[str], name: str) -> str:
    pins = [m.group(1) for s in specs if (m := re.fullmatch(rf"{re.escape(name)}\s*==\s*(\S+)", s))]
    assert len(pins) == 1, f"expected one {name}==VERSION among {specs}"
    return pins[0]


def hub_file(model: str) -> tuple[str, str]:
    """'owner/repo/path/in/repo.gguf' -> ('owner/repo', 'path/in/repo.gguf')."""
    owner, repo, filename = model.split("/", 2)
    return f"{owner}/{repo}", filename


def test_gradio_pin_matches_sdk_version():
    sdk_version = str(front_matter()["sdk_version"])
    requirements = requirement_lines(ROOT / "requirements.txt")
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    # A Space installs gradio==sdk_version beside requirements.txt; any other pin fails to resolve.
    assert pin(requirements, "gradio") == sdk_version
    assert pin(dependencies, "gradio") == sdk_version


def test_pyproject_dependencies_equal_requirements():
    # requirements.txt may carry per-line build options; the pins themselves must be the same.
    requirements = requirement_lines(ROOT / "requirements.txt")
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    assert sorted(requirements) == sorted(dependencies)


def test_preload_from_hub_lists_exactly_the_default_models():
    # Format: a list of "repo_id file1,file2[ revision]" strings; the files land in the Hub cache
    # while the Space builds, where hf_hub_download finds them at run time.
    entries = front_matter()["preload_from_hub"]
    assert isinstance(entries, list) and all(isinstance(e, str) for e in entries), entries
    preloaded = set()
    for entry in entries:
        repo_id, files, *revision = entry.split()
        assert len(revision) <= 1, entry
        preloaded |= {(repo_id, f) for f in files.split(",")}
    defaults = ModelConfig()
    assert preloaded == {hub_file(defaults.draft), hub_file(defaults.target)}


def test_install_script_builds_what_requirements_txt_says():
    out = subprocess.run(["bash", str(ROOT / "scripts/install-llama-cpp"), "--print"],
                         capture_output=True, text=True, check=True).stdout
    values = dict(line.split("=", 1) for line in out.splitlines())
    assert values["VERSION"] == pin(requirement_lines(ROOT / "requirements.txt"), "llama-cpp-python")
    flags = values["FLAGS"].split()
    # Portable: no -march=native (it turns on AMX, where quantized batches crash), AVX2 kept.
    assert "-DGGML_NATIVE=OFF" in flags and "-DGGML_AVX2=ON" in flags, flags


def test_the_exact_build_adds_only_the_batch_kernel_flags_and_builds_apart():
    def printed(*args):
        out = subprocess.run(["bash", str(ROOT / "scripts/install-llama-cpp"), *args, "--print"],
                             capture_output=True, text=True, check=True).stdout
        return dict(line.split("=", 1) for line in out.splitlines())

    portable, exact = printed(), printed("--exact")
    assert exact["VERSION"] == portable["VERSION"]
    assert exact["FLAGS"].split() == portable["FLAGS"].split() + ["-DGGML_CPU_REPACK=OFF", "-DGGML_LLAMAFILE=OFF"]
    assert exact["WHEELS"] != portable["WHEELS"]  # a wheel of its own: pip's cache would not tell them apart
    wrong = subprocess.run(["bash", str(ROOT / "scripts/install-llama-cpp"), "--fast"], capture_output=True, text=True)
    assert wrong.returncode == 2 and "usage" in wrong.stderr


def test_pip_needs_pre_requirements():
    # pip < 23.1 rejects --config-settings inside a requirements file.
    assert "pip>=23.1" in requirement_lines(ROOT / "pre-requirements.txt")
