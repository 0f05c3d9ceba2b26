"""A lower bound on the bundle moves any plan needs to bring a cluster within a spread.

Setting: broker i has score s_i and bundles worth p_ik points; a moved bundle removes its points
from its source and adds the same points to its destination (identical brokers, one scored
resource), and a plan moves each bundle at most once. Total load is conserved, so the average A
does not change.

After any plan that reaches spread S, every broker lies in [m, m + S] for some level m, and
A - S <= m <= A (the hottest broker is at least at the average, the coolest at most). For a given m:

- a broker above m + S must shed at least s_i - m - S of its own points; the fewest of its bundles
  that can do it are its largest ones;
- a broker below m must receive at least m - s_i points; the fewest bundles that can do it are the
  largest bundles of the whole cluster.

Every move leaves exactly one broker and lands on exactly one, so the plan needs at least
max(sum of the sources' counts, sum of the receivers' counts) moves for that m; the bound is the
minimum of this over m. Between two values of m where a source's count drops, the source sum is
constant and the receiver sum can only grow with m, so the minimum is attained at m = A - S or at
one of those drop points, and evaluating there gives the bound exactly (no grid).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_EPSILON = 1e-9


def _fewest(prefix: np.ndarray, needed: float) -> float:
    """How many of the largest items (prefix sums, largest first) reach `needed`; inf if all do not."""
    if needed <= _EPSILON:
        return 0
    count = int(np.searchsorted(prefix, needed - _EPSILON, side="left")) + 1
    return count if count <= len(prefix) else float("inf")


def fewest_moves_lower_bound(
    scores: Sequence[float], bundle_points: Sequence[Sequence[float]], spread: float
) -> int | None:
    """A lower bound on the moves that bring every broker within `spread` points of each other; None when
    no plan can (the bundles are too coarse for this spread under the model's assumptions)."""
    values = np.asarray(scores, dtype=float)
    if len(values) < 2 or float(values.max() - values.min()) <= spread + _EPSILON:
        return 0
    average = float(values.mean())
    own = [np.cumsum(np.sort(np.asarray(points, dtype=float))[::-1]) for points in bundle_points]
    everything = np.cumsum(np.sort(np.concatenate([np.asarray(p, dtype=float) for p in bundle_points]))[::-1])

    def moves_needed(level: float) -> float:
        shed = sum(_fewest(prefix, s - level - spread) for s, prefix in zip(values, own, strict=True))
        receive = sum(_fewest(everything, level - s) for s in values)
        return max(shed, receive)

    lowest, highest = average - spread, average
    # A source's count drops where level = s_i - spread - (its k largest bundles), k = 0, 1, ...
    drops = [s - spread - np.concatenate([[0.0], prefix]) for s, prefix in zip(values, own, strict=True)]
    candidates = [lowest, *(level for part in drops for level in part.tolist() if lowest < level <= highest)]
    best = min(moves_needed(level) for level in candidates)
    return int(best) if best != float("inf") else None
