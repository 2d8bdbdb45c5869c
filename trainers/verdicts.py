"""Verdicts on a paper's claims from a few seeds: two-sided t-tests with three outcomes.

    compare(x, y, direction)    is x above (direction 1) or below (-1) y? x and y map seed -> value; paired
                                over the seeds both have (a seed draws the same prompts and evaluation
                                samples in every row), Welch's test otherwise
    correlation(xs, ys)         Pearson r with its p-value (t with n - 2 degrees of freedom)
    holm(ps)                    Holm-Bonferroni adjusted p-values of a family of claims

Each test returns a verdict:
    shown           p < alpha and the difference goes the claimed way
    contradicted    p < alpha and it goes the other way
    not detectable  p >= alpha: the difference is inside the noise of this many seeds and episodes
and beside it the p-value and the minimum detectable effect (mde): the smallest true difference this
test would call at level alpha with the given power, (t_{1-alpha/2} + t_{power}) x standard error. Where the
values have no spread at all (the t statistic is undefined), an exact permutation test gives p: with n seeds
that agree exactly, p = 2 / 2^n paired, so two seeds can never show anything.

Pure Python (no scipy): the Student t distribution comes from the regularised incomplete beta function.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Mapping, Sequence

ALPHA = 0.05
POWER = 0.8
SHOWN, CONTRADICTED, NOT_DETECTABLE, NOT_RUN = "shown", "contradicted", "not detectable", "not run"


# ------------------------------------------------------------------ the t distribution
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_ppf(q: float, df: float) -> float:
    """The q-quantile of Student's t with df degrees of freedom (bisection on t_cdf)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile level must be in (0, 1), got {q}")
    lo, hi = -1e6, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def two_sided_p(t: float, df: float) -> float:
    if math.isnan(t) or df <= 0:
        return float("nan")
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


# ------------------------------------------------------------------ tests
def _mean(v: Sequence[float]) -> float:
    return sum(v) / len(v)


def _var(v: Sequence[float]) -> float:
    m = _mean(v)
    return sum((x - m) ** 2 for x in v) / (len(v) - 1)


def _finite(d: Mapping) -> dict:
    return {k: float(v) for k, v in d.items() if v is not None and not math.isnan(float(v))}


def decide(effect: float, p: float, direction: int, alpha: float = ALPHA) -> str:
    if math.isnan(p):
        return NOT_DETECTABLE
    if p < alpha:
        return SHOWN if effect * direction > 0 else CONTRADICTED
    return NOT_DETECTABLE


def _permutation_p(x: list[float], y: list[float] | None) -> float:
    """Exact two-sided permutation p: sign flips of the paired differences x (y None), else relabellings of
    x and y. What decides when the t statistic is undefined: differences with no spread (accuracies on a few
    episodes often move by the same count in every seed) say nothing the t-test can weigh."""
    import itertools

    tol = 1e-9
    if y is None:
        observed = abs(sum(x))
        flips = list(itertools.product((1, -1), repeat=len(x)))
        return sum(abs(sum(s * v for s, v in zip(signs, x))) >= observed - tol for signs in flips) / len(flips)
    pooled, k = x + y, len(x)
    observed = abs(_mean(x) - _mean(y))
    splits = list(itertools.combinations(range(len(pooled)), k))
    hits = 0
    for idx in splits:
        a = [pooled[i] for i in idx]
        b = [pooled[i] for i in range(len(pooled)) if i not in idx]
        hits += abs(_mean(a) - _mean(b)) >= observed - tol
    return hits / len(splits)


def _result(effect, se, df, n, test, direction, alpha, power, note="", exact=None) -> dict:
    if se <= 1e-12 * max(1.0, abs(effect)) and exact is not None:  # no spread: the t statistic is undefined
        p, mde = exact(), float("nan")
        test += ", no spread: exact permutation p"
    elif df > 0 and se > 0:
        p = two_sided_p(effect / se, df)
        mde = (t_ppf(1 - alpha / 2, df) + t_ppf(power, df)) * se
    else:
        p, mde = float("nan"), float("nan")
    out = {"verdict": decide(effect, p, direction, alpha), "effect": effect, "p": p, "mde": mde, "n": n,
           "test": test}
    if note:
        out["note"] = note
    return out


def compare(x: Mapping, y: Mapping, direction: int = 1, paired: bool = True, alpha: float = ALPHA,
            power: float = POWER) -> dict:
    """Is x's mean above (direction 1) or below (direction -1) y's? x, y: seed -> value (NaN values dropped).

    Paired over the seeds both have when `paired` and there are at least two of them (effect = mean of
    the per-seed differences x - y), else Welch's unequal-variance test on the two sets of values.
    Returns {verdict, effect, p, mde, n, test}; effect is always x - y."""
    x, y = _finite(x), _finite(y)
    if not x or not y:
        return {"verdict": NOT_RUN, "effect": float("nan"), "p": float("nan"), "mde": float("nan"), "n": 0,
                "test": "none"}
    common = sorted(set(x) & set(y))
    if paired and len(common) >= 2:
        d = [x[s] - y[s] for s in common]
        n = len(d)
        return _result(_mean(d), math.sqrt(_var(d) / n), n - 1, n, "paired t", direction, alpha, power,
                       exact=lambda: _permutation_p(d, None))
    xs, ys = list(x.values()), list(y.values())
    effect = _mean(xs) - _mean(ys)
    if len(xs) < 2 or len(ys) < 2:
        return _result(effect, float("nan"), 0, min(len(xs), len(ys)), "welch t", direction, alpha, power,
                       note="fewer than 2 seeds on a side: no noise estimate")
    vx, vy = _var(xs) / len(xs), _var(ys) / len(ys)
    se = math.sqrt(vx + vy)
    df = (vx + vy) ** 2 / ((vx * vx) / (len(xs) - 1) + (vy * vy) / (len(ys) - 1)) if se > 0 else len(xs) + len(ys) - 2
    return _result(effect, se, df, min(len(xs), len(ys)), "welch t", direction, alpha, power,
                   exact=lambda: _permutation_p(xs, ys))


def one_sample(d: Mapping, direction: int = 1, alpha: float = ALPHA, power: float = POWER) -> dict:
    """Is the mean of d (seed -> a difference already paired within the seed) above (1) or below (-1) zero?"""
    d = _finite(d)
    if not d:
        return compare({}, {})
    zeros = {k: 0.0 for k in d}
    out = compare(d, zeros, direction, paired=True, alpha=alpha, power=power)
    if len(d) < 2:
        out = _result(_mean(list(d.values())), float("nan"), 0, len(d), "one-sample t", direction, alpha, power,
                      note="one value: no noise estimate")
    out["test"] = "one-sample t"
    return out


def correlation(xs: Sequence[float], ys: Sequence[float], direction: int = 1, alpha: float = ALPHA,
                power: float = POWER) -> dict:
    """Pearson r of paired values, its two-sided p (t = r sqrt((n-2)/(1-r^2)), n - 2 df) and the smallest |r|
    detectable at this n (Fisher z: tanh((z_{1-alpha/2} + z_power) / sqrt(n - 3)))."""
    pairs = [(float(a), float(b)) for a, b in zip(xs, ys) if not (math.isnan(float(a)) or math.isnan(float(b)))]
    n = len(pairs)
    if n < 3:
        return {"verdict": NOT_RUN, "effect": float("nan"), "p": float("nan"), "mde": float("nan"), "n": n,
                "test": "pearson r"}
    a, b = zip(*pairs)
    ma, mb = _mean(a), _mean(b)
    sab = sum((u - ma) * (v - mb) for u, v in pairs)
    saa, sbb = sum((u - ma) ** 2 for u in a), sum((v - mb) ** 2 for v in b)
    if saa == 0 or sbb == 0:
        return {"verdict": NOT_DETECTABLE, "effect": float("nan"), "p": float("nan"), "mde": float("nan"), "n": n,
                "test": "pearson r", "note": "one of the two does not vary"}
    r = max(-1.0, min(1.0, sab / math.sqrt(saa * sbb)))
    t = r * math.sqrt((n - 2) / (1 - r * r)) if abs(r) < 1 else math.copysign(math.inf, r)
    p = two_sided_p(t, n - 2)
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    mde = math.tanh(z / math.sqrt(n - 3)) if n > 3 else float("nan")
    return {"verdict": decide(r, p, direction, alpha), "effect": r, "p": p, "mde": mde, "n": n, "test": "pearson r"}


def holm(ps: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (NaN stays NaN and does not count towards the family)."""
    idx = sorted((i for i, p in enumerate(ps) if not math.isnan(p)), key=lambda i: ps[i])
    m, out, running = len(idx), [float("nan")] * len(ps), 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out
