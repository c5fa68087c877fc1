"""A box for the night's chain tests: the test engine's configuration, a stand-in service
manager of real processes (testkit/systemctl_stand_in.py) running glm5.service and
glm5-tune.service, and waits on the night's state file."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from testkit import systemctl_stand_in as systemctl
from testkit.timing import scaled
from tests.tune.conftest import write_space, write_tune_config

# Up to two A B B A blocks a start: the cap's verdict at the first look or at the second
# (tests/tune/test_tune_end_to_end.py does the same; one block leaves it undecided on a
# loaded machine).
TUNE_OPTIONS = [
    "--length-ratio", "0.5", "--window", "1", "--settle", "0.5", "--min-repeats", "2",
    "--max-repeats", "4", "--max-trials", "3",
]  # fmt: skip
WORKLOAD = ["--concurrency", "32", "--input-len", "16", "--output-len", "16"]
NIGHT_WAIT_S = 600.0
# Written before each start of glm5.service (ExecStartPre=): the engine serves 4x slower
# while the configuration differs from the evening's copy.
SLOW_WHEN_CHANGED = """
import sys, pathlib
config, evening, mode = map(pathlib.Path, sys.argv[1:])
changed = evening.exists() and config.read_bytes() != evening.read_bytes()
mode.write_text("slow=4" if changed else "")
"""


def night_setup(request, tmp_path, monkeypatch, bench_python, tokenizer_dir,
                slow_when_changed=False):  # fmt: skip
    mode_file = tmp_path / "engine-mode"
    config = write_tune_config(tmp_path, bench_python, tokenizer_dir,
                               f"load=0.1,mode-file={mode_file}")  # fmt: skip
    data = yaml.safe_load(config.read_text())
    data["benchmark"].update(steady=True, window_s=1.0, warmup_max_s=3.0,
                             warmup_tolerance_pct=50.0)  # fmt: skip
    config.write_text(yaml.safe_dump(data))
    space = write_space(
        tmp_path, [{"key": "tuning.max_running_requests", "values": [8, 64], "restart": False}]
    )
    manager = tmp_path / "systemd"
    for unit in ("glm5.service", "glm5-tune.service"):  # whatever a failed test left running
        request.addfinalizer(lambda unit=unit: systemctl.kill(manager, unit))
    monkeypatch.setenv("PATH", f"{systemctl.install(manager)}:{Path(sys.executable).parent}:"
                               "/usr/bin:/bin")  # fmt: skip
    monkeypatch.setenv(systemctl.FOLDER_ENV, str(manager))
    glm5svc = [sys.executable, "-m", "glm5svc", "--config", str(config)]
    listen = data["service"]["listen_port"]
    results = Path(data["service"]["results_dir"])
    pre_start = None
    if slow_when_changed:
        hook = tmp_path / "slow_when_changed.py"
        hook.write_text(SLOW_WHEN_CHANGED)
        pre_start = [sys.executable, str(hook), str(config), str(tmp_path / "evening-copy"),
                     str(mode_file)]  # fmt: skip
        (tmp_path / "evening-copy").write_bytes(config.read_bytes())
    ready = f"http://127.0.0.1:{listen}/readyz"
    systemctl.define(manager, "glm5.service", [*glm5svc, "serve"], ready, pre_start)
    systemctl.define(manager, "glm5-tune.service", [*glm5svc, "night", "resume"])
    assert systemctl.start(manager, "glm5.service") == 0, (manager / "glm5.service.log").read_text()
    return config, space, manager, glm5svc, results


def begin(glm5svc, space):
    done = subprocess.run(
        [*glm5svc, "night", "begin", "--budget", "15m", "--windows", "3", *WORKLOAD, "--json",
         "--", "--space", str(space), *TUNE_OPTIONS],
        capture_output=True, text=True, timeout=scaled(120),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return Path(json.loads(done.stdout)["night_dir"])


def state_of(night: Path) -> dict:
    try:
        return json.loads((night / "night.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}


def wait_for(what, condition, manager: Path, night: Path, wait_s: float = NIGHT_WAIT_S):
    deadline = time.monotonic() + scaled(wait_s)
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    log = (manager / "glm5-tune.service.log").read_text()[-4000:]
    pytest.fail(f"no {what} in {scaled(wait_s):.0f} s; state {state_of(night)}; night log {log}")


def tune_measuring(night: Path) -> bool:
    """The tune's first engine start is measuring (a window was written)."""
    return any((night / "tune" / "starts").glob("*/runs/*.json"))


def night_ended(night: Path) -> bool:
    return state_of(night).get("steps", {}).get("report", {}).get("status") == "done"


# ----- a night's faults, from a prepared state ---------------------------------------------
# No tune, no bench_serving: the night starts at its apply (or later) from a state file with
# the evening's windows and a confirmed tune (tuned.yaml and summary.json as `tune run`
# writes them), glm5.service is `glm5svc serve` on the test engine under the stand-in, and
# the morning's bench is replaced by `measure`, which records the configuration the serving
# glm5.service started on (its /status) and gives windows for it: the chain, the restarts
# and what serves are real, only the load generator is not.

EVENING_WINDOWS = [100.0, 101.0, 99.0]
OVERLAY = {"tuning": {"max_running_requests": 64}}
# The tune's starts as its summary.json lists them: under 1 % from start to start, so one
# start a side holds the morning verdict's rates (glm5svc/night/compare.py) and a morning
# as fast as the evening is kept.
TUNE_STARTS = [
    {"trial": start + 1, "start": start, "setting": setting, "status": "measured", "runs": 3,
     "throughput_mean": mean, "verdict": "", "best": False, "diagnosis": ""}
    for start, (setting, mean) in enumerate(
        [("evening", 100.0), ("tuned", 100.2), ("evening", 101.0), ("tuned", 99.8),
         ("evening", 100.5)]
    )
]  # fmt: skip


# glm5.service's ExecStartPre= for the faults: a start fails while the flag file exists
# (argv: the flag, then `always` or `once`: the flag goes with the first failure).
FAIL_STARTS = """
import sys, pathlib
flag = pathlib.Path(sys.argv[1])
if flag.exists():
    if sys.argv[2] == "once":
        flag.unlink()
    sys.exit("glm5.service: a start that fails (the test's flag)")
"""


class FaultBox:
    def __init__(self, request, tmp_path: Path, monkeypatch, fail_starts: str = "always"):
        from testkit.engine import TEST_ENGINE, free_port

        self.tmp = tmp_path
        model = tmp_path / "model"
        model.mkdir()
        (model / "config.json").write_text(
            json.dumps({"architectures": ["Qwen3MoeForCausalLM"], "num_experts": 8})
        )
        self.results = tmp_path / "results"
        (tmp_path / "textfiles").mkdir()
        data = {
            "model": {"path": str(model), "served_name": "glm-5"},
            "server": {"host": "127.0.0.1", "port": free_port(),
                       "command": [sys.executable, str(TEST_ENGINE), "--test-mode", "load=0.05"]},
            "tuning": {"max_running_requests": 8},
            "service": {"listen_host": "127.0.0.1", "listen_port": free_port(),
                        "run_preflight": False, "probe_interval_s": 0.3, "drain_timeout_s": 5,
                        "results_dir": str(self.results),
                        "night_textfile": str(tmp_path / "textfiles" / "glm5svc-night.prom")},
            "telemetry": {"enabled": False},
            "benchmark": {"post_start": {"enabled": False}},
        }  # fmt: skip
        self.config = tmp_path / "glm5.yaml"
        self.config.write_text("# the evening's\n" + yaml.safe_dump(data))
        self.evening = self.config.read_bytes()
        self.evening_config = self.loaded()  # where glm5.service listens, whatever the file
        self.manager = tmp_path / "systemd"
        request.addfinalizer(lambda: systemctl.kill(self.manager, "glm5.service"))
        monkeypatch.setenv("PATH", f"{systemctl.install(self.manager)}:"
                                   f"{Path(sys.executable).parent}:/usr/bin:/bin")  # fmt: skip
        monkeypatch.setenv(systemctl.FOLDER_ENV, str(self.manager))
        monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path / "run-glm5-night"))
        self.glm5svc = [sys.executable, "-m", "glm5svc", "--config", str(self.config)]
        ready = f"http://127.0.0.1:{data['service']['listen_port']}/readyz"
        hook = tmp_path / "fail_starts.py"
        hook.write_text(FAIL_STARTS)
        self.fail_flag = tmp_path / "glm5-starts-fail"  # exists: glm5.service fails to start
        pre_start = [sys.executable, str(hook), str(self.fail_flag), fail_starts]
        systemctl.define(self.manager, "glm5.service", [*self.glm5svc, "serve"], ready, pre_start)
        log = self.manager / "glm5.service.log"
        assert systemctl.start(self.manager, "glm5.service") == 0, log.read_text()
        self.measured: list[str | None] = []  # the configuration each morning measured
        self.before_measuring = None  # a fault to inject as the morning's bench begins

    def loaded(self):
        from glm5svc.config import load_config

        return load_config(self.config)

    def night_at_apply(self, night_dir: Path | None = None, tuned: bool = True):
        """A night whose evening, baseline and tune are done: a confirmed overlay to apply
        (tuned=False: the tune not run yet)."""
        from glm5svc.facts import HostFacts
        from glm5svc.night.state import NightState, set_current
        from glm5svc.tune.confirmation import confirmation_for
        from glm5svc.tune.session import measured_on

        night = night_dir or self.results / "night" / "20261207T200000Z"
        (night / "tune").mkdir(parents=True)
        (night / "evening.yaml").write_bytes(self.evening)
        config = self.loaded()
        summary = {"facts": {"identity": measured_on(config, HostFacts.read(config))},
                   "confirmed": True, "confirmation": "confirmed", "trials": TUNE_STARTS,
                   "confirmation_for": confirmation_for(OVERLAY)}  # fmt: skip
        (night / "tune" / "summary.json").write_text(json.dumps(summary))
        (night / "tune" / "tuned.yaml").write_text(yaml.safe_dump(OVERLAY))
        workload = {"concurrency": 8, "input_len": 16, "output_len": 16}
        state = NightState(night, str(self.config), "2026-12-07T20:00:00.000+00:00",
                           "2099-12-08T04:00:00+00:00", 28800.0, workload, 3, [])  # fmt: skip
        for step, data in (
            ("evening", {"start_s": 1.0}),
            ("baseline", {"throughputs": EVENING_WINDOWS, "wall_s": 3.0}),
            ("tune", {"apply": True, "confirmed": True, "overlay": OVERLAY,
                      "run_dir": str(night / "tune"), "dropped": []}),
        ):  # fmt: skip
            if step == "tune" and not tuned:
                break
            state.begin_step(step)
            state.end_step(step, "done", f"{step}: prepared by the test", **data)
        set_current(self.results, night)
        return state

    def measure(self, slower_when_tuned: bool = False):
        """A bench, for Benches.bench: windows for what serves now."""
        from glm5svc.night.serving import running_sha256
        from glm5svc.night.state import file_sha256

        def bench(night, side):
            if self.before_measuring:
                self.before_measuring()
            running = running_sha256(night.config)
            self.measured.append(running)
            tuned = running != file_sha256(night.state.evening_config)
            factor = 0.5 if (tuned and slower_when_tuned) else 1.0
            windows = [w * factor for w in EVENING_WINDOWS]
            return {"detail": f"{side}: measured by the test", "throughputs": windows,
                    "wall_s": 1.0, "summary": None}  # fmt: skip

        return bench

    def run(self, state, monkeypatch, stop=None, slower_when_tuned=False) -> tuple:
        """The night from `state` in this process (as `night resume` runs it)."""
        import threading

        from glm5svc.night.chain import Night
        from glm5svc.night.measure import Benches

        monkeypatch.setattr(Benches, "bench", self.measure(slower_when_tuned))
        night = Night(state, self.loaded(), stop or threading.Event(), log=lambda _: None)
        return night, night.run()

    def serving_sha(self) -> str | None:
        """The sha256 of the configuration the serving glm5.service started on (None: none
        serves)."""
        from glm5svc.night.serving import running_sha256, serving_now

        if serving_now(self.evening_config) is not None:
            return None
        return running_sha256(self.evening_config)

    def status(self) -> subprocess.CompletedProcess:
        return subprocess.run([*self.glm5svc, "status"], capture_output=True, text=True,
                              timeout=scaled(60))  # fmt: skip


def sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()
