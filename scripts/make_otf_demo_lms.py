"""Write the small LM of the `wfst-otf` demo: the demo trigram (data/demo/graph/lm.arpa, made by
scripts/make_demo_graph_inputs.py) entropy-pruned with kaldingram (Stolcke pruning, threshold
1e-4: about 1/10 of its n-grams). The demo graph configs/graph/demo-ctc-bpe-small-tlg.yaml is built
from it; configs/wfst-otf.yaml rescores that graph on the fly with the full trigram.

    .venv/bin/python scripts/make_otf_demo_lms.py        # -> data/demo/otf/small-lm.arpa
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from asrdecode.lm.arpa import check_arpa

ROOT = Path(__file__).resolve().parent.parent
LARGE = ROOT / "data" / "demo" / "graph" / "lm.arpa"
OUT = ROOT / "data" / "demo" / "otf" / "small-lm.arpa"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threshold", type=float, default=1e-4, help="kaldingram prune threshold")
    args = ap.parse_args()
    if not LARGE.is_file():
        sys.exit(f"{LARGE} not found; run scripts/make_demo_graph_inputs.py first")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "kaldingram.cli", "prune", "--threshold", str(args.threshold)]
    cmd += ["--lm", str(LARGE), "--write-lm", str(OUT), "--verbose", "5"]
    subprocess.run(cmd, check=True, capture_output=True)
    large, small = check_arpa(LARGE), check_arpa(OUT)
    print(f"{LARGE.relative_to(ROOT)}: n-grams {dict(large.counts)}")
    print(f"{OUT.relative_to(ROOT)}: n-grams {dict(small.counts)} (pruned at {args.threshold:g})")


if __name__ == "__main__":
    main()
