"""The corpus of broken configurations (tests/config/broken/): each one is refused by
`validate` with exit 78 and the same message as by every command named on its first line
(`# refused by: validate command serve ...`), so what validate passes no command refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from glm5svc.bench.post_start import run_post_start_benchmark
from glm5svc.cli import main
from glm5svc.config import load_config
from glm5svc.errors import EXIT_CONFIG, ConfigError
from glm5svc.serve import service as serve_service

CORPUS = sorted((Path(__file__).parent / "broken").glob("*.yaml"))
KNOWN = {"validate", "command", "serve", "preflight", "bench", "serve-post-start"}


def refused_by(path: Path) -> list[str]:
    first = path.read_bytes().split(b"\n", 1)[0].decode()
    assert first.startswith("# refused by: "), f"{path.name}: first line names the commands"
    names = first.removeprefix("# refused by: ").split()
    assert names[0] == "validate" and set(names) <= KNOWN, names
    return names[1:]


def test_the_corpus_covers_each_kind_of_refusal():
    kinds = {name for path in CORPUS for name in refused_by(path)}
    assert kinds == KNOWN - {"validate"}
    assert len(CORPUS) >= 20


def _refusal(capsys, argv: list[str]) -> tuple[int, str]:
    status = main(argv)
    return status, capsys.readouterr().err


class _ServeStarted(AssertionError):
    pass


def _no_engine(*args, **kwargs):
    raise _ServeStarted("serve accepted the configuration and would start the engine")


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_validate_refuses_as_the_commands_do(path, tmp_path, capsys, monkeypatch):
    status, said = _refusal(capsys, ["validate", str(path)])
    assert status == EXIT_CONFIG, said
    assert said.startswith("glm5svc: ") and "Traceback" not in said
    monkeypatch.setattr(serve_service, "Supervisor", _no_engine)
    for name in refused_by(path):
        if name == "serve-post-start":
            config = load_config(path)
            config = config.model_copy(
                update={"service": config.service.model_copy(update={"results_dir": tmp_path})}
            )
            with pytest.raises(ConfigError) as caught:
                run_post_start_benchmark(config)
            # the same rule, said where the file is not at hand (the service's log)
            assert said.startswith(f"glm5svc: {path}, line ")
            assert said.endswith(f": {caught.value.render()}\n")
            continue
        argv = ["--config", str(path), name]
        if name == "bench":
            argv += ["--results-dir", str(tmp_path)]
        status, command_said = _refusal(capsys, argv)
        assert (name, status) == (name, EXIT_CONFIG), command_said
        # serve logs its progress first; its last words are validate's.
        assert command_said.endswith(said), (name, command_said)
