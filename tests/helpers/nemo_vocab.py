"""A NeMo fixture archive with another vocabulary of the same size: the label lists of the config
and, for a BPE model, the tokenizer members replaced; the weights and every other member kept,
written deterministically (the same bytes from the same inputs: scripts/make_nemo_fixtures.py
--set punct records the SHA-256 of each archive its references were made from)."""

from __future__ import annotations

import copy
import hashlib
import io
import tarfile
from pathlib import Path

import yaml

CONFIG = "model_config.yaml"


def _relabel(cfg: dict, labels: list[str]) -> None:
    """Every unit list of the config: ``labels`` and the ``vocabulary`` of the CTC decoder, the
    joint and a hybrid's auxiliary CTC decoder."""
    aux = (cfg.get("aux_ctc") or {}).get("decoder") or {}
    for section in (cfg, cfg.get("decoder") or {}, cfg.get("joint") or {}, aux):
        for key in ("labels", "vocabulary"):
            if isinstance(section.get(key), list) and section[key]:
                if len(section[key]) != len(labels):
                    raise ValueError(f"{key} has {len(section[key])} units, not {len(labels)}")
                section[key] = list(labels)


def swap_vocabulary(src: Path, dst: Path, labels: list[str], files: dict[str, bytes] | None = None) -> str:
    """Write ``dst``: ``src`` with the config's unit lists set to ``labels`` and each member whose
    name ends with a key of ``files`` (``tokenizer.model``, ``vocab.txt``, ``tokenizer.vocab``)
    replaced by its bytes. Returns the SHA-256 of ``dst``."""
    files = files or {}
    with tarfile.open(src) as tf:
        members = [(m, tf.extractfile(m).read() if m.isreg() else None) for m in tf.getmembers()]
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for member, data in members:
            info = copy.copy(member)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if data is None:
                tf.addfile(info)
                continue
            name = member.name.removeprefix("./")
            if name == CONFIG:
                cfg = yaml.safe_load(data)
                _relabel(cfg, labels)
                data = yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True).encode("utf-8")
            for suffix, new in files.items():
                if name.endswith(suffix):
                    data = new
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    dst.write_bytes(out.getvalue())
    return hashlib.sha256(out.getvalue()).hexdigest()


def sentencepiece_members(model: bytes) -> dict[str, bytes]:
    """The tokenizer members of a NeMo BPE archive for a sentencepiece model: the model,
    ``vocab.txt`` (NeMo's: word-start pieces without '▁', the others after '##') and
    ``tokenizer.vocab`` (sentencepiece's piece<TAB>score list)."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model)
    pieces = [p.piece for p in proto.pieces]
    vocab_txt = "".join(
        (p[1:] if p.startswith("\u2581") else f"##{p}") + "\n" for p in pieces if p not in ("<unk>", "\u2581")
    )
    spe_vocab = "".join(f"{p.piece}\t{p.score:g}\n" for p in proto.pieces)
    return {"tokenizer.model": model, "vocab.txt": vocab_txt.encode(), "tokenizer.vocab": spe_vocab.encode()}
