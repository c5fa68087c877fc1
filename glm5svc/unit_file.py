"""glm5.service for a given venv and configuration file, rendered from the shipped template;
glm5-tune.service (the unattended night, `glm5svc night`) and glm5-night-fallback.service
(its way back when systemd gives up on it) from their own.

The template (glm5svc/data/glm5.service.in) holds everything else; the open-file limit comes
from glm5svc.hostfacts.limits, the value the container's lxc.prlimit.nofile and preflight use.
"""

from __future__ import annotations

from pathlib import Path

from glm5svc.config import DEFAULT_CONFIG_PATH, Config, ServerSection
from glm5svc.errors import ConfigError
from glm5svc.hostfacts.limits import NOFILE

TEMPLATE = Path(__file__).parent / "data" / "glm5.service.in"
TUNE_TEMPLATE = Path(__file__).parent / "data" / "glm5-tune.service.in"
FALLBACK_TEMPLATE = Path(__file__).parent / "data" / "glm5-night-fallback.service.in"
NIGHT_CURRENT = "night-current"  # under service.results_dir (glm5svc.night.state names it)
# The venv of the default server.python (/opt/glm5/venv/bin/python).
DEFAULT_VENV = ServerSection.model_fields["python"].default.parent.parent
# systemd would read these inside a path as separators, quoting or specifiers.
UNSAFE_IN_PATH = set(" \t\n\"'\\%$;")


def _checked(name: str, path: Path) -> str:
    text = str(path)
    if not path.is_absolute():
        raise ConfigError(f"{name}: '{text}' must be an absolute path")
    bad = sorted(UNSAFE_IN_PATH & set(text))
    if bad:
        shown = " ".join(repr(char) for char in bad)
        raise ConfigError(f"{name}: '{text}' contains {shown}; choose a path without them")
    return text


# The folders systemd makes writable for the unit (StateDirectory=, CacheDirectory=,
# RuntimeDirectory=); a configured folder elsewhere is named in ReadWritePaths=.
MANAGED_FOLDERS = (Path("/var/lib/glm5"), Path("/var/cache/glm5"), Path("/run/glm5"))


def writable_folders(config: Config) -> list[Path]:
    """The configuration's folders the service writes that systemd does not manage."""
    wanted = [config.service.results_dir]
    if config.server.cache_dir is not None:
        wanted.append(config.server.cache_dir)
    return [
        path
        for path in dict.fromkeys(Path(p) for p in wanted)
        if not any(path == m or m in path.parents for m in MANAGED_FOLDERS)
    ]


def render_unit(
    venv: Path = DEFAULT_VENV,
    config_path: Path = DEFAULT_CONFIG_PATH,
    writable: list[Path] | tuple[Path, ...] = (),
) -> str:
    """The unit text; raises ConfigError for a path systemd would misread. `writable`:
    folders beyond the managed ones that ProtectSystem=strict must leave writable."""
    named = " ".join("-" + _checked("a writable folder", Path(p)) for p in writable)
    values = {
        "@GLM5SVC@": _checked("--venv", Path(venv)) + "/bin/glm5svc",
        "@CONFIG@": _checked("--config", Path(config_path)),
        "@NOFILE@": str(NOFILE),
        "@READ_WRITE_PATHS@": f"ReadWritePaths={named}" if named else "# (none)",
    }
    text = TEMPLATE.read_text(encoding="utf-8")
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    return text


def render_tune_unit(
    venv: Path = DEFAULT_VENV,
    config_path: Path = DEFAULT_CONFIG_PATH,
    results_dir: Path = MANAGED_FOLDERS[0],
) -> str:
    """glm5-tune.service: `glm5svc night resume` while a night is in progress."""
    return _night_unit(TUNE_TEMPLATE, venv, config_path, results_dir)


def render_fallback_unit(
    venv: Path = DEFAULT_VENV,
    config_path: Path = DEFAULT_CONFIG_PATH,
    results_dir: Path = MANAGED_FOLDERS[0],
) -> str:
    """glm5-night-fallback.service: `glm5svc night fallback`, glm5-tune.service's OnFailure=."""
    return _night_unit(FALLBACK_TEMPLATE, venv, config_path, results_dir)


def _night_unit(template: Path, venv: Path, config_path: Path, results_dir: Path) -> str:
    values = {
        "@GLM5SVC@": _checked("--venv", Path(venv)) + "/bin/glm5svc",
        "@CONFIG@": _checked("--config", Path(config_path)),
        "@CURRENT@": _checked("service.results_dir", Path(results_dir) / NIGHT_CURRENT),
    }
    text = template.read_text(encoding="utf-8")
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    return text
