"""`wfst` decoder behaviour: mixed-length batches, timestamps, streaming == offline, word boosting,
registry/config, and the host-sync counter."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.wfst_ref import nemo_log_probs, nemo_sentences, single_thread, write_arpa  # noqa: F401

from asrdecode.decoders import DECODERS, decoder_config_from_dict
from asrdecode.decoders.wfst import WfstConfig, WfstDecoder
from asrdecode.errors import ConfigError
from asrdecode.graph import GraphBuildConfig, build_graph
from asrdecode.models.base import ModelOutput

pytestmark = pytest.mark.usefixtures("single_thread")

NEMO = Path(__file__).resolve().parent.parent / "fixtures" / "nemo" / "ctc_bpe.nemo"
UNITS = ["a", "b", "c"]
BLANK = 3
SHIFT = 0.04


@pytest.fixture(scope="module")
def toy_dir(tmp_path_factory) -> Path:
    from helpers.graph_toy import toy_config, write_toy

    d = tmp_path_factory.mktemp("wfst_api_toy")
    build_graph(toy_config(write_toy(d / "in"), topology="compact"), d / "g")
    return d / "g"


@pytest.fixture(scope="module")
def nemo_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("wfst_api_nemo")
    write_arpa(d / "lm.arpa", nemo_sentences())
    build_graph(GraphBuildConfig(arpa=str(d / "lm.arpa"), model=str(NEMO), lexicon_type="bpe"), d / "g")
    return d / "g"


def peaky(spec: str, p: float = 0.94) -> np.ndarray:
    """Log-probs with column `spec[t]` (a/b/c, `_` = blank) at probability p on frame t."""
    col = {"a": 0, "b": 1, "c": 2, "_": BLANK}
    lp = np.full((len(spec), 4), math.log((1 - p) / 3), dtype=np.float32)
    lp[np.arange(len(spec)), [col[ch] for ch in spec]] = math.log(p)
    return lp


def batch(lps: list[np.ndarray], blank: int = BLANK, shift: float = SHIFT) -> ModelOutput:
    T, V = max(len(x) for x in lps), lps[0].shape[1]
    x = np.zeros((len(lps), T, V), dtype=np.float32)
    for b, lp in enumerate(lps):
        x[b, : len(lp)] = lp
    return ModelOutput(torch.from_numpy(x), torch.tensor([len(lp) for lp in lps]), shift, blank, UNITS)


def test_registry_and_config_keys():
    assert DECODERS["wfst"] is WfstDecoder
    cfg = decoder_config_from_dict(
        {"type": "wfst", "graph": "g", "beam": 12, "max_active": 500, "boost": {"x": 2}}
    )
    assert isinstance(cfg, WfstConfig) and cfg.beam == 12.0 and cfg.boost == {"x": 2}
    with pytest.raises(ConfigError):
        decoder_config_from_dict({"type": "wfst", "bem": 3})
    with pytest.raises(ConfigError, match="decoder.graph"):
        WfstDecoder(WfstConfig())


def test_an_on_the_fly_lm_is_refused_by_wfst(toy_dir):
    """`wfst` decodes its graph alone: an LM handed to it (wfst-otf's) is a one-line config error."""
    with pytest.raises(ConfigError, match="wfst-otf"):
        WfstDecoder(WfstConfig(graph=str(toy_dir)), lm=object())


def test_word_times_on_constructed_example(toy_dir):
    """c-a-b at frames 1..8 then c at 11..12: words cab [1, 9) and c [11, 13) frames.

    The determinized graph emits 'cab' on the 'a' arc and 'c' on the blank after it (labels are
    delayed until unambiguous); the lexicon split still gives the unit frames."""
    lexicon = toy_dir.parent / "in" / "lexicon.txt"
    dec = WfstDecoder(WfstConfig(graph=str(toy_dir), lexicon=str(lexicon)))
    (res,) = dec.decode(batch([peaky("_cc_aa_bb__cc_")]))
    assert [(w.word, w.start, w.end) for w in res.words] == [
        ("cab", round(1 * SHIFT, 3), round(9 * SHIFT, 3)),
        ("c", round(11 * SHIFT, 3), round(13 * SHIFT, 3)),
    ]
    assert res.tokens == [2, 0, 1, 2] and res.token_frames == [1, 4, 7, 11]
    assert res.text == "cab c"
    assert res.acoustic_score is not None and res.lm_score is not None
    assert res.score == pytest.approx(res.acoustic_score + res.lm_score, abs=1e-4)


def test_word_times_without_lexicon_are_ordered_and_inside(toy_dir):
    dec = WfstDecoder(WfstConfig(graph=str(toy_dir)))
    spec = "_cc_aa_bb__cc_"
    (res,) = dec.decode(batch([peaky(spec)]))
    assert res.text == "cab c"
    bounds = [x for w in res.words for x in (w.start, w.end)]
    assert bounds == sorted(bounds) and bounds[0] >= 0 and bounds[-1] <= len(spec) * SHIFT + 1e-9
    assert all(w.end > w.start for w in res.words)


def test_word_times_from_model_tokenizer(nemo_dir):
    """BPE graph: the model's token->word rule (word-start marks) splits the units."""
    from asrdecode.decoders import DecoderContext
    from asrdecode.models.loading import load_model

    model = load_model(str(NEMO))
    ctx = DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)
    lp, lengths, _ = nemo_log_probs()
    dec = WfstDecoder(WfstConfig(graph=str(nemo_dir), beam=12.0), ctx)
    out = ModelOutput(torch.from_numpy(lp), torch.from_numpy(lengths), model.frame_shift, 128, model.units)
    for b, res in enumerate(dec.decode(out)):
        spans = model.tokens_to_words(res.tokens)
        assert [w for w, _, _ in spans] == [w.word for w in res.words]
        for word, (_, first, _last) in zip(res.words, spans, strict=True):
            assert word.start == round(res.token_frames[first] * model.frame_shift, 3)
            assert word.end <= lengths[b] * model.frame_shift + 1e-6


def test_mixed_length_batch_equals_single_utterances(nemo_dir):
    lp, lengths, _ = nemo_log_probs()
    dec = WfstDecoder(WfstConfig(graph=str(nemo_dir), beam=12.0))
    out = ModelOutput(torch.from_numpy(lp), torch.from_numpy(lengths), 0.08, 128, [])
    together = dec.decode(out)
    for b in range(len(lp)):
        one = ModelOutput(
            torch.from_numpy(lp[b : b + 1, : lengths[b]]), torch.tensor([lengths[b]]), 0.08, 128, []
        )
        (alone,) = dec.decode(one)
        assert alone.words == together[b].words
        assert alone.score == together[b].score
        assert alone.tokens == together[b].tokens


def test_empty_and_one_frame_utterances(toy_dir):
    dec = WfstDecoder(WfstConfig(graph=str(toy_dir)))
    res = dec.decode(batch([peaky("c"), np.zeros((0, 4), np.float32), peaky("_c_")]))
    assert res[0].text == "c" and res[2].text == "c"
    assert res[1].words == []


def test_streaming_chunks_equal_offline(nemo_dir):
    lp, lengths, _ = nemo_log_probs()
    dec = WfstDecoder(WfstConfig(graph=str(nemo_dir), beam=12.0))
    offline = dec.decode(ModelOutput(torch.from_numpy(lp), torch.from_numpy(lengths), 0.08, 128, []))
    ids = dec.init_streams(3)
    streams = {ids[0]: 0, ids[1]: 3, ids[2]: 5}  # stream id -> utterance
    chunk = 7
    pos = dict.fromkeys(streams, 0)
    partials = []
    while any(pos[s] < lengths[u] for s, u in streams.items()):
        active = [s for s, u in streams.items() if pos[s] < lengths[streams[s]]]
        x = np.zeros((len(active), chunk, lp.shape[2]), np.float32)
        n = []
        for i, s in enumerate(active):
            u = streams[s]
            piece = lp[u, pos[s] : min(pos[s] + chunk, lengths[u])]
            x[i, : len(piece)] = piece
            n.append(len(piece))
            pos[s] += len(piece)
        partials.append(dec.decode_chunk(active, torch.from_numpy(x), torch.tensor(n), frame_shift=0.08))
    assert all(len(p) > 0 for p in partials)
    final = dec.finalize(list(streams), frame_shift=0.08)
    for s, res in zip(streams, final, strict=True):
        ref = offline[streams[s]]
        assert res.words == ref.words
        assert res.score == pytest.approx(ref.score, abs=1e-4)
    with pytest.raises(KeyError):
        dec.decode_chunk([ids[0]], torch.from_numpy(lp[:1, :3]))


def test_word_boost_flips_a_word_and_leaves_others(toy_dir):
    """Acoustics favour 'a b' a little (LM costs of 'ab' and 'ba' alone are about equal): boosting
    'ba' flips the 1-best; the other utterance of the batch (no boosts) is unchanged."""
    lp = np.full((4, 4), math.log(0.02), dtype=np.float32)
    lp[0, BLANK] = lp[3, BLANK] = math.log(0.94)
    lp[1, [0, 1]] = [math.log(0.5), math.log(0.45)]
    lp[2, [0, 1]] = [math.log(0.45), math.log(0.5)]
    lp2 = peaky("_c__")
    dec = WfstDecoder(WfstConfig(graph=str(toy_dir)))
    plain = dec.decode(batch([lp, lp2]))
    assert plain[0].text == "ab"
    out = batch([lp, lp2])
    out.extra["boost"] = [{"ba": 4.0, "nonword": 1.0}, None]
    boosted = dec.decode(out)
    assert boosted[0].text == "ba"
    assert boosted[1].words == plain[1].words and boosted[1].score == plain[1].score
    assert dec.last_info["oov_boost_words"] == ["nonword"]
    # the boost is part of the total but not of the acoustic score
    assert boosted[0].score == pytest.approx(boosted[0].acoustic_score + boosted[0].lm_score, abs=1e-4)
    glob = WfstDecoder(WfstConfig(graph=str(toy_dir), boost={"ba": 4.0}))
    assert glob.decode(batch([lp]))[0].text == "ba"


def test_not_final_fallback_is_flagged(toy_dir):
    """A frame sequence no word sequence explains ends in a non-final state: best token, flagged."""
    dec = WfstDecoder(WfstConfig(graph=str(toy_dir)))
    lp = np.full((3, 4), -np.inf, dtype=np.float32)  # only '_ a _' is possible; 'a' is no word
    lp[[0, 1, 2], [BLANK, 0, BLANK]] = 0.0
    (res,) = dec.decode(batch([lp]))
    assert dec.last_info["not_final"] == [0]
    assert math.isfinite(res.score)


def test_sync_counter_reports_per_frame_syncs(toy_dir):
    dec = WfstDecoder(WfstConfig(graph=str(toy_dir), backend="torch"))
    dec.decode(batch([peaky("_cc_aa_bb__cc_")]))
    stats = dec.last_info["stats"]
    assert stats["frames"] == 14 and stats["syncs"] > 0 and stats["epsilon_limit_hit"] == 0
