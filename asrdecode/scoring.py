"""WER/CER of hypotheses against references (jiwer), with per-utterance lines and alignments."""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jiwer
import numpy as np

from asrdecode.errors import InputError
from asrdecode.io.lines import parse_json

# ----------------------------------------------------------------------------------------------------
# Reading


def read_transcripts(path: str | Path, field: str = "pred_text") -> dict[str, str]:
    """utt_id -> text from a Kaldi `text` file (`utt_id words...`) or a JSONL file.

    JSONL: the text is taken from `field` ("pred_text" for asrdecode/NeMo outputs, "text" for
    references in a NeMo manifest); the id from `utt_id`, `id`, or the stem of `audio_filepath`.
    Raises InputError "file:line: problem" for bad lines and duplicate ids.
    """
    from asrdecode.io.lines import read_text_bytes

    path = Path(path)
    data = read_text_bytes(path)
    is_jsonl = data.lstrip()[:1] == b"{"
    out: dict[str, str] = {}
    first: dict[str, int] = {}
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        where = f"{path}:{lineno}"
        try:
            line = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError:
            raise InputError(f"{where}: not valid UTF-8 text") from None
        if not line.strip():
            continue
        if is_jsonl:
            utt_id, text = _jsonl_entry(line, field, where)
        else:
            parts = line.strip().split(maxsplit=1)
            utt_id, text = parts[0], parts[1] if len(parts) == 2 else ""
        if utt_id in first:
            raise InputError(f"{where}: duplicate utt_id {utt_id!r} (first on line {first[utt_id]})")
        first[utt_id] = lineno
        out[utt_id] = text
    return out


def _jsonl_entry(line: str, key: str, where: str) -> tuple[str, str]:
    obj = parse_json(line, where)
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a JSON object")
    for k in ("utt_id", "id"):
        if obj.get(k) is not None:
            utt_id = str(obj[k])
            break
    else:
        audio = obj.get("audio_filepath")
        if not isinstance(audio, str) or not audio:
            raise InputError(f"{where}: no 'utt_id', 'id' or 'audio_filepath' to name the utterance")
        utt_id = "_".join(Path(audio).stem.split())
    text = obj.get(key)
    if not isinstance(text, str):
        raise InputError(f"{where}: no text under {key!r}")
    return utt_id, text


# ----------------------------------------------------------------------------------------------------
# Normalisation

_APOSTROPHES = "'\u2019\u02bc"


def normalize_text(text: str, lowercase: bool = True, remove_punctuation: bool = True) -> str:
    """Collapse whitespace; optionally lowercase and replace punctuation by spaces.

    Apostrophes inside words are kept ("don't"), other punctuation (Unicode category P*) splits
    words ("well-known" -> "well known", "Hello, world!" -> "hello world").
    """
    if lowercase:
        text = text.lower()
    if remove_punctuation:
        text = "".join(" " if _is_punct(c) else c for c in unicodedata.normalize("NFC", text))
        text = text.replace("\u2019", "'").replace("\u02bc", "'")
        text = re.sub(r"(?<!\w)'|'(?!\w)", " ", text)
    return " ".join(text.split())


def _is_punct(c: str) -> bool:
    return c not in _APOSTROPHES and unicodedata.category(c).startswith("P")


# ----------------------------------------------------------------------------------------------------
# Scoring


@dataclass
class UttScore:
    """Per-utterance counts over normalised text (missing: no hypothesis, scored as empty)."""

    utt_id: str
    ref: str
    hyp: str
    ref_words: int
    hits: int
    substitutions: int
    deletions: int
    insertions: int
    missing: bool = False

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def wer(self) -> float:
        """errors / reference words (errors themselves when the reference is empty, like jiwer)."""
        return self.errors / self.ref_words if self.ref_words else float(self.errors)

    def to_dict(self) -> dict:
        return {
            "utt_id": self.utt_id,
            "wer": self.wer,
            "errors": self.errors,
            "ref_words": self.ref_words,
            "substitutions": self.substitutions,
            "deletions": self.deletions,
            "insertions": self.insertions,
            "ref": self.ref,
            "hyp": self.hyp,
            **({"missing": True} if self.missing else {}),
        }


@dataclass
class ScoreReport:
    """Corpus totals, per-utterance scores, and which ids were missing or extra."""

    wer: float
    cer: float
    substitutions: int
    deletions: int
    insertions: int
    hits: int
    ref_words: int
    hyp_words: int
    char_errors: int
    ref_chars: int
    num_utterances: int
    missing: list[str] = dataclasses.field(
        default_factory=list
    )  # refs without hypothesis (counted as deleted)
    extra: list[str] = dataclasses.field(default_factory=list)  # hypotheses without reference (not scored)
    utterances: list[UttScore] = dataclasses.field(default_factory=list)
    normalization: dict = dataclasses.field(default_factory=dict)

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    def worst(self, n: int = 10) -> list[str]:
        """jiwer alignment texts (title, REF/HYP lines, S/D/I marks), one per utterance, for the n
        utterances with the most errors (utterances without errors are left out)."""
        ranked = sorted(self.utterances, key=lambda u: (-u.errors, -u.wer, u.utt_id))
        return [_alignment_block(u) for u in ranked[:n] if u.errors > 0]

    def to_dict(self, per_utterance: bool = True) -> dict:
        d: dict[str, Any] = {
            "wer": self.wer,
            "cer": self.cer,
            "errors": self.errors,
            "substitutions": self.substitutions,
            "deletions": self.deletions,
            "insertions": self.insertions,
            "hits": self.hits,
            "ref_words": self.ref_words,
            "hyp_words": self.hyp_words,
            "char_errors": self.char_errors,
            "ref_chars": self.ref_chars,
            "utterances": self.num_utterances,
            "num_missing": len(self.missing),
            "missing": list(self.missing),
            "num_extra": len(self.extra),
            "extra": list(self.extra),
            "normalization": dict(self.normalization),
        }
        if per_utterance:
            d["per_utterance"] = [u.to_dict() for u in self.utterances]
        return d


def score(
    refs: Mapping[str, str],
    hyps: Mapping[str, str],
    lowercase: bool = True,
    remove_punctuation: bool = True,
) -> ScoreReport:
    """Score every reference; a reference without hypothesis counts as all words deleted and is
    listed in `missing`; hypotheses without reference are listed in `extra` and not scored."""
    ids = list(refs)
    missing = [u for u in ids if u not in hyps]
    extra = [u for u in hyps if u not in refs]
    norm_ref = [normalize_text(refs[u], lowercase, remove_punctuation) for u in ids]
    norm_hyp = [normalize_text(hyps.get(u, ""), lowercase, remove_punctuation) for u in ids]
    missing_set = set(missing)

    word_counts = _counts(norm_ref, norm_hyp, jiwer.process_words, lambda s: s.split())
    char_counts = _counts(norm_ref, norm_hyp, jiwer.process_characters, list)

    utts = [
        UttScore(u, r, h, len(r.split()), *wc, missing=u in missing_set)
        for u, r, h, wc in zip(ids, norm_ref, norm_hyp, word_counts, strict=True)
    ]
    hits = sum(u.hits for u in utts)
    subs = sum(u.substitutions for u in utts)
    dels = sum(u.deletions for u in utts)
    ins = sum(u.insertions for u in utts)
    ref_words = sum(u.ref_words for u in utts)
    char_errors = sum(s + d + i for _, s, d, i in char_counts)
    ref_chars = sum(len(r) for r in norm_ref)
    errors = subs + dels + ins
    return ScoreReport(
        wer=_rate(errors, ref_words),
        cer=_rate(char_errors, ref_chars),
        substitutions=subs,
        deletions=dels,
        insertions=ins,
        hits=hits,
        ref_words=ref_words,
        hyp_words=sum(len(h.split()) for h in norm_hyp),
        char_errors=char_errors,
        ref_chars=ref_chars,
        num_utterances=len(ids),
        missing=missing,
        extra=extra,
        utterances=utts,
        normalization={"lowercase": lowercase, "remove_punctuation": remove_punctuation},
    )


BOOTSTRAP_BLOCK = 1 << 22  # utterance draws per block of resamples (`compare_paired`): 32 MB of indices


@dataclass(frozen=True)
class PairedComparison:
    """Two runs on the same references, utterance by utterance (a against b).

    ``better``/``worse``/``equal``: utterances where a has fewer / more / as many word errors as b.
    ``wer_difference``: a's corpus WER minus b's. ``low``/``high``: its ``level`` interval over
    bootstrap resamples of the utterances; ``probability_better``: the share of resamples in which
    a has fewer errors than b (Bisani and Ney's probability of improvement)."""

    utterances: int
    better: int
    worse: int
    equal: int
    wer_difference: float
    low: float
    high: float
    probability_better: float
    level: float
    rounds: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def summary(self, a: str, b: str) -> str:
        """One line: the per-utterance counts and the WER difference with its interval, in points."""
        return (
            f"{a} against {b}, per utterance ({self.utterances}): fewer errors on {self.better}, more on "
            f"{self.worse}, as many on {self.equal}; WER difference {self.wer_difference * 100:+.1f} "
            f"points, {self.level:.0%} interval [{self.low * 100:+.1f}, {self.high * 100:+.1f}]; fewer "
            f"errors in {self.probability_better:.0%} of resamples"
        )


def compare_paired(
    a: ScoreReport, b: ScoreReport, rounds: int = 10000, level: float = 0.95, seed: int = 0
) -> PairedComparison:
    """Paired comparison of two runs scored against the same references (utterances matched by
    id; those scored in only one run are left out). The interval is the paired bootstrap of
    Bisani and Ney (ICASSP 2004, "Bootstrap estimates for confidence intervals in ASR performance
    evaluation"): ``rounds`` times, draw as many utterances as there are, with replacement, and take
    the difference of the two corpus WERs over the draw (both runs on the same draw); the interval
    holds the middle ``level`` of those differences. Seeded: the same inputs give the same result."""
    if rounds < 1 or not 0.0 < level < 1.0:
        raise ValueError(f"compare_paired: rounds={rounds} must be >= 1 and level={level} in (0, 1)")
    theirs = {u.utt_id: u for u in b.utterances}
    pairs = [(u, theirs[u.utt_id]) for u in a.utterances if u.utt_id in theirs]
    for ua, ub in pairs:
        if ua.ref != ub.ref:
            raise ValueError(f"compare_paired: utterance {ua.utt_id} has two different references")
    errors_a = np.array([ua.errors for ua, _ in pairs], dtype=np.int64)
    errors_b = np.array([ub.errors for _, ub in pairs], dtype=np.int64)
    words = np.array([ua.ref_words for ua, _ in pairs], dtype=np.int64)
    n = len(pairs)
    if n == 0:
        return PairedComparison(0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, level, rounds)
    diff = errors_a - errors_b
    rng = np.random.default_rng(seed)
    drawn_diff = np.empty(rounds, np.int64)
    drawn_words = np.empty(rounds, np.int64)
    block = max(1, BOOTSTRAP_BLOCK // n)  # resamples drawn at once: memory bounded for any set size
    for r in range(0, rounds, block):
        draws = rng.integers(0, n, size=(min(block, rounds - r), n))
        drawn_diff[r : r + len(draws)] = diff[draws].sum(axis=1)
        drawn_words[r : r + len(draws)] = words[draws].sum(axis=1)
    rates = np.sort(drawn_diff / np.maximum(drawn_words, 1))
    tail = (1.0 - level) / 2.0
    return PairedComparison(
        utterances=n,
        better=int((diff < 0).sum()),
        worse=int((diff > 0).sum()),
        equal=int((diff == 0).sum()),
        wer_difference=float(diff.sum() / max(int(words.sum()), 1)),
        low=float(np.quantile(rates, tail)),
        high=float(np.quantile(rates, 1.0 - tail)),
        probability_better=float((drawn_diff < 0).mean()),
        level=level,
        rounds=rounds,
    )


def _counts(refs: list[str], hyps: list[str], process, units) -> list[tuple[int, int, int, int]]:
    """(hits, subs, dels, ins) per pair via one jiwer call; empty references are done by hand
    (older jiwer rejects them): every hypothesis unit is an insertion."""
    out: list[tuple[int, int, int, int]] = [(0, 0, 0, len(units(h))) for h in hyps]
    idx = [i for i, r in enumerate(refs) if units(r)]
    if not idx:
        return out
    res = process([refs[i] for i in idx], [hyps[i] for i in idx])
    for i, chunks in zip(idx, res.alignments, strict=True):
        h = s = d = n = 0
        for c in chunks:
            if c.type == "equal":
                h += c.ref_end_idx - c.ref_start_idx
            elif c.type == "substitute":
                s += c.ref_end_idx - c.ref_start_idx
            elif c.type == "delete":
                d += c.ref_end_idx - c.ref_start_idx
            elif c.type == "insert":
                n += c.hyp_end_idx - c.hyp_start_idx
        out[i] = (h, s, d, n)
    return out


def _alignment_block(u: UttScore) -> str:
    title = f"=== {u.utt_id}: WER {u.wer:.1%} ({u.errors} errors{', no hypothesis' if u.missing else ''}) ==="
    if not u.ref.split():
        words = u.hyp.split()
        ref = " ".join("*" * len(w) for w in words)
        marks = " ".join("I".ljust(len(w)) for w in words).rstrip()
        return f"{title}\nREF: {ref}\nHYP: {u.hyp}\n     {marks}\n"
    text = jiwer.visualize_alignment(jiwer.process_words(u.ref, u.hyp), show_measures=False)
    body = text.split("\n", 1)[1] if text.startswith("=== SENTENCE") else text
    return f"{title}\n{body.strip(chr(10))}\n"


def _rate(errors: int, total: int) -> float:
    return errors / total if total else float(errors)
