"""load_nemo refuses unsafe or unsupported archives with a one-line ModelError, and never runs pickles."""

from __future__ import annotations

import builtins
import gzip
import io
import os
import tarfile
from pathlib import Path

import pytest
import torch
import yaml

from asrdecode.errors import ModelError
from asrdecode.models import load_nemo

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nemo"
NEMO = FIX / "ctc_bpe.nemo"


@pytest.fixture(scope="module")
def members() -> dict[str, bytes]:
    with tarfile.open(NEMO) as tf:
        return {i.name: tf.extractfile(i).read() for i in tf.getmembers() if i.isreg()}


def write_tar(path: Path, files: dict[str, bytes], extra: list[tarfile.TarInfo] = ()) -> Path:
    with tarfile.open(path, "w") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for info in extra:
            tf.addfile(info)
    return path


def with_config(members: dict[str, bytes], edit) -> dict[str, bytes]:
    cfg = yaml.safe_load(members["./model_config.yaml"])
    edit(cfg)
    return {**members, "./model_config.yaml": yaml.safe_dump(cfg, allow_unicode=True).encode()}


def expect_error(path: Path, *needles: str) -> str:
    with pytest.raises(ModelError) as exc:
        load_nemo(path)
    msg = str(exc.value)
    assert "\n" not in msg, msg
    assert str(path) in msg, msg
    for needle in needles:
        assert needle in msg, msg
    return msg


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def test_parent_path_member_is_refused(members, tmp_path):
    path = write_tar(tmp_path / "a.nemo", {**members, "../evil": b"x"})
    expect_error(path, "../evil", "unsafe")
    path = write_tar(tmp_path / "b.nemo", {**members, "./sub/../../evil": b"x"})
    expect_error(path, "unsafe")
    assert not (tmp_path.parent / "evil").exists()


def test_absolute_member_is_refused(members, tmp_path):
    path = write_tar(tmp_path / "a.nemo", {"/tmp/evil_abs": b"x", **members})
    expect_error(path, "/tmp/evil_abs", "unsafe")


@pytest.mark.parametrize(
    "info",
    [
        link("./model_weights.ckpt", "/etc/passwd"),
        link("./extra", "model_config.yaml", tarfile.LNKTYPE),
        link("./dev", "", tarfile.CHRTYPE),
        link("./fifo", "", tarfile.FIFOTYPE),
    ],
    ids=["symlink", "hardlink", "device", "fifo"],
)
def test_links_and_special_files_are_refused(members, tmp_path, info):
    files = {k: v for k, v in members.items() if k != info.name}
    expect_error(write_tar(tmp_path / "m.nemo", files, [info]), info.name, "unsafe")


def test_duplicate_member_is_refused(members, tmp_path):
    path = tmp_path / "dup.nemo"
    write_tar(path, members)
    with tarfile.open(path, "a") as tf:
        info = tarfile.TarInfo("model_config.yaml")
        info.size = 3
        tf.addfile(info, io.BytesIO(b"a: "))
    expect_error(path, "duplicate")


@pytest.mark.parametrize(
    "content", [os.urandom(4096), b"", b"\x1f\x8b" + os.urandom(500)], ids=["random", "empty", "gz"]
)
def test_not_a_tar_is_refused(tmp_path, content):
    path = tmp_path / "junk.nemo"
    path.write_bytes(content)
    expect_error(path)


def test_truncated_gzip_archive_is_refused(tmp_path):
    data = gzip.compress(NEMO.read_bytes(), compresslevel=1)
    path = tmp_path / "cut.nemo"
    path.write_bytes(data[: len(data) // 2])
    expect_error(path)


def test_missing_file_and_missing_members(members, tmp_path):
    expect_error(tmp_path / "nope.nemo", "not found")
    files = {k: v for k, v in members.items() if k != "./model_weights.ckpt"}
    expect_error(write_tar(tmp_path / "a.nemo", files), "model_weights.ckpt")
    files = {k: v for k, v in members.items() if not k.endswith("_tokenizer.model")}
    expect_error(write_tar(tmp_path / "b.nemo", files), "tokenizer.model_path")


def test_corrupt_tokenizer_model_is_refused(members, tmp_path):
    name = next(k for k in members if k.endswith("_tokenizer.model"))
    path = write_tar(tmp_path / "t.nemo", {**members, name: os.urandom(2000)})
    expect_error(path, "sentencepiece")


def test_pickled_code_is_never_executed(members, tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (builtins.open, (str(marker), "w"))

    buf = io.BytesIO()
    torch.save({"encoder.x": Evil()}, buf)
    path = write_tar(tmp_path / "evil.nemo", {**members, "./model_weights.ckpt": buf.getvalue()})
    expect_error(path, "model_weights.ckpt")
    assert not marker.exists()


def test_yaml_tags_are_not_constructed(members, tmp_path):
    bad = b"!!python/object/apply:os.system ['true']\n"
    expect_error(write_tar(tmp_path / "y.nemo", {**members, "./model_config.yaml": bad}), "YAML")


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda c: c["encoder"].update(self_attention_model="abs_pos"), "self_attention_model"),
        (lambda c: c["encoder"].update(self_attention_model="rel_pos_local_attn"), "rel_pos_local_attn"),
        (lambda c: c["encoder"].update(subsampling="vggnet"), "vggnet"),
        (lambda c: c["encoder"].update(subsampling_factor=6), "subsampling_factor"),
        (lambda c: c["encoder"].update(att_context_style="chunked_limited_with_rc"), "att_context_style"),
        (lambda c: c["encoder"].update(conv_norm_type="group_norm"), "conv_norm_type"),
        (lambda c: c["encoder"].update(some_new_option=1), "some_new_option"),
        (lambda c: c["encoder"].update(_target_="nemo.asr.modules.SqueezeformerEncoder"), "Squeeze"),
        (lambda c: c["preprocessor"].update(frame_splicing=3), "frame_splicing"),
        (lambda c: c.update(target="nemo.collections.asr.models.EncDecRNNTBPEModel"), "EncDecRNNTBPEModel"),
        (lambda c: c.pop("target"), "target"),
        (lambda c: c["decoder"].update(num_classes=127), "num_classes"),
        (lambda c: c["decoder"].update(_target_="x.ConvASRDecoderClassification"), "DecoderClassification"),
        (lambda c: c["tokenizer"].update(type="wpe"), "wpe"),
        (lambda c: c["encoder"].update(n_layers=1), "unexpected encoder.layers.1"),
        (lambda c: c["encoder"].update(conv_kernel_size=5), "shape"),
        (lambda c: c["encoder"].update(n_heads="four"), "n_heads"),
        (lambda c: c["encoder"].update(n_heads=0), "invalid model config"),
        (lambda c: c["encoder"].update(ff_expansion_factor=-1), "invalid model config"),
        (lambda c: c["encoder"].update(conv_context_size=[]), "invalid model config"),
        (lambda c: c.update(tokenizer="just a string"), "tokenizer must be a mapping or null, got str"),
        (lambda c: c.update(encoder=[1, 2]), "encoder must be a mapping, got list"),
        (lambda c: c.update(decoding="greedy"), "decoding must be a mapping or null, got str"),
    ],
)
def test_unsupported_configs_name_the_option(members, tmp_path, edit, needle):
    path = write_tar(tmp_path / "cfg.nemo", with_config(members, edit))
    expect_error(path, needle)


def test_build_graph_with_a_damaged_model_config_is_one_line(members, tmp_path):
    """build-graph reads the model's vocabulary and tokenizer: a config section of the wrong type
    is one line naming the archive and the key, not a traceback."""
    import subprocess
    import sys

    path = write_tar(tmp_path / "m.nemo", with_config(members, lambda c: c.update(tokenizer="x")))
    root = Path(__file__).resolve().parents[2]
    config = str(root / "configs/graph/demo-ctc-bpe-tlg.yaml")
    proc = subprocess.run(
        [sys.executable, "-m", "asrdecode.cli", "build-graph", "--config", config, f"model={path}",
         "--out", str(tmp_path / "g")],
        capture_output=True, text=True, cwd=root,
    )  # fmt: skip
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"{path}: model_config.yaml: tokenizer must be a mapping or null, got str" in proc.stderr


def test_state_dict_key_with_a_newline_is_shown_escaped(members, tmp_path):
    """A weights file whose key holds a newline (a byte flipped in the archive, found by make fuzz):
    the one-line error shows it escaped."""
    state = torch.load(io.BytesIO(members["./model_weights.ckpt"]), weights_only=True)
    state["preprocessor.featurizer.\nb"] = torch.zeros(1)
    buf = io.BytesIO()
    torch.save(state, buf)
    path = write_tar(tmp_path / "k.nemo", {**members, "./model_weights.ckpt": buf.getvalue()})
    expect_error(path, "unexpected preprocessor.featurizer.\\nb")
