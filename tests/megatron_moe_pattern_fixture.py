#!/usr/bin/env python3
"""megatron_moe_pattern_fixture.py ARGUMENTS_PY LAYER_SPECS_PY OUT - which layers
are MoE layers for a --moe-layer-freq value, as Megatron-LM's own code decides,
for tests/test_config_moe.c (which holds lt_moe_layer_pattern to it).

ARGUMENTS_PY is megatron/training/arguments.py (moe_freq_type and
_eval_pattern, the command-line type of --moe-layer-freq) and LAYER_SPECS_PY
megatron/core/models/gpt/gpt_layer_specs.py (get_gpt_decoder_layer_specs turns
the value into one spec per layer). Both are read with Python's ast and only
those parts are run as written: the two functions, then the function's
`if isinstance(config.moe_layer_freq, int)` statement and its
`for layer_number in range(config.num_layers)` loop, with 1 for the MoE spec and
0 for the dense one. Anything either raises is an error.

Output: one case per line, "LAYERS<TAB>RESULT<TAB>TEXT": RESULT is one 0 or 1
per layer, or "error". The cases: the forms Megatron documents, edge cases of
Python's int() and eval, and RANDOM_CASES random expressions and strings of
the characters Megatron allows (lattice also allows spaces, which Megatron
refuses; test_config_moe.c covers those).
"""
import ast
import random
import re
import sys
import types

CASES = [
    (4, "1"), (4, "2"), (12, "3"), (5, "4"), (3, "7"), (1, "1"), (4, "0"), (4, ""), (4, "abc"),
    (4, "(4)"), (4, "[1,0,1,1]"), (4, "[1,0,1]"), (4, "[1,0,1,1,0]"), (4, "[1,0,2,1]"),
    (32, "([0]*3+[1]*29)"), (32, "[0]*3+[1]*29"), (12, "([1]*3+[0]*1)*3"),
    (10, "([1]*3+[0]*2)*2"), (24, "([0]+[1]*23)"), (4, "[1,0,1,1,]"), (4, "2*[1,0]"),
    (4, "(1+1)*[1,0]"), (6, "[1]*2*3"), (4, "[1,0]+[1]*0+[1,1]"), (4, "[]"), (4, "[1,0,1,1"),
    (4, "[1,0,1,1]]"), (2, "[[1],[0]]"), (4, "[01,0,1,1]"), (4, "[0,0,0,0]"),
    (4, "[1,0,1,1]*[1]"), (4, "[1,0,1,1]+1"), (4, "[1,,0,1,1]"), (4, "[,]"), (4, "()"),
    (4, "[1,0,1,1]*1"), (4, "([1,0]*2)"), (8, "(([1]*2+[0]*2)*2)"), (4, "[1]*4*1"),
    (4, "[1,0]*2+[]"), (3, "[0]+[1]+[0]"), (4, "[(1),(0),1,1]"), (4, "[1*1,0+0,1,1]"),
    (4, "[2-1,0,1,1]"), (6, "+2"), (5, "02"), (12, "1_0"), (4, "3312123123"), (1, "[3*+0]"),
    (1, "[2]*0+[1]"), (1, "[[1]]*0+[1]"), (1, "+[1]"), (4, "-2"), (4, "2.0"),
]
RANDOM_CASES = 400  # more, drawn with a fixed seed (random_cases)


def random_cases(n, seed=27):
    """Expressions of lists, '+', '*' and parentheses, and strings of the
    characters Megatron allows; num_layers is the length Python gives when it
    builds a list, else a small guess."""
    rng = random.Random(seed)
    alpha = "[]()+*,0123"

    def expr(depth=0):
        r = rng.random()
        if depth > 3 or r < 0.3:
            items = ",".join(rng.choice("0110") for _ in range(rng.randint(0, 4)))
            return "[" + items + rng.choice(["", "", ","]) + "]"
        if r < 0.5:
            return expr(depth + 1) + "+" + expr(depth + 1)
        if r < 0.7:
            return expr(depth + 1) + "*" + str(rng.randint(0, 4))
        if r < 0.8:
            return str(rng.randint(0, 3)) + "*" + expr(depth + 1)
        return "(" + expr(depth + 1) + ")"

    out = []
    for i in range(n):
        text = expr() if i % 2 == 0 else "".join(rng.choice(alpha) for _ in range(rng.randint(1, 14)))
        try:
            value = eval(text, {"__builtins__": {}})  # only the characters above
        except Exception:
            value = None
        layers = len(value) if isinstance(value, list) and 0 < len(value) <= 1024 else rng.randint(1, 8)
        out.append((layers, text))
    return out


def load_functions(path, names):
    tree = ast.parse(open(path).read())
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert {n.name for n in keep} == set(names), f"{path}: missing {names}"
    ns = {"re": re}
    exec(compile(ast.Module(body=keep, type_ignores=[]), path, "exec"), ns)
    return ns


def pattern_statements(path):
    """The if-statement that sets moe_layer_pattern and the loop that builds
    layer_specs, from get_gpt_decoder_layer_specs."""
    tree = ast.parse(open(path).read())
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        body = fn.body
        for i, st in enumerate(body):
            if isinstance(st, ast.If) and ast.unparse(st.test) == "isinstance(config.moe_layer_freq, int)":
                loop = next(s for s in body[i + 1:] if isinstance(s, ast.For)
                            and ast.unparse(s.iter) == "range(config.num_layers)")
                return compile(ast.Module(body=[st, loop], type_ignores=[]), path, "exec")
    raise SystemExit(f"{path}: no moe_layer_freq pattern statements found")


def megatron(ns, code, layers, text):
    try:
        freq = ns["moe_freq_type"](text)
        env = {"config": types.SimpleNamespace(moe_layer_freq=freq, num_layers=layers),
               "moe_layer_spec": 1, "dense_layer_spec": 0, "layer_specs": []}
        exec(code, env)
        return "".join(str(s) for s in env["layer_specs"])
    except Exception:  # whatever Megatron raises: the value is refused
        return "error"


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    ns = load_functions(sys.argv[1], ["moe_freq_type", "_eval_pattern"])
    code = pattern_statements(sys.argv[2])
    with open(sys.argv[3], "w") as out:
        out.write("# Megatron-LM --moe-layer-freq patterns (tests/megatron_moe_pattern_fixture.py)\n")
        for layers, text in CASES + random_cases(RANDOM_CASES):
            out.write(f"{layers}\t{megatron(ns, code, layers, text)}\t{text}\n")


if __name__ == "__main__":
    main()
