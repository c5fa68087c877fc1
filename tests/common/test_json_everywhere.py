"""`glm5svc <command> --json` prints one JSON document on stdout on every exit path.

The commands come from the parser (glm5svc.cli.json_commands), so a new command with --json
is covered at once: its usage error and a broken configuration file below, and the check
that its own cases are listed in CASES. Each case runs the real command line and parses
stdout as JSON: the envelope of glm5svc.json_output (schema, ok as the exit status says,
error/exit_status/problems on failure, the error on stderr too).
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from glm5svc.bench.results import SUMMARY_SCHEMA
from glm5svc.cli import build_parser, json_commands, main
from glm5svc.json_output import schema_name
from glm5svc.night.report import REPORT_SCHEMA, report_document
from glm5svc.night.state import NightState
from glm5svc.tune.confirmation import confirmation_for
from testkit.engine import free_port
from tests.support.fake_bench_serving import fake_python

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "glm5svc" / "data" / "glm5.example.yaml"
TUNE_RUN = REPO / "tests/fixtures/real_engine/sglang-0.5.11-h200-tune-before/tune-run"
SHIPPED_BASELINE = "reference-8x-rtx-pro-6000"


class Env:
    """What the cases need: files and stand-in servers under tmp_path."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self._servers: list[ThreadingHTTPServer] = []

    def file(self, name: str, text: str) -> str:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return str(path)

    def listening(self, body: bytes, status: int = 200) -> int:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802 - stdlib name
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self._servers.append(server)
        return server.server_address[1]

    def service_config(self, port: int) -> str:
        return self.file(
            f"svc-{port}.yaml", f"service: {{listen_host: 127.0.0.1, listen_port: {port}}}\n"
        )

    def status_answering(self, body: bytes) -> list[str]:
        return ["--config", self.service_config(self.listening(body)), "status"]

    def fake_sglang(self) -> str:
        """A site-packages with an sglang older than every patch (each is not applicable)."""
        site = self.tmp / "site"
        (site / "sglang").mkdir(parents=True)
        (site / "sglang" / "__init__.py").write_text("")
        (site / "sglang" / "version.py").write_text('__version__ = "0.4.0"\n')
        (site / "sglang-0.4.0.dist-info").mkdir()
        (site / "sglang-0.4.0.dist-info" / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: sglang\nVersion: 0.4.0\n"
        )
        return str(site)

    def bench(self, server: bool = True, steady: bool = False) -> list[str]:
        """A fake bench_serving; a fake server has no engine counters, so a ladder runs to
        the end only as the single wave (benchmark.steady: false)."""
        python, _ = fake_python(self.tmp, "ok")
        port = self.listening(b"") if server else free_port()
        wave = (
            [] if steady else ["--config", self.file("wave.yaml", "benchmark: {steady: false}\n")]
        )
        return [
            *wave, "bench", "--python", str(python), "--base-url", f"http://127.0.0.1:{port}",
            "--tokenizer", "/t", "--ladder", "8", "--baseline", "none",
            "--results-dir", str(self.tmp / "results"), "--level-timeout", "20",
            *([] if steady else ["--num-prompts", "32"]),
        ]  # fmt: skip

    def summary(self, throughput: float) -> str:
        """A bench summary.json with one level at this total throughput."""
        data = json.loads(
            (REPO / "glm5svc/data/baselines" / f"{SHIPPED_BASELINE}.json").read_text()
        )
        level = next(iter(data["levels"]))
        data["levels"] = {level: {"total_throughput": throughput}}
        data["name"] = f"run-{throughput}"
        data["plan"] = {"input_len": 1024, "output_len": 512}  # a verdict needs the lengths
        return self.file(f"summary-{throughput}.json", json.dumps(data))

    def provision(self, hosts: str = "localhost") -> list[str]:
        """provision on a one-task playbook run on this machine (ansible-runner, local)."""
        project = self.tmp / "project"
        project.mkdir(exist_ok=True)
        (project / "ansible.cfg").write_text("[defaults]\ninterpreter_python = auto_silent\n")
        (project / "hosts.yml").write_text(
            "all:\n  children:\n    lab:\n      hosts:\n        localhost:\n"
            "          ansible_connection: local\n"
            f"          ansible_python_interpreter: {sys.executable}\n"
        )
        (project / "play.yml").write_text(
            f"- name: A play\n  hosts: {hosts}\n  gather_facts: false\n  tasks:\n"
            "    - name: Say\n      ansible.builtin.debug:\n        msg: hi\n"
        )
        return ["provision", "--project", str(project), "--playbook", "play.yml", "-i",
                str(project / "hosts.yml"), "--log-dir", str(self.tmp / "logs")]  # fmt: skip

    def tune_copy(self, older: bool = False) -> str:
        """The recorded tune's run directory; its summary as today's glm5svc writes a
        confirmed one (the recording's words are the detail), or as recorded (`older`)."""
        target = self.tmp / ("tune-run-older" if older else "tune-run")
        shutil.copytree(TUNE_RUN, target)
        if not older:
            summary = json.loads((target / "summary.json").read_text())
            summary.update(confirmed=True, confirmation="confirmed",
                           confirmation_detail="confirmed by a fresh start",
                           confirmation_for=confirmation_for(summary["overlay"]))  # fmt: skip
            (target / "summary.json").write_text(json.dumps(summary))
        return str(target)

    def night(self, report: bool = True) -> str:
        """A night's folder as `glm5svc night` leaves it: its state, and its report."""
        folder = self.tmp / "night"
        state = NightState(
            folder,
            str(EXAMPLE),
            "2026-12-04T20:00:00.000+00:00",
            "2026-12-05T04:00:00+00:00",
            28800.0,
            {"concurrency": 8},
            3,
            [],
        )
        folder.mkdir(exist_ok=True)
        state.outcome, state.headline = "unchanged", "tune: nothing confirmed"
        state.save()
        if report:
            (folder / "report.json").write_text(json.dumps(report_document(state)))
        return str(folder)

    def close(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()


@dataclass(frozen=True)
class Case:
    name: str
    argv: Callable[[Env], list[str]]
    exit_status: int
    schema: str | None = None  # default: the command's own
    fake_gpus: int | None = None  # run under testkit.with_fake_nvml with this many GPUs
    alone: bool = False  # its own process (bench sets signal handlers), else in this one


USAGE = schema_name(["usage"])  # a command line argparse refused, numbers out of range included
READY = b'{"ready": true, "phase": "serving", "started_at": "2026-12-01T17:00:00.000+00:00"}'
CASES: dict[tuple[str, ...], list[Case]] = {
    ("bench",): [
        Case("a ladder that ran", lambda e: e.bench(), 0, schema=SUMMARY_SCHEMA, alone=True),
        Case("no server there", lambda e: e.bench(server=False), 1, SUMMARY_SCHEMA, alone=True),
        Case(
            "steady, no /flush_cache", lambda e: e.bench(steady=True), 1, SUMMARY_SCHEMA, alone=True
        ),
        Case("bad ladder", lambda e: ["bench", "--ladder", "x"], 2, schema=USAGE),
    ],
    ("bench", "compare"): [
        Case(
            "like for like", lambda e: ["bench", "compare", e.summary(100.0), e.summary(100.0)], 0
        ),
        Case(
            "a regression",
            lambda e: [
                "bench",
                "compare",
                e.summary(50.0),
                e.summary(100.0),
                "--fail-on-regression",
                "--threshold",
                "5",
            ],
            3,
        ),  # fmt: skip
        Case(
            "no such run", lambda e: ["bench", "compare", str(e.tmp / "none"), SHIPPED_BASELINE], 78
        ),
    ],
    ("command",): [
        Case("the example", lambda e: ["--config", str(EXAMPLE), "command"], 0),
        Case(
            "a refused extra_args",
            lambda e: [
                "--config",
                e.file("tp.yaml", "server: {extra_args: ['--tp', '2']}\n"),
                "command",
            ],
            78,
        ),  # fmt: skip
    ],
    ("patch", "status"): [
        Case("an old sglang", lambda e: ["patch", "status", "--site-packages", e.fake_sglang()], 0),
        Case("no sglang", lambda e: ["patch", "status", "--site-packages", str(e.tmp)], 1),
        Case(
            "unknown patch",
            lambda e: ["patch", "status", "nope", "--site-packages", e.fake_sglang()],
            2,
        ),  # fmt: skip
    ],
    ("patch", "apply"): [
        Case("an old sglang", lambda e: ["patch", "apply", "--site-packages", e.fake_sglang()], 0),
        Case("no sglang", lambda e: ["patch", "apply", "--site-packages", str(e.tmp)], 1),
    ],
    ("patch", "revert"): [
        Case("an old sglang", lambda e: ["patch", "revert", "--site-packages", e.fake_sglang()], 0),
        Case("no interpreter", lambda e: ["patch", "revert", "--python", str(e.tmp / "py")], 1),
    ],
    ("patch", "diff"): [
        Case("an old sglang", lambda e: ["patch", "diff", "--site-packages", e.fake_sglang()], 0),
        Case("no sglang", lambda e: ["patch", "diff", "--site-packages", str(e.tmp)], 1),
    ],
    ("preflight",): [
        # No GPU here: checks fail (exit 1); with the fake NVML the report is the same shape.
        Case("no GPU", lambda e: ["--config", str(EXAMPLE), "preflight"], 1),
        Case("fake GPUs", lambda e: ["--config", str(EXAMPLE), "preflight"], 1, fake_gpus=8),
    ],
    ("provision",): [
        Case("a local play", lambda e: e.provision(), 0),
        Case("no host matched", lambda e: e.provision(hosts="nosuchgroup"), 1),
        Case("no playbook", lambda e: [*e.provision(), "--playbook", "none.yml"], 1),
    ],
    ("status",): [
        Case("ready", lambda e: e.status_answering(READY), 0),
        Case("not ready", lambda e: e.status_answering(b'{"ready": false, "phase": "loading"}'), 1),
        Case("nothing listens", lambda e: ["--config", e.service_config(free_port()), "status"], 3),
        Case("not JSON", lambda e: e.status_answering(b"<html>nginx</html>"), 4),
        Case("not a status", lambda e: e.status_answering(b"[1, 2]"), 4),
        Case(
            "fleet: no replica answers",
            lambda e: [
                "--config",
                str(EXAMPLE),
                "status",
                "--replica",
                f"http://127.0.0.1:{free_port()}",
                "--timeout",
                "2",
            ],
            1,
            schema=schema_name(["status", "fleet"]),
        ),  # fmt: skip
        Case(
            "fleet: a bad URL (refused as the command line is read)",
            lambda e: ["--config", str(EXAMPLE), "status", "--replica", "ftp://x"],
            2,
            schema=schema_name(["usage"]),
        ),  # fmt: skip
    ],
    ("telemetry",): [
        Case("fake GPUs", lambda e: ["--config", str(EXAMPLE), "telemetry"], 0, fake_gpus=2),
        Case("no NVML", lambda e: ["--config", str(EXAMPLE), "telemetry"], 69),
    ],
    ("tune", "run"): [
        Case(
            "bad options",
            lambda e: [
                "--config",
                str(EXAMPLE),
                "tune",
                "run",
                "--budget",
                "-1",
                "--confidence",
                "2",
            ],
            2,
            schema=USAGE,
        ),  # fmt: skip
        Case(
            "repeats that contradict",
            lambda e: [
                "--config",
                str(EXAMPLE),
                "tune",
                "run",
                "--min-repeats",
                "5",
                "--max-repeats",
                "3",
            ],
            78,
        ),  # fmt: skip
    ],
    ("tune", "apply"): [
        Case(
            "a tune recorded on an H200, forced onto the example",
            lambda e: [
                "--config",
                e.file("c.yaml", EXAMPLE.read_text()),
                "tune",
                "apply",
                e.tune_copy(),
                "--no-restart",
                "--force",
            ],
            0,
        ),  # fmt: skip
        Case(
            "a tune recorded on an H200, refused for the example",
            lambda e: [
                "--config",
                e.file("c.yaml", EXAMPLE.read_text()),
                "tune",
                "apply",
                e.tune_copy(),
                "--no-restart",
            ],
            78,
        ),  # fmt: skip
        Case(
            "a tune recorded by an older glm5svc (no confirmation status)",
            lambda e: [
                "--config",
                e.file("c.yaml", EXAMPLE.read_text()),
                "tune",
                "apply",
                e.tune_copy(older=True),
                "--no-restart",
                "--force",
            ],
            78,
        ),  # fmt: skip
        Case("no such run", lambda e: ["tune", "apply", str(e.tmp / "none"), "--no-restart"], 78),
    ],
    ("night", "plan"): [
        Case("the example's night", lambda e: ["--config", str(EXAMPLE), "night", "plan"], 0),
        Case("a budget with no room for a tune", lambda e: ["night", "plan", "--budget", "1s"], 78),
    ],
    ("night", "begin"): [
        Case(
            "a budget with no room for a tune", lambda e: ["night", "begin", "--budget", "1s"], 78
        ),
    ],
    ("night", "status"): [
        Case("a night's folder", lambda e: ["night", "status", e.night()], 0, "glm5svc.night/1"),
        Case("no such folder", lambda e: ["night", "status", str(e.tmp / "none")], 78),
    ],
    ("night", "report"): [
        Case("a night's report", lambda e: ["night", "report", e.night()], 0, REPORT_SCHEMA),
        Case("no report yet", lambda e: ["night", "report", e.night(report=False)], 78),
    ],
    ("tune", "show"): [
        Case("a recorded tune", lambda e: ["tune", "show", str(TUNE_RUN)], 0),
        Case("no such run", lambda e: ["tune", "show", str(e.tmp / "none")], 78),
    ],
    ("validate",): [
        Case("the example", lambda e: ["validate", str(EXAMPLE)], 0),
        Case("unknown key", lambda e: ["validate", e.file("u.yaml", "sevrer: {}\n")], 78),
        Case("no file", lambda e: ["validate", str(e.tmp / "none.yaml")], 78),
    ],
}
# Commands whose success needs what no test machine has (a GPU and a real engine, hours).
NO_SUCCESS_HERE = {
    ("preflight",): "exit 0 needs the target GPUs, driver and model files",
    ("tune", "run"): "a whole tune; tests/tune/test_tune_end_to_end.py runs one with --json",
    ("night", "begin"): "starts glm5-tune.service; tests/night runs it behind a stand-in systemctl",
}
DISCOVERED = json_commands(build_parser())


def glm5svc(
    argv: list[str], fake_gpus: int | None = None, alone: bool = False
) -> subprocess.CompletedProcess:
    """`glm5svc ARGV --json`: in this process (main(), fast), or as its own process."""
    if not (fake_gpus or alone):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = main([*argv, "--json"])
        return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
    prefix = ["-m", "testkit.with_fake_nvml", str(fake_gpus)] if fake_gpus else []
    return subprocess.run(
        [sys.executable, *prefix, "-m", "glm5svc", *argv, "--json"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "GLM5SVC_CONFIG": str(EXAMPLE)},
    )  # fmt: skip


def check_document(run: subprocess.CompletedProcess, schema: str) -> dict:
    """stdout is one JSON object in the envelope; failures say why on stderr too."""
    assert "Traceback" not in run.stderr, run.stderr
    try:
        doc = json.loads(run.stdout)
    except ValueError:
        raise AssertionError(f"stdout is not JSON:\n{run.stdout}\nstderr:\n{run.stderr}") from None
    assert isinstance(doc, dict) and list(doc)[:2] == ["schema", "ok"], doc
    assert doc["schema"] == schema
    assert doc["ok"] is (run.returncode == 0), (run.returncode, doc)
    if "error" in doc:
        assert doc["exit_status"] == run.returncode and isinstance(doc["problems"], list)
        assert doc["error"] in run.stderr
    for key, value in _walk(doc):
        if key.endswith("_at") and value is not None:  # one time format: ISO 8601 in UTC
            assert datetime.fromisoformat(value).utcoffset().total_seconds() == 0, (key, value)
    return doc


def _walk(value, key=""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, k)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item, key)
    else:
        yield key, value


@pytest.fixture
def env(tmp_path):
    e = Env(tmp_path)
    yield e
    e.close()


def test_every_command_with_json_has_its_cases():
    assert set(CASES) == set(DISCOVERED), "list the new --json command's cases in CASES"
    for path, cases in CASES.items():
        assert any(c.exit_status != 0 for c in cases), f"{path}: no failure case"
        assert path in NO_SUCCESS_HERE or any(c.exit_status == 0 for c in cases), path


@pytest.mark.parametrize(
    ("path", "case"),
    [(p, c) for p, cases in CASES.items() for c in cases],
    ids=[f"{' '.join(p)}: {c.name}" for p, cases in CASES.items() for c in cases],
)
def test_json_on_this_exit_path(env, path, case):
    run = glm5svc(case.argv(env), case.fake_gpus, case.alone)
    assert run.returncode == case.exit_status, (run.stdout, run.stderr)
    check_document(run, case.schema or schema_name(path))


def _positionals(parser) -> list[str]:
    return [
        "x"
        for action in parser._actions
        if not action.option_strings and action.nargs in (None, 1) and action.dest != "help"
    ]


@pytest.mark.parametrize("path", sorted(DISCOVERED), ids=" ".join)
def test_a_usage_error_and_a_broken_config_file_are_json_too(tmp_path, path):
    run = glm5svc([*path, "--no-such-option"])
    assert run.returncode == 2
    assert "usage:" in run.stderr
    check_document(run, schema_name(["usage"]))

    broken = tmp_path / "broken.yaml"
    broken.write_bytes(b"server: [unclosed\n")
    run = glm5svc(["--config", str(broken), *path, *_positionals(DISCOVERED[path])])
    assert run.returncode != 0
    check_document(run, schema_name(path))
