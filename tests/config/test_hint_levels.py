"""An unknown key is answered with the keys allowed at its own level of the schema: a
section's keys inside a section, a knob's fields inside a knob of a tune space."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from glm5svc.config import Config, inner_model, parse_config
from glm5svc.errors import ConfigError
from glm5svc.tune.space import _KnobSpec, _SpaceFile, read_space_file


def nested_models(model: type[BaseModel], path: tuple[str, ...] = ()):
    """(key path, model) of every mapping the configuration holds directly."""
    yield path, model
    for name, field in model.model_fields.items():
        inner = inner_model(field.annotation)
        if inner is not None and field.annotation is inner:
            yield from nested_models(inner, (*path, name))


def allowed(said: str) -> list[str]:
    return said.split("(allowed here: ", 1)[1].split(")", 1)[0].split(", ")


def mapping_at(path: tuple[str, ...], key: str) -> str:
    lines = [f"{'  ' * depth}{part}:" for depth, part in enumerate(path)]
    return "\n".join([*lines, f"{'  ' * len(path)}{key}: 1"]) + "\n"


@pytest.mark.parametrize(
    "path,model",
    list(nested_models(Config)),
    ids=lambda p: ".".join(p) if isinstance(p, tuple) else "",
)
def test_an_unknown_config_key_lists_the_keys_of_its_own_section(path, model):
    with pytest.raises(ConfigError) as raised:
        parse_config(mapping_at(path, "no_such_key"), "glm5.yaml")
    said = raised.value.render()
    assert ".".join((*path, "no_such_key")) in said
    assert allowed(said) == list(model.model_fields)


def test_an_unknown_field_inside_a_knob_lists_a_knobs_fields(tmp_path: Path):
    space = tmp_path / "space.yaml"
    space.write_text("knobs:\n  - key: tuning.chunked_prefill_size\n    vaules: [1]\n")
    with pytest.raises(ConfigError) as raised:
        read_space_file(space)
    said = raised.value.render()
    assert "line 3: knobs.0.vaules: unknown key; did you mean 'values'?" in said
    assert allowed(said) == list(_KnobSpec.model_fields)


def test_an_unknown_top_level_key_of_a_space_lists_the_spaces_keys(tmp_path: Path):
    space = tmp_path / "space.yaml"
    space.write_text("knobs: []\nnobs: []\n")
    with pytest.raises(ConfigError) as raised:
        read_space_file(space)
    said = raised.value.render()
    assert "did you mean 'knobs'?" in said
    assert allowed(said) == list(_SpaceFile.model_fields)
