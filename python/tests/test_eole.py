"""relpos.opennmt.load_eole without eole: an eole 0.6 model folder
(config.json with only the non-default options, as eole writes it;
vocab.json; model.00.safetensors with eole's tensor names and the tied
tensors stored once) is written from the random OpenNMT-py checkpoint of
test_opennmt.py, and imports into the same relpos model as that checkpoint
except for the key tables, which eole adds unscaled (times sqrt(dh) in
relpos). Unsupported options are refused by name. scripts/test-eole.sh runs
the peer test against eole itself."""

import json
import math

import numpy as np
import pytest

pytest.importorskip("safetensors", reason="reading an eole folder needs the "
                    "safetensors package (scripts/test.sh installs it)")
from safetensors.numpy import save_file  # noqa: E402

from relpos import _relpos_ext as ext  # noqa: E402
from relpos import opennmt as ro  # noqa: E402
from test_opennmt import D, FF, H, K, _state  # noqa: E402

# OpenNMT-py name (after the layer index) -> eole's, per side.
BLOCK = {"encoder": {"layer_norm": "input_layernorm",
                     "feed_forward.layer_norm": "post_attention_layernorm"},
         "decoder": {"layer_norm_1": "input_layernorm",
                     "layer_norm_2": "precontext_layernorm",
                     "feed_forward.layer_norm": "post_attention_layernorm"}}


def _eole_name(name):
    parts = name.split(".")
    if name.startswith("encoder.embeddings."):
        return "src_emb.embeddings.weight"
    if name.startswith("decoder.embeddings."):
        return None  # tied: stored once, as src_emb
    if parts[1] in ("transformer", "transformer_layers") and len(parts) > 3:
        rest = ".".join(parts[3:])
        for onmt, eole in BLOCK[parts[0]].items():
            if rest.startswith(onmt + "."):
                rest = eole + rest[len(onmt):]
        rest = rest.replace("feed_forward.w_1", "mlp.gate_up_proj")
        rest = rest.replace("feed_forward.w_2", "mlp.down_proj")
        return f"{parts[0]}.transformer_layers.{parts[2]}.{rest}"
    return name


def _eole_folder(path, model=None, tensors=None):
    st = _state()
    out = {}
    for name, value in st["model"].items():
        e = _eole_name(name)
        if e is not None:
            out[e] = np.ascontiguousarray(value)
    out["generator.bias"] = st["generator"]["bias"]  # weight: tied
    out["decoder.transformer_layers.0.layer_scalar"] = np.ones(1, np.float32)
    out.update(tensors or {})
    path.mkdir()
    save_file(out, str(path / "model.00.safetensors"))
    cfg = {"architecture": "transformer", "hidden_size": D, "heads": H,
           "transformer_ff": FF, "mlp_activation_fn": "gelu",
           "share_embeddings": True, "share_decoder_embeddings": True,
           "position_encoding_type": "Relative",
           "embeddings": {"word_vec_size": D, "n_positions": K,
                          "position_encoding_type": "Relative"},
           "encoder": {"encoder_type": "transformer", "layers": 2,
                       "n_positions": K},
           "decoder": {"decoder_type": "transformer", "layers": 1,
                       "n_positions": K}}
    cfg.update(model or {})
    (path / "config.json").write_text(json.dumps({"model": cfg}))
    (path / "vocab.json").write_text(json.dumps(st["vocab"]))
    return st


def test_imports_as_the_opennmt_checkpoint_with_scaled_key_tables(tmp_path):
    st = _eole_folder(tmp_path / "eole")
    ro.import_checkpoint(ro.load_eole(str(tmp_path / "eole")),
                         str(tmp_path / "a"), "s2s_reverse")
    ro.import_checkpoint(st, str(tmp_path / "b"), "s2s_reverse")
    a = ext.Model.load(str(tmp_path / "a"))
    b = ext.Model.load(str(tmp_path / "b"))
    assert a.parameter_names() == b.parameter_names()
    for name in b.parameter_names():
        want = b.parameter(name)
        if name.endswith(".rel_k"):
            want = want * math.sqrt(D / H)
        np.testing.assert_allclose(a.parameter(name), want, rtol=1e-6,
                                   err_msg=name)


def test_command_line_reads_a_folder(tmp_path, capsys):
    _eole_folder(tmp_path / "eole")
    assert ro.main([str(tmp_path / "eole"), str(tmp_path / "ck"),
                    "--task", "s2s_reverse"]) == 0
    assert (tmp_path / "ck" / "config.json").is_file()


@pytest.mark.parametrize("model, what", [
    ({"position_encoding_type": "Rotary",
      "encoder": {"layers": 2, "position_encoding_type": "Rotary"}},
     "position_encoding_type"),
    ({"mlp_activation_fn": None}, "pos_ffn_activation_fn"),
    ({"architecture": "transformer_lm"}, "architecture"),
    ({"share_decoder_embeddings": False}, "share_decoder_embeddings"),
    ({"decoder": {"layers": 1, "n_positions": K + 1}}, "n_positions"),
    ({"heads_kv": 1}, "num_kv"),
    ({"query_norm": True}, "query_norm"),
])
def test_refuses_what_relpos_lacks(tmp_path, model, what):
    if model.get("mlp_activation_fn", "") is None:
        model = {}  # eole's default activation, relu: left out of config
        _eole_folder(tmp_path / "eole", model)
        cfg = json.loads((tmp_path / "eole" / "config.json").read_text())
        del cfg["model"]["mlp_activation_fn"]
        (tmp_path / "eole" / "config.json").write_text(json.dumps(cfg))
    else:
        _eole_folder(tmp_path / "eole", model)
    with pytest.raises(ro.UnsupportedModelError, match=what):
        ro.import_checkpoint(ro.load_eole(str(tmp_path / "eole")),
                             str(tmp_path / "ck"), "s2s_reverse")
    assert not (tmp_path / "ck").exists()


def test_refuses_a_layer_scalar_and_a_broken_folder(tmp_path):
    _eole_folder(tmp_path / "a", tensors={
        "decoder.transformer_layers.0.layer_scalar": np.full(1, 2, np.float32)})
    with pytest.raises(ro.UnsupportedModelError, match="layer_scalar"):
        ro.load_eole(str(tmp_path / "a"))
    _eole_folder(tmp_path / "b")
    (tmp_path / "b" / "vocab.json").unlink()
    with pytest.raises(ValueError, match="vocab.json"):
        ro.load_eole(str(tmp_path / "b"))
    _eole_folder(tmp_path / "c")
    (tmp_path / "c" / "config.json").write_text("[]")
    with pytest.raises(ValueError, match="model section"):
        ro.load_eole(str(tmp_path / "c"))
