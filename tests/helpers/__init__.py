"""Shared test helpers: reference implementations (brute-force Viterbi, Kaldi and OpenFst wrappers,
ARPA scoring, LET/OTF references), toy graph inputs, synthetic inputs and the CLI runner. Test
modules import from here, never from each other; `tests/` is on sys.path (pytest inserts the
folder of the root conftest.py)."""
