"""Property-based: whatever a tune's run folder holds (an overlay of any shape, any
tune.json, any mix of its files as any bytes), tune's readers and `tune apply` answer with
a Glm5Error or a result, never another exception; and an overlay apply accepts is exactly
what the configuration then holds."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glm5svc.config_yaml import parse_yaml
from glm5svc.errors import Glm5Error
from glm5svc.tune.apply import apply_tune, read_overlay
from glm5svc.tune.confirmation import confirmation_for
from glm5svc.tune.outputs import read_summary
from glm5svc.tune.session import read_study

SCALARS = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=12)
JSONISH = st.recursive(
    SCALARS | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
TUNING_KEYS = st.sampled_from(["max_running_requests", "mem_fraction_static", "cuda_graph",
                               "radix_cache", "chunked_prefill_size", "no_such_key"])  # fmt: skip
FLAGS = st.sampled_from(["--chunked-prefill-size", "--tp-size", "--mem-frac", "--page-size"])
OVERLAYS = (
    st.fixed_dictionaries(
        {},
        optional={
            "tuning": st.dictionaries(TUNING_KEYS, SCALARS, max_size=3) | JSONISH,
            "server": st.fixed_dictionaries(
                {},
                optional={
                    "extra_args": st.lists(FLAGS | st.text(max_size=6), max_size=4) | JSONISH
                },
            )
            | JSONISH,
        },
    )
    | JSONISH
)
CONFIG = "# kept\nserver:\n  host: 127.0.0.1  # loopback\ntuning:\n  max_running_requests: 32\n"
PROPERTY = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip


@PROPERTY
@given(overlay=OVERLAYS)
def test_any_overlay_is_applied_exactly_or_refused(overlay):
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        run = folder / "run"
        run.mkdir()
        (run / "tuned.yaml").write_text(yaml.safe_dump(overlay))
        try:  # confirmed: the overlay as tuned.yaml gives it is what was tested
            tested = read_overlay(run)
        except Glm5Error:
            tested = {}
        (run / "summary.json").write_text(json.dumps(
            {"confirmed": True, "confirmation": "confirmed",
             "confirmation_for": confirmation_for(tested)}
        ))  # fmt: skip
        config = folder / "glm5.yaml"
        config.write_text(CONFIG)
        try:
            result = apply_tune(run, str(config), restart=False, force=True)
        except Glm5Error:
            assert config.read_text() == CONFIG  # refused: nothing changed
            assert sorted(p.name for p in folder.iterdir()) == ["glm5.yaml", "run"]
            return
        written = parse_yaml(config.read_text(), str(config)).data
        for key, value in (result["changed"].get("tuning") or {}).items():
            assert written["tuning"][key] == value
        if "server" in result["changed"]:
            assert written["server"]["extra_args"] == result["changed"]["server"]["extra_args"]
        if result["changed"]:
            assert "# loopback" in config.read_text()  # comments kept


@PROPERTY
@given(study=JSONISH)
def test_any_tune_json_is_read_or_refused(study):
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        (folder / "tune.json").write_text(json.dumps(study))
        try:
            saved = read_study(folder)
        except Glm5Error:
            return
        assert isinstance(saved, dict) and isinstance(saved["space"], dict)


FILES = st.sampled_from(["summary.json", "tune.json", "tuned.yaml", "study.db"])
CONTENT = st.binary(max_size=64) | JSONISH.map(lambda v: json.dumps(v).encode())


@PROPERTY
@given(files=st.dictionaries(FILES, CONTENT, max_size=4))
def test_any_study_folder_is_read_or_refused(files):
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        for file, content in files.items():
            (folder / file).write_bytes(content)
        for reader in (read_summary, read_study, read_overlay):
            try:
                reader(folder)
            except Glm5Error:
                pass
