"""BatchedNgramLM against an independent brute-force ARPA scorer (dict lookups with backoff, written here
from the ARPA definition) and against KenLM (flashlight-text's binding), on NeMo's token-level ARPA
(NGPU-LM encoding) and on the demo's word-level ARPA; hand-made ARPAs for <unk>, missing backoff
n-grams and vocabulary restriction; bad files; batched queries without host reads."""

from __future__ import annotations

import gzip
import math
import random
from pathlib import Path

import pytest
import torch
from helpers.host_reads import HostReads

from asrdecode.errors import GraphError
from asrdecode.lm.ngram_tensor import BatchedNgramLM

ROOT = Path(__file__).resolve().parents[2]
TOKEN_ARPA = ROOT / "tests" / "fixtures" / "nemo" / "lm_tokens.arpa"
WORD_ARPA = ROOT / "data" / "demo" / "graph" / "lm.arpa"
NGPU_VOCAB = 128  # the fixture models' BPE vocabulary (blank = 128)
LN10 = math.log(10.0)


class BruteForceArpa:
    """ARPA n-gram scoring by the textbook recursion: p(w | h) = p(h w) if the n-gram exists, else
    bow(h) * p(w | h minus its first word); bow of a history that is no n-gram is 1; a word without a
    unigram gets p(<unk>) (divided by the number of such vocabulary words when ``unk_share``)."""

    def __init__(self, text: str, vocab: list[str] | None = None, unk_share: bool = False):
        self.prob: dict[tuple[str, ...], float] = {}
        self.bow: dict[tuple[str, ...], float] = {}
        order = 0
        for line in text.split("\n"):  # not splitlines(): NGPU tokens include \x85 and \x1c..\x1e
            line = line.strip("\r")
            if line.startswith("\\") and line.endswith("-grams:"):
                order = int(line[1:-7])
                continue
            if not order or not line or line.startswith("\\"):
                continue
            fields = line.split("\t")
            if len(fields) == 1:  # space-separated file
                fields = line.split(" ")
                fields = [fields[0], " ".join(fields[1 : order + 1]), *fields[order + 1 :]]
            words = tuple(fields[1].split(" "))
            assert len(words) == order
            self.prob[words] = float(fields[0])
            if len(fields) > 2:
                self.bow[words] = float(fields[2])
        self.order = max(len(k) for k in self.prob)
        unk = self.prob.get(("<unk>",), -math.inf)
        missing = [w for w in vocab if (w,) not in self.prob] if vocab is not None else []
        self.unk = unk - (math.log10(len(missing)) if unk_share and len(missing) > 1 else 0.0)

    def logp10(self, history: tuple[str, ...], word: str) -> float:
        history = history[len(history) - (self.order - 1) :] if self.order > 1 else ()
        backoff = 0.0
        for i in range(len(history) + 1):
            h = history[i:]
            if h + (word,) in self.prob:
                return backoff + self.prob[h + (word,)]
            backoff += self.bow.get(h, 0.0)
        return backoff + self.unk

    def logp(self, history: tuple[str, ...], word: str) -> float:
        return self.logp10(history, word) * LN10


def ngpu_words() -> list[str]:
    return [chr(i + 100) for i in range(NGPU_VOCAB)]


def random_histories(brute: BruteForceArpa, vocab: list[str], count: int, length: int, seed: int):
    """Histories that reach deep states: random walks that mostly follow n-grams of the file (the
    continuation of the current context), sometimes a uniformly random token."""
    rng = random.Random(seed)
    follow: dict[tuple[str, ...], list[str]] = {}
    for gram in brute.prob:
        follow.setdefault(gram[:-1], []).append(gram[-1])
    vocab_set = set(vocab)
    out = []
    for _ in range(count):
        hist = ["<s>"]
        for _ in range(length):
            options = []
            for k in range(brute.order - 1, 0, -1):
                options = [w for w in follow.get(tuple(hist[-k:]), []) if w in vocab_set]
                if options:
                    break
            hist.append(rng.choice(options) if options and rng.random() < 0.8 else rng.choice(vocab))
        out.append(hist[1:])
    return out


def check_against_brute_force(lm: BatchedNgramLM, brute: BruteForceArpa, vocab: list[str], histories):
    """Walk all histories at once through advance/next_states; at every step the full score row of
    every history equals the brute-force p(token | history) for every token, and final_scores equals
    p(</s> | history)."""
    ids = {w: i for i, w in enumerate(vocab)}
    n, length = len(histories), len(histories[0])
    states = lm.init_states(n, "cpu")
    checked = 0
    for step in range(length + 1):
        scores, nexts = lm.advance(states)
        assert scores.shape == (n, lm.vocab_size) and nexts.shape == (n, lm.vocab_size)
        assert scores.dtype == torch.float32 and nexts.dtype == torch.long
        finals = lm.final_scores(states)
        for b, hist in enumerate(histories):
            context = ("<s>", *hist[:step])
            expected = torch.tensor([brute.logp(context, w) for w in vocab], dtype=torch.float64)
            torch.testing.assert_close(scores[b].double(), expected, rtol=1e-5, atol=2e-5)
            assert finals[b].item() == pytest.approx(brute.logp(context, "</s>"), rel=1e-5, abs=2e-5)
            checked += len(vocab)
        if step < length:
            tokens = torch.tensor([ids[h[step]] for h in histories])
            states = nexts.gather(1, tokens.unsqueeze(1)).squeeze(1)
    return checked


@pytest.fixture(scope="module")
def token_lm() -> BatchedNgramLM:
    return BatchedNgramLM.from_arpa(TOKEN_ARPA, token_ids="ngpu", vocab_size=NGPU_VOCAB)


@pytest.fixture(scope="module")
def token_brute() -> BruteForceArpa:
    return BruteForceArpa(TOKEN_ARPA.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def word_lm() -> BatchedNgramLM:
    return BatchedNgramLM.from_arpa(WORD_ARPA)


@pytest.fixture(scope="module")
def word_brute() -> BruteForceArpa:
    return BruteForceArpa(WORD_ARPA.read_text(encoding="utf-8"))


def test_token_lm_every_token_from_many_states(token_lm, token_brute):
    """NeMo's token ARPA (NGPU-LM encoding, 3-gram): 96 histories x 7 steps x all 128 tokens."""
    vocab = ngpu_words()
    assert token_lm.order == 3 and token_lm.vocab_size == 128
    assert token_lm.describe()["ngrams"] == {1: 131, 2: 3946, 3: 25258}
    histories = random_histories(token_brute, vocab, 96, 6, seed=1)
    states_seen = check_against_brute_force(token_lm, token_brute, vocab, histories)
    assert states_seen == 96 * 7 * 128


def test_word_lm_every_word_from_many_states(word_lm, word_brute):
    """The demo's word trigram (4882 words): 10 histories x 5 steps x every word of the vocabulary."""
    vocab = word_lm.vocab
    assert len(vocab) == word_lm.vocab_size == 4882 and "<s>" not in vocab and "</s>" not in vocab
    histories = random_histories(word_brute, vocab, 10, 4, seed=2)
    check_against_brute_force(word_lm, word_brute, vocab, histories)


def test_word_lm_with_a_vocabulary_list(word_lm, word_brute):
    """wfst-otf use: a given word list (order differs from the file, some words the LM lacks, some LM
    words missing): ids follow the list, LM words outside it are dropped, listed words without a
    unigram get p(<unk>) (-inf here: the file has no <unk>) and reset the history."""
    rng = random.Random(3)
    vocab = rng.sample(word_lm.vocab, 3000) + ["zzunseen", "qqalsounseen"]
    lm = BatchedNgramLM.from_arpa(WORD_ARPA, vocab=vocab)
    assert lm.vocab == vocab and lm.vocab_size == 3002
    assert lm.describe()["dropped_ngrams"] > 0
    histories = random_histories(word_brute, vocab, 8, 4, seed=4)
    histories[0][1] = "zzunseen"
    check_against_brute_force(lm, word_brute, vocab, histories)
    scores, _ = lm.advance(lm.init_states(1))
    assert scores[0, -1].item() == -math.inf and scores[0, -2].item() == -math.inf


def test_sentence_scores_equal_kenlm():
    """KenLM (flashlight-text's binding, a dev dependency; log10) per-token and </s> scores == ours on
    both ARPAs."""
    from flashlight.lib.text.decoder.kenlm import KenLM
    from flashlight.lib.text.dictionary import Dictionary

    for lm, vocab, path in (
        (BatchedNgramLM.from_arpa(TOKEN_ARPA, token_ids="ngpu", vocab_size=128), ngpu_words(), TOKEN_ARPA),
        (BatchedNgramLM.from_arpa(WORD_ARPA), None, WORD_ARPA),
    ):
        vocab = vocab or lm.vocab
        dictionary = Dictionary()
        for w in vocab:
            dictionary.add_entry(w)
        kenlm = KenLM(str(path), dictionary)
        brute = BruteForceArpa(path.read_text(encoding="utf-8"))
        rng = random.Random(5)
        sentences = [[vocab.index(w) for w in h] for h in random_histories(brute, vocab, 20, 12, seed=6)]
        sentences += [[rng.randrange(len(vocab)) for _ in range(rng.randrange(1, 9))] for _ in range(10)]
        for sentence in sentences:
            state, total = kenlm.start(False), 0.0
            ours_state = lm.init_states(1)
            for t in sentence:
                state, ken = kenlm.score(state, t)
                scores, nexts = lm.advance(ours_state)
                assert scores[0, t].item() == pytest.approx(ken * LN10, abs=1e-4)
                ours_state = nexts[:, t]
                total += ken
            state, ken_final = kenlm.finish(state)
            assert lm.final_scores(ours_state).item() == pytest.approx(ken_final * LN10, abs=1e-4)
            total += ken_final
            assert lm.score_sentence(sentence) == pytest.approx(total * LN10, abs=1e-3)


SMALL_ARPA = """
some text before the data section is a comment

\\data\\
ngram 1=6
ngram 2=5
ngram 3=3

\\1-grams:
-99\t<s>\t-0.30
-0.9\t</s>
-1.5\t<unk>
-0.7\ta\t-0.25
-0.8\tb\t-0.15
-0.6\tc\t-0.2

\\2-grams:
-0.3\t<s> a\t-0.1
-0.5\ta b\t-0.12
-0.4\ta </s>
-0.2\tb c\t-0.05
-0.6\tc a

\\3-grams:
-0.1\t<s> a b
-0.15\ta b c
-0.05\tc a c

\\end\\
"""


def test_unk_sharing_and_missing_backoff_ngram(tmp_path):
    """NGPU-LM <unk> convention (p(<unk>) split among the tokens without a unigram), the trigram 'c a c'
    whose suffix bigram 'a c' is missing (its target is the longest suffix that is a state: 'c'),
    unigram-only words, <s> backoff; brute force over every token from every 3-token history."""
    path = tmp_path / "small.arpa"
    path.write_text(SMALL_ARPA)
    vocab = ["a", "b", "c", "d", "e"]  # d, e: no unigram
    for unk_share, lm in (
        (False, BatchedNgramLM.from_arpa(path, vocab=vocab)),
        (True, BatchedNgramLM.from_arpa(path, vocab=vocab, normalize_unk=True)),
    ):
        brute = BruteForceArpa(SMALL_ARPA, vocab=vocab, unk_share=unk_share)
        histories = [[x, y, z] for x in vocab for y in vocab for z in vocab]
        check_against_brute_force(lm, brute, vocab, histories)
    # NGPU encoding of the same model: a,b,c = tokens 0,1,2 (chr 100..102); tokens 3, 4 share <unk>
    ngpu = SMALL_ARPA.replace("\ta", "\td").replace(" a", " d").replace("\tb", "\te").replace(" b", " e")
    ngpu = ngpu.replace("\tc", "\tf").replace(" c", " f")
    path.write_text(ngpu)
    lm = BatchedNgramLM.from_arpa(path, token_ids="ngpu", vocab_size=5)
    brute = BruteForceArpa(ngpu, vocab=["d", "e", "f", "g", "h"], unk_share=True)
    letters = ["d", "e", "f", "g", "h"]
    check_against_brute_force(lm, brute, letters, [[x, y] for x in letters for y in letters])


def test_gzip_and_plain_give_the_same_tables(tmp_path, token_lm):
    gz = tmp_path / "lm.arpa.gz"
    gz.write_bytes(gzip.compress(TOKEN_ARPA.read_bytes()))
    other = BatchedNgramLM.from_arpa(gz, token_ids="ngpu", vocab_size=NGPU_VOCAB)
    for (name, a), (_, b) in zip(token_lm.named_buffers(), other.named_buffers(), strict=True):
        assert torch.equal(a, b), name


def test_unigram_lm(tmp_path):
    """Order 1: every state is the root row; p(</s>) is the </s> unigram (no <s> backoff)."""
    path = tmp_path / "uni.arpa"
    path.write_text("\\data\\\nngram 1=4\n\n\\1-grams:\n-99 <s>\n-0.5 </s>\n-0.4 x\n-0.6 y\n\\end\\\n")
    lm = BatchedNgramLM.from_arpa(path)
    scores, nexts = lm.advance(lm.init_states(2))
    torch.testing.assert_close(scores[0], torch.tensor([-0.4, -0.6]) * LN10)
    assert lm.final_scores(nexts[:1, 0]).tolist() == pytest.approx([-0.5 * LN10])
    assert lm.score_sentence([0, 1]) == pytest.approx((-0.4 - 0.6 - 0.5) * LN10)


TRIGRAM_HEAD = "\\data\\\nngram 1=4\nngram 2=1\nngram 3=1\n\n\\1-grams:\n"
BIGRAM_HEAD = "\\data\\\nngram 1=3\nngram 2=1\n\n\\1-grams:\n"
BAD = [
    ("no data", "just text\n", "no \\data\\ section"),
    ("truncated", "\\data\\\nngram 1=2\n\n\\1-grams:\n-1\t<s>\n-1\ta\n", "missing \\end\\"),
    ("count", "\\data\\\nngram 1=3\n\n\\1-grams:\n-1\t<s>\n-1\ta\n\\end\\\n", ":7: \\1-grams: section has 2"),
    ("float", "\\data\\\nngram 1=2\n\n\\1-grams:\n-1\t<s>\nx\ta\n\\end\\\n", ":6: 'x' is not a number"),
    ("positive", "\\data\\\nngram 1=2\n\n\\1-grams:\n-1\t<s>\n0.5\ta\n\\end\\\n", ":6: log-prob must be"),
    ("fields", "\\data\\\nngram 1=2\n\n\\1-grams:\n-1\t<s>\n-1\ta b c d\n\\end\\\n", ":6: a 1-gram line"),
    (
        "history",
        TRIGRAM_HEAD
        + "-1\t<s>\n-1\ta\n-1\tb\n-1\tc\n\n\\2-grams:\n-1\tb c\n\n\\3-grams:\n-1\ta b c\n\\end\\\n",
        ":16: the history of this 3-gram is not an n-gram",
    ),
    (
        "eos inside",
        BIGRAM_HEAD + "-1\t<s>\n-1\ta\n-1\tb\n\n\\2-grams:\n-1\t</s> a\n\\end\\\n",
        ":11: <s> may only start an n-gram and </s> only end one",
    ),
]


@pytest.mark.parametrize("name, text, message", BAD, ids=[b[0] for b in BAD])
def test_bad_arpa_is_one_line_error(tmp_path, name, text, message):
    path = tmp_path / f"{name.replace(' ', '_')}.arpa"
    path.write_text(text)
    with pytest.raises(GraphError) as err:
        BatchedNgramLM.from_arpa(path)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)
    assert message in str(err.value), str(err.value)


def test_bad_ngpu_token_and_arguments(tmp_path):
    path = tmp_path / "t.arpa"
    path.write_text("\\data\\\nngram 1=2\n\n\\1-grams:\n-1\t<s>\n-1\tab\n\\end\\\n")
    with pytest.raises(GraphError, match=r"t.arpa:6: 'ab' is not an NGPU-LM token"):
        BatchedNgramLM.from_arpa(path, token_ids="ngpu", vocab_size=4)
    path.write_text("\\data\\\nngram 1=2\n\n\\1-grams:\n-1\t<s>\n-1\t\u00ff\n\\end\\\n")
    with pytest.raises(GraphError, match=r"t.arpa:6: token .* = id 155 is outside the vocabulary 0..3"):
        BatchedNgramLM.from_arpa(path, token_ids="ngpu", vocab_size=4)
    with pytest.raises(GraphError, match="needs vocab_size"):
        BatchedNgramLM.from_arpa(path, token_ids="ngpu")
    with pytest.raises(GraphError, match="token_ids must be"):
        BatchedNgramLM.from_arpa(path, token_ids="chars")
    with pytest.raises(GraphError, match="ARPA file not found"):
        BatchedNgramLM.from_arpa(tmp_path / "missing.arpa")


def test_advance_is_batched_without_host_reads(token_lm, word_lm):
    """One fixed op sequence whatever the states (no Python loop over rows, nothing read back): the
    same ops for 1 and 500 rows, no syncing op; also runs on the meta device (no data at all)."""
    for lm in (token_lm, word_lm):
        op_lists = []
        for n in (1, 500):
            states = torch.randint(0, lm.num_states, (n,))
            with HostReads() as rec:
                lm.advance(states)
                lm.final_scores(states)
            assert rec.syncs == []
            op_lists.append(rec.ops)
        assert op_lists[0] == op_lists[1]
        meta = BatchedNgramLM.from_arpa(TOKEN_ARPA, token_ids="ngpu", vocab_size=NGPU_VOCAB).to("meta")
        assert all(b.device.type == "meta" for b in meta.buffers())
        scores, nexts = meta.advance(meta.init_states(7, "meta"))
        assert scores.shape == (7, 128) and nexts.device.type == "meta"


def test_random_states_match_row_by_row(token_lm):
    """A batch of arbitrary states (every state id, shuffled, with repeats) == each state queried alone."""
    states = torch.cat([torch.randperm(token_lm.num_states), torch.randint(0, token_lm.num_states, (300,))])
    scores, nexts = token_lm.advance(states)
    for i in torch.randint(0, len(states), (200,)).tolist():
        one_scores, one_nexts = token_lm.advance(states[i : i + 1])
        assert torch.equal(one_scores[0], scores[i]) and torch.equal(one_nexts[0], nexts[i])
    assert int(nexts.min()) >= 0 and int(nexts.max()) < token_lm.num_states
    # every state's row is a distribution together with </s> (the fixture LM is normalised)
    total = scores.double().exp().sum(1) + token_lm.final_scores(states).double().exp()
    torch.testing.assert_close(total, torch.ones_like(total), atol=2e-4, rtol=0)


def test_describe_reports_memory(token_lm, token_brute):
    """Memory = the buffers' bytes; arcs = every n-gram of order > 1 not ending in </s> + the root row;
    states = root + BOS + every n-gram below the top order not ending in </s> (except <s> itself)."""
    info = token_lm.describe()
    assert info["bytes"] == sum(b.numel() * b.element_size() for b in token_lm.buffers())
    grams = token_brute.prob
    assert info["arcs"] == sum(1 for g in grams if len(g) > 1 and g[-1] != "</s>") + 128
    below_top = [g for g in grams if len(g) < 3 and g[-1] not in ("</s>", "<s>", "<unk>")]
    assert info["states"] == token_lm.num_states == 2 + len(below_top)
    assert info["order"] == 3 and info["token_ids"] == "ngpu"


def test_unigram_lm_final_weight_from_bos(tmp_path):
    """In a unigram LM the BOS state backs off to the root: p(</s> | <s>) = p(</s>)."""
    path = tmp_path / "uni.arpa"
    path.write_text("\\data\\\nngram 1=3\n\n\\1-grams:\n-1.5\t</s>\n-99\t<s>\n-0.2\ta\n\n\\end\\\n")
    lm = BatchedNgramLM.from_arpa(path)
    assert lm.score_sentence([], bos=True, eos=True) == pytest.approx(-1.5 * LN10, abs=1e-5)
    assert lm.score_sentence([0], bos=True, eos=True) == pytest.approx(-1.7 * LN10, abs=1e-5)
