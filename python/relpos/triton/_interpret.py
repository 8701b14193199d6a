"""A correction to Triton's interpreter (TRITON_INTERPRET=1), applied only
when it is needed.

The interpreter stores bfloat16 values as their uint16 bit patterns and, in
Triton 3.9, its tl.dot (InterpreterBuilder.create_dot) multiplies those bit
patterns as integers: every bfloat16 product is garbage (float16 and float32
are right). The correction widens bfloat16 operands to float32 first, which
is exact (a bfloat16 is a truncated float32) and what the GPU's tensor cores
compute (exact products, float32 accumulation). It is installed only if a
probe shows the defect, so a Triton that fixes it is left alone.
"""

import numpy as np

_DONE = False


def _dot_is_broken(ti, tl):
    one = ti.TensorHandle(np.full((1, 1), 0x3F80, np.uint16), tl.bfloat16)
    acc = ti.TensorHandle(np.zeros((1, 1), np.float32), tl.float32)
    out = ti.interpreter_builder.create_dot(one, one, acc, None, 0)
    return float(out.data[0, 0]) != 1.0


def fix_bfloat16_dot():
    """Installs the correction once (idempotent)."""
    global _DONE
    if _DONE:
        return
    from triton.runtime import interpreter as ti
    import triton.language as tl
    if _dot_is_broken(ti, tl):
        original = ti.InterpreterBuilder.create_dot

        def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
            if a.dtype.scalar == tl.bfloat16:
                a = self.cast_impl(a, tl.float32)
            if b.dtype.scalar == tl.bfloat16:
                b = self.cast_impl(b, tl.float32)
            return original(self, a, b, d, input_precision,
                            max_num_imprecise_acc)

        ti.InterpreterBuilder.create_dot = create_dot
        assert not _dot_is_broken(ti, tl)
    _DONE = True
