#!/usr/bin/env bash
# fetch_corpus.sh OUT_FILE - write >= 3 MB of real English prose to OUT_FILE.
#
# Source: the Python documentation shipped by Debian (python3.11-doc on
# bookworm; the reStructuredText sources under usr/share/doc/python3.X/html/
# _sources: tutorial, how-tos, FAQ, language reference, library docs), with
# vim-runtime's help files as a fallback. The package is fetched with
# `apt-get download` into a temporary directory and unpacked with `dpkg-deb -x`;
# nothing is installed system-wide. Markup is stripped: code samples, literal
# and doctest blocks, tables, directives and comments are dropped, inline
# roles and links reduced to their text, and paragraphs that do not read as
# prose (few words, mostly symbols) are skipped. Output: one paragraph per
# line, paragraphs separated by blank lines.
#
# An existing OUT_FILE of >= 3 MB is kept as is. Exit 1 when nothing could be fetched.
set -euo pipefail

MIN_BYTES=$((3 * 1024 * 1024))
# Tried in order; LATTICE_CORPUS_PACKAGES (space-separated) overrides the list.
read -r -a CANDIDATES <<<"${LATTICE_CORPUS_PACKAGES:-python3.11-doc python3.12-doc python3.13-doc vim-runtime}"

die() { echo "fetch_corpus: error: $*" >&2; exit 1; }

[ $# -eq 1 ] || { echo "usage: scripts/fetch_corpus.sh OUT_FILE" >&2; exit 2; }
OUT=$1

if [ -f "$OUT" ] && [ "$(stat -c %s "$OUT")" -ge "$MIN_BYTES" ]; then
  echo "fetch_corpus: $OUT already present ($(stat -c %s "$OUT") bytes)"
  exit 0
fi
for tool in apt-get dpkg-deb python3; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found (a Debian system with python3 is needed)"
done
mkdir -p "$(dirname "$OUT")"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
chmod 755 "$WORK" # lets apt's unprivileged _apt user write there (avoids a sandbox warning)
UPDATED=0

# Download package $1 into $WORK/deb; on failure run `apt-get update` once (as root) and retry.
download() {
  local pkg=$1
  rm -rf "$WORK/deb" && mkdir -p "$WORK/deb" && chmod 755 "$WORK/deb"
  if (cd "$WORK/deb" && apt-get download "$pkg") >"$WORK/apt.log" 2>&1; then
    return 0
  fi
  if [ "$UPDATED" = 0 ] && [ "$(id -u)" = 0 ]; then
    UPDATED=1
    echo "fetch_corpus: apt-get download $pkg failed; running apt-get update" >&2
    apt-get update -qq >>"$WORK/apt.log" 2>&1 || true
    (cd "$WORK/deb" && apt-get download "$pkg") >>"$WORK/apt.log" 2>&1 && return 0
  fi
  return 1
}

# Strip markup of the files under $2 (mode $1: rst | vimhelp) into $3.
extract() {
  python3 - "$1" "$2" "$3" <<'PY'
import os, re, sys

mode, root, out_path = sys.argv[1], sys.argv[2], sys.argv[3]

# Directives whose body is prose (kept); every other directive's block is dropped.
PROSE_DIRECTIVES = {
    "note", "warning", "seealso", "versionadded", "versionchanged", "deprecated",
    "deprecated-removed", "impl-detail", "tip", "important", "hint", "caution",
    "attention", "danger", "admonition", "topic", "sidebar", "rubric", "function",
    "method", "class", "attribute", "data", "exception", "decorator", "describe",
    "classmethod", "staticmethod", "module", "glossary", "only", "container",
}
ADORNMENT = re.compile(r'^([=\-~^"\'`#*+:.<>_])\1{3,}\s*$')
DIRECTIVE = re.compile(r'^\.\.\s+([\w:-]+)::')
LIST_ITEM = re.compile(r'^(?:[-*+\u2022]|#\.|\d+\.|\(?[a-zA-Z0-9]\))\s+')
FIELD = re.compile(r'^:[\w .()-]+:(\s+|$)')
TABLE = re.compile(r'^(\+[-=+]+\+?|=+(\s+=+)+)\s*$')

def clean_inline(s):
    def role(m):
        name, t = m.group(1), m.group(2)
        if '<' in t and t.endswith('>'):
            t = t[:t.index('<')].strip() or t
        t = t.lstrip('!')
        if t.startswith('~'):
            t = t[1:].split('.')[-1]
        if name in ('pep', 'rfc') and t[:1].isdigit():
            t = name.upper() + ' ' + t
        elif name in ('issue', 'gh') and t[:1].isdigit():
            t = ('bpo-' if name == 'issue' else 'gh-') + t
        return t
    s = re.sub(r':([\w:.+-]+):`([^`]*)`', role, s)
    s = re.sub(r'``([^`]*)``', r'\1', s)
    s = re.sub(r'`([^`<]*?)\s*<[^>`]*>`__?', r'\1', s)
    s = re.sub(r'`([^`]*)`_{0,2}', r'\1', s)
    s = re.sub(r'\*\*([^*]+)\*\*', r'\1', s)
    s = re.sub(r'(?<![\w*])\*([^*\s][^*]*?)\*(?![\w*])', r'\1', s)
    s = re.sub(r'\s*\[(?:#\w*|\d+)\]_', '', s)
    s = re.sub(r'\|([\w .-]+)\|', r'\1', s)
    s = re.sub(r'\\ ', '', s)
    s = re.sub(r'\\(.)', r'\1', s)
    return re.sub(r'\s+', ' ', s).strip()

def is_prose(p):
    words = p.split()
    if len(words) < 6:
        return False
    letters = sum(c.isalpha() for c in p)
    visible = sum(not c.isspace() for c in p)
    if letters < 0.7 * visible:
        return False
    code_marks = sum(p.count(t) for t in ('==', '()', '->', '>>>', '{', '}', ';', '[]', '__'))
    return code_marks <= len(words) / 8 and not p.startswith(('>>>', '$ ', '% '))

def rst_paragraphs(text):
    pars, cur = [], []
    skip_above = None      # skipping an indented block deeper than this indent
    skip_to_blank = False  # skipping a doctest / table until a blank line
    lines = text.splitlines()

    def flush():
        nonlocal skip_above
        if not cur:
            return
        p = ' '.join(x for _, x in cur)
        if p.endswith('::'):  # a literal block follows
            skip_above = cur[0][0]
            p = p[:-2].rstrip()
            p = p + ':' if p and not p.endswith(' ') and p[-1].isalnum() else p
        cur.clear()
        if p:
            pars.append(clean_inline(p))

    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if skip_to_blank:
            if stripped:
                continue
            skip_to_blank = False
        if skip_above is not None:
            if not stripped or indent > skip_above:
                continue
            skip_above = None
        if not stripped:
            flush()
            continue
        if ADORNMENT.match(stripped):
            flush()
            continue
        m = DIRECTIVE.match(stripped)
        if stripped.startswith('..'):
            flush()
            if not (m and m.group(1).split(':')[-1] in PROSE_DIRECTIVES):
                skip_above = indent  # comment, target, substitution or non-prose directive
            continue
        if stripped == '::':
            flush()
            skip_above = indent
            continue
        if stripped.startswith('>>>') or TABLE.match(stripped):
            flush()
            skip_to_blank = True
            continue
        if FIELD.match(stripped):
            flush()
            stripped = FIELD.sub('', stripped)
            if not stripped:
                continue
        elif LIST_ITEM.match(stripped):
            flush()
            stripped = LIST_ITEM.sub('', stripped)
        cur.append((indent, stripped))
    flush()
    return pars

def vimhelp_paragraphs(text):
    pars, cur, in_example = [], [], False
    def flush():
        if cur:
            p = ' '.join(cur)
            p = re.sub(r'\*[^*\s]+\*', '', p)        # tag definitions
            p = re.sub(r'\|([^|\s]+)\|', r'\1', p)   # links
            p = re.sub(r'`([^`]*)`', r'\1', p)
            pars.append(re.sub(r'\s+', ' ', p).strip())
            cur.clear()
    for line in text.splitlines():
        if in_example:
            if line.startswith('<') or (line.strip() and not line[0].isspace()):
                in_example = False
                line = line[1:] if line.startswith('<') else line
            else:
                continue
        s = line.strip()
        if not s or re.match(r'^[=\-]{5,}$', s) or s.startswith('vim:'):
            flush()
            continue
        if s.endswith('>') and (s == '>' or s.endswith(' >') or s.endswith(':>')):
            cur.append(s[:-1])
            flush()
            in_example = True
            continue
        if s.endswith('~'):  # heading
            flush()
            continue
        cur.append(s)
    flush()
    return pars

files = []
for dirpath, _, names in os.walk(root):
    for n in names:
        if (mode == 'rst' and n.endswith('.rst.txt')) or (mode == 'vimhelp' and n.endswith('.txt')):
            files.append(os.path.join(dirpath, n))
files.sort()
kept = 0
with open(out_path, 'w', encoding='utf-8') as out:
    for path in files:
        with open(path, encoding='utf-8', errors='replace') as fh:
            text = fh.read()
        pars = rst_paragraphs(text) if mode == 'rst' else vimhelp_paragraphs(text)
        for p in pars:
            if is_prose(p):
                out.write(p + '\n\n')
                kept += 1
print(f"fetch_corpus: {len(files)} files, {kept} paragraphs", file=sys.stderr)
PY
}

for pkg in "${CANDIDATES[@]}"; do
  apt-cache show "$pkg" >/dev/null 2>&1 || [ "$UPDATED" = 0 ] || continue
  echo "fetch_corpus: fetching $pkg"
  if ! download "$pkg"; then
    echo "fetch_corpus: could not download $pkg:" >&2
    tail -n 3 "$WORK/apt.log" >&2
    continue
  fi
  deb=$(ls "$WORK"/deb/*.deb 2>/dev/null | head -n 1)
  rm -rf "$WORK/x"
  dpkg-deb -x "$deb" "$WORK/x" || { echo "fetch_corpus: cannot unpack $deb" >&2; continue; }
  case $pkg in
    python3*-doc)
      src=$(ls -d "$WORK"/x/usr/share/doc/python3*/html/_sources 2>/dev/null | head -n 1)
      mode=rst ;;
    vim-runtime)
      src=$(ls -d "$WORK"/x/usr/share/vim/vim*/doc 2>/dev/null | head -n 1)
      mode=vimhelp ;;
  esac
  if [ -z "${src:-}" ]; then
    echo "fetch_corpus: $pkg holds no documentation sources where expected" >&2
    continue
  fi
  extract "$mode" "$src" "$WORK/corpus.txt"
  size=$(stat -c %s "$WORK/corpus.txt")
  if [ "$size" -lt "$MIN_BYTES" ]; then
    echo "fetch_corpus: $pkg gave only $size bytes of prose; trying the next package" >&2
    continue
  fi
  mv "$WORK/corpus.txt" "$OUT.tmp" && mv "$OUT.tmp" "$OUT"
  echo "fetch_corpus: wrote $OUT ($size bytes of prose from $pkg)"
  exit 0
done
die "could not obtain >= $MIN_BYTES bytes of prose from any of: ${CANDIDATES[*]} (no network or no apt sources?)"
