"""A storage plugin whose reads tests can block, fail or crash: the ``local`` plugin plus a switch.

Loaded by class path (``tests.fetcher_http.controlled_rsm:ControlledRSM``) into an HTTP server
running in the test process, so the test flips :attr:`ControlledRSM.mode` directly:
``block`` holds every read until :attr:`gate` is set (``entered`` tells a read is held),
``fail`` raises a retriable storage error (an outage), ``crash`` an unexpected exception;
:attr:`fail_from_offset` makes reads of segments starting at or after it fail (an outage half way
through a scan).
"""

from __future__ import annotations

import threading
from typing import BinaryIO, ClassVar

from rlm.errors import RemoteStorageError
from rlm.types import IndexType, RemoteLogSegmentMetadata
from rsm_plugins.local import LocalRemoteStorageManager


class ControlledRSM(LocalRemoteStorageManager):
    plugin_name = "controlled-local"
    mode: ClassVar[str] = "ok"
    gate: ClassVar[threading.Event] = threading.Event()
    entered: ClassVar[threading.Event] = threading.Event()
    fail_from_offset: ClassVar[int | None] = None

    @classmethod
    def reset(cls) -> None:
        cls.mode = "ok"
        cls.fail_from_offset = None
        cls.gate.set()  # release anything still held
        cls.gate = threading.Event()
        cls.entered = threading.Event()

    def _switch(self, md: RemoteLogSegmentMetadata) -> None:
        cut = type(self).fail_from_offset
        if cut is not None and md.start_offset >= cut:
            raise RemoteStorageError(f"injected outage from offset {cut}", retriable=True)
        mode = type(self).mode
        if mode == "block":
            type(self).entered.set()
            type(self).gate.wait(120)
        elif mode == "fail":
            raise RemoteStorageError("injected outage: storage unreachable", retriable=True)
        elif mode == "crash":
            raise RuntimeError("injected crash with a secret internal detail")

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        self._switch(metadata)
        return super().fetch_log_segment(metadata, start_position, end_position)

    def read_log_segment_range_into(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                                    out: memoryview) -> int:
        self._switch(metadata)
        return super().read_log_segment_range_into(metadata, start_position, out)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        self._switch(metadata)
        return super().fetch_index(metadata, index_type)
