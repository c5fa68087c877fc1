"""The API key reaches sglang exactly, through sglang's own config merger, or is refused.

`glm5svc serve` hands the key to sglang in a --config YAML file (never in argv). sglang
reads it with yaml.safe_load and turns it back into `--api-key <str(value)>` for
argparse (sglang/srt/server_args_config_parser.py). Any key YAML reads as another type
(`yes`, `1e3`, `null`), as a comment, alias, tag or block indicator, would arrive altered
or empty if written unquoted. Each generated key is either delivered exactly (the key
sglang's parser returns equals the key the probes send) or refused by `validate`.
"""

from __future__ import annotations

import json
import random
import string
import subprocess
from pathlib import Path

import pytest
import yaml

from glm5svc.config import config_from_mapping, read_api_key, secrets_file_text
from glm5svc.errors import ConfigError
from glm5svc.launch_plan import build_launch_plan
from glm5svc.records import to_dict
from tests.plan.test_launch_plan import SM120_X8

HERE = Path(__file__).resolve().parent

YAML_TRAPS = [
    "yes", "no", "on", "off", "y", "n", "true", "False", "null", "Null", "~", "",
    "0", "030000", "0o17", "0x1F", "1e400", "1e3", ".inf", "-.inf", ".nan", "1_000", "1:30",
    "2026-12-01", "2026-12-01T03:00:00Z", "#comment", "key #comment", "&anchor", "*alias",
    "!tag", "!!str", "!!binary AAAA", "- item", "? key", "key: value", "a:b", "|", ">", "|-",
    "'single", '"double', "%TAG", "@at", "`tick", "{a: 1}", "[1, 2]", "a,b", "= x", "<<",
    "...", "---", "a\\nb", "\\", "tab\there", "trailing space ", " leading", "x" * 300,
    "-starts-with-dash", "--api-key", "ünïcödé", "nul\x00byte", "bell\x07", "line\nbreak",
    "sk-" + "a" * 48, "hf_" + "B" * 34, "Bearer token", "a'b\"c", "%20", "&&", "**", "!!",
]  # fmt: skip
ALPHABET = string.ascii_letters + string.digits + string.punctuation + " "


def generated_keys(count: int, seed: int = 20261201) -> list[str]:
    """The traps, each also inside other text, then random printable-ASCII keys."""
    rng = random.Random(seed)
    keys = list(YAML_TRAPS)
    keys += [f"{trap}{rng.choice(ALPHABET)}{rng.randint(0, 99)}" for trap in YAML_TRAPS]
    while len(keys) < count:
        length = rng.choice([1, 2, 3, 8, 16, 32, 64])
        keys.append("".join(rng.choice(ALPHABET) for _ in range(length)))
    return keys


def test_generated_keys_reach_sglang_exactly_or_are_refused(sglang_parser_pythons, tmp_path):
    keys = generated_keys(260)
    assert len(keys) >= 200
    delivered: list[tuple[str, Path]] = []
    refused = []
    for i, key in enumerate(keys):
        key_file = tmp_path / f"key-{i}"
        key_file.write_bytes(key.encode("utf-8", "surrogatepass"))
        key_file.chmod(0o600)
        try:
            sent = read_api_key(key_file)  # what validate checks and the probes send
        except ConfigError as exc:
            refused.append((key, str(exc)))
            continue
        assert sent == key.strip()
        config_file = tmp_path / f"secrets-{i}.yaml"
        config_file.write_text(secrets_file_text(sent))
        delivered.append((sent, config_file))
    argvs = [["--model-path", "/m", "--config", str(path)] for _, path in delivered]
    # One import per distinct merger: profiles whose sglang has the same one, byte for byte,
    # share the run (0.5.10.post1 and 0.5.11 do; 0.5.23 reads every long spelling of a flag).
    mergers: dict[bytes, tuple[str, Path]] = {}
    for profile, python in sglang_parser_pythons.items():
        mergers.setdefault(merger_source(python), (profile, python))
    assert len(mergers) < len(sglang_parser_pythons)
    for profile, python in mergers.values():
        run = subprocess.run(
            [str(python), str(HERE / "merge_config_with_sglang.py"), json.dumps(argvs)],
            capture_output=True,
            text=True,
            check=True,
        )
        received = json.loads(run.stdout)
        wrong = [
            (sent, got)
            for (sent, _), got in zip(delivered, received, strict=True)
            if got.get("api_key") != sent
        ]
        assert wrong == [], (profile, wrong[:10])
    # Refused only for what cannot travel: empty, non-ASCII or control characters, '-' first.
    for key, reason in refused:
        stripped = key.strip()
        assert (
            not stripped or stripped.startswith("-") or any(not (" " <= c <= "~") for c in stripped)
        ), (key, reason)
    assert len(delivered) >= 200
    print(f"{len(delivered)} keys delivered exactly, {len(refused)} refused, of {len(keys)}")


def merger_source(python: Path) -> bytes:
    venv = python.parent.parent
    (path,) = [
        *venv.glob("lib/python3*/site-packages/sglang/srt/server_args_config_parser.py"),
        *venv.glob("lib/python3*/site-packages/sglang/srt/utils/server_args_config_parser.py"),
    ]
    return path.read_bytes()


@pytest.mark.parametrize("key", ["yes", "#x", "null", "030000", "*a", "- b", "!tag x"])
def test_the_old_hand_written_file_changed_or_broke_these_keys(key):
    try:
        old = yaml.safe_load(f"api-key: {key}\n")["api-key"]
    except yaml.YAMLError:
        old = "unreadable: sglang would not start"
    assert old != key
    assert yaml.safe_load(secrets_file_text(key))["api-key"] == key


@pytest.mark.parametrize("flag", ["--api-key", "--admin-api-key"])
def test_a_key_in_extra_args_is_refused(flag):
    config = config_from_mapping({"server": {"extra_args": [flag, "sk-in-argv"]}})
    with pytest.raises(ConfigError) as caught:
        build_launch_plan(config, gpus=SM120_X8)
    assert "server.api_key_file" in str(caught.value) or flag in str(caught.value)


def test_plan_summary_shows_server_env_names_not_values():
    """The summary is what /status and bench's summary.json (provenance) carry."""
    config = config_from_mapping({"server": {"env": {"HF_TOKEN": "hf_secret", "X": "1"}}})
    summary = build_launch_plan(config, gpus=SM120_X8).summary()
    assert summary.env["HF_TOKEN"] == summary.env["X"] == "<secret>"
    assert "hf_secret" not in json.dumps(to_dict(summary))
    assert summary.env["NCCL_P2P_LEVEL"] == "SYS"  # the plan's own values are shown
