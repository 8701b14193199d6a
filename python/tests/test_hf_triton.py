"""relpos.hf's patched models on the CUDA path, without a GPU.

Inside relpos._ops.triton_on_cpu() (a test seam, honoured only under
Triton's interpreter, TRITON_INTERPRET=1) CPU tensors take the branch CUDA
tensors take: the relpos::attention_forward / relpos::rope custom ops'
"cuda" kernels, or, without custom ops (PyTorch < 2.4), relpos.torch's
CUDA branch, both of which call relpos.triton's kernels. So the patched
models of test_hf.py run here exactly the code they run on a GPU, with
Triton's interpreter standing in for the GPU (what the interpreter does
not model: the GPU's own rounding in tl.dot, launch limits, timing).

Each test builds the tiny random-weight models of test_hf.py, computes the
unpatched model's outputs (Hugging Face, CPU), then runs the patched model
on the Triton path and compares with test_hf.py's tolerance (its module
docstring derives it; float32). The `triton_path` context counts calls
into relpos.triton's attention forward and RoPE, and makes relpos's C++
kernels raise, so a test fails if dispatch fell back to the CPU op.
Tiles are 16 x 16 as in test_triton.py, so these short sequences reach
several tiles.
"""

import contextlib
import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("triton", reason="Triton is not installed: relpos.hf "
                                     "on the CUDA path is untested")
os.environ.setdefault("TRITON_INTERPRET", "1")

import relpos  # noqa: E402
import relpos.hf as H  # noqa: E402
from relpos import _ops  # noqa: E402
from relpos.triton import _attention as A  # noqa: E402
from relpos.triton import _problem, _rope  # noqa: E402
from test_hf import (build, check_grads, decoder_models,  # noqa: E402
                     left_padded, rel_err, right_padded, t5_cfg, tol,
                     w2v_bert)

SMALL = A.Blocks(far_m=16, far_n=16, band_m=16, band_n=16, diag=16,
                 diag_programs=2)
DECODERS = ("llama-gqa", "mistral", "qwen2", "gpt-neox")


@pytest.fixture(autouse=True)
def small_tiles(monkeypatch):
    if not _problem.interpreting():
        pytest.fail("test_hf_triton runs under Triton's interpreter: set "
                    "TRITON_INTERPRET=1 before Triton is imported")
    monkeypatch.setattr(A, "OVERRIDE", SMALL)


@contextlib.contextmanager
def triton_path(monkeypatch):
    """The seam, with relpos.triton's attention forward and RoPE counted
    and relpos's C++ kernels refused. Yields the counts."""
    calls = {"attention": 0, "rope": 0}

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    def refuse(*args, **kwargs):
        raise AssertionError("relpos's C++ kernel was called inside "
                             "triton_on_cpu(): dispatch fell back to the "
                             "CPU op")

    with monkeypatch.context() as m:
        m.setattr(A, "forward", counted("attention", A.forward))
        m.setattr(_rope, "rotate", counted("rope", _rope.rotate))
        for name in ("attention", "attention_backward", "rope",
                     "rope_backward"):
            m.setattr(relpos, name, refuse)
        with _ops.triton_on_cpu():
            yield calls


def test_seam_needs_the_interpreter(monkeypatch):
    monkeypatch.setattr(_problem, "interpreting", lambda: False)
    with pytest.raises(RuntimeError, match="interpreter is off"):
        with _ops.triton_on_cpu():
            pass
    x = torch.zeros(1)
    assert not _ops.on_cuda(x)


def test_seam_is_off_outside_the_block(monkeypatch):
    x = torch.zeros(1)
    with triton_path(monkeypatch):
        assert _ops.on_cuda(x)
    assert not _ops.on_cuda(x)
    assert _ops._TRITON_ON_CPU == 0


def _decoders():
    return [m for m in decoder_models() if m[0] in DECODERS]


@pytest.mark.parametrize("name,cls,cfg,d,layers", _decoders(),
                         ids=[m[0] for m in _decoders()])
def test_decoder_left_padded_generate(name, cls, cfg, d, layers,
                                      monkeypatch):
    """Left-padded batch: logits of one forward, and greedy generate with
    the KV cache (a prefill, then one-token steps at per-row offsets)."""
    model = build(cls, cfg)
    ids, mask = left_padded()
    real = mask.bool()
    steps = 4
    with torch.no_grad():
        ref = model(ids, attention_mask=mask).logits
        gen_ref = model.generate(ids, attention_mask=mask,
                                 max_new_tokens=steps, do_sample=False,
                                 pad_token_id=0, output_logits=True,
                                 return_dict_in_generate=True)
        H.patch(model)
        with triton_path(monkeypatch) as calls:
            out = model(ids, attention_mask=mask).logits
            assert calls["attention"] == layers
            gen = model.generate(ids, attention_mask=mask,
                                 max_new_tokens=steps, do_sample=False,
                                 pad_token_id=0, output_logits=True,
                                 return_dict_in_generate=True)
    # One attention call per layer and forward: the forward above, then
    # generate's prefill and steps - 1 one-token steps.
    assert calls["attention"] == layers * (1 + steps)
    assert calls["rope"] > 0
    assert rel_err(out[real], ref[real]) <= tol(torch.float32, d, layers)
    assert gen.sequences.tolist() == gen_ref.sequences.tolist()
    for got, want in zip(gen.logits, gen_ref.logits):
        assert rel_err(got, want) <= tol(torch.float32, d, layers)


def test_llama_without_custom_ops(monkeypatch):
    """PyTorch < 2.4 (no custom ops): relpos.torch's own CUDA branch, the
    one taken there, reaches relpos.triton too."""
    name, cls, cfg, d, layers = _decoders()[0]
    model = build(cls, cfg)
    ids, mask = left_padded()
    real = mask.bool()
    with torch.no_grad():
        ref = model(ids, attention_mask=mask).logits
        H.patch(model)
        monkeypatch.setattr(_ops, "ENABLED", False)
        with triton_path(monkeypatch) as calls:
            out = model(ids, attention_mask=mask).logits
    assert calls["attention"] == layers and calls["rope"] > 0
    assert rel_err(out[real], ref[real]) <= tol(torch.float32, d, layers)


def test_t5_encoder_right_padding(monkeypatch):
    model = build(transformers.T5EncoderModel, t5_cfg())
    ids, mask = right_padded()
    with torch.no_grad():
        ref = model(ids, attention_mask=mask).last_hidden_state
        H.patch(model)
        with triton_path(monkeypatch) as calls:
            out = model(ids, attention_mask=mask).last_hidden_state
    assert calls["attention"] == 2
    assert rel_err(out, ref) <= tol(torch.float32, 32, 2)


def test_wav2vec2_bert_encoder_right_padding(monkeypatch):
    model = w2v_bert()
    x = torch.randn(2, 30, 16, generator=torch.Generator().manual_seed(4))
    mask = torch.ones(2, 30, dtype=torch.long)
    mask[1, 21:] = 0
    with torch.no_grad():
        ref = model(x, attention_mask=mask).last_hidden_state
        H.patch(model)
        with triton_path(monkeypatch) as calls:
            out = model(x, attention_mask=mask).last_hidden_state
    assert calls["attention"] == 2
    assert rel_err(out, ref) <= tol(torch.float32, 32, 2)


def test_llama_training_gradients(monkeypatch):
    """The backward on the Triton path (relpos::attention_backward's and
    relpos::rope_backward's CUDA kernels): a left-padded Llama GQA loss's
    parameter gradients equal the unpatched model's (test_hf.py's
    check_grads and its bound; its unpatched reference run calls no relpos
    kernel, so the seam may stay open around both)."""
    name, cls, cfg, d, layers = _decoders()[0]
    model = build(cls, cfg)
    model.train()
    ids, mask = left_padded(n=9)
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, 1:] = labels[:, 1:].masked_fill(mask[:, :-1] == 0, -100)
    with triton_path(monkeypatch) as calls:
        check_grads(model, lambda m: m(ids, attention_mask=mask,
                                       labels=labels).loss, torch.float32)
    assert calls["attention"] == layers
