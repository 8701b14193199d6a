"""relpos.hf: Hugging Face transformers models with their attention patched
onto relpos, against the same models unpatched (docs/hf.md).

Every model is built from a small config with random weights (nothing is
downloaded). Tolerance: the patched and unpatched models compute the same
function with different summation orders (fused online softmax, relpos's
RoPE angles in double). In a random-walk model of rounding, a dot product
of length d carries a relative error of about eps * sqrt(d); softmax,
normalisation and the residual stream add a few eps per layer, and each of
the L layers adds its own. The normwise bound used is

    ||patched - unpatched||_F <= C * eps * sqrt(d_model) * L * ||unpatched||_F

with C = 16 and eps the dtype's machine epsilon (float32: about 1.3e-5 for
d_model 64, L 2). A deliberately wrong setting (the other RoPE layout,
T5's bias without its scale of 1) exceeds it by orders of magnitude: see
test_wrong_settings_are_detected.
"""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import relpos.hf as H  # noqa: E402
import relpos.torch as rt  # noqa: E402

C = 16.0


def tol(dtype, d_model, layers):
    return C * torch.finfo(dtype).eps * d_model ** 0.5 * layers


def rel_err(a, b):
    return float((a - b).double().norm() / b.double().norm())


def build(cls, cfg, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    return cls(cfg).to(dtype).eval()


# --------------------------------------------------------------- configs


def llama_cfg(impl="eager", **kw):
    args = dict(vocab_size=61, hidden_size=64, intermediate_size=96,
                num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=256,
                pad_token_id=0, attention_dropout=0.0,
                attn_implementation=impl)
    args.update(kw)
    return transformers.LlamaConfig(**args)


def decoder_models():
    """(name, class, config, d_model, layers) of every decoder-only model."""
    T = transformers
    return [
        ("llama-gqa", T.LlamaForCausalLM, llama_cfg(), 64, 2),
        ("llama-sdpa", T.LlamaForCausalLM, llama_cfg("sdpa"), 64, 2),
        ("mistral", T.MistralForCausalLM, T.MistralConfig(
            vocab_size=61, hidden_size=64, intermediate_size=96,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
            sliding_window=64, pad_token_id=0,
            attn_implementation="eager"), 64, 2),
        ("qwen2", T.Qwen2ForCausalLM, T.Qwen2Config(
            vocab_size=61, hidden_size=64, intermediate_size=96,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            pad_token_id=0, attn_implementation="sdpa"), 64, 2),
        ("bloom", T.BloomForCausalLM, T.BloomConfig(
            vocab_size=61, hidden_size=48, n_layer=2, n_head=6,
            pad_token_id=0, attn_implementation="eager"), 48, 2),
        ("gptj", T.GPTJForCausalLM, T.GPTJConfig(
            vocab_size=61, n_embd=64, n_layer=2, n_head=4, rotary_dim=8,
            n_positions=256, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            attn_implementation="eager"), 64, 2),
        ("gpt-neox", T.GPTNeoXForCausalLM, T.GPTNeoXConfig(
            vocab_size=61, hidden_size=64, intermediate_size=96,
            num_hidden_layers=2, num_attention_heads=4, rotary_pct=0.25,
            pad_token_id=0, attn_implementation="sdpa"), 64, 2),
    ]


def left_padded(batch=3, n=11, vocab=61, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, n), generator=g)
    mask = torch.ones_like(ids)
    for b in range(1, batch):  # item b has 2b pad tokens on the left
        mask[b, :2 * b] = 0
        ids[b, :2 * b] = 0
    return ids, mask


# --------------------------------------------------------------- decoders


@pytest.mark.parametrize("name,cls,cfg,d,layers", decoder_models(),
                         ids=[m[0] for m in decoder_models()])
def test_decoder_left_padding_generate_and_unpatch(name, cls, cfg, d, layers):
    model = build(cls, cfg)
    ids, mask = left_padded()
    real = mask.bool()
    with torch.no_grad():
        ref = model(ids, attention_mask=mask).logits
        gen_ref = model.generate(ids, attention_mask=mask, max_new_tokens=6,
                                 do_sample=False, pad_token_id=0)
        H.patch(model)
        assert H.is_patched(model) and H.patched_modules(model)
        out = model(ids, attention_mask=mask).logits
        # Query rows at left-padding positions are padding (relpos: zeros).
        assert rel_err(out[real], ref[real]) <= tol(torch.float32, d, layers)
        gen = model.generate(ids, attention_mask=mask, max_new_tokens=6,
                             do_sample=False, pad_token_id=0)
        assert gen.tolist() == gen_ref.tolist()
        H.unpatch(model)
        assert not H.is_patched(model)
        again = model(ids, attention_mask=mask).logits
    assert torch.equal(again, ref)  # bit-identical after unpatch


@pytest.mark.parametrize("name,cls,cfg,d,layers",
                         [m for m in decoder_models() if m[0] in
                          ("llama-gqa", "bloom", "gptj", "gpt-neox")],
                         ids=["llama-gqa", "bloom", "gptj", "gpt-neox"])
def test_decoder_float64(name, cls, cfg, d, layers):
    """float64 models. Hugging Face forms RoPE's cos / sin (inv_freq,
    position_ids.float()) and BLOOM's ALiBi (slopes times positions) in
    float32 even for float64 weights, while relpos forms them in double:
    the difference is that float32 rounding (relative 1e-10 .. 1e-7 here),
    far above float64 roundoff, so the bound is float32's. Right padding:
    in float64, Hugging Face's eager attention itself turns the fully
    masked rows of left padding into NaN (the dtype's minimum added to a
    score overflows to -inf), which then reach the real rows as 0 * NaN."""
    model = build(cls, cfg, torch.float64)
    ids, mask = right_padded(n=11)
    real = mask.bool()
    with torch.no_grad():
        ref = model(ids, attention_mask=mask).logits
        H.patch(model)
        out = model(ids, attention_mask=mask).logits
    assert rel_err(out[real], ref[real]) <= tol(torch.float32, d, layers)


def test_encoders_float64():
    """Models without float32 internals agree at float64 roundoff."""
    for model, run in (
            (build(transformers.T5EncoderModel, t5_cfg(), torch.float64),
             lambda m, x, k: m(x, attention_mask=k).last_hidden_state),
            (w2v_bert().double(),
             lambda m, x, k: m(torch.randn(
                 2, 30, 16, dtype=torch.float64,
                 generator=torch.Generator().manual_seed(7)),
                 attention_mask=k[:2, :30]).last_hidden_state)):
        ids, mask = right_padded(n=30)
        with torch.no_grad():
            ref = run(model, ids, mask)
            H.patch(model)
            out = run(model, ids, mask)
        assert rel_err(out, ref) <= tol(torch.float64, 32, 2)


def test_llama_incremental_cache_matches_full_forward():
    """Prefill + one-token steps through the cache equal one full forward."""
    model = build(transformers.LlamaForCausalLM, llama_cfg())
    ids, mask = left_padded(n=9)
    H.patch(model)
    with torch.no_grad():
        full = model(ids, attention_mask=mask).logits
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        out = model(ids[:, :6], attention_mask=mask[:, :6],
                    position_ids=pos[:, :6], use_cache=True)
        cache, steps = out.cache, [out.logits]
        for t in range(6, 9):
            out = model(ids[:, t:t + 1], attention_mask=mask[:, :t + 1],
                        position_ids=pos[:, t:t + 1], cache=cache,
                        use_cache=True)
            cache = out.cache
            steps.append(out.logits)
    inc = torch.cat(steps, 1)
    real = mask.bool()
    assert rel_err(inc[real], full[real]) <= tol(torch.float32, 64, 2)


# --------------------------------------------------------------- T5


def t5_cfg(impl="eager", **kw):
    args = dict(vocab_size=61, d_model=32, d_kv=8, d_ff=48, num_layers=2,
                num_decoder_layers=2, num_heads=4,
                relative_attention_num_buckets=8,
                relative_attention_max_distance=16, dropout_rate=0.0,
                pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
                attn_implementation=impl)
    args.update(kw)
    return transformers.T5Config(**args)


def right_padded(batch=3, n=24, vocab=61, seed=2):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, n), generator=g)
    mask = torch.ones_like(ids)
    for b in range(1, batch):
        mask[b, n - 5 * b:] = 0
        ids[b, n - 5 * b:] = 0
    return ids, mask


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("cls", ["T5ForConditionalGeneration",
                                 "MT5ForConditionalGeneration"])
def test_t5_encoder_decoder_generate_and_unpatch(impl, cls):
    cfg_cls = transformers.MT5Config if cls.startswith("MT5") else \
        transformers.T5Config
    cfg = cfg_cls(**t5_cfg(impl).to_dict())
    model = build(getattr(transformers, cls), cfg)
    ids, mask = right_padded()
    dec = torch.randint(3, 61, (3, 20), generator=torch.Generator()
                        .manual_seed(3))
    with torch.no_grad():
        ref = model(ids, attention_mask=mask, decoder_input_ids=dec).logits
        enc_ref = model.encoder(ids, attention_mask=mask).last_hidden_state
        gen_ref = model.generate(ids, attention_mask=mask, max_new_tokens=8,
                                 do_sample=False)
        H.patch(model)
        names = H.patched_modules(model)
        # Encoder and decoder self-attention, not cross-attention.
        assert len(names) == 4 and not any("EncDec" in n for n in names)
        enc = model.encoder(ids, attention_mask=mask).last_hidden_state
        out = model(ids, attention_mask=mask, decoder_input_ids=dec).logits
        gen = model.generate(ids, attention_mask=mask, max_new_tokens=8,
                             do_sample=False)
        H.unpatch(model)
        again = model(ids, attention_mask=mask, decoder_input_ids=dec).logits
    # Right padding: the encoder's padding rows see the same keys in both.
    assert rel_err(enc, enc_ref) <= tol(torch.float32, 32, 2)
    assert rel_err(out, ref) <= tol(torch.float32, 32, 4)
    assert gen.tolist() == gen_ref.tolist()
    assert torch.equal(again, ref)


# --------------------------------------------------------------- speech


def w2v_bert():
    cfg = transformers.Wav2Vec2BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=48, feature_projection_input_dim=16,
        conv_depthwise_kernel_size=3, left_max_position_embeddings=6,
        right_max_position_embeddings=2, layerdrop=0.0,
        apply_spec_augment=False, attn_implementation="eager")
    return build(transformers.Wav2Vec2BertModel, cfg)


def w2v_conformer(impl="eager"):
    cfg = transformers.Wav2Vec2ConformerConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=48, conv_dim=(8,), conv_stride=(5,),
        conv_kernel=(10,), num_feat_extract_layers=1,
        num_conv_pos_embeddings=4, num_conv_pos_embedding_groups=2,
        conv_depthwise_kernel_size=3, position_embeddings_type="relative",
        layerdrop=0.0, apply_spec_augment=False, attn_implementation=impl)
    return build(transformers.Wav2Vec2ConformerModel, cfg)


def test_wav2vec2_bert_relative_key_right_padding():
    model = w2v_bert()
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 30, 16, generator=g)
    mask = torch.ones(2, 30, dtype=torch.long)
    mask[1, 21:] = 0
    with torch.no_grad():
        ref = model(x, attention_mask=mask).last_hidden_state
        H.patch(model)
        out = model(x, attention_mask=mask).last_hidden_state
        H.unpatch(model)
        again = model(x, attention_mask=mask).last_hidden_state
    assert rel_err(out, ref) <= tol(torch.float32, 32, 2)
    assert torch.equal(again, ref)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_wav2vec2_conformer_transformer_xl(impl):
    model = w2v_conformer(impl)
    g = torch.Generator().manual_seed(5)
    h = torch.randn(2, 26, 32, generator=g)
    mask = torch.ones(2, 26, dtype=torch.bool)
    mask[1, 19:] = False
    with torch.no_grad():
        ref = model.encoder(h.clone(), attention_mask=mask).last_hidden_state
        H.patch(model)
        out = model.encoder(h.clone(), attention_mask=mask).last_hidden_state
        H.unpatch(model)
        again = model.encoder(h.clone(),
                              attention_mask=mask).last_hidden_state
    assert rel_err(out, ref) <= tol(torch.float32, 32, 2)
    assert torch.equal(again, ref)


# --------------------------------------------------------------- training


def grads(model, loss_fn):
    model.zero_grad(set_to_none=True)
    loss_fn(model).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()
            if p.grad is not None}


def check_grads(model, loss_fn, dtype, bound=None):
    ref = grads(model, loss_fn)
    H.patch(model)
    got = grads(model, loss_fn)
    H.unpatch(model)
    assert set(got) == set(ref)
    total = sum(float(g.double().norm() ** 2) for g in ref.values()) ** 0.5
    for name, g in ref.items():
        # Normwise per parameter, relative to the larger of its own and a
        # millionth of the whole gradient (some rows get almost none).
        scale = max(float(g.double().norm()), 1e-6 * total)
        err = float((got[name] - g).double().norm()) / scale
        assert err <= 4 * (bound or tol(dtype, 64, 2)), (name, err)
    return ref


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_t5_training_gradients(dtype):
    model = build(transformers.T5ForConditionalGeneration, t5_cfg(), dtype)
    model.train()
    ids, mask = right_padded(n=20)
    labels = torch.randint(3, 61, (3, 12), generator=torch.Generator()
                           .manual_seed(6))
    ref = check_grads(model, lambda m: m(ids, attention_mask=mask,
                                         labels=labels).loss, dtype)
    # The shared tables of both stacks are learned through relpos.
    assert "encoder.block.0.layer.0.SelfAttention.relative_attention_bias" \
        ".weight" in ref
    assert "decoder.block.0.layer.0.SelfAttention.relative_attention_bias" \
        ".weight" in ref


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_llama_gqa_training_gradients(dtype):
    """float32: left padding (relpos's key_starts, backward included);
    float64: right padding (see test_decoder_float64 for why). Labels are
    -100 wherever the predicting position (t - 1) or the target is
    padding: the output of a padding query row differs (relpos: zeros,
    Hugging Face: an average over whatever the row's mask leaves) and must
    not enter the loss. Bound: float32's in both dtypes, because Hugging
    Face forms RoPE's cos / sin in float32 (test_decoder_float64)."""
    model = build(transformers.LlamaForCausalLM, llama_cfg(), dtype)
    model.train()
    ids, mask = left_padded(n=13) if dtype == torch.float32 else \
        right_padded(n=13)
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, 1:] = labels[:, 1:].masked_fill(mask[:, :-1] == 0, -100)
    check_grads(model, lambda m: m(ids, attention_mask=mask,
                                   labels=labels).loss, dtype,
                tol(torch.float32, 64, 2))


# --------------------------------------------------------------- tests fail


def test_wrong_settings_are_detected(monkeypatch):
    """The comparison would catch a wrong convention: the other RoPE layout
    and T5 with relpos's default 1/sqrt(dk) both miss by far more than the
    tolerance."""
    model = build(transformers.LlamaForCausalLM, llama_cfg())
    ids, mask = left_padded()
    real = mask.bool()
    with torch.no_grad():
        ref = model(ids, attention_mask=mask).logits
        rope = rt.rope

        def wrong_layout(x, **kw):
            kw["layout"] = "interleaved"
            return rope(x, **kw)

        monkeypatch.setattr(rt, "rope", wrong_layout)
        H.patch(model)
        out = model(ids, attention_mask=mask).logits
        H.unpatch(model)
    assert rel_err(out[real], ref[real]) > 100 * tol(torch.float32, 64, 2)
    monkeypatch.undo()

    t5 = build(transformers.T5ForConditionalGeneration, t5_cfg())
    ids, mask = right_padded()
    attention = rt.attention

    def default_scale(*a, **kw):
        kw.pop("scale", None)
        return attention(*a, **kw)

    with torch.no_grad():
        ref = t5.encoder(ids, attention_mask=mask).last_hidden_state
        monkeypatch.setattr(rt, "attention", default_scale)
        H.patch(t5)
        out = t5.encoder(ids, attention_mask=mask).last_hidden_state
        H.unpatch(t5)
    assert rel_err(out, ref) > 100 * tol(torch.float32, 32, 2)


# --------------------------------------------------------------- refusals


def unpatched(model):
    """No module of model has an instance forward (nothing half-patched)."""
    return not H.is_patched(model) and not any(
        "forward" in vars(m) for m in model.modules())


def test_refuses_unsupported_architecture():
    cfg = transformers.GPT2Config(vocab_size=61, n_embd=32, n_layer=1,
                                  n_head=2, attn_implementation="eager")
    model = build(transformers.GPT2LMHeadModel, cfg)
    with pytest.raises(H.PatchError, match="GPT2LMHeadModel has no attention "
                       "module relpos.hf supports"):
        H.patch(model)
    assert unpatched(model)


def test_refuses_rope_scaling():
    cfg = llama_cfg(rope_parameters={"rope_type": "linear", "factor": 2.0,
                                     "rope_theta": 10000.0})
    model = build(transformers.LlamaForCausalLM, cfg)
    with pytest.raises(H.PatchError, match=r"model\.layers\.0\.self_attn "
                       r"\(LlamaAttention\): rope_parameters "
                       r"rope_type='linear'"):
        H.patch(model)
    assert unpatched(model)


def test_refuses_changed_rope_frequencies():
    model = build(transformers.LlamaForCausalLM, llama_cfg())
    model.model.rotary_emb.inv_freq.mul_(0.5)  # e.g. a hand-made scaling
    with pytest.raises(H.PatchError, match=r"model\.rotary_emb "
                       r"\(LlamaRotaryEmbedding\): inv_freq is not "
                       r"rope_theta"):
        H.patch(model)
    assert unpatched(model)


def test_deepcopy_state_dict_and_tables():
    """A deepcopy of a patched model is patched on its own tables; patch
    leaves the state_dict as it was."""
    import copy

    model = build(transformers.T5EncoderModel, t5_cfg())
    keys = list(model.state_dict())
    ids, mask = right_padded()
    H.patch(model)
    assert list(model.state_dict()) == keys
    twin = copy.deepcopy(model)
    assert H.is_patched(twin)
    with torch.no_grad():
        a = model(ids, attention_mask=mask).last_hidden_state
        assert torch.equal(twin(ids, attention_mask=mask).last_hidden_state,
                           a)
        twin.encoder.block[0].layer[0].SelfAttention \
            .relative_attention_bias.weight.mul_(3.0)
        b = twin(ids, attention_mask=mask).last_hidden_state
        assert not torch.allclose(b, a)  # the twin reads its own table
        assert torch.equal(model(ids, attention_mask=mask).last_hidden_state,
                           a)
    H.unpatch(twin)
    assert H.is_patched(model)


@pytest.mark.parametrize("name", ["llama-gqa", "mistral", "qwen2", "bloom",
                                  "gptj", "gpt-neox", "t5", "w2v-bert"])
def test_torch_save_load_whole_model(name):
    """torch.save of a whole patched model and torch.load (weights_only=
    False: a pickle of the model's classes) give a patched model with the
    same outputs, bit for bit, reading its own parameters; unpatch then
    restores Hugging Face's forward on the loaded copy. (Not
    Wav2Vec2-Conformer: its positional convolution's weight norm is a
    torch parametrization, which torch.save refuses patched or not.)"""
    import io

    if name == "t5":
        model = build(transformers.T5EncoderModel, t5_cfg())
        ids, mask = right_padded()
        table = model.encoder.block[0].layer[0].SelfAttention \
            .relative_attention_bias.weight

        def run(m):
            return m(ids, attention_mask=mask).last_hidden_state
    elif name == "w2v-bert":
        model = w2v_bert()
        x = torch.randn(2, 30, 16, generator=torch.Generator().manual_seed(4))
        mask = torch.ones(2, 30, dtype=torch.long)
        mask[1, 21:] = 0
        table = None

        def run(m):
            return m(x, attention_mask=mask).last_hidden_state
    else:
        _, cls, cfg, _, _ = [m for m in decoder_models() if m[0] == name][0]
        model = build(cls, cfg)
        ids, mask = left_padded()
        table = None

        def run(m):
            return m(ids, attention_mask=mask).logits
    with torch.no_grad():
        ref = run(model)
        H.patch(model)
        want = run(model)  # fills the mask cache, which must not pickle
        buf = io.BytesIO()
        torch.save(model, buf)
        buf.seek(0)
        twin = torch.load(buf, weights_only=False)
        assert H.is_patched(twin)
        assert H.patched_modules(twin) == H.patched_modules(model)
        assert torch.equal(run(twin), want)
        if table is not None:  # the loaded T5 reads its own stack's table
            twin.encoder.block[0].layer[0].SelfAttention \
                .relative_attention_bias.weight.mul_(3.0)
            assert not torch.allclose(run(twin), want)
            assert torch.equal(table, model.encoder.block[0].layer[0]
                               .SelfAttention.relative_attention_bias.weight)
        H.unpatch(twin)
        assert unpatched(twin)
        if table is None:
            assert torch.equal(run(twin), ref)


def test_torch_compile_llama():
    """torch.compile of a patched Llama (GQA, left padding; the default
    backend, inductor, about 30 s here) gives the eager patched model's
    logits, for two batches with different padding (the mask's bounds are
    read outside the graph, so a new padding is no stale constant)."""
    import torch._dynamo

    model = build(transformers.LlamaForCausalLM, llama_cfg())
    first = left_padded()
    second = left_padded(seed=5)
    second[1][0, :3] = 0  # other padding: item 0 padded, item 2 not
    second[1][2, :] = 1
    H.patch(model)
    torch._dynamo.reset()
    compiled = torch.compile(model)
    with torch.no_grad():
        for ids, mask in (first, second):
            want = model(ids, attention_mask=mask).logits
            got = compiled(ids, attention_mask=mask).logits
            real = mask.bool()
            assert rel_err(got[real], want[real]) <= tol(torch.float32, 64, 2)
    torch._dynamo.reset()


def test_torch_compile_graph_breaks():
    """The patched T5 encoder without a mask compiles to one graph
    (fullgraph=True; backend aot_eager, to keep the test short); with a
    padding mask, the graph breaks only where relpos.hf reads the mask's
    bounds into Python (_cached_padding, torch.compiler.disable'd: relpos
    takes the bounds as per-row integers), and outputs are unchanged."""
    import torch._dynamo

    model = build(transformers.T5EncoderModel, t5_cfg())
    ids, mask = right_padded()
    H.patch(model)
    torch._dynamo.reset()
    with torch.no_grad():
        want = model(ids).last_hidden_state
        got = torch.compile(model, fullgraph=True, backend="aot_eager")(
            ids).last_hidden_state
        assert rel_err(got, want) <= tol(torch.float32, 32, 2)
        torch._dynamo.reset()
        explained = torch._dynamo.explain(
            lambda i, k: model(i, attention_mask=k).last_hidden_state)(
            ids, mask)
    torch._dynamo.reset()
    assert explained.graph_break_count > 0
    for b in explained.break_reasons:
        assert "torch.compiler.disable" in b.reason, b.reason
        assert any(f.name == "_padding" for f in b.user_stack), b.user_stack


def test_refuses_dropout_in_training():
    model = build(transformers.LlamaForCausalLM,
                  llama_cfg(attention_dropout=0.1))
    model.train()
    with pytest.raises(H.PatchError, match=r"model\.layers\.0\.self_attn "
                       r"\(LlamaAttention\): attention dropout 0\.1"):
        H.patch(model)
    assert unpatched(model)
    model.eval()
    H.patch(model)  # in eval mode dropout is off: accepted
    model.train()
    ids, mask = left_padded()
    with pytest.raises(H.PatchError, match="attention dropout 0.1 while "
                       "training"):
        model(ids, attention_mask=mask)


def test_refuses_attention_implementation():
    model = build(transformers.LlamaForCausalLM, llama_cfg())
    model.config._attn_implementation = "flex_attention"
    with pytest.raises(H.PatchError, match="attn_implementation="
                       "'flex_attention' is not supported"):
        H.patch(model)
    assert unpatched(model)


def test_never_half_patched():
    """One module that cannot be patched (its forward already replaced):
    patch refuses and leaves every module as it was."""
    model = build(transformers.T5ForConditionalGeneration, t5_cfg())
    late = model.decoder.block[1].layer[0].SelfAttention
    late.forward = late.forward  # an instance forward (someone's hook)
    with pytest.raises(H.PatchError, match=r"decoder\.block\.1\.layer\.0\."
                       r"SelfAttention \(T5Attention\): its forward is "
                       r"already replaced"):
        H.patch(model)
    del late.forward
    assert unpatched(model)


def test_refuses_other_module_layout(monkeypatch):
    class MyAttention(transformers.models.llama.modeling_llama
                      .LlamaAttention):
        pass

    model = build(transformers.LlamaForCausalLM, llama_cfg())
    model.model.layers[1].self_attn.__class__ = MyAttention
    with pytest.raises(H.PatchError, match=r"model\.layers\.1\.self_attn: "
                       r"MyAttention subclasses LlamaAttention"):
        H.patch(model)
    assert unpatched(model)
    # A forward signature other than the one relpos.hf was written for.
    model = build(transformers.LlamaForCausalLM, llama_cfg())
    key = "transformers.models.llama.modeling_llama.LlamaAttention"
    sig, plan, what = H._ARCH[key]
    monkeypatch.setitem(H._ARCH, key, (sig + ("extra",), plan, what))
    with pytest.raises(H.PatchError, match=r"model\.layers\.0\.self_attn "
                       r"\(LlamaAttention\): forward\(.*\) is not the layout"):
        H.patch(model)
    assert unpatched(model)


def test_refuses_at_call_time():
    model = build(transformers.LlamaForCausalLM, llama_cfg())
    H.patch(model)
    ids, mask = left_padded()
    with torch.no_grad():
        # output_attentions
        with pytest.raises(H.PatchError, match=r"model\.layers\.0\.self_attn"
                           r" \(LlamaAttention\): output_attentions=True is "
                           r"not supported"):
            model(ids, attention_mask=mask, output_attentions=True)
        # a mask with a hole is not padding + causal
        holey = torch.ones_like(mask)
        holey[0, 4] = 0
        with pytest.raises(H.PatchError, match=r"self_attn \(LlamaAttention"
                           r"\): the attention mask is not a padding \+ "
                           r"causal mask \(item 0"):
            model(ids, attention_mask=holey)
        # an additive bias passed as a 4-D mask
        bias = torch.zeros(3, 1, 11, 11)
        bias[..., 0] = -1.0
        with pytest.raises(H.PatchError, match="holds values other than 0"):
            model(ids, attention_mask=bias)
        # positions that do not follow the tokens (packing-like restarts)
        pos = torch.arange(11).repeat(3, 1)
        pos[:, 7:] -= 7
        with pytest.raises(H.PatchError):  # HF's packed mask or our check
            model(ids, position_ids=pos)
        # an unknown keyword reaching the attention (e.g. a head_mask)
        attn = model.model.layers[0].self_attn
        hs = torch.randn(1, 4, 64)
        cos_sin = model.model.rotary_emb(hs, torch.arange(4)[None])
        with pytest.raises(H.PatchError, match=r"keyword argument "
                           r"head_mask= is not supported"):
            attn(hs, cos_sin, None, position_ids=torch.arange(4)[None],
                 head_mask=torch.ones(4))
        # a static cache
        cache = transformers.StaticCache(config=model.config,
                                         max_cache_len=32)
        with pytest.raises(H.PatchError, match=r"a StaticLayer cache layer: "
                           r"only dynamic caches"):
            model(ids[:1], cache=cache, use_cache=True)
    H.unpatch(model)
    with pytest.raises(H.PatchError, match="not patched"):
        H.unpatch(model)


def test_refuses_sliding_window_when_it_takes_effect():
    cfg = transformers.MistralConfig(
        vocab_size=61, hidden_size=64, intermediate_size=96,
        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        sliding_window=8, attn_implementation="eager")
    model = build(transformers.MistralForCausalLM, cfg)
    H.patch(model)
    ids = torch.randint(3, 61, (1, 12))
    with torch.no_grad():
        model(ids[:, :8])  # 8 keys: the window changes nothing
        with pytest.raises(H.PatchError, match=r"model\.layers\.0\.self_attn"
                           r" \(MistralAttention\): sliding_window=8 takes "
                           r"effect at 12 keys"):
            model(ids)


def test_refuses_t5_position_settings():
    model = build(transformers.T5ForConditionalGeneration, t5_cfg())
    H.patch(model)
    with pytest.raises(H.PatchError, match="already patched"):
        H.patch(model)
    H.unpatch(model)
    cfg = transformers.Wav2Vec2ConformerConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=48, conv_dim=(8,), conv_stride=(5,),
        conv_kernel=(10,), num_feat_extract_layers=1,
        num_conv_pos_embeddings=4, num_conv_pos_embedding_groups=2,
        conv_depthwise_kernel_size=3, position_embeddings_type="rotary",
        attn_implementation="eager")
    model = build(transformers.Wav2Vec2ConformerModel, cfg)
    with pytest.raises(H.PatchError, match=r"encoder\.layers\.0\.self_attn "
                       r"\(Wav2Vec2ConformerSelfAttention\): "
                       r"position_embeddings_type='rotary' is not "
                       r"supported"):
        H.patch(model)
    assert unpatched(model)


def test_mask_analysis_bounds_and_blocks():
    """The mask reader directly: left and right padding at once, rows that
    see nothing, a fully-visible padding row (sdpa's fix for rows without
    keys), and a hole found in the second block of 1024 query rows."""
    nq = nk = 1100
    j = torch.arange(nk)
    i = torch.arange(nq)[:, None]
    starts, ends = torch.tensor([0, 5, 40]), torch.tensor([nk, 1000, 900])
    vis = (j >= starts[:, None, None]) & (j < ends[:, None, None]) & (j <= i)
    vis[2, 10] = True  # a padding query row (10 < start 40) seeing all keys
    pad = H._analyse_mask("m", vis[:, None], 3, nq, nk, 0, True)
    assert pad.starts == [0, 5, 40] and pad.lengths == [nk, 1000, 900]
    assert pad.kwargs() == dict(key_starts=[0, 5, 40],
                                key_lengths=[nk, 1000, 900])
    additive = torch.zeros(3, 1, nq, nk).masked_fill(
        ~vis[:, None], torch.finfo(torch.float32).min)
    assert H._analyse_mask("m", additive, 3, nq, nk, 0, True).starts == \
        [0, 5, 40]
    holey = vis.clone()
    holey[1, 1050, 500] = False
    with pytest.raises(H.PatchError, match=r"item 1, query row 1050"):
        H._analyse_mask("m", holey[:, None], 3, nq, nk, 0, True)
    # Not causal where the module is: refused, not taken as padding.
    full = torch.ones(1, 1, 8, 8, dtype=torch.bool)
    with pytest.raises(H.PatchError, match="not a padding \\+ causal mask"):
        H._analyse_mask("m", full, 1, 8, 8, 0, True)
    assert H._analyse_mask("m", full, 1, 8, 8, 0, False).kwargs() == {}
