"""What the measurements ran on: the processor, the threads, the models, and memory in use."""

from __future__ import annotations

import os
import platform
import resource
import time
from dataclasses import asdict, dataclass

from ..engine.models import ModelPair
from ..engine.numerics import batch_kernels


@dataclass(frozen=True)
class Machine:
    cpu: str
    cores: int
    threads: int  # per model
    device: str  # "CPU, 2 threads" or the GPU offload
    draft: str  # model file names
    target: str
    python: str
    date: str
    batch_kernels: str = ""  # llama.cpp's batch-only CPU kernels in this build (`engine/numerics.py`)

    def to_dict(self) -> dict:
        return asdict(self)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def describe_machine(pair: ModelPair) -> Machine:
    return Machine(cpu=cpu_name(), cores=os.cpu_count() or 1, threads=pair.config.n_threads, device=pair.config.device,
                   draft=pair.draft_path.name, target=pair.target_path.name, python=platform.python_version(),
                   date=time.strftime("%Y-%m-%d"), batch_kernels=", ".join(batch_kernels()) or "none")


def rss_mb() -> float:
    """Resident memory now (the process's peak only grows, so it cannot tell policies apart)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
