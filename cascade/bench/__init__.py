"""Measurement: every policy side by side on the same models, llama.cpp as a peer, per-call costs and
the bounds they imply, and the seed's own loop as the baseline (`python -m cascade bench`)."""

from .costs import Bounds, Costs, measure_costs
from .run import BenchResult, Case, Row, default_cases, run_bench

__all__ = ["BenchResult", "Bounds", "Case", "Costs", "Row", "default_cases", "measure_costs", "run_bench"]
