"""The layer loaders under their former names (docs/interop.md), kept for
code written against them. Each now lives with the rest of what relpos
knows about its framework, and this module only re-exports:

    from_t5, from_wav2vec2_bert, from_wav2vec2_conformer   relpos.hf
    from_opennmt                                           relpos.opennmt
    LoadedAttention        relpos/_convert.py (also relpos.hf.LoadedAttention)
"""

from ._convert import LoadedAttention
from .hf import from_t5, from_wav2vec2_bert, from_wav2vec2_conformer
from .opennmt import from_opennmt

__all__ = ["LoadedAttention", "from_opennmt", "from_t5",
           "from_wav2vec2_bert", "from_wav2vec2_conformer"]
