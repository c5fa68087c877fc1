"""Property-based: any configuration file gets a clear answer, never a traceback.

Arbitrary bytes, arbitrary YAML documents (anchors, aliases, cycles, tags, duplicate
keys), and every kind of scalar in every key: `validate` answers 0 or 78; a refusal
names the file, the line and the key; an accepted value is read as written (no true or
1e3 where a whole number is meant). The example budget is fixed and derandomized, so the
run is the same in CI every time and takes seconds.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from glm5svc.cli import main
from glm5svc.commands.validate import check_config
from glm5svc.config import Config, load_config, rules_of
from glm5svc.errors import EXIT_CONFIG, ConfigError, Glm5Error

BUDGET = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


def _fields(model: type[BaseModel] = Config, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += _fields(annotation, (*path, name))
        else:
            found.append((*path, name))
    return found


FIELDS = _fields()
NAMES = sorted({part for field in FIELDS for part in field}) + ["<<", "x", "port"]
# Scalars as YAML text: each kind YAML 1.1 and 1.2 read differently, each tag, and
# values the keys mean (paths, hosts, ladders).
SPECIAL = [
    "true", "false", "True", "yes", "no", "on", "off", "y", "null", "~", "''", '""',
    "0", "1", "-1", "8", "30000", "65536", "1e3", "3e4", "1.0", "8.0", "0.5", "-0.0",
    "030000", "0x7530", "0o17", "0b101", "1_000", "1:30", "2026-01-02", "2026-01-02T03:04:05",
    ".inf", "-.inf", ".nan", "1e400", "99999999999999999999999", "9" * 5000,
    "!!str 5", "!!int 5", "!!int yes", "!!float 1", "!!bool yes", "!!null ''",
    "!!binary Z2xtLTU=", "!!timestamp 2026-01-01", "!!set {a, b}", "!!omap [a: 1]",
    "!!python/object:os.system x", "!!python/name:os.system ''", "!local x", "!<tag:x> y",
    "[]", "{}", "[64, 256]", "[0, 0]", "[1, 2, 3]", "{a: 1}", "{NAME: value}",
    "/models/x", "models/x", "127.0.0.1", "0.0.0.0", "http://10.0.0.1:9400", "10.0.0.1:20000",
    '"a\\0b"', '"\\ud800"', '"\\x85"', "'it''s'", "|\n  block", "sm120", "cu128", "SYS",
    "flashinfer", "auto", "none",
]  # fmt: skip
plain_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12).filter(
    lambda t: "\n" not in t
)
scalars = st.one_of(
    st.sampled_from(SPECIAL),
    st.integers(-(10**20), 10**20).map(str),
    st.floats().map(repr),
    st.text(max_size=12).map(json.dumps),  # double-quoted, any code point
    plain_text,
)
anchors = st.sampled_from(["", "", "&a ", "&b "])
tags = st.sampled_from(["", "", "", "!!str ", "!!int ", "!!map ", "!!seq ", "!x "])
aliases = st.sampled_from(["*a", "*b"])
keys = st.sampled_from(NAMES) | plain_text.map(json.dumps)


def _flow(children):
    return st.one_of(
        st.lists(children, max_size=4).map(lambda items: "[" + ", ".join(items) + "]"),
        st.lists(st.tuples(keys, children), max_size=4).map(
            lambda pairs: "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
        ),
    )


nodes = st.recursive(
    scalars | aliases,
    lambda inner: st.tuples(anchors, tags, _flow(inner)).map("".join),
    max_leaves=10,
)
# Block style, as people write it: sections, keys, values, repeated keys now and then.
block_documents = st.lists(
    st.tuples(st.sampled_from(FIELDS), anchors, nodes), min_size=1, max_size=6
).map(lambda lines: "".join(_block_line(field, anchor, node) for field, anchor, node in lines))


def _block_line(field: tuple[str, ...], anchor: str, node: str) -> str:
    text = ""
    for depth, part in enumerate(field[:-1]):
        text += "  " * depth + f"{part}:\n"
    return text + "  " * (len(field) - 1) + f"{field[-1]}: {anchor}{node}\n"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("configs")


def _clear_answer(path: Path) -> Config | None:
    """What `validate` does (glm5svc.cli.main, less argparse): a Config, or a refusal
    (exit 78) naming file and line, or naming the key a command's rule is about."""
    try:
        config = load_config(path)
    except ConfigError as exc:
        text = exc.render()
        assert text.startswith(str(path)), text
        if exc.problems:  # schema problems: each names its line and key, or is top level
            for problem in exc.problems:
                assert re.match(r"line \d+: \S", problem) or problem.startswith("(top level)")
        else:  # a reading problem: the line it is on
            assert re.match(re.escape(str(path)) + r", line \d+", text), text
        return None
    try:
        with rules_of(path):
            check_config(config)
    except Glm5Error as exc:
        assert exc.exit_status == EXIT_CONFIG
        # a rule's refusal: the file, the line when the file sets the key, the key
        assert re.match(re.escape(str(path)) + r"(, line \d+)?: [a-z_]+\.[a-z_]+", exc.render())
    return config


@BUDGET
@given(st.binary(max_size=300))
def test_any_bytes_get_a_clear_answer(folder, data):
    path = folder / "bytes.yaml"
    path.write_bytes(data)
    _clear_answer(path)


@BUDGET
@given(nodes)
def test_any_flow_document_gets_a_clear_answer(folder, text):
    path = folder / "flow.yaml"
    path.write_text(text, encoding="utf-8")
    _clear_answer(path)


@BUDGET
@given(block_documents)
def test_any_block_document_gets_a_clear_answer(folder, text):
    path = folder / "block.yaml"
    path.write_text(text, encoding="utf-8")
    _clear_answer(path)


@settings(BUDGET, max_examples=250)
@given(st.sampled_from(FIELDS), scalars)
def test_every_scalar_in_every_key_is_read_as_written_or_refused(folder, field, scalar):
    path = folder / "scalar.yaml"
    path.write_text(_block_line(field, "", scalar), encoding="utf-8")
    config = _clear_answer(path)
    if config is None:
        return
    value = config
    for part in field:
        value = getattr(value, part)
    written = scalar.strip()
    if isinstance(value, int) and not isinstance(value, bool):
        assert re.fullmatch(r"(!!int )?[-+]?(0|[1-9][0-9_]*|0x[0-9a-fA-F_]+)", written), written
    if isinstance(value, float):
        assert written not in ("true", "false", "True", "yes", "no", "on", "off", ".inf", ".nan")


def test_the_generators_reach_every_key_and_each_kind_of_answer(folder, capsys):
    """The corpus of the strategies: every key, anchors, aliases, tags, duplicates."""
    assert len(FIELDS) > 60 and ("benchmark", "post_start", "ladder") in FIELDS
    for text, said in [
        ("server: {port: 1}\nserver: {port: 2}\n", "given twice"),
        ("a: &a [*a]\n", "a cycle"),
        ("server: {port: !!binary MQ==}\n", "!!binary"),
        ("server: {port: true}\n", "whole number"),
    ]:
        path = folder / "known.yaml"
        path.write_text(text)
        assert _clear_answer(path) is None
        assert main(["validate", str(path)]) == EXIT_CONFIG
        assert said in capsys.readouterr().err
