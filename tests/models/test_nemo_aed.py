"""Canary-like attention encoder-decoder models (NeMo's EncDecMultiTaskModel) against NeMo 3.0.0.

Fixtures built by scripts/make_nemo_fixtures.py --set aed, trained briefly on the six clips'
transcripts so that the decoder writes real text: ``aed_canary2`` (canary2 prompt, pre-LN decoder,
a projection from the 16-wide encoder to the 32-wide decoder), ``aed_canary`` (canary prompt,
post-LN decoder, no projection) and ``aed_bpe`` (canary2 prompt, one sentencepiece model holding
the special tokens, as canary-1b-v2's CanaryBPETokenizer: its prompt starts with a word-start
piece). Each: the front end, the projected encoder states, the decoder's log-probs over a
teacher-forced sequence, greedy decoding and beam search (all beams and their scores) equal NeMo's;
`asrdecode transcribe` gives NeMo's ``transcribe`` texts.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from helpers.cli import run
from helpers.nemo_audio import audio_batch, batch_features

from asrdecode.decoders.aed import AedBeamConfig, AedBeamDecoder, AedGreedyConfig, AedGreedyDecoder
from asrdecode.decoders.base import DecoderContext
from asrdecode.errors import ModelError
from asrdecode.models.aed import NemoAEDModel, canary_prompt
from asrdecode.models.loading import load_model

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nemo"
AED = ("aed_canary2", "aed_canary", "aed_bpe")


@pytest.fixture(scope="module")
def audio() -> dict[str, np.ndarray]:
    return audio_batch()


@pytest.fixture(scope="module", params=AED)
def case(request, audio):
    """(name, model, NeMo's reference arrays, its JSON report, our ModelOutput of the batch)."""
    name = request.param
    data = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
    ref = {k: data[k] for k in data.files}
    info = json.loads((FIX / "reference" / f"{name}.json").read_text())
    model = load_model(str(FIX / f"{name}.nemo"))
    with torch.inference_mode():
        feats, feat_len = model.features(
            torch.from_numpy(audio["audio"]), torch.from_numpy(audio["audio_len"])
        )
        out = model.forward_features(feats, feat_len)
    return name, model, ref, info, (feats, feat_len, out)


def context(model) -> DecoderContext:
    return DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)


def tokens(ref: dict, key: str, i: int) -> list[int]:
    return ref[f"{key}_tokens"][i, : int(ref[f"{key}_tokens_len"][i])].tolist()


def test_loads_as_aed(case):
    name, model, ref, info, _ = case
    assert isinstance(model, NemoAEDModel)
    assert model.prompt_ids() == ref["prompt"].tolist()
    assert model.prompt_tokens() == [
        t for t in info["prompt_tokens"] if t != "\u2581"
    ]  # aed_bpe: a word start
    assert model.default_decoder == "aed-greedy"
    facts = model.describe()
    assert facts["type"] == "nemo-aed" and facts["class"] == "EncDecMultiTaskModel"
    assert facts["languages"] == (None if name == "aed_bpe" else ["spl_tokens", "en", "de"])


def test_front_end_and_encoder_states(case):
    _, _, ref, _, (feats, feat_len, out) = case
    assert feat_len.tolist() == ref["features_len"].tolist()
    for b, n in enumerate(ref["features_len"].tolist()):
        np.testing.assert_allclose(feats[b, :, :n].numpy(), batch_features()[b, :, :n], atol=1e-4)
    assert out.lengths.tolist() == ref["encoder_len"].tolist()
    for b, n in enumerate(ref["encoder_len"].tolist()):
        np.testing.assert_allclose(out.encoder_out[b, :n].numpy(), ref["encoder_states"][b, :n], atol=1e-3)


def test_decoder_log_probs_teacher_forced(case):
    """Prompt in one step, then the transcript token by token with kept keys and values: every
    position's log-probs equal NeMo's full-sequence forward pass."""
    _, model, ref, _, (_, _, out) = case
    ids = torch.from_numpy(ref["teacher_ids"])
    p = len(ref["prompt"])
    with torch.inference_mode():
        for b in (0, 3):
            n = int(ref["teacher_len"][b])
            state = model.start(out.encoder_out[b : b + 1], out.lengths[b : b + 1])
            rows = [model.step(state, ids[b : b + 1, :p])]
            rows += [model.step(state, ids[b : b + 1, i : i + 1]) for i in range(p, n - 1)]
            got = torch.cat(rows).numpy()
            np.testing.assert_allclose(got, ref["teacher_log_probs"][b, p - 1 : n - 1], atol=1e-4)


def test_greedy_equals_nemo(case):
    """Greedy (NeMo's GreedySequenceGenerator) and beam search of width 1 over the padded batch."""
    _, model, ref, _, (_, _, out) = case
    results = AedGreedyDecoder(AedGreedyConfig(), context(model)).decode(out)
    beam_one = AedBeamDecoder(AedBeamConfig(beam_size=1), context(model)).decode(out)
    for b, (res, one) in enumerate(zip(results, beam_one, strict=True)):
        assert res.tokens == tokens(ref, "greedy", b) == tokens(ref, "beam1", b), (
            b
        )  # NeMo's: no prompt, no end
        assert one.tokens == res.tokens
        assert model.tokenizer.decode(res.tokens) == str(ref["greedy_text"][b])
        assert res.text == " ".join(str(ref["greedy_text"][b]).split())
        assert all(w.start is None and w.end is None for w in res.words)


@pytest.mark.parametrize("penalised", [True, False])
def test_beam_search_equals_nemo(case, penalised):
    """Beam 4, one utterance at a time: every beam's text and score equal NeMo's, with length
    penalty 1.0 (set on NeMo's generator) and as NeMo decodes by its config (which does not read
    ``len_pen``: no penalty); the batch of all six gives each one's best."""
    _, model, ref, info, (_, _, out) = case
    k = info["beam"]["beam_size"]
    key = "beam" if penalised else "beam_configured"
    cfg = AedBeamConfig(
        beam_size=k,
        length_penalty=info["beam"]["len_pen"] if penalised else 0.0,
        max_generation_delta=info["beam"]["max_generation_delta"],
        nbest=k,
    )
    decoder = AedBeamDecoder(cfg, context(model))
    batch = decoder.decode(out)
    for b in range(len(ref["utt_ids"])):
        n = int(out.lengths[b])
        one = type(out)(None, out.lengths[b : b + 1], out.frame_shift, -1, out.units,
                        out.encoder_out[b : b + 1, :n], extra=out.extra)  # fmt: skip
        (res,) = decoder.decode(one)
        texts = [str(t) for t in ref[f"{key}_text"][b * k : (b + 1) * k]]
        scores = ref[f"{key}_scores"][b * k : (b + 1) * k]
        # NeMo lists the beams in their final order, the n-best list by the penalised score
        got = sorted((" ".join(ws), s) for ws, s in res.nbest)
        expected = sorted((" ".join(t.split()), float(s)) for t, s in zip(texts, scores, strict=True))
        assert [t for t, _ in got] == [t for t, _ in expected], b
        np.testing.assert_allclose([s for _, s in got], [s for _, s in expected], rtol=1e-4, atol=1e-4)
        assert batch[b].tokens == res.tokens
        if penalised:
            assert res.tokens == tokens(ref, "beam_batch", b), b
    if penalised:  # NeMo's batched search scores beams otherwise than its search of each utterance
        alone = np.sort(ref["beam_scores"].reshape(-1, k), axis=1)
        batched = np.sort(ref["beam_batch_scores"], axis=1)
        assert np.abs(alone - batched).max() > 0.05


def test_prompt_formats():
    assert canary_prompt("canary", {"source_lang": "en", "target_lang": "de", "pnc": "no"}) == [
        "<|startoftranscript|>", "<|en|>", "<|translate|>", "<|de|>", "<|nopnc|>",
    ]  # fmt: skip
    assert canary_prompt("canary2", {"source_lang": "en", "target_lang": "en"})[:6] == [
        "<|startofcontext|>", "<|startoftranscript|>", "<|emo:undefined|>", "<|en|>", "<|en|>", "<|pnc|>",
    ]  # fmt: skip
    with pytest.raises(ModelError, match="source_lang"):
        canary_prompt("canary2", {"target_lang": "en"})
    with pytest.raises(ModelError, match="pnc"):
        canary_prompt("canary", {"source_lang": "en", "target_lang": "en", "pnc": "maybe"})


def test_prompt_options_and_errors():
    model = load_model(str(FIX / "aed_canary2.nemo"), target_lang="de", pnc="no")
    assert model.prompt_tokens()[3:6] == ["<|en|>", "<|de|>", "<|nopnc|>"]
    with pytest.raises(ModelError, match=r"no special token <\|fr\|>"):
        load_model(str(FIX / "aed_canary2.nemo"), source_lang="fr")
    with pytest.raises(ModelError, match="only AED models"):
        load_model(str(FIX / "ctc_bpe.nemo"), target_lang="de")
    with pytest.raises(ModelError, match="EncDecMultiTaskModel.* for a ctc model"):
        load_model(str(FIX / "aed_canary2.nemo"), head="ctc")


def test_cli_transcribe_equals_nemo_transcribe(tmp_path):
    """`asrdecode transcribe` on the clips' files gives NeMo's `transcribe` texts (auto decoder:
    aed-greedy); words carry no times, so hyp.ctm has no lines; subtitles are refused in one line."""
    name = "aed_canary2"
    info = json.loads((FIX / "reference" / f"{name}.json").read_text())
    ref = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
    out = tmp_path / "out"
    transcribe = ["transcribe", str(FIX / "audio"), "--model", str(FIX / f"{name}.nemo"), "threads=1"]
    run(*transcribe, "--out", str(out))
    report = json.loads((out / "report.json").read_text())
    assert report["decoder"] == "aed-greedy" and report["unfinished_hypotheses"] == 0
    rows = {r["utt_id"]: r for r in map(json.loads, (out / "transcripts.jsonl").read_text().splitlines())}
    expected = dict(zip((str(u) for u in ref["utt_ids"]), info["transcribe_texts"], strict=True))
    assert {u: r["pred_text"] for u, r in rows.items()} == {
        u: " ".join(t.split()) for u, t in expected.items()
    }
    assert all(w["start"] is None for r in rows.values() for w in r["words"])
    assert not (out / "hyp.ctm").exists() or (out / "hyp.ctm").read_text() == ""
    bad = run(*transcribe, "--out", str(tmp_path / "subs"), "--subtitles", "srt", check=False)
    assert bad.returncode != 0 and "word times" in bad.stderr and "Traceback" not in bad.stderr


def test_translation_prompt_equals_nemo(case):
    """target_lang=de, pnc=no (canary: the task becomes translate): NeMo's prompt and greedy tokens."""
    _, _, ref, info, (_, _, out) = case
    model = load_model(str(FIX / f"{case[0]}.nemo"), target_lang="de", pnc="no")
    assert model.prompt_ids() == ref["prompt_de"].tolist()
    assert model.prompt_tokens() == [t for t in info["prompt_de_tokens"] if t != "\u2581"]
    out = type(out)(None, out.lengths, out.frame_shift, -1, out.units, out.encoder_out, extra={"aed": model})
    # NeMo's greedy config writes up to the decoder's length (max_generation_delta -1), where the `de`
    # prompt the models were not trained on can repeat a token
    config = AedGreedyConfig(max_generation_delta=-1)
    results = AedGreedyDecoder(config, context(model)).decode(out)
    for b, res in enumerate(results):
        assert res.tokens == tokens(ref, "greedy_de", b), b


def test_manifest_fields_set_each_utterance_prompt(tmp_path):
    """A NeMo-style JSONL manifest whose lines name their languages: each utterance decoded with its
    own prompt (NeMo's greedy tokens for the de prompt), one with a language the model lacks fails
    in one line and the others are written."""
    name = "aed_canary"
    ref = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
    model = load_model(str(FIX / f"{name}.nemo"))
    lines = []
    for b, utt in enumerate(ref["utt_ids"]):
        row = {"audio_filepath": str(FIX / "audio" / f"{utt}.wav"), "utt_id": str(utt)}
        if b % 2:
            row.update(source_lang="en", target_lang="de", pnc="no", taskname="translate")
        lines.append(row)
    lines.append({"audio_filepath": str(FIX / "audio" / f"{ref['utt_ids'][0]}.wav"), "utt_id": "fr",
                  "source_lang": "en", "target_lang": "fr"})  # fmt: skip
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "out"
    model_path = str(FIX / f"{name}.nemo")  # NeMo's greedy runs to the decoder's length (delta -1)
    run("transcribe", str(manifest), "--model", model_path, "threads=1", "--decoder", "aed-greedy",
        "decoder.max_generation_delta=-1", "--out", str(out))  # fmt: skip
    rows = {r["utt_id"]: r for r in map(json.loads, (out / "transcripts.jsonl").read_text().splitlines())}
    errors = [json.loads(x) for x in (out / "errors.jsonl").read_text().splitlines()]
    assert [e["utt_id"] for e in errors] == ["fr"] and "<|fr|>" in errors[0]["error"]
    for b, utt in enumerate(str(u) for u in ref["utt_ids"]):
        key = "greedy_de" if b % 2 else "greedy"
        expected = model.tokenizer.decode(tokens(ref, key, b))
        assert rows[utt]["pred_text"] == " ".join(expected.split()), utt
    assert json.loads((out / "report.json").read_text())["failed"] == 1


def rewritten(members: dict[str, bytes], path: Path, edit) -> Path:
    """A copy of an archive's members with its config edited (key order kept: it orders the
    aggregate tokenizer's ids)."""
    cfg = yaml.safe_load(members["./model_config.yaml"])
    edit(cfg)
    files = {
        **members,
        "./model_config.yaml": yaml.safe_dump(cfg, allow_unicode=True, sort_keys=False).encode(),
    }
    with tarfile.open(path, "w") as tf:
        for member, data in files.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def archive_members(name: str) -> dict[str, bytes]:
    with tarfile.open(FIX / f"{name}.nemo") as tf:
        return {i.name: tf.extractfile(i).read() for i in tf.getmembers() if i.isreg()}


@pytest.fixture(scope="module")
def aed_members() -> dict[str, bytes]:
    return archive_members("aed_canary2")


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda c: c["tokenizer"].update(type="wpe"), "tokenizer.type='wpe' for an EncDecMultiTaskModel"),
        (lambda c: c["tokenizer"].update(type="bpe"), "tokenizer.model_path=''"),
        (lambda c: c["tokenizer"]["langs"].pop("spl_tokens"), "spl_tokens"),
        (lambda c: c["tokenizer"]["langs"]["en"].update(model_path="nemo:missing.model"), "missing.model"),
        (lambda c: c["transf_encoder"].update(num_layers=2), "transf_encoder.num_layers=2"),
        (lambda c: c.update(prompt_format="canary-qwen"), "prompt_format='canary-qwen'"),
        (lambda c: c["transf_decoder"]["config_dict"].update(hidden_act="swish"), "swish"),
        (
            lambda c: c["transf_decoder"]["config_dict"].update(num_layers=3),
            "transf_decoder.config_dict.num_layers=3 but the weights hold 2 such layers",
        ),
        (
            lambda c: c["transf_decoder"]["config_dict"].update(num_layers=10**12),
            "weights hold 2 such layers",
        ),
        (
            lambda c: c["head"].update(num_layers=10**12),
            "head.num_layers=1000000000000 but the weights hold 1",
        ),
        (
            lambda c: c["encoder"].update(n_layers=10**12),
            "encoder.n_layers=1000000000000 but the weights hold 2",
        ),
        (lambda c: c["transf_decoder"]["config_dict"].update(rotary=True), "rotary"),
        (lambda c: c["head"].update(hidden_size=64), "head.hidden_size=64"),
        (lambda c: c["transf_decoder"]["config_dict"].update(num_attention_heads=0), "invalid model config"),
        (lambda c: c["transf_decoder"]["config_dict"].update(hidden_size=-1), "invalid model config"),
        (
            lambda c: c["transf_decoder"]["config_dict"].update(max_sequence_length=10**12),
            "invalid model config",
        ),
        (lambda c: c["encoder"].update(n_heads=0), "invalid model config"),
        (
            lambda c: c.update(
                prompt_defaults=[{"role": "user", "slots": {"source_lang": "xx", "target_lang": "en"}}]
            ),
            "<|xx|>",
        ),
    ],
)
def test_unsupported_aed_configs_name_the_option(aed_members, tmp_path, edit, needle):
    path = rewritten(aed_members, tmp_path / "cfg.nemo", edit)
    with pytest.raises(ModelError) as exc:
        load_model(str(path))
    msg = str(exc.value)
    assert "\n" not in msg and str(path) in msg and needle in msg, msg


def test_checkpoint_without_prompt_defaults(aed_members, tmp_path):
    """No prompt_defaults: the model loads and says so; its prompt needs the languages, given by
    model.source_lang / target_lang (then NeMo's prompt) or by each input."""
    path = rewritten(aed_members, tmp_path / "bare.nemo", lambda c: c.pop("prompt_defaults"))
    model = load_model(str(path))
    assert "no languages" in model.describe()["prompt"]
    with pytest.raises(ModelError, match="needs source_lang"):
        model.prompt_ids()
    assert model.prompt_ids({"source_lang": "en", "target_lang": "en"})[3:5] == [15, 15]
    ref = np.load(FIX / "reference" / "aed_canary2.npz", allow_pickle=False)
    given = load_model(str(path), source_lang="en", target_lang="en", pnc="yes")
    assert given.prompt_ids() == ref["prompt"].tolist()


def test_long_input_is_cut_at_the_models_limit(tmp_path):
    """A 57 s recording (the six clips twice, a second of silence after each) with
    batch.segment_seconds=0 is still cut at its quiet moments into segments of at most 40 s (the
    model's limit): its transcript is that of those segments (`cut_stream` at 40 s) decoded alone."""
    import soundfile as sf

    from asrdecode.audio.segmenting import cut_stream

    name = "aed_canary2"
    ref = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
    pieces = []
    for _ in range(2):
        for utt in (str(u) for u in ref["utt_ids"]):
            wave, rate = sf.read(FIX / "audio" / f"{utt}.wav", dtype="float32")
            pieces += [wave, np.zeros(rate, np.float32)]
    folder = tmp_path / "long"
    folder.mkdir()
    sf.write(folder / "long.wav", np.concatenate(pieces), rate, subtype="PCM_16")
    wave, _ = sf.read(folder / "long.wav", dtype="float32")
    segments = [piece for _, piece in cut_stream([wave], rate, 40.0)]
    assert len(segments) == 2 and max(len(p) for p in segments) <= 40 * rate
    model = load_model(str(FIX / f"{name}.nemo"))
    decoder = AedGreedyDecoder(AedGreedyConfig(), context(model))
    expected = []
    with torch.inference_mode():
        for piece in segments:
            feats, feat_len = model.features(torch.from_numpy(piece)[None], torch.tensor([len(piece)]))
            expected.append(decoder.decode(model.forward_features(feats, feat_len))[0].text)
    out = tmp_path / "out"
    model_path = str(FIX / f"{name}.nemo")
    run(
        "transcribe",
        str(folder),
        "--model",
        model_path,
        "batch.segment_seconds=0",
        "threads=1",
        "--out",
        str(out),
    )
    (row,) = [json.loads(x) for x in (out / "transcripts.jsonl").read_text().splitlines()]
    assert row["pred_text"] == " ".join(expected)
    assert json.loads((out / "report.json").read_text())["segmented"] == 1


@pytest.mark.parametrize("beam", [False, True])
def test_results_do_not_depend_on_the_batch(case, beam):
    """Each utterance's result equals its result decoded alone, also where length limits bind
    (encoder states cut to 6-21 frames, max_generation_delta 3: limits of 0-15 tokens) and where
    some utterances' hypotheses all end while others go on."""
    _, model, _, _, (_, _, out) = case
    cut = torch.tensor([6, 9, 12, 15, 18, 21])
    short = type(out)(None, cut, out.frame_shift, -1, out.units, out.encoder_out[:, :21], extra=out.extra)
    if beam:
        cfg = AedBeamConfig(beam_size=3, length_penalty=1.0, max_generation_delta=3, nbest=3)
        decoder = AedBeamDecoder(cfg, context(model))
    else:
        decoder = AedGreedyDecoder(AedGreedyConfig(max_generation_delta=3), context(model))
    for source in (out, short):
        together = decoder.decode(source)
        for b, res in enumerate(together):
            n = int(source.lengths[b])
            one = type(out)(None, source.lengths[b : b + 1], out.frame_shift, -1, out.units,
                            source.encoder_out[b : b + 1, :n], extra=out.extra)  # fmt: skip
            (alone,) = decoder.decode(one)
            assert res.tokens == alone.tokens, b
            assert res.score == pytest.approx(alone.score, abs=1e-4), b
            if beam:
                assert [w for w, _ in res.nbest] == [w for w, _ in alone.nbest], b
    limits = (cut + 3 - len(model.prompt_ids())).clamp(min=0).tolist()
    for res, limit in zip(decoder.decode(short), limits, strict=True):
        assert len(res.tokens) <= limit + (1 if beam else 0)
    assert decoder.last_info["unfinished"] > 0  # the cut ones stopped at their limits
    decoder.decode(out)
    assert decoder.last_info["unfinished"] == 0


def test_word_times_from_frame_tokens_equal_nemo(tmp_path):
    """`model.timestamps=yes` (canary2's <|timestamp|> prompt): the words and their times are NeMo's
    `transcribe(timestamps=True)` ones (read from the frame tokens the model writes); hyp.ctm and
    subtitles are written from them."""
    name = "aed_timestamps"
    info = json.loads((FIX / "reference" / f"{name}.json").read_text())
    ref = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
    assert not load_model(str(FIX / f"{name}.nemo")).aligns_words
    assert load_model(str(FIX / f"{name}.nemo"), timestamps="yes").aligns_words
    out = tmp_path / "out"
    model_path = str(FIX / f"{name}.nemo")
    run("transcribe", str(FIX / "audio"), "--model", model_path, "model.timestamps=yes", "threads=1",
        "--subtitles", "srt", "--out", str(out))  # fmt: skip
    rows = {r["utt_id"]: r for r in map(json.loads, (out / "transcripts.jsonl").read_text().splitlines())}
    for utt, text, times in zip(
        ref["utt_ids"], info["transcribe_texts"], info["transcribe_word_times"], strict=True
    ):
        row = rows[str(utt)]
        assert row["pred_text"] == " ".join(text.split())
        assert [(w["word"], w["start"], w["end"]) for w in row["words"]] == [
            (t["word"], pytest.approx(t["start"], abs=1e-6), pytest.approx(t["end"], abs=1e-6)) for t in times
        ]
        assert times, utt
    ctm = (out / "hyp.ctm").read_text().splitlines()
    assert len(ctm) == sum(len(t) for t in info["transcribe_word_times"])
    assert len(list((out / "subtitles").glob("*.srt"))) == len(rows)


def test_hypotheses_cut_at_the_length_limit_are_counted(tmp_path):
    """A 0.9 s clip (11 encoder frames) with decoder.max_generation_delta=0: 2 tokens after the
    9-token prompt, no end token: the report counts it and the run warns in one line."""
    import soundfile as sf

    wave, rate = sf.read(FIX / "audio" / "ps_librivox_0880.wav", dtype="float32")
    folder = tmp_path / "short"
    folder.mkdir()
    sf.write(folder / "short.wav", wave[: int(0.9 * rate)], rate, subtype="PCM_16")
    out = tmp_path / "out"
    options = ["--decoder", "aed-greedy", "decoder.max_generation_delta=0", "threads=1", "--out", str(out)]
    proc = run("transcribe", str(folder), "--model", str(FIX / "aed_canary2.nemo"), *options)
    assert json.loads((out / "report.json").read_text())["unfinished_hypotheses"] == 1
    assert "1 hypothesis(es) stopped at the decoder's length limit" in proc.stdout + proc.stderr


@pytest.mark.parametrize("beam", [False, True])
def test_word_confidences_are_their_tokens_least_probability(case, beam):
    """A word's confidence: the least probability of its tokens, each as NeMo's network gives it on
    the way to it (NeMo's teacher-forced log-probs over the same tokens: greedy and beam search
    write the transcripts the fixtures learnt)."""
    _, model, ref, _, (_, _, out) = case
    decoder = (
        AedBeamDecoder(AedBeamConfig(beam_size=2), context(model))
        if beam
        else AedGreedyDecoder(AedGreedyConfig(), context(model))
    )
    p = len(ref["prompt"])
    checked = 0
    for b, res in enumerate(decoder.decode(out)):
        n = int(ref["teacher_len"][b])
        text = ref["teacher_ids"][b, p : n - 1].tolist()  # the transcript's tokens, no end token
        if res.tokens != text:
            continue
        checked += 1
        probs = np.exp(ref["teacher_log_probs"][b, np.arange(p - 1, n - 2), text])
        words = model.tokenizer.words_of(res.tokens)
        assert [w.word for w in res.words] == [w for w, _, _ in words]
        for w, (_, first, last) in zip(res.words, words, strict=True):
            assert w.confidence == pytest.approx(float(probs[first : last + 1].min()), abs=1e-4)
    assert checked >= 5


def test_tokenizer_without_canary_tokens_is_one_line(tmp_path):
    """A Canary config whose tokenizer is the plain BPE-128 of the CTC fixture (no <|endoftext|>)."""
    ctc = dict(archive_members("ctc_bpe"))
    model = next(k for k in ctc if k.endswith("_tokenizer.model"))
    members = {**archive_members("aed_bpe"), model: ctc[model]}

    def edit(cfg):
        cfg["tokenizer"]["model_path"] = "nemo:" + model.removeprefix("./")

    path = rewritten(members, tmp_path / "t.nemo", edit)
    with pytest.raises(
        ModelError, match=r"t.nemo: the tokenizer has no <\|endoftext\|> \(not a Canary tokenizer\)"
    ):
        load_model(str(path))
