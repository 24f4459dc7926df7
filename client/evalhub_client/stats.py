"""The little statistics the client does itself, pure Python: Student's t distribution, the
paired t bounds `evalhub gate` decides with, and the paired t test's power `evalhub plan`
sizes a comparison with. (The server's figures, `GET /api/eval/compare`, are read, not redone.)

- `t_cdf`: Student's t distribution function, through the regularized incomplete beta function
  (its continued fraction, evaluated by Lentz's method);
- `paired_bounds`: over n paired differences with mean d and standard deviation s, the
  one-sided 1 - alpha bounds d -+ t(1 - alpha, n - 1) s / sqrt(n);
- `paired_power`: the chance that a two-sided paired t test at level alpha rejects "no
  difference" on n pairs when the true mean difference is `effect` and the differences' standard
  deviation `sd`: with t' non-central t (n - 1 degrees of freedom, non-centrality
  effect sqrt(n) / sd), P(|t'| > t(1 - alpha/2, n - 1)), integrated over the chi-square law of
  the sample variance (Simpson's rule);
- `seeds_needed`: the smallest n (at least 2) whose power reaches the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist, fmean, stdev

_NORMAL = NormalDist()
_SIMPSON_STEPS = 400  # even; the power is smooth in v, this is exact to about 1e-6


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (Lentz), for x < (a+1)/(a+b+2)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return result


def beta_regularized(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
        + a * math.log(x) + b * math.log1p(-x)
    )  # fmt: skip
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    tail = 0.5 * beta_regularized(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_pdf(t: float, df: float) -> float:
    log_front = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_front - (df + 1) / 2 * math.log1p(t * t / df))


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p: Newton's method from the normal quantile, bisection when a
    step would leave the bracket."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"a quantile needs 0 < p < 1; got {p}")
    low, high = -1e6, 1e6
    t = _NORMAL.inv_cdf(p)
    for _ in range(200):
        error = t_cdf(t, df) - p
        if abs(error) < 1e-14:
            break
        low, high = (low, t) if error > 0 else (t, high)
        step = t - error / t_pdf(t, df)
        t = step if low < step < high else (low + high) / 2.0
        if high - low < 1e-12:
            break
    return t


@dataclass(frozen=True)
class PairedBounds:
    n: int
    mean: float
    sd: float
    lower: float
    """One-sided 1 - alpha lower bound of the mean difference."""
    upper: float
    """One-sided 1 - alpha upper bound of the mean difference."""


def paired_bounds(differences: list[float], alpha: float) -> PairedBounds | None:
    """The paired t bounds of the mean difference (None under two differences)."""
    n = len(differences)
    if n < 2:
        return None
    mean, sd = fmean(differences), stdev(differences)
    half = t_quantile(1.0 - alpha, n - 1) * sd / math.sqrt(n)
    return PairedBounds(n=n, mean=mean, sd=sd, lower=mean - half, upper=mean + half)


def _chi2_pdf(v: float, df: float) -> float:
    if v <= 0.0:
        return 0.0
    k = df / 2.0
    return math.exp((k - 1.0) * math.log(v) - v / 2.0 - k * math.log(2.0) - math.lgamma(k))


def paired_power(n: int, *, effect: float, sd: float, alpha: float) -> float:
    """The power of the two-sided paired t test on n pairs (see the module's docstring)."""
    if n < 2:
        return 0.0
    if sd <= 0.0:
        return 1.0 if effect else alpha
    df = n - 1
    critical = t_quantile(1.0 - alpha / 2.0, df)
    shift = abs(effect) * math.sqrt(n) / sd
    top = df + 12.0 * math.sqrt(2.0 * df) + 40.0
    step = top / _SIMPSON_STEPS
    total = 0.0
    for i in range(_SIMPSON_STEPS + 1):
        v = i * step
        weight = 1 if i in (0, _SIMPSON_STEPS) else (4 if i % 2 else 2)
        scale = critical * math.sqrt(v / df)
        rejects = (1.0 - _NORMAL.cdf(scale - shift)) + _NORMAL.cdf(-scale - shift)
        total += weight * rejects * _chi2_pdf(v, df)
    return min(1.0, total * step / 3.0)


def seeds_needed(*, effect: float, sd: float, alpha: float, power: float, most: int = 10**7) -> int:
    """The fewest pairs (>= 2) whose two-sided paired t test detects `effect` with `power`."""
    if effect == 0:
        raise ValueError("an effect of 0 cannot be detected")
    if sd <= 0.0:
        return 2
    z = _NORMAL.inv_cdf(1.0 - alpha / 2.0) + _NORMAL.inv_cdf(power)
    guess = max(2, math.floor((z * sd / effect) ** 2))  # the normal answer, a little low
    n = guess
    while n > 2 and paired_power(n - 1, effect=effect, sd=sd, alpha=alpha) >= power:
        n -= 1
    while paired_power(n, effect=effect, sd=sd, alpha=alpha) < power:
        n += 1
        if n > most:
            return most
    return n
