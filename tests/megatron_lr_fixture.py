#!/usr/bin/env python3
"""megatron_lr_fixture.py SCHEDULER_PY OUT [SOURCE] - the learning rates Megatron-LM's own
OptimizerParamScheduler gives, for tests/test_model.c (test_lr_megatron).

SCHEDULER_PY is megatron/core/optimizer_param_scheduler.py of a Megatron-LM
checkout (e.g. `git show HEAD:megatron/core/optimizer_param_scheduler.py`).
Its module is loaded as it is; only its imports of torch and
megatron.core.utils are stood in for (the scheduler reads torch.Tensor in an
isinstance test and logs through log_single_rank), so no GPU stack is needed.

Each case builds the scheduler as Megatron's training loop does (init_lr =
lr_warmup_init = 0, iteration counting: increment 1 per step) and records the
lr it writes into the optimizer's param group at num_steps = 0, 1, ..., N,
driving it with its own step(1). OUT lists, per case,

    case STYLE WSD_STYLE LR MIN_LR WARMUP DECAY WSD_DECAY N
    NUM_STEPS LR        (N + 1 lines, num_steps 0..N)

with lattice's spellings of the styles ("-" for WSD_STYLE outside wsd) and
every number in repr form (reads back exactly). SOURCE (e.g. the Megatron-LM
commit) goes into OUT's first line."""
import importlib.util
import sys
import types

# lattice's optimizer.lr_decay_style -> Megatron's lr_decay_style
MEGATRON_STYLE = {"cosine": "cosine", "linear": "linear", "constant": "constant",
                  "inverse_square_root": "inverse-square-root", "wsd": "WSD"}

# (lr, min_lr, warmup, decay[, wsd_decay]): warm-up or none, min_lr 0 or not,
# the WSD decay over one step, part of the span, or all of decay - warmup
SETTINGS = [(1.0, 0.1, 4, 14), (6e-4, 6e-5, 0, 20), (3e-4, 0.0, 10, 50)]
WSD_SETTINGS = [(1.0, 0.1, 4, 30, 10), (6e-4, 6e-5, 0, 20, 20), (3e-4, 0.0, 10, 50, 1),
                (2e-4, 2e-5, 5, 40, 35)]
WSD_STYLES = ["linear", "cosine", "exponential", "minus_sqrt"]
EXTRA = 6  # num_steps past decay: where min_lr (or constant lr) holds


def load_scheduler(path):
    torch = types.ModuleType("torch")
    torch.Tensor = type("Tensor", (), {})
    utils = types.ModuleType("megatron.core.utils")
    utils.log_single_rank = lambda *args, **kwargs: None
    for name, mod in (("torch", torch), ("megatron", types.ModuleType("megatron")),
                      ("megatron.core", types.ModuleType("megatron.core")),
                      ("megatron.core.utils", utils)):
        sys.modules.setdefault(name, mod)
    spec = importlib.util.spec_from_file_location("optimizer_param_scheduler", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.OptimizerParamScheduler


def run_case(sched_cls, style, wsd_style, lr, min_lr, warmup, decay, wsd_decay):
    opt = types.SimpleNamespace(param_groups=[{}])
    s = sched_cls(opt, init_lr=0.0, max_lr=lr, min_lr=min_lr, lr_warmup_steps=warmup,
                  lr_decay_steps=decay, lr_decay_style=MEGATRON_STYLE[style], start_wd=0.1,
                  end_wd=0.1, wd_incr_steps=decay, wd_incr_style="constant",
                  wsd_decay_steps=wsd_decay if style == "wsd" else None,
                  lr_wsd_decay_style=wsd_style if style == "wsd" else None)
    lrs = []
    for n in range(decay + EXTRA + 1):
        assert s.num_steps == n
        lrs.append(opt.param_groups[0]["lr"])
        s.step(1)
    return lrs


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: megatron_lr_fixture.py SCHEDULER_PY OUT [SOURCE]")
    source = sys.argv[3] if len(sys.argv) == 4 else sys.argv[1]
    sched_cls = load_scheduler(sys.argv[1])
    cases = [(st, "-", *p, 0) for st in ("cosine", "linear", "constant", "inverse_square_root")
             for p in SETTINGS]
    cases += [("wsd", ws, *p) for ws in WSD_STYLES for p in WSD_SETTINGS]
    with open(sys.argv[2], "w") as f:
        f.write(f"# Megatron-LM OptimizerParamScheduler.get_lr ({source}), "
                "written by tests/megatron_lr_fixture.py\n")
        for style, ws, lr, min_lr, warmup, decay, wsd_decay in cases:
            lrs = run_case(sched_cls, style, ws, lr, min_lr, warmup, decay, wsd_decay)
            f.write(f"case {style} {ws} {lr!r} {min_lr!r} {warmup} {decay} {wsd_decay} "
                    f"{len(lrs) - 1}\n")
            f.writelines(f"{n} {x!r}\n" for n, x in enumerate(lrs))
    print(f"{len(cases)} cases -> {sys.argv[2]}")


if __name__ == "__main__":
    main()
