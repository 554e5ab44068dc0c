#!/usr/bin/env python3
"""hf_check.py - lattice import/export against Hugging Face transformers itself.

Needs torch and transformers (not part of `make test`; without them it prints
SKIP and exits 0); run as
    HF_PYTHON=/path/to/venv/bin/python; $HF_PYTHON scripts/hf_check.py [--lattice build/lattice]

For a tiny LlamaForCausalLM (grouped-query attention, untied, llama3 rope
scaling; with YaRN's, untruncated as gpt-oss's; and with attention_bias and
mlp_bias: lattice's model.add_bias_linear), Qwen2ForCausalLM (tied),
Qwen3MoeForCausalLM and Qwen2MoeForCausalLM (dense layers among the sparse
ones, the top k renormalised or not; Qwen2-MoE's gated shared expert, with and
without q/k/v biases), MixtralForCausalLM (4 experts, top 2,
grouped-query), GptOssForCausalLM (biases, sinks, windows on the even layers,
YaRN, a clamp its experts' inputs cross) and GPT2LMHeadModel (tied and
untied), saved by transformers' save_pretrained in fp32 and in bf16:
  - `lattice import` of the directory, then `lattice export`;
  - from_pretrained of the export: no missing or unexpected keys, every tensor
    equal to the original's (fp32 values of the bf16 ones), the same logits;
  - fp32: `lattice eval` of the imported checkpoint gives the loss
    transformers computes (in float64) on the same validation samples, within
    1e-5 relative; the MoE models, Qwen2 and the biased Llama also `lattice
    logits` against transformers' logits.
And the other direction, for MoE: a Mixtral-shaped, a Qwen3-MoE, a Qwen2-MoE
and a gpt-oss-shaped lattice model (llama-tiny, 4 experts top 2, aux loss; the
others with their keys) trained 6 steps by lattice, exported: from_pretrained
of its class reports no missing or unexpected key, its logits equal `lattice
logits` and its loss `lattice eval`'s, within 1e-5.
And the imported fp32 MoE models train on: 12 steps from their
weights, the loss falling, and under EP 2 (mpirun) within 1e-5 of one process.
Prints PASS/FAIL lines with the measured differences; exits non-zero on a
failure.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
    import transformers
except ImportError as e:
    print(f"SKIP hf_check: {e} (install torch and transformers, e.g. in a venv given as HF_PYTHON)")
    sys.exit(0)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOL = 1e-5

failures = 0


def report(ok, name, why=""):
    global failures
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + why))
    failures += 0 if ok else 1


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-500:]}")
    return p.stdout


def models():
    torch.manual_seed(0)
    llama = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=37, max_position_embeddings=64, rms_norm_eps=1e-5,
        rope_theta=500000.0, tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32})
    yield "llama", transformers.LlamaForCausalLM(llama)
    # YaRN as gpt-oss sets it (no truncation), over a context 4x the original
    yarn = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=37, max_position_embeddings=64, rms_norm_eps=1e-5,
        rope_theta=150000.0, tie_word_embeddings=False,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                      "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False})
    yield "llama_yarn", transformers.LlamaForCausalLM(yarn)
    biased = transformers.LlamaConfig(**{**llama.to_dict(), "attention_bias": True,
                                         "mlp_bias": True})
    yield "llama_bias", transformers.LlamaForCausalLM(biased)
    # Qwen2: biases on q, k and v only; tied embeddings, as its small models
    qwen2 = transformers.Qwen2Config(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=37, max_position_embeddings=64, rms_norm_eps=1e-5,
        tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    yield "qwen2", transformers.Qwen2ForCausalLM(qwen2)
    # Qwen3-MoE: q/k norms, a dense layer between two sparse ones (mlp_only_layers), experts
    # narrower than the dense MLP; the top-k renormalised (norm_topk_prob) or not
    for norm in (True, False):
        qmoe = transformers.Qwen3MoeConfig(
            hidden_size=32, intermediate_size=48, moe_intermediate_size=24, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=8, vocab_size=37,
            max_position_embeddings=64, rms_norm_eps=1e-5, num_experts=4, num_experts_per_tok=2,
            norm_topk_prob=norm, mlp_only_layers=[1], tie_word_embeddings=False,
            output_router_logits=True, router_aux_loss_coef=0.02,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6})
        yield "qwen3_moe" + ("" if norm else "_probs"), transformers.Qwen3MoeForCausalLM(qmoe)
    # Qwen2-MoE: a shared expert (wider than the experts) behind its sigmoid gate in each sparse
    # layer. As Qwen1.5-MoE-A2.7B: the top-k probabilities as they are (norm_topk_prob false),
    # q/k/v biases, a dense layer between two sparse ones (mlp_only_layers); and renormalised,
    # without the q/k/v biases (qkv_bias false), tied, the odd layers dense (decoder_sparse_step 2)
    for norm in (False, True):
        q2moe = transformers.Qwen2MoeConfig(
            hidden_size=32, intermediate_size=48, moe_intermediate_size=24,
            shared_expert_intermediate_size=40, num_hidden_layers=3 if not norm else 4,
            num_attention_heads=4, num_key_value_heads=2, vocab_size=37, max_position_embeddings=64,
            rms_norm_eps=1e-5, num_experts=4, num_experts_per_tok=2, norm_topk_prob=norm,
            qkv_bias=not norm, tie_word_embeddings=norm,
            **({"decoder_sparse_step": 2} if norm else {"mlp_only_layers": [1]}),
            output_router_logits=True, router_aux_loss_coef=0.02,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6})
        yield "qwen2_moe" + ("_norm" if norm else ""), transformers.Qwen2MoeForCausalLM(q2moe)
    mixtral = transformers.MixtralConfig(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=37, max_position_embeddings=64, rms_norm_eps=1e-5,
        rope_theta=1e6, num_local_experts=4, num_experts_per_tok=2, sliding_window=None,
        tie_word_embeddings=False, output_router_logits=True, router_aux_loss_coef=0.02)
    yield "mixtral", transformers.MixtralForCausalLM(mixtral)
    # gpt-oss's every feature: biases, sinks, a window of 4 keys on the even layers, YaRN,
    # and a clamp low enough (0.05) that the experts' inputs cross it
    gptoss = transformers.GptOssConfig(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, vocab_size=37, max_position_embeddings=64,
        rms_norm_eps=1e-5, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
        swiglu_limit=0.05, tie_word_embeddings=False, output_router_logits=True,
        router_aux_loss_coef=0.02,
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0,
                         "original_max_position_embeddings": 16, "beta_fast": 32.0,
                         "beta_slow": 1.0, "truncate": False})
    yield "gpt_oss", transformers.GptOssForCausalLM(gptoss)
    for tied in (True, False):
        gpt = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=250,
                                      tie_word_embeddings=tied, resid_pdrop=0.0, embd_pdrop=0.0,
                                      attn_pdrop=0.0, bos_token_id=None, eos_token_id=None)
        yield "gpt2_" + ("tied" if tied else "untied"), transformers.GPT2LMHeadModel(gpt)


def perturb(model):
    """Non-trivial norm weights and biases, so that every tensor's place shows;
    routers and Qwen2-MoE's shared-expert gates 20x their init, so that the
    experts' choice and weights, and the gate's, matter."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.05 * torch.randn(p.shape, generator=g))
            elif name.endswith(("mlp.gate.weight", "mlp.router.weight", "mlp.shared_expert_gate.weight")):
                p.mul_(20.0)
            elif name.endswith("_proj_bias"):  # gpt-oss's stacked expert biases
                p.add_(0.05 * torch.randn(p.shape, generator=g))


def eager(model):
    """from_pretrained's arguments for an MoE model: the experts as the published
    per-expert loop (transformers 5's default grouped GEMM has no float64), and
    for gpt-oss the eager attention, the one that reads the sinks in float64."""
    name = type(model).__name__
    return ({"experts_implementation": "eager"}
            if any(m in name for m in ("Mixtral", "GptOss", "Qwen2Moe", "Qwen3Moe")) else {}) | \
        ({"attn_implementation": "eager"} if "GptOss" in name else {})


def check(lattice, name, model, dtype, tmp):
    src, ck, out = (os.path.join(tmp, f"{name}_{dtype}_{k}") for k in ("hf", "ck", "export"))
    model.to(getattr(torch, dtype)).save_pretrained(src, safe_serialization=True)
    model.float()
    # the reference: what transformers loads from its own files (buffers such as
    # the rotary frequencies computed afresh in fp32, as for the export)
    ref = type(model).from_pretrained(src, torch_dtype=torch.float32, **eager(model))
    run([lattice, "import", src, ck])
    run([lattice, "export", ck, out])
    back, info = type(model).from_pretrained(out, output_loading_info=True, torch_dtype=torch.float32,
                                             **eager(model))
    missing = sorted(info["missing_keys"]) + sorted(info["unexpected_keys"])
    report(not missing, f"{name}_{dtype}_keys", f"missing/unexpected {missing}")
    want = ref.state_dict()
    got = back.state_dict()
    bad = [k for k in want if k in got and not torch.equal(want[k], got[k])
           and not k.endswith(("attn.bias", "masked_bias"))]
    report(not bad, f"{name}_{dtype}_tensors", f"differ: {bad[:5]}")
    ids = torch.randint(0, model.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        same = torch.equal(ref(ids).logits, back(ids).logits)
    report(same, f"{name}_{dtype}_logits", "logits differ")
    return ck, ref


def step_dir(ck):
    return os.path.join(ck, open(os.path.join(ck, "latest")).read().strip())


def shard_of(lattice, tokens, vocab, path):
    with open(path + ".ids", "w") as f:
        f.write(" ".join(map(str, tokens.tolist())))
    run([lattice, "shard", "--vocab-size", str(vocab), "--input", path + ".ids", path])


def rel_diff(a, b):
    """max |a - b| over max |b|"""
    return ((a - b).abs().max() / b.abs().max()).item()


def eval_loss(lattice, name, ck, ref, tmp, config=None):
    """`lattice eval` of checkpoint ck (with its own config.yaml, or `config`)
    vs transformers' model ref (in float64) on the same validation samples."""
    g = torch.Generator().manual_seed(3)
    toks = torch.randint(0, ref.config.vocab_size, (4000,), generator=g)
    shard = os.path.join(tmp, f"{name}.ltok")
    shard_of(lattice, toks, ref.config.vocab_size, shard)
    S, G, iters = 16, 8, 2
    cfg = config or os.path.join(step_dir(ck), "config.yaml")
    metrics = os.path.join(tmp, f"{name}.jsonl")
    run([lattice, "eval", cfg, f"checkpoint.load={ck}", f"data.valid_path={shard}",
         f"data.train_path={shard}", f"model.seq_length={S}", "train.micro_batch_size=4",
         f"train.global_batch_size={G}", f"eval.iters={iters}", "train.device=cpu",
         "train.threads=1", f"logging.metrics_file={metrics}"])
    # lattice eval appends to a file of its own beside logging.metrics_file
    recs = [json.loads(l) for l in open(os.path.join(tmp, f"{name}.eval.jsonl")) if '"val_loss"' in l]
    if not recs:
        report(False, f"{name}_eval_loss", "no val_loss in lattice eval's metrics")
        return
    ours = recs[-1]["val_loss"]
    n = iters * G
    x = torch.stack([toks[i * S:i * S + S] for i in range(n)])
    y = torch.stack([toks[i * S + 1:i * S + S + 1] for i in range(n)])
    with torch.no_grad():
        logits = ref.double()(x).logits
    ref.float()
    theirs = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
    rel = abs(ours - theirs) / theirs
    report(rel < TOL, f"{name}_eval_loss (lattice {ours:.9f}, transformers {theirs:.9f}, rel {rel:.2e})",
           f"lattice {ours} vs transformers {theirs} (rel {rel:.2e})")


def logits_vs_lattice(lattice, name, ck, ref, tmp, config=None, seq=16):
    """`lattice logits` of ck on a random prompt vs transformers' (float64)."""
    toks = torch.randint(0, ref.config.vocab_size, (200,), generator=torch.Generator().manual_seed(4))
    shard = os.path.join(tmp, f"{name}_prompt.ltok")
    shard_of(lattice, toks, ref.config.vocab_size, shard)
    cfg = config or os.path.join(step_dir(ck), "config.yaml")
    out = run([lattice, "logits", cfg, f"checkpoint.load={ck}", f"data.train_path={shard}",
               f"model.seq_length={seq}", "train.device=cpu", "train.threads=1"]).split("\n")
    ids = [int(t) for t in out[0].split()[1:]]
    ours = torch.tensor([[float(v) for v in ln.split()] for ln in out[1:1 + len(ids)]], dtype=torch.float64)
    with torch.no_grad():
        theirs = ref.double()(torch.tensor([ids])).logits[0]
    ref.float()
    d = rel_diff(ours, theirs)
    report(ids == toks[:seq].tolist() and d < TOL,
           f"{name}_logits_vs_lattice ({len(ids)} positions x {ours.shape[1]}, max rel {d:.2e})",
           f"max relative difference {d:.2e}")


def trains_on(lattice, name, ck, vocab, tmp):
    """A model transformers saved, imported as ck, trains on in lattice: 12
    steps on a repeating token pattern from its weights (and with the MoE
    statistics logged), the loss falling; and, where mpirun is found, the same
    steps under expert parallelism 2 within 1e-5 of them."""
    shard = os.path.join(tmp, f"{name}_pattern.ltok")
    shard_of(lattice, torch.arange(20000) % 23 % vocab, vocab, shard)
    cfg = os.path.join(step_dir(ck), "config.yaml")
    common = [cfg, f"checkpoint.load={ck}", f"data.train_path={shard}", "model.seq_length=16",
              "train.micro_batch_size=2", "train.global_batch_size=4", "train.steps=12",
              "eval.interval=0", "train.device=cpu", "train.threads=1", "optimizer.lr=3e-3",
              "optimizer.warmup_steps=0", "logging.log_interval=1"]
    losses = {}
    for layout, launch in (("1", []), ("ep2", ["mpirun", "--allow-run-as-root", "--oversubscribe",
                                               "-np", "2"])):
        if launch and not shutil.which("mpirun"):
            print(f"SKIP {name}_trains_on_ep2: no mpirun")
            continue
        metrics = os.path.join(tmp, f"{name}_train_{layout}.jsonl")
        extra = ["parallel.expert_model_parallel_size=2"] if launch else []
        log = run(launch + [lattice, "train"] + common + extra + [f"logging.metrics_file={metrics}"])
        losses[layout] = [r["loss"] for r in map(json.loads, open(metrics)) if not r.get("eval")]
        if layout == "1":
            moe = "\nmoe " in "\n" + log and "aux loss" in log
            l = losses["1"]
            report(len(l) == 12 and all(map(math.isfinite, l)) and l[-1] < 0.8 * l[0] and moe,
                   f"{name}_trains_on (loss {l[0]:.4f} -> {l[-1]:.4f} in {len(l)} steps)",
                   f"losses {l}, moe statistics logged: {moe}")
    if "ep2" in losses:
        a, b = losses["1"], losses["ep2"]
        d = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if len(a) == len(b) else float("inf")
        report(d <= 1e-5, f"{name}_trains_on_ep2 (max rel {d:.2e} against one process)",
               f"EP 2 {b} against {a}")


# lattice's gpt-oss keys on llama-tiny: biases, sinks, quick GeGLU with gpt-oss's offset
# and a clamp (0.05, so that it acts), windows of 3 keys before the query on the even
# layers, YaRN untruncated
GPTOSS_KEYS = ["model.add_bias_linear=true", "model.softmax_type=learnable", "model.quick_geglu=true",
               "model.glu_linear_offset=1", "model.activation_func_clamp_value=0.05",
               "model.window_size=[3, 0]", "model.window_attn_skip_freq=2",
               "model.rope_scaling=yarn", "model.rope_scaling_factor=4",
               "model.rope_original_max_position=16", "model.rope_truncate=false"]


# Qwen3-MoE's: q/k norms over a head dimension of its own, a dense layer between two MoE
# layers, the dense MLP wider than the experts
QWEN3MOE_KEYS = ["model.qk_layernorm=true", "model.kv_channels=12", "model.num_layers=3",
                 "model.moe_layer_freq=[1,0,1]", "model.ffn_hidden_size=80"]


# Qwen2-MoE's: q/k/v biases, a shared expert behind its sigmoid gate, the probabilities as
# they are (norm_topk_prob false), a head dimension of its own, a dense layer between two
# MoE layers
QWEN2MOE_KEYS = ["model.add_qkv_bias=true", "model.moe_shared_expert_intermediate_size=40",
                 "model.moe_shared_expert_gate=true", "model.moe_router_pre_softmax=true",
                 "model.kv_channels=12", "model.num_layers=3", "model.moe_layer_freq=[1,0,1]",
                 "model.ffn_hidden_size=80"]


def lattice_moe(lattice, tmp, name, cls, extra):
    """An MoE model trained by lattice (llama-tiny, 4 experts top 2 in every layer,
    aux and z loss, and `extra`), exported, against transformers' class `cls`."""
    ck, hf = os.path.join(tmp, name + "_ck"), os.path.join(tmp, name + "_hf")
    g = torch.Generator().manual_seed(5)
    shard = os.path.join(tmp, name + "_train.ltok")
    shard_of(lattice, torch.randint(0, 256, (20000,), generator=g), 256, shard)
    cfg = os.path.join(tmp, name + ".yaml")
    with open(os.path.join(ROOT, "configs", "llama-tiny.yaml")) as f, open(cfg, "w") as o:
        o.write(f.read())
    moe = ["model.num_experts=4", "model.moe_router_topk=2", "model.moe_ffn_hidden_size=48",
           "model.moe_aux_loss_coeff=0.01", "model.moe_z_loss_coeff=0.001"]
    run([lattice, "train", cfg, f"data.train_path={shard}", "train.steps=6", "eval.interval=0",
         f"checkpoint.dir={ck}"] + moe + extra)
    run([lattice, "export", ck, hf])
    kw = {"experts_implementation": "eager"} | ({"attn_implementation": "eager"} if "GptOss" in cls.__name__ else {})
    model, info = cls.from_pretrained(hf, output_loading_info=True, torch_dtype=torch.float32, **kw)
    missing = sorted(info["missing_keys"]) + sorted(info["unexpected_keys"])
    report(not missing, f"{name}_keys", f"missing/unexpected {missing}")
    c = model.config
    width = getattr(c, "moe_intermediate_size", c.intermediate_size)  # the experts'
    experts = getattr(c, "num_local_experts", getattr(c, "num_experts", None))  # Qwen2-MoE's
    report((experts, c.num_experts_per_tok, width) == (4, 2, 48),
           f"{name}_config", f"experts {experts} top {c.num_experts_per_tok} width {width}")
    # the training config with the MoE keys; the checkpoint's config.yaml holds them too
    logits_vs_lattice(lattice, name, ck, model, tmp, seq=32)
    eval_loss(lattice, name, ck, model, tmp)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lattice", default="build/lattice")
    ap.add_argument("--only", default="", help="run only the models whose name starts with this")
    a = ap.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in models():
            perturb(model)
            for dtype in ("float32", "bfloat16"):
                if a.only and not name.startswith(a.only):
                    continue
                try:
                    ck, ref = check(a.lattice, name, model, dtype, tmp)
                    if dtype == "float32":
                        eval_loss(a.lattice, name, ck, ref, tmp)
                    moe = name in ("mixtral", "gpt_oss", "qwen3_moe", "qwen3_moe_probs", "qwen2_moe",
                                   "qwen2_moe_norm")
                    if (moe or name in ("llama_bias", "qwen2")) and dtype == "float32":
                        logits_vs_lattice(a.lattice, name, ck, ref, tmp)
                    if moe and dtype == "float32":
                        trains_on(a.lattice, name, ck, model.config.vocab_size, tmp)
                except Exception as e:  # a failed step fails its case, the others still run
                    report(False, f"{name}_{dtype}", str(e))
        for name, cls, extra in (("lattice_mixtral", transformers.MixtralForCausalLM, []),
                                 ("lattice_qwen3_moe", transformers.Qwen3MoeForCausalLM, QWEN3MOE_KEYS),
                                 ("lattice_qwen2_moe", transformers.Qwen2MoeForCausalLM, QWEN2MOE_KEYS),
                                 ("lattice_gpt_oss", transformers.GptOssForCausalLM, GPTOSS_KEYS)):
            if a.only and not name.startswith(a.only):
                continue
            try:
                lattice_moe(a.lattice, tmp, name, cls, extra)
            except Exception as e:
                report(False, name, str(e))
    print(f"{failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
