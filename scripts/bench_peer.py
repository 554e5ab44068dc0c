#!/usr/bin/env python3
"""bench_peer.py - a plain PyTorch peer trained next to lattice, for speed and
loss comparisons on the same shapes, data and initial weights: lattice's
GPT-2, or its Llama (model.arch=llama), dense or with Mixtral's experts
(model.num_experts). The models (scripts/peer_model.py, its docstring) are
written with nn.Linear, LayerNorm / F.rms_norm and
F.scaled_dot_product_attention(is_causal=True) (no library model class) and
compute the same function as lattice (docs/model.md).
GPT-2: pre-LayerNorm blocks with eps 1e-5, learned position embeddings, causal
attention scaled by 1/sqrt(head_dim) with q|k|v per token in that order,
tanh-approximation GeLU, the token embedding tied to the LM head. Llama:
RMSNorm, rotary embeddings (Llama 3.1's scaling), grouped-query attention,
SwiGLU, untied head; with experts, an fp32 top-k router (ties to the lower
expert index), dropless SwiGLU experts as one grouped GEMM per projection
(--moe-gemm) and the aux and z losses. Settings the models lack are refused
by name (peer_refusal). Every model: the
vocabulary padded to a multiple of make_vocab_size_divisible_by x TP: the
padded rows of wte start at zero and the padded logit columns are left out of
the softmax, so (as in lattice) they get neither probability nor gradient and
stay zero. Loss: mean cross-entropy over all G x S tokens of a step, summed
over G / micro_batch micro batches (gradient accumulation), plus each micro
batch's MoE aux and z losses times micro_batch / G (not in the logged loss).
AdamW with bias correction and decoupled weight decay on parameters of two or
more dimensions only (embeddings, weight matrices, the experts' stacked
matrices; not biases or norms), global-norm clipping by
min(1, clip / (norm + 1e-6)), LR: linear warm-up lr*(k+1)/warmup for update
k < warmup, then optimizer.lr_decay_style (cosine to min_lr at decay_steps,
then min_lr; or linear, constant, inverse_square_root, wsd: lattice's lt_lr_at).

Speed: bf16 autocast (train.precision: bf16; fp32 runs in plain fp32 with TF32
off, as lattice's fp32 GEMMs), fused AdamW, torch.compile (--no-compile and
--no-fused turn them off; a compilation that fails on the first step falls
back to eager, said so). Throughput figures use lattice's own FLOP count
(src/model/model_flops.c lt_model_flops_per_sample(d, causal=0), as src/training/trainer.c
reports; flops_per_sample below), for GPT-2
    flops per sample = 3 * S * (L * (8 h^2 + 4 h F + 4 S h) + 2 h Vp)
(forward: QKV 6h^2, projection 2h^2, MLP 4hF, attention scores and weighted sum
4Sh per token and layer - counted for the full square, not the causal half -
and the LM head 2hVp; backward = 2 x forward; no recompute; Llama: grouped
K/V, SwiGLU's 6hF, an MoE layer's k experts and router), times G samples
per step; TFLOP/s = that / median step time; MFU = TFLOP/s / peak, with the
peak from --peak-tflops, else logging.peak_tflops, else lattice's table of
dense datasheet peaks (src/observability/metrics.c, e.g. H100 SXM bf16 989.4), else (CPU) a
timed 512^3 fp32 GEMM. Median step time over the steps after warm-up (by
default the same rule as lattice: skip 2 steps of more than 10, 1 of 4..10).
Memory: torch.cuda.max_memory_allocated (all tensors the peer allocated, at
their peak) on CUDA, the process's peak resident set on the CPU.

Data: --batches FILE reads what `lattice batches CONFIG OUT [overrides]`
writes: the resolved config and the token rows of the first train.steps
global batches, produced by lattice's own loader (shuffle, seed, any token
file format), so both trainers see identical batches in identical order.
Without --batches, steps use uniform random tokens (speed only).
Weights: --init DIR (or DIR/model.safetensors) loads `lattice export` output
(GPT2LMHeadModel, LlamaForCausalLM or MixtralForCausalLM names),
e.g. of a checkpoint saved by `lattice train ... train.steps=0
checkpoint.dir=D` (the initial weights); without it, a random init with
lattice's distributions (normal with std model.init_method_std, default 0.02;
the residual output projections std/sqrt(2L); biases 0; norms 1 (LayerNorm
bias 0); padded rows 0), made on the device.

Comparison: --compare LATTICE_METRICS.jsonl checks the first --compare-steps
(default 5) training losses (and grad norms) against lattice's metrics file
(logging.metrics_file; records {"step", "loss", "grad_norm", ...}); relative
tolerance --rtol (default 2e-2 in bf16: two bf16 trainers round activations
differently - lattice stores every activation in bf16, autocast keeps
LayerNorm, softmax and the residual stream in fp32 - and lattice's own
CPU-vs-CUDA bf16 check allows the same; 1e-4 in fp32) and --gnorm-rtol for
the grad norm (default 1e-1 bf16, 1e-3 fp32: a grad norm amplifies rounding
more than the loss). Exit status 1 when they disagree.
--peer-losses PEER.jsonl with --compare compares two files without training
(and without importing torch).

Usage:
  bench_peer.py [--batches FILE] [--config CFG.yaml] [--init DIR] [--device cuda|cpu]
                [--steps N] [--precision fp32|bf16] [--micro-batch M] [--no-compile | --compile-blocks]
                [--no-fused] [--moe-gemm auto|grouped|loop] [--warmup N] [--peak-tflops X] [--threads N]
                [--losses-out FILE.jsonl] [--summary FILE.jsonl]
                [--compare LATTICE.jsonl [--compare-steps N] [--rtol X] [--gnorm-rtol X]]
                [section.key=value ...]
  bench_peer.py --compare LATTICE.jsonl --peer-losses PEER.jsonl [--compare-steps N] [--rtol X]
  bench_peer.py --print-config [--config CFG.yaml | --batches FILE] [section.key=value ...]
Exit status: 0 ok, 1 comparison failed or training failed, 2 bad input,
3 out of memory (bench.sh then tries a smaller micro batch).
"""
import argparse
import json
import math
import os
import struct
import sys
import time

EXIT_FAIL, EXIT_INPUT, EXIT_OOM = 1, 2, 3


class InputError(Exception):
    pass


# ---- config: the subset of lattice's keys the peer uses -----------------------
# Defaults as in docs/configuration.md (lt_config_defaults); the test suite checks
# that resolving configs/*.yaml here gives what lattice resolves.
DEFAULTS = {
    "model": {"arch": "gpt", "num_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
              "ffn_hidden_size": 0, "seq_length": 1024, "max_position_embeddings": 1024,
              "vocab_size": 50257, "make_vocab_size_divisible_by": 128, "init_method_std": 0.02,
              "num_query_groups": 0, "kv_channels": 0, "qk_layernorm": False,
              "norm_epsilon": 1e-5, "rotary_base": 500000.0, "rope_scaling": "none",
              "rope_scaling_factor": 8.0, "rope_low_freq_factor": 1.0,
              "rope_high_freq_factor": 4.0, "rope_original_max_position": 8192,
              "untie_embeddings_and_output_weights": False, "window_size": "",
              "num_experts": 0, "moe_router_topk": 2, "moe_ffn_hidden_size": 0,
              "moe_layer_freq": "1", "moe_shared_expert_intermediate_size": 0,
              "moe_router_score_function": "softmax", "moe_router_pre_softmax": False,
              "moe_router_num_groups": 0, "moe_router_group_topk": 0,
              "moe_router_topk_scaling_factor": 0.0, "moe_router_load_balancing_type": "aux_loss",
              "moe_aux_loss_coeff": 0.0, "moe_z_loss_coeff": 0.0,
              "moe_router_enable_expert_bias": False, "moe_expert_capacity_factor": 0.0,
              "moe_pad_expert_input_to_capacity": False, "quick_geglu": False,
              "glu_linear_offset": 0.0, "activation_func_clamp_value": 0.0,
              "softmax_type": "vanilla", "add_bias_linear": "auto", "add_qkv_bias": False},
    "parallel": {"tensor_model_parallel_size": 1},
    "train": {"micro_batch_size": 1, "global_batch_size": 8, "steps": 100, "precision": "fp32",
              "seed": 1234, "threads": 0, "rampup_batch_size": ""},
    "optimizer": {"lr": 6e-4, "min_lr": 6e-5, "warmup_steps": 0, "decay_steps": 0,
                  "lr_decay_style": "cosine", "lr_wsd_decay_steps": 0,
                  "lr_wsd_decay_style": "exponential", "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                  "weight_decay": 0.1, "clip_grad": 1.0},
    "data": {"eod_mask_loss": False, "reset_position_ids": False, "reset_attention_mask": False},
    "logging": {"peak_tflops": 0.0},
}
INT_KEYS = {"num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "seq_length",
            "max_position_embeddings", "vocab_size", "make_vocab_size_divisible_by",
            "tensor_model_parallel_size", "micro_batch_size", "global_batch_size", "steps",
            "seed", "threads", "warmup_steps", "decay_steps", "lr_wsd_decay_steps",
            "num_query_groups", "kv_channels", "rope_original_max_position", "num_experts",
            "moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
            "moe_router_num_groups", "moe_router_group_topk"}
BOOL_KEYS = {"qk_layernorm", "untie_embeddings_and_output_weights", "moe_router_pre_softmax",
             "moe_router_enable_expert_bias", "moe_pad_expert_input_to_capacity",
             "eod_mask_loss", "reset_position_ids", "reset_attention_mask", "quick_geglu",
             "add_qkv_bias"}
STR_KEYS = {"window_size", "moe_layer_freq", "rampup_batch_size"}
# enum keys: their spellings (lattice's, any case)
ENUM_KEYS = {"precision": ("fp32", "bf16"),
             "lr_decay_style": ("cosine", "linear", "constant", "inverse_square_root", "wsd"),
             "lr_wsd_decay_style": ("exponential", "linear", "cosine", "minus_sqrt"),
             "arch": ("gpt", "llama"), "rope_scaling": ("none", "llama3", "yarn"),
             "softmax_type": ("vanilla", "off-by-one", "learnable"),
             "add_bias_linear": ("auto", "true", "false"),
             "moe_router_score_function": ("softmax", "sigmoid"),
             "moe_router_load_balancing_type": ("aux_loss", "seq_aux_loss", "none")}


def _scalar(section, key, v):
    if key in INT_KEYS:
        if isinstance(v, bool) or v is None:
            raise InputError(f"{section}.{key}: expected an integer, got {v!r}")
        try:
            return int(str(v), 10)
        except ValueError:
            raise InputError(f"{section}.{key}: expected an integer, got {v!r}")
    if key in BOOL_KEYS:  # lattice's spellings (parse_bool), any case
        p = str(v).lower()
        if p not in ("true", "yes", "on", "false", "no", "off"):
            raise InputError(f"{section}.{key}: expected a boolean (true/false), got {v!r}")
        return p in ("true", "yes", "on")
    if key in STR_KEYS:
        if v is None:
            return ""
        if isinstance(v, list):  # a YAML flow list, as lattice keeps its text
            return "[" + ", ".join(str(x) for x in v) + "]"
        return str(v).strip()
    if key in ENUM_KEYS:
        p = str(v).lower()
        if p not in ENUM_KEYS[key]:
            raise InputError(f"{section}.{key}: expected {' or '.join(ENUM_KEYS[key])}, "
                             f"got {v!r}")
        return p
    try:  # lattice prints doubles as e.g. 1e-08, which YAML 1.1 reads as a string
        return float(v)
    except (TypeError, ValueError):
        raise InputError(f"{section}.{key}: expected a number, got {v!r}")


def _parse_plain(text, where):
    """The YAML subset lattice configs use (a mapping of sections, each a
    mapping of scalars; comments): for machines without pyyaml."""
    doc, sec = {}, None
    for n, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s or s.startswith("#"):
            continue
        key, sep, val = s.partition(":")
        if not sep:
            raise InputError(f"{where}:{n}: expected 'key: value'")
        key, val = key.strip(), val.strip()
        if val[:1] in ("'", '"'):
            end = val.find(val[0], 1)
            val = val[1:end] if end > 0 else val[1:]
        else:
            val = val.split(" #", 1)[0].strip()
            if val.startswith("#"):
                val = ""
        if raw[:1] not in (" ", "\t"):
            if val:
                raise InputError(f"{where}:{n}: expected a section ('{key}:' alone)")
            sec = doc.setdefault(key, {})
        elif sec is None:
            raise InputError(f"{where}:{n}: a key outside any section")
        else:
            sec[key] = None if val in ("", "~", "null") else val
    return doc


def _parse_yaml(text, where):
    try:
        if os.environ.get("BENCH_PEER_NO_YAML"):
            raise ImportError
        import yaml
    except ImportError:
        return _parse_plain(text, where)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InputError(f"{where}: {e}")
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise InputError(f"{where}: not a mapping of sections")
    return doc


def resolve_config(doc, overrides):
    """The peer's view of a lattice config: defaults, the YAML document, then
    section.key=value overrides; derived values as lt_config_validate fills
    them (ffn 0 -> 4h, decay_steps 0 -> steps, query groups 0 -> heads, head
    dimension 0 -> hidden / heads, expert width 0 -> ffn, padded vocab); then
    the settings this peer does not implement are refused (peer_refusal);
    add_bias_linear auto becomes the arch's."""
    c = {s: dict(kv) for s, kv in DEFAULTS.items()}
    for s, kv in (doc or {}).items():
        if s in c and isinstance(kv, dict):
            for k, v in kv.items():
                if k in c[s]:
                    c[s][k] = _scalar(s, k, v)
    for o in overrides:
        key, _, val = o.partition("=")
        s, _, k = key.partition(".")
        if s in c and k in c[s]:
            c[s][k] = _scalar(s, k, val)
    m, t, o = c["model"], c["train"], c["optimizer"]
    if m["ffn_hidden_size"] == 0:
        if m["arch"] == "llama":
            raise InputError("model.arch=llama needs model.ffn_hidden_size (the SwiGLU inner width)")
        m["ffn_hidden_size"] = 4 * m["hidden_size"]
    if m["num_query_groups"] == 0:
        m["num_query_groups"] = m["num_attention_heads"]
    if m["kv_channels"] == 0:
        if m["hidden_size"] % m["num_attention_heads"]:
            raise InputError("model.hidden_size must be divisible by model.num_attention_heads "
                             "unless model.kv_channels sets the head dimension")
        m["kv_channels"] = m["hidden_size"] // m["num_attention_heads"]
    if m["moe_ffn_hidden_size"] == 0:
        m["moe_ffn_hidden_size"] = m["ffn_hidden_size"]
    if m["add_bias_linear"] == "auto":  # the arch's: GPT-2's biases, Llama's none
        m["add_bias_linear"] = "true" if m["arch"] == "gpt" else "false"
    if o["decay_steps"] == 0:
        o["decay_steps"] = t["steps"]
    mult = m["make_vocab_size_divisible_by"] * c["parallel"]["tensor_model_parallel_size"]
    m["padded_vocab_size"] = (m["vocab_size"] + mult - 1) // mult * mult
    if m["num_attention_heads"] % m["num_query_groups"]:
        raise InputError("model.num_query_groups must divide model.num_attention_heads")
    if m["seq_length"] > m["max_position_embeddings"]:
        raise InputError("model.seq_length must be <= model.max_position_embeddings")
    if o["warmup_steps"] > o["decay_steps"] and o["decay_steps"] != 0:
        raise InputError(f"optimizer.warmup_steps ({o['warmup_steps']}) must be <= "
                         f"optimizer.decay_steps ({o['decay_steps']})")
    wsd_room = o["decay_steps"] - o["warmup_steps"]
    if o["lr_decay_style"] == "wsd" and not (
            0 < o["lr_wsd_decay_steps"] and (o["decay_steps"] == 0
                                             or o["lr_wsd_decay_steps"] <= wsd_room)):
        raise InputError(f"optimizer.lr_decay_style=wsd needs optimizer.lr_wsd_decay_steps "
                         f"in (0, {wsd_room}] (decay_steps - warmup_steps), got "
                         f"{o['lr_wsd_decay_steps']}")
    if t["global_batch_size"] % t["micro_batch_size"]:
        raise InputError("train.global_batch_size must be a multiple of train.micro_batch_size")
    why = peer_refusal(c)
    if why:
        raise InputError(f"the peer does not implement {why}; it trains lattice's GPT-2 block "
                         "(tied head) and its Llama block, dense or with Mixtral's experts")
    return c


def peer_refusal(c):
    """The first setting of c that this peer's model does not compute (a key
    and what it would change), or None."""
    m, d = c["model"], c["data"]
    for key in ("eod_mask_loss", "reset_position_ids", "reset_attention_mask"):
        if d[key]:
            return f"data.{key}=true (documents in a sequence; the peer's loss and attention " \
                   "cover every token of the sequence)"
    if c["train"]["rampup_batch_size"] not in ("", "none", "null", "~"):
        return f"train.rampup_batch_size={c['train']['rampup_batch_size']} (a batch size " \
               "that grows; the peer's is fixed)"
    if m["softmax_type"] != "vanilla":
        return f"model.softmax_type={m['softmax_type']} (attention sinks)"
    if m["arch"] == "gpt":
        if m["add_bias_linear"] == "false":
            return "model.add_bias_linear=false with model.arch=gpt (GPT-2's block has biases)"
        if m["untie_embeddings_and_output_weights"]:
            return "model.untie_embeddings_and_output_weights=true with model.arch=gpt"
        if m["kv_channels"] * m["num_attention_heads"] != m["hidden_size"]:
            return f"model.kv_channels={m['kv_channels']} with model.arch=gpt (a head " \
                   "dimension other than hidden / heads)"
        if m["num_experts"] > 0:
            return f"model.num_experts={m['num_experts']} with model.arch=gpt (GeLU experts)"
        return None
    if m["qk_layernorm"]:
        return "model.qk_layernorm=true (per-head query/key RMSNorm)"
    if m["add_bias_linear"] == "true" or m["add_qkv_bias"]:
        key = "add_bias_linear" if m["add_bias_linear"] == "true" else "add_qkv_bias"
        return f"model.{key}=true (linear biases on the Llama block)"
    if m["rope_scaling"] == "yarn":
        return "model.rope_scaling=yarn (YaRN's rotary scaling)"
    if m["window_size"] not in ("", "none", "null", "~"):
        return f"model.window_size={m['window_size']} (sliding-window attention)"
    if m["quick_geglu"]:
        return "model.quick_geglu=true (gpt-oss's gated activation; the peer's is SwiGLU)"
    for key in ("glu_linear_offset", "activation_func_clamp_value"):
        if m[key] != 0:
            return f"model.{key}={m[key]:g} (gpt-oss's gated activation; the peer's is SwiGLU)"
    if m["num_experts"] == 0:
        return None
    refused = (
        (m["moe_layer_freq"] != "1", f"model.moe_layer_freq={m['moe_layer_freq']} (dense "
                                     "layers between the MoE layers; the peer's are all MoE)"),
        (m["moe_shared_expert_intermediate_size"] > 0, "model.moe_shared_expert_intermediate_size="
                                                       f"{m['moe_shared_expert_intermediate_size']}"
                                                       " (a shared expert)"),
        (m["moe_router_score_function"] != "softmax", "model.moe_router_score_function="
                                                       f"{m['moe_router_score_function']}"),
        (m["moe_router_enable_expert_bias"], "model.moe_router_enable_expert_bias=true"),
        (m["moe_router_num_groups"] > 0, f"model.moe_router_num_groups={m['moe_router_num_groups']}"
                                          " (group-limited routing)"),
        (m["moe_expert_capacity_factor"] > 0, "model.moe_expert_capacity_factor="
                                              f"{m['moe_expert_capacity_factor']:g} (dropping)"),
        (m["moe_pad_expert_input_to_capacity"], "model.moe_pad_expert_input_to_capacity=true"),
    )
    for bad, what in refused:
        if bad:
            return what
    return None


def _wsd_coeff(o, step):
    """wsd_coeff (src/optimizer/optim.c)."""
    span = o["lr_wsd_decay_steps"]
    start = o["decay_steps"] - span
    if step <= start:
        return 1.0
    ratio = (step - start) / span
    style = o["lr_wsd_decay_style"]
    if style == "linear":
        return 1.0 - ratio
    if style == "cosine":
        return 0.5 * (math.cos(math.pi * ratio) + 1.0)
    if style == "minus_sqrt":
        return 1.0 - math.sqrt(ratio)
    return 2.0 * math.pow(0.5, ratio) - 1.0


def lr_at(c, step):
    """lt_lr_at (src/optimizer/optim.c): LR of update `step` (0-based)."""
    o = c["optimizer"]
    lr, min_lr, warm, decay = o["lr"], o["min_lr"], o["warmup_steps"], o["decay_steps"]
    style = o["lr_decay_style"]
    if warm > 0 and step < warm:
        return lr * (step + 1) / warm
    if style == "constant":
        return lr
    if style == "inverse_square_root":
        if step > decay:
            return min_lr
        return max(min_lr, lr * math.sqrt(max(warm, 1)) / math.sqrt(max(step, 1)))
    if step >= decay:
        return min_lr
    ratio = (step - warm) / (decay - warm)
    if style == "cosine":
        return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * ratio))
    coeff = 1.0 - ratio if style == "linear" else _wsd_coeff(o, step)
    return min_lr + coeff * (lr - min_lr)


def flops_per_sample(c):
    """lt_model_flops_per_sample(d, causal=0) of src/model/model_flops.c: per token and
    layer the q, k, v projections 2h(q + 2kv) and the output projection 2qh
    (q = heads x head dim, kv = groups x head dim; GPT: 8h^2), the MLP's input
    matrices 2hF (GPT) or 4hF (SwiGLU) and output 2hF - in an MoE layer F is
    the k experts a token goes to, plus the router's 2hE - and attention 4sq;
    plus the LM head 2hVp; backward = 2 x forward."""
    m = c["model"]
    s, h, L, V = m["seq_length"], m["hidden_size"], m["num_layers"], m["padded_vocab_size"]
    hd = m["kv_channels"]
    q, kv = m["num_attention_heads"] * hd, m["num_query_groups"] * hd
    F, router = m["ffn_hidden_size"], 0.0
    if m["num_experts"] > 0:
        F = m["moe_router_topk"] * m["moe_ffn_hidden_size"] + m["moe_shared_expert_intermediate_size"]
        router = 2.0 * h * m["num_experts"]
    mlp_in = 4.0 if m["arch"] == "llama" else 2.0
    layer = (2.0 * h * (q + 2.0 * kv) + 2.0 * q * h + mlp_in * h * F + router + 2.0 * h * F
             + 4.0 * s * q)
    return 3.0 * s * (L * layer + 2.0 * h * V)


# Dense datasheet peaks (TFLOP/s: bf16, fp32), as lattice's table in
# src/observability/metrics.c (the test suite checks they agree). Longer patterns first.
PEAKS = [("GB200", 2500.0, 90.0), ("B200", 2250.0, 80.0),
         ("H100 PCIe", 756.0, 51.2), ("H100 NVL", 835.0, 60.0), ("H100", 989.4, 66.9),
         ("H200", 989.4, 66.9), ("H800", 989.4, 66.9), ("GH200", 989.4, 66.9),
         ("A100", 312.0, 19.5), ("A800", 312.0, 19.5), ("L40S", 362.05, 91.6),
         ("A10G", 70.0, 31.2), ("V100", 125.0, 15.7)]


def peak_from_table(name, precision):
    for pat, bf16, fp32 in PEAKS:
        if pat in (name or ""):
            return bf16 if precision == "bf16" else fp32
    return 0.0


# ---- lattice batch dumps (`lattice batches`) ------------------------------------
class Batches:
    """A file written by `lattice batches` (layout in src/data/batches.c)."""

    def __init__(self, path):
        self.path = path
        try:
            with open(path, "rb") as f:
                head = f.read(32)
                if len(head) < 32 or head[:8] != b"LTBATCH1":
                    raise InputError(f"{path}: not a lattice batch file (no LTBATCH1 magic)")
                (self.header_bytes, self.steps, self.samples, self.row, self.vocab,
                 text_len) = struct.unpack("<6I", head[8:32])
                self.config_text = f.read(text_len).decode("utf-8")
                if len(self.config_text.encode("utf-8")) != text_len:
                    raise InputError(f"{path}: truncated header")
        except OSError as e:
            raise InputError(f"{path}: {e.strerror}")
        self.step_bytes = self.samples * self.row * 4
        want = self.header_bytes + self.steps * self.step_bytes
        have = os.path.getsize(path)
        if self.header_bytes < 32 + text_len or have != want:
            raise InputError(f"{path}: {have} bytes, the header describes {want}")

    def read_steps(self, n):
        """Raw little-endian int32 bytes of steps 0..n-1 (one bytes object)."""
        if n > self.steps:
            raise InputError(f"{self.path} holds {self.steps} steps, {n} requested")
        with open(self.path, "rb") as f:
            f.seek(self.header_bytes)
            return f.read(n * self.step_bytes)

    def rows(self, step):
        """Step `step` as a list of rows (lists of ints): for tests, no torch."""
        import array
        with open(self.path, "rb") as f:
            f.seek(self.header_bytes + step * self.step_bytes)
            a = array.array("i")
            a.frombytes(f.read(self.step_bytes))
        if sys.byteorder != "little":
            a.byteswap()
        return [a[i * self.row:(i + 1) * self.row].tolist() for i in range(self.samples)]


# ---- comparison with lattice's metrics ------------------------------------------
def read_losses(path):
    """{step: record} of the training records of a metrics JSONL file."""
    out = {}
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except ValueError:
                    raise InputError(f"{path}:{n}: not JSON")
                if r.get("eval") or "loss" not in r or "step" not in r:
                    continue
                out[int(r["step"])] = r  # a resumed run's later record wins
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}")
    return out


def compare(lattice, peer, steps, rtol, gnorm_rtol, out=sys.stdout):
    """Compare steps 1..steps of two {step: record} maps; True when they agree."""
    ok = True
    worst = worst_g = 0.0
    print(f"compare: first {steps} steps, |dloss|/loss <= {rtol:g}, "
          f"|dgrad_norm|/grad_norm <= {gnorm_rtol:g}", file=out)
    print(f"{'step':>5} {'lattice loss':>13} {'peer loss':>13} {'rel diff':>10} "
          f"{'lattice gnorm':>13} {'peer gnorm':>13} {'rel diff':>10}", file=out)
    for k in range(1, steps + 1):
        a, b = lattice.get(k), peer.get(k)
        if a is None or b is None:
            print(f"{k:>5} missing in the {'lattice' if a is None else 'peer'} metrics", file=out)
            ok = False
            continue
        la, pe = float(a["loss"]), float(b["loss"])
        d = abs(la - pe) / max(abs(la), 1e-12)
        if not (d <= rtol):  # NaN fails too
            ok = False
        worst = max(worst, d) if d == d else float("inf")
        ga, gp = a.get("grad_norm"), b.get("grad_norm")
        gcol = ""
        if ga is not None and gp is not None:
            ga, gp = float(ga), float(gp)
            dg = abs(ga - gp) / max(abs(ga), 1e-12)
            if not (dg <= gnorm_rtol):
                ok = False
            worst_g = max(worst_g, dg) if dg == dg else float("inf")
            gcol = f" {ga:>13.6g} {gp:>13.6g} {dg:>10.2e}"
        print(f"{k:>5} {la:>13.7g} {pe:>13.7g} {d:>10.2e}{gcol}", file=out)
    print(f"compare: {'PASS' if ok else 'FAIL'}: max relative loss difference {worst:.3g}, "
          f"grad norm {worst_g:.3g} over {steps} steps", file=out)
    return ok


def default_rtols(precision):
    return (2e-2, 1e-1) if precision == "bf16" else (1e-4, 1e-3)


def measure_cpu_peak():
    """Like lattice on the CPU: best of 5 timed 512^3 fp32 GEMMs, TFLOP/s."""
    import torch
    n = 512
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = 1e30
    for _ in range(5):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best / 1e12


def warmup_skip(n):
    return (2 if n > 10 else 1) if n > 3 else 0


def moe_gemm(torch, pm, args, c, device, prec):
    """(the grouped GEMM for the experts or None for one matmul per expert, a
    note saying which): --moe-gemm auto takes torch's grouped_mm in bf16 on
    CUDA when it computes correctly there (peer_model.grouped_gemm checks)."""
    if c["model"]["num_experts"] == 0:
        return None, ""
    if args.moe_gemm == "loop":
        return None, "experts: one matmul per expert (--moe-gemm loop)"
    if args.moe_gemm == "auto" and not (device.type == "cuda" and prec == "bf16"):
        return None, "experts: one matmul per expert (grouped_mm is for bf16 on CUDA)"
    gm, why = pm.grouped_gemm(device, torch.bfloat16 if prec == "bf16" else torch.float32)
    if gm is None:
        if args.moe_gemm == "grouped":
            raise InputError(f"--moe-gemm grouped: {why}")
        return None, f"experts: one matmul per expert ({why})"
    return gm, "experts: torch grouped_mm" + (f" (groups aligned to {gm.align} rows)"
                                              if gm.align > 1 else "")


def make_model(torch, pm, args, c, device, prec):
    """(the model on the device with lattice's or a random init, the
    grouped GEMM note)."""
    gemm, note = moe_gemm(torch, pm, args, c, device, prec)
    torch.manual_seed(c["train"]["seed"])
    with device:  # built where it trains: a multi-billion model inits in a moment
        model = pm.build_model(c, gemm, torch.bfloat16 if prec == "bf16" else torch.float32)
    if args.init:
        src = pm.load_export(model, c, args.init)
        print(f"peer: weights from {src}")
    else:
        pm.random_init(model, c)
        print("peer: random init (lattice's distributions, not its values)")
    return model, note


def make_optimizer(torch, model, c, fused):
    """AdamW with weight decay on the matrices (and the experts' stacked
    matrices), not on norms and biases; (optimizer, fused or not)."""
    o = c["optimizer"]
    groups = [{"params": [p for p in model.parameters() if p.dim() >= 2],
               "weight_decay": o["weight_decay"]},
              {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    kw = {"lr": lr_at(c, 0), "betas": (o["beta1"], o["beta2"]), "eps": o["eps"]}
    if fused:
        try:
            return torch.optim.AdamW(groups, fused=True, **kw), True
        except (RuntimeError, TypeError) as e:
            print(f"peer: fused AdamW unavailable here ({e}); using the default implementation")
    return torch.optim.AdamW(groups, **kw), False


def compile_model(torch, model, args):
    """(the module to call, how it is compiled)."""
    if args.no_compile:
        return model, "off"
    if args.compile_blocks:
        # each transformer block compiled in place (as torchtitan does): the
        # blocks share one compiled graph, so a 48-layer model compiles as
        # fast as a 12-layer one; embedding and head run eagerly
        for blk in model.h:
            blk.compile(dynamic=False)
        return model, "per block"
    return torch.compile(model, dynamic=False), "on"


def token_batches(torch, args, c, batches, steps):
    """Every step's (G, S + 1) token rows on the host, up front (lattice
    prefetches on a thread): lattice's batches, else uniform random tokens."""
    m, t = c["model"], c["train"]
    G, S = t["global_batch_size"], m["seq_length"]
    if batches:
        raw = bytearray(batches.read_steps(steps))
        host = torch.frombuffer(raw, dtype=torch.int32).view(steps, G, S + 1)
        if sys.byteorder != "little":
            host = host.byteswap()
        return host
    gen = torch.Generator().manual_seed(t["seed"])
    return torch.randint(0, m["vocab_size"], (steps, G, S + 1), generator=gen, dtype=torch.int32)


def peak_tflops(args, c, dev, dev_name, prec):
    """(peak TFLOP/s, where it comes from)."""
    if args.peak_tflops:
        return args.peak_tflops, "--peak-tflops"
    if c["logging"]["peak_tflops"] > 0:
        return c["logging"]["peak_tflops"], "config"
    if dev == "cuda":
        p = peak_from_table(dev_name, prec)
        if p:
            return p, "table"
    return measure_cpu_peak(), "measured"


def train_step(torch, fwd, opt, params, rows, c, mbs, autocast, step):
    """One optimizer step over the global batch `rows` (G, S + 1) on the
    device: (mean token loss, grad norm before clipping, LR). Each micro
    batch's MoE aux and z losses weigh mbs / G in the objective, lattice's
    1 / (micro batches of the step); the reported loss is the language
    model's alone."""
    G, S = rows.shape[0], rows.shape[1] - 1
    x, y = rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
    inv = 1.0 / (G * S)
    loss_sum = torch.zeros((), device=rows.device)
    for j in range(0, G, mbs):
        with autocast:
            loss, extra = fwd(x[j:j + mbs], y[j:j + mbs])
        obj = loss * inv
        if extra is not None:
            obj = obj + extra * (mbs / G)
        obj.backward()
        loss_sum += loss.detach()
    clip = c["optimizer"]["clip_grad"]
    norm = torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else float("inf"))
    lr = lr_at(c, step)
    for g in opt.param_groups:
        g["lr"] = lr
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss_sum.item() * inv, norm.item(), lr


def train(args, c, batches):
    import torch
    import peer_model as pm
    m, t = c["model"], c["train"]
    dev = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dev == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: torch sees no CUDA device")
    device = torch.device(dev)
    prec = args.precision or t["precision"]
    S, G = m["seq_length"], t["global_batch_size"]
    mbs = args.micro_batch or t["micro_batch_size"]
    if G % mbs:
        raise InputError(f"global batch {G} is not a multiple of the micro batch {mbs}")
    steps = args.steps if args.steps is not None else (batches.steps if batches else t["steps"])
    if steps < 1:
        raise InputError("--steps must be >= 1")
    if dev == "cpu":
        torch.set_num_threads(args.threads or t["threads"] or os.cpu_count() or 1)
    # fp32 means fp32: no TF32 tensor cores (lattice's fp32 GEMMs use none either)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    try:
        model, gemm_note = make_model(torch, pm, args, c, device, prec)
    except pm.InputError as e:
        raise InputError(str(e))
    nparams = sum(p.numel() for p in model.parameters())
    opt, fused = make_optimizer(torch, model, c, not args.no_fused)
    fwd, compiled = compile_model(torch, model, args)
    autocast = (torch.autocast(device_type=dev, dtype=torch.bfloat16) if prec == "bf16"
                else torch.autocast(device_type=dev, enabled=False))
    host = token_batches(torch, args, c, batches, steps)
    if dev == "cuda":
        host = host.pin_memory()
        torch.cuda.reset_peak_memory_stats()
        dev_name = torch.cuda.get_device_name()
    else:
        dev_name = "cpu"
    peak, peak_src = peak_tflops(args, c, dev, dev_name, prec)

    flops_step = flops_per_sample(c) * G
    params = list(model.parameters())
    losses_f = open(args.losses_out, "w") if args.losses_out else None
    records, times = {}, []
    print(f"peer: torch {torch.__version__} on {dev_name}, {prec}, micro batch {mbs}, global {G}, "
          f"seq {S}, {nparams / 1e6:.3f} M parameters, {steps} steps, "
          f"compile {compiled}, fused AdamW {'on' if fused else 'off'}"
          f"{', ' + gemm_note if gemm_note else ''}")
    sys.stdout.flush()
    for step in range(steps):
        t0 = time.perf_counter()
        rows = host[step].to(device, non_blocking=True).long()
        try:
            loss_v, norm_v, lr = train_step(torch, fwd, opt, params, rows, c, mbs, autocast, step)
        except Exception as e:
            # a compiler failure on the first step (the update has not run):
            # the same step again in eager mode, said so in the figures
            if step > 0 or compiled == "off" or "out of memory" in str(e):
                raise
            print(f"peer: torch.compile failed ({type(e).__name__}: "
                  f"{(str(e).splitlines() or [''])[0][:300]}); running eagerly")
            torch.compiler.set_stance("force_eager")
            compiled = "off (compile failed)"
            opt.zero_grad(set_to_none=True)
            loss_v, norm_v, lr = train_step(torch, fwd, opt, params, rows, c, mbs, autocast, step)
        if dev == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        times.append(dt)
        if not (math.isfinite(loss_v) and math.isfinite(norm_v)):
            print(f"peer: step {step + 1}: loss {loss_v}, grad norm {norm_v}: diverged")
            return EXIT_FAIL
        rec = {"step": step + 1, "loss": loss_v, "lr": lr, "grad_norm": norm_v,
               "tokens_per_sec": G * S / dt, "tflops_per_device": flops_step / dt / 1e12,
               "mfu": flops_step / dt / 1e12 / peak if peak else 0.0, "step_ms": dt * 1e3,
               "precision": prec}
        records[step + 1] = rec
        if losses_f:
            losses_f.write(json.dumps(rec) + "\n")
            losses_f.flush()
        if (step + 1) % args.log_interval == 0 or step + 1 == steps or step < 3:
            print(f"peer step {step + 1:6d}/{steps} | loss {loss_v:.6f} | lr {lr:.3e} | grad norm "
                  f"{norm_v:.4f} | {G * S / dt:.0f} tok/s | {dt * 1e3:.1f} ms")
            sys.stdout.flush()
    if losses_f:
        losses_f.close()
    skip = args.warmup if args.warmup is not None else warmup_skip(len(times))
    skip = min(skip, len(times) - 1)
    rest = sorted(times[skip:])
    n = len(rest)
    med = rest[n // 2] if n % 2 else 0.5 * (rest[n // 2 - 1] + rest[n // 2])
    tflops = flops_step / med / 1e12
    if dev == "cuda":
        mem, mem_kind = torch.cuda.max_memory_allocated() / 2 ** 20, "cuda max_memory_allocated"
    else:
        import resource
        mem = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        mem_kind = "cpu peak RSS"
    summary = {"peer": "pytorch", "torch": torch.__version__, "device": dev_name,
               "precision": prec, "compile": compiled in ("on", "per block"),
               "compile_blocks": compiled == "per block", "fused_adamw": fused,
               "arch": m["arch"], "experts": gemm_note.replace("experts: ", ""),
               "params": nparams, "micro_batch": mbs, "global_batch": G, "seq_length": S,
               "steps": steps, "warmup_skipped": skip, "first_step_ms": times[0] * 1e3,
               "median_step_ms": med * 1e3, "tokens_per_sec": G * S / med,
               "tflops_per_device": tflops, "peak_tflops": peak, "peak_source": peak_src,
               "mfu": tflops / peak if peak else 0.0, "memory_mib": mem, "memory_kind": mem_kind,
               "first_losses": [records[k]["loss"] for k in sorted(records)[:5]]}
    print(f"peer done: {steps} steps, median step {med * 1e3:.1f} ms over {n} steps after "
          f"warm-up, {G * S / med:.0f} tok/s, {tflops:.3f} TFLOP/s per device, MFU "
          f"{100 * summary['mfu']:.1f}% (peak {peak:.3f}, {peak_src}), memory {mem:.1f} MiB "
          f"({mem_kind})")
    print("peer summary: " + json.dumps(summary))
    if args.summary:
        with open(args.summary, "a") as f:
            f.write(json.dumps(summary) + "\n")
    if args.compare:
        rtol, grtol = default_rtols(prec)
        ok = compare(read_losses(args.compare), records, min(args.compare_steps, steps),
                     args.rtol if args.rtol is not None else rtol,
                     args.gnorm_rtol if args.gnorm_rtol is not None else grtol)
        if not ok:
            return EXIT_FAIL
    return 0


def main(argv):
    ap = argparse.ArgumentParser(
        description="plain PyTorch peer of lattice's GPT-2 and Llama (with experts) models (see the module docstring)",
        usage="%(prog)s [options] [section.key=value ...]")
    ap.add_argument("--batches", help="token batches written by `lattice batches`")
    ap.add_argument("--config", help="lattice config YAML (default: the one in --batches)")
    ap.add_argument("--init", help="`lattice export` directory or its model.safetensors")
    ap.add_argument("--device", choices=["cuda", "cpu"])
    ap.add_argument("--steps", type=int)
    ap.add_argument("--precision", choices=["fp32", "bf16"])
    ap.add_argument("--micro-batch", type=int, help="default train.micro_batch_size")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--compile-blocks", action="store_true",
                    help="torch.compile each transformer block instead of the whole model")
    ap.add_argument("--no-fused", action="store_true")
    ap.add_argument("--moe-gemm", choices=["auto", "grouped", "loop"], default="auto",
                    help="the experts' GEMMs: torch's grouped_mm (auto: bf16 on CUDA, when it "
                         "computes correctly there) or one matmul per expert")
    ap.add_argument("--warmup", type=int, help="steps left out of the median (default as lattice)")
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--log-interval", type=int, default=10)
    ap.add_argument("--losses-out", help="per-step records (JSONL, lattice's field names)")
    ap.add_argument("--summary", help="append the summary JSON line to this file")
    ap.add_argument("--compare", metavar="LATTICE_JSONL")
    ap.add_argument("--peer-losses", metavar="PEER_JSONL",
                    help="with --compare: compare this file instead of training")
    ap.add_argument("--compare-steps", type=int, default=5)
    ap.add_argument("--rtol", type=float)
    ap.add_argument("--gnorm-rtol", type=float)
    ap.add_argument("--print-config", action="store_true",
                    help="print the resolved config subset as JSON and exit")
    ap.add_argument("overrides", nargs="*", metavar="section.key=value")
    args = ap.parse_args(argv)
    try:
        for o in args.overrides:
            if "=" not in o or "." not in o.partition("=")[0]:
                raise InputError(f"unexpected argument '{o}' (overrides look like section.key=value)")
        if args.peer_losses:
            if not args.compare:
                raise InputError("--peer-losses needs --compare LATTICE_JSONL")
            peer = read_losses(args.peer_losses)
            precs = {r.get("precision") for r in peer.values()}
            rtol, grtol = default_rtols("bf16" if "bf16" in precs else "fp32")
            ok = compare(read_losses(args.compare), peer, args.compare_steps,
                         args.rtol if args.rtol is not None else rtol,
                         args.gnorm_rtol if args.gnorm_rtol is not None else grtol)
            return 0 if ok else EXIT_FAIL
        batches = Batches(args.batches) if args.batches else None
        if args.config:
            try:
                text = open(args.config).read()
            except OSError as e:
                raise InputError(f"{args.config}: {e.strerror}")
            doc = _parse_yaml(text, args.config)
        elif batches:
            doc = _parse_yaml(batches.config_text, args.batches + " (config)")
        else:
            doc = {}
        c = resolve_config(doc, args.overrides)
        if args.print_config:
            print(json.dumps(c, sort_keys=True))
            return 0
        if batches:
            m = c["model"]
            if (batches.samples != c["train"]["global_batch_size"] or
                    batches.row != m["seq_length"] + 1 or batches.vocab != m["vocab_size"]):
                raise InputError(
                    f"{args.batches}: batches of {batches.samples} x {batches.row - 1} tokens "
                    f"(vocab {batches.vocab}) do not fit the config (global batch "
                    f"{c['train']['global_batch_size']}, seq {m['seq_length']}, vocab "
                    f"{m['vocab_size']})")
        try:
            import torch  # noqa: F401
        except ImportError:
            raise InputError("training needs PyTorch (import torch failed)")
        try:
            return train(args, c, batches)
        except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
            # (compiled code may wrap an allocation failure in another error)
            if not isinstance(e, torch.cuda.OutOfMemoryError) and "out of memory" not in str(e):
                raise
            print(f"peer: out of memory: {(str(e).splitlines() or [''])[0]}")
            return EXIT_OOM
    except InputError as e:
        print(f"bench_peer: error: {e}", file=sys.stderr)
        return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
