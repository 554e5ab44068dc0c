#!/usr/bin/env python3
"""plot_metrics.py METRICS.jsonl OUT.png - one PNG of a run's metrics file
(logging.metrics_file) in three panels: the loss (training, and validation
where the file has evaluation records), the throughput in tokens/s, and each
step's time stacked by part (time_ms: forward, backward, grads, optimizer,
data, bubble, other - they add up to the step); for a mixture-of-experts
run a fourth: each MoE layer's expert load imbalance (the most loaded
expert's assignments over the mean expert's, "moe": load_max / load_mean).

A run resumed from a checkpoint after a crash appends the steps since that
checkpoint again: the plot keeps the last record of each step (the resumed
run's, which its later steps continue) and draws training records and
evaluations in step order, so that no line runs backwards.

Exit codes: 0 written; 2 bad input (a missing, empty or malformed metrics
file, named with the line); 1 matplotlib missing or the PNG not writable.
Needs matplotlib (Debian: python3-matplotlib, for /usr/bin/python3).
"""
import json
import math
import sys

# the parts of time_ms that add up to step_ms, bottom to top
PARTS = ("forward", "backward", "grads", "optimizer", "data", "bubble", "other")


def fail(code, msg):
    print("plot_metrics.py: error: " + msg, file=sys.stderr)
    sys.exit(code)


def number(v):
    """A metric's value: JSON numbers as float, null (a non-finite value) as NaN."""
    if v is None:
        return math.nan
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError("not a number: %r" % (v,))
    return float(v)


def read_metrics(path):
    """(train records, eval records), each a list of dicts in step order with
    one record per step (the file's last); exits 2 naming path:line on
    anything that is not a metrics file."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        fail(2, "%s: cannot read the metrics file: %s" % (path, e))
    train, evals = [], []
    for no, text in enumerate(lines, 1):
        if not text.strip():
            continue
        where = "%s:%d" % (path, no)
        try:
            r = json.loads(text)
        except ValueError as e:
            fail(2, "%s: not a JSON object: %s" % (where, e))
        if not isinstance(r, dict) or not isinstance(r.get("step"), int):
            fail(2, "%s: not a metrics record (an object with an integer \"step\")" % where)
        try:
            if r.get("eval"):
                evals.append({"step": r["step"], "val_loss": number(r["val_loss"])})
                continue
            rec = {"step": r["step"], "loss": number(r["loss"]),
                   "tokens_per_sec": number(r["tokens_per_sec"])}
            t = r.get("time_ms")
            if t is not None:
                if not isinstance(t, dict):
                    raise ValueError("time_ms is not an object")
                rec["time_ms"] = {k: number(t.get(k, 0)) for k in PARTS}
            moe = r.get("moe")
            if moe is not None:
                if not isinstance(moe, dict) or not all(
                        isinstance(moe.get(k), list) for k in ("layer", "load_max", "load_mean")):
                    raise ValueError("moe is not an object of per-layer lists")
                rec["moe"] = {int(l): number(mx) / number(mean) if number(mean) > 0 else math.nan
                              for l, mx, mean in zip(moe["layer"], moe["load_max"],
                                                     moe["load_mean"])}
            train.append(rec)
        except KeyError as e:
            fail(2, "%s: the record lacks %s" % (where, e))
        except ValueError as e:
            fail(2, "%s: %s" % (where, e))
    if not train:
        fail(2, "%s: no training records (an empty file, or not a lattice metrics file)" % path)
    return last_per_step(train), last_per_step(evals)


def last_per_step(records):
    """The last record of each step, in step order."""
    by_step = {}
    for r in records:
        by_step[r["step"]] = r
    return [by_step[s] for s in sorted(by_step)]


def plot(train, evals, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail(1, "matplotlib is not installed for %s (Debian: apt-get install python3-matplotlib, "
                "then run this with /usr/bin/python3)" % sys.executable)
    steps = [r["step"] for r in train]
    moe = [r for r in train if "moe" in r]
    fig, axes = plt.subplots(4 if moe else 3, 1, figsize=(9, 13 if moe else 10), sharex=True)
    ax_loss, ax_tput, ax_time = axes[:3]
    ax_loss.plot(steps, [r["loss"] for r in train], label="train", lw=1.2)
    if evals:
        ax_loss.plot([e["step"] for e in evals], [e["val_loss"] for e in evals], "o-",
                     label="validation", lw=1.2)
    ax_loss.set_ylabel("loss (mean token)")
    ax_loss.legend()
    ax_tput.plot(steps, [r["tokens_per_sec"] for r in train], lw=1.2, color="tab:green")
    ax_tput.set_ylabel("tokens/s")
    timed = [r for r in train if "time_ms" in r]
    if timed:
        ax_time.stackplot([r["step"] for r in timed],
                          [[r["time_ms"][k] for r in timed] for k in PARTS], labels=PARTS)
        ax_time.legend(loc="upper left", fontsize="small", ncol=4)
    else:
        ax_time.text(0.5, 0.5, "no time_ms in this file", ha="center", transform=ax_time.transAxes)
    ax_time.set_ylabel("step time (ms)")
    if moe:
        layers = sorted({l for r in moe for l in r["moe"]})
        for l in layers:
            ax_moe = axes[3]
            ax_moe.plot([r["step"] for r in moe], [r["moe"].get(l, math.nan) for r in moe],
                        lw=1.0, label="layer %d" % l)
        axes[3].axhline(1.0, color="grey", lw=0.8, ls="--")
        axes[3].set_ylabel("expert load max / mean")
        axes[3].legend(loc="upper right", fontsize="small", ncol=4)
    axes[-1].set_xlabel("step")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    try:
        fig.savefig(out, format="png", dpi=100)
    except OSError as e:
        fail(1, "%s: cannot write the PNG: %s" % (out, e))


def main(argv):
    if len(argv) != 3:
        fail(2, "usage: plot_metrics.py METRICS.jsonl OUT.png")
    train, evals = read_metrics(argv[1])
    plot(train, evals, argv[2])
    print("plot_metrics.py: %s: %d steps, %d evaluations" % (argv[2], len(train), len(evals)))


if __name__ == "__main__":
    main(sys.argv)
