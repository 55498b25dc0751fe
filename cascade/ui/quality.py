"""Is sharing worth it? One sentence from the shipped pass rates on coding problems (`cascade/results/*.json`):
both models alone and the measured configuration nearest the run's, or that none was measured for this pair."""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..engine.config import GenerationConfig
from ..engine.policies import POLICY_TABLE
from ..serving.messages import model_name
from .style import pct

RESULTS = Path(__file__).resolve().parents[1] / "results"


@dataclass(frozen=True)
class Report:
    """One shipped `tasks --json` file."""

    name: str  # its file name, to name the source
    data: dict[str, Any]

    @property
    def n_tasks(self) -> int:
        return int(self.data["tasks"]["n"])

    def result(self, policy: str) -> dict[str, Any] | None:
        return next((r for r in self.data["results"] if r["policy"] == policy), None)

    def candidates(self, config: GenerationConfig) -> list[dict[str, Any]]:
        """Results of the config's policy (and rule, where the policy has one)."""
        reads = POLICY_TABLE[config.policy].text_settings if config.policy in POLICY_TABLE else ()
        return [r for r in self.data["results"] if r["policy"] == config.policy
                and ("threshold" not in reads or r["rule"] == config.rule)]


@functools.lru_cache(maxsize=4)
def load_reports(folder: Path = RESULTS) -> tuple[Report, ...]:
    """The shipped results, the most problems first; none if the folder holds none (or only bad files)."""
    reports = []
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data.get("results"), list) and data["tasks"]["n"] > 0:
                reports.append(Report(path.name, data))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return tuple(sorted(reports, key=lambda r: -r.n_tasks))


def _by_share(result: dict[str, Any], config: GenerationConfig) -> bool:
    """Whether a result measured at a threshold is compared with the config's share (budget) by its share."""
    return config.budget is not None and result["threshold"] is not None and result.get("target_share") is not None


def _distance(result: dict[str, Any], config: GenerationConfig) -> float:
    """A result's relative distance from the config (0 same, inf not comparable): by budget or share, else
    threshold (a budget's result is no threshold's neighbour), else k."""
    budget = result.get("budget")  # none in the shipped humaneval-full.json and humaneval-every8th.json
    if config.budget is not None and budget is not None:
        return abs(budget - config.budget) / max(config.budget, 1e-9)
    if _by_share(result, config):
        return abs(result["target_share"] - config.budget) / max(config.budget, 1e-9)
    if budget is not None:
        return math.inf
    if result["threshold"] is not None:
        return abs(result["threshold"] - config.threshold) / max(abs(config.threshold), 1e-9)
    if result["k"] is not None:
        return abs(result["k"] - config.k)
    return 0.0


def nearest(reports: Sequence[Report], config: GenerationConfig) -> tuple[Report, dict[str, Any]] | None:
    """The nearest measured configuration in a report with both models alone; ties go to the most problems."""
    found = [(report, r) for report in reports if report.result("target") and report.result("draft")
             for r in report.candidates(config) if _distance(r, config) < math.inf]
    return min(found, key=lambda pair: (_distance(pair[1], config), -pair[1]["n_tasks"]), default=None)


# A Qwen file's family version, "coder-" or not, and size: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf".
_QWEN = re.compile(r"qwen(\d[\d.]*)-(coder-)?(\d+(?:\.\d+)?)b", re.IGNORECASE)


def pair_words(draft: str, target: str) -> str:
    """A pair of model files in a few words: "Qwen2.5-Coder 0.5B → 1.5B" for Qwen's, else the file names."""
    d, t = _QWEN.search(draft), _QWEN.search(target)
    if d and t and d.group(1) == t.group(1) and d.group(2) == t.group(2):
        family = f"Qwen{d.group(1)}" + ("-Coder" if d.group(2) else "")
        return f"{family} {d.group(3)}B → {t.group(3)}B"
    return f"{draft} → {target}"


def measured_sizes(draft: str, target: str, measured: dict[str, str]) -> bool:
    """Whether a pair (file names) is the measured one, or the same sizes of its family (Qwen2.5's 0.5B → 1.5B
    beside Qwen2.5-Coder's): the only pairs whose quality the measured pass rates may be quoted for."""
    if (draft, target) == (measured["draft"], measured["target"]):
        return True

    def sizes(name: str) -> tuple[str, str] | None:
        found = _QWEN.search(name)
        return (found.group(1), found.group(3)) if found else None

    ours = [sizes(draft), sizes(target)]
    return None not in ours and ours == [sizes(measured["draft"]), sizes(measured["target"])]


def unmeasured_sentence(draft: str, target: str, report: Report) -> str:
    """What the page says of quality for a pair the shipped pass rates were not measured on."""
    measured = report.data["models"]
    return (f"No pass rate was measured for this pair ({pair_words(draft, target)}): the "
            f"pass rates on coding problems the project ships ({report.data['tasks']['source']}, {report.name}) "
            f"were measured on the {pair_words(measured['draft'], measured['target'])} pair only.")


def _setting(result: dict[str, Any], config: GenerationConfig) -> str:
    rule = f" ({result['rule']} rule)" if result["rule"] != "perplexity" else ""
    if result.get("budget") is not None:
        return (f"with a budget of {pct(result['budget'])}{rule}, where the big model wrote "
                f"{100 * result['target_share']:.1f}% of the tokens")
    if result["threshold"] is not None:
        share = (f", where the big model wrote {pct(result['target_share'])} of the tokens"
                 if _by_share(result, config) else "")
        return f"at threshold {result['threshold']:g}{rule}{share}"
    if result["k"] is not None:
        return f"with k={result['k']}"
    return ""


def quality_sentence(config: GenerationConfig, draft: str, target: str,
                     reports: Sequence[Report] | None = None) -> str | None:
    """The sentence for a run of `config` on these models (sizes, paths or Hub files); None without shipped results."""
    reports = load_reports(RESULTS) if reports is None else reports
    if not reports:
        return None
    draft, target = (Path(model_name(spec)).name for spec in (draft, target))  # "7B" read as its file
    found = nearest(reports, config)
    report = found[0] if found else reports[0]
    data, big, small = report.data, report.result("target"), report.result("draft")
    if big is None or small is None:
        return None
    threads = data["machine"].get("threads")
    measured = data["models"]
    if not measured_sizes(draft, target, measured):
        return unmeasured_sentence(draft, target, report)
    pair = pair_words(measured["draft"], measured["target"])
    where = f"{pair} pair, {threads} CPU threads" if threads else f"{pair} pair"
    start = (f"On {report.n_tasks} coding problems ({data['tasks']['source']}, checked by running their tests; "
             f"measured {data['date']}), the big model alone solved {pct(big['pass_at_1'])}, "
             f"the small one {pct(small['pass_at_1'])}")
    counted = ""
    if found is None:
        shared = ", and this way of sharing the work was not measured"
    elif config.policy in ("target", "draft"):
        shared = ""
    else:
        result = found[1]
        same = _distance(result, config) == 0
        setting = _setting(result, config)
        setting = (f"{setting} (the measured setting nearest yours)" if setting and not same else setting)
        words = {"cascade": "sharing", "bild": "sharing with rollback", "speculative": "speculative decoding",
                 "lookup": "prompt lookup", "lookup+draft": "lookup with the small model", "auto": "auto"}
        speed = (f", {result['vs_target']:.2f}× as fast as the big model alone" if result.get("vs_target") else "")
        counted = "; speeds count generation, reading the prompt included" if speed else ""
        pause = "," if ", where " in setting else ""  # the setting's own clause closes before the verb
        shared = (f", and {words.get(config.policy, config.policy)} {setting}{pause} solved {pct(result['pass_at_1'])}"
                  f"{speed}").replace("  ", " ")
    other = ("" if (draft, target) == (measured["draft"], measured["target"]) else
             f" These figures were measured with another pair than this page's models ({pair_words(draft, target)}): "
             f"they show what sharing costs in quality there, not here.")
    return f"{start}{shared} ({where}{counted}; source: {report.name}, written by `python -m cascade tasks`).{other}"
