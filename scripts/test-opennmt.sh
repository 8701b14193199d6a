#!/usr/bin/env bash
# Peer test of relpos.opennmt (docs/interop.md): trains a small OpenNMT-py
# Transformer with max_relative_positions on relpos's s2s_reverse task
# (written out as text), translates a held-out set greedily with
# onmt_translate, imports the checkpoint into relpos and translates the same
# sources with relpos::Model::Translate (greedy); every output must be equal
# token for token. Exits non-zero otherwise.
#
#   bash scripts/test-opennmt.sh
#
# OpenNMT-py needs its own PyTorch (3.5.1 pins torch < 2.3), so it lives in
# its own environment, RELPOS_ONMT_VENV (default build/venv-onmt, made once
# with `pip install OpenNMT-py==3.5.1` from PyPI). The relpos side runs in
# RELPOS_VENV (default .venv, as scripts/test-python.sh makes it; it needs
# torch >= 2.4 to read the .pt file with weights_only=True), where
# scripts/test-python.sh builds and installs relpos first. CI does not run
# this script (no OpenNMT-py, no network for its wheels); run it by hand.
#
# Takes a few minutes on two cores (OpenNMT-py's training dominates).
# Environment: RELPOS_ONMT_STEPS (default 300) OpenNMT-py training steps.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
onmt_venv=${RELPOS_ONMT_VENV:-$root/build/venv-onmt}
venv=${RELPOS_VENV:-$root/.venv}
steps=${RELPOS_ONMT_STEPS:-300}

if [[ ! -x $onmt_venv/bin/onmt_train ]]; then
  echo "== creating $onmt_venv with OpenNMT-py 3.5.1 from PyPI"
  /usr/bin/python3 -m venv "$onmt_venv"
  "$onmt_venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "OpenNMT-py==3.5.1"
fi
echo "== building relpos into $venv"
RELPOS_VENV=$venv bash scripts/test-python.sh --collect-only -q >/dev/null

work=$(mktemp -d "${TMPDIR:-/tmp}/relpos-opennmt.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
"$venv/bin/python" "$root/scripts/s2s-reverse-text.py"
# A pre-norm Transformer relpos represents: Shaw tables (k = 4), no position
# encoding, GELU, tied embeddings, OpenNMT-py's default norm_eps 1e-6.
cat > config.yaml <<EOF
save_data: run
src_vocab: run/vocab.src
share_vocab: true
overwrite: true
data:
  corpus_1: {path_src: train.src, path_tgt: train.tgt}
  valid: {path_src: valid.src, path_tgt: valid.tgt}
save_model: run/model
save_checkpoint_steps: $steps
train_steps: $steps
valid_steps: 100000
seed: 3
batch_type: sents
batch_size: 32
world_size: 1
gpu_ranks: []
encoder_type: transformer
decoder_type: transformer
enc_layers: 2
dec_layers: 1
heads: 4
hidden_size: 32
word_vec_size: 32
transformer_ff: 64
position_encoding: false
max_relative_positions: 4
pos_ffn_activation_fn: gelu
share_embeddings: true
share_decoder_embeddings: true
dropout: [0.0]
attention_dropout: [0.0]
optim: adam
learning_rate: 0.003
decay_method: none
param_init: 0
param_init_glorot: true
label_smoothing: 0.1
report_every: 100
EOF
export OMP_NUM_THREADS=1
echo "== OpenNMT-py: vocabulary, $steps training steps, greedy translation"
"$onmt_venv/bin/onmt_build_vocab" -config config.yaml -n_sample -1 >vocab.log 2>&1
"$onmt_venv/bin/onmt_train" -config config.yaml >train.log 2>&1 ||
  { tail -20 train.log; exit 1; }
"$onmt_venv/bin/onmt_translate" -model "run/model_step_$steps.pt" \
  -src test.src -output onmt.out -beam_size 1 -max_length 40 -gpu -1 \
  >translate.log 2>&1 || { tail -20 translate.log; exit 1; }

echo "== relpos: import, greedy translation, comparison"
"$venv/bin/python" -m relpos.opennmt "run/model_step_$steps.pt" relpos-ck \
  --task s2s_reverse
"$venv/bin/python" - <<'EOF'
import sys
from relpos import _relpos_ext as ext
from relpos.opennmt import S2S_TOKENS as tok
model = ext.Model.load("relpos-ck")
sources = [[tok.index(w) for w in l.split()] for l in open("test.src")]
theirs = [l.split() for l in open("onmt.out")]
mine = [[tok[i] for i in t[0]] for t in model.translate(
    sources, beam_size=1, length_penalty="none", max_length_ratio=10,
    max_length=40)]
equal = sum(a == b for a, b in zip(mine, theirs))
right = sum(a == s.split()[::-1] for a, s in zip(theirs, open("test.src")))
print(f"greedy: {equal}/{len(theirs)} relpos translations equal "
      f"OpenNMT-py's ({right} of OpenNMT-py's are the exact reverse)")
for a, b, s in zip(mine, theirs, open("test.src")):
    if a != b:
        print(f"  differ: source {s.strip()!r}: relpos {' '.join(a)!r}, "
              f"OpenNMT-py {' '.join(b)!r}")
sys.exit(0 if equal == len(theirs) == len(sources) else 1)
EOF
