"""Stack profiles (data + lock file against the wheel's pins), patch data, preflight rows."""

from __future__ import annotations

import zipfile
from email.parser import HeaderParser
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from glm5svc import profiles
from glm5svc.config import Config
from glm5svc.errors import ConfigError
from glm5svc.facts import HostFacts
from glm5svc.patches import locate_sglang, nsa_fix_in_place, patch_report
from glm5svc.patches.engine import apply_patch
from glm5svc.patches.spec import PatchDataError, load_patches
from glm5svc.preflight.rows import FAIL, OK, WARN, PreflightContext
from glm5svc.preflight.stack import check_stack_and_patches, stack_rows
from glm5svc.profiles import load_profile, pinned_requirements
from glm5svc.sglang_flags import flag_name

from .conftest import sglang_wheel


def test_cu128_profile_fields():
    profile = load_profile("cu128")
    assert profile.sglang_version == "0.5.10.post1"
    assert profile.cuda_version == "12.8" and profile.cuda_home == Path("/usr/local/cuda-12.8")
    assert profile.requirements_path.name == "cu128.txt"


def test_cu130_profile_fields():
    profile = load_profile("cu130")
    assert (profile.sglang_version, profile.torch_version) == ("0.5.11", "2.11.0")
    assert profile.cuda_version == "13.0" and profile.cuda_home == Path("/usr/local/cuda-13.0")
    assert profile.python_version == "3.12"
    pins = pinned_requirements(profile)
    assert pins["sglang"] == "0.5.11" and pins["torch"] == "2.11.0"
    assert pins["flashinfer-python"] == pins["flashinfer-cubin"] == "0.6.8.post1"
    assert pins["sglang-kernel"] == "0.4.2"
    # 0.5.11's own pin; transformers 5.17 breaks it ('qwen3_asr' is already used).
    assert pins["transformers"] == "5.6.0"


def test_current_profile_fields():
    """The profile on a current sglang: 0.5.23's own pins, CUDA 13.0's torch build."""
    profile = load_profile("cu130-0.5.23")
    assert (profile.sglang_version, profile.torch_version) == ("0.5.23", "2.14.1")
    assert profile.cuda_version == "13.0" and profile.python_version == "3.12"
    pins = pinned_requirements(profile)
    assert pins["sglang"] == "0.5.23" and pins["torch"] == "2.14.1"
    assert pins["flashinfer-python"] == "0.7.2" and "flashinfer-cubin" not in pins
    assert pins["sglang-kernel"] == "0.4.10" and pins["sgl-deep-gemm"] == "0.2.3.post2"
    assert pins["transformers"] == "5.19.0"
    assert flag_name("sparse_decode_backend", profile.sglang_version) == "--dsa-decode-backend"


def test_unknown_profile_names_the_known_ones():
    with pytest.raises(
        ConfigError, match=r"unknown stack profile 'cu13'.*known profiles: cu128, cu130"
    ):
        load_profile("cu13")


def test_a_second_profile_is_data_only(tmp_path, monkeypatch):
    (tmp_path / "cu130.txt").write_text("sglang==0.5.23\ntorch==2.11.0\n")
    base = yaml.safe_load((profiles.PROFILES_DIR / "cu128.yaml").read_text())
    base.update(
        name="cu130",
        sglang_version="0.5.23",
        torch_version="2.11.0",
        cuda_version="13.0",
        cuda_home="/usr/local/cuda-13.0",
        requirements="cu130.txt",
    )
    (tmp_path / "cu130.yaml").write_text(yaml.safe_dump(base))
    monkeypatch.setattr(profiles, "PROFILES_DIR", tmp_path)
    load_profile.cache_clear()
    try:
        profile = load_profile("cu130")
        assert (
            flag_name("sparse_prefill_backend", profile.sglang_version) == "--dsa-prefill-backend"
        )
        assert pinned_requirements(profile) == {"sglang": "0.5.23", "torch": "2.11.0"}
        assert profiles.known_profiles() == ["cu130"]
    finally:
        load_profile.cache_clear()


@pytest.mark.slow
@pytest.mark.parametrize("name", profiles.known_profiles())
def test_lock_file_holds_the_wheels_own_pins(name):
    """Every Requires-Dist of the profile's sglang wheel (Linux x86_64, the profile's Python,
    no extras) is in the lock at a version it allows; == pins exactly."""
    profile = load_profile(name)
    pins = pinned_requirements(profile)
    with zipfile.ZipFile(sglang_wheel(profile.sglang_version)) as wheel:
        meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = HeaderParser().parsestr(wheel.read(meta).decode())
    env = {
        "sys_platform": "linux",
        "platform_machine": "x86_64",
        "python_version": profile.python_version,
        "extra": "",
    }
    checked = 0
    for line in metadata.get_all("Requires-Dist"):
        req = Requirement(line)
        if req.marker and not req.marker.evaluate(env):
            continue
        pinned = pins.get(profiles.normalise_name(req.name))
        assert pinned is not None, f"{req.name} missing from {profile.requirements}"
        assert req.specifier.contains(pinned, prereleases=True), f"{req} vs {pinned}"
        checked += 1
    assert checked > 50
    assert pins["sglang"] == profile.sglang_version
    assert pins["torch"] == profile.torch_version
    # torch's PyPI Linux wheel is the build for the profile's CUDA (cu12 12.8.x / cu13 13.0.x).
    runtime = pins.get("nvidia-cuda-runtime-cu12") or pins["nvidia-cuda-runtime"]
    assert runtime.startswith(profile.cuda_version + ".")


def test_patch_data_loads_and_rejects_overlapping_texts(tmp_path):
    assert [p.id for p in load_patches()] == [
        "flashinfer-autotune-cache",
        "flashinfer-cutlass-autotune",
        "nsa-fp8-mha-prefix",
    ]
    data = yaml.safe_load(
        (
            Path(__file__).parents[2] / "glm5svc/data/patches" / "flashinfer-cutlass-autotune.yaml"
        ).read_text()
    )
    data["variants"][0]["edits"][0]["replacement"] = '# "flashinfer_cutlass",\n'
    (tmp_path / "flashinfer-cutlass-autotune.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(PatchDataError, match="contains another"):
        load_patches(tmp_path)


def site_facts(site) -> HostFacts:
    """The facts serve would read for the sglang in `site` (a site-packages directory)."""
    install = locate_sglang(site_packages=site)
    return HostFacts.given(Config(), sglang=install, patches=patch_report(install))


@pytest.mark.slow
def test_preflight_rows_before_and_after_apply(make_site):
    site = make_site("0.5.10.post1")
    profile = load_profile("cu128")
    rows = {row.name: row for row in stack_rows(site_facts(site), profile)}
    assert rows["sglang"].status == OK
    autotune, nsa = rows["patch flashinfer-cutlass-autotune"], rows["patch nsa-fp8-mha-prefix"]
    assert (
        autotune.status == FAIL
        and autotune.fix == "glm5svc patch apply flashinfer-cutlass-autotune"
    )
    assert nsa.status == WARN and "--disable-radix-cache" in nsa.detail
    report = patch_report(site)
    for result in report.results:
        apply_patch(result, report.install)
    assert {row.status for row in stack_rows(site_facts(site), profile)} == {OK}


@pytest.mark.slow
def test_preflight_rows_other_version_and_missing(make_site, tmp_path):
    rows = stack_rows(site_facts(make_site("0.5.9")), load_profile("cu128"))
    assert rows[0].status == WARN and "pins 0.5.10.post1" in rows[0].detail
    config = Config.model_validate({"server": {"python": str(tmp_path / "nowhere-python")}})
    missing = stack_rows(HostFacts.read(config))
    assert [(r.name, r.status) for r in missing] == [("sglang", FAIL)]


def test_preflight_check_and_nsa_answer_from_config(tmp_path):
    config = Config.model_validate({"server": {"python": str(tmp_path / "bin/python")}})
    rows = check_stack_and_patches(PreflightContext(config, HostFacts.read(config)))
    assert rows[0].status == FAIL and "no Python interpreter" in rows[0].detail
    assert nsa_fix_in_place(config) is None
