"""peer_model.py - the models of scripts/bench_peer.py in plain PyTorch: lattice's
GPT-2 block and its Llama block with or without Mixtral's routed experts
(docs/model.md), their random init with lattice's distributions and the
loading of `lattice export` output. Imported by bench_peer.py only when it
trains (the rest of it runs without torch).

Llama (model.arch=llama): RMSNorm (model.norm_epsilon) before attention, before
the MLP and at the end (weight only); rotary embeddings on q and k in the
"rotate half" convention (pairs j, j + head_dim/2) from an inverse-frequency
table computed in double with Llama 3.1's scaling (src/model/rope.c),
positions 0..S-1 in every sequence; grouped-query attention (q heads over
model.num_query_groups k/v heads, query head i reading group i // (NH / NKV),
as SDPA's enable_gqa does), q | k | v per token, head dimension
model.kv_channels; SwiGLU silu(gate) * up over a gate | up projection; no
biases; the LM head untied (untie_embeddings_and_output_weights) or the
embedding.

Experts (model.num_experts E > 0, every layer an MoE layer): a bias-free fp32
router gives each token E logits; the token goes to its top k
(moe_router_topk) - ties to the lower expert index (a stable sort) - with
weights softmax over those k (moe_router_pre_softmax=false, Mixtral) or the
softmax over all E picked at the top k (true), times
moe_router_topk_scaling_factor when set; dropless. The token-expert
assignments are sorted expert by expert (tokens in order), each expert's
SwiGLU runs over its rows - one grouped GEMM per projection
(torch.nn.functional.grouped_mm, bf16 on CUDA) or a loop of one matmul per
expert - and the weighted outputs are summed back into token order. The
load-balancing loss (aux_loss: coeff E / (k T^2) sum_i tokens_i probs_i over
the micro batch's T tokens; seq_aux_loss: the same per sequence, averaged)
and the z-loss (coeff mean logsumexp(logits)^2) are returned apart from the
language-model loss: the trainer weighs them by the micro batch's share of the
step, as lattice does (src/model/moe.c). Shapes that lattice has and this
model has not (shared experts, sigmoid scores, capacity, expert bias, dense
layers between MoE layers) are refused by bench_peer.py's config check."""
import collections
import json
import math
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F


class InputError(Exception):
    """Raised for a file or config the model cannot take (bench_peer maps it)."""


# torch's grouped GEMM and the row multiple each expert's group must start at
# (1: any; else the groups are laid out with zero rows between them)
Grouped = collections.namedtuple("Grouped", "mm align")


# ---- GPT-2 -----------------------------------------------------------------------
class GPTBlock(nn.Module):
    def __init__(self, C, NH, Fh):
        super().__init__()
        self.nh = NH
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, Fh)
        self.fc2 = nn.Linear(Fh, C)

    def forward(self, x):
        B, T, C = x.shape
        qkv = self.qkv(self.ln_1(x)).view(B, T, 3, self.nh, C // self.nh)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))  # (B, NH, T, HD)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc(self.ln_2(x)), approximate="tanh")), None


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        m = c["model"]
        self.V, C = m["vocab_size"], m["hidden_size"]
        self.wte = nn.Parameter(torch.zeros(m["padded_vocab_size"], C))
        self.wpe = nn.Parameter(torch.zeros(m["max_position_embeddings"], C))
        self.h = nn.ModuleList(GPTBlock(C, m["num_attention_heads"], m["ffn_hidden_size"])
                               for _ in range(m["num_layers"]))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)

    def forward(self, idx, targets):
        """(sum of the token losses of the (B, T) batch (fp32), None)."""
        T = idx.shape[1]
        x = F.embedding(idx, self.wte) + self.wpe[:T]
        for blk in self.h:
            x, _ = blk(x)
        logits = F.linear(self.ln_f(x), self.wte)  # tied LM head, (B, T, Vp)
        return token_loss(logits, targets, self.V), None


def token_loss(logits, targets, V):
    """Sum of the cross-entropies; padded vocabulary columns get neither
    probability nor gradient (as in lattice)."""
    if logits.shape[-1] != V:
        logits = logits[..., :V]
    return F.cross_entropy(logits.reshape(-1, V).float(), targets.reshape(-1), reduction="sum")


# ---- Llama -------------------------------------------------------------------------
def rope_inv_freq(m):
    """lt_rope_inv_freq (src/model/rope.c), in double."""
    HD, base = m["kv_channels"], m["rotary_base"]
    out = []
    orig = float(m["rope_original_max_position"])
    lo, hi, factor = m["rope_low_freq_factor"], m["rope_high_freq_factor"], m["rope_scaling_factor"]
    for j in range(HD // 2):
        f = base ** (-2.0 * j / HD)
        if m["rope_scaling"] == "llama3":
            wavelen = 2.0 * math.pi / f
            if wavelen > orig / lo:
                f = f / factor
            elif wavelen >= orig / hi:
                smooth = (orig / wavelen - lo) / (hi - lo)
                f = (1.0 - smooth) * f / factor + smooth * f
        out.append(f)
    return torch.tensor(out, dtype=torch.float64)


def rope(x, cos, sin):
    """x (B, T, H, HD) rotated by position: pairs (j, j + HD/2), fp32 arithmetic,
    one rounding to x's dtype."""
    x1, x2 = x.float().chunk(2, dim=-1)
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)


def stable_topk(v, k):
    """The k largest entries of each row of v, descending, ties to the lower
    index (lattice's moe_select; torch.topk leaves the order of ties open)."""
    vals, idx = torch.sort(v, dim=-1, descending=True, stable=True)
    return vals[..., :k], idx[..., :k]


class MoE(nn.Module):
    def __init__(self, m, gemm, compute_dtype):
        super().__init__()
        C, F_, E = m["hidden_size"], m["moe_ffn_hidden_size"], m["num_experts"]
        self.E, self.K, self.F = E, m["moe_router_topk"], F_
        self.pre_softmax = m["moe_router_pre_softmax"]
        self.scale = m["moe_router_topk_scaling_factor"]
        self.balance = m["moe_router_load_balancing_type"]
        self.aux_coeff, self.z_coeff = m["moe_aux_loss_coeff"], m["moe_z_loss_coeff"]
        self.gemm, self.cdt = gemm, compute_dtype
        self.router = nn.Parameter(torch.zeros(E, C))
        self.gate_up = nn.Parameter(torch.zeros(E, 2 * F_, C))  # rows: gate, then up
        self.down = nn.Parameter(torch.zeros(E, C, F_))

    def forward(self, h):
        """(the routed experts' output (B, T, C) in fp32, the micro batch's aux
        and z losses with their coefficients, or None)."""
        B, T, C = h.shape
        x = h.reshape(-1, C)
        with torch.autocast(device_type=x.device.type, enabled=False):
            logits = F.linear(x.float(), self.router)  # (N, E), fp32
        if self.pre_softmax:
            w, idx = stable_topk(logits.softmax(dim=-1), self.K)
        else:
            top, idx = stable_topk(logits, self.K)
            w = top.softmax(dim=-1)
        if self.scale:
            w = w * self.scale
        extra = self.losses(logits, idx, B)
        # expert-major order of the N K assignments (tokens in order within an expert)
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        tok = order // self.K
        counts = torch.zeros(self.E, dtype=torch.int64, device=x.device)
        counts.index_add_(0, flat, torch.ones_like(flat))
        y = self.experts(x[tok], counts, flat[order])
        y = y.float() * w.reshape(-1)[order].unsqueeze(1)
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device).index_add_(0, tok, y)
        return out.view(B, T, C), extra

    def losses(self, logits, idx, B):
        """The aux (per micro batch, or per sequence of the B) and z losses of
        the router's logits (N, E) and choices idx (N, K), or None."""
        extra = None
        if self.balance != "none" and self.aux_coeff > 0:
            groups = B if self.balance == "seq_aux_loss" else 1
            probs = logits.softmax(dim=-1).view(groups, -1, self.E)
            load = torch.zeros(probs.shape, dtype=torch.float32, device=logits.device)
            load.scatter_add_(2, idx.view(groups, -1, self.K),
                              torch.ones(idx.shape, device=logits.device).view(groups, -1, self.K))
            tg = probs.shape[1]
            dot = (load.sum(dim=1) * probs.sum(dim=1)).sum()
            extra = self.aux_coeff * self.E / (self.K * tg * tg * groups) * dot
        if self.z_coeff > 0:
            z = self.z_coeff * torch.logsumexp(logits, dim=-1).square().mean()
            extra = z if extra is None else extra + z
        return extra

    def experts(self, xs, counts, experts_of_rows):
        """Each expert's SwiGLU over its contiguous rows of xs (M, C);
        experts_of_rows (M) is each row's expert."""
        if self.gemm is None:
            return self.expert_loop(xs, counts)
        mm, align = self.gemm
        a = xs.to(self.cdt)
        ends, rows = torch.cumsum(counts, 0), None
        if align > 1:  # each expert's rows shift to its aligned start; rows between stay 0
            padded = (counts + align - 1) // align * align
            ends = torch.cumsum(padded, 0)
            shift = (ends - padded) - (torch.cumsum(counts, 0) - counts)
            rows = torch.arange(a.shape[0], device=a.device) + shift[experts_of_rows]
            a = a.new_zeros(a.shape[0] + self.E * (align - 1), a.shape[1]).index_copy(0, rows, a)
        offs = ends.to(torch.int32)
        g, u = mm(a, self.gate_up.to(self.cdt).transpose(-2, -1), offs=offs).chunk(2, dim=-1)
        y = mm(F.silu(g) * u, self.down.to(self.cdt).transpose(-2, -1), offs=offs)
        return y if rows is None else y[rows]

    @torch.compiler.disable
    def expert_loop(self, xs, counts):
        # the split sizes come to the host (as lattice's offsets do); a graph
        # break under torch.compile, whose shapes would change every step
        outs = []
        for e, xe in enumerate(xs.split(counts.tolist())):
            g, u = F.linear(xe, self.gate_up[e]).chunk(2, dim=-1)
            outs.append(F.linear(F.silu(g) * u, self.down[e]))
        return torch.cat(outs)


class LlamaBlock(nn.Module):
    def __init__(self, m, gemm, compute_dtype):
        super().__init__()
        C, HD = m["hidden_size"], m["kv_channels"]
        self.nh, self.nkv, self.hd, self.eps = (m["num_attention_heads"], m["num_query_groups"], HD,
                                                m["norm_epsilon"])
        self.ln_1 = nn.Parameter(torch.ones(C))
        self.qkv = nn.Linear(C, (self.nh + 2 * self.nkv) * HD, bias=False)
        self.proj = nn.Linear(self.nh * HD, C, bias=False)
        self.ln_2 = nn.Parameter(torch.ones(C))
        if m["num_experts"] > 0:
            self.moe = MoE(m, gemm, compute_dtype)
        else:
            self.moe = None
            self.gate_up = nn.Linear(C, 2 * m["ffn_hidden_size"], bias=False)
            self.down = nn.Linear(m["ffn_hidden_size"], C, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        h = F.rms_norm(x, (C,), self.ln_1, self.eps)
        q, k, v = self.qkv(h).split((self.nh * self.hd, self.nkv * self.hd, self.nkv * self.hd), -1)
        q = rope(q.view(B, T, self.nh, self.hd), cos, sin).transpose(1, 2)
        k = rope(k.view(B, T, self.nkv, self.hd), cos, sin).transpose(1, 2)
        v = v.view(B, T, self.nkv, self.hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=self.nkv != self.nh)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, self.nh * self.hd))
        h = F.rms_norm(x, (C,), self.ln_2, self.eps)
        if self.moe is not None:
            out, extra = self.moe(h)
            return x + out, extra
        g, u = self.gate_up(h).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u), None


class Llama(nn.Module):
    def __init__(self, c, gemm=None, compute_dtype=torch.float32):
        super().__init__()
        m = c["model"]
        self.V, C = m["vocab_size"], m["hidden_size"]
        self.eps = m["norm_epsilon"]
        self.wte = nn.Parameter(torch.zeros(m["padded_vocab_size"], C))
        self.h = nn.ModuleList(LlamaBlock(m, gemm, compute_dtype) for _ in range(m["num_layers"]))
        self.ln_f = nn.Parameter(torch.ones(C))
        self.lm_head = (nn.Parameter(torch.zeros(m["padded_vocab_size"], C))
                        if m["untie_embeddings_and_output_weights"] else None)
        angles = torch.outer(torch.arange(m["seq_length"], dtype=torch.float64), rope_inv_freq(m))
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, idx, targets):
        """(sum of the token losses of the (B, T) batch (fp32), the MoE layers'
        aux and z losses summed, or None)."""
        T = idx.shape[1]
        x = F.embedding(idx, self.wte)
        cos, sin, extra = self.cos[:T], self.sin[:T], None
        for blk in self.h:
            x, e = blk(x, cos, sin)
            if e is not None:
                extra = e if extra is None else extra + e
        x = F.rms_norm(x, (x.shape[-1],), self.ln_f, self.eps)
        head = self.wte if self.lm_head is None else self.lm_head
        return token_loss(F.linear(x, head), targets, self.V), extra


def build_model(c, gemm=None, compute_dtype=torch.float32):
    if c["model"]["arch"] == "llama":
        return Llama(c, gemm, compute_dtype)
    return GPT(c)


# ---- grouped GEMM ------------------------------------------------------------------
def grouped_gemm(device, dtype):
    """(Grouped(torch's grouped GEMM, row alignment), "") when it computes an MoE
    layer's jagged GEMMs on this device and dtype, forward and backward:
    checked here against one matmul per group, with an empty group, first
    with group sizes that are no multiple of anything and the last group
    ending at the last row, else with groups starting at multiples of 16 and
    spare rows after them (what grouped GEMM kernels may ask for); else
    (None, why not)."""
    mm = getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)
    if mm is None:
        return None, f"torch {torch.__version__} has no grouped_mm"
    why = ""
    for align, sizes, rows in ((1, [5, 0, 19, 8], 32), (16, [16, 0, 32, 16], 112)):
        why = _grouped_mm_error(mm, device, dtype, sizes, rows)
        if not why:
            return Grouped(mm, align), ""
    return None, why


def _grouped_mm_error(mm, device, dtype, sizes, rows):
    """What is wrong with mm on groups `sizes` of a rows-row operand, or ""."""
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(rows, 64, generator=g)
    x[sum(sizes):] = 0
    w = torch.randn(len(sizes), 48, 64, generator=g) / 8
    dy = torch.randn(rows, 48, generator=g)
    try:
        xd = x.to(device, dtype).requires_grad_()
        wd = w.to(device, dtype).requires_grad_()
        offs = torch.tensor(sizes, device=device).cumsum(0).to(torch.int32)
        y = mm(xd, wd.transpose(-2, -1), offs=offs)[:sum(sizes)]
        y.backward(dy[:sum(sizes)].to(device, dtype))
        if device.type == "cuda":
            torch.cuda.synchronize()
    except (RuntimeError, TypeError, NotImplementedError) as e:
        return f"grouped_mm failed here: {(str(e).splitlines() or [''])[0][:200]}"
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    yr = torch.cat([xe @ wr[e].t() for e, xe in enumerate(xr[:sum(sizes)].split(sizes))])
    yr.backward(dy[:sum(sizes)])
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
    for name, a, b in (("output", y, yr), ("input gradient", xd.grad, xr.grad),
                       ("weight gradient", wd.grad, wr.grad)):
        err = ((a.float().cpu() - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()
        if not err <= tol:
            return f"grouped_mm's {name} is off by {err:.3g} (relative to its largest entry)"
    return ""


# ---- init and checkpoints ----------------------------------------------------------
def _normal(p, g, std):
    p.copy_(torch.randn(p.shape, generator=g, device=p.device) * std)


def random_init(model, c):
    """lattice's distributions (not its values): normal(0, init_method_std),
    the residual output projections std / sqrt(2L); biases 0, norms 1; padded
    vocabulary rows 0."""
    m = c["model"]
    dev = model.wte.device
    g = torch.Generator(device=dev).manual_seed(c["train"]["seed"])
    std = m["init_method_std"]
    proj_std = std / math.sqrt(2.0 * m["num_layers"])
    V = m["vocab_size"]
    with torch.no_grad():
        for t in (model.wte, getattr(model, "lm_head", None)):
            if t is not None:
                t.zero_()
                _normal(t[:V], g, std)
        if isinstance(model, GPT):
            _normal(model.wpe, g, std)
            for blk in model.h:
                for lin, s in ((blk.qkv, std), (blk.proj, proj_std), (blk.fc, std),
                               (blk.fc2, proj_std)):
                    _normal(lin.weight, g, s)
                    lin.bias.zero_()
                for ln in (blk.ln_1, blk.ln_2):
                    ln.weight.fill_(1.0)
                    ln.bias.zero_()
            model.ln_f.weight.fill_(1.0)
            model.ln_f.bias.zero_()
            return
        for blk in model.h:
            mlp = blk.moe if blk.moe is not None else blk
            tensors = [(blk.qkv.weight, std), (blk.proj.weight, proj_std)]
            if blk.moe is not None:
                tensors += [(mlp.router, std), (mlp.gate_up, std), (mlp.down, proj_std)]
            else:
                tensors += [(blk.gate_up.weight, std), (blk.down.weight, proj_std)]
            for t, s in tensors:
                _normal(t, g, s)
            blk.ln_1.fill_(1.0)
            blk.ln_2.fill_(1.0)
        model.ln_f.fill_(1.0)


def read_safetensors(path):
    """{name: fp32 tensor} of a safetensors file of F32 tensors (what lattice
    export writes); a small reader, so the safetensors package is not needed."""
    try:
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            data = bytearray(f.read())
    except (OSError, ValueError, struct.error) as e:
        raise InputError(f"{path}: cannot read safetensors: {e}")
    buf = torch.frombuffer(data, dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info.get("dtype") != "F32":
            raise InputError(f"{path}: tensor {name} is {info.get('dtype')}, expected F32")
        a, b = info["data_offsets"]
        shape = info["shape"]
        if b - a != 4 * math.prod(shape) or b > len(data):
            raise InputError(f"{path}: tensor {name}: bad data offsets")
        out[name] = buf[a:b].view(torch.float32).reshape(shape).clone()
    return out


def load_export(model, c, path):
    """Load `lattice export` output into the model: Hugging Face GPT-2 names
    (Conv1D (in, out) weights) for GPT, LlamaForCausalLM's or
    MixtralForCausalLM's for Llama (q, k, v and gate, up stacked as lattice
    holds them); the embedding and LM head without the padded rows."""
    if os.path.isdir(path):
        path = os.path.join(path, "model.safetensors")
    t = read_safetensors(path)
    m = c["model"]
    C, V = m["hidden_size"], m["vocab_size"]
    used = set()

    def take(name, shape, transpose=False):
        if name not in t:
            raise InputError(f"{path}: no tensor {name}")
        x = t[name]
        if transpose:
            x = x.t()
        if tuple(x.shape) != tuple(shape):
            raise InputError(f"{path}: {name} has shape {tuple(t[name].shape)}, the config "
                             f"needs {tuple(shape)}{' (transposed)' if transpose else ''}")
        used.add(name)
        return x

    def cat(names, shapes):
        return torch.cat([take(n, s) for n, s in zip(names, shapes)])

    with torch.no_grad():
        if isinstance(model, GPT):
            _load_gpt(model, take, C, V)
        else:
            _load_llama(model, m, take, cat, C, V)
    extra = sorted(set(t) - used)
    if extra:
        raise InputError(f"{path}: tensors the config has no place for (a model with more "
                         f"layers?): {', '.join(extra[:4])}")
    return path


def _load_gpt(model, take, C, V):
    model.wte.zero_()
    model.wte[:V].copy_(take("transformer.wte.weight", (V, C)))
    model.wpe.copy_(take("transformer.wpe.weight", model.wpe.shape))
    for i, blk in enumerate(model.h):
        p = f"transformer.h.{i}."
        for mod, hf in ((blk.ln_1, "ln_1"), (blk.ln_2, "ln_2")):
            mod.weight.copy_(take(p + hf + ".weight", mod.weight.shape))
            mod.bias.copy_(take(p + hf + ".bias", mod.bias.shape))
        for mod, hf in ((blk.qkv, "attn.c_attn"), (blk.proj, "attn.c_proj"),
                        (blk.fc, "mlp.c_fc"), (blk.fc2, "mlp.c_proj")):
            mod.weight.copy_(take(p + hf + ".weight", mod.weight.shape, transpose=True))
            mod.bias.copy_(take(p + hf + ".bias", mod.bias.shape))
    model.ln_f.weight.copy_(take("transformer.ln_f.weight", (C,)))
    model.ln_f.bias.copy_(take("transformer.ln_f.bias", (C,)))


def _load_llama(model, m, take, cat, C, V):
    HD = m["kv_channels"]
    Q, KV = m["num_attention_heads"] * HD, m["num_query_groups"] * HD
    model.wte.zero_()
    model.wte[:V].copy_(take("model.embed_tokens.weight", (V, C)))
    if model.lm_head is not None:
        model.lm_head.zero_()
        model.lm_head[:V].copy_(take("lm_head.weight", (V, C)))
    for i, blk in enumerate(model.h):
        p = f"model.layers.{i}."
        blk.ln_1.copy_(take(p + "input_layernorm.weight", (C,)))
        blk.ln_2.copy_(take(p + "post_attention_layernorm.weight", (C,)))
        blk.qkv.weight.copy_(cat([p + "self_attn." + n + "_proj.weight" for n in "qkv"],
                                 [(Q, C), (KV, C), (KV, C)]))
        blk.proj.weight.copy_(take(p + "self_attn.o_proj.weight", (C, Q)))
        if blk.moe is None:
            Fh = m["ffn_hidden_size"]
            blk.gate_up.weight.copy_(cat([p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"],
                                         [(Fh, C), (Fh, C)]))
            blk.down.weight.copy_(take(p + "mlp.down_proj.weight", (C, Fh)))
            continue
        moe, Fe = blk.moe, m["moe_ffn_hidden_size"]
        q = p + "block_sparse_moe."
        moe.router.copy_(take(q + "gate.weight", (moe.E, C)))
        for e in range(moe.E):
            x = f"{q}experts.{e}."
            moe.gate_up[e].copy_(cat([x + "w1.weight", x + "w3.weight"], [(Fe, C), (Fe, C)]))
            moe.down[e].copy_(take(x + "w2.weight", (C, Fe)))
    model.ln_f.copy_(take("model.norm.weight", (C,)))
