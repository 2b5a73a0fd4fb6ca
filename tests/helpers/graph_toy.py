"""A toy CTC setup (3 units + blank last, 4 words, a bigram ARPA) shared by the graph tests."""

from pathlib import Path

from asrdecode.graph import GraphBuildConfig

UNITS = ["a", "b", "c"]  # columns 0..2, blank = column 3 (NeMo: blank last)
LEXICON = {"ab": "a b", "ba": "b a", "c": "c", "cab": "c a b"}
# Explicit bigrams are all cheaper than their backoff route, so min-over-paths (tropical G)
# equals the ARPA probability.
ARPA = """\\data\\
ngram 1=6
ngram 2=4

\\1-grams:
-1.0 </s>
-99 <s> -0.5
-0.7 ab -0.3
-0.8 ba -0.2
-0.9 c -0.4
-1.2 cab -0.1

\\2-grams:
-0.2 <s> ab
-0.3 ab ba
-0.25 ba </s>
-0.4 c c

\\end\\
"""


def write_toy(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"units": folder / "tokens.txt", "lexicon": folder / "lexicon.txt", "arpa": folder / "lm.arpa"}
    paths["units"].write_text("".join(f"{u} {i}\n" for i, u in enumerate(UNITS)))
    paths["lexicon"].write_text("".join(f"{w} {p}\n" for w, p in LEXICON.items()))
    paths["arpa"].write_text(ARPA)
    return paths


def toy_config(paths: dict[str, Path], **kw) -> GraphBuildConfig:
    return GraphBuildConfig(
        arpa=str(paths["arpa"]), units=str(paths["units"]), lexicon=str(paths["lexicon"]), blank="last", **kw
    )
