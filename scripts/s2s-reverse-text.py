#!/usr/bin/env python3
"""Writes relpos's s2s_reverse task as parallel text for the peer tests
(scripts/test-opennmt.sh, scripts/test-eole.sh): train / valid / test .src
and .tgt files in the current folder, one sequence per line, symbols 0..7
separated by spaces, lengths 3..10, the target the source reversed
(5000 / 50 / 100 pairs, seed 0)."""
import random

r = random.Random(0)
for name, n in (("train", 5000), ("valid", 50), ("test", 100)):
    with open(name + ".src", "w") as fs, open(name + ".tgt", "w") as ft:
        for _ in range(n):
            x = [str(r.randrange(8)) for _ in range(r.randint(3, 10))]
            fs.write(" ".join(x) + "\n")
            ft.write(" ".join(reversed(x)) + "\n")
