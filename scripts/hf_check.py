#!/usr/bin/env python3
"""hf_check.py - lattice import/export against Hugging Face transformers itself.

Needs torch and transformers (not part of `make test`); run as
    HF_PYTHON=/path/to/venv/bin/python; $HF_PYTHON scripts/hf_check.py [--lattice build/lattice]

For a tiny LlamaForCausalLM (grouped-query attention, untied, llama3 rope
scaling) and GPT2LMHeadModel (tied and untied), saved by transformers'
save_pretrained in fp32 and in bf16:
  - `lattice import` of the directory, then `lattice export`;
  - from_pretrained of the export: no missing or unexpected keys, every tensor
    equal to the original's (fp32 values of the bf16 ones), the same logits;
  - GPT-2 only (lattice has no Llama kernels yet): `lattice eval` of the
    imported checkpoint gives the loss transformers computes on the same
    validation samples, within 1e-5 relative.
Prints PASS/FAIL lines and exits non-zero on a failure.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import transformers

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
    for tied in (True, False):
        gpt = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=250,
                                      tie_word_embeddings=tied, resid_pdrop=0.0, embd_pdrop=0.0,
                                      attn_pdrop=0.0, bos_token_id=None, eos_token_id=None)
        yield "gpt2_" + ("tied" if tied else "untied"), transformers.GPT2LMHeadModel(gpt)


def perturb(model):
    """Non-trivial norm weights and biases, so that every tensor's place shows."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.05 * torch.randn(p.shape, generator=g))


def check(lattice, name, model, dtype, tmp):
    src, ck, out = (os.path.join(tmp, f"{name}_{dtype}_{k}") for k in ("hf", "ck", "export"))
    model.to(getattr(torch, dtype)).save_pretrained(src, safe_serialization=True)
    model.float()
    # the reference: what transformers loads from its own files (buffers such as
    # the rotary frequencies computed afresh in fp32, as for the export)
    ref = type(model).from_pretrained(src, torch_dtype=torch.float32)
    run([lattice, "import", src, ck])
    run([lattice, "export", ck, out])
    back, info = type(model).from_pretrained(out, output_loading_info=True, torch_dtype=torch.float32)
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


def eval_loss(lattice, name, ck, ref, tmp):
    """lattice eval of the imported GPT-2 vs transformers on the same samples."""
    g = torch.Generator().manual_seed(3)
    toks = torch.randint(0, ref.config.vocab_size, (4000,), generator=g)
    ids = os.path.join(tmp, f"{name}.ids")
    shard = os.path.join(tmp, f"{name}.ltok")
    with open(ids, "w") as f:
        f.write(" ".join(map(str, toks.tolist())))
    run([lattice, "shard", "--vocab-size", str(ref.config.vocab_size), "--input", ids, shard])
    S, G, iters = 16, 8, 2
    cfg = os.path.join(ck, "step_00000000", "config.yaml")
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
    theirs = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
    rel = abs(ours - theirs) / theirs
    report(rel < 1e-5, f"{name}_eval_loss", f"lattice {ours} vs transformers {theirs} (rel {rel:.2e})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lattice", default="build/lattice")
    a = ap.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in models():
            perturb(model)
            for dtype in ("float32", "bfloat16"):
                try:
                    ck, ref = check(a.lattice, name, model, dtype, tmp)
                    if name.startswith("gpt2") and dtype == "float32":
                        eval_loss(a.lattice, name, ck, ref, tmp)
                except Exception as e:  # a failed step fails its case, the others still run
                    report(False, f"{name}_{dtype}", str(e))
    print(f"{failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
