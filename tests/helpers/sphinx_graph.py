"""A tiny HCLG for the pocketsphinx en-us model (a unigram over the words of `goforward` and a few
others), built through the CLI in seconds: real speech through the sphinx model without the large
graphs."""

from __future__ import annotations

from pathlib import Path

from helpers.cli import run

ROOT = Path(__file__).resolve().parents[2]
GOFORWARD = ROOT / "data" / "demo" / "real" / "ps_goforward.wav"  # "go forward ten meters"
# a unigram over a few words: the acoustic model must pick the right ones and their order
ARPA = """\\data\\
ngram 1=10

\\1-grams:
-0.8 </s>
-99 <s>
-1.0 go
-1.0 forward
-1.0 ten
-1.0 meters
-1.0 back
-1.0 two
-1.0 four
-1.0 forty

\\end\\
"""


def tiny_sphinx_hclg(folder: Path) -> Path:
    """Build the tiny HCLG into ``folder / "hclg"`` and return that folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "lm.arpa").write_text(ARPA)
    graph = folder / "hclg"
    run(
        "build-graph",
        "kind=hclg-sphinx",
        f"arpa={folder / 'lm.arpa'}",
        "acoustic_model=embedded:sphinx-en-us",
        "lexicon=embedded:sphinx-en-us/../cmudict-en-us.dict",
        "--out",
        str(graph),
    )
    return graph
