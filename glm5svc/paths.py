"""What is at a path the user gave, in the system's own words, and the fix.

Every command that reads a path it was given asks here first, so a file where a folder is
expected, a loop of links or a FIFO reads the same everywhere: the option, the path, the
system's wording (`os.strerror`: "Is a directory", "Not a directory", "Too many levels of
symbolic links", "No such file or directory", "Permission denied") and what to do. Nothing
here opens what it classifies: a read of a FIFO blocks until a writer comes, so only
`stat`, `lstat`, `readlink`, `access` and, for a folder, `scandir` are used.

`PATH_RULES` lists every option that takes a path; docs/reliability.md's table is made
from it (`python -m glm5svc.docgen`).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

from glm5svc.errors import ConfigError

FILE = "file"
DIRECTORY = "directory"


class Kind(Enum):
    FILE = "a regular file"
    DIRECTORY = "a directory"
    MISSING = "missing"
    NOT_A_DIRECTORY = "not a directory"  # a file where a folder is expected, here or above
    IS_A_DIRECTORY = "a directory where a file is expected"
    DANGLING_LINK = "a dangling symbolic link"
    LOOPING_LINK = "a looping symbolic link"
    SPECIAL = "a FIFO, socket or device"
    UNREADABLE = "unreadable"
    EMPTY = "empty"


_SPECIAL_KINDS = (
    (stat.S_ISFIFO, "a FIFO, a named pipe"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


@dataclass(frozen=True)
class Finding:
    kind: Kind
    said: str  # the system's words, and what is there
    on_the_way: bool = False  # NOT_A_DIRECTORY for a folder the path goes through


def _special(mode: int) -> str:
    return next((name for test, name in _SPECIAL_KINDS if test(mode)), "not a regular file")


def classify(path: str | os.PathLike, expect: str) -> Finding:
    """What is at `path`, judged against what is expected there (FILE or DIRECTORY)."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return _unstattable(path, exc)
    if expect == DIRECTORY:
        if not stat.S_ISDIR(mode):
            what = "a regular file" if stat.S_ISREG(mode) else _special(mode)
            return Finding(Kind.NOT_A_DIRECTORY, f"{os.strerror(errno.ENOTDIR)} (it is {what})")
        if not os.access(path, os.R_OK | os.X_OK):
            return Finding(Kind.UNREADABLE, os.strerror(errno.EACCES))
        with os.scandir(path) as entries:
            if next(entries, None) is None:
                return Finding(Kind.EMPTY, "the folder is empty")
        return Finding(Kind.DIRECTORY, "a directory")
    if stat.S_ISDIR(mode):
        return Finding(Kind.IS_A_DIRECTORY, os.strerror(errno.EISDIR))
    if os.path.realpath(path) == os.devnull:  # reads as the empty file it is
        return Finding(Kind.EMPTY, "the file is empty (the null device)")
    if not stat.S_ISREG(mode):
        return Finding(Kind.SPECIAL, f"it is {_special(mode)}, not a regular file")
    if not os.access(path, os.R_OK):
        return Finding(Kind.UNREADABLE, os.strerror(errno.EACCES))
    if os.stat(path).st_size == 0:
        return Finding(Kind.EMPTY, "the file is empty")
    return Finding(Kind.FILE, "a regular file")


def _unstattable(path: Path, exc: OSError) -> Finding:
    said = os.strerror(exc.errno) if exc.errno else str(exc)
    if exc.errno == errno.ELOOP:
        return Finding(Kind.LOOPING_LINK, f"{said} (the symbolic links loop)")
    if exc.errno == errno.ENOTDIR:
        return Finding(Kind.NOT_A_DIRECTORY, f"{said} (a folder on the way is a file)", True)
    if exc.errno == errno.ENOENT:
        if path.is_symlink():
            target = os.readlink(path)
            return Finding(
                Kind.DANGLING_LINK, f"{said} (a symbolic link to {target}, which does not exist)"
            )
        return Finding(Kind.MISSING, said)
    return Finding(Kind.UNREADABLE, said)


@dataclass(frozen=True)
class PathRule:
    """One option or key that takes a path: what it expects and the fix for each kind."""

    option: str  # as the user writes it: "--space", "server.api_key_file"
    expect: str  # FILE or DIRECTORY
    what: str  # "the search space file (YAML)"
    if_missing: str  # the fix when nothing is there
    if_empty: str | None = None  # the fix when it is empty; None: empty is fine
    missing_ok: bool = False  # created when absent (a results folder)
    used_by: str = ""  # the commands that read it (docs/reliability.md's table)
    refusal: str = "exit 78"  # what a problem does to the command

    def problem(self, path: str | os.PathLike) -> str | None:
        """`option: path: what the system says; the fix`, or None when it can be used."""
        said_and_fix = self.said_and_fix(path)
        return "; ".join(said_and_fix) if said_and_fix else None

    def said_and_fix(self, path: str | os.PathLike) -> tuple[str, str] | None:
        """(`option: path: what the system says`, the fix), or None when it can be used."""
        finding = classify(path, self.expect)
        fix = self._fix(finding.kind)
        if finding.on_the_way:
            fix = f"give the path of {self.what}: a folder on the way to it is a file"
        if fix is None:
            return None
        return f"{self.option}: {path}: {finding.said}", fix

    def check(self, path: str | os.PathLike) -> None:
        if problem := self.problem(path):
            raise ConfigError(problem)

    def _fix(self, kind: Kind) -> str | None:
        folder = self.expect == DIRECTORY
        fixes = {
            Kind.MISSING: None if self.missing_ok else self.if_missing,
            Kind.DANGLING_LINK: f"point the link at {self.what}, or {self.if_missing}",
            Kind.LOOPING_LINK: f"replace the links with {self.what}",
            Kind.NOT_A_DIRECTORY: f"give {self.what}, not a file",
            Kind.IS_A_DIRECTORY: f"give {self.what} itself, not a folder",
            Kind.SPECIAL: f"give {self.what}" + (", a folder" if folder else ", a regular file"),
            Kind.UNREADABLE: f"make {self.what} readable by this user (uid {os.getuid()})",
            Kind.EMPTY: self.if_empty,
        }
        return fixes.get(kind)


CONFIG = PathRule(
    "configuration",  # --config, $GLM5SVC_CONFIG, validate FILE or /etc/glm5/glm5.yaml
    FILE,
    "the configuration file (YAML)",
    "create it (example: glm5svc/data/glm5.example.yaml) or pass --config / set GLM5SVC_CONFIG",
    used_by="every command that reads the configuration (`validate FILE` too)",
)
API_KEY_FILE = PathRule(
    "server.api_key_file",
    FILE,
    "the API key file",
    "create it (one line, the key) readable by the service, or set api_key_file: null",
    if_empty="put the API key in it",
    used_by="`validate`, `command`, `serve`, `bench`, `glm5svc status --fleet`",
)
MODEL_PATH = PathRule(
    "model.path",
    DIRECTORY,
    "the checkpoint's folder",
    "download the checkpoint into it (docs/operations.md), or fix model.path",
    missing_ok=True,  # not downloaded yet: the plan is made for the reference model
    used_by="`validate`, `command`, `serve`, `tune` (then a folder without config.json is "
    "refused too)",
)
PREFLIGHT_MODEL_PATH = replace(
    MODEL_PATH,
    missing_ok=False,
    used_by="`preflight` (and `serve`'s preflight): its model directory row",
    refusal="a failed row, exit 1",
)
SPACE = PathRule(
    "--space",
    FILE,
    "the search space file (YAML, like glm5svc/data/tune-space.yaml)",
    "write it there, or leave out validate's or tune's --space for the shipped space",
    if_empty="list the knobs in it (like glm5svc/data/tune-space.yaml)",
    used_by="`tune run`, `glm5svc validate --space`",
)
RUN_DIR = PathRule(
    "--run-dir",
    DIRECTORY,
    "a folder for the run (a new one is created)",
    "",
    missing_ok=True,
    used_by="`tune run`",
)
RESUME = PathRule(
    "--resume",
    DIRECTORY,
    "the run folder of an earlier `glm5svc tune run`",
    "give the folder `tune run` printed at its start",
    if_empty="give the folder `tune run` printed at its start (this one holds no study)",
    used_by="`tune run`",
)
TUNED_RUN = PathRule(
    "RUN_DIR",
    DIRECTORY,
    "the run folder of a `glm5svc tune run`",
    "give the folder `tune run` printed at its start",
    if_empty="give the folder `tune run` printed at its start (this one holds no study)",
    used_by="`tune apply`, `tune show`",
)
REQUEST_FILE = PathRule(
    "--request-file",
    FILE,
    "the request file (JSON lines)",
    "write the recorded requests there, or leave out bench's or tune's --request-file",
    if_empty='write one request per line, e.g. {"input_len": 812, "output_len": 230}',
    used_by="`bench`, `tune run`",
)
BENCHMARK_REQUEST_FILE = PathRule(
    "benchmark.request_file",
    FILE,
    "the request file (JSON lines)",
    "write the recorded requests there, or set request_file: null",
    if_empty='write one request per line, e.g. {"input_len": 812, "output_len": 230}',
    used_by="`validate`, `bench`, `tune run`",
)
RESULTS_DIR = PathRule(
    "--results-dir",
    DIRECTORY,
    "a folder for the results (created when missing)",
    "",
    missing_ok=True,
    used_by="`bench`",
)
SERVICE_RESULTS_DIR = PathRule(
    "service.results_dir",
    DIRECTORY,
    "a folder for the results (created when missing)",
    "",
    missing_ok=True,
    used_by="`validate`, `bench`",
)

# Inside a run folder, not an option: judged before sqlite opens it (a FIFO would block).
STUDY_DB = PathRule(
    "study.db",
    FILE,
    "the study's SQLite database (Optuna's; `tune run` writes it)",
    "",
    missing_ok=True,
    used_by="`glm5svc tune run --resume`",
)


def check_config_paths(config: Any, request_file: bool = True, results: bool = True) -> None:
    """A configuration's benchmark.request_file and service.results_dir, as `bench` reads
    and writes them (`validate` checks them the same way)."""
    if request_file and config.benchmark.request_file is not None:
        BENCHMARK_REQUEST_FILE.check(config.benchmark.request_file)
    if results:
        SERVICE_RESULTS_DIR.check(config.service.results_dir)


PATH_RULES = (
    CONFIG,
    API_KEY_FILE,
    MODEL_PATH,
    PREFLIGHT_MODEL_PATH,
    SPACE,
    RUN_DIR,
    RESUME,
    TUNED_RUN,
    REQUEST_FILE,
    BENCHMARK_REQUEST_FILE,
    RESULTS_DIR,
    SERVICE_RESULTS_DIR,
)
