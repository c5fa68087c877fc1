"""The example config, the configuration reference and the CLI reference are what the
generator makes of the config model and the parsers: one source each, no drift."""

from __future__ import annotations

import argparse

import yaml
from pydantic import BaseModel

from glm5svc import docgen
from glm5svc.cli import build_parser
from glm5svc.cli_options import subparsers_of
from glm5svc.config import Config, example_config_path, load_config


def test_the_committed_files_are_the_generators_output():
    stale = [str(path.relative_to(docgen.REPO)) for path in docgen.stale_files()]
    assert not stale, f"out of date: {stale}; run `python -m glm5svc.docgen` and commit"


def test_the_check_mode_names_a_drifted_file(tmp_path, monkeypatch, capsys):
    drifted = tmp_path / "configuration.md"
    drifted.write_text("an old reference\n")
    monkeypatch.setattr(docgen, "REPO", tmp_path)
    monkeypatch.setattr(docgen, "generated_files", lambda: {drifted: "the new text\n"})
    assert docgen.main(["--check"]) == 1
    assert "configuration.md: out of date" in capsys.readouterr().out
    assert drifted.read_text() == "an old reference\n"  # --check writes nothing


def key_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every key of the config model, as section.key paths."""
    paths = set()
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            paths |= key_paths(annotation, f"{prefix}{name}.")
        else:
            paths.add(prefix + name)
    return paths


def document_paths(data: dict, prefix: str = "") -> set[str]:
    """Every key a YAML document spells out, as section.key paths."""
    paths = set()
    for name, value in data.items():
        if isinstance(value, dict) and name not in ("env",):
            paths |= document_paths(value, f"{prefix}{name}.")
        else:
            paths.add(prefix + name)
    return paths


def test_the_example_config_spells_out_every_key_with_its_default():
    written = document_paths(yaml.safe_load(example_config_path().read_text()))
    assert written == key_paths(Config)
    assert "server.secret_env" in written
    assert load_config(example_config_path()) == Config()


def test_a_missing_key_in_the_example_is_caught():
    data = yaml.safe_load(example_config_path().read_text())
    del data["server"]["secret_env"]
    assert key_paths(Config) - document_paths(data) == {"server.secret_env"}
    # and loading alone would not catch it: the missing key takes its default
    assert Config.model_validate(data) == Config()


def test_every_key_has_a_description_shown_in_both_files():
    reference = (docgen.REPO / "docs" / "configuration.md").read_text()
    example = example_config_path().read_text()
    for path in sorted(key_paths(Config)):
        section, _, name = path.rpartition(".")
        model = Config
        for part in section.split("."):
            model = model.model_fields[part].annotation
        description = " ".join((model.model_fields[name].description or "").split())
        assert description, f"{path}: give it a docstring in glm5svc/config.py"
        assert f"| `{name}` |" in reference and description in reference, path
        assert description.split()[0] in example, path


def test_every_option_of_every_command_is_in_the_cli_reference_with_its_help():
    reference = (docgen.REPO / "docs" / "cli.md").read_text()
    top = build_parser()
    for path, parser in {"": top, **subparsers_of(top)}.items():
        assert f"## glm5svc {path}".rstrip() + "\n" in reference, path
        for action in parser._actions:  # noqa: SLF001
            if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):  # noqa: SLF001
                continue
            assert action.help, f"glm5svc {path} {action.option_strings or action.dest}: no help"
            assert f"`{(action.option_strings or [action.dest])[0]}" in reference


def test_option_defaults_said_in_the_tuning_guide_are_the_parsers():
    """docs/tuning.md explains `tune run`'s options in prose; a default it states is the one
    the parser has (the parser is the one source, docs/cli.md its generated reference)."""
    import re

    from glm5svc.tune.settings import SearchSettings

    run = subparsers_of(build_parser())["tune run"]
    fields = SearchSettings.model_fields
    defaults = {  # argparse converts a default given as text when it parses, as here
        flag: a.type(a.default) if a.type and isinstance(a.default, str) else a.default
        for a in run._actions  # noqa: SLF001
        for flag in a.option_strings
    }
    for a in run._actions:  # noqa: SLF001
        if a.default is None and a.dest in fields and fields[a.dest].default is not None:
            # Left out, the parser says None (a resume keeps what its run left, --budget)
            # and the settings' field gives the default.
            defaults[a.option_strings[0]] = fields[a.dest].default
    text = (docgen.REPO / "docs" / "tuning.md").read_text()
    stated = re.findall(r"`(--[a-z0-9-]+)`,? \(?default ([0-9.]+)(?: ?([smh])\b)?", text)
    assert len(stated) >= 3, stated
    seconds = {"": 1, "s": 1, "m": 60, "h": 3600}
    for flag, number, unit in stated:
        assert defaults[flag] == float(number) * seconds[unit], (flag, number, unit)
