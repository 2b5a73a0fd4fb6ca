#!/usr/bin/env python3
"""Pronounce every word of an ARPA LM with hama's own G2P (text -> IPA), as the hama phoneme CTC
model was taught to emit it.

Needs hama (a dev dependency, `pip install -e '.[dev]'`; its G2P runs in its bundled engine):

    .venv/bin/python scripts/make_hama_g2p_lexicon.py \
        asrdecode/assets/lm/sphinx-en-us-72k-small.arpa.gz data/cache/hama-g2p-1.7.0.tsv --jobs 2

About 40 minutes for the 72.5k words with two jobs here.

Writes `word<TAB>phone phone ...` per word (hama's phone tokens, the ASR model's columns; spaces
and tokens hama's G2P emits between letters it cannot pronounce are kept as `<sp>` so that the
lexicon builder can drop such words). Words are read from the ARPA's unigrams (`<s>`, `</s>`,
`<unk>` skipped), the most probable first. Resumes: words already in the output are not asked again.
"""

from __future__ import annotations

import argparse
import gzip
import multiprocessing
import sys
import time
from pathlib import Path


def arpa_words(path: Path) -> list[str]:
    """The ARPA's words, the most probable first (so that a partial run covers the frequent words)."""
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    words: list[tuple[float, str]] = []
    section = ""
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if line.startswith("\\"):
                section = line
                if section == "\\2-grams:":
                    break
                continue
            if section == "\\1-grams:" and line:
                fields = line.split()
                if fields[1] not in ("<s>", "</s>", "<unk>"):
                    words.append((-float(fields[0]), fields[1]))
    return [word for _, word in sorted(words)]


_MODEL = None


def _pronounce(word: str) -> tuple[str, str]:
    global _MODEL
    if _MODEL is None:
        import hama

        _MODEL = hama.G2PModel()
    result = _MODEL.predict(word)
    phones = ["<sp>" if a.phoneme.strip() == "" else a.phoneme for a in result.alignments]
    return word, " ".join(phones)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("arpa", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args()
    from importlib.metadata import version

    import hama  # noqa: F401  (fail early, before the word list is read)

    words = arpa_words(args.arpa)
    done: set[str] = set()
    if args.out.is_file():
        done = {line.split("\t", 1)[0] for line in args.out.read_text(encoding="utf-8").splitlines()}
    todo = [w for w in words if w not in done]
    print(f"hama {version('hama')}: {len(words)} words, {len(todo)} to pronounce", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with open(args.out, "a", encoding="utf-8") as out, multiprocessing.Pool(args.jobs) as pool:
        for i, (word, phones) in enumerate(pool.imap(_pronounce, todo, chunksize=64), 1):
            out.write(f"{word}\t{phones}\n")
            if i % 2000 == 0:
                out.flush()
                rate = i / (time.time() - t0)
                print(f"{i}/{len(todo)} ({rate:.1f} words/s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
