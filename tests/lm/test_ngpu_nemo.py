"""NeMo's NGPU-LM files (``NGramGPULanguageModel.save_to``): the fixture NeMo 3.0.0 saved from
lm_tokens.arpa reads as the same LM as the ARPA; the decoders take it as ``ngram_lm``; a damaged or
hostile file is one line."""

from __future__ import annotations

import io
import random
import tarfile
from pathlib import Path

import pytest
import torch

from asrdecode.decoders.lms import load_fusion_lm
from asrdecode.errors import AsrDecodeError, ConfigError, GraphError
from asrdecode.lm.ngpu_nemo import read_ngpu_nemo
from asrdecode.lm.ngram_tensor import BatchedNgramLM

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nemo"
NGPU = FIX / "lm_tokens.nemo"
ARPA = FIX / "lm_tokens.arpa"


def test_reads_as_the_arpa_it_was_saved_from():
    arpa = BatchedNgramLM.from_arpa(ARPA, token_ids="ngpu", vocab_size=128)
    ngpu = read_ngpu_nemo(NGPU, 128)
    assert (ngpu.num_states, ngpu.order) == (arpa.num_states, arpa.order)
    rng = random.Random(7)
    for _ in range(300):
        tokens = [rng.randrange(128) for _ in range(rng.randrange(0, 9))]
        assert ngpu.score_sentence(tokens) == pytest.approx(arpa.score_sentence(tokens), abs=1e-4)
    states = torch.arange(arpa.num_states)
    a, _ = arpa.advance(states)
    b, _ = ngpu.advance(states)
    assert torch.allclose(a[:2], b[:2], atol=1e-5)  # root and <s> are the same states in both


def test_fusion_loader_takes_it():
    units = [f"t{i}" for i in range(128)]
    lm = load_fusion_lm(NGPU, "ngpu", units, 128)
    assert lm.score_sentence([5, 9]) == pytest.approx(
        BatchedNgramLM.from_arpa(ARPA, token_ids="ngpu", vocab_size=128).score_sentence([5, 9]), abs=1e-4
    )
    with pytest.raises(ConfigError, match="ngram_lm_token_ids must be ngpu"):
        load_fusion_lm(NGPU, "words", units, 128)


def _members() -> dict[str, bytes]:
    with tarfile.open(NGPU) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}


def _write(tmp_path: Path, config: bytes, state: dict) -> Path:
    buf = io.BytesIO()
    torch.save(state, buf)
    path = tmp_path / "bad.nemo"
    with tarfile.open(path, "w") as tf:
        for name, data in (("./model_config.yaml", config), ("./model_weights.ckpt", buf.getvalue())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def _changed(key: str, change) -> dict:
    members = _members()
    state = torch.load(io.BytesIO(members["./model_weights.ckpt"]), weights_only=True)
    state = {k: v.clone() for k, v in state.items()}
    change(state[key]) if key else None
    return state


@pytest.mark.parametrize(
    ("key", "change", "message"),
    [
        ("to_states", lambda t: t.__setitem__(200, 10**6), "an arc's state is out of range"),
        ("ilabels", lambda t: t.__setitem__(300, -4), "an arc's token is out of range"),
        ("backoff_to_states", lambda t: t.__setitem__(5, 99999), "a backoff state is out of range"),
        ("arcs_weights", lambda t: t.__setitem__(7, float("nan")), "an arc weight is NaN or +inf"),
        ("backoff_weights", lambda t: t.__setitem__(9, float("inf")), "a backoff weight is not finite"),
        ("state_order", lambda t: t.__setitem__(40, 9), "a state's order is outside"),
        ("backoff_to_states", lambda t: t.__setitem__(2, 2), "a backoff does not lead to a shorter history"),
    ],
)
def test_hostile_values_are_one_line(tmp_path, key, change, message):
    path = _write(tmp_path, _members()["./model_config.yaml"], _changed(key, change))
    with pytest.raises(GraphError) as err:
        read_ngpu_nemo(path, 128)
    assert message in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_wrong_vocabulary_missing_keys_and_other_files(tmp_path):
    with pytest.raises(GraphError, match="an LM over 128 tokens; the model has 64"):
        read_ngpu_nemo(NGPU, 64)
    state = _changed("", None)
    del state["backoff_to_states"]
    with pytest.raises(GraphError, match="no 'backoff_to_states'"):
        read_ngpu_nemo(_write(tmp_path, _members()["./model_config.yaml"], state), 128)
    with pytest.raises(GraphError, match="num_states must be a non-negative integer"):
        read_ngpu_nemo(_write(tmp_path, b"num_states: many\n", _changed("", None)), 128)
    with pytest.raises(GraphError, match="LM file not found"):
        read_ngpu_nemo(tmp_path / "none.nemo", 128)
    (tmp_path / "text.nemo").write_text("not a tar")
    with pytest.raises(AsrDecodeError, match="not a .nemo archive"):
        read_ngpu_nemo(tmp_path / "text.nemo", 128)


def test_random_damage_is_refused_or_safe_to_use(tmp_path):
    """Random values written into random places of the file's tensors: each read either refuses the
    file in one line or gives an LM whose every state can be advanced and ended without error."""
    rng = random.Random(11)
    config = _members()["./model_config.yaml"]
    base = _changed("", None)
    values = [-(10**9), -1, 0, 1, 2, 3, 127, 128, 3993, 3994, 10**9, float("nan"), float("-inf"), 1e30]
    refused = 0
    for _ in range(60):
        state = {k: v.clone() for k, v in base.items()}
        for _ in range(rng.randrange(1, 4)):
            key = rng.choice(sorted(state))
            flat = state[key].view(-1)
            value = rng.choice(values)
            if not state[key].is_floating_point() and isinstance(value, float):
                continue
            flat[rng.randrange(flat.numel())] = value
        try:
            lm = read_ngpu_nemo(_write(tmp_path, config, state), 128)
        except GraphError as err:
            assert "\n" not in str(err)
            refused += 1
            continue
        states = torch.arange(lm.num_states)
        lm.advance(states)
        lm.final_scores(states)
    assert 0 < refused < 60
