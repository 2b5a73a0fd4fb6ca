"""What a graph build is asked for: `GraphBuildConfig` (the recipe config every build kind reads), its
allowed values, and the recipe version that is part of the cache key."""

from __future__ import annotations

from dataclasses import dataclass

from asrdecode.errors import GraphError
from asrdecode.graph.format import (
    GRAPH_FILES,
    SAVE_FORMATS,
)

KINDS = ("tlg", "hclg-sphinx")
TOPOLOGIES = ("normal", "compact", "minimal")
LEXICON_TYPES = ("file", "bpe", "chars")
WORD_LABELS = ("earliest", "first_unit")


RESERVED_WORDS = ("<eps>", "<s>", "</s>", "#0")
BUILD_FILES = ("TLG.fst", "words.txt", "units.txt", "meta.json")  # + graph.pt / graph.safetensors


OWNED_FILES = (*GRAPH_FILES, "TLG.fst", "HCLG.fst", "words.txt", "units.txt", "meta.json")
# Bump when a change to the recipe changes what a build with the same inputs produces (cache key).
RECIPE_VERSION = 2


@dataclass
class GraphBuildConfig:
    """What `build-graph` reads (YAML `configs/graph/*.yaml`); paths are relative to the cwd.

    model: a NeMo `.nemo` CTC checkpoint: units = its decoder vocabulary (blank last) and, for
      lexicon_type bpe, its sentencepiece tokenizer; or a converted hama model (`.safetensors`,
      `embedded:hama-ipa-ctc`: its phones and word boundary). With `units` too, the two must agree.
    units: a tokens.txt (`sym id` per line, or one symbol per line = column order);
      or unit_list: the model's units in column order (e.g. `model.units`).
    blank: `auto` (a `<blk>`/`<blank>` entry if present, else `last`), `first`, `last`, or the
      blank symbol. `first`/`last` without a blank entry add a blank column before/after the units.
    lexicon_type: `file` (lexicon: `word unit unit ...` per line), `bpe` (spell LM words with
      sentencepiece_model) or `chars` (spell LM words letter by letter).
    word_separator: a unit that may appear between words without output (e.g. the space of a
      character model); None = none.
    topology: CTC T transducer: normal | compact | minimal.
    max_order: highest ARPA order used (-1 = all).
    remove_epsilon: run rmepsilon on LG: drops eps:eps arcs (G backoff, removed #k with no word);
      eps-input arcs that carry a delayed word (from a #k disambiguator) stay. May grow big LMs.
    word_labels: where det(L o G) leaves word labels. `earliest`: det(L o G) as a transducer; each
      label sits on the first unit at which its spelling is no longer a prefix of another spelling
      (already as far left as a deterministic graph allows: label pushing would move none). Words
      whose spelling is a prefix of another get it on an epsilon arc after their last unit.
      `first_unit`: determinize (unit, word) pairs, so every label sits on its word's first unit;
      the graph is equivalent but not input-deterministic (words sharing a first unit fan out).
    format: device-format files written: `pt` (graph.pt, torch.load(weights_only=True)),
      `safetensors` (graph.safetensors) or `both`; loaders take whichever is there.
    kind: `tlg` (CTC) or `hclg-sphinx` (pocketsphinx model: acoustic_model = folder with mdef,
      transition_matrices and noisedict; lexicon = its dictionary; silprob/fillprob = insertion
      probabilities of silence / noise fillers between words, pocketsphinx's defaults;
      transition_scale = multiplier of HMM transition and silence/filler costs, 1/lw to score as
      pocketsphinx does with decoder.acoustic_scale = 1/lw).
    defer_share, defer_decay: after the build, defer that share of every arc's cost to the arcs
      after it, the deferred cost passing on with that decay per arc (`asrdecode.graph.defer`; every
      complete path keeps its cost, so the model is the same; a beam search sees an unlikely word's
      LM cost spread over its first arcs instead of in one step). 0 = off (the default).
    """

    kind: str = "tlg"
    arpa: str = ""
    model: str | None = None
    units: str | None = None
    unit_list: list[str] | None = None
    blank: str = "auto"
    lexicon_type: str = "file"
    lexicon: str | None = None
    sentencepiece_model: str | None = None
    word_separator: str | None = None
    topology: str = "compact"
    max_order: int = -1
    remove_epsilon: bool = False
    acoustic_model: str | None = None
    noisedict: str | None = None
    silprob: float = 0.005
    fillprob: float = 1e-8
    transition_scale: float = 1.0
    word_labels: str = "earliest"
    format: str = "both"
    defer_share: float = 0.0
    defer_decay: float = 0.9

    def validate(self) -> None:
        if self.format not in SAVE_FORMATS:
            raise GraphError(f"graph config: format '{self.format}' is not one of {', '.join(SAVE_FORMATS)}")
        if not self.arpa:
            raise GraphError("graph config: 'arpa' (an ARPA language model) is required")
        if not (0.0 <= self.defer_share <= 1.0 and 0.0 <= self.defer_decay < 1.0):
            raise GraphError("graph config: defer_share must be in [0, 1] and defer_decay in [0, 1)")
        if self.kind not in KINDS:
            raise GraphError(f"graph config: kind '{self.kind}' is not one of {', '.join(KINDS)}")
        if self.kind == "hclg-sphinx":
            if not self.acoustic_model or not self.lexicon:
                raise GraphError(
                    "graph config: kind hclg-sphinx needs 'acoustic_model' (model folder with "
                    "mdef, transition_matrices) and 'lexicon' (the sphinx dictionary)"
                )
            return
        if self.unit_list is not None and (self.units is not None or self.model is not None):
            raise GraphError("graph config: 'unit_list' excludes 'units' and 'model'")
        if self.units is None and self.unit_list is None and self.model is None:
            raise GraphError(
                "graph config: give the units: 'model' (.nemo), 'units' (tokens.txt) or 'unit_list'"
            )
        if self.word_labels not in WORD_LABELS:
            raise GraphError(
                f"graph config: word_labels '{self.word_labels}' is not one of {', '.join(WORD_LABELS)}"
            )
        if self.topology not in TOPOLOGIES:
            raise GraphError(
                f"graph config: topology '{self.topology}' is not one of {', '.join(TOPOLOGIES)}"
            )
        if self.lexicon_type not in LEXICON_TYPES:
            raise GraphError(
                f"graph config: lexicon_type '{self.lexicon_type}' is not one of {', '.join(LEXICON_TYPES)}"
            )
        if self.lexicon_type == "file" and not self.lexicon:
            raise GraphError("graph config: lexicon_type 'file' needs 'lexicon' (a word -> units file)")
        if self.lexicon_type == "bpe" and not (self.sentencepiece_model or self.model):
            raise GraphError(
                "graph config: lexicon_type 'bpe' needs 'sentencepiece_model' or a .nemo 'model'"
            )
