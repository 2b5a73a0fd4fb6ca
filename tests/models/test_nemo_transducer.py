"""NeMo RNN-T / TDT models: parity with NeMo 3.0.0 reference outputs, loading dispatch, bad configs."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from helpers.nemo_audio import audio_batch

from asrdecode.errors import ModelError
from asrdecode.models import ModelOutput, load_nemo, save_nemo
from asrdecode.models.loading import load_model
from asrdecode.models.transducer import NemoTransducerModel, transducer_durations

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nemo"
MODELS = ("rnnt_bpe", "tdt_bpe")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny per-step tensor ops: intra-op threads only add synchronisation (and the CI box is shared)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module", params=MODELS)
def fixture(request) -> tuple[str, NemoTransducerModel, dict[str, np.ndarray]]:
    name = request.param
    ref = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
    return name, load_nemo(FIX / f"{name}.nemo"), {k: ref[k] for k in ref.files}


@pytest.fixture(scope="module")
def audio() -> dict[str, np.ndarray]:
    return audio_batch()


def test_loads_as_transducer(fixture):
    name, model, _ = fixture
    assert isinstance(model, NemoTransducerModel)
    assert model.blank_id == 128 and len(model.units) == 128
    assert model.durations == ([0, 1, 2, 3, 4] if name == "tdt_bpe" else None)
    info = model.describe()
    assert info["type"] == "nemo-transducer" and info["class"] == "EncDecRNNTBPEModel"
    assert info["transducer"] == ("tdt" if name == "tdt_bpe" else "rnnt")
    assert info["joint"]["outputs"] == 129 + (5 if name == "tdt_bpe" else 0)
    assert abs(model.frame_shift - 0.08) < 1e-9
    # strict NeMo names: every checkpoint tensor is one of ours
    names = set(model.state_dict())
    assert {"decoder.prediction.embed.weight", "decoder.prediction.dec_rnn.lstm.weight_ih_l0"} <= names
    assert {"joint.enc.weight", "joint.pred.weight", "joint.joint_net.2.weight"} <= names


def test_load_model_dispatch():
    assert isinstance(load_model(str(FIX / "rnnt_bpe.nemo")), NemoTransducerModel)
    assert isinstance(load_model(str(FIX / "tdt_bpe.nemo"), "nemo-transducer"), NemoTransducerModel)
    with pytest.raises(ModelError, match="for a ctc model"):
        load_model(str(FIX / "rnnt_bpe.nemo"), "nemo-ctc")
    with pytest.raises(ModelError, match="for a transducer model"):
        load_model(str(FIX / "ctc_bpe.nemo"), "nemo-transducer")


def test_encoder_parity_from_audio(fixture, audio):
    """Waveforms -> features -> encoder, compared with NeMo's on the valid frames (atol 1e-3)."""
    _, model, ref = fixture
    with torch.inference_mode():
        out = model(torch.from_numpy(audio["audio"]), torch.from_numpy(audio["audio_len"]))
    assert isinstance(out, ModelOutput)
    assert out.log_probs is None and out.extra["transducer"] is model
    assert out.lengths.tolist() == ref["encoder_len"].tolist()
    enc_ref = torch.from_numpy(ref["encoder_out"]).transpose(1, 2)
    assert out.encoder_out.shape == enc_ref.shape
    for b, n in enumerate(ref["encoder_len"].tolist()):
        torch.testing.assert_close(out.encoder_out[b, :n], enc_ref[b, :n], atol=1e-3, rtol=0)


def test_joint_parity(fixture):
    """Prediction net after <SOS> (= blank), projections, raw logits and log-softmax for frames 0..4."""
    name, model, ref = fixture
    with torch.inference_mode():
        frames = torch.from_numpy(ref["joint_encoder_frames"])
        enc_proj = model.project_encoder(frames)
        state = model.initial_prediction_state(1, torch.device("cpu"))
        out, (h, c) = model.predict(torch.tensor([model.blank_id]), state)
        pred_proj = model.project_prediction(out)
        logits = model.joint_after_projection(enc_proj, pred_proj)

    def close(a: torch.Tensor, key: str) -> None:
        torch.testing.assert_close(a, torch.from_numpy(ref[key]).reshape(a.shape), atol=1e-4, rtol=0)

    close(enc_proj, "joint_enc_proj")
    close(out[0], "joint_pred_sos_out")
    close(h[:, 0], "joint_pred_sos_h")
    close(c[:, 0], "joint_pred_sos_c")
    close(pred_proj[0], "joint_pred_proj")
    close(logits, "joint_logits")
    close(logits[:, :129].log_softmax(-1), "joint_logprobs")
    close(logits.log_softmax(-1), "joint_nemo_cpu_output")
    if name == "tdt_bpe":
        close(logits[:, 129:].log_softmax(-1), "joint_duration_logprobs")
    # the full-lattice forward agrees with the step interface
    with torch.inference_mode():
        lattice = model.joint(frames[None], out[None])
    torch.testing.assert_close(lattice[0, :, 0], logits)


# ----------------------------------------------------------------- bad archives


@pytest.fixture(scope="module")
def members() -> dict[str, bytes]:
    with tarfile.open(FIX / "tdt_bpe.nemo") as tf:
        return {i.name: tf.extractfile(i).read() for i in tf.getmembers() if i.isreg()}


def _write(path: Path, members: dict[str, bytes], edit=None, state_edit=None) -> Path:
    files = dict(members)
    if edit is not None:
        cfg = yaml.safe_load(files["./model_config.yaml"])
        edit(cfg)
        files["./model_config.yaml"] = yaml.safe_dump(cfg, allow_unicode=True).encode()
    if state_edit is not None:
        state = torch.load(io.BytesIO(files["./model_weights.ckpt"]), weights_only=True)
        state_edit(state)
        buf = io.BytesIO()
        torch.save(state, buf)
        files["./model_weights.ckpt"] = buf.getvalue()
    with tarfile.open(path, "w") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def _rnnt(cfg: dict) -> None:
    """Turn the TDT config into a plain RNN-T one (durations removed everywhere)."""
    cfg["model_defaults"].pop("tdt_durations")
    cfg["decoding"].update(model_type="rnnt")
    cfg["decoding"].pop("durations")
    cfg["loss"] = {"loss_name": "default"}


@pytest.mark.parametrize(
    "edit, state_edit, needle",
    [
        (lambda c: c["decoder"].update(vocab_size=127), None, "decoder.vocab_size=127"),
        (lambda c: c["joint"].update(num_classes=130), None, "joint.num_classes=130"),
        (lambda c: c["joint"].update(vocabulary=c["joint"]["vocabulary"][:-1]), None, "joint.vocabulary"),
        (lambda c: c["decoder"].update(_target_="x.StatelessTransducerDecoder"), None, "StatelessTransducer"),
        (lambda c: c["joint"].update(_target_="x.SampledRNNTJoint"), None, "SampledRNNTJoint"),
        (lambda c: c["decoder"].update(normalization_mode="layer"), None, "normalization_mode"),
        (lambda c: c["decoder"].update(context_size=2), None, "context_size"),
        (lambda c: c["decoder"]["prednet"].update(some_option=1), None, "some_option"),
        (lambda c: c["joint"]["jointnet"].update(activation="gelu"), None, "activation"),
        (lambda c: c["joint"].update(num_extra_outputs=4), None, "num_extra_outputs=4"),
        (lambda c: c["loss"].update(loss_name="multiblank_rnnt"), None, "multiblank_rnnt"),
        (lambda c: c["loss"]["tdt_kwargs"].update(durations=[0, 1, 2, 3, 5]), None, "disagrees"),
        (lambda c: c["encoder"].update(self_attention_model="abs_pos"), None, "self_attention_model"),
        (lambda c: c.update(target="nemo.collections.asr.models.EncDecCTCModelBPE"), None, "decoder"),
        (lambda c: c.update(target="x.EncDecMultiTaskModel"), None, "EncDecMultiTaskModel"),
        (lambda c: c["decoder"]["prednet"].update(pred_rnn_layers=2), None, "missing decoder.prediction"),
        (_rnnt, None, "num_extra_outputs=5"),
        (None, lambda s: s.pop("joint.enc.bias"), "missing joint.enc.bias"),
        (
            None,
            lambda s: s.update({"joint.joint_net.2.bias": torch.zeros(133)}),
            "shape joint.joint_net.2.bias",
        ),
    ],
)
def test_bad_configs_name_the_option(members, tmp_path, edit, state_edit, needle):
    path = _write(tmp_path / "bad.nemo", members, edit, state_edit)
    with pytest.raises(ModelError) as exc:
        load_nemo(path)
    msg = str(exc.value)
    assert "\n" not in msg and str(path) in msg, msg
    assert needle in msg, msg


def test_tokenizer_size_mismatch_is_detected(members, tmp_path):
    """A tokenizer whose vocabulary differs from the networks' (config sizes removed): caught by shape."""

    def edit(cfg: dict) -> None:
        cfg["decoder"].pop("vocab_size")
        cfg["joint"].pop("num_classes")
        cfg["joint"].pop("vocabulary")

    def grow(state: dict) -> None:  # weights of a 130-token model
        state["decoder.prediction.embed.weight"] = torch.zeros(131, 16)
        state["joint.joint_net.2.weight"] = torch.zeros(136, 16)
        state["joint.joint_net.2.bias"] = torch.zeros(136)

    path = _write(tmp_path / "vocab.nemo", members, edit, grow)
    with pytest.raises(ModelError, match="shape decoder.prediction.embed.weight"):
        load_nemo(path)


def test_plain_rnnt_config_and_hybrid_as_transducer(members, tmp_path):
    def rnnt(cfg: dict) -> None:
        _rnnt(cfg)
        cfg["joint"]["num_extra_outputs"] = 0

    def drop_durations(state: dict) -> None:
        state["joint.joint_net.2.weight"] = state["joint.joint_net.2.weight"][:129].clone()
        state["joint.joint_net.2.bias"] = state["joint.joint_net.2.bias"][:129].clone()

    model = load_nemo(_write(tmp_path / "rnnt.nemo", members, rnnt, drop_durations))
    assert model.durations is None and model.joint.joint_net[-1].out_features == 129

    def hybrid(cfg: dict) -> None:
        cfg["target"] = "nemo.collections.asr.models.EncDecHybridRNNTCTCBPEModel"
        cfg["aux_ctc"] = {"decoder": {"feat_in": 16, "num_classes": 128}}

    def add_ctc(state: dict) -> None:
        state["ctc_decoder.decoder_layers.0.weight"] = torch.zeros(129, 16, 1)
        state["ctc_decoder.decoder_layers.0.bias"] = torch.zeros(129)

    path = _write(tmp_path / "hybrid.nemo", members, hybrid, add_ctc)
    as_transducer = load_nemo(path, "transducer")
    assert isinstance(as_transducer, NemoTransducerModel) and as_transducer.durations == [0, 1, 2, 3, 4]
    auto = load_nemo(path)  # auto: the transducer, as NeMo decodes a hybrid unless told otherwise
    assert isinstance(auto, NemoTransducerModel) and auto.heads == ["transducer", "ctc"]
    assert "also has: ctc" in auto.describe()["head"]
    ctc = load_nemo(path, "ctc")
    assert type(ctc).__name__ == "NemoCTCModel" and ctc.head == "ctc"


def test_durations_from_config():
    assert transducer_durations({}) is None
    assert transducer_durations({"decoding": {"model_type": "tdt", "durations": [0, 2]}}) == [0, 2]
    with pytest.raises(ModelError, match="no positive duration"):
        transducer_durations({"loss": {"loss_name": "tdt", "tdt_kwargs": {"durations": [0]}}})
    with pytest.raises(ModelError, match="no durations"):
        transducer_durations({"loss": {"loss_name": "tdt"}})


def test_save_round_trip(fixture, tmp_path):
    """save_nemo writes a transducer archive that loads back to identical weights and outputs."""
    name, model, ref = fixture
    path = save_nemo(model, None, tmp_path / f"{name}.nemo")
    again = load_nemo(path)
    assert isinstance(again, NemoTransducerModel) and again.durations == model.durations
    assert again.config["target"] == model.config["target"]
    for key, value in model.state_dict().items():
        assert torch.equal(value, again.state_dict()[key]), key
    with pytest.raises(ModelError, match="save_nemo writes a transducer"):
        save_nemo(model, {**model.config, "target": "x.EncDecCTCModelBPE"}, tmp_path / "bad.nemo")


# ---------------------------------------- NeMo-built char, 2-layer LSTM and sliding-window attention RNN-Ts

# Built by scripts/make_nemo_fixtures.py --set tiny (NeMo 3.0.0, random weights, tuned heads).
EXTRA = {
    "rnnt_char": {"class": "EncDecRNNTModel", "vocab": 28, "layers": 1},
    "rnnt_lstm2": {"class": "EncDecRNNTBPEModel", "vocab": 128, "layers": 2},
    "rnnt_local": {"class": "EncDecRNNTBPEModel", "vocab": 128, "layers": 1},  # sliding-window attention
    "rnnt_streaming": {"class": "EncDecRNNTBPEModel", "vocab": 128, "layers": 1},  # cache-aware, offline
}
CONTEXT = {"rnnt_local": [8, 8], "rnnt_streaming": [16, 3]}


@pytest.fixture(scope="module", params=sorted(EXTRA))
def extra_fixture(request) -> tuple[str, NemoTransducerModel, dict[str, np.ndarray]]:
    name = request.param
    ref = np.load(FIX / "reference" / f"{name}.npz", allow_pickle=False)
    return name, load_nemo(FIX / f"{name}.nemo"), {k: ref[k] for k in ref.files}


def test_extra_layouts_load(extra_fixture):
    """Char vocabulary (labels from the config, blank = 28) and a 2-layer LSTM prediction network."""
    name, model, ref = extra_fixture
    spec = EXTRA[name]
    info = model.describe()
    assert isinstance(model, NemoTransducerModel) and model.durations is None
    assert info["class"] == spec["class"] and info["transducer"] == "rnnt"
    assert model.blank_id == spec["vocab"] == len(model.units)
    assert info["prediction_network"]["layers"] == spec["layers"]
    assert info["joint"]["outputs"] == spec["vocab"] + 1
    assert model.tokenizer.kind == ("char" if name == "rnnt_char" else "bpe")
    if name == "rnnt_char":
        assert model.units == [" ", *"abcdefghijklmnopqrstuvwxyz", "'"]
    assert ref["joint_pred_sos_h"].shape == (spec["layers"], 16)
    local = name == "rnnt_local"
    assert info["encoder"]["self_attention_model"] == ("rel_pos_local_attn" if local else "rel_pos")
    assert info["encoder"]["att_context_size"] == CONTEXT.get(name, [-1, -1])


def test_extra_layouts_encoder_parity(extra_fixture, audio):
    """Audio -> our front end + encoder == NeMo's encoder output on the valid frames (atol 1e-3)."""
    _, model, ref = extra_fixture
    with torch.inference_mode():
        out = model(torch.from_numpy(audio["audio"]), torch.from_numpy(audio["audio_len"]))
    assert out.lengths.tolist() == ref["encoder_len"].tolist()
    enc_ref = torch.from_numpy(ref["encoder_out"]).transpose(1, 2)
    for b, n in enumerate(ref["encoder_len"].tolist()):
        torch.testing.assert_close(out.encoder_out[b, :n], enc_ref[b, :n], atol=1e-3, rtol=0)


def test_extra_layouts_joint_parity(extra_fixture):
    """<SOS> step through every LSTM layer (h, c per layer), projections, logits, log-softmax (atol 1e-4)."""
    _, model, ref = extra_fixture
    with torch.inference_mode():
        frames = torch.from_numpy(ref["joint_encoder_frames"])
        enc_proj = model.project_encoder(frames)
        out, (h, c) = model.predict(
            torch.tensor([model.blank_id]), model.initial_prediction_state(1, torch.device("cpu"))
        )
        pred_proj = model.project_prediction(out)
        logits = model.joint_after_projection(enc_proj, pred_proj)
    pairs = {
        "joint_enc_proj": enc_proj,
        "joint_pred_sos_out": out[0],
        "joint_pred_sos_h": h[:, 0],
        "joint_pred_sos_c": c[:, 0],
        "joint_pred_proj": pred_proj[0],
        "joint_logits": logits,
        "joint_logprobs": logits.log_softmax(-1),
        "joint_nemo_cpu_output": logits.log_softmax(-1),
    }
    for key, value in pairs.items():
        torch.testing.assert_close(value, torch.from_numpy(ref[key]).reshape(value.shape), atol=1e-4, rtol=0)


def test_streaming_encoder_other_context_equals_nemo(audio):
    """The cache-aware streaming fixture (causal downsampling and convolutions, chunked_limited
    attention, trained for [[16, 3], [16, 0]]) with model.att_context_size=[16, 0]: NeMo's encoder
    output after its set_default_att_context_size([16, 0]); a context it was not trained for is a
    one-line error."""
    ref = np.load(FIX / "reference" / "rnnt_streaming.npz", allow_pickle=False)
    path = str(FIX / "rnnt_streaming.nemo")
    model = load_model(path, att_context_size=[16, 0])
    assert model.describe()["encoder"]["att_context_size"] == [16, 0]
    with torch.inference_mode():
        out = model(torch.from_numpy(audio["audio"]), torch.from_numpy(audio["audio_len"]))
    enc_ref = torch.from_numpy(ref["encoder_out_ctx1"]).transpose(1, 2)
    assert (ref["encoder_out_ctx1"] != ref["encoder_out"]).any()
    for b, n in enumerate(ref["encoder_len"].tolist()):
        torch.testing.assert_close(out.encoder_out[b, :n], enc_ref[b, :n], atol=1e-3, rtol=0)
    with pytest.raises(ModelError, match=r"att_context_size=\[16, 1\]: this model was trained for"):
        load_model(path, att_context_size=[16, 1])
