"""The patch set against the real sglang wheels: verdicts, apply, re-apply, revert, tamper."""

from __future__ import annotations

import ast
import os
import py_compile
import zipfile

import pytest

from glm5svc import atomic_file
from glm5svc.patches import Verdict, nsa_fix_in_place, patch_report
from glm5svc.patches.engine import (
    PatchWriteError,
    UnknownSourceError,
    apply_patch,
    refuse_unknown,
    revert_patch,
)
from glm5svc.patches.files import Backup

from .conftest import sglang_wheel, snapshot

pytestmark = pytest.mark.slow

AUTOTUNE, NSA = "flashinfer-cutlass-autotune", "nsa-fp8-mha-prefix"
CACHE = "flashinfer-autotune-cache"
N, A, U, X = Verdict.NOT_APPLIED, Verdict.NOT_APPLICABLE, Verdict.FIXED_UPSTREAM, None

# version: {patch: (verdict, variant)}
EXPECTED = {
    "0.5.6": {CACHE: (A, None), AUTOTUNE: (A, None), NSA: (A, None)},
    "0.5.7": {CACHE: (A, None), AUTOTUNE: (N, "model-runner-list"), NSA: (A, None)},
    "0.5.9": {CACHE: (N, "model-runner"), AUTOTUNE: (N, "model-runner-list"), NSA: (N, "nsa")},
    "0.5.10.post1": {
        CACHE: (N, "model-runner"),
        AUTOTUNE: (N, "model-runner-list"),
        NSA: (N, "nsa"),
    },
    "0.5.11": {CACHE: (N, "model-runner"), AUTOTUNE: (N, "model-runner-list"), NSA: (N, "nsa")},
    "0.5.12.post1": {CACHE: (U, None), AUTOTUNE: (N, "model-runner-list"), NSA: (N, "nsa")},
    "0.5.13": {CACHE: (U, None), AUTOTUNE: (U, None), NSA: (N, "dsa")},
    "0.5.23": {CACHE: (U, None), AUTOTUNE: (U, None), NSA: (N, "dsa-exec")},
}
PATCHABLE = ["0.5.7", "0.5.9", "0.5.10.post1", "0.5.11", "0.5.12.post1", "0.5.13", "0.5.23"]


def verdicts(site):
    report = patch_report(site)
    return {r.patch.id: (r.verdict, r.variant.id if r.variant else None) for r in report.results}


@pytest.mark.parametrize("version", list(EXPECTED))
def test_verdict_per_version(make_site, version):
    site = make_site(version)
    assert patch_report(site).install.version == version
    assert verdicts(site) == EXPECTED[version]
    assert nsa_fix_in_place(site) is False


@pytest.mark.parametrize("version", PATCHABLE)
def test_apply_reapply_compile_revert(make_site, tmp_path, version):
    site = make_site(version)
    original = snapshot(site)
    report = patch_report(site)
    targets = [r.path for r in report.results if r.verdict is N]
    for path in targets:  # a stale bytecode file that apply must remove
        (path.parent / "__pycache__").mkdir(exist_ok=True)
        (path.parent / "__pycache__" / f"{path.stem}.cpython-311.pyc").write_bytes(b"stale")

    applied = [apply_patch(r, report.install) for r in report.results]
    assert {r.patch.id for r in applied if r.action == "applied"} == {
        p for p, (v, _) in EXPECTED[version].items() if v is N
    }
    for path in targets:
        py_compile.compile(str(path), cfile=str(tmp_path / "check.pyc"), doraise=True)
        assert not list((path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"))
    assert nsa_fix_in_place(site) is (EXPECTED[version][NSA][0] is N)
    _assert_semantics(site, version)

    after_first = snapshot(site)
    again = patch_report(site)
    assert all(r.verdict in (Verdict.APPLIED, U, A) for r in again.results)
    assert all(apply_patch(r, again.install).action == "none" for r in again.results)
    assert snapshot(site) == after_first

    reverted = [revert_patch(r, again.install) for r in patch_report(site).results]
    assert {r.patch.id for r in reverted if r.action == "reverted"} == {
        r.patch.id for r in applied if r.action == "applied"
    }
    restored = snapshot(site)
    restored = {k: v for k, v in restored.items() if "__pycache__" not in k}
    assert restored == original  # byte for byte, and the backups are gone
    assert verdicts(site) == EXPECTED[version]


def _assert_semantics(site, version):
    """The patched code does what the patch claims, read back through the AST."""
    report = patch_report(site)
    autotune = report.result(AUTOTUNE)
    if autotune.verdict is Verdict.APPLIED:
        tree = ast.parse(autotune.path.read_text())
        fn = next(
            n for n in ast.walk(tree) if getattr(n, "name", "") == "_should_run_flashinfer_autotune"
        )
        lists = [n for n in ast.walk(fn) if isinstance(n, ast.List)]
        names = {e.value for lst in lists for e in lst.elts if isinstance(e, ast.Constant)}
        assert {"flashinfer_trtllm", "flashinfer_cutlass"} <= names
    nsa = report.result(NSA)
    if nsa.verdict is Verdict.APPLIED:
        source = nsa.path.read_text()
        tree = ast.parse(source)
        prefix = nsa.variant.id.split("-")[0]
        fn = next(
            n
            for n in ast.walk(tree)
            if getattr(n, "name", "") == f"_get_mla_kv_buffer_from_fp8_for_{prefix}"
        )
        body = ast.unparse(fn)
        assert "fetch_mha_one_shot_kv_indices()" in body
        assert "assert kv_indices is not None" not in body
        guards = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.If) and f"{prefix}_kv_cache_store_fp8" in ast.unparse(n.test)
        ]
        assert len(guards) == 1  # the FP8 path is chosen by the pool's layout ...
        assert "trtllm" not in ast.unparse(guards[0].test)  # ... not by the backend flags
        assert f"_get_mla_kv_buffer_from_fp8_for_{prefix}" in ast.unparse(guards[0].body)


@pytest.mark.parametrize(
    ("version", "pool_attr", "pool_getter"),
    [
        ("0.5.9", "nsa_kv_cache_store_fp8", "forward_batch.token_to_kv_pool"),
        ("0.5.10.post1", "nsa_kv_cache_store_fp8", "forward_batch.token_to_kv_pool"),
        ("0.5.12.post1", "nsa_kv_cache_store_fp8", "forward_batch.token_to_kv_pool"),
        ("0.5.13", "dsa_kv_cache_store_fp8", "get_token_to_kv_pool,"),
        ("0.5.23", "dsa_kv_cache_store_fp8", "get_token_to_kv_pool,"),
    ],
)
def test_names_the_nsa_fix_relies_on_exist_in_the_wheel(version, pool_attr, pool_getter):
    """sglang-versions.md facts, checked against the wheel's own text."""
    with zipfile.ZipFile(sglang_wheel(version)) as wheel:

        def text(prefix):
            return "".join(
                wheel.read(n).decode()
                for n in wheel.namelist()
                if n.startswith(prefix) and n.endswith(".py")
            )

        assert f"self.{pool_attr} = " in text("sglang/srt/mem_cache/")
        assert "def fetch_mha_one_shot_kv_indices(self)" in text("sglang/srt/model_executor/")
        mha = wheel.read(
            "sglang/srt/models/deepseek_common/attention_forward_methods/forward_mha.py"
        ).decode()
        assert pool_getter in mha
        assert mha.count("page_table_1_flattened") >= 1


def test_anchor_edited_is_unknown_source_and_untouched(make_site):
    site = make_site("0.5.10.post1")
    path = site / "sglang/srt/models/deepseek_common/attention_forward_methods/forward_mha.py"
    path.write_text(path.read_text().replace('== "fp8_e4m3"', '== "fp8_e5m2"', 1))
    before = snapshot(site)
    report = patch_report(site)
    nsa = report.result(NSA)
    assert nsa.verdict is Verdict.UNKNOWN_SOURCE
    assert "0.5.10.post1" in nsa.detail and "forward_mha.py" in nsa.detail
    assert nsa_fix_in_place(site) is None
    with pytest.raises(UnknownSourceError):
        refuse_unknown(report.results)
    assert apply_patch(nsa, report.install).action == "none"
    assert snapshot(site) == before


def test_anchor_twice_is_unknown_source(make_site):
    site = make_site("0.5.12.post1")
    path = site / "sglang/srt/model_executor/model_runner.py"
    anchor = patch_report(site).result(AUTOTUNE).variant.edits[0].anchor
    path.write_text(path.read_text() + "\nBACKENDS = [\n" + anchor + "]\n")
    before = snapshot(site)
    result = patch_report(site).result(AUTOTUNE)
    assert result.verdict is Verdict.UNKNOWN_SOURCE
    assert "anchor x2" in result.detail
    assert snapshot(site) == before


def test_half_patched_file_is_unknown_source(make_site):
    site = make_site("0.5.10.post1")
    result = patch_report(site).result(NSA)
    edit = result.variant.edits[0]
    result.path.write_text(result.path.read_text().replace(edit.anchor, edit.replacement))
    assert patch_report(site).result(NSA).verdict is Verdict.UNKNOWN_SOURCE


def test_failed_rename_leaves_the_original(make_site, monkeypatch):
    site = make_site("0.5.10.post1")
    before = snapshot(site)
    report = patch_report(site)
    real_replace = os.replace

    def failing_replace(src, dst):
        if str(dst).endswith(".py"):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(atomic_file.os, "replace", failing_replace)
    with pytest.raises(PatchWriteError, match="could not write"):
        apply_patch(report.result(AUTOTUNE), report.install)
    assert snapshot(site) == before  # no temp file, no backup, same bytes
    assert patch_report(site).result(AUTOTUNE).verdict is N


def test_revert_without_backup_restores_identical_bytes(make_site):
    site = make_site("0.5.23")
    before = snapshot(site)
    report = patch_report(site)
    applied = apply_patch(report.result(NSA), report.install)
    Backup(applied.path, NSA).remove()
    reverted = revert_patch(patch_report(site).result(NSA), report.install)
    assert reverted.action == "reverted"
    assert snapshot(site) == before


def test_stale_backup_is_not_restored(make_site):
    """A backup from before a reinstall must not overwrite the new sglang's file."""
    site = make_site("0.5.10.post1")
    report = patch_report(site)
    applied = apply_patch(report.result(AUTOTUNE), report.install)
    backup = Backup(applied.path, AUTOTUNE)
    backup.data_path.write_bytes(b"# not the original\n")  # hash no longer matches
    revert_patch(patch_report(site).result(AUTOTUNE), report.install)
    assert b"# not the original" not in applied.path.read_bytes()
    assert patch_report(site).result(AUTOTUNE).verdict is N


def test_version_says_fixed_upstream_but_code_does_not(make_site):
    """An sglang whose version claims the upstream fix but whose code is older (a fork, a
    mislabelled build) is unknown source for both patches, never patched by guess."""
    site = make_site("0.5.12.post1")
    metadata = next(site.glob("sglang-*.dist-info")) / "METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 0.5.12.post1", "Version: 0.5.13"))
    report = patch_report(site)
    assert report.install.version == "0.5.13"
    autotune, nsa = report.result(AUTOTUNE), report.result(NSA)
    assert autotune.verdict is Verdict.UNKNOWN_SOURCE and "upstream fix" in autotune.detail
    assert nsa.verdict is Verdict.UNKNOWN_SOURCE and "variant dsa" in nsa.detail
    assert nsa_fix_in_place(site) is None
