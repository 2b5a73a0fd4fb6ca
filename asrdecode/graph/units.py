"""Output units and lexicons of a TLG: the units file (or a NeMo model's vocabulary) with its blank, the
lexicon (a file, BPE spelled by the model's tokenizer, or characters) and its disambiguation
symbols."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from asrdecode.errors import GraphError
from asrdecode.io.lines import read_lines
from asrdecode.io.schema import NEMO_CONFIG, problem

log = logging.getLogger("asrdecode.graph")


WORD_LABELS = ("earliest", "first_unit")
BLANK_NAMES = ("<blk>", "<blank>", "<b>")


BLANK_NAMES = ("<blk>", "<blank>", "<b>")
RESERVED_WORDS = ("<eps>", "<s>", "</s>", "#0")


DISAMBIG = re.compile(r"^#\d+$")


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
    entries = [e for e in entries if not DISAMBIG.match(e[0])]
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


def read_model_units(path: str | Path, tmp: Path) -> tuple[list[str], Path | None]:
    """Units (blank last, not listed) of the CTC model a TLG is built for: a NeMo `.nemo`
    (`read_nemo_units`) or a converted hama model (`.safetensors`, its metadata's units)."""
    if Path(path).suffix == ".safetensors":
        return read_hama_units(path), None
    return read_nemo_units(path, tmp)


def read_hama_units(path: str | Path) -> list[str]:
    """The units in a converted hama model's safetensors metadata (nothing else of the file is read)."""
    import json

    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
        units = json.loads(meta["units"])
    except (SafetensorError, OSError, KeyError, json.JSONDecodeError) as err:
        raise GraphError(f"{path}: not a converted hama model with units in its metadata ({err})") from None
    if not isinstance(units, list) or not units or not all(isinstance(u, str) for u in units):
        raise GraphError(f"{path}: the units in its metadata are not a list of symbols")
    return units


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
        if word in RESERVED_WORDS or DISAMBIG.match(word):
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
