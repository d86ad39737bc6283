"""A storage plugin for fault tests: the ``local`` plugin whose copies wait at a gate.

The gate directory is ``<root>.gates`` (beside the storage root, so it is never listed as a
stored object). A copy by broker ``N`` (of anything but the preflight's probe segment) touches
``started-<N>-<segment id>`` and then waits until ``open-<N>`` or ``open-all`` exists there, so a
test can hold a copy "in the middle" while it injects a fault, then let it finish.
"""

from __future__ import annotations

import time
from pathlib import Path

from rlm.daemon.probes import PROBE_TOPIC
from rlm.types import LogSegmentData, RemoteLogSegmentMetadata
from rsm_plugins.local import LocalRemoteStorageManager

GATE_TIMEOUT_S = 600.0


def gate_dir(root: Path) -> Path:
    return root.with_name(root.name + ".gates")


def open_gate(root: Path, broker_id: int | None = None) -> None:
    d = gate_dir(root)
    d.mkdir(parents=True, exist_ok=True)
    (d / ("open-all" if broker_id is None else f"open-{broker_id}")).touch()


def close_gate(root: Path, broker_id: int | None = None) -> None:
    (gate_dir(root) / ("open-all" if broker_id is None else f"open-{broker_id}")).unlink(missing_ok=True)


def started(root: Path, broker_id: int) -> list[str]:
    """Segment ids whose copy by ``broker_id`` reached the gate, in no particular order."""
    prefix = f"started-{broker_id}-"
    d = gate_dir(root)
    return [f.name[len(prefix) :] for f in d.glob(prefix + "*")] if d.exists() else []


class GatedLocalRSM(LocalRemoteStorageManager):
    plugin_name = "gated-local"

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        if metadata.topic_id_partition.topic != PROBE_TOPIC:  # let the start-up preflight through
            d = gate_dir(self.root)
            d.mkdir(parents=True, exist_ok=True)
            node = metadata.broker_id
            (d / f"started-{node}-{metadata.remote_log_segment_id.id.text}").touch()
            deadline = time.monotonic() + GATE_TIMEOUT_S
            while not ((d / f"open-{node}").exists() or (d / "open-all").exists()):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"gate for broker {node} never opened")
                time.sleep(0.05)
        return super().copy_log_segment_data(metadata, segment_data)
