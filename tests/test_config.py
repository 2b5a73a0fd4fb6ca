"""Config: YAML + overrides, unknown keys and wrong types are one-line errors listing valid keys."""

from pathlib import Path

import pytest

from asrdecode.config import RunConfig, build_config, parse_override
from asrdecode.errors import ConfigError

CONFIGS = Path(__file__).parent.parent / "configs"


def test_defaults_without_file():
    cfg = build_config(None, [])
    assert isinstance(cfg, RunConfig)
    assert cfg.decoder is None  # auto: resolved to the model's natural decoder at run time
    assert cfg.model.path == "embedded:demo_ctc_bpe"


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")))
def test_every_shipped_config_loads(path):
    cfg = build_config(path, [])
    assert cfg.to_dict()["decoder"]["type"]


def test_overrides_typed():
    cfg = build_config(
        None,
        [
            "batch.max_seconds=60",
            "device=cpu",
            "decoder.type=ctc-greedy",
            "decoder.blank_penalty=0.5",
            "output.ctm=false",
        ],
    )
    assert cfg.batch.max_seconds == 60.0 and isinstance(cfg.batch.max_seconds, float)
    assert cfg.device == "cpu"
    assert cfg.decoder.blank_penalty == 0.5
    assert cfg.output.ctm is False


def test_unknown_key_lists_valid_keys_and_suggests():
    with pytest.raises(ConfigError) as err:
        build_config(None, ["batch.max_second=60"])
    msg = str(err.value)
    assert "batch.max_second" in msg and "did you mean 'batch.max_seconds'" in msg
    assert "batch.max_utterances" in msg and "\n" not in msg


def test_wrong_type_names_key():
    with pytest.raises(ConfigError, match="batch.max_utterances' expects an integer"):
        build_config(None, ["batch.max_utterances=lots"])
    with pytest.raises(ConfigError, match="output.ctm' expects true/false"):
        build_config(None, ["output.ctm=3"])


def test_decoder_options_validated_per_type():
    with pytest.raises(ConfigError, match="decoder.beam"):
        build_config(None, ["decoder.type=ctc-greedy", "decoder.beam=10"])
    with pytest.raises(ConfigError, match="need an explicit decoder.type"):
        build_config(None, ["decoder.blank_penalty=1"])
    with pytest.raises(ConfigError, match="unknown decoder.type 'nope'"):
        build_config(None, ["decoder.type=nope"])


def test_yaml_file_and_override_precedence(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("batch:\n  max_seconds: 30\ndevice: cpu\n")
    cfg = build_config(f, ["batch.max_seconds=45"])
    assert cfg.batch.max_seconds == 45.0 and cfg.device == "cpu"


def test_bad_yaml_names_file(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("batch: [1,\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        build_config(f, [])
    with pytest.raises(ConfigError, match="not found"):
        build_config(tmp_path / "missing.yaml", [])


def test_parse_override_forms():
    assert parse_override("a.b=1") == (["a", "b"], 1)
    assert parse_override("a=hello") == (["a"], "hello")
    with pytest.raises(ConfigError):
        parse_override("novalue")


def test_digest_changes_with_config():
    assert build_config(None, []).digest() != build_config(None, ["batch.max_seconds=1"]).digest()
    assert build_config(None, []).digest() == build_config(None, []).digest()


def test_unknown_key_with_control_characters_is_one_line(tmp_path):
    """A fuzzed YAML key holding a newline: the error names it escaped, on one line."""
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"features": {"ty\npe": 1}}))
    with pytest.raises(ConfigError) as err:
        build_config(path, [])
    assert "\n" not in str(err.value) and "features.ty\\npe" in str(err.value)
    with pytest.raises(ConfigError) as err:
        build_config(None, ["engine.type=a\tb"])
    assert "\t" not in str(err.value)


def test_numbers_in_exponent_form_are_numbers():
    """YAML 1.1 reads `1e3` as text; a number key takes it as the number it is."""
    cfg = build_config(None, ["decoder.type=wfst-otf", "decoder.beam=1e1", "batch.max_utterances=1e2"])
    assert cfg.decoder.beam == 10.0 and cfg.batch.max_utterances == 100
    assert build_config(None, ["decoder.type=ctc-beam", "decoder.beam_size=2E0"]).decoder.beam_size == 2
    with pytest.raises(ConfigError, match="expects an integer, got 1.5"):
        build_config(None, ["decoder.type=ctc-beam", "decoder.beam_size=1.5e0"])
    assert build_config(None, ["model.source_lang=1e3"]).model.source_lang == "1e3"  # text stays text


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("batch.max_seconds=-5", "batch.max_seconds must be seconds > 0"),
        ("batch.max_seconds=.nan", "batch.max_seconds must be seconds > 0"),
        ("batch.max_utterances=0", "batch.max_utterances must be at least 1"),
        ("batch.segment_seconds=-1", "batch.segment_seconds must be seconds >= 0"),
        ("threads=1000000", "threads=1000000: use 0"),
        ("model.threads=-1", "model.threads=-1: use 0"),
        ("model.chunk_seconds=-1", "model.chunk_seconds must be"),
        ("engine.workers=100000", "engine.workers"),
        ("features.type=kaldi-fbank", "features.type=kaldi-fbank: use auto"),
    ],
)
def test_every_section_is_checked_when_the_config_is_built(override, message):
    with pytest.raises(ConfigError, match=message):
        build_config(None, [override])


@pytest.mark.parametrize(
    ("decoder", "override", "message"),
    [
        ("wfst", "decoder.threads=5000", "decoder.threads=5000: use 0"),
        ("wfst", "decoder.word_beam=-1", "decoder.word_beam must be >= 0"),
        ("wfst", "decoder.history_max=3", "decoder.history_max bounds"),
        ("wfst-otf", "decoder.lm_cache=3", "decoder.lm_cache: 3 is not 0 or a power of two"),
        ("let", "decoder.beam=0", "decoder.beam must be > 0"),
        ("let", "decoder.group_capacity=0", "decoder.group_capacity must be >= 1"),
        ("ctc-beam", "decoder.beam_size=0", "decoder.beam_size must be >= 1"),
        ("transducer-beam", "decoder.strategy=x", "decoder.strategy must be one of"),
        ("transducer-greedy", "decoder.loop=x", "decoder.loop must be 'labels' or 'frames'"),
        ("aed-beam", "decoder.nbest=9", "decoder.nbest must be between 1 and decoder.beam_size, got 9"),
    ],
)
def test_decoder_options_are_checked_before_any_graph_or_lm(decoder, override, message):
    """No graph, LM or model is named: the check needs none of them."""
    with pytest.raises(ConfigError, match=message):
        build_config(None, [f"decoder.type={decoder}", override])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("decoder:\n  boost: " + "[" * 10_000 + "]" * 10_000 + "\n", "nested more than 100 levels deep"),
        ("threads: " + "9" * 5000 + "\n", "a number of 5000 digits, too long to read"),
        ("# caf\xe9\nthreads: 1\n", "not valid UTF-8 text (byte 0xe9 at offset 5)"),
    ],
)
def test_unreadable_config_files_are_one_line(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(ConfigError) as err:
        build_config(path, [])
    assert str(err.value) == f"{path}: {message}"


def test_unreadable_override_values_are_one_line():
    with pytest.raises(ConfigError, match="override threads: a number of 5000 digits"):
        build_config(None, ["threads=" + "9" * 5000])
    with pytest.raises(ConfigError, match="override decoder.boost: nested more than 100"):
        build_config(None, ["decoder.type=wfst", "decoder.boost=" + "[" * 2000 + "]" * 2000])


def _nested_yaml(levels: int, block: bool) -> str:
    """A YAML mapping `levels` collections deep: block mappings, or a key holding flow lists."""
    if block:
        return "".join("  " * i + f"k{i}:\n" for i in range(levels - 1)) + "  " * (levels - 1) + "k: 1\n"
    return "k: " + "[" * (levels - 1) + "]" * (levels - 1) + "\n"


@pytest.mark.parametrize("block", [False, True])
def test_yaml_nesting_is_refused_before_parsing_at_the_parsed_limit(block):
    """`yaml_nested_too_deep` (libyaml's tokens, read before PyYAML parses) and `check_nesting`
    (the parsed value) draw the line at the same depth: MAX_NESTING levels pass both, one more
    is refused by both; values thousands deep are refused from their tokens."""
    import yaml

    from asrdecode.io.lines import MAX_NESTING, check_nesting
    from asrdecode.typed_config import yaml_nested_too_deep

    deepest = _nested_yaml(MAX_NESTING, block)
    assert not yaml_nested_too_deep(deepest)
    check_nesting(yaml.safe_load(deepest), "x", ConfigError)
    deeper = _nested_yaml(MAX_NESTING + 1, block)
    assert yaml_nested_too_deep(deeper) == yaml.__with_libyaml__
    with pytest.raises(ConfigError, match="nested more than"):
        check_nesting(yaml.safe_load(deeper), "x", ConfigError)
    assert yaml_nested_too_deep(_nested_yaml(2_000 if block else 20_000, block)) == yaml.__with_libyaml__
