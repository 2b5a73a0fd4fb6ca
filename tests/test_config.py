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
