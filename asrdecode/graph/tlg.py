"""The TLG recipe for CTC models, built with kaldifst + kaldilm.

Recipe (prior-art B.2 / C.2, the riva and icefall way; paper 001 sec. 3):
    L  lexicon transducer with disambiguation symbols (#1.. on prons, #0:#0 loop for G backoff)
    G  ARPA -> FST by kaldilm (backoff arcs carry #0, <s>/</s> become epsilon)
    LG = min(det(L o G)) in the tropical semiring, disambiguation symbols -> epsilon
    TLG = T o LG, T = CTC topology `normal` (fig. 2), `compact` (fig. 3) or `minimal`
          (Laptev et al. 2022, NeMo's names), arc-sorted on ilabel.

Label convention: TLG ilabel i reads model output column i-1 (0 = epsilon), so blank is
ilabel ``blank_column + 1`` (NeMo puts blank last: ``len(units) + 1``). The unit ids used on
L's input (units.txt) are the same numbers; disambiguation symbols follow the last column.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
import time
from pathlib import Path

from asrdecode.errors import GraphError
from asrdecode.graph.format import (
    FORMAT_VERSION,
    DeviceGraph,
)
from asrdecode.graph.fst_ops import arpa_to_g, compile_lg, make_ctc_topo, make_lexicon_fst, num_arcs
from asrdecode.graph.recipe import GraphBuildConfig
from asrdecode.graph.stages import BuildStages
from asrdecode.graph.staging import cache_key
from asrdecode.graph.symbols import unit_symbol, write_symbols
from asrdecode.graph.units import (
    DISAMBIG,
    add_disambig,
    check_units_agree,
    read_lexicon,
    read_model_units,
    read_units_entries,
    read_units_file,
    resolve_units,
    spell_lexicon,
)
from asrdecode.lm.arpa import ArpaSummary, check_arpa, plain_copy

log = logging.getLogger("asrdecode.graph")


def build_tlg(
    cfg: GraphBuildConfig, stage: Path, inputs: dict[str, dict[str, str]], t0: float, stages: BuildStages
) -> dict:
    """The TLG recipe, writing the graph folder's files into `stage`."""
    import kaldifst

    # units
    sp_model = cfg.sentencepiece_model
    nemo_tmp = tempfile.TemporaryDirectory(prefix="asrdecode-nemo-")
    if cfg.model is not None:
        nemo_units, nemo_sp = read_model_units(cfg.model, Path(nemo_tmp.name))
        units = resolve_units(nemo_units, "last", source=str(cfg.model))
        if cfg.units is not None:
            check_units_agree(read_units_entries(cfg.units), units, cfg.units, cfg.model)
        if cfg.lexicon_type == "bpe" and sp_model is None:
            if nemo_sp is None:
                raise GraphError(
                    f"{cfg.model}: the model has no sentencepiece tokenizer for lexicon_type bpe"
                )
            sp_model = str(nemo_sp)
    elif cfg.units is not None:
        units = resolve_units(read_units_file(cfg.units), cfg.blank, source=str(cfg.units))
    else:
        units = resolve_units(list(cfg.unit_list or []), cfg.blank, source="unit_list")
    unit_ids = units.id_of()
    optional: tuple[int, ...] = ()
    if cfg.word_separator is not None:
        if cfg.word_separator not in unit_ids:
            raise GraphError(f"graph config: word_separator '{cfg.word_separator}' is not a unit")
        optional = (unit_ids[cfg.word_separator],)

    # LM vocabulary and words.txt (Kaldi order: <eps>, words, #0, <s>, </s>)
    arpa: ArpaSummary = check_arpa(cfg.arpa)
    lm_words = [w for w in arpa.vocab if w not in ("<s>", "</s>")]
    bad = [w for w in lm_words if w in ("<eps>", "#0") or DISAMBIG.match(w)]
    if bad:
        raise GraphError(f"{cfg.arpa}: reserved symbol '{bad[0]}' used as a word")
    words = [("<eps>", 0)] + [(w, i + 1) for i, w in enumerate(lm_words)]
    word_ids = dict(words)
    n = len(words)
    words += [("#0", n), ("<s>", n + 1), ("</s>", n + 2)]
    word_disambig0 = n

    # lexicon
    if cfg.lexicon_type == "file":
        lex = read_lexicon(cfg.lexicon, units, set(lm_words))
    else:
        spellable = [w for w in lm_words if not (w.startswith("<") and w.endswith(">"))]
        lex = spell_lexicon(cfg.lexicon_type, spellable, units, sp_model)
    nemo_tmp.cleanup()
    if not lex.prons:
        raise GraphError(
            f"no usable lexicon entries ({lex.dropped or 'empty lexicon'}); check units and LM words"
        )
    for reason, count in lex.dropped.items():
        log.warning(
            "graph: dropped %d lexicon words (%s), e.g. %s", count, reason, ", ".join(lex.examples[reason])
        )
    prons, max_dis = add_disambig(lex.prons)
    first_disambig = len(units.names) + 1  # '#0' on L's input side; #k = first_disambig + k
    covered = {w for w, _ in lex.prons}
    no_pron = [w for w in lm_words if w not in covered]

    unit_table = [("<eps>", 0)] + [(unit_symbol(nm), c + 1) for c, nm in enumerate(units.names)]
    unit_table += [(f"#{k}", first_disambig + k) for k in range(max_dis + 1)]

    write_symbols(stage / "words.txt", words)
    write_symbols(stage / "units.txt", unit_table)
    with tempfile.TemporaryDirectory(prefix="scratch-", dir=stage) as tmp_name:
        tmp = Path(tmp_name)
        arpa_plain = Path(cfg.arpa)
        with open(arpa_plain, "rb") as fh:
            if fh.read(2) == b"\x1f\x8b":
                arpa_plain = plain_copy(arpa_plain, tmp / "lm.arpa")
        with stages("G"):
            arpa_to_g(arpa_plain, stage / "words.txt", tmp / "G.fst", cfg.max_order)
            G = kaldifst.StdVectorFst.read(str(tmp / "G.fst"))
        with stages("LG"):
            L = make_lexicon_fst(prons, word_ids, first_disambig, word_disambig0, optional)
            LG = compile_lg(
                L, G, first_disambig, word_disambig0, cfg.remove_epsilon, word_labels=cfg.word_labels
            )
        with stages("T∘LG"):
            T = make_ctc_topo(units, cfg.topology)
            kaldifst.arcsort(T, sort_type="olabel")
            TLG = kaldifst.compose(T, LG)
            kaldifst.connect(TLG)
            kaldifst.arcsort(TLG, sort_type="ilabel")
        lg_states, lg_arcs = LG.num_states, num_arcs(LG)
        meta_core = {
            "kind": "TLG",
            "topology": cfg.topology,
            "label_convention": "ilabel i reads model column i-1; 0 = epsilon; olabel = words.txt id",
            "num_columns": len(units.names),
            "blank_column": units.blank_column,
            "blank_ilabel": units.blank_ilabel,
            "word_disambig_removed": True,
            "word_labels": cfg.word_labels,
            "word_label_position": (
                "on the arc reading the word's first unit (graph not input-deterministic)"
                if cfg.word_labels == "first_unit"
                else "where det(L o G) makes the word certain: the first unit at which its spelling "
                "leaves all other spellings allowed there (an epsilon arc after the last unit for a "
                "spelling that is a prefix of another); label pushing would move none"
            ),
        }
        with stages("write"):
            graph = DeviceGraph.from_kaldifst(TLG, meta=meta_core)
            graph.validate()
            graph_files = graph.save_folder(stage, cfg.format)
            kaldifst.StdConstFst(TLG).write(str(stage / "TLG.fst"))
        summary = graph.summary()
        meta = {
            **meta_core,
            "format": f"asrdecode-graph v{FORMAT_VERSION}",
            "graph_files": list(graph_files),
            "inputs": inputs,
            "config": dataclasses.asdict(cfg),
            "cache_key": cache_key(cfg, inputs),
            "units": {
                "count": len(units.names),
                "blank_symbol": units.names[units.blank_column],
                "source": units.source,
                "disambig_symbols": max_dis + 1,
            },
            "words": {
                "count": len(lm_words),
                "with_pronunciation": len(covered),
                "without_pronunciation": len(no_pron),
                "lexicon_entries": len(lex.prons),
            },
            "dropped_lexicon_words": lex.dropped,
            "lm": {
                "order": arpa.order,
                "ngrams": {str(k): v for k, v in arpa.counts.items()},
                "max_order_used": cfg.max_order,
            },
            "sizes": {
                "G": {"states": G.num_states, "arcs": num_arcs(G)},
                "LG": {"states": lg_states, "arcs": lg_arcs},
                "T": {"states": T.num_states, "arcs": num_arcs(T)},
                "TLG": summary,
            },
            "seconds": {**stages.seconds, "total": round(time.perf_counter() - t0, 3)},
            "cached": False,
        }
        (stage / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta
