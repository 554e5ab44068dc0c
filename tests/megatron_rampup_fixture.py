#!/usr/bin/env python3
"""megatron_rampup_fixture.py CALCULATOR_PY TRAINING_PY SCHEDULER_PY OUT [SOURCE] - the global
batch, micro batches and learning rate of every step of batch-size ramp-up runs as
Megatron-LM's own code gives them, for tests/test_config.c (test_rampup_megatron).

CALCULATOR_PY is megatron/core/num_microbatches_calculator.py and TRAINING_PY
megatron/training/training.py of a Megatron-LM checkout that still has
--rampup-batch-size (RampupBatchsizeNumMicroBatchesCalculator: up to commit
0b9bc2088b, the parent of 532ad926b4, which replaced it with step schedules);
SCHEDULER_PY is megatron/core/optimizer_param_scheduler.py (any recent one).
The calculator is loaded as it is (it imports only the standard library);
update_train_iters is taken from training.py's source with Python's ast and
run as it is, on the calculator's functions; the scheduler goes through
tests/megatron_lr_fixture.py's loader (torch stood in for).

Each case drives them as Megatron's sample-based training loop does
(train_samples = lattice's train.steps x global batch; train_iters from
update_train_iters; each iteration update_num_microbatches(consumed, True),
the update at the scheduler's lr, then scheduler.step(increment = micro
batches x micro batch x data-parallel size) and consumed += the same; warm-up
and decay samples = lattice's step counts x global batch, as Megatron converts
iterations). OUT lists, per case,

    case START INCREMENT SAMPLES GLOBAL MBS DP STEPS STYLE WSD_STYLE LR MIN_LR WARMUP DECAY WSD ITERS
    K CONSUMED BATCH MICRO_BATCHES LR_BEFORE LR_AFTER   (ITERS lines)

LR_BEFORE is the lr of the update (the scheduler at CONSUMED samples),
LR_AFTER the scheduler's after the step's increment. SOURCE goes into OUT's
first line."""
import ast
import importlib.util
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from megatron_lr_fixture import MEGATRON_STYLE, load_scheduler  # noqa: E402

# (START, INCREMENT, SAMPLES, GLOBAL, MBS, DP, STEPS, STYLE, WSD_STYLE, LR, MIN_LR, WARMUP,
# DECAY, WSD): ramps whose increments fall on fractional sample counts, a ramp
# longer than the run (the count overshoots train_samples), one that ends on a
# step boundary, one increment, warm-up inside and past the ramp, every decay style
CASES = [
    (4, 4, 64, 16, 2, 2, 20, "cosine", "-", 1e-3, 1e-4, 2, 20, 0),
    (8, 8, 100, 32, 1, 8, 10, "linear", "-", 6e-4, 6e-5, 0, 10, 0),
    (2, 2, 7, 8, 1, 2, 5, "cosine", "-", 3e-4, 0.0, 1, 5, 0),
    (32, 32, 1000, 256, 4, 8, 12, "wsd", "minus_sqrt", 2e-4, 2e-5, 2, 12, 4),
    (4, 4, 1000, 64, 1, 4, 3, "constant", "-", 1e-3, 1e-4, 1, 3, 0),
    (4, 2, 12, 8, 2, 1, 10, "inverse_square_root", "-", 1e-3, 1e-5, 2, 10, 0),
    (6, 6, 50, 12, 3, 2, 8, "wsd", "exponential", 5e-4, 5e-5, 0, 8, 8),
    (3, 3, 40, 24, 1, 3, 15, "wsd", "cosine", 1e-3, 0.0, 3, 12, 5),
    (16, 16, 20, 48, 2, 8, 6, "linear", "-", 1e-3, 1e-4, 4, 6, 0),
    # consumed reaches SAMPLES exactly, where SAMPLES / (SAMPLES / 7) rounds below 7
    (3, 3, 36, 24, 1, 3, 6, "cosine", "-", 1e-3, 1e-4, 1, 6, 0),
]


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_update_train_iters(training_py, calc):
    tree = ast.parse(open(training_py).read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and
              n.name == "update_train_iters")
    env = {"update_num_microbatches": calc.update_num_microbatches,
           "get_current_global_batch_size": calc.get_current_global_batch_size,
           "print_rank_0": lambda *a, **k: None}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), training_py, "exec"), env)
    return env["update_train_iters"]


def run_case(calc, update_train_iters, sched_cls, case):
    start, inc, samples, G, mbs, dp, steps, style, wsd, lr, min_lr, warm, decay, span = case
    calc.destroy_num_microbatches_calculator()
    calc.init_num_microbatches_calculator(0, [start, inc, samples], G, mbs, dp, False)
    args = types.SimpleNamespace(train_iters=None, train_samples=steps * G,
                                 rampup_batch_size=[str(start), str(inc), str(samples)],
                                 global_batch_size=G)
    update_train_iters(args)
    opt = types.SimpleNamespace(param_groups=[{}])
    s = sched_cls(opt, init_lr=0.0, max_lr=lr, min_lr=min_lr, lr_warmup_steps=warm * G,
                  lr_decay_steps=decay * G, lr_decay_style=MEGATRON_STYLE[style], start_wd=0.1,
                  end_wd=0.1, wd_incr_steps=steps * G, wd_incr_style="constant",
                  wsd_decay_steps=span * G if style == "wsd" else None,
                  lr_wsd_decay_style=wsd if style == "wsd" else None)
    rows, consumed = [], 0
    for k in range(args.train_iters):
        calc.update_num_microbatches(consumed, consistency_check=False, verbose=True)
        calc.update_num_microbatches(consumed, consistency_check=True, verbose=True)
        nmb, batch = calc.get_num_microbatches(), calc.get_current_global_batch_size()
        before = opt.param_groups[0]["lr"]
        s.step(increment=nmb * mbs * dp)
        rows.append((k, consumed, batch, nmb, before, opt.param_groups[0]["lr"]))
        consumed += nmb * mbs * dp
    return args.train_iters, rows


def main():
    if len(sys.argv) not in (5, 6):
        sys.exit("usage: megatron_rampup_fixture.py CALCULATOR_PY TRAINING_PY SCHEDULER_PY OUT "
                 "[SOURCE]")
    calc = load_module(sys.argv[1], "num_microbatches_calculator")
    update_train_iters = load_update_train_iters(sys.argv[2], calc)
    sched_cls = load_scheduler(sys.argv[3])
    source = sys.argv[5] if len(sys.argv) == 6 else sys.argv[1]
    with open(sys.argv[4], "w") as f:
        f.write(f"# Megatron-LM batch-size ramp-up ({source}), written by "
                "tests/megatron_rampup_fixture.py\n")
        for case in CASES:
            iters, rows = run_case(calc, update_train_iters, sched_cls, case)
            f.write("case " + " ".join(repr(x) if isinstance(x, float) else str(x)
                                       for x in case) + f" {iters}\n")
            f.writelines(f"{k} {c} {b} {m} {x!r} {y!r}\n" for k, c, b, m, x, y in rows)
    print(f"{len(CASES)} cases -> {sys.argv[4]}")


if __name__ == "__main__":
    main()
