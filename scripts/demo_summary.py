"""Side-by-side summary of `make demo`'s runs: WER, CER and RTFx from each run's report.json.

    .venv/bin/python scripts/demo_summary.py "synthetic, greedy=out/demo-synthetic" \
        "synthetic, wfst + demo TLG=out/demo-synthetic-wfst"

Each argument is LABEL=OUTPUT_FOLDER (a folder written by `asrdecode transcribe`). Folders
without a report.json are listed as missing, so a partial demo still prints what it has.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def row(label: str, folder: Path) -> str:
    report_path = folder / "report.json"
    if not report_path.is_file():
        return f"{label:<44}{'(no ' + str(report_path) + ')':>40}"
    r = json.loads(report_path.read_text())

    def pct(x: float | None) -> str:
        return f"{x * 100:.1f}%" if x is not None else "-"

    rtfx = f"{r['rtfx']:.0f}" if r.get("rtfx") else "-"
    return (
        f"{label:<44}{pct(r.get('wer')):>8}{pct(r.get('cer')):>8}{rtfx:>7}"
        f"{r.get('scored_utterances', 0):>7}  {r.get('decoder', '?')}"
    )


def main(argv: list[str]) -> int:
    if not argv or any("=" not in a for a in argv):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        print("error: arguments are LABEL=OUTPUT_FOLDER", file=sys.stderr)
        return 2
    print(f"\n{'run':<44}{'WER':>8}{'CER':>8}{'RTFx':>7}{'utts':>7}  decoder")
    for arg in argv:
        label, folder = arg.rsplit("=", 1)
        print(row(label, Path(folder)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
