#!/usr/bin/env python3
"""check_structure.py - the source tree's shape rules (docs/architecture.md):

  1. no include cycle between modules. A module is a .c/.h pair named alike
     (src/checkpoint/ckpt_state.c + include/ckpt_state.h); an internal header
     X_internal.h belongs to module X. An edge A -> B means a file of module A
     includes B's header; a cycle is a strongly connected set of two or more.
  2. no function longer than 120 lines in src/, 160 in kernels/ (a kernel's
     unrolled body reads best whole).
  3. at most 12 files directly in src/ (the rest live in a folder per concept).

Prints one line per violation and 'structure: ok' or 'structure: N problems';
exits 1 on any. --root DIR checks another tree; --report prints the longest functions and the module graph's
size as well. Run by tests/test_structure.sh (make test)."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_SRC = 120
MAX_KERNEL = 160
MAX_TOP = 12
ATTRIBUTES = {"__launch_bounds__", "__attribute__", "__declspec", "__align__"}


def files_under(folder, exts):
    out = []
    for dirpath, _, names in os.walk(os.path.join(ROOT, folder)):
        out += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(exts)]
    return sorted(out)


def module_of(path):
    stem = os.path.basename(path).rsplit(".", 1)[0]
    return stem[: -len("_internal")] if stem.endswith("_internal") else stem


def blank_comments_and_strings(text):
    """The text with comments, string and char literals blanked (newlines kept)."""
    keep_lines = lambda m: re.sub(r"[^\n]", " ", m.group(0))
    pattern = r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\''
    return re.sub(pattern, keep_lines, text, flags=re.S)


def include_graph():
    graph = {}
    for path in files_under("src", (".c", ".h")) + files_under("include", (".h",)):
        mod = module_of(path)
        targets = graph.setdefault(mod, set())
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', open(path).read(), re.M):
            dep = module_of(inc)
            if dep != mod:
                targets.add(dep)
    return graph


def cycles(graph):
    """Strongly connected components of two or more modules (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def functions(path):
    """(name, first line, length in lines) of each top-level function body."""
    text = blank_comments_and_strings(open(path, errors="replace").read())
    out, depth, line, name, start = [], 0, 1, None, 0
    for pos, ch in enumerate(text):
        if ch == "\n":
            line += 1
        elif ch == "{":
            if depth == 0:
                head = text[max(0, pos - 600):pos]
                head = re.split(r"[;}]", head)[-1]
                # attributes with arguments (nested once) are not the name
                head = re.sub(r"\b(?:%s)\s*\((?:[^()]|\([^()]*\))*\)" % "|".join(ATTRIBUTES), " ", head)
                # a function: NAME(...) then only words (qualifiers) before the
                # brace; its name is the first identifier followed by '('
                is_func = re.search(r"\w+\s*\([^{}]*\)[\w\s]*$", head)
                is_type = re.search(r"\b(struct|union|enum)\b[^(]*$|=\s*$", head)
                first = re.search(r"(\w+)\s*\(", head)
                name, start = (first.group(1), line) if is_func and not is_type else (None, 0)
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0 and name:
                out.append((name, start, line - start + 1))
                name = None
    return out


def main():
    global ROOT
    args = sys.argv[1:]
    report = "--report" in args
    if "--root" in args:
        ROOT = os.path.abspath(args[args.index("--root") + 1])
    problems = []
    graph = include_graph()
    for comp in cycles(graph):
        problems.append("include cycle between modules: " + " <-> ".join(comp))
    lengths = []
    for folder, limit, exts in (("src", MAX_SRC, (".c", ".h")),
                                ("kernels", MAX_KERNEL, (".c", ".cu", ".cuh", ".h"))):
        for path in files_under(folder, exts):
            rel = os.path.relpath(path, ROOT)
            for name, start, n in functions(path):
                lengths.append((n, rel, start, name))
                if n > limit:
                    problems.append(f"{rel}:{start}: {name} is {n} lines (limit {limit})")
    top = [n for n in os.listdir(os.path.join(ROOT, "src"))
           if os.path.isfile(os.path.join(ROOT, "src", n))]
    if len(top) > MAX_TOP:
        problems.append(f"{len(top)} files directly in src/ (limit {MAX_TOP}): {' '.join(sorted(top))}")
    if report:
        print(f"modules: {len(graph)}, edges: {sum(len(v) for v in graph.values())}")
        for n, rel, start, name in sorted(lengths, reverse=True)[:15]:
            print(f"  {n:4d} lines  {rel}:{start} {name}")
    for p in problems:
        print(p)
    print("structure: ok" if not problems else f"structure: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
