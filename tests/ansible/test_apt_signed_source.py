"""glm5_apt_signed_source: fingerprints as gpg computes them, cuda-keyring reuse, Debian contrib."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ansible")

from tests.support.ansible_modules import load_module, run_module  # noqa: E402

apt_source = load_module("library/glm5_apt_signed_source.py")
openpgp = sys.modules["ansible.module_utils.glm5_openpgp"]
apt_sources = sys.modules["ansible.module_utils.glm5_apt_sources"]
URL = "https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/"


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """Two fresh keys made by gpg: {name: (armoured, binary, fingerprint gpg reports)}."""
    if shutil.which("gpg") is None:
        pytest.skip("gpg is not installed")
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    env = dict(os.environ, GNUPGHOME=str(home))
    made = {}
    for name, algo in (("ed25519", "ed25519"), ("rsa", "rsa2048")):
        uid = f"glm5 test {name} <{name}@invalid>"
        subprocess.run(
            ["gpg", "--batch", "--passphrase", "", "--quick-gen-key", uid, algo, "sign", "never"],
            env=env, check=True, capture_output=True,
        )  # fmt: skip
        armoured = subprocess.run(
            ["gpg", "--batch", "--armor", "--export", uid], env=env, check=True, capture_output=True
        ).stdout
        binary = subprocess.run(
            ["gpg", "--batch", "--export", uid], env=env, check=True, capture_output=True
        ).stdout
        listing = subprocess.run(
            ["gpg", "--batch", "--with-colons", "--list-keys", uid],
            env=env, check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        fpr = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
        made[name] = (armoured, binary, fpr)
    subprocess.run(["gpgconf", "--kill", "all"], env=env, capture_output=True)
    return made


def test_fingerprints_are_the_ones_gpg_reports(keys):
    for armoured, binary, fpr in keys.values():
        assert openpgp.key_fingerprints(armoured) == [fpr]
        assert openpgp.key_fingerprints(binary) == [fpr]
    both = keys["rsa"][1] + keys["ed25519"][1]  # a keyring holding two keys
    assert openpgp.key_fingerprints(both) == [keys["rsa"][2], keys["ed25519"][2]]


def test_garbage_is_a_clear_error():
    with pytest.raises(openpgp.KeyProblem, match="BEGIN PGP PUBLIC KEY BLOCK"):
        openpgp.dearmor("<html>404 Not Found</html>")
    with pytest.raises(openpgp.KeyProblem, match="not an OpenPGP packet"):
        openpgp.key_fingerprints(b"<html>404 Not Found</html>")


def apply(tmp_path: Path, check: bool = False, **args) -> dict:
    apt = tmp_path / "etc/apt"
    (apt / "sources.list.d").mkdir(parents=True, exist_ok=True)
    params = {
        "url": URL,
        "keyring": str(apt / "keyrings/nvidia-cuda.asc"),
        "sources_file": str(apt / "sources.list.d/nvidia-cuda.sources"),
        "debian_component_file": str(apt / "sources.list.d/glm5-debian-component.sources"),
        "apt_root": str(apt),
        "_ansible_check_mode": check,
        **args,
    }
    return run_module("library/glm5_apt_signed_source.py", params, tmp_path)


def test_fresh_host_gets_the_checked_key_and_one_source(tmp_path, keys):
    armoured, _, fpr = keys["rsa"]
    key_file = tmp_path / "8793F200.pub"
    key_file.write_bytes(armoured)
    args = {"key_url": f"file://{key_file}", "fingerprints": [fpr]}
    planned = apply(tmp_path, check=True, **args)
    assert planned["changed"] and not (tmp_path / "etc/apt/keyrings").exists()
    done = apply(tmp_path, **args)
    assert done["changed"] and done["reused"] == "" and done["fingerprint"] == fpr
    sources = (tmp_path / "etc/apt/sources.list.d/nvidia-cuda.sources").read_text()
    assert f"URIs: {URL}\n" in sources and "Signed-By: " in sources
    assert apply(tmp_path, **args)["changed"] is False
    # A lower-cased name that does not exist is a clear failure naming the case rule.
    missing = apply(tmp_path / "other", key_url=f"file://{tmp_path}/8793f200.pub",
                         fingerprints=[fpr])  # fmt: skip
    assert missing["failed"] and "check the file name" in missing["msg"]


def test_a_key_with_another_fingerprint_is_refused_and_nothing_written(tmp_path, keys):
    armoured, _, fpr = keys["ed25519"]
    (tmp_path / "key.asc").write_bytes(armoured)
    found = apply(tmp_path, key_url=f"file://{tmp_path}/key.asc", fingerprints=[keys["rsa"][2]])
    assert found["failed"] and fpr in found["msg"] and keys["rsa"][2] in found["msg"]
    assert not (tmp_path / "etc/apt/sources.list.d/nvidia-cuda.sources").exists()


def cuda_keyring_entry(tmp_path: Path, key: bytes) -> Path:
    """What NVIDIA's cuda-keyring package leaves: a binary keyring and a one-line source."""
    keyring = tmp_path / "usr/share/keyrings/cuda-archive-keyring.gpg"
    keyring.parent.mkdir(parents=True)
    keyring.write_bytes(key)
    listing = tmp_path / "etc/apt/sources.list.d/cuda-debian13-x86_64.list"
    listing.parent.mkdir(parents=True, exist_ok=True)
    listing.write_text(f"deb [signed-by={keyring}] {URL} /\n")
    return keyring


def test_an_existing_cuda_keyring_entry_is_reused_also_in_check_mode(tmp_path, keys):
    _, binary, fpr = keys["rsa"]
    keyring = cuda_keyring_entry(tmp_path, binary)
    own = tmp_path / "etc/apt/sources.list.d/nvidia-cuda.sources"
    own.write_text(apt_sources.render_sources(URL, "/etc/apt/keyrings/nvidia-cuda.asc", "x"))
    args = {"key_url": "file:///nonexistent", "fingerprints": [fpr]}
    planned = apply(tmp_path, check=True, **args)
    assert planned["changed"] and planned["keyring"] == str(keyring) and own.exists()
    done = apply(tmp_path, **args)
    assert done["reused"].endswith("cuda-debian13-x86_64.list") and not own.exists()
    assert apply(tmp_path, **args)["changed"] is False


def test_an_existing_entry_with_another_key_is_refused(tmp_path, keys):
    cuda_keyring_entry(tmp_path, keys["ed25519"][1])
    found = apply(tmp_path, key_url="file:///nonexistent", fingerprints=[keys["rsa"][2]])
    assert found["failed"] and "cuda-keyring" in found["msg"]


def test_debian_contrib_is_added_beside_the_archive_entry_once(tmp_path, keys):
    armoured, _, fpr = keys["rsa"]
    (tmp_path / "key.asc").write_bytes(armoured)
    debian = tmp_path / "etc/apt/sources.list.d/debian.sources"
    debian.parent.mkdir(parents=True)
    debian.write_text(
        "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie trixie-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )
    args = {
        "key_url": f"file://{tmp_path}/key.asc",
        "fingerprints": [fpr],
        "debian_component": "contrib",
        "debian_release": "trixie",
    }
    done = apply(tmp_path, **args)
    assert done["component_added"]
    added = (tmp_path / "etc/apt/sources.list.d/glm5-debian-component.sources").read_text()
    assert "Suites: trixie trixie-updates\nComponents: contrib\n" in added
    assert apply(tmp_path, **args)["changed"] is False
    # Once Debian's own entry lists contrib, the extra file goes.
    debian.write_text(debian.read_text().replace("Components: main", "Components: main contrib"))
    assert apply(tmp_path, **args)["changed"] is True
    assert not (tmp_path / "etc/apt/sources.list.d/glm5-debian-component.sources").exists()


def test_without_debians_archive_listed_it_only_says_so(tmp_path, keys):
    armoured, _, fpr = keys["rsa"]
    (tmp_path / "key.asc").write_bytes(armoured)
    done = apply(
        tmp_path,
        key_url=f"file://{tmp_path}/key.asc",
        fingerprints=[fpr],
        debian_component="contrib",
        debian_release="trixie",
    )
    assert "failed" not in done and not done["component_added"]
    assert "no entry of Debian's archive for trixie" in done["component_note"]
