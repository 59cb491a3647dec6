"""A bundle mounted from a Kubernetes ConfigMap is reloaded when the ConfigMap changes.

The kubelet writes a ConfigMap volume as the folder ``..<timestamp>/`` with the files,
a link ``..data`` to it, and each file as a link ``bundle.json -> ..data/bundle.json``.
An update writes a new ``..<timestamp>/`` folder and renames a new ``..data`` link over
the old one (one atomic rename), then removes the old folder. Done here the same way,
the plugin's watcher (``TTLCTL_BUNDLE`` on the mounted path) sees the new bundle.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.bundles import write_bundle
from ttlctl.engine.watch import BundleWatcher


def publish(volume: Path, source: Path, stamp: str) -> None:
    """What the kubelet does to put ``source`` in the volume as ``bundle.json``."""
    folder = volume / f"..{stamp}"
    folder.mkdir()
    shutil.copy(source, folder / "bundle.json")
    old = os.readlink(volume / "..data") if (volume / "..data").is_symlink() else None
    (volume / "..data_tmp").symlink_to(folder.name)
    os.rename(volume / "..data_tmp", volume / "..data")
    if not (volume / "bundle.json").is_symlink():
        (volume / "bundle.json").symlink_to("..data/bundle.json")
    if old is not None:
        shutil.rmtree(volume / old)


def test_a_configmap_update_is_reloaded(tmp_path: Path) -> None:
    volume = tmp_path / "etc-ttlctl"
    volume.mkdir()
    publish(volume, write_bundle(tmp_path / "v1.json", cold_start_ttl_s=1.0), "2026_12_01_1")
    env = {"TTLCTL_BUNDLE": str(volume / "bundle.json"), "TTLCTL_BUNDLE_CHECK_S": "0"}
    warned: list[str] = []
    watcher = BundleWatcher.from_env(env, warned.append, lambda m: None)
    assert watcher.policy is not None and watcher.policy.params.cold_start_ttl_s == 1.0
    assert not watcher.poll(1.0)  # nothing changed
    publish(volume, write_bundle(tmp_path / "v2.json", cold_start_ttl_s=2.0), "2026_12_01_2")
    assert watcher.poll(2.0) and watcher.reloads == 1
    assert watcher.policy.params.cold_start_ttl_s == 2.0 and warned == []
