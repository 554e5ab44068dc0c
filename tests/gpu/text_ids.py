#!/usr/bin/env python3
"""text_ids.py OUT [FILE ...] - byte-level token ids (vocab 256) of English
text for the end-to-end GPU checks: the bytes of the FILEs (default: the GPL-3,
Apache-2.0 and GPL-2 texts Debian ships in /usr/share/common-licenses; missing
ones are skipped), or, when they hold under 100000 bytes, random words (seed 7:
a little structure, so that the loss falls). Written as one line of decimal ids
(one document) for `lattice shard --input OUT`."""
import random
import sys

LICENSES = "/usr/share/common-licenses/"
files = sys.argv[2:] or [LICENSES + n for n in ("GPL-3", "Apache-2.0", "GPL-2")]
data = b""
for path in files:
    try:
        with open(path, "rb") as f:
            data += f.read()
    except OSError:
        pass
if len(data) < 100000:
    random.seed(7)
    words = [bytes(random.randrange(97, 123) for _ in range(random.randrange(2, 9))) for _ in range(500)]
    data = b" ".join(random.choice(words) for _ in range(40000))
with open(sys.argv[1], "w") as f:
    f.write(" ".join(str(b) for b in data) + "\n")
