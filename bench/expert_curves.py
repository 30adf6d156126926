"""Learning curves of the expert study as power laws, and where an MoE would overtake its dense twin.

Each contender's held-out bits/base against training tokens is fitted with ``L(T) = E + A·T^-α``
(the form of Kaplan et al. and of the fine-grained MoE scaling laws): for every α of a fine grid,
E and A are an ordinary least-squares line in ``T^-α``, and the α with the least squared error is
kept, so the fit needs no optimiser and cannot wander. From two fits the report projects the
crossover: the tokens where the MoE's curve falls below the dense model's, and the GPU seconds
where it does at equal GPU time (tokens = seconds x each model's own measured training rate).
A projection beyond the measured tokens is an extrapolation and the report says so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

ALPHAS = np.linspace(0.02, 1.5, 297)
"""The exponents tried (step 0.005)."""


@dataclass(frozen=True)
class PowerLaw:
    E: float
    A: float
    alpha: float
    rmse: float
    points: int

    def __call__(self, tokens: np.ndarray | float) -> np.ndarray:
        return self.E + self.A * np.power(np.asarray(tokens, dtype=np.float64), -self.alpha)

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def fit_power_law(tokens: list[float], bits: list[float], skip_first: int = 1) -> PowerLaw | None:
    """The least-squares ``E + A·T^-α`` through the points after the first ``skip_first`` (the warm-up's
    validations follow no power law); None with fewer than four points, no decreasing fit, a floor E
    below zero or the best exponent at an end of the grid (the points do not bend like a power law)."""
    t = np.asarray(tokens, dtype=np.float64)[skip_first:]
    y = np.asarray(bits, dtype=np.float64)[skip_first:]
    if t.size < 4:
        return None
    best: PowerLaw | None = None
    for alpha in ALPHAS:
        x = np.power(t, -alpha)
        design = np.stack([np.ones_like(x), x], axis=1)
        (e, a), *_ = np.linalg.lstsq(design, y, rcond=None)
        if a <= 0:
            continue
        rmse = float(np.sqrt(np.mean((design @ np.array([e, a]) - y) ** 2)))
        if best is None or rmse < best.rmse:
            best = PowerLaw(float(e), float(a), float(alpha), rmse, int(t.size))
    if best is None or best.E < 0 or best.alpha in (ALPHAS[0], ALPHAS[-1]):
        return None  # a floor below zero bits, or an exponent the grid cannot bracket: no power law
    return best


def crossover(moe: PowerLaw, dense: PowerLaw, start: float, stop: float = 1e15,
              moe_rate: float = 1.0, dense_rate: float = 1.0) -> float | None:
    """The smallest x in [start, stop] from which on ``moe(x·moe_rate) <= dense(x·dense_rate)`` holds
    up to ``stop``, on a logarithmic grid: x is tokens with both rates 1, GPU seconds with each model's
    tokens/s. None where the MoE is behind at ``stop`` (one that leads early and falls behind later
    has no crossover)."""
    grid = np.logspace(np.log10(start), np.log10(stop), 2000)
    ahead = moe(grid * moe_rate) <= dense(grid * dense_rate)
    if not ahead[-1]:
        return None
    behind = np.flatnonzero(~ahead)
    return float(grid[behind[-1] + 1]) if behind.size else float(grid[0])
