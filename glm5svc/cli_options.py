"""Command-line options declared once: name, type, range, default and help in one call.

A numeric option is checked while the command line is parsed: a value out of range, `nan`
or `inf` ends the command with exit 2 and a message naming the option, what it accepts and
an example, before anything runs. An option that overrides a configuration key names that
key (`config="benchmark.input_len"`): its type, range and default are then the config
model's (glm5svc/config.py), stated nowhere else; argparse's default stays None so that the
loaded configuration's value applies. The CLI reference (docs/cli.md) is generated from the
parsers these calls build (glm5svc/docgen.py).
"""

from __future__ import annotations

import argparse
import math
import re
import typing
from dataclasses import dataclass
from typing import Any

import annotated_types
from pydantic import BaseModel

from glm5svc.config import MAX_SECONDS, Config, http_url_problem

_ASCII_WHOLE = re.compile(r"^[-+]?[0-9]+$")
_ASCII_NUMBER = re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$")

# annotated_types' bound -> (its attribute, the side it bounds, whether it excludes the bound)
_BOUNDS = {
    annotated_types.Gt: ("gt", "low", True),
    annotated_types.Ge: ("ge", "low", False),
    annotated_types.Lt: ("lt", "high", True),
    annotated_types.Le: ("le", "high", False),
}


@dataclass(frozen=True)
class Range:
    """Where a number may lie; None is unbounded on that side; *_open excludes the bound."""

    low: float | None = None
    low_open: bool = False
    high: float | None = None
    high_open: bool = False

    def contains(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (
            self.high is not None and (value >= self.high if self.high_open else value > self.high)
        )

    def describe(self) -> str:
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {_number(self.low)}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {_number(self.high)}")
        return " and ".join(parts) or "any finite number"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


@dataclass(frozen=True)
class Number:
    """argparse `type=` for a number: whole or decimal, finite, within its range."""

    kind: type  # int or float
    range: Range
    unit: str = ""
    example: float | str | None = None

    @property
    def __name__(self) -> str:  # argparse names the type in some messages
        return "whole number" if self.kind is int else "number"

    def accepts(self) -> str:
        what = f"a {self.__name__}" + (f" ({self.unit})" if self.unit else "")
        return f"{what}, {self.range.describe()}"

    def __call__(self, text: str) -> int | float:
        value = self.parse(text)
        if value is None or not self.range.contains(value):
            example = self.example if self.example is not None else self._inside()
            raise argparse.ArgumentTypeError(
                f"{text!r} is not allowed: give {self.accepts()} (for example {_shown(example)})"
            )
        return value

    def parse(self, text: str) -> int | float | None:
        if not _ASCII_NUMBER.match(text) or (self.kind is int and not _ASCII_WHOLE.match(text)):
            return None  # int() takes "1_000", " 8 " and digits of other scripts ("٨")
        try:
            value = int(text) if self.kind is int else float(text)
        except ValueError:
            return None
        return value if math.isfinite(value) else None

    def _inside(self) -> float:
        low = self.range.low if self.range.low is not None else 0
        return low + 1 if self.range.low_open or not self.range.contains(low) else low


@dataclass(frozen=True)
class Duration(Number):
    """Seconds, or a number with a unit: 90s, 45m, 2h."""

    UNITS: typing.ClassVar[dict[str, int]] = {"s": 1, "m": 60, "h": 3600}

    @property
    def __name__(self) -> str:
        return "duration"

    def accepts(self) -> str:
        return f"seconds or 90s, 45m, 2h; {self.range.describe()} seconds"

    def parse(self, text: str) -> float | None:
        scale = self.UNITS.get(text[-1:], 1)
        value = Number.parse(self, text[:-1] if text[-1:] in self.UNITS else text)
        return None if value is None else value * scale


@dataclass(frozen=True)
class NumberList(Number):
    """One or more whole numbers, separated by commas or spaces, each within the range."""

    def __call__(self, text: str) -> list[int]:
        return [Number.__call__(self, part) for part in text.replace(",", " ").split()] or [
            Number.__call__(self, text)
        ]


def config_field(key: str) -> tuple[Any, Any]:
    """(the pydantic field, its default in the default configuration) of `section.key`."""
    model: type[BaseModel] = Config
    value: Any = Config()
    field = None
    for part in key.split("."):
        field = model.model_fields[part]
        value = getattr(value, part)
        annotation = field.annotation
        model = annotation if isinstance(annotation, type) else model
    return field, value


def config_number(key: str, unit: str = "") -> Number:
    """The Number a config key allows: its kind and range from the model."""
    field, default = config_field(key)
    return field_number(field, default, unit)


def field_number(field: Any, default: Any, unit: str = "") -> Number:
    """The Number a pydantic field allows: its kind and range from its annotation."""
    kind, metadata = _kind_and_bounds(field.annotation, field.metadata)
    bounds: dict[str, Any] = {}
    for item in metadata:
        for cls, (attribute, side, is_open) in _BOUNDS.items():
            if isinstance(item, cls):
                bounds[side] = getattr(item, attribute)
                bounds[f"{side}_open"] = is_open
    if kind is float and "high" not in bounds and unit == "seconds":
        bounds["high"] = MAX_SECONDS
    example = default[0] if isinstance(default, list) else default
    return Number(kind=kind, range=Range(**bounds), unit=unit, example=example)


def _kind_and_bounds(annotation: Any, metadata: list) -> tuple[type, list]:
    """int or float and its annotated bounds, through Optional, list and Annotated."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is typing.Annotated:
        inner, *extra = typing.get_args(annotation)
        found = [m for e in extra for m in getattr(e, "metadata", [e])]
        return _kind_and_bounds(inner, metadata + found)
    if annotation in (int, float):
        return annotation, metadata
    if len(args) == 1:
        return _kind_and_bounds(args[0], metadata)
    raise TypeError(f"not a numeric config key: {annotation!r}")


def add_number(
    parser,
    *flags: str,
    help: str,  # noqa: A002 - argparse's name
    kind: type = float,
    range: Range | None = None,  # noqa: A002 - what it is
    unit: str = "",
    default: float | None = None,
    config: str | None = None,
    metavar: str | None = None,
    example: float | str | None = None,
    duration: bool = False,
    nargs: str | None = None,
    dest: str | None = None,
    choices: tuple[float, ...] | None = None,
) -> argparse.Action:
    """One numeric option: with `config`, the key's type, range and default apply."""
    if config is not None:
        number = config_number(config, unit)
        shown = config_field(config)[1]
        help = f"{help} (default: the config's {config}, {_shown(shown)})"
    else:
        example = default if example is None else example
        number = Number(kind=kind, range=range or Range(), unit=unit, example=example)
        if default is not None:
            shown = _duration_text(default) if duration and _is_number(default) else default
            help = f"{help} (default: {_shown(shown)})"
    if duration:
        number = Duration(kind=float, range=number.range, unit="seconds", example=number.example)
    if nargs:
        number = NumberList(kind=number.kind, range=number.range, unit=unit, example=number.example)
    help = f"{help}; " + (
        f"one of {', '.join(map(_shown, choices))}" if choices else number.accepts()
    )
    named = {"dest": dest} if dest else {}
    if choices:
        named["choices"] = choices
    return parser.add_argument(
        *flags,
        **named,
        type=number,
        default=default,
        metavar=metavar or ("TIME" if duration else "S" if unit == "seconds" else "N"),
        help=help.replace("%", "%%"),
        nargs=nargs,
    )


@dataclass(frozen=True)
class Option:
    """A pydantic field's command-line option, put in the field's `Annotated` metadata: the
    field gives the type, range, default and help (its description), this the rest."""

    flag: str
    group: str = ""  # the argparse group it is listed under
    duration: bool = False  # seconds, or 90s, 45m, 2h
    unit: str = ""
    metavar: str | None = None
    choices: tuple[float, ...] | None = None
    config: str | None = None  # overrides this configuration key (its range and default)


def option_of(field: Any) -> Option | None:
    return next((m for m in field.metadata if isinstance(m, Option)), None)


def add_model_options(groups: dict[str, Any], model: type[BaseModel]) -> None:
    """One option per field of `model` that has an Option, in `groups[option.group]`; the
    parsed value lands on the field's name (model_values reads them back)."""
    for name, field in model.model_fields.items():
        option = option_of(field)
        if option is None:
            continue
        if field.description is None:
            raise TypeError(f"{model.__name__}.{name}: an option needs the field's description")
        default = None if field.default is None else field.default
        if option.config is not None:
            add_number(groups[option.group], option.flag, help=field.description,
                       config=option.config, dest=name)  # fmt: skip
            continue
        number = field_number(field, default, option.unit)
        add_number(
            groups[option.group],
            option.flag,
            help=field.description,
            kind=number.kind,
            range=number.range,
            unit=option.unit,
            default=default,
            metavar=option.metavar,
            duration=option.duration,
            dest=name,
            choices=option.choices,
        )


def model_values(args: argparse.Namespace, model: type[BaseModel]) -> dict[str, Any]:
    """The values given on the command line (or their defaults) for `model`'s options."""
    return {
        name: getattr(args, name)
        for name, field in model.model_fields.items()
        if option_of(field) is not None and getattr(args, name, None) is not None
    }


def _duration_text(seconds: float) -> str:
    for suffix, scale in (("h", 3600), ("m", 60)):
        if seconds >= scale and float(seconds / scale).is_integer():
            return f"{int(seconds // scale)}{suffix}"
    return f"{_number(seconds)}s"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(map(str, value))
    return _number(value) if isinstance(value, int | float) else str(value)


def numeric_type(action: argparse.Action) -> Number | None:
    """The Number an option's value is checked against, if it is numeric."""
    return action.type if isinstance(action.type, Number) else None


def subparsers_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every sub-command's parser under `parser`, by its full name ("bench compare")."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:  # noqa: SLF001 - argparse offers no public walk
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for name, sub in action.choices.items():
                found[name] = sub
                found.update({f"{name} {k}": v for k, v in subparsers_of(sub).items()})
    return found


def config_path(text: str) -> str:
    """--config's value: a path; an empty one would silently fall back to $GLM5SVC_CONFIG."""
    if not text:
        raise argparse.ArgumentTypeError(
            "the path is empty; give the configuration file, or leave --config out to use "
            "$GLM5SVC_CONFIG or /etc/glm5/glm5.yaml"
        )
    return text


def http_url(text: str) -> str:
    """A URL option's value (--base-url, --replica, --gateway): http(s)://host[:port],
    refused while the command line is read, before a run folder or a request."""
    if problem := http_url_problem(text):
        raise argparse.ArgumentTypeError(problem)
    return text.rstrip("/")
