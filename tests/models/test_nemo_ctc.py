"""NeMo CTC model: parity with NeMo 3.0.0 references, save/load round trips, training, encoder options."""

from __future__ import annotations

import copy
import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml
from helpers.nemo_audio import audio_batch, batch_features

from asrdecode.errors import ModelError
from asrdecode.models import ConformerEncoder, ModelOutput, NemoCTCModel, Tokenizer, load_nemo, save_nemo
from asrdecode.models.conformer import conv_output_lengths

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nemo"
NEMO = FIX / "ctc_bpe.nemo"
LABELS = [" ", "a", "b", "c", "d", "e", "h", "o", "r", "t", "'"]


def greedy(log_probs: torch.Tensor, lengths: torch.Tensor, blank: int) -> list[list[int]]:
    """argmax -> merge repeats -> drop blanks."""
    out = []
    for b in range(log_probs.shape[0]):
        best = log_probs[b, : lengths[b]].argmax(-1).tolist()
        out.append([t for i, t in enumerate(best) if t != blank and (i == 0 or t != best[i - 1])])
    return out


def char_config(**encoder) -> dict:
    """A tiny char-vocabulary EncDecCTCModel config (NeMo layout)."""
    enc = {
        "_target_": "nemo.collections.asr.modules.ConformerEncoder",
        "feat_in": 40,
        "n_layers": 1,
        "d_model": 32,
        "subsampling": "dw_striding",
        "subsampling_factor": 4,
        "subsampling_conv_channels": 8,
        "ff_expansion_factor": 2,
        "self_attention_model": "rel_pos",
        "n_heads": 2,
        "att_context_size": [-1, -1],
        "xscaling": True,
        "untie_biases": True,
        "conv_kernel_size": 5,
        "conv_norm_type": "batch_norm",
        "dropout": 0.1,
        "dropout_pre_encoder": 0.1,
        "dropout_emb": 0.0,
        "dropout_att": 0.1,
    }
    enc.update(encoder)
    return {
        "sample_rate": 16000,
        "labels": LABELS,
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "sample_rate": 16000,
            "normalize": "per_feature",
            "window_size": 0.025,
            "window_stride": 0.01,
            "features": 40,
            "n_fft": 512,
            "dither": 1e-5,
            "pad_to": 0,
        },
        "encoder": enc,
        "decoder": {
            "_target_": "nemo.collections.asr.modules.ConvASRDecoder",
            "feat_in": 32,
            "num_classes": len(LABELS),
            "vocabulary": LABELS,
        },
        "target": "nemo.collections.asr.models.ctc_models.EncDecCTCModel",
    }


@pytest.fixture(scope="module")
def model() -> NemoCTCModel:
    return load_nemo(NEMO)


@pytest.fixture(scope="module")
def audio() -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    a = audio_batch()
    return torch.from_numpy(a["audio"]), torch.from_numpy(a["audio_len"]), [str(u) for u in a["utt_ids"]]


@pytest.fixture(scope="module")
def ref() -> dict[str, np.ndarray]:
    z = np.load(FIX / "reference" / "ctc_bpe.npz", allow_pickle=False)
    return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def short(model, audio) -> tuple[torch.Tensor, torch.Tensor, ModelOutput]:
    """Two clips cut to 1.5 s / 1.1 s and the loaded model's output on them."""
    wav, lens = audio[0][:2, :24000].clone(), torch.tensor([24000, 17600])
    wav[1, 17600:] = 0
    with torch.no_grad():
        return wav, lens, model(wav, lens)


@pytest.fixture(scope="module")
def outputs(model, audio) -> tuple[torch.Tensor, torch.Tensor, ModelOutput]:
    with torch.no_grad():
        feats, lens = model.features(audio[0], audio[1])
        return feats, lens, model.forward_features(feats, lens)


def test_protocol_attributes(model):
    assert model.sample_rate == 16000
    assert model.blank_id == 128 == len(model.units)
    assert model.units[:3] == ["<unk>", "▁s", "▁t"]
    assert model.frame_shift == pytest.approx(0.08)
    assert not model.training
    info = model.describe()
    assert info["class"] == "EncDecCTCModelBPE" and info["parameters"] == 13249
    assert info["encoder"]["subsampling_factor"] == 8 and info["num_outputs"] == 129
    assert info["file"] == str(NEMO)


def test_wavs_equal_reference_batch(audio):
    wav, lens, utts = audio
    texts = dict(line.split(" ", 1) for line in (FIX / "audio" / "text").read_text().splitlines())
    for b, utt in enumerate(utts):
        data, sr = sf.read(FIX / "audio" / f"{utt}.wav", dtype="float32")
        assert sr == 16000 and len(data) == lens[b]
        assert np.array_equal(data, wav[b, : lens[b]].numpy())
        assert texts[utt]


def test_features_match_nemo(outputs, ref):
    feats, lens, _ = outputs
    assert lens.tolist() == ref["features_len"].tolist()
    np.testing.assert_allclose(feats.numpy(), ref["features"], atol=1e-4, rtol=0)


def test_encoder_and_log_probs_match_nemo(outputs, ref):
    _, _, out = outputs
    assert out.lengths.tolist() == ref["encoder_len"].tolist()
    assert out.log_probs.shape == ref["log_probs"].shape
    assert out.encoder_out.shape == (6, 44, 16)
    for b, n in enumerate(ref["encoder_len"].tolist()):
        enc_ref = ref["encoder_out"][b, :, :n].T
        np.testing.assert_allclose(out.encoder_out[b, :n].numpy(), enc_ref, atol=1e-3, rtol=0)
        np.testing.assert_allclose(out.log_probs[b, :n].numpy(), ref["log_probs"][b, :n], atol=1e-3, rtol=0)
    assert out.blank_id == 128 and out.frame_shift == pytest.approx(0.08) and len(out.units) == 128


def test_encoder_from_reference_features(model, ref):
    """The encoder alone, fed NeMo's own features."""
    with torch.no_grad():
        enc, lens = model.encoder(torch.from_numpy(ref["features"]), torch.from_numpy(ref["features_len"]))
    for b, n in enumerate(lens.tolist()):
        np.testing.assert_allclose(enc[b, :, :n].numpy(), ref["encoder_out"][b, :, :n], atol=1e-4, rtol=0)


def test_greedy_tokens_and_text_match_nemo(model, outputs, ref):
    _, _, out = outputs
    hyps = greedy(out.log_probs, out.lengths, model.blank_id)
    for b, tokens in enumerate(hyps):
        assert tokens == ref["greedy_tokens"][b, : ref["greedy_tokens_len"][b]].tolist()
        assert model.tokenizer.decode(tokens) == str(ref["greedy_text"][b])
        words = model.tokens_to_words(tokens)
        assert " ".join(w for w, _, _ in words) == " ".join(str(ref["greedy_text"][b]).split())


def test_single_utterance_equals_batch(model, audio, outputs):
    wav, lens, _ = audio
    _, _, out = outputs
    b = 4
    with torch.no_grad():
        one = model(wav[b : b + 1, : lens[b]], lens[b : b + 1])
    n = int(one.lengths[0])
    assert n == out.lengths[b]
    torch.testing.assert_close(one.log_probs[0, :n], out.log_probs[b, :n], atol=1e-4, rtol=1e-5)


def test_save_load_round_trip(model, short, tmp_path):
    path = save_nemo(model, model.config, tmp_path / "copy.nemo", model.tokenizer_files)
    with tarfile.open(path) as tf:
        names = tf.getnames()
        cfg = yaml.safe_load(tf.extractfile("./model_config.yaml"))
        sd = torch.load(io.BytesIO(tf.extractfile("./model_weights.ckpt").read()), weights_only=True)
    assert {"./model_config.yaml", "./model_weights.ckpt"} <= set(names)
    assert "./" + cfg["tokenizer"]["model_path"].removeprefix("nemo:") in names
    with tarfile.open(NEMO) as tf:  # same members (names) as NeMo's own archive
        assert sorted(n for n in tf.getnames() if n != ".") == sorted(n for n in names if n != ".")
    assert set(sd) == set(model.state_dict())
    again = load_nemo(path)
    with torch.no_grad():
        out2 = again(short[0], short[1])
    assert torch.equal(out2.log_probs, short[2].log_probs)
    assert torch.equal(out2.encoder_out, short[2].encoder_out)
    assert again.units == model.units


def test_gzipped_archive_loads(model, tmp_path):
    gz = tmp_path / "model.nemo"
    with tarfile.open(NEMO) as src, tarfile.open(gz, "w:gz", compresslevel=1) as dst:
        for info in src.getmembers():
            dst.addfile(info, src.extractfile(info) if info.isreg() else None)
    again = load_nemo(gz)
    for k, v in model.state_dict().items():
        assert torch.equal(v, again.state_dict()[k])


def test_hybrid_ctc_head_loads(short, tmp_path):
    """Hybrid RNNT-CTC archive: the CTC head (ctc_decoder.*, aux_ctc.decoder) is used, RNNT parts ignored."""
    with tarfile.open(NEMO) as tf:
        members = {i.name: tf.extractfile(i).read() for i in tf.getmembers() if i.isreg()}
    cfg = yaml.safe_load(members["./model_config.yaml"])
    sd = torch.load(io.BytesIO(members["./model_weights.ckpt"]), weights_only=True)
    cfg["aux_ctc"] = {"decoder": cfg["decoder"], "ctc_loss_weight": 0.3}
    cfg["decoder"] = {"_target_": "nemo.collections.asr.modules.RNNTDecoder", "prednet": {"pred_hidden": 8}}
    cfg["joint"] = {"_target_": "nemo.collections.asr.modules.RNNTJoint"}
    cfg["target"] = "nemo.collections.asr.models.hybrid_rnnt_ctc_bpe_models.EncDecHybridRNNTCTCBPEModel"
    sd = {("ctc_" + k if k.startswith("decoder.") else k): v for k, v in sd.items()}
    sd["decoder.prediction.embed.weight"] = torch.zeros(129, 8)
    sd["joint.joint_net.2.weight"] = torch.zeros(129, 8)
    buf = io.BytesIO()
    torch.save(sd, buf)
    members["./model_config.yaml"] = yaml.safe_dump(cfg, allow_unicode=True).encode()
    members["./model_weights.ckpt"] = buf.getvalue()
    path = tmp_path / "hybrid.nemo"
    with tarfile.open(path, "w") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    hybrid = load_nemo(path, "ctc")
    assert hybrid.describe()["class"] == "EncDecHybridRNNTCTCBPEModel"
    with torch.no_grad():
        out = hybrid(short[0], short[1])
    assert torch.equal(out.log_probs, short[2].log_probs)


def test_char_model_round_trip(tmp_path):
    torch.manual_seed(0)
    cfg = char_config(untie_biases=False, conv_norm_type="layer_norm", xscaling=False)
    model = NemoCTCModel.from_config(cfg, Tokenizer.from_labels(LABELS)).eval()
    assert model.blank_id == len(LABELS) and model.frame_shift == pytest.approx(0.04)
    assert "encoder.pos_bias_u" in model.state_dict()
    assert "encoder.layers.0.conv.batch_norm.weight" in model.state_dict()
    path = save_nemo(model, cfg, tmp_path / "char.nemo", {})
    again = load_nemo(path)
    assert again.units == LABELS and again.tokenizer.kind == "char"
    assert again.describe()["class"] == "EncDecCTCModel"
    wav = torch.randn(2, 8000) * 0.1
    lens = torch.tensor([8000, 5000])
    with torch.no_grad():
        a, b = model(wav, lens), again(wav, lens)
    assert torch.equal(a.log_probs, b.log_probs) and torch.equal(a.lengths, b.lengths)
    assert a.lengths.tolist() == [13, 8]
    assert model.tokens_to_words([1, 2, 0, 3]) == [("ab", 0, 1), ("c", 3, 3)]


def test_save_fills_target_and_checks_tokenizer_files(model, tmp_path):
    cfg = char_config()
    del cfg["target"]
    char = NemoCTCModel.from_config(cfg, Tokenizer.from_labels(LABELS))
    with tarfile.open(save_nemo(char, cfg, tmp_path / "c.nemo")) as tf:
        saved = yaml.safe_load(tf.extractfile("./model_config.yaml"))
    assert saved["target"].endswith(".EncDecCTCModel")
    with pytest.raises(ModelError, match="no such file"):
        save_nemo(model, model.config, tmp_path / "x.nemo", {})
    assert not (tmp_path / "x.nemo").exists()


def test_training_gives_gradients_everywhere():
    torch.manual_seed(0)
    model = NemoCTCModel.from_config(char_config(), Tokenizer.from_labels(LABELS)).train()
    wav = torch.randn(2, 12000) * 0.1
    lens = torch.tensor([12000, 9000])
    out = model(wav, lens)
    targets = [model.tokenizer.encode("a cab"), model.tokenizer.encode("to do")]
    loss = torch.nn.functional.ctc_loss(
        out.log_probs.transpose(0, 1),
        torch.tensor(sum(targets, [])),
        out.lengths,
        torch.tensor([len(t) for t in targets]),
        blank=model.blank_id,
    )
    loss.backward()
    assert torch.isfinite(loss)
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name
    before = model.encoder.layers[0].conv.batch_norm.running_mean.clone()
    model(wav, lens)  # training mode updates BatchNorm statistics
    assert not torch.equal(before, model.encoder.layers[0].conv.batch_norm.running_mean)


@pytest.mark.parametrize(
    "subsampling, factor", [("dw_striding", 4), ("dw_striding", 16), ("striding", 8), ("striding", 4)]
)
def test_subsampling_variants_are_batch_independent(subsampling, factor):
    torch.manual_seed(0)
    cfg = char_config(subsampling=subsampling, subsampling_factor=factor)["encoder"]
    enc = ConformerEncoder.from_config(cfg).eval()
    feats = torch.randn(2, 40, 101)
    lens = torch.tensor([101, 57])
    with torch.no_grad():
        out, out_len = enc(feats, lens)
        n_conv = factor.bit_length() - 1
        assert out_len.tolist() == conv_output_lengths(lens, n_conv).tolist()
        assert out.shape == (2, 32, int(out_len.max()))
        one, one_len = enc(feats[1:, :, :57], lens[1:])
    n = int(one_len[0])
    torch.testing.assert_close(one[0], out[1, :, :n], atol=1e-5, rtol=0)
    if subsampling == "striding":
        assert [k for k in enc.state_dict() if k.startswith("pre_encode.conv")][-1].startswith(
            f"pre_encode.conv.{2 * (n_conv - 1)}."
        )


def test_limited_attention_context_masks():
    cfg = char_config(att_context_size=[2, 1])["encoder"]
    enc = ConformerEncoder.from_config(cfg)
    mask = enc.attention_mask(torch.tensor([6, 4]), 6)
    allowed = ~mask[0]
    for i in range(6):
        assert [j for j in range(6) if allowed[i, j]] == [j for j in range(6) if i - 2 <= j <= i + 1]
    assert not (~mask[1])[:, 4:].any() and not (~mask[1])[4:, :].any()
    chunked = ConformerEncoder.from_config({**cfg, "att_context_style": "chunked_limited"})
    allowed = ~chunked.attention_mask(torch.tensor([6]), 6)[0]
    # chunks of 2 frames, one chunk of left context
    assert [j for j in range(6) if allowed[4, j]] == [2, 3, 4, 5]
    assert [j for j in range(6) if allowed[1, j]] == [0, 1]


def test_encoder_state_dict_names_match_nemo(model):
    names = set(model.state_dict())
    assert "encoder.pre_encode.conv.0.weight" in names and "encoder.pre_encode.out.weight" in names
    assert "encoder.layers.1.self_attn.pos_bias_u" in names and "decoder.decoder_layers.0.bias" in names
    assert "encoder.layers.0.self_attn.linear_pos.bias" not in names
    cfg = copy.deepcopy(model.config)
    again = NemoCTCModel.from_config(cfg, model.tokenizer)
    again.load_state_dict(model.state_dict(), strict=True)


# --------------------------------------------- NeMo-built Conformer-CTC (striding 4x, char labels)


def test_conformer_ctc_char_equals_nemo():
    """EncDecCTCModel with a Conformer encoder (striding subsampling 4x, conv kernel 31) and character
    labels, built by NeMo 3.0.0 (scripts/make_nemo_fixtures.py --set ctc): features (1e-4), encoder
    output and log-probs (1e-3), greedy tokens = NeMo's per-frame labels collapsed, its texts."""
    from asrdecode.decoders.base import DecoderContext
    from asrdecode.decoders.ctc_greedy import CtcGreedyConfig, CtcGreedyDecoder

    ref = dict(np.load(FIX / "reference" / "conformer_ctc_char.npz", allow_pickle=False))
    model = load_nemo(FIX / "conformer_ctc_char.nemo")
    info = model.describe()
    assert info["class"] == "EncDecCTCModel" and model.tokenizer.kind == "char"
    assert info["encoder"]["subsampling"] == "striding" and info["encoder"]["subsampling_factor"] == 4
    assert model.units == [" ", *"abcdefghijklmnopqrstuvwxyz", "'"] and model.blank_id == 28
    audio = audio_batch()
    wav, lens = torch.from_numpy(audio["audio"]), torch.from_numpy(audio["audio_len"])
    with torch.inference_mode():
        feats, feat_len = model.features(wav, lens)
        out = model(wav, lens)
    assert feat_len.tolist() == ref["features_len"].tolist()
    np.testing.assert_allclose(feats.numpy(), batch_features(), atol=1e-4, rtol=0)
    assert out.lengths.tolist() == ref["encoder_len"].tolist()
    for b, n in enumerate(ref["encoder_len"].tolist()):
        np.testing.assert_allclose(
            out.encoder_out[b, :n].numpy(), ref["encoder_out"][b, :, :n].T, atol=1e-3, rtol=0
        )
        np.testing.assert_allclose(out.log_probs[b, :n].numpy(), ref["log_probs"][b, :n], atol=1e-3, rtol=0)
    ctx = DecoderContext(model.units, model.blank_id, model.frame_shift, model.tokens_to_words)
    for b, res in enumerate(CtcGreedyDecoder(CtcGreedyConfig(), ctx).decode(out)):
        labels = ref["greedy_frame_labels"][b, : int(ref["greedy_frame_labels_len"][b])].tolist()
        tokens = [t for i, t in enumerate(labels) if t != 28 and (i == 0 or labels[i - 1] != t)]
        assert res.tokens == tokens, b
        assert model.tokenizer.decode(res.tokens) == str(ref["greedy_text"][b])
