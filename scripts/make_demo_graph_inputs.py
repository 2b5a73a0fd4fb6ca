"""Write the inputs of the demo graph configs: a trigram ARPA (kaldingram, Kneser-Ney) over the
sentences of the synthetic TRAINING corpus (scripts/train_demo_model.py makes it), and the token
LM of the demo transducers' shallow fusion: the same sentences spelled with a demo model's
tokenizer, a 4-gram over its unit strings (`decoder.ngram_lm_token_ids: words`). The demo test
transcripts (data/demo/*/manifest.jsonl) are held out: sentences equal to one are dropped, so
WER measured with these LMs is not inflated by the LM having seen the test text.

    .venv/bin/python scripts/make_demo_graph_inputs.py        # -> data/demo/graph/{corpus.txt,lm.arpa}
    .venv/bin/python scripts/make_demo_graph_inputs.py --token-lm embedded:demo_rnnt_bpe
        # -> also data/demo/graph/tokens.arpa
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from asrdecode.lm import train_arpa

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "data" / "demo" / "graph"
TRAIN = ROOT / "data" / "cache" / "synth" / "train.jsonl"
HELD_OUT = [
    ROOT / "data" / "demo" / "synthetic" / "manifest.jsonl",
    ROOT / "data" / "demo" / "real" / "manifest.jsonl",
]


def normalize(text: str) -> str:
    return " ".join(re.sub(r"[^a-z' ]", " ", text.lower()).split())


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--token-lm", metavar="MODEL", help="also the token LM over this model's tokenizer")
    ap.add_argument("--token-order", type=int, default=4)
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if not TRAIN.is_file():
        sys.exit(f"{TRAIN} not found; run scripts/train_demo_model.py (it synthesises the corpus) first")
    held_out = set()
    for manifest in HELD_OUT:
        if manifest.is_file():
            with open(manifest, encoding="utf-8") as fh:
                held_out |= {normalize(json.loads(row)["text"]) for row in fh if row.strip()}
    with open(TRAIN, encoding="utf-8") as fh:
        lines = [normalize(json.loads(row)["text"]) for row in fh if row.strip()]
    lines = [ln for ln in lines if ln and ln not in held_out]
    corpus = OUT / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    train_arpa(corpus, OUT / "lm.arpa")
    words = {w for ln in lines for w in ln.split()}
    print(f"{len(lines)} sentences, {len(words)} words -> {OUT / 'lm.arpa'}")
    if args.token_lm:
        from asrdecode.models.loading import load_model

        model = load_model(args.token_lm)
        units = list(model.units)
        spelled = [" ".join(units[i] for i in model.tokenizer.encode(ln)) for ln in lines]
        tokens = OUT / "tokens.txt"
        tokens.write_text("\n".join(spelled) + "\n", encoding="utf-8")
        train_arpa(tokens, OUT / "tokens.arpa", order=args.token_order)
        print(f"{len(units)} units of {args.token_lm}, order {args.token_order} -> {OUT / 'tokens.arpa'}")


if __name__ == "__main__":
    main()
