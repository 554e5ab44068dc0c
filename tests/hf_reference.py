#!/usr/bin/env python3
"""hf_reference.py HF_DIR LOGITS_FILE [TOL]

An independent float64 forward pass, in plain Python, of a Hugging Face
directory that `lattice export` wrote (LlamaForCausalLM, Qwen2ForCausalLM,
Qwen3ForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, MixtralForCausalLM
or GPT2LMHeadModel:
config.json and an fp32 model.safetensors), checked against the logits that
`lattice logits` printed for the same checkpoint: the first line of
LOGITS_FILE is "tokens ID...", then one line per prefix with the next-token
logits. Every position's logits must agree within TOL (default 1e-5)
relative to that position's largest |logit|. Written from the published
definitions of the two architectures (RMSNorm, rotary embeddings in the
"rotate half" form with Llama 3.1's frequency scaling, grouped-query
attention, SwiGLU; Qwen3's RMSNorm of each query and key head over head_dim
(q_norm, k_norm, epsilon rms_norm_eps) between the projection and the
rotation; Qwen2's q/k/v biases; Mixtral's sparse MoE block of SwiGLU experts
behind a softmax router whose top-k probabilities are renormalised, and
Qwen3-MoE's and Qwen2-MoE's, renormalised only with norm_topk_prob, in the
layers config.json makes sparse (not in mlp_only_layers, the layer number from
1 a multiple of decoder_sparse_step), Qwen2-MoE's adding its shared SwiGLU
expert scaled by sigmoid(shared_expert_gate . x); GPT-2's LayerNorm,
tanh GeLU and Conv1D weights), not from lattice's code. A Mixtral token whose
k-th and (k+1)-th router probabilities are within 1e-6 of each other is
reported on stderr (lattice's fp32 router could rightly choose the other).
"""
import json
import math
import struct
import sys


def load_safetensors(path):
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    out = {}
    for name, t in json.loads(raw[8:8 + n]).items():
        if name == '__metadata__':
            continue
        assert t['dtype'] == 'F32', (name, t['dtype'])
        s, e = t['data_offsets']
        flat = struct.unpack('<%df' % ((e - s) // 4), raw[8 + n + s:8 + n + e])
        shape = t['shape']
        if len(shape) == 1:
            out[name] = list(flat)
        else:
            r, c = shape
            out[name] = [list(flat[i * c:(i + 1) * c]) for i in range(r)]
    return out


def matvec(w, x):  # w (out, in) rows . x
    return [sum(a * b for a, b in zip(row, x)) for row in w]


def vecmat(x, w):  # x . w with w (in, out): GPT-2's Conv1D
    out = [0.0] * len(w[0])
    for xi, row in zip(x, w):
        for j, wij in enumerate(row):
            out[j] += xi * wij
    return out


def rmsnorm(x, w, eps):
    r = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
    return [v * r * g for v, g in zip(x, w)]


def layernorm(x, w, b, eps):
    mu = sum(x) / len(x)
    var = sum((v - mu) ** 2 for v in x) / len(x)
    r = 1.0 / math.sqrt(var + eps)
    return [(v - mu) * r * g + c for v, g, c in zip(x, w, b)]


def inv_freq(cfg, hd):
    base = cfg.get('rope_theta', 10000.0)
    f = [base ** (-2.0 * j / hd) for j in range(hd // 2)]
    sc = cfg.get('rope_scaling')
    if sc and sc.get('rope_type', sc.get('type')) == 'llama3':
        factor, lo, hi = sc['factor'], sc['low_freq_factor'], sc['high_freq_factor']
        orig = sc['original_max_position_embeddings']
        out = []
        for fj in f:
            wavelen = 2 * math.pi / fj
            if wavelen < orig / hi:
                out.append(fj)
            elif wavelen > orig / lo:
                out.append(fj / factor)
            else:
                smooth = (orig / wavelen - lo) / (hi - lo)
                out.append((1 - smooth) * fj / factor + smooth * fj)
        f = out
    return f


def rotate(x, pos, freqs):  # one head, rotate-half pairs (j, j + hd/2)
    h = len(x) // 2
    out = list(x)
    for j in range(h):
        c, s = math.cos(pos * freqs[j]), math.sin(pos * freqs[j])
        out[j] = x[j] * c - x[j + h] * s
        out[j + h] = x[j + h] * c + x[j] * s
    return out


def attend(qs, ks, vs, nh, nkv, hd):
    """Causal attention; qs[t] has nh heads, ks/vs[t] nkv heads (flat)."""
    g = nh // nkv
    outs = []
    for t in range(len(qs)):
        o = []
        for h in range(nh):
            kv = h // g
            q = qs[t][h * hd:(h + 1) * hd]
            sc = [sum(a * b for a, b in zip(q, ks[u][kv * hd:(kv + 1) * hd])) / math.sqrt(hd)
                  for u in range(t + 1)]
            m = max(sc)
            p = [math.exp(v - m) for v in sc]
            z = sum(p)
            acc = [0.0] * hd
            for u in range(t + 1):
                vu = vs[u][kv * hd:(kv + 1) * hd]
                for d in range(hd):
                    acc[d] += p[u] / z * vu[d]
            o.extend(acc)
        outs.append(o)
    return outs


def linear(w, name, h):
    """The module `name` on h: its weight, plus its bias when the files hold one
    (Llama's attention_bias and mlp_bias)."""
    y = matvec(w[name + '.weight'], h)
    b = w.get(name + '.bias')
    return y if b is None else [v + c for v, c in zip(y, b)]


def swiglu(w, p, gate, up, down, h):
    g = linear(w, p + gate, h)
    u = linear(w, p + up, h)
    return linear(w, p + down, [gi / (1.0 + math.exp(-gi)) * ui for gi, ui in zip(g, u)])


def sparse_moe(cfg, w, p, h, names=('w1', 'w3', 'w2'), renorm=True):
    """Mixtral's (and Qwen3-MoE's) sparse MoE block for one token: the router's
    softmax over all experts, the top num_experts_per_tok of it renormalised to
    sum 1 (Qwen3-MoE without norm_topk_prob: as they are), and the SwiGLU
    experts (gate, up, down: Mixtral's w1, w3, w2) weighted by those."""
    logits = matvec(w[p + 'gate.weight'], h)
    m = max(logits)
    e = [math.exp(v - m) for v in logits]
    probs = [v / sum(e) for v in e]
    order = sorted(range(len(probs)), key=lambda j: (-probs[j], j))
    k = cfg['num_experts_per_tok']
    top = order[:k]
    if k < len(order) and probs[order[k - 1]] - probs[order[k]] < 1e-6:
        print('near tie between experts %d and %d: %.3e apart' %
              (order[k - 1], order[k], probs[order[k - 1]] - probs[order[k]]), file=sys.stderr)
    z = sum(probs[j] for j in top) if renorm else 1.0
    out = [0.0] * len(h)
    for j in top:
        y = swiglu(w, p + 'experts.%d.' % j, *names, h)
        out = [o + probs[j] / z * v for o, v in zip(out, y)]
    return out


def qwen_sparse_layer(cfg, l):
    """Whether layer l (from 0) of a Qwen2-MoE or Qwen3-MoE holds the sparse MoE
    block rather than the dense MLP."""
    return l not in (cfg.get('mlp_only_layers') or []) and (l + 1) % cfg.get('decoder_sparse_step', 1) == 0


def qwen_moe(cfg, w, p, h):
    """A Qwen MoE's sparse block for one token: the experts (sparse_moe) and, in
    Qwen2-MoE, the shared expert times the sigmoid of its gate's logit."""
    f = sparse_moe(cfg, w, p, h, ('gate_proj', 'up_proj', 'down_proj'), cfg.get('norm_topk_prob', False))
    if cfg['model_type'] != 'qwen2_moe':
        return f
    g = 1.0 / (1.0 + math.exp(-matvec(w[p + 'shared_expert_gate.weight'], h)[0]))
    s = swiglu(w, p + 'shared_expert.', 'gate_proj', 'up_proj', 'down_proj', h)
    return [a + g * b for a, b in zip(f, s)]


def llama_logits(cfg, w, tokens):
    C, L = cfg['hidden_size'], cfg['num_hidden_layers']
    nh, nkv = cfg['num_attention_heads'], cfg.get('num_key_value_heads', cfg['num_attention_heads'])
    hd, eps = cfg.get('head_dim', C // nh), cfg['rms_norm_eps']
    freqs = inv_freq(cfg, hd)
    xs = [list(w['model.embed_tokens.weight'][t]) for t in tokens]
    for l in range(L):
        p = 'model.layers.%d.' % l
        hs = [rmsnorm(x, w[p + 'input_layernorm.weight'], eps) for x in xs]
        qs, ks, vs = [], [], []
        qwen3 = cfg.get('model_type') in ('qwen3', 'qwen3_moe')
        qn = w[p + 'self_attn.q_norm.weight'] if qwen3 else None
        kn = w[p + 'self_attn.k_norm.weight'] if qwen3 else None
        for t, h in enumerate(hs):
            q = linear(w, p + 'self_attn.q_proj', h)
            k = linear(w, p + 'self_attn.k_proj', h)
            qh = [q[i * hd:(i + 1) * hd] for i in range(nh)]
            kh = [k[i * hd:(i + 1) * hd] for i in range(nkv)]
            if qwen3:
                qh, kh = [rmsnorm(x, qn, eps) for x in qh], [rmsnorm(x, kn, eps) for x in kh]
            qs.append(sum((rotate(x, t, freqs) for x in qh), []))
            ks.append(sum((rotate(x, t, freqs) for x in kh), []))
            vs.append(linear(w, p + 'self_attn.v_proj', h))
        att = attend(qs, ks, vs, nh, nkv, hd)
        xs = [[a + b for a, b in zip(x, linear(w, p + 'self_attn.o_proj', o))]
              for x, o in zip(xs, att)]
        for i, x in enumerate(xs):
            h = rmsnorm(x, w[p + 'post_attention_layernorm.weight'], eps)
            if cfg.get('model_type') == 'mixtral':
                f = sparse_moe(cfg, w, p + 'block_sparse_moe.', h)
            elif cfg.get('model_type') in ('qwen2_moe', 'qwen3_moe') and qwen_sparse_layer(cfg, l):
                f = qwen_moe(cfg, w, p + 'mlp.', h)
            else:
                f = swiglu(w, p + 'mlp.', 'gate_proj', 'up_proj', 'down_proj', h)
            xs[i] = [xv + d for xv, d in zip(x, f)]
    head = w.get('lm_head.weight', w['model.embed_tokens.weight'])
    return [matvec(head, rmsnorm(x, w['model.norm.weight'], eps)) for x in xs]


def gelu(x):
    return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt2_logits(cfg, w, tokens):
    C, L, nh = cfg['n_embd'], cfg['n_layer'], cfg['n_head']
    hd, eps = C // nh, cfg.get('layer_norm_epsilon', 1e-5)
    xs = [[a + b for a, b in zip(w['transformer.wte.weight'][t], w['transformer.wpe.weight'][i])]
          for i, t in enumerate(tokens)]
    for l in range(L):
        p = 'transformer.h.%d.' % l
        qkv = []
        for x in xs:
            h = layernorm(x, w[p + 'ln_1.weight'], w[p + 'ln_1.bias'], eps)
            qkv.append([a + b for a, b in zip(vecmat(h, w[p + 'attn.c_attn.weight']),
                                               w[p + 'attn.c_attn.bias'])])
        att = attend([r[:C] for r in qkv], [r[C:2 * C] for r in qkv], [r[2 * C:] for r in qkv],
                     nh, nh, hd)
        for i, o in enumerate(att):
            pr = vecmat(o, w[p + 'attn.c_proj.weight'])
            xs[i] = [x + a + b for x, a, b in zip(xs[i], pr, w[p + 'attn.c_proj.bias'])]
            h = layernorm(xs[i], w[p + 'ln_2.weight'], w[p + 'ln_2.bias'], eps)
            f = [gelu(a + b) for a, b in zip(vecmat(h, w[p + 'mlp.c_fc.weight']),
                                             w[p + 'mlp.c_fc.bias'])]
            pr = vecmat(f, w[p + 'mlp.c_proj.weight'])
            xs[i] = [x + a + b for x, a, b in zip(xs[i], pr, w[p + 'mlp.c_proj.bias'])]
    head = w.get('lm_head.weight', w['transformer.wte.weight'])
    return [matvec(head, layernorm(x, w['transformer.ln_f.weight'], w['transformer.ln_f.bias'],
                                   eps)) for x in xs]


def main(argv):
    hf, lg = argv[1], argv[2]
    tol = float(argv[3]) if len(argv) > 3 else 1e-5
    cfg = json.load(open(hf + '/config.json'))
    w = load_safetensors(hf + '/model.safetensors')
    lines = open(lg).read().split('\n')
    assert lines[0].startswith('tokens '), lines[0][:40]
    tokens = [int(t) for t in lines[0].split()[1:]]
    got = [[float(v) for v in ln.split()] for ln in lines[1:1 + len(tokens)]]
    arch = cfg['architectures'][0]
    ref = (gpt2_logits if arch == 'GPT2LMHeadModel' else llama_logits)(cfg, w, tokens)
    worst = 0.0
    for pos, (r, g) in enumerate(zip(ref, got)):
        assert len(r) == len(g), ('vocabulary', len(r), len(g))
        scale = max(abs(v) for v in r)
        err = max(abs(a - b) for a, b in zip(r, g)) / scale
        assert err <= tol, f"position {pos}: logits differ by {err:.3e} of the largest (tol {tol:g})"
        worst = max(worst, err)
    print(f"{arch}: {len(tokens)} positions x {len(ref[0])} logits, max relative difference {worst:.2e}")


if __name__ == '__main__':
    try:
        main(sys.argv)
    except AssertionError as e:
        sys.exit(f"reference disagrees: {e}")
