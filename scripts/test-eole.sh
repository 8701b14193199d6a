#!/usr/bin/env bash
# Peer test of relpos.opennmt.load_eole (docs/interop.md): trains a small eole
# Transformer with Shaw relative positions (position_encoding_type Relative)
# on relpos's s2s_reverse task (written out as text) with `eole train`,
# imports the model folder into relpos and translates a held-out set
# greedily with relpos::Model::Translate; eole translates the same sources
# greedily with its own model (the eole model's forward on the growing
# prefix: its training-time arithmetic). Every output must be equal token
# for token; exits non-zero otherwise.
#
# The script also runs `eole predict` (eole's KV-cache decoder) and prints
# how many of its outputs equal the others, without failing on it: eole
# 0.6.4's cache is preallocated at its full length (cache_len_tgt) and the
# relative positions of a cached step are computed from the cache's size
# (gen_relative_positions(key.size(1), cache=True)), not from the step, so
# its predictions differ from its own model's forward (0 of 100 equal when
# this was written).
#
#   bash scripts/test-eole.sh
#
# eole pins its own PyTorch (0.6.4: torch 2.10-2.14), so it lives in its own
# environment, RELPOS_EOLE_VENV (default /var/cache/relpos/venv-eole, made
# once with `pip install eole==0.6.4 aiohttp` from PyPI; its command line
# imports aiohttp). The relpos side runs in RELPOS_VENV (default
# /var/cache/relpos/pypi-venv, scripts/test-pypi.sh's environment, which has
# safetensors), where scripts/test-python.sh builds and installs relpos
# first. CI does not run this script (it needs eole's wheels); run it by
# hand. About two minutes on two cores.
# Environment: RELPOS_EOLE_STEPS (default 300) eole training steps.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
eole_venv=${RELPOS_EOLE_VENV:-/var/cache/relpos/venv-eole}
venv=${RELPOS_VENV:-/var/cache/relpos/pypi-venv}
steps=${RELPOS_EOLE_STEPS:-300}

if [[ ! -x $eole_venv/bin/eole ]]; then
  echo "== creating $eole_venv with eole 0.6.4 from PyPI"
  /usr/bin/python3 -m venv "$eole_venv"
  "$eole_venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "eole==0.6.4" aiohttp
fi
echo "== building relpos into $venv"
RELPOS_VENV=$venv RELPOS_BUILD_DIR=build/python-pypi \
  bash scripts/test-python.sh --collect-only -q >/dev/null

work=$(mktemp -d "${TMPDIR:-/tmp}/relpos-eole.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
"$venv/bin/python" "$root/scripts/s2s-reverse-text.py"
# A pre-norm Transformer relpos represents: Shaw tables (k = 4), no position
# encoding, GELU, tied embeddings, eole's default norm_eps 1e-6 and no biases.
cat > config.yaml <<EOF
save_data: run
src_vocab: run/vocab.src
share_vocab: true
overwrite: true
seed: 3
report_every: 100
data:
  corpus_1: {path_src: train.src, path_tgt: train.tgt}
  valid: {path_src: valid.src, path_tgt: valid.tgt}
model:
  architecture: transformer
  hidden_size: 32
  heads: 4
  transformer_ff: 64
  mlp_activation_fn: gelu
  layer_norm: standard
  share_embeddings: true
  share_decoder_embeddings: true
  embeddings: {word_vec_size: 32, position_encoding_type: Relative, n_positions: 4}
  encoder: {encoder_type: transformer, layers: 2}
  decoder: {decoder_type: transformer, layers: 1}
training:
  model_path: run/model
  save_checkpoint_steps: $steps
  train_steps: $steps
  valid_steps: 100000
  batch_type: sents
  batch_size: 32
  world_size: 1
  gpu_ranks: []
  dropout: [0.0]
  attention_dropout: [0.0]
  optim: adam
  learning_rate: 0.003
  decay_method: none
  param_init: 0
  param_init_method: xavier_uniform
  label_smoothing: 0.1
  self_attn_backend: pytorch
  compute_dtype: fp32
EOF
export OMP_NUM_THREADS=1
echo "== eole: vocabulary, $steps training steps, greedy translation"
"$eole_venv/bin/eole" build_vocab -config config.yaml -n_sample -1 \
  >vocab.log 2>&1 || { tail -20 vocab.log; exit 1; }
"$eole_venv/bin/eole" train -config config.yaml >train.log 2>&1 ||
  { tail -20 train.log; exit 1; }
"$eole_venv/bin/eole" predict -model_path run/model -src test.src \
  -output predict.out -beam_size 1 -max_length 40 >predict.log 2>&1 ||
  { tail -20 predict.log; exit 1; }
"$eole_venv/bin/python" - <<'EOF' 2>forward.log
# Greedy with eole's own model: its forward over the whole prefix each step.
import torch
from eole.config.run import PredictConfig
from eole.models.model import get_metadata, get_model_class

config = PredictConfig(model_path=["run/model"], src="test.src",
                       gpu_ranks=[], world_size=1)
meta = get_metadata("run/model")
model = get_model_class(meta["config"].model).for_inference(config)[0]
model.eval()
ids = meta["vocab"]["src"]
index = {t: i for i, t in enumerate(ids)}
bos, eos = index["<s>"], index["</s>"]
out = []
with torch.no_grad():
    for line in open("test.src"):
        src = torch.tensor([[index[w] for w in line.split()]])
        tgt = [bos]
        for _ in range(40):
            # The decoder runs tgt[:-1]: its causal row len(tgt) - 1 does
            # not see the two BOS fillers, which keep the prefix longer than
            # one token (eole's cache path starts at one).
            dec = model(src, torch.tensor([tgt + [bos, bos]]),
                        torch.tensor([src.size(1)]))[0]
            token = int(model.generator(dec[:, len(tgt) - 1]).argmax(-1))
            if token == eos:
                break
            tgt.append(token)
        out.append(" ".join(ids[i] for i in tgt[1:]))
with open("forward.out", "w") as f:
    f.write("\n".join(out) + "\n")
EOF

echo "== relpos: import, greedy translation, comparison"
"$venv/bin/python" -m relpos.opennmt run/model relpos-ck --task s2s_reverse
"$venv/bin/python" - <<'EOF'
import sys
from relpos import _relpos_ext as ext
from relpos.opennmt import S2S_TOKENS as tok
model = ext.Model.load("relpos-ck")
sources = [[tok.index(w) for w in l.split()] for l in open("test.src")]
theirs = [l.split() for l in open("forward.out")]
predict = [l.split() for l in open("predict.out")]
mine = [[tok[i] for i in t[0]] for t in model.translate(
    sources, beam_size=1, length_penalty="none", max_length_ratio=10,
    max_length=40)]
equal = sum(a == b for a, b in zip(mine, theirs))
right = sum(a == s.split()[::-1] for a, s in zip(theirs, open("test.src")))
print(f"greedy: {equal}/{len(theirs)} relpos translations equal eole's "
      f"model's ({right} of eole's are the exact reverse)")
print(f"eole predict (its KV-cache decoder): "
      f"{sum(a == b for a, b in zip(predict, theirs))}/{len(theirs)} equal "
      "its own model's greedy output")
for a, b, s in zip(mine, theirs, open("test.src")):
    if a != b:
        print(f"  differ: source {s.strip()!r}: relpos {' '.join(a)!r}, "
              f"eole {' '.join(b)!r}")
sys.exit(0 if equal == len(theirs) == len(sources) else 1)
EOF
