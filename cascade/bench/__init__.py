"""Measurement: every policy side by side on the same models, llama.cpp as a peer, per-call costs and
the bounds they imply, and the seed's own loop as the baseline (`python -m cascade bench`); pass rates on
coding tasks (`python -m cascade tasks`).

The rooms: `run.py` (the side-by-side bench), `costs.py`, `peer.py` and `report.py` beside it; the coding
tasks in `tasks.py` (tasks, prompt styles, checking), `sandbox.py`, `tasks_configs.py`, `tasks_cache.py`,
`tasks_results.py`, `tasks_shares.py`, `tasks_run.py` and `tasks_report.py`; and what they share:
`summaries.py` (a run's Summary, and several weighed together) and `local.py` (a port, a cache folder).
The router's building and the serving benches live in the repository's `lab/`.
"""

from .costs import Bounds, Costs, measure_costs
from .run import BenchResult, Case, Row, default_cases, run_bench

__all__ = ["BenchResult", "Bounds", "Case", "Costs", "Row", "default_cases", "measure_costs", "run_bench"]
