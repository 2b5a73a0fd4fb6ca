"""CMU Sphinx acoustic-model files byte for byte: readers that keep all a file holds (header lines,
free-form format descriptions, byte order) and writers that give the same bytes back.

Layouts, as pocketsphinx 5 reads them and SphinxTrain writes them:

- s3 binary files (``means``, ``variances``, ``transition_matrices``): ``s3\\n``, ``key value``
  lines, spaces, ``endhdr\\n`` (SphinxTrain pads with spaces so that ``endhdr\\n`` ends on a multiple
  of 8 bytes), the uint32 byte-order magic ``0x11223344``, int32 dimensions, an int32 value count,
  float32 values and, when the header has ``chksum0``, a uint32 checksum of every 32-bit word after
  the magic (:func:`s3_checksum`). Gaussians: ``n_mgau n_feat n_density veclen[n_feat]``;
  transition matrices: ``n_tmat n_state n_state+1``.
- ``sendump`` (8-bit mixture weights): int32-length-prefixed NUL-terminated header strings (a
  format description, then ``key value`` strings), an int32 0, int32 rows (densities) and columns
  (senones), uint8 weights ``[streams, densities, senones]``. A string of 1-3 ``!`` without NUL
  before the 0 pads so that the weights start on a multiple of 4 bytes (pocketsphinx memory-maps
  them); it is layout, not content, and the writer adds it where needed.
- ``mdef`` (binary, "BMDF" version 1): int32 magic, version, description length; the
  NUL-terminated description padded with NULs to 4 bytes; ten int32 counts (CI phones, phones,
  emitting states, CI senones, senones, transition matrices, senone sequences, context length,
  tree nodes, silence phone); NUL-terminated CI phone names padded to 4 bytes; the context tree
  (int16 ctx, int16 n_down, int32 first child or phone id per node); per phone int32 senone
  sequence, int32 transition matrix and 4 attribute bytes (CI: filler flag; triphone: word
  position, base, left, right phone); int32 senone-sequence length and uint16 senone ids. The
  tree is a function of the triphone table (:func:`mdef_context_tree`): the reader checks that it
  is, and the writer rebuilds it.
- ``feat.params`` (``-name value`` per line) and ``noisedict`` (``word PHONE ...`` per line), text.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from asrdecode.errors import ModelError

__all__ = [
    "S3_MAGIC",
    "BMDF_MAGIC",
    "S3Gaussians",
    "S3TransitionMatrices",
    "Sendump",
    "BinaryMdef",
    "s3_checksum",
    "mdef_context_tree",
    "read_s3_gaussian_file",
    "read_s3_gaussians",
    "read_transition_matrix_file",
    "read_sendump_file",
    "read_sendump",
    "read_binary_mdef",
    "read_feat_params",
    "read_noisedict",
    "write_s3_gaussians",
    "write_transition_matrices",
    "write_sendump",
    "write_binary_mdef",
    "write_feat_params",
    "write_noisedict",
]

S3_MAGIC = 0x11223344
BMDF_MAGIC = 0x46444D42  # "BMDF" read as a little-endian int32
S3_HEADER_ALIGN = 8  # SphinxTrain's s3 header padding (endhdr ends on a multiple of 8 bytes)
SENDUMP_ALIGN = 4  # sendump weights start on a multiple of 4 bytes
SENDUMP_PAD = b"!"
WORD_POSITIONS = 4  # mdef word positions: internal, begin, end, single
TREE_NODE = np.dtype([("ctx", "<i2"), ("n_down", "<i2"), ("down", "<i4")])
PHONE_ENTRY = np.dtype([("ssid", "<i4"), ("tmat", "<i4"), ("attr", "u1", (4,))])


def _read_bytes(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ModelError(f"{path}: {what} file not found") from None
    except OSError as err:
        raise ModelError(f"{path}: cannot read {what} ({err.strerror})") from None


def _write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    try:
        path.write_bytes(data)
    except OSError as err:
        raise ModelError(f"{path}: cannot write ({err.strerror})") from None
    return path


class _Reader:
    """Bounds-checked little/big-endian reader over bytes; errors name the file."""

    def __init__(self, data: bytes, path: Path, what: str, pos: int = 0, endian: str = "<") -> None:
        self.data, self.path, self.what, self.pos, self.endian = data, path, what, pos, endian

    def fail(self, msg: str) -> ModelError:
        return ModelError(f"{self.path}: malformed {self.what}: {msg}")

    def need(self, n: int, label: str) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise self.fail(
                f"truncated while reading {label} (need {n} bytes at offset {self.pos}, "
                f"file has {len(self.data)})"
            )

    def ints(self, n: int, label: str, unsigned: bool = False) -> tuple[int, ...]:
        self.need(4 * n, label)
        out = struct.unpack_from(f"{self.endian}{n}{'I' if unsigned else 'i'}", self.data, self.pos)
        self.pos += 4 * n
        return out

    def array(self, dtype: str | np.dtype, count: int, label: str) -> np.ndarray:
        dt = np.dtype(dtype)
        if count < 0:
            raise self.fail(f"negative {label} count {count}")
        self.need(dt.itemsize * count, label)
        if dt.fields is None and dt.itemsize > 1:
            dt = dt.newbyteorder(self.endian)
        out = np.frombuffer(self.data, dtype=dt, count=count, offset=self.pos)
        self.pos += dt.itemsize * count
        return out

    def cstring(self, label: str) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise self.fail(f"truncated while reading {label} (no NUL terminator)")
        text = self.data[self.pos : end].decode("latin-1")
        self.pos = end + 1
        return text

    def end(self, allowed_tail: int = 0) -> None:
        tail = len(self.data) - self.pos
        if tail != allowed_tail:
            raise self.fail(f"{tail - allowed_tail} unexpected trailing bytes")


# ----------------------------------------------------------------------------- s3 binary files
def s3_checksum(words: np.ndarray) -> int:
    """SphinxTrain's s3 checksum of 32-bit words (their values, not their bytes in the file):
    ``s = rotl(s, 20) + word`` modulo 2^32, from 0."""
    s = 0
    for w in np.asarray(words, dtype=np.uint32).tolist():
        s = ((((s << 20) | (s >> 12)) & 0xFFFFFFFF) + w) & 0xFFFFFFFF
    return s


def _s3_header(data: bytes, path: Path, what: str) -> tuple[dict[str, str], _Reader]:
    """s3 binary header: ``s3\\n``, ``key value`` lines, ``endhdr\\n``, uint32 byte-order magic."""
    if not data.startswith(b"s3\n"):
        raise ModelError(f"{path}: malformed {what}: not an s3 binary file (no 's3' header)")
    end = data.find(b"endhdr\n")
    if end < 0:
        raise ModelError(f"{path}: malformed {what}: header has no 'endhdr'")
    header: dict[str, str] = {}
    for line in data[3:end].decode("latin-1").splitlines():
        parts = line.split(None, 1)
        if parts:
            header[parts[0]] = parts[1].strip() if len(parts) > 1 else ""
    reader = _Reader(data, path, what, end + len("endhdr\n"))
    (magic,) = reader.ints(1, "byte-order magic", unsigned=True)
    if magic != S3_MAGIC:
        if struct.unpack("<I", struct.pack(">I", magic))[0] != S3_MAGIC:
            raise reader.fail(f"bad byte-order magic {magic:#x}")
        reader.endian = ">"
    return header, reader


def _s3_bytes(header: dict[str, str], dims: list[int], values: np.ndarray, byteorder: str) -> bytes:
    """Header (padded as SphinxTrain pads it), magic, int32 ``dims`` and value count, float32
    ``values`` and, with ``chksum0`` in the header, the checksum."""
    text = "s3\n" + "".join(f"{k} {v}\n" if v else f"{k}\n" for k, v in header.items())
    head = text.encode("latin-1")
    pad = -(len(head) + len("endhdr\n")) % S3_HEADER_ALIGN
    flat = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    ints = np.array([*dims, flat.size], dtype=np.int64).astype(np.uint32)
    parts = [head, b" " * pad, b"endhdr\n", struct.pack(f"{byteorder}I", S3_MAGIC)]
    parts += [ints.astype(f"{byteorder}u4").tobytes(), flat.astype(f"{byteorder}f4").tobytes()]
    if "chksum0" in header:
        checksum = s3_checksum(np.concatenate([ints, flat.view(np.uint32)]))
        parts.append(struct.pack(f"{byteorder}I", checksum))
    return b"".join(parts)


@dataclass
class S3Gaussians:
    """An s3 ``means`` or ``variances`` file: header lines, values [n_mgau, n_feat, n_density,
    veclen] float32 (equal stream lengths), byte order (``<`` or ``>``)."""

    header: dict[str, str]
    values: np.ndarray
    byteorder: str = "<"


def read_s3_gaussian_file(path: str | Path, what: str = "Gaussian parameters") -> S3Gaussians:
    path = Path(path)
    header, r = _s3_header(_read_bytes(path, what), path, what)
    n_mgau, n_feat, n_density = r.ints(3, "dimensions")
    if not (0 < n_mgau <= 1 << 16 and 0 < n_feat <= 64 and 0 < n_density <= 1 << 16):
        raise r.fail(f"implausible dimensions {n_mgau} x {n_feat} x {n_density}")
    veclen = r.ints(n_feat, "stream lengths")
    if any(v <= 0 or v > 4096 for v in veclen):
        raise r.fail(f"implausible stream lengths {list(veclen)}")
    if len(set(veclen)) != 1:
        raise r.fail(f"unequal stream lengths {list(veclen)} are not supported")
    (count,) = r.ints(1, "value count")
    expect = n_mgau * n_density * sum(veclen)
    if count != expect:
        raise r.fail(f"value count {count} != {n_mgau} x {n_density} x {sum(veclen)}")
    values = r.array("f4", count, "values")
    r.end(4 if "chksum0" in header else 0)
    arr = values.astype(np.float32).reshape(n_mgau, n_feat, n_density, veclen[0])
    if not np.isfinite(arr).all():
        raise r.fail("non-finite values")
    return S3Gaussians(header, arr, r.endian)


def read_s3_gaussians(path: str | Path, what: str = "Gaussian parameters") -> np.ndarray:
    """s3 ``means``/``variances`` -> float32 [n_mgau, n_feat, n_density, veclen] (equal stream
    lengths required)."""
    return read_s3_gaussian_file(path, what).values


def write_s3_gaussians(path: str | Path, gaussians: S3Gaussians) -> Path:
    n_mgau, n_feat, n_density, veclen = gaussians.values.shape
    dims = [n_mgau, n_feat, n_density] + [veclen] * n_feat
    return _write_bytes(path, _s3_bytes(gaussians.header, dims, gaussians.values, gaussians.byteorder))


@dataclass
class S3TransitionMatrices:
    """An s3 ``transition_matrices`` file as stored (not normalised): values [n_tmat, n_state,
    n_state + 1] float32 (the last column is the non-emitting exit state)."""

    header: dict[str, str]
    values: np.ndarray
    byteorder: str = "<"


def read_transition_matrix_file(path: str | Path) -> S3TransitionMatrices:
    path = Path(path)
    what = "transition_matrices"
    header, r = _s3_header(_read_bytes(path, what), path, what)
    n_tmat, n_src, n_dst = r.ints(3, "dimensions")
    if not (0 < n_tmat <= 1 << 16 and 0 < n_src <= 64 and n_dst == n_src + 1):
        raise r.fail(f"unexpected transition-matrix shape {n_tmat} x {n_src} x {n_dst}")
    (count,) = r.ints(1, "value count")
    if count != n_tmat * n_src * n_dst:
        raise r.fail(f"value count {count} != {n_tmat} x {n_src} x {n_dst}")
    values = r.array("f4", count, "values")
    r.end(4 if "chksum0" in header else 0)
    arr = values.astype(np.float32).reshape(n_tmat, n_src, n_dst)
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise r.fail("negative or non-finite transition probabilities")
    return S3TransitionMatrices(header, arr, r.endian)


def write_transition_matrices(path: str | Path, tmat: S3TransitionMatrices) -> Path:
    return _write_bytes(path, _s3_bytes(tmat.header, list(tmat.values.shape), tmat.values, tmat.byteorder))


# ----------------------------------------------------------------------------- sendump
@dataclass
class Sendump:
    """A pocketsphinx ``sendump``: header strings (format description and ``key value`` lines,
    without their NULs and without the alignment padding), uint8 weights [n_feat, n_density,
    n_sen] (-log weights in 8-bit steps), byte order of the int32 fields."""

    header: list[str]
    weights: np.ndarray
    byteorder: str = "<"


_SENDUMP_INT_KEYS = ("feature_count", "mixture_count", "model_count", "cluster_count", "cluster_bits")


def read_sendump_file(path: str | Path) -> Sendump:
    path = Path(path)
    data = _read_bytes(path, "mixture weights (sendump)")
    r = _Reader(data, path, "sendump")
    (n,) = r.ints(1, "title length")
    if not 1 <= n <= 999:
        swapped = struct.unpack(">i", struct.pack("<i", n))[0]
        if not 1 <= swapped <= 999:
            raise r.fail(f"title length {n} out of range")
        r.endian, n = ">", swapped
    strings: list[bytes] = []
    while True:
        if strings:
            (n,) = r.ints(1, "header string length")
            if n == 0:
                break
            if not 0 < n <= 100_000:
                raise r.fail(f"header string length {n} out of range")
        r.need(n, "header string")
        strings.append(data[r.pos : r.pos + n])
        r.pos += n
    if strings and len(strings) > 1 and strings[-1] == SENDUMP_PAD * len(strings[-1]):
        strings.pop()  # alignment padding (no NUL): layout, not content
    header = [s.rstrip(b"\0").decode("latin-1") for s in strings]
    opts: dict[str, int] = {}
    for text in header[1:]:
        key, _, value = text.partition(" ")
        if key in _SENDUMP_INT_KEYS:
            try:
                opts[key] = int(value.split()[0])
            except (ValueError, IndexError):
                raise r.fail(f"bad header line {text!r}") from None
    if opts.get("cluster_count", 0) not in (0,) or opts.get("cluster_bits", 8) != 8:
        raise r.fail("clustered (4-bit) mixture weights are not supported")
    n_feat = opts.get("feature_count", 1)
    rows, cols = r.ints(2, "#codewords/#senones")
    if not (0 < n_feat <= 64 and 0 < rows <= 1 << 16 and 0 < cols <= 1 << 24):
        raise r.fail(f"implausible dimensions {n_feat} x {rows} x {cols}")
    if "mixture_count" in opts and opts["mixture_count"] != rows:
        raise r.fail(f"mixture_count {opts['mixture_count']} != {rows} rows")
    if "model_count" in opts and opts["model_count"] != cols:
        raise r.fail(f"model_count {opts['model_count']} != {cols} columns")
    values = r.array("u1", n_feat * rows * cols, "weights")
    r.end()
    return Sendump(header, values.reshape(n_feat, rows, cols).copy(), r.endian)


def read_sendump(path: str | Path) -> np.ndarray:
    """pocketsphinx ``sendump`` -> uint8 [n_feat, n_density, n_sen] quantised -log weights."""
    return read_sendump_file(path).weights


def write_sendump(path: str | Path, sendump: Sendump) -> Path:
    """Header strings NUL-terminated, the ``!`` padding where the weights would not start on a
    multiple of 4 bytes, the terminating 0, rows, columns and the weights. The header's
    ``feature_count`` must match the weights' streams (it is what the reader goes by)."""
    n_feat, rows, cols = sendump.weights.shape
    keys = {k: v for k, _, v in (s.partition(" ") for s in sendump.header[1:])}
    if keys.get("feature_count", "1").split()[:1] != [str(n_feat)]:
        raise ModelError(
            f"{path}: sendump header has feature_count {keys.get('feature_count', '1')!r} for "
            f"weights of {n_feat} streams"
        )
    i32 = f"{sendump.byteorder}i"
    parts = []
    for text in sendump.header:
        raw = text.encode("latin-1") + b"\0"
        parts += [struct.pack(i32, len(raw)), raw]
    size = sum(len(p) for p in parts)
    pad = -(size + 4 + 4 + 8) % SENDUMP_ALIGN  # (pad length), terminator, rows + cols
    if pad:
        parts += [struct.pack(i32, pad), SENDUMP_PAD * pad]
    parts += [struct.pack(i32, 0), struct.pack(f"{sendump.byteorder}2i", rows, cols)]
    parts.append(np.ascontiguousarray(sendump.weights, dtype=np.uint8).tobytes())
    return _write_bytes(path, b"".join(parts))


# ----------------------------------------------------------------------------- binary mdef
@dataclass
class BinaryMdef:
    """A binary model definition (everything but the context tree, which follows from ``attr``)."""

    description: str
    ciphones: list[str]
    sil: int
    n_emit_state: int
    n_ci_sen: int
    n_sen: int
    n_tmat: int
    ssid: np.ndarray  # int32 [n_phone] senone sequence of each phone
    tmat: np.ndarray  # int32 [n_phone] transition matrix of each phone
    attr: np.ndarray  # uint8 [n_phone, 4]: CI (filler, 0, 0, 0); triphone (wpos, base, left, right)
    sseq: np.ndarray  # uint16 [n_sseq, n_emit_state] senone ids
    n_ctx: int = 3
    version: int = 1

    @property
    def n_phone(self) -> int:
        return len(self.ssid)


def mdef_context_tree(n_ci: int, attr: np.ndarray) -> np.ndarray:
    """The mdef context tree of the triphones ``attr[n_ci:]`` (rows wpos, base, left, right), in
    the order pocketsphinx's binary mdef stores it: breadth first; the 4 word positions, each with
    all ``n_ci`` base phones in ascending order (a phone without triphones there has no children,
    first child -1), each with its left contexts, each with its right contexts, both in descending
    order (as the text-to-binary conversion prepends them to lists); the leaves hold phone ids."""
    cd = attr[n_ci:].astype(np.int64)
    pid = np.arange(n_ci, n_ci + len(cd), dtype=np.int64)
    order = np.lexsort((-cd[:, 3], -cd[:, 2], cd[:, 1], cd[:, 0]))
    cd, pid = cd[order], pid[order]
    n_top = WORD_POSITIONS * n_ci
    key = (cd[:, 0] * n_ci + cd[:, 1]) * n_ci + cd[:, 2]  # (wpos, base, left)
    left_starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(cd) else np.zeros(0, np.int64)
    left_sizes = np.diff(np.r_[left_starts, len(cd)])
    base_of_left = key[left_starts] // n_ci  # (wpos, base) index of each left-context node
    n_left = np.bincount(base_of_left, minlength=n_top)
    first_left = np.searchsorted(base_of_left, np.arange(n_top))
    base1, base2 = WORD_POSITIONS, WORD_POSITIONS + n_top
    base3 = base2 + len(left_starts)
    tree = np.zeros(base3 + len(cd), dtype=TREE_NODE)
    tree["ctx"][:base1] = np.arange(WORD_POSITIONS)
    tree["n_down"][:base1] = n_ci
    tree["down"][:base1] = base1 + n_ci * np.arange(WORD_POSITIONS)
    tree["ctx"][base1:base2] = np.tile(np.arange(n_ci), WORD_POSITIONS)
    tree["n_down"][base1:base2] = n_left
    tree["down"][base1:base2] = np.where(n_left > 0, base2 + first_left, -1)
    tree["ctx"][base2:base3] = cd[left_starts, 2]
    tree["n_down"][base2:base3] = left_sizes
    tree["down"][base2:base3] = base3 + left_starts
    tree["ctx"][base3:] = cd[:, 3]
    tree["down"][base3:] = pid
    return tree


def read_binary_mdef(path: str | Path) -> BinaryMdef:
    """Binary mdef (little-endian BMDF, version 1, homogeneous HMMs); checks that the context
    tree is the one the triphone table implies."""
    path = Path(path)
    data = _read_bytes(path, "model definition")
    r = _Reader(data, path, "mdef")
    magic, version, desc_len = r.ints(3, "header")
    if magic != BMDF_MAGIC:
        raise r.fail("not a little-endian binary mdef (text mdef is not supported)")
    if version > 1:
        raise r.fail(f"format version {version} is not supported")
    r.need(desc_len, "format description")
    description = data[r.pos : r.pos + desc_len].rstrip(b"\0").decode("latin-1")
    r.pos += desc_len
    (n_ci, n_phone, n_emit, n_ci_sen, n_sen, n_tmat, n_sseq, n_ctx, n_tree, sil) = r.ints(10, "counts")
    if not (0 < n_ci <= 255 and n_ci <= n_phone and min(n_tree, n_sseq) >= 0 and n_sen > 0):
        raise r.fail(f"implausible counts: {n_ci} CI phones, {n_phone} phones, {n_sen} senones")
    if n_emit <= 0:
        raise r.fail("heterogeneous HMM topologies are not supported")
    start = r.pos
    ciphones = [r.cstring("CI phone names") for _ in range(n_ci)]
    padded = start + ((r.pos - start + 3) & ~3)
    r.need(padded - r.pos, "CI phone name padding")
    r.pos = padded
    tree = r.array(TREE_NODE, n_tree, "context tree")
    phones = r.array(PHONE_ENTRY, n_phone, "phone table")
    (sseq_size,) = r.ints(1, "senone sequence length")
    if sseq_size != n_sseq * n_emit:
        raise r.fail(f"senone sequence length {sseq_size} != {n_sseq} x {n_emit}")
    sseq = r.array("u2", sseq_size, "senone sequences").reshape(n_sseq, n_emit)
    r.end()
    attr = phones["attr"].copy()
    if n_phone > n_ci and (attr[n_ci:, 0] >= WORD_POSITIONS).any() | (attr[n_ci:, 1:] >= n_ci).any():
        raise r.fail("triphone with a word position or phone id out of range")
    if not np.array_equal(tree, mdef_context_tree(n_ci, attr)):
        raise r.fail("context tree disagrees with the triphone table")
    return BinaryMdef(
        description=description,
        ciphones=ciphones,
        sil=sil,
        n_emit_state=n_emit,
        n_ci_sen=n_ci_sen,
        n_sen=n_sen,
        n_tmat=n_tmat,
        ssid=phones["ssid"].copy(),
        tmat=phones["tmat"].copy(),
        attr=attr,
        sseq=sseq.astype(np.uint16),
        n_ctx=n_ctx,
        version=version,
    )


def write_binary_mdef(path: str | Path, mdef: BinaryMdef) -> Path:
    n_ci = len(mdef.ciphones)
    desc = mdef.description.encode("latin-1") + b"\0"
    desc += b"\0" * (-len(desc) % 4)
    names = b"".join(n.encode("latin-1") + b"\0" for n in mdef.ciphones)
    names += b"\0" * (-len(names) % 4)
    tree = mdef_context_tree(n_ci, mdef.attr)
    phones = np.zeros(mdef.n_phone, dtype=PHONE_ENTRY)
    phones["ssid"], phones["tmat"], phones["attr"] = mdef.ssid, mdef.tmat, mdef.attr
    sseq = np.ascontiguousarray(mdef.sseq, dtype="<u2")
    counts = [n_ci, mdef.n_phone, mdef.n_emit_state, mdef.n_ci_sen, mdef.n_sen, mdef.n_tmat]
    counts += [len(sseq), mdef.n_ctx, len(tree), mdef.sil]
    parts = [struct.pack("<3i", BMDF_MAGIC, mdef.version, len(desc)), desc, struct.pack("<10i", *counts)]
    parts += [names, tree.tobytes(), phones.tobytes(), struct.pack("<i", sseq.size), sseq.tobytes()]
    return _write_bytes(path, b"".join(parts))


# ----------------------------------------------------------------------------- text files
def read_feat_params(path: str | Path) -> dict[str, str]:
    """``-name value`` pairs (any whitespace layout) -> {name: value}."""
    path = Path(path)
    text = _read_bytes(path, "feature parameters").decode("utf-8", errors="replace")
    tokens = text.split()
    if len(tokens) % 2 or any(not t.startswith("-") for t in tokens[0::2]):
        raise ModelError(f"{path}: malformed feat.params: expected '-name value' pairs")
    return {k[1:]: v for k, v in zip(tokens[0::2], tokens[1::2], strict=True)}


def write_feat_params(path: str | Path, params: dict[str, str]) -> Path:
    """One ``-name value`` line per parameter, in order."""
    return _write_bytes(path, "".join(f"-{k} {v}\n" for k, v in params.items()).encode("utf-8"))


def read_noisedict(path: str | Path) -> dict[str, list[str]]:
    """Filler dictionary ``word PHONE ...`` -> {word: phones}."""
    path = Path(path)
    out: dict[str, list[str]] = {}
    text = _read_bytes(path, "noise dictionary").decode("utf-8", errors="replace")
    for lineno, line in enumerate(text.splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) < 2:
            raise ModelError(f"{path}:{lineno}: malformed noisedict: word '{fields[0]}' has no phones")
        out[fields[0]] = fields[1:]
    return out


def write_noisedict(path: str | Path, words: dict[str, list[str]]) -> Path:
    """One ``word PHONE ...`` line per filler word, in order."""
    return _write_bytes(path, "".join(f"{w} {' '.join(p)}\n" for w, p in words.items()).encode("utf-8"))


# ---------------------------------------------------------------------------------------------
# the model definition and transition matrices as the HCLG recipe and the scorer use them

WPOS = "ibes"  # pocketsphinx mdef.h: WORD_POSN_INTERNAL=0, BEGIN=1, END=2, SINGLE=3
_BMDF = 0x46444D42
_S3_MAGIC = 0x11223344


@dataclass
class SphinxMdef:
    """The parts of a binary model definition the graph needs."""

    ciphones: list[str]
    sil: int
    filler: list[bool]
    n_emit_state: int
    n_ci_sen: int
    n_sen: int
    ssid: np.ndarray  # [n_phone]
    tmat: np.ndarray  # [n_phone]
    sseq: np.ndarray  # [n_sseq, n_emit_state] senone ids
    tree: dict[tuple[int, int, int, int], int] = field(default_factory=dict)  # (wpos, ci, lc, rc) -> pid

    @property
    def n_phone(self) -> int:
        return len(self.ssid)

    def phone_id(self, ci: int, lc: int, rc: int, wpos: int) -> int:
        """Exact triphone id or -1; filler contexts count as silence."""
        if self.sil >= 0:
            lc = self.sil if self.filler[lc] else lc
            rc = self.sil if self.filler[rc] else rc
        return self.tree.get((wpos, ci, lc, rc), -1)

    def phone_id_nearest(self, b: int, l: int, r: int, pos: int) -> int:
        """pocketsphinx's back-off order (bin_mdef.c, bin_mdef_phone_id_nearest)."""
        p = self.phone_id(b, l, r, pos)
        if p >= 0:
            return p
        for other in range(len(WPOS)):
            if other != pos and (p := self.phone_id(b, l, r, other)) >= 0:
                return p
        if self.sil >= 0:
            newl = self.sil if self.filler[l] or pos in (1, 3) else l
            newr = self.sil if self.filler[r] or pos in (2, 3) else r
            if (newl, newr) != (l, r):
                for wp in [pos] + [o for o in range(len(WPOS)) if o != pos]:
                    if (p := self.phone_id(b, newl, newr, wp)) >= 0:
                        return p
        return b


def read_mdef(path: str | Path) -> SphinxMdef:
    """Binary mdef (BMDF, version 1) as written by sphinx3/pocketsphinx (little-endian only)."""
    path = Path(path)
    try:
        return _read_mdef(path)
    except (struct.error, ValueError, IndexError, UnicodeDecodeError) as err:
        raise ModelError(f"{path}: truncated or malformed mdef ({err})") from None


def _read_mdef(path: Path) -> SphinxMdef:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ModelError(f"{path}: cannot read mdef ({err.strerror})") from None
    if len(data) < 12 or struct.unpack_from("<i", data, 0)[0] != _BMDF:
        raise ModelError(f"{path}: not a little-endian binary mdef (text mdef is not supported)")
    version, hdr_len = struct.unpack_from("<ii", data, 4)
    if version > 1:
        raise ModelError(f"{path}: mdef format version {version} is not supported")
    pos = 12 + hdr_len
    (n_ci, n_phone, n_emit, n_ci_sen, n_sen, _n_tmat, n_sseq, _n_ctx, n_tree, sil) = struct.unpack_from(
        "<10i", data, pos
    )
    pos += 40
    base = pos
    names = []
    for _ in range(n_ci):
        end = data.index(b"\0", pos)
        names.append(data[pos:end].decode("ascii"))
        pos = end + 1
    pos = base + ((pos - base + 3) & ~3)
    tree = np.frombuffer(
        data, dtype=np.dtype([("ctx", "<i2"), ("n_down", "<i2"), ("down", "<i4")]), count=n_tree, offset=pos
    )
    pos += 8 * n_tree
    phones = np.frombuffer(
        data,
        dtype=np.dtype([("ssid", "<i4"), ("tmat", "<i4"), ("attr", "u1", (4,))]),
        count=n_phone,
        offset=pos,
    )
    pos += 12 * n_phone
    (sseq_size,) = struct.unpack_from("<i", data, pos)
    pos += 4
    if n_emit <= 0:
        raise ModelError(f"{path}: heterogeneous HMM topologies are not supported")
    sseq = np.frombuffer(data, dtype="<u2", count=sseq_size, offset=pos).reshape(n_sseq, n_emit)
    lookup: dict[tuple[int, int, int, int], int] = {}

    def walk(start: int, count: int, prefix: tuple[int, ...]) -> None:
        for i in range(start, start + count):
            ctx, n_down, down = int(tree["ctx"][i]), int(tree["n_down"][i]), int(tree["down"][i])
            key = prefix + (ctx,)
            if n_down == 0:
                if len(key) == 4:
                    lookup[key] = down  # type: ignore[index]
            else:
                walk(down, n_down, key)

    walk(0, len(WPOS), ())
    return SphinxMdef(
        ciphones=names,
        sil=sil,
        filler=[bool(phones["attr"][i][0]) for i in range(n_ci)],
        n_emit_state=n_emit,
        n_ci_sen=n_ci_sen,
        n_sen=n_sen,
        ssid=phones["ssid"].astype(np.int64),
        tmat=phones["tmat"].astype(np.int64),
        sseq=sseq.astype(np.int64),
        tree=lookup,
    )


def read_tmat(path: str | Path, floor: float = 1e-4) -> np.ndarray:
    """s3 binary transition matrices [n_tmat, n_state, n_state+1], normalised and floored as
    pocketsphinx does (non-zero entries floored at `floor`, rows renormalised)."""
    path = Path(path)
    try:
        return _read_tmat(path, floor)
    except (struct.error, ValueError) as err:
        raise ModelError(f"{path}: truncated or malformed transition matrices ({err})") from None


def _read_tmat(path: Path, floor: float) -> np.ndarray:
    data = path.read_bytes()
    end = data.find(b"endhdr\n")
    if not data.startswith(b"s3\n") or end < 0:
        raise ModelError(f"{path}: not an s3 binary transition-matrix file")
    pos = end + len("endhdr\n")
    if struct.unpack_from("<I", data, pos)[0] != _S3_MAGIC:
        raise ModelError(f"{path}: big-endian s3 files are not supported")
    n_tmat, n_src, n_dst, count = struct.unpack_from("<4i", data, pos + 4)
    if n_dst != n_src + 1 or count != n_tmat * n_src * n_dst:
        raise ModelError(f"{path}: unexpected transition-matrix shape {n_tmat}x{n_src}x{n_dst}")
    tp = (
        np.frombuffer(data, dtype="<f4", count=count, offset=pos + 20)
        .reshape(n_tmat, n_src, n_dst)
        .astype(np.float64)
    )
    tp = tp / np.maximum(tp.sum(-1, keepdims=True), 1e-30)
    tp = np.where((tp > 0) & (tp < floor), floor, tp)
    return tp / tp.sum(-1, keepdims=True)
