"""The search space: which settings `glm5svc tune` tries, as data per target and sglang.

glm5svc/data/tune-space.yaml is the default (`--space FILE` replaces it, same schema).
A candidate is a mapping knob -> value; applied to the operator's configuration it gives
a trial configuration, which is validated and rendered by the launch plan like any
other, so the plan's rules hold for every trial.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from glm5svc import paths
from glm5svc.config import Config, config_from_mapping, describe_error, section_keys
from glm5svc.config_yaml import YamlDocument, parse_yaml, read_config_bytes
from glm5svc.errors import ConfigError
from glm5svc.sglang_flags import version_problem
from glm5svc.tune.live_knobs import LIVE_SERVER_ARGS, is_live_capable

DEFAULT_SPACE = Path(__file__).resolve().parents[1] / "data" / "tune-space.yaml"
CAP_KNOB = "tuning.max_running_requests"
Value = None | bool | int | float | str


class _KnobSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str | None = None
    flag: str | None = None
    values: list[Value] | None = None
    by_target: dict[str, list[Value]] | None = None
    kv_pool: bool = False
    moe_only: bool = False
    restart: bool = True  # false: changed on the running engine (glm5svc/tune/live_knobs.py)

    @model_validator(mode="after")
    def _one_of_each(self) -> _KnobSpec:
        if (self.key is None) == (self.flag is None):
            raise ValueError("give exactly one of `key` (a config key) or `flag` (--flag)")
        if self.key is not None and (
            self.key.count(".") != 1 or self.key.split(".")[0] not in ("tuning",)
        ):
            raise ValueError(f"key {self.key!r}: only tuning.<name> keys can be searched")
        if self.flag is not None and not self.flag.startswith("--"):
            raise ValueError(f"flag {self.flag!r}: a launch_server flag starts with --")
        if (self.values is None) == (self.by_target is None):
            raise ValueError("give exactly one of `values` or `by_target`")
        if not self.restart:
            name = self.key or self.flag
            if not is_live_capable(name or ""):
                raise ValueError(
                    f"{name}: `restart: false` only for what sglang changes while it serves "
                    f"({', '.join(LIVE_SERVER_ARGS)}); remove it"
                )
            lists = [self.values or []] + list((self.by_target or {}).values())
            values = [v for each in lists for v in each]
            if any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in values):
                raise ValueError(
                    f"{name}: a live knob's values are whole numbers of at least 1 (null, the "
                    "engine's own choice, needs `restart: true`)"
                )
        return self


class _SpaceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    knobs: list[_KnobSpec]


@dataclass(frozen=True)
class Knob:
    name: str  # "tuning.<key>" or "--flag"
    values: tuple[Value, ...]
    kv_pool: bool = False
    restart: bool = True  # False: set on the running engine, measured within a start

    @property
    def is_flag(self) -> bool:
        return self.name.startswith("--")


@dataclass
class Space:
    knobs: list[Knob]
    source: str
    left_out: list[str] = field(default_factory=list)  # knob or value, and why

    def knob(self, name: str) -> Knob:
        return next(k for k in self.knobs if k.name == name)

    @property
    def restart_knobs(self) -> list[Knob]:
        return [k for k in self.knobs if k.restart]

    @property
    def live_knob(self) -> Knob | None:
        """The knob measured within each start (at most one: the running-request cap)."""
        return next((k for k in self.knobs if not k.restart), None)

    def for_concurrency(self, concurrency: int) -> Space:
        """Caps at or above the concurrency behave alike (the client never has more in
        flight): they count as one value, the first of them in the knob's order."""
        knobs, left_out = [], list(self.left_out)
        for knob in self.knobs:
            if knob.name != CAP_KNOB:
                knobs.append(knob)
                continue
            kept: list[Value] = []
            high: Value = None
            for value in knob.values:
                if isinstance(value, int) and not isinstance(value, bool) and value >= concurrency:
                    if high is not None:
                        left_out.append(
                            f"{knob.name}={value}: at concurrency {concurrency} it behaves as "
                            f"{high} (both are at least the concurrency), measured once"
                        )
                        continue
                    high = value
                kept.append(value)
            knobs.append(Knob(knob.name, tuple(kept), knob.kv_pool, knob.restart))
        return Space(knobs, self.source, left_out)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "knobs": [
                {
                    "name": k.name,
                    "values": list(k.values),
                    "kv_pool": k.kv_pool,
                    "restart": k.restart,
                }
                for k in self.knobs
            ],
            "left_out": list(self.left_out),
        }


def space_from_dict(data: dict[str, Any]) -> Space:
    """The space a run directory saved (tune.json): a resumed study searches the same."""
    return Space(
        [
            Knob(k["name"], tuple(k["values"]), bool(k.get("kv_pool")), k.get("restart", True))
            for k in data["knobs"]
        ],
        str(data.get("source", "tune.json")),
        list(data.get("left_out") or []),
    )


def read_space_file(path: Path | None) -> _SpaceFile:
    if path:
        paths.SPACE.check(path)
    path = Path(path) if path else DEFAULT_SPACE
    source = f"--space {path}"
    try:
        text = read_config_bytes(path, source)
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read: {exc.strerror or exc}") from None
    document = parse_yaml(text, source)  # strict: UTF-8, each key once, no alias cycles
    try:
        spec = _SpaceFile.model_validate(document.data)
    except ValidationError as exc:
        problems = [
            describe_error(err, document, _SpaceFile) for err in exc.errors(include_url=False)
        ]
        raise ConfigError(f"--space {path}: not a search space", problems=problems) from None
    if problems := knob_key_problems(spec, document):
        raise ConfigError(
            f"--space {path}: knobs the configuration cannot take (each candidate would be "
            "refused); fix the key or the value in the space file",
            problems=problems,
        )
    return spec


# Why one knob's value cannot run on this host with the configuration's other settings
# (the launch plan's engine limits: glm5svc/engine_limits.py), or None.
Refusal = Callable[[str, Value], "str | None"]


def load_space(
    path: Path | None,
    config: Config,
    moe: bool,
    sglang_version: str | None,
    refuse: Refusal | None = None,
) -> Space:
    """The knobs for this target, model and sglang; what is left out says why. `refuse`
    leaves out each value the launch plan would refuse on this host (an engine that cannot
    run there), so no trial is spent on it."""
    spec = read_space_file(path)
    space = Space([], str(path or DEFAULT_SPACE))
    target = config.gpus.target
    for knob in spec.knobs:
        name = knob.key or knob.flag
        if knob.moe_only and not moe:
            space.left_out.append(f"{name}: the model is not a mixture of experts")
            continue
        values = knob.values if knob.values is not None else knob.by_target.get(target)
        if values is None:
            space.left_out.append(f"{name}: no values for target {target}")
            continue
        if knob.flag and sglang_version:
            problem = version_problem(knob.flag, sglang_version)
            if problem:
                space.left_out.append(f"{name}: {problem}")
                continue
        start = start_value(config, name)
        ordered = [start] + [v for v in values if v != start]
        if refuse is not None:
            ordered = [start] + _runnable(name, ordered[1:], refuse, space.left_out)
        restart = knob.restart
        if not restart and not isinstance(start, int):
            restart = True
            space.left_out.append(
                f"{name}: measured with restarts, not live (the configuration leaves it to "
                "sglang, and a live value must be at most the cap the engine started with)"
            )
        space.knobs.append(Knob(name, tuple(_dedupe(ordered)), knob.kv_pool, restart))
    if not space.knobs:
        raise ConfigError(
            f"{space.source}: nothing to search for target {target}",
            problems=space.left_out,
        )
    return space


def _runnable(name: str, values: list[Value], refuse: Refusal, left_out: list[str]) -> list[Value]:
    kept = []
    for value in values:
        if reason := refuse(name, value):
            left_out.append(f"{name}={value}: the launch plan refuses it on this host: {reason}")
        else:
            kept.append(value)
    return kept


def _dedupe(values: list[Value]) -> list[Value]:
    seen: list[Value] = []
    for value in values:
        if not any(_same(value, s) for s in seen):
            seen.append(value)
    return seen


def start_value(config: Config, name: str) -> Value:
    """The knob's value in the operator's configuration (defaults included)."""
    if name.startswith("--"):
        args = list(config.server.extra_args)
        if name not in args:
            return None
        at = args.index(name)
        following = args[at + 1] if at + 1 < len(args) else None
        if following is None or following.startswith("--"):
            return True
        return _number_or_text(following)
    section, key = name.split(".", 1)
    return getattr(getattr(config, section), key)


def _number_or_text(text: str) -> Value:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def apply_candidate(mapping: dict[str, Any], candidate: dict[str, Value]) -> dict[str, Any]:
    """The configuration mapping with the candidate's settings (the input is not changed)."""
    result = copy.deepcopy(mapping)
    for name, value in candidate.items():
        if name.startswith("--"):
            server = result.setdefault("server", {}) or {}
            result["server"] = server
            args = _without_flag(list(server.get("extra_args") or []), name)
            if value is True:
                args.append(name)
            elif value is not None and value is not False:
                args += [name, str(value)]
            server["extra_args"] = args
        else:
            section, key = name.split(".", 1)
            block = result.get(section) or {}
            result[section] = block
            block[key] = value
    return result


def _without_flag(args: list[str], flag: str) -> list[str]:
    kept, skip = [], False
    for index, token in enumerate(args):
        if skip:
            skip = False
            continue
        if token == flag:
            following = args[index + 1] if index + 1 < len(args) else None
            skip = following is not None and not following.startswith("--")
            continue
        kept.append(token)
    return kept


def overlay_of(candidate: dict[str, Value], start: dict[str, Value]) -> dict[str, Value]:
    """Only what differs from the start."""
    return {k: v for k, v in candidate.items() if not _same(start.get(k), v)}


def _same(a: Value, b: Value) -> bool:
    return a == b and type(a) is type(b)


def trial_config(mapping: dict[str, Any], source: str) -> Config:
    return config_from_mapping(mapping, source)


def knob_key_problems(spec: _SpaceFile, document: YamlDocument) -> list[str]:
    """Each `key` knob checked against the configuration's schema: a key it has, and values
    that key takes (what the trial's configuration would otherwise refuse, trial by trial)."""
    problems = []
    for index, knob in enumerate(spec.knobs):
        if knob.key is None:
            continue
        section, name = knob.key.split(".", 1)
        model, keys = section_keys(section)
        at = f"knobs.{index}.key"
        line = document.line_of(("knobs", index, "key"))
        where = f"line {line}: {at}" if line else at
        if name not in keys:
            close = difflib.get_close_matches(name, keys, n=1)
            hint = f"; did you mean {section}.{close[0]}?" if close else ""
            problems.append(
                f"{where}: {knob.key} is not a configuration key{hint} (the {section} keys: "
                f"{', '.join(keys)})"
            )
            continue
        lists = [("values", knob.values or [])] + [
            (f"by_target.{target}", values) for target, values in (knob.by_target or {}).items()
        ]
        for label, values in lists:
            for position, value in enumerate(values):
                try:
                    model.model_validate({name: value})
                except ValidationError as exc:
                    for err in exc.errors(include_url=False):
                        if tuple(err["loc"]) != (name,):
                            continue
                        loc = ("knobs", index, *label.split("."), position)
                        line = document.line_of(loc)
                        said = describe_error(err)  # "<name>: <what the key takes>"
                        at = ".".join(map(str, loc))
                        prefix = f"line {line}: {at}" if line else at
                        problems.append(f"{prefix}: {section}.{said}")
    return problems
