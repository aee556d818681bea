#!/usr/bin/python3
"""Scaling-law fits of a sweep's results (issue 17): `multiscreen sweep fit|report` run this.

  sweep_fit.py fit (--manifest=ROOT/sweep.json | --results=F.csv) [--json] [--bootstrap=N] [--params=total|non_embedding]
  sweep_fit.py report --manifest=ROOT/sweep.json [--out=FILE.md] [--bootstrap=N]

The results are rows (family, params N, tokens D, loss L). From a sweep's manifest they are
collected from the run directories: the validation loss at each token budget's step
(metrics.jsonl's standing rows, tools/metrics.py), and written to ROOT/results.csv. A CSV
needs the columns family,params,tokens,loss; an optional `run` column groups rows for the
bootstrap (rows of one run resample together), an optional `flops_per_token` column gives
the training cost per token (else 6N).

Fits, per family, following Hoffmann et al. 2022 ("Training compute-optimal large language
models", section 3.3, approach 3):
  (a) per budget D:  L(N) = E + A·N^-alpha;
  (b) jointly:       L(N, D) = E + A/N^alpha + B/D^beta, with e = log E, a = log A, b = log B:
      minimize sum_i Huber_delta(LSE(a - alpha log N_i, b - beta log D_i, e) - log L_i), delta = 1e-3,
      by L-BFGS (SciPy's L-BFGS-B) from a grid of starting points, keeping the best;
  (c) the compute-optimal N and D for a FLOP budget C = F(N)·D, with F(N) the training FLOPs per
      token (interpolated log-log between the sweep's models; 6N without them): argmin_N L(N, C/F(N));
  (d) with two families, the ratio of their parameter counts at equal loss at the largest budget.
Intervals: 95 % percentile bootstrap over runs (resampled with replacement, refitted from the
full fit's optimum and a few grid starts).
Errors: one line "multiscreen sweep <mode>: ..." on stderr, exit 1: an unreadable, non-UTF-8 or
malformed CSV (a header column empty or named twice, a row whose fields are more or fewer
than the header's: each naming its line); a value of params, tokens, loss, non_embedding_params or flops_per_token that is
not a positive, finite number (naming its line and column); `fit` where nothing could be fitted
(after printing what was tried).
"""
import argparse
import csv
import itertools
import json
import math
import os
import sys

import numpy as np
from scipy.optimize import minimize, minimize_scalar
from scipy.special import logsumexp, softmax

HUBER_DELTA = 1e-3
# The joint fit's exponents alpha and beta are kept in [0, 3] (Hoffmann et al.'s grid of
# starts spans [0, 2]; language-model exponents are ~0.05-0.7): an optimum on either bound
# is a degenerate fit (0: the term is a constant that trades with E), warned about.
EXPONENT_BOUNDS = (0.0, 3.0)
PARAMS = ("E", "A", "alpha", "B", "beta")
BUDGET_PARAMS = ("E", "A", "alpha")


class FitError(Exception):
    pass


# ---------------------------------------------------------------- objective

def _huber(r, delta=HUBER_DELTA):
    a = np.abs(r)
    value = np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))
    grad = np.where(a <= delta, r, delta * np.sign(r))
    return value, grad


def _objective(theta, logs, log_loss):
    """Huber loss of log L against LSE(terms) and its gradient. theta: the log-space
    parameters; logs: [n, k] design, each term t_j = theta-linear (see _terms)."""
    terms, jac = _terms(theta, logs)
    lse = logsumexp(terms, axis=1)
    r = lse - log_loss
    value, h = _huber(r)
    w = softmax(terms, axis=1)  # d lse / d term_j
    grad = np.einsum("i,ij,ijk->k", h, w, jac)
    return value.sum(), grad


def _terms(theta, logs):
    """Joint: theta = (e, a, alpha, b, beta), logs = [log N, log D] -> terms [a - alpha n, b - beta d, e].
    Per budget: theta = (e, a, alpha), logs = [log N] -> [a - alpha n, e]."""
    n = logs[:, 0]
    ones = np.ones_like(n)
    zeros = np.zeros_like(n)
    if len(theta) == 5:
        e, a, alpha, b, beta = theta
        d = logs[:, 1]
        terms = np.stack([a - alpha * n, b - beta * d, e * ones], axis=1)
        jac = np.stack([np.stack([zeros, ones, -n, zeros, zeros], axis=1),
                        np.stack([zeros, zeros, zeros, ones, -d], axis=1),
                        np.stack([ones, zeros, zeros, zeros, zeros], axis=1)], axis=1)
    else:
        e, a, alpha = theta
        terms = np.stack([a - alpha * n, e * ones], axis=1)
        jac = np.stack([np.stack([zeros, ones, -n], axis=1), np.stack([ones, zeros, zeros], axis=1)], axis=1)
    return terms, jac


def _minimize(starts, logs, log_loss, bounds=None):
    """L-BFGS-B from every start with SciPy's default tolerances, then the best one
    polished with tight tolerances (the Huber loss of a near-exact fit is ~1e-12).
    Returns (theta, converged): converged when the best start or its polish met L-BFGS-B's
    convergence test (the polish's tight tolerances often end in a line-search stop at
    an optimum already found, which is no failure)."""
    best = None
    with np.errstate(over="ignore", invalid="ignore"):
        for start in starts:
            start = np.asarray(start, dtype=float)
            if bounds is not None:
                start = np.clip(start, [lo if lo is not None else -np.inf for lo, _ in bounds],
                                [hi if hi is not None else np.inf for _, hi in bounds])
            res = minimize(_objective, start, args=(logs, log_loss), jac=True, method="L-BFGS-B",
                           bounds=bounds, options={"maxiter": 500})
            if np.isfinite(res.fun) and np.all(np.isfinite(res.x)) and (best is None or res.fun < best.fun):
                best = res
        if best is None:
            raise FitError("the fit found no finite optimum")
        res = minimize(_objective, best.x, args=(logs, log_loss), jac=True, method="L-BFGS-B", bounds=bounds,
                       options={"ftol": 1e-22, "gtol": 1e-16, "maxiter": 20000, "maxcor": 30})
    if np.isfinite(res.fun) and res.fun <= best.fun:
        return res.x, bool(best.success or res.success)
    return best.x, bool(best.success)


def joint_grid():
    """Hoffmann et al.'s grid of starts, thinned: alpha, beta in {0.2, 0.6};
    e in {-1, 0.5}; a, b in {0, 6, 12}."""
    return [(e, a, al, b, be) for e in (-1.0, 0.5) for a in (0.0, 6.0, 12.0) for al in (0.2, 0.6)
            for b in (0.0, 6.0, 12.0) for be in (0.2, 0.6)]


def budget_grid():
    return [(e, a, al) for e in (-1.0, 0.5) for a in (0.0, 3.0, 6.0, 12.0) for al in (0.1, 0.3, 0.8)]


def _to_params(theta):
    if len(theta) == 5:
        e, a, alpha, b, beta = theta
        return {"E": math.exp(e), "A": math.exp(a), "alpha": float(alpha), "B": math.exp(b), "beta": float(beta)}
    e, a, alpha = theta
    return {"E": math.exp(e), "A": math.exp(a), "alpha": float(alpha)}


def _to_theta(p):
    """The log-space parameters of a fit (a coefficient that underflowed to 0 as -700)."""
    log = lambda x: math.log(x) if x > 0 else -700.0  # noqa: E731
    if "B" in p:
        return (log(p["E"]), log(p["A"]), p["alpha"], log(p["B"]), p["beta"])
    return (log(p["E"]), log(p["A"]), p["alpha"])


def fit_joint(N, D, L, starts=None):
    """(E, A, alpha, B, beta) of L = E + A/N^alpha + B/D^beta (approach 3), alpha and beta
    within EXPONENT_BOUNDS, with "converged" (whether L-BFGS-B met its convergence test)."""
    N, D, L = (np.asarray(x, dtype=float) for x in (N, D, L))
    if len(set(N)) < 2 or len(set(D)) < 2 or len(L) < 5:
        raise FitError(f"the joint fit needs at least 5 results over 2 or more model sizes and 2 or more budgets "
                       f"(have {len(L)} results, {len(set(N))} sizes, {len(set(D))} budgets)")
    logs = np.stack([np.log(N), np.log(D)], axis=1)
    bounds = [(None, None), (None, None), EXPONENT_BOUNDS, (None, None), EXPONENT_BOUNDS]
    theta, converged = _minimize(starts or joint_grid(), logs, np.log(L), bounds)
    return dict(_to_params(theta), converged=converged)


# A power-law term that changes the fitted loss by less than this fraction across the
# sweep's sizes (or budgets) is flat: its exponent and coefficient are not determined.
FLAT = 1e-4
TERMS = {"alpha": ("A", "N"), "beta": ("B", "D")}  # exponent: (its coefficient, its axis)


def degenerate_axes(p, axes):
    """{exponent: why} for the exponents of the fit `p` whose law says nothing about the loss
    along its axis; `axes` = {exponent: the results' values along its axis} ({"alpha": N} per
    budget, {"alpha": N, "beta": D} jointly). An exponent on its bound (EXPONENT_BOUNDS), or a
    term (A/N^alpha, B/D^beta) whose spread over the values is under FLAT of the loss."""
    out = {}
    for k, values in axes.items():
        coef, axis = TERMS[k]
        bound = next((b for b in EXPONENT_BOUNDS if abs(p[k] - b) <= 1e-6), None)
        term = p[coef] * np.asarray(values, dtype=float) ** -p[k]
        if bound is not None:
            out[k] = (f"{k} = {p[k]:.4g} lies on its bound {bound:g} (the fit is kept in "
                      f"[{EXPONENT_BOUNDS[0]:g}, {EXPONENT_BOUNDS[1]:g}]): "
                      + ("the loss does not fall along that axis; the term trades with E"
                         if bound == EXPONENT_BOUNDS[0] else "no plausible power law fits along that axis"))
        elif np.ptp(term) < FLAT * (p["E"] + term.min()):
            out[k] = (f"{coef}/{axis}^{k} changes the loss by {np.ptp(term):.2g} across the results' {axis} "
                      f"(under {FLAT:g} of it): the loss is flat along {axis}, {coef} and {k} are not determined")
    return out


def fit_warnings(p, axes):
    """Why the fit `p` (joint or per budget) says little along `axes` (degenerate_axes'), one
    sentence each, and whether the optimizer did not converge."""
    out = list(degenerate_axes(p, axes).values())
    if not p.get("converged", True):
        out.append("L-BFGS-B did not converge from any start (its convergence test was not met): the optimum is not one")
    return out


def joint_warnings(N, D, p):
    """Why the joint fit `p` of results at sizes N and budgets D says little, one sentence
    each (empty: none): fewer distinct sizes (or budgets) than the 3 parameters of that
    axis's law (E, A, alpha along N; E, B, beta along D) or fewer distinct (N, D) points
    than the 5 parameters, leave parameters undetermined; then fit_warnings'."""
    out = []
    sizes, budgets, points = len(set(N)), len(set(D)), len(set(zip(N, D)))
    if sizes < 3:
        out.append(f"{sizes} distinct model sizes, fewer than the 3 parameters (E, A, alpha) of the law along N: "
                   "A and alpha are not determined")
    if budgets < 3:
        out.append(f"{budgets} distinct token budgets, fewer than the 3 parameters (E, B, beta) of the law along D: "
                   "B and beta are not determined")
    if points < len(PARAMS):
        out.append(f"{points} distinct (N, D) points, fewer than the {len(PARAMS)} parameters of the joint fit")
    return out + fit_warnings(p, {"alpha": N, "beta": D})


def fit_budget(N, L, starts=None):
    """(E, A, alpha) of L = E + A·N^-alpha at one budget, alpha within EXPONENT_BOUNDS as the
    joint fit's, with "converged"; its warnings are fit_warnings(p, {"alpha": N})."""
    N, L = np.asarray(N, dtype=float), np.asarray(L, dtype=float)
    if len(set(N)) < 3:
        raise FitError(f"a per-budget fit needs 3 or more model sizes (have {len(set(N))})")
    theta, converged = _minimize(starts or budget_grid(), np.log(N)[:, None], np.log(L),
                                 [(None, None), (None, None), EXPONENT_BOUNDS])
    return dict(_to_params(theta), converged=converged)


def predict(p, N, D=None):
    N = np.asarray(N, dtype=float)
    out = p["E"] + p["A"] * N ** -p["alpha"]
    if "B" in p:
        out = out + p["B"] * np.asarray(D, dtype=float) ** -p["beta"]
    return out


# ---------------------------------------------------------------- derived quantities

class FlopsModel:
    """Training FLOPs per token as a function of N: log-log interpolation between known
    (N, F) pairs (extrapolated linearly in log space), or 6N without them."""

    def __init__(self, pairs=()):
        pairs = sorted(set((float(n), float(f)) for n, f in pairs if n > 0 and f > 0))
        self.logn = np.log([n for n, _ in pairs]) if pairs else None
        self.logf = np.log([f for _, f in pairs]) if pairs else None

    def __call__(self, N):
        if self.logn is None:
            return 6.0 * N
        if len(self.logn) == 1:
            return math.exp(self.logf[0]) * N / math.exp(self.logn[0])
        x = math.log(N)
        i = int(np.clip(np.searchsorted(self.logn, x) - 1, 0, len(self.logn) - 2))
        slope = (self.logf[i + 1] - self.logf[i]) / (self.logn[i + 1] - self.logn[i])
        return math.exp(self.logf[i] + slope * (x - self.logn[i]))

    def description(self):
        return "6N" if self.logn is None else "trainer/flops.h's count of the sweep's models, interpolated log-log"


OPTIMUM_SEARCH = (1e2, 1e14)  # the model sizes compute_optimal searches
NO_INTERIOR_OPTIMUM = (f"no optimum: the fitted loss at this compute has no minimum over N in "
                       f"[{OPTIMUM_SEARCH[0]:g}, {OPTIMUM_SEARCH[1]:g}] (it falls on past an edge) or its minimum "
                       "holds fewer than 1 token")


def no_optimum(p, N, D):
    """Why the joint fit `p` of results at sizes N and budgets D has no compute-optimal
    allocation at any compute (None: it may have one): a law that says nothing along N or D
    (degenerate_axes) leaves the trade of N against D undetermined, and a minimizer would
    return an arbitrary N (a CSV of equal losses gave D < 1 token)."""
    bad = degenerate_axes(p, {"alpha": N, "beta": D})
    if bad:
        return (f"no optimum: the fit is degenerate along {' and '.join(TERMS[k][1] for k in bad)}, "
                "so it does not say how the loss trades N against D")
    return None


def compute_optimal(p, C, flops):
    """argmin over N in OPTIMUM_SEARCH of L(N, C / F(N)): (N, D, L), or None where the minimum
    lies on the edge of the search (the loss falls on beyond it) or at fewer than 1 token
    (NO_INTERIOR_OPTIMUM). A degenerate fit's minimum is arbitrary: no_optimum says so first."""
    def loss(logn):
        n = math.exp(logn)
        d = C / flops(n)
        return float(predict(p, n, d))
    lo, hi = (math.log(x) for x in OPTIMUM_SEARCH)
    res = minimize_scalar(loss, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
    n = math.exp(res.x)
    d = C / flops(n)
    if min(res.x - lo, hi - res.x) < 1e-3 or d < 1 or not math.isfinite(res.fun):
        return None
    return n, d, float(res.fun)


def params_at_loss(p, loss, D):
    """N with L(N, D) = loss; None when the loss is not reachable at D."""
    rest = loss - p["E"] - p["B"] * D ** -p["beta"]
    return (p["A"] / rest) ** (1.0 / p["alpha"]) if rest > 0 else None


# ---------------------------------------------------------------- bootstrap

def bootstrap(rows, fit, samples, seed=0):
    """[fit(resample)] over `samples` resamples of rows grouped by run; failed fits skipped."""
    groups = {}
    for r in rows:
        groups.setdefault(r.get("run") or id(r), []).append(r)
    keys = list(groups)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(samples):
        pick = rng.integers(0, len(keys), len(keys))
        try:
            out.append(fit([r for k in pick for r in groups[keys[k]]]))
        except FitError:
            continue
    return out


def interval(values, samples=None):
    """The 2.5 and 97.5 percentiles of `values`; None when fewer than 2, or fewer than half
    of `samples` resamples, gave a value (most resamples could not be fitted: the interval
    of the few that could would be biased)."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if len(v) < 2 or (samples and len(v) < samples / 2):
        return None
    return [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))]


# ---------------------------------------------------------------- results

def _positive(path, line, rec, column):
    """rec[column] as a positive, finite float, else a FitError naming the row and column."""
    try:
        value = float(rec[column])
    except (TypeError, ValueError):
        raise FitError(f"{path}:{line}: {column} = {rec[column]!r} is not a number")
    if not (value > 0 and math.isfinite(value)):
        raise FitError(f"{path}:{line}: {column} = {rec[column].strip()} must be positive and finite")
    return value


def read_results_csv(path):
    try:
        f = open(path, newline="", encoding="utf-8-sig")  # a spreadsheet's byte-order mark is not a column name
    except OSError as e:
        raise FitError(f"{path}: {e.strerror}")
    with f:
        try:
            return _read_results(path, csv.DictReader(f))
        except UnicodeDecodeError:
            with open(path, "rb") as b:
                data = b.read()
            try:
                data.decode("utf-8")
                where = ""
            except UnicodeDecodeError as e:
                line = data.count(b"\n", 0, e.start) + 1
                where = f" (invalid byte 0x{data[e.start]:02x} at offset {e.start}, line {line})"
            raise FitError(f"{path}: not UTF-8 text{where}")
        except csv.Error as e:
            raise FitError(f"{path}: not a CSV file ({e})")


def _read_results(path, reader):
    """The rows of a results CSV, read strictly: the header names each column once (none
    empty, as a trailing comma would make) and every row has exactly the header's fields, so
    that a shifted or cut row is refused (naming its line) rather than read into the wrong
    columns or as a missing value."""
    header = reader.fieldnames or []
    for i, name in enumerate(header):
        if not name.strip():
            raise FitError(f"{path}:1: column {i + 1} of the header has no name"
                           + (" (a trailing comma?)" if i == len(header) - 1 else ""))
        if name in header[:i]:
            raise FitError(f"{path}:1: column '{name}' appears twice in the header (columns {header.index(name) + 1} "
                           f"and {i + 1})")
    missing = [c for c in ("family", "params", "tokens", "loss") if c not in header]
    if missing:
        raise FitError(f"{path}: missing column(s) {', '.join(missing)} (need family,params,tokens,loss)")
    rows = []
    for rec in reader:
        line = reader.line_num
        # DictReader puts a long row's extra fields under None and fills a short row with None.
        fields = len(header) + len(rec.get(None, [])) - sum(1 for k in header if rec[k] is None)
        if fields != len(header):
            raise FitError(f"{path}:{line}: {fields} field{'s' if fields != 1 else ''}, the header has {len(header)}"
                           + (" (a trailing comma?)" if fields == len(header) + 1 and rec[None] == [""] else ""))
        row = {"family": (rec["family"] or "").strip()}
        for k in ("params", "tokens", "loss"):
            row[k] = _positive(path, line, rec, k)
        # Optional columns: empty is absent; given, they are positive numbers too (a NaN
        # FLOPs count or parameter count would poison the fits).
        for k in ("non_embedding_params", "flops_per_token"):
            if rec.get(k) not in (None, ""):
                row[k] = _positive(path, line, rec, k)
        if not row["family"]:
            raise FitError(f"{path}:{line}: empty family")
        if rec.get("run"):
            row["run"] = rec["run"]
        rows.append(row)
    if not rows:
        raise FitError(f"{path}: no results")
    return rows


def read_manifest(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:  # ValueError: JSONDecodeError, UnicodeDecodeError
        raise FitError(f"{path}: {e}")


def run_metrics(run_dir):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from metrics import read_metrics
    try:
        return read_metrics(os.path.join(run_dir, "metrics.jsonl"))
    except FileNotFoundError:
        return []


def collect(manifest):
    """Rows of the sweep's runs: the validation loss at each budget's step that the run reached.
    A run the manifest marks diverged (launch/divergence.h's verdict, written by `sweep fit`)
    gives no row at any budget: its losses before the divergence are those of an unstable
    run. Returns (rows, excluded), excluded = [{"run", "reason"}]."""
    rows, excluded = [], []
    for run in manifest["runs"]:
        if run.get("diverged"):
            excluded.append({"run": run["name"], "reason": f"diverged at step {run.get('diverged_step')}"})
            continue
        # A diverged run logs a non-finite loss as null (JSON has no NaN): such a point, or
        # any value that is not a number, is no result.
        val = {m.get("step"): m["val_loss"] for m in run_metrics(run["dir"])
               if isinstance(m.get("val_loss"), (int, float)) and not isinstance(m.get("val_loss"), bool)}
        for b in run["budgets"]:
            if b["steps"] in val and math.isfinite(val[b["steps"]]):
                row = {"family": run["family"], "params": float(run["params"]), "tokens": float(b["tokens"]),
                       "loss": float(val[b["steps"]]), "run": run["name"], "model": run["model"],
                       "non_embedding_params": float(run["non_embedding_params"]),
                       "flops_per_token": float(run["flops_per_token"])}
                if "lr" in run:
                    row["lr"] = float(run["lr"])
                rows.append(row)
    return rows, excluded


def best_lr_rows(rows):
    """A sweep with an lr axis gives one point per (family, model, budget): the rows of the
    learning rate whose mean loss over seeds is lowest at that budget (every seed's row of
    that lr is kept, so the bootstrap still resamples runs). Rows without an lr (a CSV) pass
    as they are. Returns (kept rows, choices), choices = [{"family", "model", "tokens",
    "lr", "lrs"}] where more than one lr was there to choose from."""
    def key(r):
        return (r["family"], r.get("model", r["params"]), r["tokens"])
    groups = {}
    for r in rows:
        groups.setdefault(key(r), {}).setdefault(r.get("lr"), []).append(r["loss"])
    chosen, choices = {}, []
    for k, by_lr in groups.items():
        if len(by_lr) == 1 or None in by_lr:
            continue
        best = min(by_lr, key=lambda lr: (sum(by_lr[lr]) / len(by_lr[lr]), lr))
        chosen[k] = best
        choices.append({"family": k[0], "model": k[1], "tokens": k[2], "lr": best, "lrs": sorted(by_lr)})
    kept = [r for r in rows if key(r) not in chosen or r.get("lr") == chosen[key(r)]]
    return kept, choices


def write_results_csv(rows, path):
    cols = ["family", "params", "tokens", "loss", "run", "model", "non_embedding_params", "flops_per_token", "lr"]
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: (int(v) if k in ("params", "tokens", "non_embedding_params") else v) for k, v in r.items() if k in cols})
    os.replace(tmp, path)


# ---------------------------------------------------------------- the analysis

def analyse(rows, samples, size="params"):
    """Everything `fit` prints: per family the joint and per-budget fits with intervals,
    the compute-optimal allocation, and with two families the parameter ratio."""
    out = {"size": "total parameters" if size == "params" else "non-embedding parameters", "bootstrap": samples, "families": {}}
    fams = sorted(set(r["family"] for r in rows))
    for fam in fams:
        fr = [dict(r, params=r[size]) for r in rows if r["family"] == fam]
        flops = FlopsModel([(r["params"], r["flops_per_token"]) for r in fr if "flops_per_token" in r] if size == "params" else [])
        entry = {"results": len(fr), "flops_model": flops.description()}
        try:
            joint = fit_joint([r["params"] for r in fr], [r["tokens"] for r in fr], [r["loss"] for r in fr])
        except FitError as e:
            entry["joint_error"] = str(e)
            joint = None
        if joint is not None:
            start = [_to_theta(joint)] + joint_grid()[::12]
            boots = bootstrap(fr, lambda s: fit_joint([r["params"] for r in s], [r["tokens"] for r in s], [r["loss"] for r in s], start),
                              samples)
            entry.update(joint)
            entry["warnings"] = joint_warnings([r["params"] for r in fr], [r["tokens"] for r in fr], joint)
            entry["intervals"] = {k: interval([b[k] for b in boots], samples) for k in PARAMS}
            entry["bootstrap_fits"] = len(boots)
            # Compute-optimal allocation at the sweep's largest compute and 10x, 100x, 1000x beyond it.
            c_max = max(flops(r["params"]) * r["tokens"] for r in fr)
            entry["compute_optimal"] = []
            degenerate = no_optimum(joint, [r["params"] for r in fr], [r["tokens"] for r in fr])
            if degenerate:
                entry["no_optimum"] = degenerate
            for mult in (1, 10, 100, 1000):
                C = c_max * mult
                opt = None if degenerate else compute_optimal(joint, C, flops)
                if opt is None:
                    entry["compute_optimal"].append({"flops": C, "params": None, "tokens": None, "loss": None,
                                                     "no_optimum": degenerate or NO_INTERIOR_OPTIMUM})
                    continue
                n, d, l = opt
                bo = [x for x in (compute_optimal(b, C, flops) for b in boots) if x is not None]
                entry["compute_optimal"].append({"flops": C, "params": n, "tokens": d, "loss": l,
                                                 "params_interval": interval([x[0] for x in bo], len(boots)),
                                                 "tokens_interval": interval([x[1] for x in bo], len(boots))})
            entry["_boots"] = boots
        per_budget = []
        for D in sorted(set(r["tokens"] for r in fr)):
            br = [r for r in fr if r["tokens"] == D]
            item = {"tokens": D}
            try:
                p = fit_budget([r["params"] for r in br], [r["loss"] for r in br])
                start = [_to_theta(p)] + budget_grid()[::6]
                boots = bootstrap(br, lambda s: fit_budget([r["params"] for r in s], [r["loss"] for r in s], start), samples)
                item.update(p)
                item["warnings"] = fit_warnings(p, {"alpha": [r["params"] for r in br]})
                item["intervals"] = {k: interval([b[k] for b in boots], samples) for k in BUDGET_PARAMS}
                item["bootstrap_fits"] = len(boots)
            except FitError as e:
                item["error"] = str(e)
            per_budget.append(item)
        entry["per_budget"] = per_budget
        out["families"][fam] = entry
    if len(fams) == 2 and all("E" in out["families"][f] for f in fams):
        first, second = ("multiscreen", "transformer") if set(fams) == {"multiscreen", "transformer"} else fams
        pa, pb = out["families"][first], out["families"][second]
        D = max(r["tokens"] for r in rows)
        # Equal loss: the loss of the first family's largest model at the largest budget.
        n_ref = max(r[size] for r in rows if r["family"] == first)
        loss = float(predict(pa, n_ref, D))

        def ratio(a, b):
            na, nb = params_at_loss(a, loss, D), params_at_loss(b, loss, D)
            return na / nb if na and nb else None
        boots = [ratio(a, b) for a, b in zip(pa["_boots"], pb["_boots"])]
        out["ratio"] = {"numerator": first, "denominator": second, "tokens": D, "loss": loss,
                        "value": ratio(pa, pb), "interval": interval(boots)}
    for entry in out["families"].values():
        entry.pop("_boots", None)
    return out


def fmt_interval(iv, f="{:.4g}"):
    return "[" + ", ".join(f.format(x) for x in iv) + "]" if iv else "—"


def print_text(result):
    print(f"N = {result['size']}; 95% intervals from {result['bootstrap']} bootstrap resamples over runs")
    for e in result.get("excluded", []):
        print(f"left out: {e['run']} ({e['reason']})")
    if result.get("lr_choices"):
        print(f"lr: the best of {len(result['lr_choices'][0]['lrs'])} per (model, budget) by mean loss over seeds; "
              + ", ".join(sorted(set(f"{c['model']}: {c['lr']:g}" for c in result["lr_choices"]))))
    for fam, e in result["families"].items():
        print(f"{fam}: {e['results']} results")
        if "E" in e:
            print("  L(N, D) = E + A/N^alpha + B/D^beta:")
            for k in PARAMS:
                print(f"    {k:6s} {e[k]:12.5g}  {fmt_interval(e['intervals'][k])}")
            for w in e["warnings"]:
                print(f"  warning: degenerate joint fit: {w}")
            for c in e["compute_optimal"]:
                if c["params"] is None:
                    print(f"  compute-optimal at {c['flops']:.3g} FLOPs: {c['no_optimum']}")
                    continue
                print(f"  compute-optimal at {c['flops']:.3g} FLOPs: N = {c['params']:.3g} {fmt_interval(c['params_interval'], '{:.3g}')}, "
                      f"D = {c['tokens']:.3g} {fmt_interval(c['tokens_interval'], '{:.3g}')}, L = {c['loss']:.4f}")
        else:
            print(f"  joint fit: {e['joint_error']}")
        for b in e["per_budget"]:
            if "E" in b:
                print(f"  D = {b['tokens']:.4g}: L(N) = {b['E']:.4g} + {b['A']:.4g}·N^-{b['alpha']:.4g}  "
                      f"alpha {fmt_interval(b['intervals']['alpha'])}")
                for w in b["warnings"]:
                    print(f"  warning: degenerate fit at D = {b['tokens']:.4g}: {w}")
            else:
                print(f"  D = {b['tokens']:.4g}: {b['error']}")
    if "ratio" in result:
        r = result["ratio"]
        v = f"{r['value']:.3g}" if r["value"] else "—"
        print(f"N_{r['numerator']} / N_{r['denominator']} at equal loss {r['loss']:.4f} (D = {r['tokens']:.3g}): {v} {fmt_interval(r['interval'], '{:.3g}')}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["fit", "report"])
    ap.add_argument("--manifest")
    ap.add_argument("--results")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--params", choices=["total", "non_embedding"], default="total")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    # L-BFGS-B's Fortran writes "ascent direction in projection" lines to fd 1 whatever
    # iprint says, buffered until the process exits: point fd 1 at /dev/null for good and
    # print through a copy of it (--json must parse).
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    sys.stdout = os.fdopen(saved, "w")
    try:
        return _main(args)
    finally:
        sys.stdout.flush()


def _main(args):
    try:
        manifest, excluded, lr_choices = None, [], []
        if args.results:
            rows = read_results_csv(args.results)
        elif args.manifest:
            manifest = read_manifest(args.manifest)
            rows, excluded = collect(manifest)
            if not rows:
                why = f" ({len(excluded)} diverged)" if excluded else ""
                raise FitError(f"{manifest['sweep']}: no run has reached a budget yet{why} (see `sweep status`)")
            write_results_csv(rows, os.path.join(manifest["root"], "results.csv"))
            all_rows = rows
            rows, lr_choices = best_lr_rows(rows)
        else:
            raise FitError("give --manifest or --results")
        size = "params" if args.params == "total" else "non_embedding_params"
        if size != "params" and any(size not in r for r in rows):
            raise FitError("--params=non_embedding needs a non_embedding_params column")
        if args.mode == "report":
            if manifest is None:
                raise FitError("report needs a sweep")
            import sweep_report
            sweep_report.write(manifest, all_rows, rows, excluded, args.bootstrap,
                               args.out or os.path.join(manifest["root"], "report.md"))
            return 0
        result = analyse(rows, args.bootstrap, size)
        result["excluded"] = excluded
        result["lr_choices"] = lr_choices
        if args.json:
            print(json.dumps(result, indent=1))
        else:
            print_text(result)
        fitted = any("E" in e or any("E" in b for b in e["per_budget"]) for e in result["families"].values())
        if not fitted:
            reasons = sorted(set(e.get("joint_error", "") for e in result["families"].values()) - {""})
            raise FitError(f"nothing could be fitted ({len(rows)} results; {'; '.join(reasons) or 'no fit converged'})")
    except FitError as e:
        print(f"multiscreen sweep {args.mode}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
