"""Configuration files read strictly: UTF-8, YAML as people mean it, every key once, no
alias cycles, and the line of every key, for messages that name file, line, key and fix.

    document = read_yaml_file(path)          # or parse_yaml(text, source)
    document.data                            # dicts, lists, str, int, float, bool, None
    document.line_of(("server", "port"))     # 1-based line of that key (or its parent's)

Every problem is a ConfigError (exit 78) naming the file and line; nothing from PyYAML,
the codec or the recursion limit reaches the user.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from glm5svc.errors import ConfigError

_NUMBER_AND_BOOL_TAGS = (
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:timestamp",
)
LEADING_ZERO_TAG = "tag:glm5svc,2026:leading-zero-number"
# Tags with a meaning no configuration key has: read as something else, or refused.
REFUSED_TAGS = (
    "tag:yaml.org,2002:binary",
    "tag:yaml.org,2002:timestamp",
    "tag:yaml.org,2002:set",
    "tag:yaml.org,2002:omap",
    "tag:yaml.org,2002:pairs",
)
# A configuration is at most five levels deep (benchmark.post_start.ladder.0); deeper
# nesting, or aliases expanding past this many values, is not a configuration.
MAX_DEPTH = 32
MAX_VALUES = 100_000
_SURROGATE = re.compile("[\ud800-\udfff]")
_KINDS = {bool: "true/false", int: "a number", float: "a number", type(None): "null"}
SYNTAX_FIX = (
    "fix the YAML there (indent with spaces, 'key: value' with a space after the colon; "
    "quote values that contain ': ', ' #' or start with one of [ ] { } & * ! | > ' \" % @ `)"
)


class ConfigLoader(yaml.SafeLoader):
    """YAML as people mean it: only true/false are booleans, and no silent octal.

    PyYAML implements YAML 1.1, where `on`, `off`, `yes`, `no`, `y`, `n` are booleans
    (the documented `radix_cache: off` would arrive as False) and `030000` is octal 12288;
    `1:30` is sexagesimal 90; `2026-01-02` a date. Here `on`/`off`/`yes`/`no` stay strings
    (pydantic still reads them as booleans where a boolean is expected), a number with a
    leading zero is refused, sexagesimal numbers and dates stay strings, and the tags
    !!binary, !!timestamp, !!set, !!omap and !!pairs are refused.
    """


ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _NUMBER_AND_BOOL_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:[-+]?(?:0|[1-9][0-9_]*)|0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"),
)
ConfigLoader.add_implicit_resolver(LEADING_ZERO_TAG, re.compile(r"^[-+]?0[0-9_]+$"), list("-+0"))
ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?"""
        r"""|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)"""
        r"""|\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"""
    ),
    list("-+0123456789."),
)


def _constructor_error(node: yaml.Node, problem: str) -> yaml.constructor.ConstructorError:
    return yaml.constructor.ConstructorError(None, None, problem, node.start_mark)


def _refuse_leading_zero(loader: yaml.SafeLoader, node: yaml.Node):
    raise _constructor_error(
        node,
        f"the number {node.value} has a leading zero: YAML 1.1 reads it as octal "
        f"({_octal_reading(node.value)}), other readers as decimal; write it without the "
        "leading zero, or quote it if a string is meant",
    )


def _octal_reading(text: str) -> str:
    try:
        return str(int(text.replace("_", ""), 8))
    except ValueError:
        return "not a valid octal number"


def _refuse_tag(loader: yaml.SafeLoader, node: yaml.Node):
    raise _constructor_error(
        node,
        f"the tag {node.tag.replace('tag:yaml.org,2002:', '!!')} is not used in this "
        "configuration; remove it (quote the value if it is text)",
    )


def _unknown_tag(loader: yaml.SafeLoader, node: yaml.Node):
    raise _constructor_error(
        node, f"the tag '{node.tag}' is not known here; remove it (quote the value if it is text)"
    )


def _int(loader: yaml.SafeLoader, node: yaml.Node) -> int:
    try:
        return yaml.SafeLoader.construct_yaml_int(loader, node)
    except ValueError:  # `!!int yes`, or more digits than Python converts
        too_long = re.fullmatch(r"[-+]?[0-9_]+", node.value)
        problem = "the number has too many digits" if too_long else "not a whole number"
        raise _constructor_error(node, f"{node.value[:20]!r}: {problem}") from None


def _float(loader: yaml.SafeLoader, node: yaml.Node) -> float:
    try:
        return yaml.SafeLoader.construct_yaml_float(loader, node)
    except ValueError:
        raise _constructor_error(node, f"{node.value!r} is not a number") from None


def _bool(loader: yaml.SafeLoader, node: yaml.Node) -> bool:
    value = loader.construct_scalar(node)
    if value.lower() not in ("true", "false"):
        raise _constructor_error(node, f"{value[:20]!r} is not true or false; write one of them")
    return value.lower() == "true"


def _null(loader: yaml.SafeLoader, node: yaml.Node) -> None:
    if loader.construct_scalar(node) not in ("", "~", "null", "Null", "NULL"):
        raise _constructor_error(node, f"{node.value[:20]!r} is not null; write null")


ConfigLoader.add_constructor(LEADING_ZERO_TAG, _refuse_leading_zero)
ConfigLoader.add_constructor("tag:yaml.org,2002:int", _int)
ConfigLoader.add_constructor("tag:yaml.org,2002:float", _float)
# Explicit !!bool and !!null take what they mean only (PyYAML: `!!bool yes` is True,
# `!!null anything` is None).
ConfigLoader.add_constructor("tag:yaml.org,2002:bool", _bool)
ConfigLoader.add_constructor("tag:yaml.org,2002:null", _null)
ConfigLoader.add_constructor(None, _unknown_tag)
for _tag in REFUSED_TAGS:
    ConfigLoader.add_constructor(_tag, _refuse_tag)


@dataclass(frozen=True)
class YamlDocument:
    data: Any
    lines: dict[tuple[str, ...], int] = field(default_factory=dict)

    def line_of(self, path: tuple[Any, ...] | list[Any]) -> int | None:
        """The line of the key at `path`, else of its nearest enclosing key."""
        parts = tuple(str(part) for part in path)
        for end in range(len(parts), 0, -1):
            if parts[:end] in self.lines:
                return self.lines[parts[:end]]
        return None


_FILE_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def read_regular_bytes(path: Path) -> bytes:
    """A regular file's bytes. It is opened with O_NONBLOCK and checked with fstat before
    anything is read, so a FIFO or a device is refused at once (OSError whose strerror says
    what it is) instead of blocking the command. /dev/null reads as the empty file it is."""
    if os.path.realpath(path) == os.devnull:
        return b""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a file")
            raise OSError(errno.EINVAL, f"it is {kind}, not a regular file", str(path))
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as stream:
            return stream.read()
    finally:
        os.close(fd)


def read_config_bytes(path: Path, source: str | None = None) -> str:
    """The file's text; ConfigError naming the line of a byte that is not UTF-8."""
    source = source or str(path)
    data = read_regular_bytes(Path(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{source}, line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start}); save the file as UTF-8"
        ) from None


def parse_yaml(text: str, source: str) -> YamlDocument:
    """One YAML document, checked and with its key lines; ConfigError on any problem."""
    loader = None
    try:
        loader = ConfigLoader(text)  # checks the characters: ReaderError
        node = loader.get_single_node()
        if node is None:
            return YamlDocument(None)
        lines: dict[tuple[str, ...], int] = {}
        _Walk(loader, source, lines).size(node, (), 0, set())
        return YamlDocument(loader.construct_document(node), lines)
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(_marked_message(exc, source, text)) from None
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        raise ConfigError(
            f"{source}, line {line}: the character U+{exc.character:04X} is not allowed in "
            "YAML (a control character); remove it"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}; {SYNTAX_FIX}") from None
    except RecursionError:
        raise ConfigError(
            f"{source}: nested too deeply to read (a configuration has at most "
            f"{MAX_DEPTH} levels); remove the nesting"
        ) from None
    finally:
        if loader is not None:
            loader.dispose()


def _marked_message(exc: yaml.MarkedYAMLError, source: str, text: str) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f"{source}, line {mark.line + 1}, column {mark.column + 1}" if mark else source
    if isinstance(exc, yaml.constructor.ConstructorError) and exc.context is None:
        return f"{where}: {exc.problem}"  # our own, already with the fix
    problem = exc.problem or "not valid YAML"
    context = ""
    if exc.context:
        context_line = f" at line {exc.context_mark.line + 1}" if exc.context_mark else ""
        context = f" ({exc.context}{context_line})"
    return f"{where}: not valid YAML: {problem}{context}; {SYNTAX_FIX}"


class _Walk:
    """Duplicate keys, alias cycles, depth and expanded size, checked before any value
    is constructed (a cycle or a billion laughs would otherwise hang or crash later)."""

    def __init__(self, loader: ConfigLoader, source: str, lines: dict[tuple[str, ...], int]):
        self.loader = loader
        self.source = source
        self.lines = lines
        self.sizes: dict[int, int] = {}

    def size(self, node: yaml.Node, path: tuple[str, ...], depth: int, open_: set[int]) -> int:
        if id(node) in open_:
            raise self._error(
                node,
                "an alias refers to a value that contains it (a cycle); write the value out",
            )
        if id(node) in self.sizes:
            return self.sizes[id(node)]
        if depth > MAX_DEPTH:
            raise self._error(
                node, f"nested more than {MAX_DEPTH} levels deep; no key is that deep"
            )
        open_.add(id(node))
        total = 1
        if isinstance(node, yaml.ScalarNode):
            self._no_surrogate(node)
        if isinstance(node, yaml.MappingNode):
            total += self._mapping(node, path, depth, open_)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                self.lines.setdefault((*path, str(index)), item.start_mark.line + 1)
                total += self.size(item, (*path, str(index)), depth + 1, open_)
        open_.discard(id(node))
        if total > MAX_VALUES:
            raise self._error(
                node, f"aliases expand this to more than {MAX_VALUES} values; write it out"
            )
        self.sizes[id(node)] = total
        return total

    def _mapping(self, node: yaml.MappingNode, path, depth: int, open_: set[int]) -> int:
        seen: dict[Any, int] = {}
        total = 0
        for key, value in node.value:
            if key.tag == "tag:yaml.org,2002:merge":
                merged = value.value if isinstance(value, yaml.SequenceNode) else [value]
                for source in merged:
                    total += self.size(source, path, depth, open_)
                continue
            if isinstance(key, yaml.ScalarNode):
                self._no_surrogate(key)
                # The key as it will be read (`0x1` is 1), as pydantic names it in errors.
                name = self.loader.construct_object(key)
                line = key.start_mark.line + 1
                if not isinstance(name, str):
                    raise self._error(
                        key,
                        f"the key {key.value or repr(key.value)} is read as "
                        f"{_KINDS.get(type(name), type(name).__name__)}, not as a name; every "
                        "key is a name here: quote it if it is one, or remove it",
                    )
                if name in seen:
                    raise self._error(
                        key,
                        f"the key '{key.value}' is given twice (lines {seen[name]} and "
                        f"{line}); keep one",
                    )
                seen[name] = line
                self.lines[(*path, str(name))] = line
                total += self.size(value, (*path, str(name)), depth + 1, open_)
            else:
                raise self._error(key, "a key must be a name, not a list or mapping; remove it")
        return total

    def _no_surrogate(self, node: yaml.ScalarNode) -> None:
        if _SURROGATE.search(node.value):
            raise self._error(
                node,
                "the text holds half of a UTF-16 pair (an escape \\ud800-\\udfff), which no "
                "path, argument or log line can carry; write the character itself",
            )

    def _error(self, node: yaml.Node, problem: str) -> ConfigError:
        return ConfigError(f"{self.source}, line {node.start_mark.line + 1}: {problem}")
