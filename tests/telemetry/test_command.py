import json
import sys

import pynvml
from rich.console import Console

from glm5svc.cli import main
from glm5svc.telemetry import PynvmlSource, Sampler
from glm5svc.telemetry.view import render
from testkit import fake_pynvml


def test_once_json_prints_every_gpu(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml.make_module(2))
    monkeypatch.delenv("GLM5SVC_CONFIG", raising=False)
    assert main(["telemetry", "--once", "--json", "--period", "0.05"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["available"] and [g["index"] for g in data["gpus"]] == [0, 1]
    assert data["gpus"][0]["clock_event_reasons"] == ["sw_power_cap"]


def test_no_driver_exits_69_with_the_reason(monkeypatch, capsys):
    monkeypatch.setitem(
        sys.modules,
        "pynvml",
        fake_pynvml.make_module(1, init_error=pynvml.NVMLError_DriverNotLoaded()),
    )
    monkeypatch.delenv("GLM5SVC_CONFIG", raising=False)
    assert main(["telemetry", "--once", "--period", "0.05"]) == 69
    err = capsys.readouterr().err
    assert "no NVIDIA driver" in err and "Traceback" not in err


def test_view_renders_power_bar_and_reasons():
    sampler = Sampler(PynvmlSource(fake_pynvml.make_module(1)))
    sampler.open()
    console = Console(width=200, record=True)
    console.print(render(sampler.sample_now()))
    text = console.export_text()
    assert "250/600 W" in text and "sw_power_cap" in text and "Gen5x16" in text
