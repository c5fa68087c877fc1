"""Stack profiles: which sglang, torch and CUDA toolkit the service venv is built from.

A profile is data: glm5svc/data/profiles/<name>.yaml plus the pinned requirements (lock)
file it names, which the container role installs with `pip install -r`. Adding a stack
(cu130: sglang 0.5.11 on CUDA 13) means adding those two files, no code. How each sglang
version spells its flags is glm5svc.sglang_flags' table, not a profile field.

The sglang shown anywhere (plan, --explain, /status, preflight) is the one installed in
the target venv (SglangVersion.installed); the profile's pin only when none can be read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from packaging.version import InvalidVersion, Version
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from glm5svc.errors import ConfigError

PROFILES_DIR = Path(__file__).parent / "data" / "profiles"
# What roles/glm5_venv installs (glm5_venv_stack): the lock, or sglang alone (no dependencies).
ContainerInstall = Literal["lock", "sglang-only"]


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
    # Container play: {Debian release: installs it runs there}, and why the rest is refused
    # (roles/glm5_stack reads these same keys from the same file).
    containers: dict[str, list[ContainerInstall]] = Field(default_factory=dict)
    refusals: dict[str, str] = Field(default_factory=dict)

    @field_validator("sglang_version", "torch_version")
    @classmethod
    def _pep440(cls, value: str) -> str:
        try:
            Version(value)
        except InvalidVersion:
            raise ValueError(f"'{value}' is not a version number") from None
        return value

    @model_validator(mode="after")
    def _every_refusal_has_its_reason(self) -> StackProfile:
        for release in ("debian12", "debian13"):
            runs = self.containers.get(release, [])
            if set(runs) != {"lock", "sglang-only"} and not self.refusals.get(release):
                raise ValueError(
                    f"containers: {release} runs only {runs}: refusals.{release} must say why"
                )
        return self

    def container_refusal(self, release: str, install: ContainerInstall) -> str | None:
        """Why the container play refuses this stack on `release` (e.g. debian13), or None."""
        if install in self.containers.get(release, []):
            return None
        return self.refusals.get(
            release, f"glm5svc/data/profiles/{self.name}.yaml lists no {release} under containers"
        )

    @property
    def requirements_path(self) -> Path:
        return PROFILES_DIR / self.requirements


def known_profiles() -> list[str]:
    return sorted(path.stem for path in PROFILES_DIR.glob("*.yaml"))


@cache
def load_profile(name: str) -> StackProfile:
    """The named profile; ConfigError (exit 78) naming the known ones if there is none."""
    path = PROFILES_DIR / f"{name}.yaml"
    if "/" in name or not path.is_file():
        raise ConfigError(
            f"server.profile: unknown stack profile '{name}'; set one of the known "
            f"profiles: {', '.join(known_profiles()) or 'none'}"
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


@dataclass(frozen=True)
class SglangVersion:
    """The sglang a plan is for: read from the target venv, else the profile's pin."""

    version: str
    installed: bool  # True: read from the venv's metadata
    detail: str  # where it was read, or why it could not be

    @property
    def label(self) -> str:
        return self.version if self.installed else f"{self.version} (profile, not installed)"


def sglang_version(profile: StackProfile, installed: str | None, detail: str) -> SglangVersion:
    """`installed` (from the venv's metadata) if there is one, else the profile's pin."""
    if installed:
        return SglangVersion(installed, True, detail)
    return SglangVersion(profile.sglang_version, False, detail)
