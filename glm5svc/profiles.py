"""Stack profiles: which sglang, torch and CUDA toolkit the service venv is built from.

A profile is data: glm5svc/data/profiles/<name>.yaml plus the pinned requirements (lock)
file it names, which the container role installs with `pip install -r`. Adding a stack
(e.g. a CUDA 13 one with a newer sglang) means adding those two files, no code.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from glm5svc.errors import ConfigError

PROFILES_DIR = Path(__file__).parent / "data" / "profiles"
# sglang renamed --nsa-* to --dsa-* in 0.5.13 and removed the old names in 0.5.20.
DSA_FLAGS_FROM = Version("0.5.13")
NSA_FLAGS_REMOVED_IN = Version("0.5.20")


class StackProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    description: str = ""
    sglang_version: str
    torch_version: str
    cuda_version: str = Field(pattern=r"^\d+\.\d+$")
    cuda_home: Path
    python_version: str = Field(pattern=r"^3\.\d+$")
    requirements: str = Field(min_length=1)
    sparse_attention_flag_prefix: Literal["nsa", "dsa"]

    @field_validator("sglang_version", "torch_version")
    @classmethod
    def _pep440(cls, value: str) -> str:
        try:
            Version(value)
        except InvalidVersion:
            raise ValueError(f"'{value}' is not a version number") from None
        return value

    @model_validator(mode="after")
    def _flag_prefix_matches_version(self) -> StackProfile:
        version = Version(self.sglang_version)
        prefix = self.sparse_attention_flag_prefix
        if prefix == "dsa" and version < DSA_FLAGS_FROM:
            raise ValueError(f"sglang {version} has only --nsa-* flags (--dsa-* from 0.5.13)")
        if prefix == "nsa" and version >= NSA_FLAGS_REMOVED_IN:
            raise ValueError(f"sglang {version} no longer has --nsa-* flags (removed in 0.5.20)")
        return self

    @property
    def requirements_path(self) -> Path:
        return PROFILES_DIR / self.requirements

    def sparse_attention_flag(self, phase: Literal["decode", "prefill"]) -> str:
        """`--nsa-decode-backend` / `--dsa-prefill-backend` ... as this sglang spells it."""
        return f"--{self.sparse_attention_flag_prefix}-{phase}-backend"


def known_profiles() -> list[str]:
    return sorted(path.stem for path in PROFILES_DIR.glob("*.yaml"))


@cache
def load_profile(name: str) -> StackProfile:
    """The named profile; ConfigError (exit 78) naming the known ones if there is none."""
    path = PROFILES_DIR / f"{name}.yaml"
    if "/" in name or not path.is_file():
        raise ConfigError(
            f"unknown stack profile '{name}' (server.profile); "
            f"known profiles: {', '.join(known_profiles()) or 'none'}"
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        profile = StackProfile.model_validate(data)
    except (yaml.YAMLError, ValidationError) as exc:
        raise ConfigError(f"stack profile {path} is broken: {exc}") from None
    if profile.name != name:
        raise ConfigError(f"{path}: 'name' is '{profile.name}', must match the file name")
    if not profile.requirements_path.is_file():
        raise ConfigError(f"{path}: requirements file {profile.requirements_path} is missing")
    return profile


def pinned_requirements(profile: StackProfile) -> dict[str, str]:
    """{normalised package name: pinned version} from the profile's lock file."""
    pins: dict[str, str] = {}
    for raw in profile.requirements_path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise ConfigError(f"{profile.requirements_path}: '{line}' is not pinned with ==")
        pins[normalise_name(name)] = version.strip()
    return pins


def normalise_name(name: str) -> str:
    """PEP 503 normalisation: Foo_Bar.baz -> foo-bar-baz."""
    return re.sub(r"[-_.]+", "-", name).lower().strip()
