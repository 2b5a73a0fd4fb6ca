#!/usr/bin/env python3
"""The English IPA lexicon of the hama phoneme CTC model: hama's own G2P pronunciation of each word
of the LM, and pocketsphinx's CMUdict (ARPAbet, no stress) mapped to hama's phone tokens for the
words whose G2P output is not plain phones.

    .venv/bin/python scripts/make_hama_g2p_lexicon.py \
        asrdecode/assets/lm/sphinx-en-us-72k-small.arpa.gz data/cache/hama-g2p-1.7.0.tsv --jobs 2
    .venv/bin/python scripts/make_hama_lexicon.py --g2p data/cache/hama-g2p-1.7.0.tsv \
        --out asrdecode/assets/lexicon/hama-en-us.dict.gz

hama's G2P pronunciation (`scripts/make_hama_g2p_lexicon.py`: the notation the model was taught to
emit) is used when all its tokens are plain phones of the model (no spaces, tone digits or modifier
letters: 67,553 of the 72,544 words). The other words get their CMUdict pronunciations in hama's
phones (`ARPABET_TO_HAMA`, the most frequent hama token per ARPAbet phone in an alignment of
hama's G2P output with CMUdict), each with one variant per phone class that hama writes two ways
(`ALTERNATES`: all of the word's AH as ʌ instead of ə, OW as o, G as g, ER as ɚ).
`--mode merged` adds the CMUdict pronunciations to every word, `--mode cmudict` uses them alone.
Chosen on the tuning sets (data/demo/real, data/real/dev, data/real/phone-dev; pooled WER with the
otherwise untuned hama setup, acoustic_scale 1, word_insertion_penalty 0 / 1 / 2):
`cmudict` 24.5 / 24.5 / 25.8%, `g2p` 20.0 / 20.2 / 20.4% (78,958 entries), `merged` 20.3 / 19.9 /
20.3% (165,063 entries): `g2p`, the smallest within half a point of the best.
Words are those of the LM (`--arpa`); the output is `word phone phone ...` per line, gzip'ed.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import unicodedata
from pathlib import Path

ARPABET_TO_HAMA = {
    "AA": "ɑ", "AE": "æ", "AH": "ə", "AO": "ɔ", "AW": "aʊ", "AY": "aɪ", "B": "b", "CH": "t͡ʃ",
    "D": "d", "DH": "ð", "EH": "ɛ", "ER": "ɝ", "EY": "eɪ", "F": "f", "G": "ɡ", "HH": "h",
    "IH": "ɪ", "IY": "i", "JH": "d͡ʒ", "K": "k", "L": "l", "M": "m", "N": "n", "NG": "ŋ",
    "OW": "oʊ", "OY": "ɔɪ", "P": "p", "R": "ɹ", "S": "s", "SH": "ʃ", "T": "t", "TH": "θ",
    "UH": "ʊ", "UW": "u", "V": "v", "W": "w", "Y": "j", "Z": "z", "ZH": "ʒ",
}  # fmt: skip
ALTERNATES = {"AH": "ʌ", "OW": "o", "G": "g", "ER": "ɚ"}


def sphinx_dict() -> Path:
    import pocketsphinx

    return Path(pocketsphinx.__file__).parent / "model" / "en-us" / "cmudict-en-us.dict"


def read_cmudict(path: Path) -> dict[str, list[list[str]]]:
    prons: dict[str, list[list[str]]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if len(fields) >= 2:
            prons.setdefault(fields[0].split("(")[0], []).append(fields[1:])
    return prons


def mapped(pron: list[str]) -> list[tuple[str, ...]]:
    """The pronunciation in hama's phones, and one variant per alternate class it contains."""
    base = tuple(ARPABET_TO_HAMA[p] for p in pron)
    out = [base]
    for arpa, alt in ALTERNATES.items():
        if arpa in pron:
            out.append(tuple(alt if p == arpa else ARPABET_TO_HAMA[p] for p in pron))
    return out


def plain_phone(token: str) -> bool:
    """A phone token: letters only, none of them a modifier (ʰ, ː, tone digits, combining marks...)."""
    return all(
        (unicodedata.category(ch) in ("Ll", "Lo") and not "\u4e00" <= ch <= "\u9fff") or ch == "\u0361"
        for ch in token
    )


def arpa_words(path: Path) -> list[str]:
    sys.path.insert(0, str(Path(__file__).parent))
    from make_hama_g2p_lexicon import arpa_words as words

    return words(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arpa", type=Path, default=Path("asrdecode/assets/lm/sphinx-en-us-72k-small.arpa.gz"))
    ap.add_argument(
        "--g2p", type=Path, action="append", default=[], help="G2P TSV(s) of make_hama_g2p_lexicon.py"
    )
    ap.add_argument("--mode", choices=("g2p", "merged", "cmudict"), default="g2p")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    cmu = read_cmudict(sphinx_dict())
    g2p: dict[str, tuple[str, ...]] = {}
    for path in args.g2p:
        for line in path.read_text(encoding="utf-8").splitlines():
            word, _, phones = line.partition("\t")
            tokens = tuple(phones.split())
            if tokens and all(plain_phone(t) for t in tokens):
                g2p.setdefault(word, tokens)
    lines: list[str] = []
    counts = {"words": 0, "with_g2p": 0, "entries": 0, "no_pron": 0}
    for word in arpa_words(args.arpa):
        prons: list[tuple[str, ...]] = []
        if args.mode in ("merged", "cmudict") or word not in g2p:
            for pron in cmu.get(word, []):
                prons.extend(mapped(pron))
        if args.mode in ("merged", "g2p") and word in g2p:
            prons.append(g2p[word])
            counts["with_g2p"] += 1
        unique = list(dict.fromkeys(prons))
        if not unique:
            counts["no_pron"] += 1
            continue
        counts["words"] += 1
        counts["entries"] += len(unique)
        lines.extend(f"{word} {' '.join(p)}" for p in unique)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as fh:
        fh.write(("\n".join(lines) + "\n").encode("utf-8"))  # no name, no time: reproducible bytes
    print(f"{args.out}: {counts}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
