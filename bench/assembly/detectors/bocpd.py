"""The stream-assembly paper's streaming detector: a truncated Bayesian online change-point scorer
(`src/bocpd/truncated_bocpd.py` of the released code, whose numbers the paper reports).

Per record x, scored before it is learned:
- a run-length posterior P(r | x_1..t) over at most `max_run_length` runs (Adams–MacKay with a constant hazard),
  each run a diagonal Gaussian fitted prequentially (Welford; variance = M2 / max(n − 1, 1), floored);
- `tail`: the χ²_d CDF of x's squared standardised distance from a *global* prequential diagonal Gaussian
  (0 during the warm-up);
- `short_run`: the posterior mass on run lengths ≤ `short_run_mass` after x (0 during the warm-up);
- deployed score = clip(max(tail, 0.25 · short_run), 0, 1). The first record initialises and scores 0.

As released, the reset branch uses the same run-conditional likelihood as the growth branch, so the likelihood
cancels in the normalisation and P(r = 0) equals the hazard for any data until the run-length cap is reached.
The `corrected_reset` preset scores the reset under the prior predictive instead (a diagonal Student-t with
ν = 2 and squared scale 2 σ²_global), so P(r = 0) responds to the data.

Speed: the released code loops over run lengths in Python and rebuilds its arrays every record. Here the whole
chunk runs in one compiled loop (numba) over a ring buffer of runs stored feature-major, so the per-feature work
is one vectorisable pass over all runs, the Welford update happens in place in the same pass, and the log
determinant needs one logarithm per run (the variances' binary exponents are summed, their mantissas
multiplied). χ²_d's CDF is the regularised lower incomplete gamma, gammainc(d/2, s/2), vectorised per chunk.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from bench.assembly import records
from bench.assembly.detectors import DetectorSpec, check_records, register
from bench.errors import CheckpointError, ConfigError, DatasetError, choice_error

BRANCHES = ("tail", "short_run", "p_reset")


@dataclass(frozen=True)
class BocpdConfig:
    hazard: float = 0.001
    max_run_length: int = 500
    variance_floor: float = 1e-4
    warmup: int = 30
    short_run_mass: int = 5
    short_run_weight: float = 0.25
    prior_predictive_reset: bool = False

    def __post_init__(self):
        checks = {"hazard": 0 < self.hazard < 1, "max_run_length": self.max_run_length >= 2,
                  # a normal (not subnormal) floor keeps every variance's binary exponent exact (see _log_det)
                  "variance_floor": 1e-300 <= self.variance_floor < math.inf, "warmup": self.warmup >= 0,
                  "short_run_mass": self.short_run_mass >= 0, "short_run_weight": 0 <= self.short_run_weight}
        for key, ok in checks.items():
            if not ok:
                raise ConfigError(f"bocpd: {key}={getattr(self, key)!r} is out of range (hazard in (0, 1), "
                                  "max_run_length >= 2, variance_floor in [1e-300, inf), warmup >= 0, "
                                  "short_run_mass >= 0, short_run_weight >= 0)")


_LOG_2PI = math.log(2.0 * math.pi)
_LN2 = math.log(2.0)
_MAX_ABS = 1e150  # squares (and sums of 10^6 squares) stay finite, so every variance has a finite exponent
# numba compiles each function at its first call and caches the machine code on disk (next to this file, or in
# the user's cache when that is read-only); the functions take and return plain arrays and numbers.
# error_model="numpy": a float division by zero gives inf as in numpy, and no per-division check blocks SIMD.
_jit = numba.njit(cache=True, nogil=True, error_model="numpy")


@_jit
def _run_chunk(X, lp, counts, means, m2, gmean, gm2, scal, hazard, floor, warmup, n_short, reset,
               stat_out, short_out, p0_out):
    """Score then learn each row of X in order, updating the state arrays in place.

    Runs live in a ring of `cap` slots: the run of length i sits in slot (head − i) mod cap, so a new record moves
    every run one length up without moving memory, and at the cap the new run takes the slot of the dropped one.
    While fewer than cap runs exist they occupy slots 0..n_runs−1. `means` and `m2` are [d, cap].
    scal = [n_seen, n_runs, head]. Outputs per record: the χ² statistic (−1 when the tail is not computed), the
    short-run mass and P(r = 0), both after the record.
    """
    cap = lp.shape[0]
    d = X.shape[1]
    log_h = math.log(hazard)
    log_1mh = math.log1p(-hazard)
    nll = np.empty(cap)
    q, prod, eacc = np.empty(cap), np.empty(cap), np.empty(cap, np.int64)
    inv_denom, inv_count, work = np.empty(cap), np.empty(cap), np.empty(cap)
    for t in range(X.shape[0]):
        x = X[t]
        n_seen, n_runs, head = scal[0], scal[1], scal[2]
        if n_seen == 0:
            _initialise(x, lp, counts, means, m2, gmean, gm2, scal)
            stat_out[t], short_out[t], p0_out[t] = -1.0, 0.0, 1.0
            continue
        stat_out[t] = _tail_stat(x, gmean, gm2, n_seen, floor) if n_seen >= warmup and n_seen >= 2 else -1.0
        prior_nll = _prior_nll(x, gmean, gm2, n_seen, floor) if reset and n_seen >= 2 else 0.0
        _score_and_learn_runs(x, counts, means, m2, n_runs, floor, nll, q, prod, eacc, inv_denom, inv_count)
        if reset and n_seen < 2:
            prior_nll = nll[head]  # released: before two records the reset uses run 0's predictive
        new_runs, new_head = min(n_runs + 1, cap), (head + 1) % cap
        _update_posterior(lp, nll, n_runs, new_head, log_h, log_1mh, reset, prior_nll, work)
        short = 0.0
        for i in range(min(new_runs, n_short + 1)):
            short += math.exp(lp[(new_head - i) % cap])
        short_out[t] = short if n_seen >= warmup else 0.0
        p0_out[t] = math.exp(lp[new_head])
        counts[new_head] = 1.0
        for j in range(d):
            means[j, new_head] = x[j]
            m2[j, new_head] = 0.0
        _learn_global(x, gmean, gm2, n_seen + 1)
        scal[0], scal[1], scal[2] = n_seen + 1, new_runs, new_head


@_jit
def _initialise(x, lp, counts, means, m2, gmean, gm2, scal):
    lp[0], counts[0] = 0.0, 1.0
    for j in range(x.shape[0]):
        means[j, 0], m2[j, 0], gmean[j], gm2[j] = x[j], 0.0, x[j], 0.0
    scal[0], scal[1], scal[2] = 1, 1, 0


@_jit
def _tail_stat(x, gmean, gm2, count, floor):
    stat = 0.0
    for j in range(x.shape[0]):
        v = max(gm2[j] / max(count - 1, 1), floor)
        diff = x[j] - gmean[j]
        stat += diff * diff / v
    return stat


@_jit
def _prior_nll(x, gmean, gm2, count, floor):
    """−log of a diagonal Student-t, ν = 2, squared scale 2 σ²_global (NIG prior predictive, κ0 = α0 = 1)."""
    nu = 2.0
    c = math.lgamma((nu + 1.0) / 2.0) - math.lgamma(nu / 2.0)
    total = 0.0
    for j in range(x.shape[0]):
        scale2 = 2.0 * max(gm2[j] / max(count - 1, 1), floor)
        diff = x[j] - gmean[j]
        total += c - 0.5 * math.log(nu * math.pi * scale2) - ((nu + 1.0) / 2.0) * math.log1p(
            diff * diff / (nu * scale2))
    return -total


@intrinsic
def _bits(typingctx, x):
    """The IEEE-754 bits of a float64 as a uint64 (an LLVM bitcast: free, and vectorisable)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.uint64))
    return types.uint64(types.float64), codegen


@intrinsic
def _from_bits(typingctx, x):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))
    return types.float64(types.uint64), codegen


@_jit
def _score_and_learn_runs(x, counts, means, m2, n_runs, floor, nll, q, prod, eacc, inv_denom, inv_count):
    """nll[s] = −log N(x; run s's mean, run s's floored variances) from the runs' statistics before x, then the
    Welford update of every run with x, in one pass over the features (each inner loop runs over runs, so it
    vectorises). log det = Σ_j log v_j is taken as (Σ_j exponent of v_j) · ln 2 + log Π_j mantissa of v_j, one
    logarithm per run instead of one per feature; the mantissas lie in [1, 2), so 512 of them cannot overflow.
    Reciprocals replace the per-element divisions by counts (within an ulp of the released quotients)."""
    mant_mask = np.uint64((1 << 52) - 1)
    one_exp = np.uint64(1023 << 52)
    d = x.shape[0]
    for s in range(n_runs):
        q[s], prod[s], eacc[s] = 0.0, 1.0, 0
        inv_denom[s] = 1.0 / max(counts[s] - 1.0, 1.0)
        inv_count[s] = 1.0 / (counts[s] + 1.0)
    for j in range(d):
        xj = x[j]
        mj, m2j = means[j], m2[j]
        for s in range(n_runs):
            a = m2j[s] * inv_denom[s]
            v = a if a > floor else floor
            diff = xj - mj[s]
            q[s] += diff * diff / v
            b = _bits(v)
            eacc[s] += np.int64(b >> np.uint64(52))
            prod[s] *= _from_bits((b & mant_mask) | one_exp)
            mean_new = mj[s] + diff * inv_count[s]  # Welford, after the predictive used the old statistics
            m2j[s] = m2j[s] + diff * (xj - mean_new)
            mj[s] = mean_new
        if j % 512 == 511:
            for s in range(n_runs):
                frac, exp2 = math.frexp(prod[s])
                prod[s], eacc[s] = frac, eacc[s] + exp2
    for s in range(n_runs):
        log_det = math.log(prod[s]) + (eacc[s] - 1023 * d) * _LN2
        nll[s] = 0.5 * (d * _LOG_2PI + log_det + q[s])
        counts[s] += 1.0


@_jit
def _update_posterior(lp, nll, n_runs, new_head, log_h, log_1mh, reset, prior_nll, work):
    """The run-length posterior after x, normalised, in place: growth lp[s] + log(1 − h) − nll[s] stays in slot s;
    the reset goes to `new_head`, which at the cap is the slot of the longest run (dropped: truncation before
    normalisation, as released). Released reset: logsumexp(lp + log h − nll) over every old run; corrected:
    logsumexp(lp + log h) − nll_prior(x). Each term is formed as the released code forms it: with the raw
    features' log-likelihoods in the 1e9s, their last bits decide P(r ≤ 5) at the 1e-8 level."""
    for s in range(n_runs):
        work[s] = lp[s] + log_h - (0.0 if reset else nll[s])
    cp = _logsumexp(work, n_runs) - (prior_nll if reset else 0.0)
    for s in range(n_runs):
        lp[s] = lp[s] + log_1mh - nll[s]
    lp[new_head] = cp  # at the cap this overwrites the longest run's growth: truncation before normalising
    n_new = min(n_runs + 1, lp.shape[0])
    norm = _logsumexp(lp, n_new)
    for s in range(n_new):
        lp[s] -= norm


@_jit
def _logsumexp(a, n):
    top = -math.inf
    for s in range(n):
        top = max(top, a[s])
    acc = 0.0
    for s in range(n):
        z = a[s] - top
        if z > -746.0:  # below, exp is exactly 0.0 in float64: skip the call (raw features put most runs there)
            acc += math.exp(z)
    return top + math.log(acc)


@_jit
def _learn_global(x, gmean, gm2, count):
    for j in range(x.shape[0]):
        delta = x[j] - gmean[j]
        gmean[j] += delta / count
        gm2[j] += delta * (x[j] - gmean[j])


class TruncatedBocpd:
    """The online detector: `score_learn` chunks of a stream; `state_dict`/`load_state_dict` resume exactly."""

    kind = records.Kind.ONLINE

    def __init__(self, **params):
        known = {f.name for f in fields(BocpdConfig)}
        for key in params:
            if key not in known:
                raise choice_error("bocpd parameter", key, known)
        self.config = BocpdConfig(**params)
        self._state: dict[str, np.ndarray] | None = None  # allocated at the first record (d is known then)

    def _allocate(self, d: int) -> dict[str, np.ndarray]:
        cap = self.config.max_run_length
        return {"lp": np.zeros(cap), "counts": np.zeros(cap), "means": np.zeros((d, cap)),
                "m2": np.zeros((d, cap)), "gmean": np.zeros(d), "gm2": np.zeros(d),
                "scal": np.zeros(3, np.int64)}

    def score_learn(self, X) -> records.StreamScores:
        X = check_records(X, "bocpd", None if self._state is None else self._state["gmean"].shape[0])
        if X.size and np.abs(X).max() > _MAX_ABS:
            raise DatasetError(f"bocpd: a value of magnitude {np.abs(X).max():.3g} exceeds {_MAX_ABS:.0e}: its "
                               "squared deviations would overflow float64")
        if self._state is None:
            self._state = self._allocate(X.shape[1])
        m, d, c, st = X.shape[0], X.shape[1], self.config, self._state
        stat, short, p0 = np.empty(m), np.empty(m), np.empty(m)
        _run_chunk(X, st["lp"], st["counts"], st["means"], st["m2"], st["gmean"], st["gm2"], st["scal"],
                  float(c.hazard), float(c.variance_floor), int(c.warmup), int(c.short_run_mass),
                  bool(c.prior_predictive_reset), stat, short, p0)
        tail = chi2_cdf(stat, d)
        score = np.clip(np.maximum(tail, c.short_run_weight * short), 0.0, 1.0)
        return records.StreamScores(score=score, branches={"tail": tail, "short_run": short, "p_reset": p0})

    def state_dict(self) -> dict[str, np.ndarray]:
        out = {f"config/{k}": np.asarray(v) for k, v in asdict(self.config).items()}
        if self._state is not None:
            out.update({k: v.copy() for k, v in self._state.items()})
        return out

    def load_state_dict(self, state: dict[str, np.ndarray]) -> TruncatedBocpd:
        for key, value in asdict(self.config).items():
            if f"config/{key}" not in state or np.asarray(state[f"config/{key}"]).item() != value:
                raise CheckpointError(f"bocpd state: config/{key} differs from this detector's {key}={value!r}")
        if "lp" not in state:
            self._state = None
            return self
        d = np.asarray(state["gmean"]).shape[0]
        fresh = self._allocate(d)
        for key, like in fresh.items():
            arr = np.asarray(state[key])
            if arr.shape != like.shape or arr.dtype != like.dtype:
                raise CheckpointError(f"bocpd state: {key} is {arr.dtype}{list(arr.shape)}, expected "
                                      f"{like.dtype}{list(like.shape)}")
            fresh[key] = np.array(arr, copy=True)
        self._state = fresh
        return self


def chi2_cdf(stat: np.ndarray, d: int) -> np.ndarray:
    """χ²_d CDF of each statistic (scipy's chi2.cdf is exactly gammainc(d/2, s/2)); 0 where stat < 0 (not
    computed: the warm-up)."""
    from scipy.special import gammainc

    out = np.zeros_like(stat)
    valid = stat >= 0
    out[valid] = np.clip(gammainc(d / 2.0, stat[valid] / 2.0), 0.0, 1.0)
    return out


register(DetectorSpec(
    name="bocpd", label="Truncated BOCPD", kind=records.Kind.ONLINE, factory=TruncatedBocpd,
    presets={"released": {}, "corrected_reset": {"prior_predictive_reset": True}},
    batch_dependent=False, seeded=False, branches=BRANCHES,
    source="released src/bocpd/truncated_bocpd.py: TruncatedBOCPDConfig defaults (hazard 0.001, cap 500, floor "
           "1e-4, warm-up 30); corrected_reset = its prior_predictive_reset=True"))
