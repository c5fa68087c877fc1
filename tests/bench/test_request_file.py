"""A recorded workload (benchmark.request_file): the file's checks, its identity in the plan,
the bench_serving command, the context it must fit, and compare across workloads."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from glm5svc.bench.plan import plan_from_config
from glm5svc.bench.request_file import MIN_TOKENS, load_request_file
from glm5svc.bench.runner import bench_serving_command
from glm5svc.bench.verdicts import workload_difference
from glm5svc.cli import main
from glm5svc.config import Config, parse_config
from glm5svc.errors import ConfigError
from glm5svc.model_info import context_length
from glm5svc.tune.search import Workload, bench_plan_for

GOOD = '{"input_len": 40, "output_len": 8}\n{"input_len": 12, "output_len": 30}\n\n' + (
    '{"input_len": 70, "output_len": 4}\n'
)


def write(tmp_path: Path, text: str | bytes, name: str = "requests.jsonl") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def config_with(tmp_path: Path, request_file: Path | None, **model) -> Config:
    data: dict = {"benchmark": {"request_file": str(request_file) if request_file else None}}
    if model:
        data["model"] = model
    return Config.model_validate(data)


def test_a_good_file_gives_its_requests_and_identity(tmp_path):
    path = write(tmp_path, GOOD)
    loaded = load_request_file(path)
    assert loaded.requests == ((40, 8), (12, 30), (70, 4))
    assert loaded.for_run(7) == [(40, 8), (12, 30), (70, 4)] * 2 + [(40, 8)]
    identity = loaded.identity()
    assert identity["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert identity["requests"] == 3
    assert identity["mean_input_len"] == pytest.approx((40 + 12 + 70) / 3, abs=0.01)
    assert identity["mean_output_len"] == pytest.approx(14.0)
    assert (identity["max_input_len"], identity["max_output_len"]) == (70, 30)


def test_the_plan_records_the_identity_and_sends_the_custom_dataset(tmp_path):
    path = write(tmp_path, GOOD)
    plan = plan_from_config(config_with(tmp_path, path))
    described = plan.describe()
    assert described["request_file"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert set(described["request_file"]) >= {"sha256", "requests", "mean_input_len"}
    assert described["request_file"]["requests"] == 3  # a count, not the requests
    command = bench_serving_command(plan, 8, 10, tmp_path / "o.jsonl", tmp_path / "d.jsonl")
    at = command.index("--dataset-name")
    assert command[at : at + 4] == [
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(tmp_path / "d.jsonl"),
    ]
    assert "--random-input-len" not in command
    # The longest request bounds the level's time limit, not the fixed lengths.
    fixed = plan_from_config(Config()).with_overrides(input_len=70, output_len=30)
    assert plan.timeout_for(8) == fixed.timeout_for(8)
    # --request-file replaces the configuration's file.
    other = write(tmp_path, '{"input_len": 5, "output_len": 5}\n', "other.jsonl")
    assert (
        plan_from_config(config_with(tmp_path, path), request_file=str(other)).request_file.count
        == 1
    )


def test_a_tune_trial_plan_carries_the_workload_file(tmp_path):
    path = write(tmp_path, GOOD)
    workload = Workload(64, 1024, 512, request_file=str(path))
    plan = bench_plan_for(Config(), workload)
    assert plan.request_file is not None and plan.request_file.count == 3
    assert bench_plan_for(Config(), Workload(64, 1024, 512)).request_file is None


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "holds no request"),
        ("\n  \n", "holds no request"),
        ('{"input_len": 40, "output_len": 8}\n{"input_len": 40\n', "line 2: not JSON"),
        ("[40, 8]\n", "line 1: not a JSON object"),
        ('{"input_len": 40}\n', "line 1: no output_len"),
        ('{"input_len": 40, "output_len": 8, "prompt": "x"}\n', "unknown key(s) 'prompt'"),
        ('{"input_len": 40, "output_lenght": 8}\n', "did you mean 'output_len'?"),
        ('{"input_len": true, "output_len": 8}\n', "input_len true is not a whole number"),
        ('{"input_len": 40.5, "output_len": 8}\n', "input_len 40.5 is not a whole number"),
        ('{"input_len": "40", "output_len": 8}\n', 'input_len "40" is not a whole number'),
        ('{"input_len": 40, "output_len": 0}\n', f"output_len 0 is under {MIN_TOKENS}"),
        ('{"input_len": -3, "output_len": 8}\n', f"input_len -3 is under {MIN_TOKENS}"),
        (b'{"input_len": 40, "output_len": 8}\n\xff\n', "is not UTF-8"),
    ],
)
def test_a_bad_file_is_refused_with_the_line_and_the_fix(tmp_path, text, said):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        plan_from_config(config_with(tmp_path, path))
    rendered = caught.value.render()
    assert said in rendered and str(path) in rendered
    assert "benchmark.request_file" in rendered
    assert '{"input_len": 812, "output_len": 230}' in rendered  # the fix


def test_every_bad_line_is_counted_and_the_first_ten_listed(tmp_path):
    lines = ['{"input_len": 40, "output_len": 8}'] + ['{"input_len": 1, "output_len": 8}'] * 12
    path = write(tmp_path, "\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as caught:
        load_request_file(path, key="--request-file")
    message = str(caught.value)
    assert "12 bad line(s) (2 more not shown), the first at line 2" in message
    assert message.startswith("--request-file: ")
    listed = [p for p in caught.value.problems if ": line " in p]
    assert [p.split(": line ")[1].split(":")[0] for p in listed] == [str(n) for n in range(2, 12)]


def test_a_missing_file_or_a_folder_names_the_fix(tmp_path):
    for where, said in ((tmp_path / "absent.jsonl", "does not exist"), (tmp_path, "is a folder")):
        with pytest.raises(ConfigError) as caught:
            load_request_file(where, key="--request-file")
        assert said in str(caught.value) and str(where) in str(caught.value)
    with pytest.raises(ConfigError, match="leave out --request-file"):
        load_request_file(tmp_path / "absent.jsonl", key="--request-file")


def test_a_relative_path_in_the_configuration_is_refused():
    with pytest.raises(ConfigError) as caught:
        parse_config("benchmark: {request_file: requests.jsonl}")
    assert "benchmark.request_file" in caught.value.render()
    assert "absolute path" in caught.value.render()


def test_a_request_over_the_models_context_is_refused(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 100}))
    path = write(
        tmp_path, '{"input_len": 60, "output_len": 40}\n{"input_len": 60, "output_len": 41}\n'
    )
    with pytest.raises(ConfigError) as caught:
        plan_from_config(config_with(tmp_path, path, path=str(model)))
    rendered = caught.value.render()
    assert (
        "line 2: input_len 60 + output_len 41 = 101 tokens, over the model's context of 100"
        in rendered
    )
    assert "line 1" not in rendered.split("the first at")[1].split("\n")[0]
    assert f"max_position_embeddings in {model / 'config.json'}" in rendered
    # sglang's --context-length in server.extra_args wins over config.json.
    config = Config.model_validate(
        {
            "model": {"path": str(model)},
            "server": {"extra_args": ["--context-length", "4096"]},
            "benchmark": {"request_file": str(path)},
        }
    )
    plan = plan_from_config(config)
    assert plan.request_file.context_length == 4096


@pytest.mark.parametrize(
    ("data", "args", "expected"),
    [
        ({"max_position_embeddings": 8192}, [], 8192),
        ({"seq_length": 2048, "max_position_embeddings": 8192}, [], 2048),
        ({"max_position_embeddings": 8192, "rope_scaling": {"factor": 4.0}}, [], 32768),
        (
            {
                "max_position_embeddings": 8192,
                "rope_scaling": {"factor": 4.0, "rope_type": "llama3"},
            },
            [],
            8192,
        ),
        ({"max_position_embeddings": 8192}, ["--context-length=1000"], 1000),
        ({"architectures": ["X"]}, [], None),
    ],
)
def test_the_context_length_is_read_as_sglang_reads_it(tmp_path, data, args, expected):
    (tmp_path / "config.json").write_text(json.dumps(data))
    assert context_length(tmp_path, args)[0] == expected
    assert context_length(tmp_path / "absent", [])[0] is None


def test_validate_refuses_a_bad_request_file(tmp_path, capsys):
    bad = write(tmp_path, '{"input_len": 40, "output_len": 8}\nnot json\n')
    config = tmp_path / "glm5.yaml"
    config.write_text(json.dumps({"benchmark": {"request_file": str(bad)}}))
    assert main(["validate", str(config)]) == 78
    out = capsys.readouterr()
    text = out.out + out.err
    assert f"{bad}: line 2: not JSON" in text


def test_bench_refuses_fixed_lengths_beside_a_request_file(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GLM5SVC_CONFIG", str(tmp_path / "absent.yaml"))
    path = write(tmp_path, GOOD)
    code = main(["bench", "--request-file", str(path), "--input-len", "64", "--json"])
    assert code == 78
    assert "leave out --input-len and --output-len" in capsys.readouterr().out


def plan_of(request_file: dict | None = None, steady: bool = True, **lengths) -> dict:
    plan = {"input_len": 1024, "output_len": 512, "steady": steady, **lengths}
    if request_file is not None:
        plan["request_file"] = request_file
    return {"name": "run", "plan": plan}


def identity(sha: str) -> dict:
    return {"path": f"/w/{sha}.jsonl", "sha256": sha * 64, "requests": 3,
            "mean_input_len": 40.7, "mean_output_len": 14.0}  # fmt: skip


def test_compare_judges_only_the_same_workload_measured_the_same_way():
    a, b = identity("a"), identity("b")
    assert workload_difference(plan_of(a), plan_of(a)) is None
    # The fixed lengths beside a request file are not its workload.
    assert workload_difference(plan_of(a, input_len=1), plan_of(a)) is None
    differ = workload_difference(plan_of(a), plan_of(b))
    assert differ.startswith("the workloads differ: request file a.jsonl (sha256 aaaaaaaaaaaa")
    assert "request file b.jsonl" in differ
    assert "vs fixed lengths 1024 in / 512 out" in workload_difference(plan_of(a), plan_of())
    assert "measurements differ: steady windows vs one wave per level" in workload_difference(
        plan_of(a), plan_of(a, steady=False)
    )
    # A summary from before benchmark.steady was a single wave.
    old = {"name": "old", "plan": {"input_len": 1024, "output_len": 512}}
    assert "measurements differ" in workload_difference(plan_of(), old)
    assert workload_difference(plan_of(steady=False), old) is None
    broken = plan_of({"path": "/w/x.jsonl"})
    assert "without its SHA-256" in workload_difference(broken, plan_of(a))
