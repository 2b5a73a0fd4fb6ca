"""`asrdecode build-graph`: TLG decoding graphs for CTC models, built with kaldifst + kaldilm.

Recipe (prior-art B.2 / C.2, the riva and icefall way; paper 001 sec. 3):
    L  lexicon transducer with disambiguation symbols (#1.. on prons, #0:#0 loop for G backoff)
    G  ARPA -> FST by kaldilm (backoff arcs carry #0, <s>/</s> become epsilon)
    LG = min(det(L o G)) in the tropical semiring, disambiguation symbols -> epsilon
    TLG = T o LG, T = CTC topology `normal` (fig. 2), `compact` (fig. 3) or `minimal`
          (Laptev et al. 2022, NeMo's names), arc-sorted on ilabel.

Label convention: TLG ilabel i reads model output column i-1 (0 = epsilon), so blank is
ilabel ``blank_column + 1`` (NeMo puts blank last: ``len(units) + 1``). The unit ids used on
L's input (units.txt) are the same numbers; disambiguation symbols follow the last column.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from asrdecode import __version__
from asrdecode.errors import GraphError
from asrdecode.graph.format import (
    FORMAT_VERSION,
    GRAPH_FILES,
    SAVE_FORMATS,
    DeviceGraph,
    find_graph_file,
    graph_file_names,
)
from asrdecode.graph.stages import BuildStages, StageCallback
from asrdecode.io.lines import read_lines
from asrdecode.io.schema import GRAPH_META, NEMO_CONFIG, problem
from asrdecode.lm.arpa import ArpaSummary, check_arpa, plain_copy

log = logging.getLogger("asrdecode.graph")

KINDS = ("tlg", "hclg-sphinx")
TOPOLOGIES = ("normal", "compact", "minimal")
LEXICON_TYPES = ("file", "bpe", "chars")
WORD_LABELS = ("earliest", "first_unit")
BLANK_NAMES = ("<blk>", "<blank>", "<b>")
RESERVED_WORDS = ("<eps>", "<s>", "</s>", "#0")
BUILD_FILES = ("TLG.fst", "words.txt", "units.txt", "meta.json")  # + graph.pt / graph.safetensors
# Files a build owns: replaced as a whole, never carried over from an older build of the folder.
OWNED_FILES = (*GRAPH_FILES, "TLG.fst", "HCLG.fst", "words.txt", "units.txt", "meta.json")
# Bump when a change to the recipe changes what a build with the same inputs produces (cache key).
RECIPE_VERSION = 2
_DISAMBIG = re.compile(r"^#\d+$")


@dataclass
class GraphBuildConfig:
    """What `build-graph` reads (YAML `configs/graph/*.yaml`); paths are relative to the cwd.

    model: a NeMo `.nemo` CTC checkpoint: units = its decoder vocabulary (blank last) and, for
      lexicon_type bpe, its sentencepiece tokenizer. With `units` too, the two must agree.
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

    def validate(self) -> None:
        if self.format not in SAVE_FORMATS:
            raise GraphError(f"graph config: format '{self.format}' is not one of {', '.join(SAVE_FORMATS)}")
        if not self.arpa:
            raise GraphError("graph config: 'arpa' (an ARPA language model) is required")
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


# ====================================================================== units
@dataclass
class Units:
    """Model output columns. ilabel of column c is c + 1; `names[c]` is its symbol."""

    names: list[str]
    blank_column: int
    source: str = ""

    @property
    def blank_ilabel(self) -> int:
        return self.blank_column + 1

    def id_of(self) -> dict[str, int]:
        return {name: c + 1 for c, name in enumerate(self.names) if c != self.blank_column}


def read_units_file(path: str | Path) -> list[str]:
    """tokens.txt: `symbol id` per line (ids 0..N-1 in any order) or one symbol per line.

    Kaldi/icefall disambiguation entries (`#0`, `#1`...) are not model columns and are ignored.
    """
    return [name for name, _ in read_units_entries(path)]


def read_units_entries(path: str | Path) -> list[tuple[str, int]]:
    """(symbol, line number) per model column, in column order (see `read_units_file`)."""
    path = Path(path)
    if not path.is_file():
        raise GraphError(f"{path}: units file not found")
    entries: list[tuple[str, int | None, int]] = []
    for lineno, line in read_lines(path, GraphError):
        if not line.strip():
            raise GraphError(f"{path}:{lineno}: empty line in units file")
        fields = line.split()
        if len(fields) == 1:
            entries.append((fields[0], None, lineno))
        elif len(fields) == 2 and re.fullmatch(r"-?\d+", fields[1]):
            entries.append((fields[0], int(fields[1]), lineno))
        else:
            raise GraphError(f"{path}:{lineno}: expected 'symbol' or 'symbol id', got '{line[:60]}'")
    entries = [e for e in entries if not _DISAMBIG.match(e[0])]
    with_ids = [e for e in entries if e[1] is not None]
    if with_ids and len(with_ids) != len(entries):
        bad = next(e for e in entries if e[1] is None)
        raise GraphError(f"{path}:{bad[2]}: line has no id while other lines do")
    if not with_ids:
        columns = [(sym, lineno) for sym, _, lineno in entries]
    else:
        by_id: dict[int, tuple[str, int]] = {}
        for sym, idx, lineno in with_ids:
            if idx in by_id:
                raise GraphError(f"{path}:{lineno}: id {idx} is used twice")
            by_id[idx] = (sym, lineno)
        missing = sorted(set(range(len(by_id))) - set(by_id))
        if missing:
            raise GraphError(f"{path}: ids must be 0..{len(by_id) - 1}; id {missing[0]} is missing")
        columns = [by_id[i] for i in range(len(by_id))]
    first_line: dict[str, int] = {}
    for sym, lineno in columns:
        if sym in first_line:
            raise GraphError(f"{path}:{lineno}: unit '{sym}' appears twice (first on line {first_line[sym]})")
        first_line[sym] = lineno
    if not columns:
        raise GraphError(f"{path}: no units")
    return columns


def resolve_units(names: list[str], blank: str = "auto", source: str = "") -> Units:
    """Place the blank: an existing blank entry, or a new column before (`first`) / after (`last`)."""
    where = source or "unit list"
    present = [i for i, n in enumerate(names) if n in BLANK_NAMES]
    if blank == "auto":
        if len(present) > 1:
            raise GraphError(
                f"{where}: several blank symbols {[names[i] for i in present]}; set graph 'blank'"
            )
        if present:
            return Units(list(names), present[0], source)
        blank = "last"
    if blank in ("first", "last"):
        if present:
            want = 0 if blank == "first" else len(names) - 1
            if present != [want]:
                raise GraphError(
                    f"{where}: blank '{names[present[0]]}' is column {present[0]}, not the {blank} column"
                )
            return Units(list(names), want, source)
        if blank == "first":
            return Units(["<blk>", *names], 0, source)
        return Units([*names, "<blk>"], len(names), source)
    if blank not in names:
        raise GraphError(f"{where}: blank symbol '{blank}' is not a unit")
    return Units(list(names), names.index(blank), source)


def read_nemo_units(path: str | Path, tmp: Path) -> tuple[list[str], Path | None]:
    """Units of a NeMo CTC `.nemo` (decoder.vocabulary, blank = last column) and its sentencepiece
    tokenizer extracted to `tmp` (None for character models). Only named members are read."""
    import tarfile

    import yaml

    path = Path(path)
    if not path.is_file():
        raise GraphError(f"{path}: model file not found")
    try:
        with tarfile.open(path) as tar:
            members = {m.name.lstrip("./"): m for m in tar.getmembers() if m.isfile()}
            if "model_config.yaml" not in members:
                raise GraphError(f"{path}: no model_config.yaml inside (not a .nemo checkpoint)")
            cfg = yaml.safe_load(tar.extractfile(members["model_config.yaml"]).read())
            wrong = problem(cfg, NEMO_CONFIG) if isinstance(cfg, dict) else "it is not a mapping"
            if wrong is not None:
                raise GraphError(f"{path}: model_config.yaml: {wrong}")
            vocab = (cfg.get("decoder") or {}).get("vocabulary") or cfg.get("labels")
            if not vocab:
                raise GraphError(f"{path}: model_config.yaml has no decoder.vocabulary")
            sp_path = None
            model_path = str((cfg.get("tokenizer") or {}).get("model_path") or "")
            if model_path:
                name = model_path.removeprefix("nemo:").split("/")[-1]
                if name not in members:
                    raise GraphError(f"{path}: tokenizer '{name}' is missing from the archive")
                sp_path = tmp / "tokenizer.model"
                sp_path.write_bytes(tar.extractfile(members[name]).read())
    except (tarfile.TarError, OSError, yaml.YAMLError) as err:
        raise GraphError(f"{path}: cannot read the .nemo archive ({err})") from None
    return [str(v) for v in vocab], sp_path


def check_units_agree(
    file_units: list[tuple[str, int]], model: Units, units_path: str | Path, model_path: str | Path
) -> None:
    """A tokens.txt given next to a model must list the model's columns in order. Its blank entry is
    optional, but where present it must sit at the model's blank column. `file_units` comes from
    `read_units_entries`; a mismatch is a one-line error naming the file's line."""
    where = f"{units_path}"
    has_blank = any(sym in BLANK_NAMES for sym, _ in file_units)
    want = [
        (c, n)
        for c, n in enumerate(model.names)
        if has_blank or c != model.blank_column  # without a blank entry, skip the model's blank column
    ]
    for (sym, lineno), (col, name) in zip(file_units, want, strict=False):
        is_blank = col == model.blank_column
        if is_blank and sym not in BLANK_NAMES:
            raise GraphError(
                f"{where}:{lineno}: '{sym}' is at column {col}, where {model_path} has its blank"
            )
        if not is_blank and sym != name:
            what = "a blank" if sym in BLANK_NAMES else f"'{sym}'"
            blank_note = f" (its blank is column {model.blank_column})" if sym in BLANK_NAMES else ""
            raise GraphError(
                f"{where}:{lineno}: column {col} is {what} but {model_path} has '{name}' there{blank_note}"
            )
    if len(file_units) > len(want):
        raise GraphError(
            f"{where}:{file_units[len(want)][1]}: '{file_units[len(want)][0]}' is past the last column "
            f"of {model_path} ({len(want)} units{' with' if has_blank else ' besides'} its blank)"
        )
    if len(file_units) < len(want):
        col, name = want[len(file_units)]
        raise GraphError(
            f"{where}:{file_units[-1][1]}: the file ends after {len(file_units)} units; {model_path} "
            f"has {len(want)}{' with' if has_blank else ' besides'} its blank (next: column {col} '{name}')"
        )


# ====================================================================== lexicon
@dataclass
class Lexicon:
    """Pronunciations (word, unit ids) for the words the LM knows, plus what was dropped."""

    prons: list[tuple[str, tuple[int, ...]]]
    dropped: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def drop(self, reason: str, word: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
        ex = self.examples.setdefault(reason, [])
        if len(ex) < 5:
            ex.append(word)


def read_lexicon(path: str | Path, units: Units, lm_words: set[str]) -> Lexicon:
    """`word unit unit ...` per line. Unknown units or LM-less words are dropped (counted)."""
    path = Path(path)
    if not path.is_file():
        raise GraphError(f"{path}: lexicon file not found")
    ids = units.id_of()
    lex = Lexicon(prons=[])
    seen: set[tuple[str, tuple[int, ...]]] = set()
    for lineno, raw in read_lines(path, GraphError):
        fields = raw.split()
        if not fields:
            raise GraphError(f"{path}:{lineno}: empty lexicon line")
        word, spelling = fields[0], fields[1:]
        if not spelling:
            raise GraphError(f"{path}:{lineno}: word '{word}' has no units")
        if word in RESERVED_WORDS or _DISAMBIG.match(word):
            raise GraphError(f"{path}:{lineno}: '{word}' is a reserved symbol, not a word")
        if word not in lm_words:
            lex.drop("word not in the LM", word)
            continue
        if any(u not in ids for u in spelling):
            lex.drop("unit not in the model", word)
            continue
        key = (word, tuple(ids[u] for u in spelling))
        if key not in seen:
            seen.add(key)
            lex.prons.append(key)
    return lex


def spell_lexicon(
    kind: str, words: list[str], units: Units, sp_model: str | None = None, lowercase_units: bool = False
) -> Lexicon:
    """Generated lexicon: `bpe` (sentencepiece pieces of each word) or `chars` (letters)."""
    ids = units.id_of()
    lex = Lexicon(prons=[])
    if kind == "bpe":
        import sentencepiece as spm

        if not sp_model or not Path(sp_model).is_file():
            raise GraphError(f"{sp_model}: sentencepiece model not found")
        sp = spm.SentencePieceProcessor(model_file=str(sp_model))

        def spell(w: str) -> list[str]:
            return list(sp.encode(w, out_type=str))
    else:

        def spell(w: str) -> list[str]:
            return list(w)

    for word in words:
        pieces = spell(word)
        if not pieces:
            lex.drop("empty spelling", word)
        elif any(p not in ids for p in pieces):
            lex.drop("unit not in the model", word)
        else:
            lex.prons.append((word, tuple(ids[p] for p in pieces)))
    return lex


def add_disambig(
    prons: list[tuple[str, tuple[int, ...]]],
) -> tuple[list[tuple[str, tuple[int, ...], int]], int]:
    """Kaldi-style disambiguation: a pron that is a prefix of another one, or shared by several
    words, gets #1, #2... appended. Returns (word, units, disambig index or 0) and the highest index."""
    count: dict[tuple[int, ...], int] = {}
    prefixes: set[tuple[int, ...]] = set()
    for _, p in prons:
        count[p] = count.get(p, 0) + 1
        for k in range(1, len(p)):
            prefixes.add(p[:k])
    used: dict[tuple[int, ...], int] = {}
    out = []
    for word, p in prons:
        if p in prefixes or count[p] > 1:
            used[p] = used.get(p, 0) + 1
            out.append((word, p, used[p]))
        else:
            out.append((word, p, 0))
    return out, max(used.values(), default=0)


# ====================================================================== FST pieces
def _fst_from_lists(
    num_states: int, start: int, finals: dict[int, float], arcs: list[tuple[int, int, int, float, int]]
):
    """kaldifst StdVectorFst from (src, ilabel, olabel, weight, dst) tuples."""
    final = np.full(num_states, np.inf, dtype=np.float32)
    for s, w in finals.items():
        final[s] = w
    a = np.array(arcs, dtype=np.float64).reshape(-1, 5)
    g = DeviceGraph.from_arrays(
        num_states,
        start,
        final,
        a[:, 0].astype(np.int64),
        a[:, 1].astype(np.int64),
        a[:, 2].astype(np.int64),
        a[:, 3].astype(np.float32),
        a[:, 4].astype(np.int64),
    )
    return g.to_kaldifst()


def make_lexicon_fst(
    prons: list[tuple[str, tuple[int, ...], int]],
    word_ids: dict[str, int],
    first_disambig: int,
    word_disambig0: int,
    optional_units: tuple[int, ...] = (),
    optional_cost: float = 0.0,
):
    """L with disambiguation: loop state 0 (start, final); each pron is a path 0 -> ... -> 0 that
    outputs the word on its first arc; #0:#0 self-loop passes G's backoff symbol; each unit in
    `optional_units` (e.g. a word separator, or silence) may be read between words with no output,
    at `optional_cost`."""
    arcs: list[tuple[int, int, int, float, int]] = []
    n = 1
    for word, units, dis in prons:
        labels = list(units) + ([first_disambig + dis] if dis else [])
        src = 0
        for k, lab in enumerate(labels):
            dst = 0 if k == len(labels) - 1 else n
            if dst:
                n += 1
            arcs.append((src, lab, word_ids[word] if k == 0 else 0, 0.0, dst))
            src = dst
    arcs.append((0, first_disambig, word_disambig0, 0.0, 0))
    for u in optional_units:
        arcs.append((0, u, 0, optional_cost, 0))
    return _fst_from_lists(n, 0, {0: 0.0}, arcs)


def make_ctc_topo(units: Units, topology: str):
    """CTC T transducer over ilabels = column + 1; outputs unit ids (same numbers), blank -> eps.

    normal  (paper 001 fig. 2): state 0 = after blank, one state per unit; a unit repeated on
            consecutive frames is one output, a real repeat needs a blank in between.
    compact (paper 001 fig. 3): hub state with blank self-loop; unit u enters its own state
            (self-loop u:eps), returns by epsilon; repeats need no blank.
    minimal (Laptev et al. 2022): one state; every non-blank frame outputs its unit.
    """
    b = units.blank_ilabel
    toks = [c + 1 for c in range(len(units.names)) if c != units.blank_column]
    arcs: list[tuple[int, int, int, float, int]] = []
    if topology == "minimal":
        arcs.append((0, b, 0, 0.0, 0))
        arcs += [(0, t, t, 0.0, 0) for t in toks]
        return _fst_from_lists(1, 0, {0: 0.0}, arcs)
    state = {t: k + 1 for k, t in enumerate(toks)}
    n = len(toks) + 1
    if topology == "compact":
        arcs.append((0, b, 0, 0.0, 0))
        for t in toks:
            s = state[t]
            arcs += [(0, t, t, 0.0, s), (s, t, 0, 0.0, s), (s, 0, 0, 0.0, 0)]
        return _fst_from_lists(n, 0, {0: 0.0}, arcs)
    # normal
    for src in range(n):
        arcs.append((src, b, 0, 0.0, 0))
        for t in toks:
            dst = state[t]
            arcs.append((src, t, 0 if dst == src else t, 0.0, dst))
    return _fst_from_lists(n, 0, {s: 0.0 for s in range(n)}, arcs)


def arpa_to_g(arpa_plain: Path, words_txt: Path, out_fst: Path, max_order: int) -> None:
    """kaldilm arpa2fst in a child process (it aborts the process on errors it finds)."""
    code = (
        "import sys, kaldilm; kaldilm.arpa2fst(sys.argv[1], output_fst=sys.argv[3], disambig_symbol='#0', "
        "read_symbol_table=sys.argv[2], max_order=int(sys.argv[4]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(arpa_plain), str(words_txt), str(out_fst), str(max_order)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 or not out_fst.is_file():
        lines = [
            ln for ln in (proc.stderr or "").splitlines() if "[E]" in ln or "Error" in ln or "error" in ln
        ]
        msg = lines[-1].strip() if lines else (proc.stderr.strip().splitlines() or ["unknown error"])[-1]
        raise GraphError(f"{arpa_plain}: kaldilm could not convert the ARPA: {msg}")


def _relabel(fst: Any, min_disambig: int | None = None, olabel_zero: tuple[int, ...] = ()):
    """Set ilabels >= min_disambig and the given olabels to epsilon (numpy pass, no Python arc loop)."""
    g = DeviceGraph.from_kaldifst(fst)
    a = g.arc_arrays()
    il, ol = a["ilabel"].astype(np.int64).copy(), a["olabel"].astype(np.int64).copy()
    if min_disambig is not None:
        il[il >= min_disambig] = 0
    for o in olabel_zero:
        ol[ol == o] = 0
    final = g.final.numpy()
    g2 = DeviceGraph.from_arrays(g.num_states, g.start, final, a["src"], il, ol, a["weight"], a["nextstate"])
    return g2.to_kaldifst()


def compile_lg(
    L: Any,
    G: Any,
    first_disambig: int,
    word_disambig0: int,
    remove_epsilon: bool = False,
    keep_disambig: bool = False,
    word_labels: str = "earliest",
) -> Any:
    """min(det(L o G)) in the tropical semiring, then disambiguation symbols -> epsilon (the unit-side
    ones only without keep_disambig, for HCLG's later determinization), arc-sorted.

    word_labels `earliest`: det as a transducer (labels delayed to where the word is certain);
    `first_unit`: det of the acceptor over (unit, word) pairs (labels stay on first units)."""
    import kaldifst

    kaldifst.arcsort(L, sort_type="olabel")
    kaldifst.arcsort(G, sort_type="ilabel")
    LG = kaldifst.compose(L, G)
    if LG.num_states == 0:
        raise GraphError("L o G is empty: no lexicon word can be read by the LM")
    if word_labels == "first_unit":
        LG = _determinize_label_pairs(LG)
    else:
        if kaldifst.determinize_star(LG):
            raise GraphError("determinization of L o G stopped early")
        kaldifst.minimize_encoded(LG)
    LG = _relabel(LG, min_disambig=None if keep_disambig else first_disambig, olabel_zero=(word_disambig0,))
    if remove_epsilon:
        kaldifst.rmepsilon(LG)
    kaldifst.connect(LG)
    kaldifst.arcsort(LG, sort_type="ilabel")
    return LG


def _determinize_label_pairs(fst: Any) -> Any:
    """min(det()) of `fst` read as an acceptor over its (ilabel, olabel) pairs (OpenFst's label
    encoding, done with numpy): the labels stay on the arcs L put them on."""
    import kaldifst

    g = DeviceGraph.from_kaldifst(fst)
    a = g.arc_arrays()
    il, ol = a["ilabel"].astype(np.int64), a["olabel"].astype(np.int64)
    radix = int(ol.max(initial=0)) + 1
    pairs, code = np.unique(il * radix + ol, return_inverse=True)
    code = code.reshape(-1).astype(np.int64) + 1
    code[(il == 0) & (ol == 0)] = 0  # eps:eps stays epsilon
    acceptor = DeviceGraph.from_arrays(
        g.num_states, g.start, g.final.numpy(), a["src"], code, code, a["weight"], a["nextstate"]
    ).to_kaldifst()
    if kaldifst.determinize_star(acceptor):
        raise GraphError("determinization of L o G (label pairs) stopped early")
    kaldifst.minimize(acceptor)
    d = DeviceGraph.from_kaldifst(acceptor)
    b = d.arc_arrays()
    lut = np.concatenate([[0], pairs])[b["ilabel"].astype(np.int64)]
    return DeviceGraph.from_arrays(
        d.num_states,
        d.start,
        d.final.numpy(),
        b["src"],
        lut // radix,
        lut % radix,
        b["weight"],
        b["nextstate"],
    ).to_kaldifst()


def write_symbols(path: Path, symbols: list[tuple[str, int]]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for sym, idx in symbols:
            fh.write(f"{sym} {idx}\n")


def read_symbols(path: str | Path) -> dict[int, str]:
    """words.txt / units.txt: `symbol id` per line -> {id: symbol}."""
    path = Path(path)
    if not path.is_file():
        raise GraphError(f"{path}: symbol table not found")
    table: dict[int, str] = {}
    for lineno, raw in read_lines(path, GraphError):
        fields = raw.split()
        if not fields:
            continue
        if len(fields) != 2 or not re.fullmatch(r"\d+", fields[1]):
            raise GraphError(f"{path}:{lineno}: expected 'symbol id', got '{raw.strip()[:60]}'")
        table[int(fields[1])] = fields[0]
    return table


def _unit_symbol(name: str) -> str:
    return "<space>" if name == " " else name.replace(" ", "_")


# ====================================================================== build + cache
def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def input_checksums(cfg: GraphBuildConfig) -> dict[str, dict[str, str]]:
    if cfg.kind == "hclg-sphinx":
        model = Path(cfg.acoustic_model or "")
        noise = Path(cfg.noisedict) if cfg.noisedict else model / "noisedict"
        sphinx_files = {
            "arpa": cfg.arpa,
            "lexicon": cfg.lexicon,
            "mdef": str(model / "mdef"),
            "transition_matrices": str(model / "transition_matrices"),
        }
        if noise.is_file() or cfg.noisedict:
            sphinx_files["noisedict"] = str(noise)
        return _checksums(sphinx_files)
    files = {
        "arpa": cfg.arpa,
        "model": cfg.model,
        "units": cfg.units,
        "sentencepiece_model": cfg.sentencepiece_model,
    }
    if cfg.lexicon_type == "file":
        files["lexicon"] = cfg.lexicon
    return _checksums(files)


def _checksums(files: dict[str, str | None]) -> dict[str, dict[str, str]]:
    out = {}
    for key, p in files.items():
        if p is None:
            continue
        if not Path(p).is_file():
            raise GraphError(f"{p}: {key} file not found")
        out[key] = {"path": str(Path(p).resolve()), "sha256": sha256_file(p)}
    return out


def cache_key(cfg: GraphBuildConfig, inputs: dict[str, dict[str, str]]) -> dict[str, Any]:
    """What decides whether a build can be reused: input checksums, config (without paths) and the
    code that builds and writes the graph (graph format, recipe and asrdecode versions)."""
    config = {
        k: v
        for k, v in dataclasses.asdict(cfg).items()
        if k
        not in ("arpa", "model", "units", "lexicon", "sentencepiece_model", "acoustic_model", "noisedict")
    }
    return {
        "config": config,
        "sha256": {k: v["sha256"] for k, v in inputs.items()},
        "code": {
            "format_version": FORMAT_VERSION,
            "recipe_version": RECIPE_VERSION,
            "asrdecode": __version__,
        },
    }


def read_graph_meta(path: Path) -> dict[str, Any]:
    """A graph folder's meta.json, checked against `GRAPH_META` (one-line GraphError otherwise)."""
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise GraphError(f"{path}: not readable JSON ({err})") from None
    if (wrong := problem(meta, GRAPH_META)) is not None:
        raise GraphError(f"{path}: {wrong}")
    return meta


def cached_meta(
    cfg: GraphBuildConfig, out_dir: str | Path, inputs: dict[str, dict[str, str]] | None = None
) -> dict[str, Any] | None:
    """meta.json of an existing build with the same inputs and config, else None."""
    out = Path(out_dir)
    meta_path = out / "meta.json"
    files = BUILD_FILES if cfg.kind == "tlg" else tuple(f.replace("TLG", "HCLG") for f in BUILD_FILES)
    files += graph_file_names(cfg.format)
    if not meta_path.is_file() or not all((out / f).is_file() for f in files):
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(meta, dict) or problem(meta, GRAPH_META) is not None:
        return None
    if meta.get("cache_key") != cache_key(cfg, inputs if inputs is not None else input_checksums(cfg)):
        return None
    return meta


@contextlib.contextmanager
def staged_folder(out_dir: str | Path) -> Iterator[Path]:
    """Write a graph folder atomically: files go into a fresh sibling folder (`.NAME.building-*`),
    which replaces `out_dir` as a whole when the block ends normally (an atomic exchange where the OS
    has one). On an exception the sibling is removed and `out_dir` stays as it was, so its meta.json
    always describes its graph files. Files of `out_dir` a build does not own are carried over."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise GraphError(f"{out}: exists and is not a folder")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        remove_abandoned_stages(out)
        prefix = f".{out.name}.building-{os.getpid()}@{socket.gethostname()}-"
        stage = Path(tempfile.mkdtemp(prefix=prefix, dir=out.parent))
    except OSError as err:
        raise GraphError(f"{out}: cannot create the graph folder ({err.strerror})") from None
    try:
        yield stage
        if out.is_dir():
            _carry_over(out, stage)
        _swap_into(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)  # the new files on failure, the old ones after a swap


def remove_abandoned_stages(out: Path) -> list[Path]:
    """Delete staging siblings of `out` left by builds that were killed (SIGKILL, power loss): their
    name holds the building process's pid and host (`.NAME.building-PID@HOST-*`), and a stage of
    this host whose process is gone is removed. Stages of live processes or other hosts stay."""
    pattern = re.compile(rf"^\.{re.escape(out.name)}\.building-(\d+)@(.*)-[^-]+$")
    removed = []
    for entry in out.parent.iterdir():
        match = pattern.match(entry.name)
        if not match or match.group(2) != socket.gethostname() or _process_alive(int(match.group(1))):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def _process_alive(pid: int) -> bool:
    """True while `pid` runs; a zombie (killed, not yet reaped: containers whose init does not
    reap orphans keep them for good) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (not Linux): the signal test is all there is
        return True
    return stat.rsplit(")", 1)[-1].split()[:1] not in (["Z"], ["X"])


def _carry_over(old: Path, new: Path) -> None:
    """Hard-link (or copy) entries of `old` that a build does not own into `new`."""
    for entry in old.iterdir():
        if entry.name in OWNED_FILES or (new / entry.name).exists():
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, new / entry.name, symlinks=True)
            continue
        try:
            os.link(entry, new / entry.name, follow_symlinks=False)
        except OSError:
            shutil.copy2(entry, new / entry.name, follow_symlinks=False)


def _exchange_paths(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _swap_into(stage: Path, out: Path) -> None:
    """Put `stage` at `out`; afterwards `stage` holds the old folder (if any), for the caller to delete."""
    if not out.exists():
        os.rename(stage, out)
        return
    if _exchange_paths(stage, out):
        return
    # no atomic exchange: two renames; in between `out` is briefly absent, never half-written
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    os.rename(out, old / out.name)
    try:
        os.rename(stage, out)
    except OSError:
        os.rename(old / out.name, out)  # put the old folder back
        old.rmdir()
        raise
    os.rename(old / out.name, stage)
    old.rmdir()


def build_graph(
    cfg: GraphBuildConfig, out_dir: str | Path, force: bool = False, on_stage: StageCallback | None = None
) -> dict[str, Any]:
    """Build TLG (or sphinx HCLG) into `out_dir` (graph.pt and/or graph.safetensors, TLG.fst, words.txt,
    units.txt, meta.json); returns meta. The folder is replaced as a whole (`staged_folder`).
    `on_stage(name, "start" | "done", seconds)` hears each named stage (`asrdecode.graph.stages`);
    their seconds are in meta["seconds"].

    Skips the build (meta["cached"] = True) when meta.json records the same input checksums,
    config and code versions (`cache_key`), unless `force`.
    """
    cfg.validate()
    t0 = time.perf_counter()
    out = Path(out_dir)
    inputs = input_checksums(cfg)
    if not force:
        meta = cached_meta(cfg, out, inputs)
        if meta is not None:
            meta["cached"] = True
            return meta
    stages = BuildStages(on_stage)
    with staged_folder(out) as stage:
        if cfg.kind == "hclg-sphinx":
            return _build_sphinx(cfg, stage, inputs, t0, stages)
        return _build_tlg(cfg, stage, inputs, t0, stages)


def _build_tlg(
    cfg: GraphBuildConfig, stage: Path, inputs: dict[str, dict[str, str]], t0: float, stages: BuildStages
) -> dict:
    """The TLG recipe, writing the graph folder's files into `stage`."""
    import kaldifst

    # units
    sp_model = cfg.sentencepiece_model
    nemo_tmp = tempfile.TemporaryDirectory(prefix="asrdecode-nemo-")
    if cfg.model is not None:
        nemo_units, nemo_sp = read_nemo_units(cfg.model, Path(nemo_tmp.name))
        units = resolve_units(nemo_units, "last", source=str(cfg.model))
        if cfg.units is not None:
            check_units_agree(read_units_entries(cfg.units), units, cfg.units, cfg.model)
        if cfg.lexicon_type == "bpe" and sp_model is None:
            if nemo_sp is None:
                raise GraphError(
                    f"{cfg.model}: the model has no sentencepiece tokenizer for lexicon_type bpe"
                )
            sp_model = str(nemo_sp)
    elif cfg.units is not None:
        units = resolve_units(read_units_file(cfg.units), cfg.blank, source=str(cfg.units))
    else:
        units = resolve_units(list(cfg.unit_list or []), cfg.blank, source="unit_list")
    unit_ids = units.id_of()
    optional: tuple[int, ...] = ()
    if cfg.word_separator is not None:
        if cfg.word_separator not in unit_ids:
            raise GraphError(f"graph config: word_separator '{cfg.word_separator}' is not a unit")
        optional = (unit_ids[cfg.word_separator],)

    # LM vocabulary and words.txt (Kaldi order: <eps>, words, #0, <s>, </s>)
    arpa: ArpaSummary = check_arpa(cfg.arpa)
    lm_words = [w for w in arpa.vocab if w not in ("<s>", "</s>")]
    bad = [w for w in lm_words if w in ("<eps>", "#0") or _DISAMBIG.match(w)]
    if bad:
        raise GraphError(f"{cfg.arpa}: reserved symbol '{bad[0]}' used as a word")
    words = [("<eps>", 0)] + [(w, i + 1) for i, w in enumerate(lm_words)]
    word_ids = dict(words)
    n = len(words)
    words += [("#0", n), ("<s>", n + 1), ("</s>", n + 2)]
    word_disambig0 = n

    # lexicon
    if cfg.lexicon_type == "file":
        lex = read_lexicon(cfg.lexicon, units, set(lm_words))
    else:
        spellable = [w for w in lm_words if not (w.startswith("<") and w.endswith(">"))]
        lex = spell_lexicon(cfg.lexicon_type, spellable, units, sp_model)
    nemo_tmp.cleanup()
    if not lex.prons:
        raise GraphError(
            f"no usable lexicon entries ({lex.dropped or 'empty lexicon'}); check units and LM words"
        )
    for reason, count in lex.dropped.items():
        log.warning(
            "graph: dropped %d lexicon words (%s), e.g. %s", count, reason, ", ".join(lex.examples[reason])
        )
    prons, max_dis = add_disambig(lex.prons)
    first_disambig = len(units.names) + 1  # '#0' on L's input side; #k = first_disambig + k
    covered = {w for w, _ in lex.prons}
    no_pron = [w for w in lm_words if w not in covered]

    unit_table = [("<eps>", 0)] + [(_unit_symbol(nm), c + 1) for c, nm in enumerate(units.names)]
    unit_table += [(f"#{k}", first_disambig + k) for k in range(max_dis + 1)]

    write_symbols(stage / "words.txt", words)
    write_symbols(stage / "units.txt", unit_table)
    with tempfile.TemporaryDirectory(prefix="scratch-", dir=stage) as tmp_name:
        tmp = Path(tmp_name)
        arpa_plain = Path(cfg.arpa)
        with open(arpa_plain, "rb") as fh:
            if fh.read(2) == b"\x1f\x8b":
                arpa_plain = plain_copy(arpa_plain, tmp / "lm.arpa")
        with stages("G"):
            arpa_to_g(arpa_plain, stage / "words.txt", tmp / "G.fst", cfg.max_order)
            G = kaldifst.StdVectorFst.read(str(tmp / "G.fst"))
        with stages("LG"):
            L = make_lexicon_fst(prons, word_ids, first_disambig, word_disambig0, optional)
            LG = compile_lg(
                L, G, first_disambig, word_disambig0, cfg.remove_epsilon, word_labels=cfg.word_labels
            )
        with stages("T∘LG"):
            T = make_ctc_topo(units, cfg.topology)
            kaldifst.arcsort(T, sort_type="olabel")
            TLG = kaldifst.compose(T, LG)
            kaldifst.connect(TLG)
            kaldifst.arcsort(TLG, sort_type="ilabel")
        lg_states, lg_arcs = LG.num_states, _num_arcs(LG)
        meta_core = {
            "kind": "TLG",
            "topology": cfg.topology,
            "label_convention": "ilabel i reads model column i-1; 0 = epsilon; olabel = words.txt id",
            "num_columns": len(units.names),
            "blank_column": units.blank_column,
            "blank_ilabel": units.blank_ilabel,
            "word_disambig_removed": True,
            "word_labels": cfg.word_labels,
            "word_label_position": (
                "on the arc reading the word's first unit (graph not input-deterministic)"
                if cfg.word_labels == "first_unit"
                else "where det(L o G) makes the word certain: the first unit at which its spelling "
                "leaves all other spellings allowed there (an epsilon arc after the last unit for a "
                "spelling that is a prefix of another); label pushing would move none"
            ),
        }
        with stages("write"):
            graph = DeviceGraph.from_kaldifst(TLG, meta=meta_core)
            graph.validate()
            graph_files = graph.save_folder(stage, cfg.format)
            kaldifst.StdConstFst(TLG).write(str(stage / "TLG.fst"))
        summary = graph.summary()
        meta = {
            **meta_core,
            "format": f"asrdecode-graph v{FORMAT_VERSION}",
            "graph_files": list(graph_files),
            "inputs": inputs,
            "config": dataclasses.asdict(cfg),
            "cache_key": cache_key(cfg, inputs),
            "units": {
                "count": len(units.names),
                "blank_symbol": units.names[units.blank_column],
                "source": units.source,
                "disambig_symbols": max_dis + 1,
            },
            "words": {
                "count": len(lm_words),
                "with_pronunciation": len(covered),
                "without_pronunciation": len(no_pron),
                "lexicon_entries": len(lex.prons),
            },
            "dropped_lexicon_words": lex.dropped,
            "lm": {
                "order": arpa.order,
                "ngrams": {str(k): v for k, v in arpa.counts.items()},
                "max_order_used": cfg.max_order,
            },
            "sizes": {
                "G": {"states": G.num_states, "arcs": _num_arcs(G)},
                "LG": {"states": lg_states, "arcs": lg_arcs},
                "T": {"states": T.num_states, "arcs": _num_arcs(T)},
                "TLG": summary,
            },
            "seconds": {**stages.seconds, "total": round(time.perf_counter() - t0, 3)},
            "cached": False,
        }
        (stage / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


def _build_sphinx(
    cfg: GraphBuildConfig, out: Path, inputs: dict[str, dict[str, str]], t0: float, stages: BuildStages
) -> dict[str, Any]:
    from asrdecode.graph.sphinx import SphinxGraphConfig, build_sphinx_hclg

    scfg = SphinxGraphConfig(
        model_dir=str(cfg.acoustic_model),
        dictionary=str(cfg.lexicon),
        arpa=cfg.arpa,
        noisedict=cfg.noisedict,
        silprob=cfg.silprob,
        fillprob=cfg.fillprob,
        transition_scale=cfg.transition_scale,
    )
    check_arpa(cfg.arpa)
    meta = build_sphinx_hclg(scfg, out, cfg.format, stages)
    meta.update(
        {
            "inputs": inputs,
            "config": dataclasses.asdict(cfg),
            "cache_key": cache_key(cfg, inputs),
            "cached": False,
        }
    )
    meta["seconds"]["total"] = round(time.perf_counter() - t0, 3)
    (out / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


def _num_arcs(fst: Any) -> int:
    import kaldifst

    return sum(fst.num_arcs(s) for s in kaldifst.StateIterator(fst))


def describe_graph(graph_dir: str | Path) -> dict[str, str]:
    """`asrdecode info GRAPH_DIR`: printable facts about a built or converted graph."""
    d = Path(graph_dir)
    path = find_graph_file(d)
    if path is None:
        raise GraphError(f"{d}: no graph.pt or graph.safetensors (not a graph folder)")
    graph = DeviceGraph.load(path)
    s = graph.summary()
    info = {
        "file": ", ".join(name for name in GRAPH_FILES if (d / name).is_file()),
        "kind": str(graph.meta.get("kind", "?")),
        "topology": str(graph.meta.get("topology", "-")),
        "states": f"{s['states']:,}",
        "arcs": f"{s['arcs']:,}",
        "epsilon arcs": f"{s['epsilon_arcs']:,} ({100 * s['epsilon_share']:.1f}%)",
        "final states": f"{s['final_states']:,}",
        "size": f"{s['bytes']:,} bytes ({s['bytes'] / 2**20:.2f} MiB)",
        "model columns read": str(s["max_ilabel"]),
    }
    if "blank_column" in graph.meta:
        info["blank"] = f"column {graph.meta['blank_column']} (ilabel {graph.meta['blank_ilabel']})"
    for name in ("words.txt", "units.txt"):
        if (d / name).is_file():
            table = read_symbols(d / name)
            real = [v for v in table.values() if v not in ("<eps>", "<s>", "</s>") and not _DISAMBIG.match(v)]
            info[f"{name.split('.')[0]} (vocabulary)"] = str(len(real))
    meta_path = d / "meta.json"
    if meta_path.is_file():
        meta = read_graph_meta(meta_path)
        if "seconds" in meta:
            info["build seconds"] = str(meta["seconds"].get("total"))
        if meta.get("lm"):
            info["LM"] = f"order {meta['lm']['order']}, n-grams {meta['lm']['ngrams']}"
        if meta.get("dropped_lexicon_words"):
            info["dropped lexicon words"] = json.dumps(meta["dropped_lexicon_words"])
    return info
