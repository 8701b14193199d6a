"""The layer loaders (relpos.hf.from_wav2vec2_bert / from_t5 /
from_wav2vec2_conformer, relpos.opennmt.from_opennmt; relpos.interop
re-exports them under their former names): weights in Hugging Face
Wav2Vec2-BERT's and OpenNMT-py's layouts (generated, with the sources' tensor names and shapes) give, through
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

from relpos import ClipBuckets, T5Buckets
from relpos import hf as rhf
from relpos import interop
from relpos import opennmt as ronmt

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
    layer = rhf.from_wav2vec2_bert(sd, H, prefix=prefix, left=left,
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
    layer = rhf.from_wav2vec2_bert(sd, H)
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
    layer = ronmt.from_opennmt(sd, H, k_max, prefix=prefix)
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
    layer = ronmt.from_opennmt(sd, H, 3)
    module = layer.to_torch_module()
    got = module(torch.from_numpy(x.astype(np.float32))).detach().numpy()
    _close(got, want, 1e-4)
    xt = torch.from_numpy(x).requires_grad_(True)
    out = layer.forward_torch(xt)
    _close(out.detach().numpy(), want, 1e-12)
    out.sum().backward()
    assert xt.grad is not None and np.isfinite(xt.grad.numpy()).all()

    sd = _hf_state(rng, "", 5, 2)
    hf = rhf.from_wav2vec2_bert(sd, H, left=5, right=2)
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
        rhf.from_wav2vec2_bert(sd, H, prefix="p.", left=32, right=8)
    with pytest.raises(KeyError, match="q.linear_q.weight"):
        rhf.from_wav2vec2_bert(sd, H, prefix="q.")
    with pytest.raises(ValueError, match="num_heads"):
        rhf.from_wav2vec2_bert(sd, 5, prefix="p.")
    with pytest.raises(ValueError, match="left"):
        rhf.from_wav2vec2_bert(sd, H, prefix="p.", left=-1)
    sd = _onmt_state(rng, "", 4)
    del sd["linear_values.bias"]
    with pytest.raises(KeyError, match="linear_values.bias"):
        ronmt.from_opennmt(sd, H, 4)
    with pytest.raises(ValueError, match="max_relative_positions = 0"):
        ronmt.from_opennmt(_onmt_state(rng, "", 4), H, 0)
    layer = ronmt.from_opennmt(_onmt_state(rng, "", 4), H, 4)
    with pytest.raises(ValueError, match=r"x must be \[B, N, 32\]"):
        layer.forward(np.zeros((2, 3, 8)))


# --- Hugging Face T5 / mT5 and Wav2Vec2-Conformer, against transformers' own
# modules (small random configs: nothing is downloaded). Each reference is
# the module itself, called as its stack calls it (T5: the stack's block-0
# position bias and an additive mask; Conformer: the encoder's relative
# sinusoids and an additive mask). float64 agrees to rounding (measured
# ~2e-15); in float32 relpos's fused kernel and torch round differently
# (measured ~2e-6 of the largest value; checked at 1e-4, gradients too).

_TOL = {"float32": 1e-4, "float64": 1e-10}


def _torch_transformers():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return torch


def _additive_mask(torch, lengths, n, dtype, causal):
    """[B, 1, Nq or 1, N]: 0 where visible, finfo.min elsewhere (what
    transformers' mask helpers give the eager attention)."""
    valid = torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]
    allowed = valid[:, None, None, :]
    if causal:
        allowed = allowed & torch.ones(n, n, dtype=torch.bool).tril()
    zero = torch.zeros((), dtype=dtype)
    return torch.where(allowed, zero, torch.finfo(dtype).min)


def _randomise(torch, module, std=0.3, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64)
                    * std)


def _t5_model(torch, mt5, dtype):
    """A 2 + 2 block T5 (or mT5) seq2seq model, eager attention, no
    dropout; every weight random, the bias tables of size ~1."""
    if mt5:  # mT5: inner_dim = 3 * 10 = 30 != d_model = 24
        from transformers import MT5Config as Config
        from transformers import MT5ForConditionalGeneration as Model
        cfg = dict(d_model=24, num_heads=3, d_kv=10,
                   relative_attention_num_buckets=16,
                   relative_attention_max_distance=12)
    else:
        from transformers import T5Config as Config
        from transformers import T5ForConditionalGeneration as Model
        cfg = dict(d_model=32, num_heads=4, d_kv=8,
                   relative_attention_num_buckets=32,
                   relative_attention_max_distance=20)
    config = Config(vocab_size=16, d_ff=16, num_layers=2,
                    num_decoder_layers=2, dropout_rate=0.0, **cfg)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = Model(config).eval().to(getattr(torch, dtype))
    _randomise(torch, model, std=cfg["d_model"] ** -0.5)
    with torch.no_grad():
        for stack in (model.encoder, model.decoder):
            stack.block[0].layer[0].SelfAttention.relative_attention_bias \
                .weight.normal_(0.0, 1.0)
    return model, config


def _grads(torch, params):
    return [None if p.grad is None else p.grad.detach().numpy().copy()
            for p in params]


def _torch_close(got, want, tol):
    got = got.detach().numpy() if hasattr(got, "detach") else got
    want = want.detach().numpy() if hasattr(want, "detach") else want
    _close(np.asarray(got, np.float64), np.asarray(want, np.float64), tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mt5", [False, True], ids=["t5", "mt5"])
@pytest.mark.parametrize("stack", ["encoder", "decoder"])
@pytest.mark.parametrize("block", [0, 1])
def test_t5_matches_transformers(dtype, mt5, stack, block):
    torch = _torch_transformers()
    model, config = _t5_model(torch, mt5, dtype)
    tdt = getattr(torch, dtype)
    blocks = getattr(model, stack).block
    hf = blocks[block].layer[0].SelfAttention
    hf0 = blocks[0].layer[0].SelfAttention
    assert hf0.is_decoder == (stack == "decoder")
    prefix = f"{stack}.block.{block}.layer.0.SelfAttention."
    layer = rhf.from_t5(model.state_dict(), config, prefix=prefix)
    nb, md = (config.relative_attention_num_buckets,
              config.relative_attention_max_distance)
    assert layer.buckets == T5Buckets(nb, md, stack == "encoder")
    assert layer.causal == (stack == "decoder") and layer.scale == 1.0
    assert layer.inner_dim == config.num_heads * config.d_kv
    assert layer.embed_dim == config.d_model

    n, lengths = 2 * md + 5, [2 * md + 5, md - 3]  # past max_distance
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, n, config.d_model, generator=g, dtype=tdt)
    w = torch.randn(2, n, config.d_model, generator=g, dtype=tdt)
    mask = _additive_mask(torch, lengths, n, tdt, causal=stack == "decoder")

    xh = x.clone().requires_grad_(True)
    # The stack's other blocks reuse block 0's bias (computed with grad).
    bias = hf0.compute_bias(n, n) if block else None
    want = hf(xh, mask=mask, position_bias=bias)[0]
    (want * w).sum().backward()
    tol = _TOL[dtype]

    _close(layer.forward(x.numpy(), key_lengths=lengths),
           want.detach().numpy(), tol)
    xr = x.clone().requires_grad_(True)
    got = layer.forward_torch(xr, key_lengths=lengths)
    _torch_close(got, want, tol)
    (got * w).sum().backward()
    _torch_close(xr.grad, xh.grad, tol)

    # mT5's inner width differs from d_model: the module's head_dim.
    m = layer.to_torch_module(dtype=tdt)
    assert (m.scheme, m.causal, m.num_buckets, m.bucket_max_distance) == \
        ("t5", stack == "decoder", nb, md)
    assert (m.head_dim, m.scale) == (config.d_kv, 1.0)
    assert m.q_proj.bias is None
    xm = x.clone().requires_grad_(True)
    got = m(xm, key_lengths=lengths)
    _torch_close(got, want, tol)
    (got * w).sum().backward()
    _torch_close(xm.grad, xh.grad, tol)
    for ours, theirs in ((m.q_proj, hf.q), (m.k_proj, hf.k),
                         (m.v_proj, hf.v), (m.out_proj, hf.o)):
        assert torch.equal(ours.weight.detach(), theirs.weight.detach())
        _torch_close(ours.weight.grad, theirs.weight.grad, tol)
    _torch_close(m.t5_bias.grad.T, hf0.relative_attention_bias.weight.grad,
                 tol)


def test_t5_config_dict_and_keywords():
    torch = _torch_transformers()
    model, config = _t5_model(torch, False, "float64")
    sd = model.state_dict()
    prefix = "decoder.block.1.layer.0.SelfAttention."
    a = rhf.from_t5(sd, config, prefix=prefix)
    # config.json as a dict, or no config at all: the same layer.
    b = rhf.from_t5(sd, config.to_dict(), prefix=prefix)
    c = rhf.from_t5(sd, prefix=prefix, num_heads=4, max_distance=20)
    for other in (b, c):
        assert other.buckets == a.buckets == T5Buckets(32, 20, False)
        assert np.array_equal(other.score_bias, a.score_bias)
    # The table is block 0's, transposed to [H, nb].
    table = sd["decoder.block.0.layer.0.SelfAttention."
               "relative_attention_bias.weight"].numpy()
    assert np.array_equal(a.score_bias, table.T)
    # is_decoder overrides the prefix's stack; bias_prefix the table's place.
    d = rhf.from_t5(sd, config, prefix=prefix, is_decoder=False,
                        bias_prefix="encoder.block.0.layer.0.SelfAttention.")
    assert d.buckets.bidirectional and not d.causal
    # A bare layer (no block in the prefix) holds its own table.
    hf = model.encoder.block[0].layer[0].SelfAttention
    own = {"attn." + k: v for k, v in hf.state_dict().items()}
    e = rhf.from_t5(own, config, prefix="attn.")
    assert e.buckets.bidirectional and e.causal is False
    x = np.random.default_rng(0).normal(0, 1, (1, 9, 32))
    with torch.no_grad():
        want = hf(torch.from_numpy(x))[0].numpy()
    _close(e.forward(x), want, 1e-10)


def test_t5_errors_name_the_tensor():
    torch = _torch_transformers()
    model, config = _t5_model(torch, False, "float32")
    sd = dict(model.state_dict())
    p1 = "encoder.block.1.layer.0.SelfAttention."
    with pytest.raises(ValueError, match="EncDecAttention"):
        rhf.from_t5(sd, config,
                        prefix="decoder.block.0.layer.1.EncDecAttention.")
    with pytest.raises(ValueError, match="num_heads"):
        rhf.from_t5(sd, prefix=p1)
    with pytest.raises(ValueError, match=r"'encoder.block.1.layer.0."
                       r"SelfAttention.q.weight' has shape \(32, 32\), "
                       r"expected \(20, 32\)"):
        rhf.from_t5(sd, config, prefix=p1, d_kv=5)
    with pytest.raises(ValueError, match=r"relative_attention_bias.weight' "
                       r"has shape \(32, 4\), expected \(16, 4\)"):
        rhf.from_t5(sd, config, prefix=p1, num_buckets=16)
    with pytest.raises(ValueError, match="num_buckets"):
        rhf.from_t5(sd, config, prefix=p1, num_buckets=2)
    bad = dict(sd)
    del bad["encoder.block.0.layer.0.SelfAttention.relative_attention_bias"
            ".weight"]
    with pytest.raises(KeyError, match="encoder.block.0.layer.0."
                       "SelfAttention.relative_attention_bias.weight"):
        rhf.from_t5(bad, config, prefix=p1)
    bad = dict(sd)
    bad[p1 + "o.weight"] = bad[p1 + "o.weight"][:, :16]
    with pytest.raises(ValueError, match=r"o.weight' has shape \(32, 16\)"):
        rhf.from_t5(bad, config, prefix=p1)
    with pytest.raises(KeyError, match="nope.q.weight"):
        rhf.from_t5(sd, config, prefix="nope.")
    # Bucket direction and mask must agree for the module.
    layer = rhf.from_t5(sd, config, prefix=p1)
    with pytest.raises(ValueError, match="bidirectional.*causal"):
        layer.to_torch_module(causal=True)
    with pytest.raises(ValueError, match=r"x must be \[B, N, 32\]"):
        layer.forward(np.zeros((1, 3, 30)))


def _conformer(torch, dtype, e=32, h=4):
    from transformers import Wav2Vec2ConformerConfig
    from transformers.models.wav2vec2_conformer import \
        modeling_wav2vec2_conformer as hf
    config = Wav2Vec2ConformerConfig(
        hidden_size=e, num_attention_heads=h, intermediate_size=16,
        position_embeddings_type="relative", max_source_positions=64,
        attention_dropout=0.0)
    config._attn_implementation = "eager"
    attn = hf.Wav2Vec2ConformerSelfAttention(config).eval()
    _randomise(torch, attn, std=e ** -0.5)
    with torch.no_grad():  # zeros at init: make both biases count
        attn.pos_bias_u.normal_(0.0, 0.5)
        attn.pos_bias_v.normal_(0.0, 0.5)
    pe = hf.Wav2Vec2ConformerRelPositionalEmbedding(config)
    return config, attn.to(getattr(torch, dtype)), pe


def _hf_rel_sinusoids(torch, n, e):
    """Hugging Face's relative encodings for n frames, [1, 2n - 1, e]
    (row m: distance i - j = n - 1 - m; pe[2t] = sin, pe[2t+1] = cos),
    written out in float64 (transformers computes them in float32)."""
    x = torch.arange(n - 1, -n, -1, dtype=torch.float64)[:, None]
    f = torch.exp(torch.arange(0, e, 2, dtype=torch.float64) *
                  -(np.log(10000.0) / e))
    pe = torch.zeros(2 * n - 1, e, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(x * f)
    pe[:, 1::2] = torch.cos(x * f)
    return pe[None]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_wav2vec2_conformer_matches_transformers(dtype):
    torch = _torch_transformers()
    e, h, n = 32, 4, 23
    config, hf, pe_module = _conformer(torch, dtype, e, h)
    tdt = getattr(torch, dtype)
    prefix = "wav2vec2.encoder.layers.2.self_attn."
    sd = {prefix + k: v for k, v in hf.state_dict().items()}
    layer = rhf.from_wav2vec2_conformer(sd, config, prefix=prefix)
    assert layer.scheme == "xl" and layer.buckets is None
    # linear_pos's input columns, from interleaved sin/cos to sines first.
    w = hf.linear_pos.weight.detach().numpy()
    assert np.array_equal(layer.xl_weight[:, :e // 2], w[:, 0::2])
    assert np.array_equal(layer.xl_weight[:, e // 2:], w[:, 1::2])
    assert np.array_equal(layer.xl_u, hf.pos_bias_u.detach().numpy())
    assert np.array_equal(layer.xl_v, hf.pos_bias_v.detach().numpy())

    lengths = [n, n - 9]
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, n, e, generator=g, dtype=tdt)
    wt = torch.randn(2, n, e, generator=g, dtype=tdt)
    pe = pe_module(x)  # transformers' own encodings, float32
    ours = _hf_rel_sinusoids(torch, n, e)
    assert pe.shape == ours.shape
    _torch_close(pe, ours, 1e-5)  # the layout, in transformers' float32
    if dtype == "float64":
        pe = ours.to(tdt)  # the same encodings, without float32 rounding
    mask = _additive_mask(torch, lengths, n, tdt, causal=False)
    xh = x.clone().requires_grad_(True)
    want = hf(xh, attention_mask=mask, relative_position_embeddings=pe)[0]
    (want * wt).sum().backward()
    tol = _TOL[dtype]

    _close(layer.forward(x.numpy(), key_lengths=lengths),
           want.detach().numpy(), tol)
    xr = x.clone().requires_grad_(True)
    got = layer.forward_torch(xr, key_lengths=lengths)
    _torch_close(got, want, tol)
    (got * wt).sum().backward()
    _torch_close(xr.grad, xh.grad, tol)

    m = layer.to_torch_module(dtype=tdt)
    assert m.scheme == "xl" and not m.causal
    xm = x.clone().requires_grad_(True)
    got = m(xm, key_lengths=lengths)
    _torch_close(got, want, tol)
    (got * wt).sum().backward()
    _torch_close(xm.grad, xh.grad, tol)
    for ours_p, theirs in ((m.q_proj, hf.linear_q), (m.k_proj, hf.linear_k),
                           (m.v_proj, hf.linear_v),
                           (m.out_proj, hf.linear_out)):
        _torch_close(ours_p.weight.grad, theirs.weight.grad, tol)
        _torch_close(ours_p.bias.grad, theirs.bias.grad, tol)
    perm = np.concatenate([np.arange(0, e, 2), np.arange(1, e, 2)])
    _torch_close(m.xl_w.grad, hf.linear_pos.weight.grad[:, perm], tol)
    _torch_close(m.xl_u.grad, hf.pos_bias_u.grad, tol)
    _torch_close(m.xl_v.grad, hf.pos_bias_v.grad, tol)


def test_wav2vec2_conformer_u_and_v_are_not_interchangeable():
    # pos_bias_u is the content bias, pos_bias_v the position bias: loading
    # them swapped gives another layer (so the test above tells them apart).
    torch = _torch_transformers()
    config, hf, pe_module = _conformer(torch, "float64")
    sd = dict(hf.state_dict())
    layer = rhf.from_wav2vec2_conformer(sd, 4)
    swapped = layer._replace(xl_u=layer.xl_v, xl_v=layer.xl_u)
    x = np.random.default_rng(4).normal(0, 1, (1, 11, 32))
    pe = _hf_rel_sinusoids(torch, 11, 32)
    with torch.no_grad():
        want = hf(torch.from_numpy(x), relative_position_embeddings=pe)[0]
    _close(layer.forward(x), want.numpy(), 1e-10)
    assert np.abs(swapped.forward(x) - want.numpy()).max() > 1e-3


def test_wav2vec2_conformer_errors_name_the_tensor():
    torch = _torch_transformers()
    config, hf, _ = _conformer(torch, "float32")
    sd = {"p." + k: v for k, v in hf.state_dict().items()}
    bad = dict(sd)
    del bad["p.pos_bias_v"]
    with pytest.raises(KeyError, match="p.pos_bias_v"):
        rhf.from_wav2vec2_conformer(bad, 4, prefix="p.")
    bad = dict(sd)
    bad["p.linear_pos.weight"] = bad["p.linear_pos.weight"][:16]
    with pytest.raises(ValueError, match=r"'p.linear_pos.weight' has shape "
                       r"\(16, 32\), expected \(32, 32\)"):
        rhf.from_wav2vec2_conformer(bad, 4, prefix="p.")
    with pytest.raises(ValueError, match=r"'p.pos_bias_u' has shape "
                       r"\(4, 8\), expected \(8, 4\)"):
        rhf.from_wav2vec2_conformer(sd, 8, prefix="p.")
    with pytest.raises(KeyError, match="q.linear_q.weight"):
        rhf.from_wav2vec2_conformer(sd, 4, prefix="q.")
    rotary = config.to_dict()
    rotary["position_embeddings_type"] = "rotary"
    with pytest.raises(ValueError, match="rotary"):
        rhf.from_wav2vec2_conformer(sd, rotary, prefix="p.")
    with pytest.raises(ValueError, match="num_heads"):
        rhf.from_wav2vec2_conformer(sd, 0, prefix="p.")


# --- one home per framework; relpos.interop only re-exports


def test_each_framework_has_one_home():
    import relpos
    from relpos import _convert, ctranslate2
    for name in ("from_t5", "from_wav2vec2_bert", "from_wav2vec2_conformer"):
        assert getattr(interop, name) is getattr(rhf, name)
        assert getattr(rhf, name).__module__ == "relpos.hf"
    assert interop.from_opennmt is ronmt.from_opennmt
    assert ronmt.from_opennmt.__module__ == "relpos.opennmt"
    assert interop.LoadedAttention is rhf.LoadedAttention \
        is ronmt.LoadedAttention is _convert.LoadedAttention
    # One UnsupportedModelError, a ValueError, for every converter.
    assert ronmt.UnsupportedModelError is ctranslate2.UnsupportedModelError \
        is _convert.UnsupportedModelError
    assert issubclass(_convert.UnsupportedModelError, ValueError)
    # interop has no code of its own: every public name is another module's.
    for name in interop.__all__:
        assert getattr(interop, name).__module__ != "relpos.interop"
    assert relpos.interop is interop


def test_messages_name_the_loader():
    rng = np.random.default_rng(5)
    with pytest.raises(ValueError, match=r"^relpos\.opennmt\.from_opennmt: "
                       r"num_heads must be >= 1 \(got 0\)$"):
        ronmt.from_opennmt(_onmt_state(rng, "", 4), 0, 4)
    with pytest.raises(KeyError, match=r"relpos\.hf\.from_wav2vec2_bert: "
                       r"Wav2Vec2-BERT state_dict has no tensor"):
        rhf.from_wav2vec2_bert({}, H)
    with pytest.raises(ValueError, match=r"^relpos\.hf\.from_t5: from_t5 "
                       r"needs num_heads"):
        rhf.from_t5({})
    layer = ronmt.from_opennmt(_onmt_state(rng, "", 4), H, 4)
    assert layer.source == "OpenNMT-py" and type(layer.source) is str


# --- relpos's lazily imported submodules as attributes


def test_submodules_are_attributes_in_a_fresh_interpreter():
    import os
    import subprocess
    import sys

    import relpos
    root = os.path.dirname(os.path.dirname(relpos.__file__))
    code = (
        "import sys, relpos\n"
        "assert 'relpos.interop' not in sys.modules\n"
        "f = relpos.interop.from_opennmt\n"
        "assert f.__module__ == 'relpos.opennmt'\n"
        "assert relpos.opennmt.__name__ == 'relpos.opennmt'\n"
        "assert relpos.ctranslate2.__name__ == 'relpos.ctranslate2'\n"
        "assert 'interop' in dir(relpos)\n"
        "try:\n"
        "    relpos.no_such_thing\n"
        "except AttributeError as e:\n"
        "    assert str(e) == \"module 'relpos' has no attribute "
        "'no_such_thing'\", e\n"
        "else:\n"
        "    raise SystemExit('no AttributeError')\n"
        "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=root + os.pathsep +
               os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_torch_submodules_are_attributes():
    pytest.importorskip("torch")
    import relpos
    assert relpos.torch.RelativeMultiheadAttention is not None
    assert callable(relpos.distributed.context_parallel_attention)
    assert relpos.triton.__name__ == "relpos.triton"
    for name in ("torch", "distributed", "triton", "interop", "opennmt",
                 "ctranslate2"):
        assert name in dir(relpos)


def test_missing_submodule_is_an_attribute_error(monkeypatch):
    import os

    import relpos
    here = os.path.dirname(relpos.__file__)
    if os.path.exists(os.path.join(here, "hf.py")) or \
            os.path.exists(os.path.join(here, "hf", "__init__.py")):
        assert relpos.hf.__name__ == "relpos.hf"  # resolved by name
        assert "hf" in dir(relpos)
    else:
        with pytest.raises(AttributeError, match=r"relpos.hf is not part"):
            relpos.hf
        assert not hasattr(relpos, "hf") and "hf" not in dir(relpos)
    # Any listed submodule without a file: AttributeError, named.
    monkeypatch.setattr(relpos, "_LAZY_SUBMODULES",
                        relpos._LAZY_SUBMODULES + ("no_such_submodule",))
    with pytest.raises(AttributeError, match=r"has no attribute "
                       r"'no_such_submodule' \(the submodule "
                       r"relpos.no_such_submodule is not part"):
        relpos.no_such_submodule
    with pytest.raises(AttributeError,
                       match=r"^module 'relpos' has no attribute 'nope'$"):
        relpos.nope
