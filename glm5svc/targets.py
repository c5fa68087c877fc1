"""Targets: what each GPU generation needs from the launch plan and preflight.

A target is data (glm5svc/data/targets.yaml): its compute capability and GPU count (the
defaults of gpus.compute_capability / gpus.expected_count), its quantization, attention,
sparse-attention and MoE backend choices with the reason for each, and the preflight rows
that are failures only there. `gpus.target` picks one; sm120 (the reference deployment)
is the default. Adding a GPU generation is adding an entry, no code. Facts: docs/targets.md.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from packaging.version import Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from glm5svc.errors import ConfigError

TARGETS_FILE = Path(__file__).parent / "data" / "targets.yaml"
DEFAULT_TARGET = "sm120"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NewerChoice(_Strict):
    since: str = Field(pattern=r"^\d+\.\d+\.\d+")  # the first sglang version it is for
    value: str | None
    reason: str = Field(min_length=1)


class Choice(_Strict):
    value: str | None  # None: the flag is left out and sglang chooses
    reason: str = Field(min_length=1)
    # What replaces the choice from a newer sglang on (the last one that applies wins).
    from_sglang: list[NewerChoice] = Field(default_factory=list)

    def at(self, version: str) -> Choice:
        """The choice for sglang `version`: the newest `from_sglang` entry it reaches."""
        reached = [n for n in self.from_sglang if Version(version) >= Version(n.since)]
        if not reached:
            return self
        newest = max(reached, key=lambda n: Version(n.since))
        return Choice(value=newest.value, reason=f"{newest.reason} (sglang {newest.since}+)")


class QuantizationChoice(Choice):
    value: Literal["modelopt_fp4", "none"]


class AttentionChoices(_Strict):
    sparse: Choice  # models with DeepSeek-style sparse attention (DSA/NSA)
    dense: Choice


class Target(_Strict):
    name: str
    description: str
    compute_capability: str = Field(pattern=r"^\d+\.\d+$")
    gpu_count: int = Field(ge=1, le=64)
    fp4: bool  # FP4 tensor cores (NVFP4 / modelopt_fp4 checkpoints)
    host_checks: list[Literal["uvm_disable_hmm"]]
    quantization: QuantizationChoice
    attention_backend: AttentionChoices
    sparse_decode_backend: Choice
    sparse_prefill_backend: Choice
    moe_runner_backend: Choice

    @model_validator(mode="after")
    def _fp4_only_where_it_runs(self) -> Target:
        if self.quantization.value == "modelopt_fp4" and not self.fp4:
            raise ValueError(f"{self.name}: quantization modelopt_fp4 needs fp4: true")
        return self

    @property
    def sm(self) -> str:
        return "SM" + self.compute_capability.replace(".", "")

    def requires(self, host_check: str) -> bool:
        return host_check in self.host_checks


@cache
def load_targets() -> dict[str, Target]:
    try:
        data = yaml.safe_load(TARGETS_FILE.read_text(encoding="utf-8"))
        targets = {name: Target.model_validate({"name": name, **d}) for name, d in data.items()}
    except (OSError, yaml.YAMLError, ValidationError, AttributeError, TypeError) as exc:
        raise ConfigError(f"target table {TARGETS_FILE} is broken: {exc}") from None
    if DEFAULT_TARGET not in targets:
        raise ConfigError(f"target table {TARGETS_FILE} lacks the default target {DEFAULT_TARGET}")
    return targets


def known_targets() -> list[str]:
    return sorted(load_targets())


def get_target(name: str) -> Target:
    """The named target; ConfigError naming the known ones if there is none."""
    targets = load_targets()
    if name not in targets:
        raise ConfigError(
            f"unknown target '{name}' (gpus.target); known targets: {', '.join(sorted(targets))}"
        )
    return targets[name]


def chosen_value(configured: str | None, choice: Choice) -> str | None:
    """The config's value when it sets one (tuning.*), else the target's choice."""
    return configured if configured is not None else choice.value


def planned_quantization(tuning, target: Target) -> str:
    """modelopt_fp4 or none: tuning.quantization, else the target's."""
    return chosen_value(tuning.quantization, target.quantization)


def planned_moe_backend(tuning, target: Target) -> str | None:
    """The MoE runner the plan passes for a MoE model (None: sglang's own)."""
    return chosen_value(tuning.moe_runner_backend, target.moe_runner_backend)
