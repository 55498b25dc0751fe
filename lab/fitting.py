"""Fitting the learned router (scikit-learn) and judging a ranking of positions: out of fold, ROC AUC,
and the share the big model must write for an agreement. Using a router needs none of this
(`cascade/routing/router.py`)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from cascade.routing.curves import points
from cascade.routing.router import FEATURES, Router, hidden_names


def fit(x: np.ndarray, y: np.ndarray, pair: dict[str, str] | None = None, data: dict[str, Any] | None = None,
        c: float = 1.0, n_hidden: int = 0) -> Router:
    """A router fit on features `x` (rows in the order of FEATURES, then `n_hidden` dimensions of the draft's
    hidden state) and labels `y` (1: the target wrote another token), standardised first. Needs scikit-learn."""
    try:
        from sklearn.linear_model import LogisticRegression
        from sklearn.preprocessing import StandardScaler
    except ImportError:
        raise ValueError("fitting a router needs scikit-learn (pip install scikit-learn, or the project's "
                         "`train` extra); using one does not") from None

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=int)
    names = FEATURES + hidden_names(n_hidden)
    if x.ndim != 2 or x.shape[1] != len(names) or len(x) != len(y):
        raise ValueError(f"expected one row of {len(names)} features per label, got {x.shape} and {len(y)} labels")
    if len(set(y.tolist())) < 2:
        raise ValueError("the training data has only one label; a router needs positions where the models "
                         "agree and positions where they differ")
    scaler = StandardScaler().fit(x)
    scale = np.where(scaler.scale_ > 0, scaler.scale_, 1.0)
    model = LogisticRegression(C=c, max_iter=2000).fit((x - scaler.mean_) / scale, y)
    return Router(names, scaler.mean_.copy(), scale, model.coef_[0].copy(), float(model.intercept_[0]),
                  pair=pair or {}, data=data or {})


def fit_out_of_fold(x: np.ndarray, y: np.ndarray, groups: np.ndarray, c: float, n_hidden: int = 0,
                    folds: int = 5) -> np.ndarray:
    """Each row's probability from a router (`fit`) that never saw its group: rows go to fold `group %
    folds`, so a prompt's (or a module's) positions are never both trained and judged on."""
    groups = np.asarray(groups)
    predicted = np.empty(len(y))
    for fold in range(folds):
        held = groups % folds == fold
        if held.any():
            predicted[held] = fit(x[~held], y[~held], c=c, n_hidden=n_hidden).probability(x[held])
    return predicted


def scores_out_of_fold(x: np.ndarray, y: np.ndarray, groups: np.ndarray, grid: Sequence[float], n_hidden: int = 0,
                       folds: int = 5, log: Callable[[str], None] = lambda _m: None) -> dict[float, float]:
    """Each regularisation strength of `grid`, with its ROC AUC out of fold (`fit_out_of_fold`)."""
    scores = {}
    for c in grid:
        scores[c] = roc_auc(fit_out_of_fold(x, y, groups, c, n_hidden, folds), np.asarray(y).astype(bool))
        log(f"  C {c:g}: ROC AUC out of fold {scores[c]:.4f}")
    return scores


def share_for(doubt: np.ndarray, differs: np.ndarray, agreement: float = 0.95) -> float:
    """The least share of positions the target must write, most doubtful first, for this share of positions
    to hold its choice (`Curve.share_at` without the curve: for a hundred thousand positions)."""
    shares, agreements, _, _ = points(doubt, differs)
    enough = agreements >= agreement - 1e-12
    return float(shares[int(np.argmax(enough))]) if enough.any() else 1.0


def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """How well larger scores pick out positive labels: the probability a random positive outranks a
    random negative (ties count half). None with only one kind of label."""
    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    _, tie, counts = np.unique(scores, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = ((ends - counts + 1 + ends) / 2)[tie]  # 1-based ranks, averaged over ties
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
