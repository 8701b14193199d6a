#!/usr/bin/python3
"""Writes tests/golden/position_schemes.golden: T5 buckets and ALiBi slopes.

An independent implementation of docs/math.md section 8, written from the
published formulas (not from relpos's C++):

* T5's `_relative_position_bucket` (Mesh TensorFlow `transformer_layers.py`,
  Hugging Face `modeling_t5.py`), vectorised in numpy over every distance
  r = j - i in [-2^20, 2^20], with the same float32 steps as those two:
  float32 quotient a / exact, float32 logarithm, division by
  float32(math.log(md / exact)), float32 product, truncation. The one
  deliberate choice: the float32 logarithm is the correctly rounded one,
  np.log of the float64 value rounded to float32. numpy's own float32 log is
  off by one ulp for about 3% of arguments, and at num_buckets 32, max
  distance 2^20, causal, r = -2^17 (real quotient exactly 13.0) that ulp
  moves the bucket; PyTorch's float32 log (what Hugging Face runs) agrees
  with the correctly rounded value there and at every distance checked
  (python/tests/test_position_schemes.py compares against it directly).
* ALiBi slopes for H = 1..64 from the reference code published with the
  paper (Press et al. 2022, `get_slopes`), in float64 as it runs there.

Storing 2^21 + 1 buckets per configuration would take megabytes, so each
configuration is stored run-length encoded: the first distance of every run
of equal buckets (the buckets are piecewise constant in r) and its bucket.
The C++ test (src/op/schemes/position_schemes_test.cc) expands the runs and
compares every distance.

Run with Debian's python3 (it has numpy), from the repository root:

    /usr/bin/python3 tests/golden/gen_position_schemes.py

File format (little-endian), version 1:

    8 bytes   magic b"RPSCHEM\\0"
    uint32    format version (1)
    int64     R: the distances covered are -R..R
    uint32    number of T5 configurations, then for each:
                int64 num_buckets, int64 max_distance, uint8 bidirectional,
                uint32 number of runs, then per run int64 first r, int64 bucket
    uint32    number of ALiBi head counts, then for each:
                uint32 H, then H float64 slopes (head 0 first)
"""

import math
import os
import struct

import numpy as np

MAGIC = b"RPSCHEM\0"
VERSION = 1
R = 2**20

# (num_buckets, max_distance, bidirectional). 32 / 128 is T5's (both
# directions: encoder and decoder); the others cover small and large bucket
# counts, a max distance of 2^20 (the edge of the range), an odd bucket count,
# the smallest legal sizes and max distances just above the exact range
# (exact = num_buckets / 4 bidirectional, num_buckets / 2 causal).
T5_CONFIGS = [
    (nb, md, bidirectional)
    for nb, md in [(32, 128), (32, 64), (64, 256), (128, 1024), (16, 32),
                   (8, 20), (100, 1000), (320, 800), (33, 128), (32, 2**20),
                   (6, 7), (256, 5000)]
    for bidirectional in (True, False)
] + [(4, 2, True), (2, 2, False), (48, 13, True), (48, 25, False),
     (1000, 251, True)]


def t5_buckets(r, num_buckets, max_distance, bidirectional):
    """T5 bucket of every distance in r (int64 array)."""
    ret = np.zeros_like(r)
    if bidirectional:
        num_buckets //= 2
        ret += (r > 0).astype(np.int64) * num_buckets
        n = np.abs(r)
    else:
        n = np.maximum(-r, 0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    # Only the large distances go through the logarithm (the small ones
    # would take log(0)).
    big = np.maximum(n, max_exact)
    x = big.astype(np.float32) / np.float32(max_exact)
    log_x = np.log(x.astype(np.float64)).astype(np.float32)
    scaled = (log_x / np.float32(math.log(max_distance / max_exact))
              * np.float32(num_buckets - max_exact))
    assert scaled.dtype == np.float32
    val_if_large = max_exact + scaled.astype(np.int64)  # truncation
    val_if_large = np.minimum(val_if_large, num_buckets - 1)
    return ret + np.where(is_small, n, val_if_large)


def runs(r, buckets):
    """(first r, bucket) of each maximal run of equal buckets."""
    starts = np.concatenate(([0], np.nonzero(np.diff(buckets))[0] + 1))
    return [(int(r[s]), int(buckets[s])) for s in starts]


def get_slopes(n):
    """ALiBi slopes, as in the paper's published reference code."""
    def get_slopes_power_of_2(n):
        start = (2**(-2**-(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2**math.floor(math.log2(n))
    return (get_slopes_power_of_2(closest_power_of_2)
            + get_slopes(2 * closest_power_of_2)[0::2][:n - closest_power_of_2])


def main():
    r = np.arange(-R, R + 1, dtype=np.int64)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "position_schemes.golden")
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<I", VERSION))
        f.write(struct.pack("<q", R))
        f.write(struct.pack("<I", len(T5_CONFIGS)))
        for nb, md, bidirectional in T5_CONFIGS:
            exact = (nb // 2 if bidirectional else nb) // 2
            assert exact >= 1 and md > exact, (nb, md, bidirectional)
            rl = runs(r, t5_buckets(r, nb, md, bidirectional))
            f.write(struct.pack("<qqB", nb, md, bidirectional))
            f.write(struct.pack("<I", len(rl)))
            for first, bucket in rl:
                f.write(struct.pack("<qq", first, bucket))
        heads = range(1, 65)
        f.write(struct.pack("<I", len(heads)))
        for h in heads:
            slopes = get_slopes(h)
            assert len(slopes) == h
            f.write(struct.pack("<I", h))
            f.write(struct.pack("<%dd" % h, *slopes))
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
