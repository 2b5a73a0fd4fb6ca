"""pocketsphinx en-us model files byte for byte: every packaged file read and written back gives the
same bytes (and the same content read again); the stored s3 checksums equal `s3_checksum` of the
file's words; the binary mdef parse agrees with the graph builder's reader (which walks the stored
context tree); writer-made files of other shapes, byte orders and header lengths read back; and model
folders whose files disagree in size give one-line errors naming the file."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest

from asrdecode.errors import ModelError
from asrdecode.models.loading import resolve_model_path
from asrdecode.models.sphinx import read_sphinx_model
from asrdecode.models.sphinx_io import (
    S3Gaussians,
    S3TransitionMatrices,
    Sendump,
    read_binary_mdef,
    read_feat_params,
    read_mdef,
    read_noisedict,
    read_s3_gaussian_file,
    read_sendump_file,
    read_transition_matrix_file,
    s3_checksum,
    write_binary_mdef,
    write_feat_params,
    write_noisedict,
    write_s3_gaussians,
    write_sendump,
    write_transition_matrices,
)

FILES = {
    "means": (read_s3_gaussian_file, write_s3_gaussians),
    "variances": (read_s3_gaussian_file, write_s3_gaussians),
    "transition_matrices": (read_transition_matrix_file, write_transition_matrices),
    "sendump": (read_sendump_file, write_sendump),
    "mdef": (read_binary_mdef, write_binary_mdef),
    "feat.params": (read_feat_params, write_feat_params),
    "noisedict": (read_noisedict, write_noisedict),
}


@pytest.fixture(scope="module")
def folder() -> Path:
    return resolve_model_path("embedded:sphinx-en-us")


def assert_same_content(a, b) -> None:
    """Field by field; arrays equal in shape, dtype and every value."""
    if dataclasses.is_dataclass(a):
        assert type(a) is type(b)
        for f in dataclasses.fields(a):
            assert_same_content(getattr(a, f.name), getattr(b, f.name))
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


def test_every_packaged_file_is_covered(folder) -> None:
    """All model files but the README have a reader and a writer here."""
    assert {f.name for f in folder.iterdir() if f.is_file()} - {"README"} == set(FILES)


@pytest.mark.parametrize("name", list(FILES))
def test_packaged_file_round_trip_is_byte_identical(folder, tmp_path, name: str) -> None:
    read, write = FILES[name]
    original = (folder / name).read_bytes()
    content = read(folder / name)
    written = write(tmp_path / name, content)
    assert written.read_bytes() == original
    assert_same_content(read(written), content)


@pytest.mark.parametrize("name", ["means", "variances", "transition_matrices"])
def test_stored_s3_checksums_equal_the_checksum_of_the_words(folder, name: str) -> None:
    """chksum0 files end with a checksum of every 32-bit word after the byte-order magic."""
    data = (folder / name).read_bytes()
    assert b"chksum0 yes\n" in data[: data.index(b"endhdr\n")]
    start = data.index(b"endhdr\n") + len("endhdr\n") + 4
    words = np.frombuffer(data[start:-4], dtype="<u4")
    assert s3_checksum(words) == int.from_bytes(data[-4:], "little")


def test_s3_checksum_rotates_by_20_bits_and_wraps() -> None:
    assert s3_checksum(np.array([1, 2], dtype=np.uint32)) == (1 << 20) + 2
    assert s3_checksum(np.array([0xFFFFFFFF, 1], dtype=np.uint32)) == 0  # rotl(all ones) + 1
    assert s3_checksum(np.array([0x80000000, 0], dtype=np.uint32)) == 1 << 19


def test_binary_mdef_parse_agrees_with_the_graph_reader(folder) -> None:
    """Two parsers: sphinx_io reads the triphone table (and checks the stored tree against it),
    asrdecode.graph.sphinx walks the stored context tree."""
    full = read_binary_mdef(folder / "mdef")
    graph = read_mdef(folder / "mdef")
    n_ci = len(full.ciphones)
    assert (n_ci, full.n_phone, len(full.sseq), full.n_sen, full.n_tmat) == (42, 137095, 29324, 5126, 42)
    assert full.ciphones == graph.ciphones and full.sil == graph.sil == full.ciphones.index("SIL")
    assert (full.n_emit_state, full.n_ci_sen, full.n_sen) == (graph.n_emit_state, graph.n_ci_sen, graph.n_sen)
    np.testing.assert_array_equal(full.ssid, graph.ssid)
    np.testing.assert_array_equal(full.tmat, graph.tmat)
    np.testing.assert_array_equal(full.sseq, graph.sseq)
    assert graph.filler == [bool(f) for f in full.attr[:n_ci, 0]]
    triphones = {tuple(int(v) for v in row): n_ci + i for i, row in enumerate(full.attr[n_ci:])}
    assert graph.tree == triphones
    assert full.description.startswith("BEGIN FILE FORMAT DESCRIPTION\n")


def test_mdef_reader_rejects_a_tree_that_disagrees_with_the_triphones(folder, tmp_path) -> None:
    """Two triphones swapped in the phone table (the tree still points to the old ids)."""
    data = bytearray((folder / "mdef").read_bytes())
    mdef = read_binary_mdef(folder / "mdef")
    n_tree = 142108
    phones_at = len(data) - 4 - 2 * mdef.sseq.size - 12 * mdef.n_phone
    assert phones_at - 8 * n_tree == 12 + 1052 + 40 + 120  # header, description, counts, names
    a, b = phones_at + 12 * 100, phones_at + 12 * 101
    data[a : a + 12], data[b : b + 12] = data[b : b + 12], data[a : a + 12]
    (tmp_path / "mdef").write_bytes(bytes(data))
    with pytest.raises(ModelError, match="context tree disagrees with the triphone table"):
        read_binary_mdef(tmp_path / "mdef")


def test_writers_round_trip_other_shapes_byte_orders_and_header_lengths(folder, tmp_path) -> None:
    rng = np.random.default_rng(0)
    for extra in ("", "x", "xx", "xxx", "xxxx", "xxxxx", "xxxxxx", "xxxxxxx"):  # every header padding
        header = {"version": "1.0", "chksum0": "yes", "comment": f"test{extra}"}
        for byteorder in "<>":
            g = S3Gaussians(header, rng.standard_normal((2, 3, 4, 5)).astype(np.float32), byteorder)
            path = write_s3_gaussians(tmp_path / "g", g)
            assert_same_content(read_s3_gaussian_file(path), g)
            data = path.read_bytes()
            assert (data.index(b"endhdr\n") + len("endhdr\n")) % 8 == 0
            words = np.frombuffer(data[data.index(b"endhdr\n") + 11 : -4], dtype=f"{byteorder}u4")
            assert s3_checksum(words) == int.from_bytes(data[-4:], "little" if byteorder == "<" else "big")
    t = S3TransitionMatrices({"version": "1.0"}, rng.random((3, 2, 3)).astype(np.float32))
    assert_same_content(read_transition_matrix_file(write_transition_matrices(tmp_path / "t", t)), t)
    for title in ("a", "ab", "abc", "abcd"):  # every sendump padding
        s = Sendump([title, "feature_count 2"], rng.integers(0, 256, (2, 8, 7), dtype=np.uint8), ">")
        path = write_sendump(tmp_path / "s", s)
        assert_same_content(read_sendump_file(path), s)
        assert (path.stat().st_size - s.weights.size) % 4 == 0  # the weights start 4-byte aligned
    with pytest.raises(ModelError, match="feature_count"):
        write_sendump(tmp_path / "s", Sendump(["t", "feature_count 3"], np.zeros((2, 1, 1), np.uint8)))
    m = dataclasses.replace(read_binary_mdef(folder / "mdef"), description="made by a test")
    assert_same_content(read_binary_mdef(write_binary_mdef(tmp_path / "m", m)), m)


def _model_copy(folder: Path, tmp_path: Path) -> Path:
    """A copy (not links: the writers must never touch the packaged files)."""
    out = tmp_path / "model"
    out.mkdir()
    for f in folder.iterdir():
        if f.is_file():
            shutil.copy(f, out / f.name)
    return out


def _gaussians(folder: Path, name: str, cut) -> S3Gaussians:
    g = read_s3_gaussian_file(folder / name)
    return dataclasses.replace(g, values=np.ascontiguousarray(g.values[cut]))


def _sendump(folder: Path, cut, header=None) -> Sendump:
    s = read_sendump_file(folder / "sendump")
    return dataclasses.replace(s, weights=np.ascontiguousarray(s.weights[cut]), header=header or s.header)


def _tmat(folder: Path, values: np.ndarray | None = None) -> S3TransitionMatrices:
    t = read_transition_matrix_file(folder / "transition_matrices")
    return t if values is None else dataclasses.replace(t, values=values)


def _two_streams(header: list[str]) -> list[str]:
    return [h if not h.startswith("feature_count") else "feature_count 2" for h in header]


MISMATCHES = {
    "mixture weights vs senones": (
        lambda f: {"sendump": _sendump(f, np.s_[:, :, :5000])},
        "sendump",
        "weights [3, 128, 5000] do not match 3 streams x 128 densities x 5126 senones",
    ),
    "mixture weights vs densities": (
        lambda f: {"sendump": _sendump(f, np.s_[:, :100])},
        "sendump",
        "weights [3, 100, 5126] do not match",
    ),
    "mixture weights vs streams": (
        lambda f: {"sendump": _sendump(f, np.s_[:2], _two_streams(read_sendump_file(f / "sendump").header))},
        "sendump",
        "weights [2, 128, 5126] do not match 3 streams",
    ),
    "variances vs means (densities)": (
        lambda f: {"variances": _gaussians(f, "variances", np.s_[:, :, :64])},
        "variances",
        "shape (42, 3, 64, 13) != means (42, 3, 128, 13)",
    ),
    "variances vs means (dims)": (
        lambda f: {"variances": _gaussians(f, "variances", np.s_[..., :12])},
        "variances",
        "shape (42, 3, 128, 12) != means (42, 3, 128, 13)",
    ),
    "codebooks vs phones": (
        lambda f: {n: _gaussians(f, n, np.s_[:41]) for n in ("means", "variances")},
        "means",
        "41 codebooks for 42 base phones",
    ),
    "transition matrices vs phones": (
        lambda f: {"transition_matrices": _tmat(f, _tmat(f).values[:40])},
        "transition_matrices",
        "40 matrices, but",
    ),
    "transition matrix states vs mdef": (
        lambda f: {"transition_matrices": _tmat(f, np.full((42, 4, 5), 0.2, np.float32))},
        "transition_matrices",
        "4 states, mdef has 3",
    ),
    "stream dims vs feat.params": (
        lambda f: {
            "means": _gaussians(f, "means", np.s_[:, :2]),
            "variances": _gaussians(f, "variances", np.s_[:, :2]),
            "sendump": _sendump(f, np.s_[:2], _two_streams(read_sendump_file(f / "sendump").header)),
        },
        "feat.params",
        "does not match 2 streams of 13 dims",
    ),
}
WRITERS = {
    S3Gaussians: write_s3_gaussians,
    Sendump: write_sendump,
    S3TransitionMatrices: write_transition_matrices,
}


@pytest.mark.parametrize("case", list(MISMATCHES))
def test_files_that_disagree_in_size_give_one_line_errors(folder, tmp_path, case: str) -> None:
    """Each file is valid on its own (the writer made it); only the model's cross-checks catch it."""
    make, culprit, message = MISMATCHES[case]
    bad = _model_copy(folder, tmp_path)
    for name, content in make(folder).items():
        WRITERS[type(content)](bad / name, content)
        assert_same_content(FILES[name][0](bad / name), content)  # a well-formed file by itself
    with pytest.raises(ModelError) as info:
        read_sphinx_model(bad)
    text = str(info.value)
    assert text.startswith(f"{bad / culprit}: ") and message in text and "\n" not in text, text
