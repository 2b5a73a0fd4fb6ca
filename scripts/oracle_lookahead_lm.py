#!/usr/bin/env python3
"""Do late LM refunds cause the sphinx setup's search errors? An oracle small LM to find out.

    .venv/bin/python scripts/oracle_lookahead_lm.py out/bench/diagnose_s38_default_real-phone-dev.json \
        --out out/oracle-lm
    .venv/bin/asrdecode build-graph --config out/oracle-lm/graph.yaml --out out/oracle-lm/graph
    .venv/bin/asrdecode bench diagnose-pocketsphinx data/real/phone-dev/manifest.jsonl --config sphinx-otf \
        --graph out/oracle-lm/graph

`wfst-otf` searches a small HCLG whose bigram LM costs are pushed towards the start of each word,
and adds the full trigram's difference (``large - small``, `asrdecode.lm.difference`) when a word's
output label is crossed, which a determinized graph puts where the word is told apart from the
others, often near its end. Where the trigram makes a word much cheaper than the small bigram does
("as dialed": 14.4 nats in the small LM, 2.5 after "completed"), the path carries that excess for
most of the word and may leave the beam before the refund comes.

This script reads diagnosis JSONs (`asrdecode bench diagnose-pocketsphinx --json`, on tuning sets)
and prints, for the words of pocketsphinx's hypotheses, the LM difference each one gets (search
errors against the rest). It then writes the default small LM with, for every word pair of
pocketsphinx's hypotheses on the search-error utterances, the bigram raised to the trigram's
probability in that context (an oracle look-ahead: the refund moves into the graph, to where the
word starts), and a graph config for it. The composition stays the full trigram read exactly: each
added bigram is more probable than its backoff route, so the graph reads the new LM exactly and the
difference subtracts it. If the search errors remain with the oracle graph, late refunds are not
their cause. An analysis tool; the default graph is not made from it.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import yaml

from asrdecode.lm.backoff import BackoffReadings
from asrdecode.lm.sphinx_trie import NgramLookup, read_trie_lm
from asrdecode.models.loading import resolve_packaged_path

ROOT = Path(__file__).resolve().parents[1]
SMALL_GRAPH = ROOT / "asrdecode/assets/configs/graph/sphinx-en-us-small.yaml"
LARGE_LM = "embedded:sphinx-en-us/../en-us.lm.bin"
REFUND = 3.0  # nats: a word's LM difference below -REFUND counts as a large refund


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("diagnoses", nargs="+", type=Path, help="diagnose-pocketsphinx --json files")
    ap.add_argument("--out", type=Path, required=True, help="folder for small.arpa.gz and graph.yaml")
    args = ap.parse_args()

    graph_cfg = yaml.safe_load(SMALL_GRAPH.read_text())
    small = BackoffReadings.read(resolve_packaged_path(graph_cfg["arpa"]))
    large = read_trie_lm(resolve_packaged_path(LARGE_LM))
    lookup = NgramLookup(large)
    ids = {w: i for i, w in enumerate(large.vocab)}

    def large_log10(context: list[str]) -> float:
        return float(lookup.log10_prob(np.array([[ids[w] for w in context]]))[0])

    refunds: dict[str, list[float]] = {"search error": [], "other": []}
    added = raised = 0
    for path in args.diagnoses:
        for row in json.loads(path.read_text())["utterances"]:
            words = ["<s>", *row["pocketsphinx"].split(), "</s>"]
            if any(w not in ids or (w,) not in small.prob for w in words[1:]):
                continue  # a word one of the LMs lacks: unreachable for the search anyway
            kind = "search error" if row["verdict"] == "search error" else "other"
            for k in range(1, len(words)):
                u, w = words[k - 1], words[k]
                exact = large_log10(words[max(0, k - 2) : k + 1])
                now = small.word_log10(small.state((u,)), w)
                if w != "</s>":
                    refunds[kind].append((exact - now) * math.log(10))  # small cost - large cost
                if kind == "search error" and exact > now:
                    raised += (u, w) in small.prob
                    added += (u, w) not in small.prob
                    small.prob[(u, w)] = exact
    for kind, values in refunds.items():
        v = np.array(values)
        if len(v):
            print(
                f"{kind}: {len(v)} words of pocketsphinx's hypotheses, LM difference below -{REFUND:g} nats "
                f"for {np.mean(v > REFUND):.1%}, the largest refund {v.max():.1f} nats"
            )
    args.out.mkdir(parents=True, exist_ok=True)
    arpa = small.write(args.out / "small.arpa.gz")
    graph_cfg["arpa"] = str(arpa.resolve())
    (args.out / "graph.yaml").write_text(yaml.safe_dump(graph_cfg, sort_keys=False))
    print(f"{added} bigrams added, {raised} raised to their trigram context")
    print(f"wrote {arpa} and {args.out / 'graph.yaml'}")


if __name__ == "__main__":
    main()
