#!/usr/bin/python3
"""The learning-rate stability study's tables and figures (issue 18; docs/stability.md).

Reads a sweep's manifest (<root>/sweep.json, written by `multiscreen sweep run|report`), the
runs' verdicts (`multiscreen sweep status --sweep=F --json`: the "diverged" verdict lives in
launch/divergence.h, not here) and each run's metrics.jsonl (tools/metrics.py), and writes
  - a Markdown fragment (--out, else stdout): per family x lr, the outcome and the final
    validation loss; at --lr (default 2^-4), one row per model (Table 6's switch rows);
  - <figures>/stability_lr.png: final validation loss against peak lr per family, diverged
    runs as markers at the top edge (the paper's Fig. 7a);
  - <figures>/stability_trajectories.png: training loss and global gradient norm (before
    clipping) against step for every run at --lr.
A family is the manifest's family for a run of an lr sweep (a model with more than one lr),
and each model at --lr is a row of the switch table.

  /usr/bin/python3 tools/stability_report.py --manifest=runs/studies/lr_stability/sweep.json \\
      --status=status.json --figures=docs/figures/stability --out=table.md
Errors: a missing or malformed manifest or status file, a status without a manifest run:
one line naming the file, exit status 1.
"""
import argparse
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from metrics import read_metrics  # noqa: E402


def fail(message):
    print(f"stability_report: {message}", file=sys.stderr)
    sys.exit(1)


def load_json(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        fail(f"{path}: cannot read the {what}: {e}")


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def collect(manifest_path, status_path):
    """One dict per run: the manifest's fields, the verdict and the traces."""
    manifest = load_json(manifest_path, "manifest")
    status = load_json(status_path, "status (sweep status --json)")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("runs"), list):
        fail(f"{manifest_path}: not a sweep manifest (no runs list)")
    if not isinstance(status, dict) or not isinstance(status.get("runs"), list):
        fail(f"{status_path}: not a `sweep status --json` output (no runs list)")
    verdicts = {r.get("name"): r for r in status["runs"]}
    runs = []
    for m in manifest["runs"]:
        v = verdicts.get(m["name"])
        if v is None:
            fail(f"{status_path}: no run {m['name']} of {manifest_path}")
        metrics = os.path.join(m["dir"], "metrics.jsonl")
        rows = read_metrics(metrics) if os.path.exists(metrics) else []
        train = [r for r in rows if "loss" in r]
        val = [r for r in rows if "val_loss" in r]
        runs.append({
            **m,
            "state": v["state"],
            "diverged": bool(v["diverged"]),
            "diverged_step": v.get("diverged_step"),
            "detail": v.get("detail", ""),
            "steps_run": v.get("step", 0),
            "step": [r["step"] for r in train],
            "loss": [r["loss"] if finite(r["loss"]) else math.nan for r in train],
            "grad_norm": [r.get("grad_norm") if finite(r.get("grad_norm")) else math.nan for r in train],
            # Final: of a run that ended (a running or interrupted run's last is not).
            "val_loss": (val[-1]["val_loss"] if val and finite(val[-1]["val_loss"]) and v["state"] in ("done", "diverged")
                         else None),
            "val_step": val[-1]["step"] if val else None,
        })
    return runs


def outcome(run):
    if run["diverged"]:
        return f"diverged (step {run['diverged_step']})"
    if run["state"] == "done":
        return "stable"
    return run["state"]


def lr_label(lr):
    e = math.log2(lr)
    return f"2^{round(e)}" if abs(e - round(e)) < 1e-9 else f"{lr:g}"


def fmt_loss(x):
    return "—" if x is None else f"{x:.3f}"


def families(runs):
    """{family: [runs of its lr sweep, by lr]}: models with more than one lr."""
    lrs = {}
    for r in runs:
        lrs.setdefault(r["model"], set()).add(r["lr"])
    out = {}
    for r in runs:
        if len(lrs[r["model"]]) > 1:
            out.setdefault(f"{r['family']} ({r['model']})", []).append(r)
    for v in out.values():
        v.sort(key=lambda r: r["lr"])
    return out


def markdown(runs, lr):
    lines = ["| family (model) | non-embedding | weight decay | clip | peak lr | outcome | final val loss |",
             "|---|---:|---:|---:|---|---|---:|"]
    for fam, rs in families(runs).items():
        for r in rs:
            lines.append(f"| {fam} | {r['non_embedding_params']:,} | {r['weight_decay']:g} | {r['grad_clip']:g} | "
                         f"{lr_label(r['lr'])} | {outcome(r)} | {fmt_loss(r['val_loss'])} |")
    lines += ["", f"At peak lr {lr_label(lr)}:", "",
              "| model | outcome | final val loss | grad norm after warmup: max | median | last train loss |",
              "|---|---|---:|---:|---:|---:|"]
    for r in [r for r in runs if abs(r["lr"] - lr) < 1e-12]:
        warm = r.get("warmup_steps", 0)
        g = sorted(x for s, x in zip(r["step"], r["grad_norm"]) if s > warm and math.isfinite(x))
        last = r["loss"][-1] if r["loss"] else None
        lines.append(f"| {r['model']} | {outcome(r)} | {fmt_loss(r['val_loss'])} | "
                     f"{f'{g[-1]:.3g}' if g else '—'} | {f'{statistics.median(g):.3g}' if g else '—'} | "
                     f"{fmt_loss(last if last is not None and math.isfinite(last) else None)} |")
    return "\n".join(lines) + "\n"


def figures(runs, lr, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(out_dir, exist_ok=True)
    written = []

    # Validation loss against lr per family; diverged runs as triangles at the top edge.
    fams = families(runs)
    fig, ax = plt.subplots(figsize=(6, 4))
    finals = [r["val_loss"] for rs in fams.values() for r in rs if r["val_loss"] is not None and not r["diverged"]]
    top = (max(finals) + 0.3) if finals else 12.0
    for fam, rs in fams.items():
        xs = [r["lr"] for r in rs if not r["diverged"] and r["val_loss"] is not None]
        ys = [r["val_loss"] for r in rs if not r["diverged"] and r["val_loss"] is not None]
        line, = ax.plot(xs, ys, "o-", label=fam)
        dx = [r["lr"] for r in rs if r["diverged"]]
        if dx:
            ax.plot(dx, [top] * len(dx), "^", color=line.get_color(), markersize=10, clip_on=False,
                    label=f"{fam}: diverged")
    ax.set_xscale("log", base=2)
    ax.set_ylim(top=top)
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("final validation loss (nats)")
    ax.set_title("Validation loss against learning rate")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(out_dir, "stability_lr.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)

    # Loss and gradient norm trajectories at `lr`: one row per run (raw, and a moving average
    # over `smooth` steps), shared axes; a dotted line at a non-finite loss.
    at = [r for r in runs if abs(r["lr"] - lr) < 1e-12 and r["step"]]
    if at:
        smooth = 10
        fig, axes = plt.subplots(len(at), 2, figsize=(10, 1.7 * len(at) + 0.8), sharex=True, squeeze=False)
        # Up to 1.5 nats above the median initial loss: the runs' course after warmup is what shows;
        # a run starting far above (SIO without PLNorm) is cut off at the top.
        firsts = [r["loss"][0] for r in at if math.isfinite(r["loss"][0])]
        loss_max = (statistics.median(firsts) if firsts else 11.0) + 1.5
        for row, r in zip(axes, at):
            color = "tab:red" if r["diverged"] else "tab:blue"
            for a, ys in ((row[0], r["loss"]), (row[1], r["grad_norm"])):
                a.plot(r["step"], ys, lw=0.6, alpha=0.35, color=color)
                avg = [math.nan if i + 1 < smooth else sum(ys[i + 1 - smooth:i + 1]) / smooth for i in range(len(ys))]
                a.plot(r["step"], avg, lw=1.2, color=color)
                if r.get("warmup_steps"):
                    a.axvline(r["warmup_steps"], color="gray", ls="--", lw=0.8)
                bad = [s for s, x in zip(r["step"], r["loss"]) if not math.isfinite(x)]
                if bad:
                    a.axvline(bad[0], color="tab:red", ls=":", lw=1.2)
                a.grid(alpha=0.3)
            row[0].set_ylim(min(6.0, loss_max - 1), loss_max)
            row[1].set_yscale("log")
            row[0].set_ylabel(r["model"].replace("transformer", "tf"), fontsize=8)
            row[0].text(0.99, 0.93, outcome(r), transform=row[0].transAxes, ha="right", va="top", fontsize=8, color=color)
        axes[0][0].set_title("training loss (nats)")
        axes[0][1].set_title("global gradient norm, before clipping")
        axes[-1][0].set_xlabel("step")
        axes[-1][1].set_xlabel("step")
        fig.suptitle(f"Peak lr {lr_label(lr)}: raw and {smooth}-step moving average; dashed: end of warmup", fontsize=10)
        fig.tight_layout()
        path = os.path.join(out_dir, "stability_trajectories.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--manifest", required=True, help="<root>/sweep.json")
    p.add_argument("--status", required=True, help="the output of `multiscreen sweep status --sweep=F --json`")
    p.add_argument("--figures", help="directory for the PNG figures (none when absent)")
    p.add_argument("--out", help="the Markdown tables (default: stdout)")
    p.add_argument("--lr", type=float, default=2.0 ** -4, help="the lr of the switch table and trajectories")
    a = p.parse_args()
    runs = collect(a.manifest, a.status)
    text = markdown(runs, a.lr)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    if a.figures:
        for path in figures(runs, a.lr, a.figures):
            print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
