"""A search space's `key` knobs are checked against the configuration's schema when the
file is read: a key the configuration lacks, or a value the key refuses, ends `tune run`
(and `validate --space`) before anything runs, instead of a traceback or trials refused
one by one."""

from __future__ import annotations

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from glm5svc.cli import main
from glm5svc.config import Config, TuningSection, config_from_mapping
from glm5svc.errors import ConfigError
from glm5svc.tune.space import DEFAULT_SPACE, apply_candidate, load_space, read_space_file

TUNING_KEYS = list(TuningSection.model_fields)
names = st.sampled_from(TUNING_KEYS) | st.from_regex(r"[a-z_]{1,24}", fullmatch=True)
values = st.none() | st.booleans() | st.integers(-10, 70000) | st.floats() | st.text(max_size=12)


def test_the_shipped_space_names_only_keys_the_configuration_has():
    spec = read_space_file(DEFAULT_SPACE)
    keys = [knob.key for knob in spec.knobs if knob.key]
    assert keys and all(key.split(".", 1)[1] in TUNING_KEYS for key in keys)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(names, st.lists(values, min_size=1, max_size=4)), min_size=1,
                max_size=3))  # fmt: skip
def test_a_space_read_gives_only_candidates_the_configuration_takes(tmp_path_factory, knobs):
    path = tmp_path_factory.mktemp("space") / "space.yaml"
    document = {"knobs": [{"key": f"tuning.{name}", "values": vals} for name, vals in knobs]}
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    try:
        space = load_space(path, Config(), moe=True, sglang_version="0.5.11")
    except ConfigError as exc:
        said = exc.render()
        assert str(path) in said
        wrong = [f"tuning.{name}" for name, _ in knobs if name not in TUNING_KEYS]
        assert all(key in said for key in wrong), said
        assert "Traceback" not in said
        return
    for knob in space.knobs:
        for value in knob.values:
            config_from_mapping(apply_candidate({}, {knob.name: value}))  # never refused


def test_a_refused_space_leaves_no_run_directory(tmp_path, capsys):
    (tmp_path / "glm5.yaml").write_text("server:\n  host: 127.0.0.1\n")
    space = tmp_path / "space.yaml"
    space.write_text("knobs:\n  - key: tuning.max_runing_requests\n    values: [64]\n")
    status = main(["--config", str(tmp_path / "glm5.yaml"), "tune", "run", "--space", str(space),
                   "--run-dir", str(tmp_path / "run")])  # fmt: skip
    said = capsys.readouterr().err
    assert status == 78
    assert "did you mean tuning.max_running_requests?" in said
    assert not (tmp_path / "run").exists()


def test_validate_checks_a_space_only_when_given_one(tmp_path, capsys):
    config = tmp_path / "glm5.yaml"
    config.write_text("server:\n  host: 127.0.0.1\n")
    space = tmp_path / "space.yaml"
    space.write_text("knobs:\n  - key: tuning.cuda_graphs\n    values: [true]\n")
    assert main(["validate", str(config)]) == 0
    assert main(["validate", str(config), "--space", str(space)]) == 78
    assert "tuning.cuda_graphs is not a configuration key" in capsys.readouterr().err
