"""The hama phoneme CTC model (`asrdecode.models.hama`) against hama 1.7.0's own engine, batching,
loading errors, the converter and `asrdecode info`."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from asrdecode.errors import ModelError
from asrdecode.models.hama import HAMA_WORD_BOUNDARY, load_hama
from asrdecode.models.loading import load_model, resolve_model_path

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "data" / "demo" / "real"
CLIPS = ["ps_goforward.wav", "ps_cards_001.wav", "ps_librivox_0870.wav"]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return load_model("embedded:hama-ipa-ctc")


@pytest.fixture(scope="module")
def waves() -> list[np.ndarray]:
    out = []
    for name in CLIPS:
        wave, rate = sf.read(REAL / name, dtype="float32")
        assert rate == 16000
        out.append(wave)
    return out


def hama_engine():
    """hama's own inference engine (its bundled native library), the reference for the weights."""
    hama = pytest.importorskip("hama")
    from hama import _engine

    if not _engine.available():
        pytest.skip("hama's native engine is not available on this platform")
    folder = Path(hama.__file__).parent
    return _engine.AsrSession((folder / "assets" / "asr_waveform.hama").read_bytes())


def engine_log_probs(session, wave: np.ndarray) -> np.ndarray:
    log_probs, lengths = session.run(
        ["log_probs", "out_lengths"], {"waveform": wave[None], "waveform_lengths": np.array([len(wave)])}
    )
    return log_probs[0, : int(lengths[0])]


def ours(model, waves: list[np.ndarray]) -> list[np.ndarray]:
    batch = torch.zeros(len(waves), max(len(w) for w in waves))
    for i, w in enumerate(waves):
        batch[i, : len(w)] = torch.from_numpy(w)
    with torch.inference_mode():
        out = model(batch, torch.tensor([len(w) for w in waves]))
    return [out.log_probs[i, : int(n)].numpy() for i, n in enumerate(out.lengths)]


def test_log_probs_equal_hama_engine_on_real_clips(model, waves):
    """Alone and in a padded batch, on real speech: within 1e-3 of hama's engine (measured: 1.7e-4;
    the engine's float32 arithmetic is itself 1.5e-4 from a float64 run of the same network), and
    the same best phone in every frame."""
    session = hama_engine()
    batched = ours(model, waves)
    for wave, got_batched in zip(waves, batched, strict=True):
        ref = engine_log_probs(session, wave)
        (got,) = ours(model, [wave])
        assert got.shape == ref.shape
        assert np.abs(got - ref).max() < 1e-3
        assert (got.argmax(-1) == ref.argmax(-1)).all()
        assert np.abs(got_batched - got).max() < 1e-3


def test_an_utterance_gives_in_a_batch_what_it_gives_alone(model):
    """Up to float32 rounding: a batch's convolutions sum in another order, and a feature at a
    float16 rounding boundary can move by one float16 step (measured: 4.4e-4 on one log-prob)."""
    rng = np.random.default_rng(1)
    waves = [rng.standard_normal(n).astype(np.float32) * 0.1 for n in (16000, 3001, 160, 40000)]
    batched = ours(model, waves)
    for wave, got in zip(waves, batched, strict=True):
        (alone,) = ours(model, [wave])
        assert got.shape == alone.shape == ((len(wave) // 160 + 2) // 2, 191)
        assert np.abs(got - alone).max() < 1e-3
        assert (got.argmax(-1) == alone.argmax(-1)).all()


def test_units_blank_and_frame_shift(model):
    assert len(model.units) == 190 and model.units[-1] == HAMA_WORD_BOUNDARY
    assert model.blank_id == 190 and model.frame_shift == 0.02 and model.sample_rate == 16000
    boundary = model.units.index(HAMA_WORD_BOUNDARY)
    g, o = model.units.index("ɡ"), model.units.index("o")
    assert model.tokens_to_words([boundary, g, o, boundary, o]) == [("ɡo", 1, 2), ("o", 4, 4)]


def test_converter_reproduces_the_shipped_weights(tmp_path):
    pytest.importorskip("hama")
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from convert_hama_model import convert
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    tensors, meta = convert(None)
    shipped = load_hama(resolve_model_path("embedded:hama-ipa-ctc"))
    state = shipped.state_dict()
    assert set(tensors) == set(state)
    for name, value in tensors.items():
        assert torch.equal(value.float(), state[name]), name
    assert json.loads(meta["units"]) == shipped.units


def _write_model(path: Path, tensors: dict, meta: dict) -> Path:
    from safetensors.torch import save_file

    save_file(tensors, str(path), metadata=meta)
    return path


def test_bad_model_files_are_one_line_errors(tmp_path):
    from safetensors import safe_open

    good = resolve_model_path("embedded:hama-ipa-ctc")
    with safe_open(str(good), framework="pt") as fh:
        meta = fh.metadata()
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(good.read_bytes()[:100_000])
    cases = {
        truncated: "not a readable safetensors model",
        _write_model(tmp_path / "plain.safetensors", tensors, {}): "not a converted hama model",
        _write_model(
            tmp_path / "units.safetensors", tensors, {**meta, "units": "[1, 2]"}
        ): "bad hama model metadata",
        _write_model(
            tmp_path / "json.safetensors", tensors, {**meta, "units": "[oops"}
        ): "bad hama model metadata",
        _write_model(
            tmp_path / "shape.safetensors", {**tensors, "net.proj.bias": torch.zeros(7)}, meta
        ): "net.proj.bias has shape",
        _write_model(
            tmp_path / "missing.safetensors", {k: v for k, v in tensors.items() if "blocks.3" not in k}, meta
        ): "do not fit the hama network",
    }
    for path, message in cases.items():
        with pytest.raises(ModelError, match=message) as err:
            load_model(str(path))
        assert str(path) in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ModelError, match="model file not found"):
        load_model(str(tmp_path / "absent.safetensors"))


def test_unknown_embedded_name_lists_the_embedded_models():
    with pytest.raises(ModelError, match="hama-ipa-ctc") as err:
        resolve_model_path("embedded:hama")
    assert "demo_ctc_bpe" in str(err.value) and "sphinx-en-us" in str(err.value)


@pytest.mark.skipif(importlib.util.find_spec("click") is None, reason="needs the CLI")
def test_info_shows_provenance_and_licence():
    from click.testing import CliRunner

    from asrdecode.cli import main

    result = CliRunner().invoke(main, ["info", "embedded:hama-ipa-ctc"], terminal_width=200)
    assert result.exit_code == 0, result.output
    for fact in ("hama", "hamanlp", "1.7.0", "Apache-2.0", "MIT", "190"):
        assert fact in result.output
