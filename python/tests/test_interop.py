"""relpos.interop: weights in Hugging Face Wav2Vec2-BERT's and OpenNMT-py's
layouts (generated, with the sources' tensor names and shapes) give, through
relpos, what each source's own formula gives.

The references below re-implement each source's attention directly in numpy
float64, written from the sources' definitions (docs/interop.md) and sharing
nothing with relpos: explicit [N, N] distance matrices, table gathers,
softmax with the sources' additive / fill masks. relpos runs in float64
(reference path: agreement to ~1e-12, any convention slip is O(0.1)) and in
float32 (fused kernel: each output is a softmax-weighted sum of values of
size ~1 after projections summing E = 32 terms, so the float32 error is a
few hundred eps ~ 1e-5 normwise; checked at 1e-4).
"""

import numpy as np
import pytest

from relpos import ClipBuckets
from relpos import interop

E, H = 32, 4
D = E // H


def _linear_weights(rng, names):
    sd = {}
    for name in names:
        sd[name + ".weight"] = rng.normal(0, E ** -0.5, (E, E))
        sd[name + ".bias"] = rng.normal(0, 0.1, (E,))
    return sd


def _lin(x, sd, name):
    return x @ sd[name + ".weight"].T + sd[name + ".bias"]


def _split(x):  # [B, N, E] -> [B, H, N, D]
    b, n, _ = x.shape
    return x.reshape(b, n, H, D).transpose(0, 2, 1, 3)


def _merge(x):  # [B, H, N, D] -> [B, N, E]
    b, _, n, _ = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, n, E)


def _softmax(s):
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    return p / p.sum(axis=-1, keepdims=True)


def hf_wav2vec2_bert(sd, prefix, x, lengths, left, right):
    """Wav2Vec2BertSelfAttention.forward, position_embeddings_type =
    "relative_key": distance = j - i clamped to [-left, right], embedding row
    distance + left, scores = (q.k + q.E) / sqrt(head_size), additive mask
    (finfo.min) on padded keys."""
    b, n, _ = x.shape
    q = _split(_lin(x, sd, prefix + "linear_q"))
    k = _split(_lin(x, sd, prefix + "linear_k"))
    v = _split(_lin(x, sd, prefix + "linear_v"))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D)
    pos_l = np.arange(n)[:, None]
    pos_r = np.arange(n)[None, :]
    distance = np.clip(pos_r - pos_l, -left, right)
    emb = sd[prefix + "distance_embedding.weight"][distance + left]  # [n, n, D]
    rel = np.einsum("bhld,lrd->bhlr", q, emb)
    scores = scores + rel / np.sqrt(D)
    valid = np.arange(n)[None, :] < np.asarray(lengths)[:, None]  # [B, n]
    mask = (1.0 - valid[:, None, None, :]) * np.finfo(np.float64).min
    probs = _softmax(scores + mask)
    out = _merge(probs @ v)
    return _lin(out, sd, prefix + "linear_out")


def onmt_multi_headed(sd, prefix, x, lengths, k_max):
    """OpenNMT-py MultiHeadedAttention.forward(type="self"): query scaled by
    1/sqrt(dim_per_head); relations = embeddings(clamp(j - i, -k, k) + k) for
    both keys and values; scores masked_fill(-1e18) at padded keys."""
    b, n, _ = x.shape
    q = _split(_lin(x, sd, prefix + "linear_query")) / np.sqrt(D)
    k = _split(_lin(x, sd, prefix + "linear_keys"))
    v = _split(_lin(x, sd, prefix + "linear_values"))
    rng_vec = np.arange(n)
    range_mat = np.broadcast_to(rng_vec[:, None], (n, n)).T  # [i][j] = j
    distance = range_mat - range_mat.T                         # j - i
    rel = sd[prefix + "relative_positions_embeddings.weight"][
        np.clip(distance, -k_max, k_max) + k_max]              # [n, n, D]
    scores = q @ k.transpose(0, 1, 3, 2) + np.einsum("bhid,ijd->bhij", q, rel)
    pad = np.arange(n)[None, :] >= np.asarray(lengths)[:, None]
    scores = np.where(pad[:, None, None, :], -1e18, scores)
    attn = _softmax(scores)
    context = attn @ v + np.einsum("bhij,ijd->bhid", attn, rel)
    return _lin(_merge(context), sd, prefix + "final_linear")


def _hf_state(rng, prefix, left, right):
    sd = _linear_weights(rng, [prefix + n for n in
                               ("linear_q", "linear_k", "linear_v",
                                "linear_out")])
    sd[prefix + "distance_embedding.weight"] = rng.normal(
        0, 0.5, (left + right + 1, D))
    return sd


def _onmt_state(rng, prefix, k_max):
    sd = _linear_weights(rng, [prefix + n for n in
                               ("linear_query", "linear_keys", "linear_values",
                                "final_linear")])
    sd[prefix + "relative_positions_embeddings.weight"] = rng.normal(
        0, 0.5, (2 * k_max + 1, D))
    return sd


def _close(got, want, tol):
    err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
    assert err <= tol, err


@pytest.mark.parametrize("left,right,n", [(64, 8, 75), (5, 2, 13), (0, 3, 6)])
def test_wav2vec2_bert_matches_hf_formula(left, right, n):
    rng = np.random.default_rng(left + right)
    prefix = "encoder.layers.3.self_attn."
    sd = _hf_state(rng, prefix, left, right)
    x = rng.normal(0, 1, (2, n, E))
    lengths = [n, n - 4]  # n > left + 1 and > right + 1: both clips bite
    want = hf_wav2vec2_bert(sd, prefix, x, lengths, left, right)
    layer = interop.from_wav2vec2_bert(sd, H, prefix=prefix, left=left,
                                       right=right)
    assert layer.buckets == ClipBuckets(left, right) and layer.av is None
    for b in range(2):  # padded query rows are not compared (HF keeps junk)
        m = lengths[b]
        _close(layer.forward(x, key_lengths=lengths)[b, :m], want[b, :m], 1e-12)
        _close(layer.forward(x.astype(np.float32),
                             key_lengths=lengths)[b, :m], want[b, :m], 1e-4)


def test_wav2vec2_bert_default_clip_is_64_8():
    rng = np.random.default_rng(1)
    sd = _hf_state(rng, "", 64, 8)
    layer = interop.from_wav2vec2_bert(sd, H)
    assert layer.buckets == ClipBuckets(64, 8)
    x = rng.normal(0, 1, (1, 70, E))
    _close(layer.forward(x), hf_wav2vec2_bert(sd, "", x, [70], 64, 8), 1e-12)


@pytest.mark.parametrize("k_max,n", [(4, 11), (16, 9), (1, 5)])
def test_opennmt_matches_onmt_formula(k_max, n):
    rng = np.random.default_rng(k_max)
    prefix = "encoder.transformer.0.self_attn."
    sd = _onmt_state(rng, prefix, k_max)
    x = rng.normal(0, 1, (3, n, E))
    lengths = [n, n - 2, 1]
    want = onmt_multi_headed(sd, prefix, x, lengths, k_max)
    layer = interop.from_opennmt(sd, H, k_max, prefix=prefix)
    assert layer.ak is layer.av
    for b in range(3):
        m = lengths[b]
        _close(layer.forward(x, key_lengths=lengths)[b, :m], want[b, :m], 1e-12)
        _close(layer.forward(x.astype(np.float32),
                             key_lengths=lengths)[b, :m], want[b, :m], 1e-4)


def test_torch_paths_match():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    sd = _onmt_state(rng, "", 3)
    x = rng.normal(0, 1, (2, 9, E))
    want = onmt_multi_headed(sd, "", x, [9, 9], 3)
    layer = interop.from_opennmt(sd, H, 3)
    module = layer.to_torch_module()
    got = module(torch.from_numpy(x.astype(np.float32))).detach().numpy()
    _close(got, want, 1e-4)
    xt = torch.from_numpy(x).requires_grad_(True)
    out = layer.forward_torch(xt)
    _close(out.detach().numpy(), want, 1e-12)
    out.sum().backward()
    assert xt.grad is not None and np.isfinite(xt.grad.numpy()).all()

    sd = _hf_state(rng, "", 5, 2)
    hf = interop.from_wav2vec2_bert(sd, H, left=5, right=2)
    _close(hf.forward_torch(torch.from_numpy(x)).detach().numpy(),
           hf_wav2vec2_bert(sd, "", x, [9, 9], 5, 2), 1e-12)
    # The asymmetric clip becomes scheme shaw-asym, key table only.
    m = hf.to_torch_module()
    assert (m.scheme, m.k_left, m.k_right) == ("shaw-asym", 5, 2)
    assert m.rel_v is None
    got = m(torch.from_numpy(x.astype(np.float32))).detach().numpy()
    _close(got, hf_wav2vec2_bert(sd, "", x, [9, 9], 5, 2), 1e-4)


def test_bad_weights_are_named():
    rng = np.random.default_rng(3)
    sd = _hf_state(rng, "p.", 64, 8)
    with pytest.raises(ValueError, match="distance_embedding.weight.*expected"):
        interop.from_wav2vec2_bert(sd, H, prefix="p.", left=32, right=8)
    with pytest.raises(KeyError, match="q.linear_q.weight"):
        interop.from_wav2vec2_bert(sd, H, prefix="q.")
    with pytest.raises(ValueError, match="num_heads"):
        interop.from_wav2vec2_bert(sd, 5, prefix="p.")
    with pytest.raises(ValueError, match="left"):
        interop.from_wav2vec2_bert(sd, H, prefix="p.", left=-1)
    sd = _onmt_state(rng, "", 4)
    del sd["linear_values.bias"]
    with pytest.raises(KeyError, match="linear_values.bias"):
        interop.from_opennmt(sd, H, 4)
    with pytest.raises(ValueError, match="max_relative_positions = 0"):
        interop.from_opennmt(_onmt_state(rng, "", 4), H, 0)
    layer = interop.from_opennmt(_onmt_state(rng, "", 4), H, 4)
    with pytest.raises(ValueError, match=r"x must be \[B, N, 32\]"):
        layer.forward(np.zeros((2, 3, 8)))
