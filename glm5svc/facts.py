"""The facts about this host that one glm5svc process reads once and everything after shares.

    facts = HostFacts.read(config)
    run_preflight(config, facts)          # the doctor's rows
    plan_for_service(config, facts)       # the launch plan serve starts

Each fact has one reader, called once here:
- the GPUs: NVML (glm5svc.gpus); the config's count and compute capability when NVML is
  unavailable, with why;
- the sglang installed for server.python: one subprocess (glm5svc.patches.install), and every
  patch's verdict on its sources (the NSA FP8 prefill fix decides the radix cache);
- the model's config.json (glm5svc.model_info);
- the API key (server.api_key_file).

Reading never raises: a fact that cannot be read keeps why, and whoever needs it decides.
Preflight turns a missing sglang into a row; the API key's problem is raised when the key
is asked for (`api_key()`), so serve, command and validate exit 78 as before while the
doctor still runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from glm5svc.config import Config, read_api_key
from glm5svc.errors import ConfigError, Glm5Error
from glm5svc.gpus import GpuFacts, facts_from_config, read_nvml_facts
from glm5svc.model_info import ModelFacts, read_model_facts
from glm5svc.nvml import NvmlUnavailable
from glm5svc.patches import PatchReport, SglangInstall, locate_sglang, patch_report
from glm5svc.profiles import SglangVersion, StackProfile, sglang_version


@dataclass(frozen=True)
class HostFacts:
    gpus: GpuFacts  # NVML's, else the config's (source "config", with a note)
    model: ModelFacts
    nvml_error: str | None = None  # why NVML could not be read; None: gpus are NVML's
    sglang: SglangInstall | None = None
    sglang_error: str = "not read"  # why there is no sglang (shown in rows and notes)
    patches: PatchReport | None = None  # every patch's verdict on that sglang
    patches_error: str = ""
    # Is the NSA FP8 prefill fix in that sglang (patched or fixed upstream)? None: cannot
    # tell, which keeps the radix cache off.
    nsa_fix_in_place: bool | None = None
    key: str | None = None
    key_error: str | None = None  # server.api_key_file's problem, raised by api_key()

    @classmethod
    def read(cls, config: Config) -> HostFacts:
        """Read every fact once (NVML, one subprocess for sglang, config.json, the key)."""
        try:
            gpus, nvml_error = read_nvml_facts(), None
        except NvmlUnavailable as exc:
            gpus, nvml_error = facts_from_config(config, str(exc)), str(exc)
        install, install_error = _read_sglang(config)
        report, report_error = _read_patches(install)
        try:
            key, key_error = read_api_key(config.server.api_key_file), None
        except ConfigError as exc:
            key, key_error = None, str(exc)
        return cls(
            gpus=gpus,
            model=read_model_facts(config.model.path),
            nvml_error=nvml_error,
            sglang=install,
            sglang_error=install_error,
            patches=report,
            patches_error=report_error,
            nsa_fix_in_place=report.radix_cache_safe if report is not None else None,
            key=key,
            key_error=key_error,
        )

    @classmethod
    def given(
        cls,
        config: Config,
        gpus: GpuFacts | None = None,
        nvml_error: str = "NVML not read",
        model: ModelFacts | None = None,
        **known,
    ) -> HostFacts:
        """Facts known already, nothing read from the host but the model's config.json when
        `model` is not given (a check run alone, the Ansible model check, tests). `gpus`:
        what NVML gave (None: NVML unavailable, `nvml_error` says why); `known`: the other
        fields (sglang, patches, nsa_fix_in_place, key, ...)."""
        if gpus is None:
            gpus, error = facts_from_config(config, nvml_error), nvml_error
        else:
            error = None
        model = model or read_model_facts(config.model.path)
        return cls(gpus=gpus, model=model, nvml_error=error, **known)

    @property
    def nvml_gpus(self) -> GpuFacts | None:
        """The GPUs as NVML saw them; None when NVML was unavailable (nvml_error says why)."""
        return self.gpus if self.nvml_error is None else None

    def sglang_version(self, profile: StackProfile) -> SglangVersion:
        """The installed sglang's version, else the profile's pin labelled "(profile, not
        installed)"."""
        if self.sglang is None:
            return sglang_version(profile, None, f"not installed: {self.sglang_error}")
        python = self.sglang.python or "the given site-packages"
        where = f"installed, read from {self.sglang.site_packages} ({python})"
        return sglang_version(profile, self.sglang.version, where)

    def api_key(self) -> str | None:
        """The key (None: no server.api_key_file); ConfigError (exit 78) if it was unusable."""
        if self.key_error is not None:
            raise ConfigError(self.key_error)
        return self.key


def _read_sglang(config: Config) -> tuple[SglangInstall | None, str]:
    try:
        install = locate_sglang(
            python=config.server.python, pythonpath=config.server.env.get("PYTHONPATH")
        )
    except Glm5Error as exc:
        return None, exc.render()
    except (OSError, ValueError) as exc:
        return None, f"{config.server.python}: {exc}"
    return install, ""


def _read_patches(install: SglangInstall | None) -> tuple[PatchReport | None, str]:
    if install is None:
        return None, "no sglang to check"
    try:
        return patch_report(install), ""
    except (Glm5Error, OSError, ValueError) as exc:
        return None, f"the patches could not be checked: {exc}"
