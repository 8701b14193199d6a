"""relpos.opennmt without OpenNMT-py: a checkpoint dict with OpenNMT-py
3.5's tensor names and options (random values) imports into a relpos
seq2seq model that uses every tensor, with the residual-stream scaling the
module documents; unsupported options are refused by name.
scripts/test-opennmt.sh runs the peer test against OpenNMT-py itself."""

import math

import numpy as np
import pytest

from relpos import _relpos_ext as ext
from relpos import opennmt as ro

D, H, FF, K, V = 16, 2, 32, 2, 14


def _opt(**over):
    opt = dict(encoder_type="transformer", decoder_type="transformer",
               enc_layers=2, dec_layers=1, heads=H, hidden_size=D,
               word_vec_size=D, transformer_ff=FF, max_relative_positions=K,
               position_encoding=False, pos_ffn_activation_fn="gelu",
               layer_norm="standard", norm_eps=1e-6, parallel_residual=False,
               share_embeddings=True, share_decoder_embeddings=True,
               self_attn_type="scaled-dot-flash", num_kv=0, copy_attn=False,
               num_experts=0, lora_layers=[], relative_positions_buckets=0)
    opt.update(over)
    return opt


def _state(seed=0, **over):
    rng = np.random.default_rng(seed)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    sd, emb = {}, r(V, D)
    sd["encoder.embeddings.make_embedding.emb_luts.0.weight"] = emb
    sd["decoder.embeddings.make_embedding.emb_luts.0.weight"] = emb

    def attn(p, rel):
        for x in ("keys", "values", "query"):
            sd[f"{p}.linear_{x}.weight"] = r(D, D)
        sd[f"{p}.final_linear.weight"] = r(D, D)
        if rel:
            sd[f"{p}.relative_positions_embeddings.weight"] = r(2 * K + 1,
                                                                D // H)

    def ln(p):
        sd[p + ".weight"], sd[p + ".bias"] = r(D), r(D)

    def ff(p):
        sd[p + ".w_1.weight"], sd[p + ".w_2.weight"] = r(FF, D), r(D, FF)
        ln(p + ".layer_norm")

    for l in range(2):
        attn(f"encoder.transformer.{l}.self_attn", True)
        ff(f"encoder.transformer.{l}.feed_forward")
        ln(f"encoder.transformer.{l}.layer_norm")
    ln("encoder.layer_norm")
    p = "decoder.transformer_layers.0"
    attn(p + ".self_attn", True)
    attn(p + ".context_attn", False)
    ff(p + ".feed_forward")
    ln(p + ".layer_norm_1")
    ln(p + ".layer_norm_2")
    ln("decoder.layer_norm")
    vocab = (["<unk>", "<blank>", "<s>", "</s>"] + [str(i) for i in range(8)]
             + ["averyunlikelytoken0", "averyunlikelytoken1"])
    return {"model": sd, "generator": {"weight": emb, "bias": r(V)},
            "vocab": {"src": vocab, "tgt": vocab, "decoder_start_token": "<s>"},
            "opt": _opt(**over)}


def test_import_maps_every_tensor(tmp_path):
    st = _state()
    model = ro.import_checkpoint(st, str(tmp_path / "ck"), "s2s_reverse")
    loaded = ext.Model.load(str(tmp_path / "ck"))
    c = math.sqrt(1e-5 / 1e-6)
    emb = st["model"]["encoder.embeddings.make_embedding.emb_luts.0.weight"]
    rows = [4 + i for i in range(8)] + [2, 3]  # "0".."7", <s>, </s>
    np.testing.assert_allclose(loaded.parameter("embed.token"),
                               emb[rows] * c / math.sqrt(D), rtol=1e-6)
    np.testing.assert_allclose(loaded.parameter("head.bias"),
                               st["generator"]["bias"][rows])
    t = st["model"]["encoder.transformer.1.self_attn."
                    "relative_positions_embeddings.weight"]
    for name in ("rel_k", "rel_v"):
        np.testing.assert_array_equal(
            loaded.parameter(f"encoder.blocks.1.attn.{name}"), t)
    np.testing.assert_allclose(
        loaded.parameter("decoder.blocks.0.cross.out.weight"),
        st["model"]["decoder.transformer_layers.0.context_attn.final_linear"
                    ".weight"] * c, rtol=1e-6)
    np.testing.assert_allclose(
        loaded.parameter("decoder.final_ln.gamma"),
        st["model"]["decoder.layer_norm.weight"] * math.sqrt(D) / c,
        rtol=1e-6)
    assert not loaded.parameter("encoder.blocks.0.attn.q.bias").any()
    out = model.translate([[1, 2, 3]], beam_size=1, max_length=5)
    assert all(0 <= i < 10 for i in out[0][0])


@pytest.mark.parametrize("over, what", [
    ({"max_relative_positions": 0}, "max_relative_positions"),
    ({"max_relative_positions": -1}, "RoPE"),
    ({"pos_ffn_activation_fn": "relu"}, "pos_ffn_activation_fn"),
    ({"layer_norm": "rms"}, "layer_norm"),
    ({"parallel_residual": True}, "parallel_residual"),
    ({"share_decoder_embeddings": False}, "share_decoder_embeddings"),
    ({"num_kv": 1}, "num_kv"),
    ({"self_attn_type": "average"}, "self_attn_type"),
    ({"relative_positions_buckets": 32}, "relative_positions_buckets"),
    ({"encoder_type": "rnn"}, "encoder_type"),
])
def test_refuses_what_relpos_lacks(tmp_path, over, what):
    with pytest.raises(ro.UnsupportedModelError, match=what):
        ro.import_checkpoint(_state(**over), str(tmp_path / "ck"),
                             "s2s_reverse")
    assert not (tmp_path / "ck").exists()


def test_refuses_unmapped_tokens_and_untied_generator(tmp_path):
    st = _state()
    st["vocab"]["tgt"] = st["vocab"]["src"] = st["vocab"]["src"][:-1] + ["x"]
    with pytest.raises(ro.UnsupportedModelError, match="no relpos id"):
        ro.import_checkpoint(st, str(tmp_path / "a"), "s2s_reverse")
    st = _state()
    st["generator"]["weight"] = st["generator"]["weight"] + 1
    with pytest.raises(ro.UnsupportedModelError, match="generator.weight"):
        ro.import_checkpoint(st, str(tmp_path / "b"), "s2s_reverse")
    with pytest.raises(ro.UnsupportedModelError, match="BOS / EOS"):
        ro.import_checkpoint(_state(), str(tmp_path / "c"), "s2s_reverse",
                             [str(i) for i in range(8)] + ["</s>", "<s>"])
