"""Measurement: every policy side by side with per-call costs, bounds and llama.cpp as a peer
(`python -m cascade bench`), and pass rates on coding tasks (`python -m cascade tasks`)."""

from .costs import Bounds, Costs, measure_costs
from .run import BenchResult, Case, Row, default_cases, run_bench

__all__ = ["BenchResult", "Bounds", "Case", "Costs", "Row", "default_cases", "measure_costs", "run_bench"]
