"""Flags the plan sets from a configuration key cannot be given a second time under any
spelling sglang's parser accepts: in server.extra_args, in a --config file given there, or
as the environment variable the key sets."""

from __future__ import annotations

import pytest

from glm5svc.errors import ConfigError
from glm5svc.sglang_flags import GUARDED_FLAGS, guarded_flag

from .test_launch_plan import H200_X1, pairs, parser_dests, plan_for

KEY = {"server": {"host": "127.0.0.1"}}


def with_server(**server):
    return {"server": {"host": "127.0.0.1", **server}}


@pytest.mark.parametrize(
    ("flag", "key"),
    [
        (["--tensor-parallel-size", "4"], "gpus.expected_count"),
        (["--tensor-parallel-size=4"], "gpus.expected_count"),
        (["--tp-size", "4"], "gpus.expected_count"),
        (["--tensor-parallel", "4"], "gpus.expected_count"),  # an abbreviation argparse takes
        (["--model", "/other"], "model.path"),
        (["--model-pa", "/other"], "model.path"),
        (["--port", "1"], "server.port"),
        (["--po", "1"], "server.port"),
        (["--host", "0.0.0.0"], "server.host"),
        (["--served-model-name", "x"], "model.served_name"),
        (["--nccl-init-addr", "h:1"], "multinode.dist_init_addr"),
        (["--nnodes", "2"], "multinode.nnodes"),
        (["--tokenizer-path", "/t"], "model.tokenizer_path"),
    ],
)
def test_every_spelling_of_a_guarded_flag_is_refused_with_its_key(flag, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as caught:
        plan_for(with_server(extra_args=flag))
    assert "Fix: set" in str(caught.value)


def test_an_abbreviation_of_a_planned_flag_is_refused():
    with pytest.raises(ConfigError, match="abbreviation of --mem-fraction-static"):
        plan_for(with_server(extra_args=["--mem-frac", "0.5"]))


def test_planned_tuning_flags_stay_overridable_by_their_full_name():
    plan = plan_for(with_server(extra_args=["--mem-fraction-static", "0.5"]))
    assert pairs(plan.argv)["--mem-fraction-static"] == "0.5"


def test_a_config_file_in_extra_args_is_read_and_its_guarded_keys_refused(tmp_path):
    file = tmp_path / "sglang.yaml"
    file.write_text("chunked-prefill-size: 8192\ntensor-parallel-size: 4\n")
    with pytest.raises(ConfigError, match=r"line 2, key tensor-parallel-size.*gpus\.expected"):
        plan_for(with_server(extra_args=["--config", str(file)]))
    file.write_text("api-key: sk-1\n")
    with pytest.raises(ConfigError, match="api-key"):
        plan_for(with_server(extra_args=["--config", str(file)]))
    file.write_text("chunked-prefill-size: 8192\n")
    assert "--config" in plan_for(with_server(extra_args=["--config", str(file)])).argv
    with pytest.raises(ConfigError, match="cannot read"):
        plan_for(with_server(extra_args=["--config", str(tmp_path / "none.yaml")]))


def test_a_config_file_in_extra_args_beside_the_key_is_refused(tmp_path):
    key = tmp_path / "key"
    key.write_text("sk-1\n")
    key.chmod(0o600)
    file = tmp_path / "sglang.yaml"
    file.write_text("chunked-prefill-size: 8192\n")
    with pytest.raises(ConfigError, match="would drop the key"):
        plan_for(with_server(api_key_file=str(key), extra_args=["--config", str(file)]))


def test_cuda_visible_devices_in_server_env_must_agree_with_the_plan():
    one_gpu = {"gpus": {"target": "sm90", "expected_count": 1}}
    with pytest.raises(ConfigError, match="gives sglang 2 GPU"):
        plan_for({**one_gpu, **with_server(env={"CUDA_VISIBLE_DEVICES": "0,1"})}, H200_X1)
    both = {"gpus": {"target": "sm90", "expected_count": 1, "visible_devices": [0]}}
    with pytest.raises(ConfigError, match="both choose the GPUs"):
        plan_for({**both, **with_server(env={"CUDA_VISIBLE_DEVICES": "0"})}, H200_X1)
    plan = plan_for({**one_gpu, **with_server(env={"CUDA_VISIBLE_DEVICES": "3"})}, H200_X1)
    assert plan.env["CUDA_VISIBLE_DEVICES"] == "3"


def test_guarded_flag_reads_prefixes_only_of_guarded_spellings():
    assert guarded_flag("--tp-size").dest == "tensor_parallel_size"
    assert guarded_flag("--chunked-prefill-size") is None
    assert guarded_flag("--") is None


def test_the_guarded_spellings_are_the_real_parsers(sglang_parser_pythons):
    """Every spelling of each guarded dest, as each profile's sglang parser gives them (the
    dest found through the first spelling: 0.5.23 names tensor_parallel_size tp_size)."""
    for profile, python in sglang_parser_pythons.items():
        dests = parser_dests(python)
        for flag in GUARDED_FLAGS:
            assert dests[flag.spellings[0]] in (flag.dest, *flag.other_dests), (profile, flag)
            real = sorted(n for n, dest in dests.items() if dest == dests[flag.spellings[0]])
            assert real == sorted(flag.spellings), (profile, flag.dest, real)
