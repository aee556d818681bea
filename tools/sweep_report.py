#!/usr/bin/python3
"""The Markdown report of a sweep (issue 17; `multiscreen sweep report` runs it through
tools/sweep_fit.py): tables of the runs and of the fits (tools/sweep_fit.py's analyse), and
three PNG plots (matplotlib): validation loss against tokens per model, final loss against
parameters on log-log axes with the fitted curves, and the compute-optimal frontier.
Figures go to <dir of the report>/figures/<report stem>_*.png, the report through a
temporary and a rename.
"""
import math
import os

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import sweep_fit as sf  # noqa: E402


def _save(fig, path):
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)


def _axes(ax, xlabel, ylabel, title, logy=False, legend_size=7, ncol=1):
    """Log x (and optionally y) axes with labels, a light grid and a legend (when something is labelled)."""
    ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    if ax.get_legend_handles_labels()[0]:  # nothing labelled (no joint fit): no legend, and no warning
        ax.legend(fontsize=legend_size, ncol=ncol)


def plot_curves(manifest, path):
    """Validation loss against tokens, one line per run."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    runs = sorted(manifest["runs"], key=lambda r: (r["family"], r["params"], r["lr"], r["seed"]))
    colors = plt.cm.viridis(np.linspace(0, 0.9, max(1, len(runs))))
    step_tokens = manifest["step_tokens"]
    for c, run in zip(colors, runs):
        val = sorted((m["step"], m["val_loss"]) for m in sf.run_metrics(run["dir"]) if "val_loss" in m)
        if val:
            ax.plot([s * step_tokens for s, _ in val], [v for _, v in val], marker="o", ms=3, color=c,
                    label=f"{run['model']} ({run['params'] / 1e6:.2f}M)")
    _axes(ax, "training tokens", "validation loss", "validation loss during training")
    fig.tight_layout()
    _save(fig, path)


def plot_params(rows, result, path):
    """Final loss against parameters per budget (log-log), with the per-budget fits."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    budgets = sorted(set(r["tokens"] for r in rows))
    colors = plt.cm.plasma(np.linspace(0, 0.85, max(1, len(budgets))))
    markers = {f: m for f, m in zip(sorted(result["families"]), "os^D")}
    for fam, entry in result["families"].items():
        for c, D in zip(colors, budgets):
            pts = [(r["params"], r["loss"]) for r in rows if r["family"] == fam and r["tokens"] == D]
            if not pts:
                continue
            ax.scatter(*zip(*pts), color=c, marker=markers[fam], zorder=3,
                       label=f"{fam} D={D:.3g}" if len(result["families"]) > 1 else f"D={D:.3g}")
            fit = next((b for b in entry["per_budget"] if b["tokens"] == D and "E" in b), None)
            if fit:
                n = np.geomspace(min(p for p, _ in pts) / 1.5, max(p for p, _ in pts) * 1.5, 100)
                ax.plot(n, sf.predict(fit, n), color=c, lw=1,
                        label=f"  E={fit['E']:.3g} A={fit['A']:.3g} α={fit['alpha']:.3g}")
    _axes(ax, "parameters N (total)", "validation loss", "L(N) = E + A·N^-α per token budget", logy=True, legend_size=6.5, ncol=2)
    fig.tight_layout()
    _save(fig, path)


def plot_frontier(rows, result, path):
    """Loss against training compute, the runs' points and the joint fit's compute-optimal frontier."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4.2))
    for fam, entry in result["families"].items():
        fr = [r for r in rows if r["family"] == fam]
        flops = sf.FlopsModel([(r["params"], r["flops_per_token"]) for r in fr if "flops_per_token" in r])
        C = [flops(r["params"]) * r["tokens"] for r in fr]
        sc = ax.scatter(C, [r["loss"] for r in fr], c=np.log10([r["params"] for r in fr]), cmap="viridis", zorder=3)
        if "E" not in entry or entry.get("no_optimum"):
            continue
        cs = np.geomspace(min(C) / 2, max(C) * 1000, 60)
        # No optimum (a degenerate fit, sweep_fit.compute_optimal): a gap in the curves.
        opt = [sf.compute_optimal(entry, c, flops) or (np.nan, np.nan, np.nan) for c in cs]
        if all(np.isnan(o[0]) for o in opt):
            continue
        ax.plot(cs, [o[2] for o in opt], color="k", lw=1.2, label=f"{fam}: frontier of the joint fit")
        bx.plot(cs, [o[0] for o in opt], label=f"{fam}: N_opt")
        bx.plot(cs, [o[1] for o in opt], ls="--", label=f"{fam}: D_opt")
        bx.axvline(max(C), color="gray", lw=0.8, ls=":")
    if not bx.lines:
        bx.text(0.5, 0.5, "no joint fit with an optimum", transform=bx.transAxes, ha="center", va="center", color="gray")
    fig.colorbar(sc, ax=ax, label="log10 N")
    _axes(ax, "training FLOPs (trainer/flops.h)", "validation loss", "loss against compute")
    _axes(bx, "training FLOPs", "parameters / tokens", "compute-optimal N, D (dotted: largest run)", logy=True)
    fig.tight_layout()
    _save(fig, path)


def _iv(iv, f="{:.3g}"):
    return sf.fmt_interval(iv, f)


def in_fits(run, rows, fit_rows, excluded):
    """The Runs table's "in the fits" cell: whether the run's results went into the fits."""
    why = {e["run"]: e["reason"] for e in excluded}
    if run["name"] in why:
        return f"no: {why[run['name']]}"
    mine = sum(1 for r in rows if r.get("run") == run["name"])
    used = sum(1 for r in fit_rows if r.get("run") == run["name"])
    if mine == 0:
        return "—"
    if used == mine:
        return "yes"
    return "no: another lr is better" if used == 0 else f"at {used} of {mine} budgets (another lr is better at the rest)"


def markdown(manifest, rows, fit_rows, excluded, result, result_ne, figures):
    mode = manifest["budget_mode"]
    lines = [f"# Sweep report: `{os.path.relpath(manifest['sweep'])}`", "",
             f"{len(manifest['runs'])} runs, {len(rows)} (model, budget) results; "
             + ("**one run per model served every token budget** (warmup-constant schedule: the validation loss at each "
                "budget's step of the longest run)" if mode == "one_run_per_model" else "one full run per token budget")
             + f"; {manifest['step_tokens']} tokens per step. Intervals: 95 % percentile bootstrap over runs "
             f"({result['bootstrap']} resamples).", "",
             "## Runs", "",
             "A run that diverged is left out of the fits; with several learning rates, a (model, budget) point is "
             "the lr with the lowest mean loss over seeds.", "",
             "| run | family | params | non-embedding | FLOPs/token | budgets (tokens) | val loss at each budget | in the fits |",
             "|---|---|---:|---:|---:|---|---|---|"]
    for run in manifest["runs"]:
        losses = {r["tokens"]: r["loss"] for r in rows if r.get("run") == run["name"]}
        budgets = ", ".join(f"{b['tokens']:,}" for b in run["budgets"])
        lines.append(f"| {run['name']} | {run['family']} | {run['params']:,} | {run['non_embedding_params']:,} | "
                     f"{run['flops_per_token']:.3g} | {budgets} | "
                     + ", ".join(f"{losses[b['tokens']]:.4f}" if b["tokens"] in losses else "—" for b in run["budgets"])
                     + f" | {in_fits(run, rows, fit_rows, excluded)} |")
    for title, res in (("total parameters", result), ("non-embedding parameters", result_ne)):
        lines += ["", f"## Joint fit L(N, D) = E + A/N^α + B/D^β, N = {title}", "",
                  "Hoffmann et al. (2022) approach 3: Huber loss (δ = 10⁻³) on log-residuals, L-BFGS-B from a grid of starts.", "",
                  "| family | E | A | α | B | β |", "|---|---|---|---|---|---|"]
        for fam, e in res["families"].items():
            if "E" in e:
                lines.append(f"| {fam} | " + " | ".join(f"{e[k]:.4g} {_iv(e['intervals'][k])}" for k in sf.PARAMS) + " |")
            else:
                lines.append(f"| {fam} | {e['joint_error']} | | | | |")
        warnings = [f"- **Warning** ({fam}): degenerate joint fit: {w}." for fam, e in res["families"].items()
                    for w in e.get("warnings", [])]
        lines += [""] + warnings if warnings else []
        lines += ["", f"Per-budget fits L(N) = E + A·N^-α (N = {title}):", "", "| family | tokens D | E | A | α |", "|---|---:|---|---|---|"]
        for fam, e in res["families"].items():
            for b in e["per_budget"]:
                if "E" in b:
                    lines.append(f"| {fam} | {b['tokens']:,.0f} | " + " | ".join(f"{b[k]:.4g} {_iv(b['intervals'][k])}" for k in sf.BUDGET_PARAMS) + " |")
                else:
                    lines.append(f"| {fam} | {b['tokens']:,.0f} | {b['error']} | | |")
        budget_warnings = [f"- **Warning** ({fam}): degenerate fit at D = {b['tokens']:,.0f}: {w}."
                           for fam, e in res["families"].items() for b in e["per_budget"] for w in b.get("warnings", [])]
        lines += [""] + budget_warnings if budget_warnings else []
    lines += ["", "## Compute-optimal allocation (joint fit, total parameters)", ""]
    for fam, e in result["families"].items():
        if "compute_optimal" not in e:
            continue
        lines += [f"{fam} (training FLOPs per token: {e['flops_model']}):", "", "| FLOPs | N_opt | D_opt | D/N | predicted loss |",
                  "|---:|---|---|---:|---:|"]
        for c in e["compute_optimal"]:
            if c["params"] is None:
                lines.append(f"| {c['flops']:.3g} | {c['no_optimum']} | | | |")
                continue
            lines.append(f"| {c['flops']:.3g} | {c['params']:.3g} {_iv(c['params_interval'])} | {c['tokens']:.3g} "
                         f"{_iv(c['tokens_interval'])} | {c['tokens'] / c['params']:.3g} | {c['loss']:.4f} |")
        lines.append("")
    if "ratio" in result:
        r = result["ratio"]
        lines += [f"Parameters at equal loss: N_{r['numerator']} / N_{r['denominator']} = "
                  f"{r['value']:.3g} {_iv(r['interval'])} at loss {r['loss']:.4f}, D = {r['tokens']:.3g}.", ""]
    lines += ["## Plots", ""] + [f"![{t}]({p})" for t, p in figures] + [""]
    return "\n".join(lines)


def write(manifest, rows, fit_rows, excluded, samples, out):
    """The report at `out`: rows = every run's (model, budget) results, fit_rows = those the
    fits use (sweep_fit.best_lr_rows), excluded = the runs left out (diverged)."""
    out = os.path.abspath(out)
    fig_dir = os.path.join(os.path.dirname(out), "figures")
    os.makedirs(fig_dir, exist_ok=True)
    stem = os.path.splitext(os.path.basename(out))[0]
    result = sf.analyse(fit_rows, samples, "params")
    result_ne = sf.analyse(fit_rows, samples, "non_embedding_params")
    figures = []
    for name, title, fn in (("curves", "validation loss against tokens", lambda p: plot_curves(manifest, p)),
                            ("params", "final loss against parameters", lambda p: plot_params(fit_rows, result, p)),
                            ("frontier", "compute-optimal frontier", lambda p: plot_frontier(fit_rows, result, p))):
        path = os.path.join(fig_dir, f"{stem}_{name}.png")
        fn(path)
        figures.append((title, os.path.relpath(path, os.path.dirname(out))))
    text = markdown(manifest, rows, fit_rows, excluded, result, result_ne, figures)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, out)
    print(f"wrote {out} and {len(figures)} figures in {fig_dir}")
