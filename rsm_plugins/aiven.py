"""``aiven``: read segments that Kafka's native tiered storage wrote with Aiven's plugin.

Aiven's RemoteStorageManager stores three objects per segment,
``<key.prefix><topic>-<topicId>/<partition>/<20-digit start offset>-<segmentId>.{log,indexes,rsm-manifest}``:
the ``.log`` cut into chunks (each optionally zstd-compressed, then AES-256-GCM encrypted), all
indexes concatenated, and a JSON manifest mapping both (:mod:`rsm_plugins.aiven_manifest`). This
plugin serves them through the ordinary :class:`RemoteStorageManager` reads — byte ranges of the
*original* segment and whole indexes — so the read core (chunk cache, read-ahead across segments,
planning, transactions) and every read face work over a native tiered-storage cluster unchanged.

Bytes are read through one of our storage plugins (``local``, ``s3``, ``fsspec``) with
:meth:`RemoteStorageManager.open_object`: their clients, credentials, retries and error mapping.
A read is complete or a typed error: a chunk index that disagrees with the object, a chunk that
does not decompress to its size, is :class:`RemoteObjectFormatError`; a GCM tag that fails is
:class:`ChunkIntegrityError`; an unknown key id or wrong private key is :class:`DataKeyError`.
Read-only by construction: writing to storage that a broker owns is refused
(:class:`ReadOnlyStorageError`).
"""

from __future__ import annotations

import io
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

import structlog
import zstandard

from . import aiven_config, descriptor, layout
from .aiven_crypto import KeyRing, SegmentCipher
from .aiven_keys import ObjectKeys, object_keys, partition_prefix
from .aiven_manifest import SegmentManifest, parse_manifest
from .api import (
    ConfigError,
    DataKeyError,
    IndexType,
    KafkaUuid,
    LogSegmentData,
    ReadOnlyStorageError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    RemoteObjectFormatError,
    RemoteRangeError,
    RemoteResourceNotFoundError,
    RemoteStorageManager,
    StoredObject,
    TopicIdPartition,
    check_range,
    parse_config,
)
from .layout import SegmentFileType
from .loading import load

log = structlog.get_logger(__name__)
_NAME = re.compile(r"^(\d{20})-([A-Za-z0-9_-]{22})\.(log|indexes|rsm-manifest)$")
#: original bytes decoded per step of a long read (one ranged GET of their transformed bytes)
_GROUP_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class OpenedSegment:
    """A segment's manifest with its object keys and (when encrypted) its unwrapped data key."""

    keys: ObjectKeys
    manifest: SegmentManifest
    cipher: SegmentCipher | None


class AivenRemoteStorageManager(RemoteStorageManager[aiven_config.AivenConfig]):
    """Aiven's tiered-storage object layout over a ``local``, ``s3`` or ``fsspec`` backend. Read-only."""

    plugin_name = "aiven"
    read_only = True
    config_model = aiven_config.AivenConfig
    transient_attributes = frozenset({"_lock", "_manifests", "_decoded", "_decoded_bytes"})

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._manifests: OrderedDict[str, OpenedSegment] = OrderedDict()
        self._decoded: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._decoded_bytes = 0
        self._backend: RemoteStorageManager | None = None
        self._keyring: KeyRing | None = None

    # ---- configuration ----------------------------------------------------------------------
    def configure(self, config: Mapping[str, Any]) -> None:
        """Accept the broker's ``rsm.config.*`` lines as written (see :mod:`rsm_plugins.aiven_config`)."""
        cfg = parse_config(self.config_model, aiven_config.translate(config), self.display_name)
        self._config = cfg
        try:
            self.on_configure(cfg)
        except BaseException:
            self._config = None
            raise

    def on_configure(self, cfg: aiven_config.AivenConfig) -> None:
        if cfg.encryption_enabled and not cfg.key_pairs:
            raise ConfigError("aiven storage plugin: encryption.enabled=true needs "
                              "encryption.key.pairs.<id>.private.key.file for every key pair in use")
        if cfg.encryption_key_pair_id is not None and cfg.key_pairs and \
                cfg.encryption_key_pair_id not in cfg.key_pairs:
            raise ConfigError(f"aiven storage plugin: encryption.key.pair.id={cfg.encryption_key_pair_id!r} "
                              "has no encryption.key.pairs entry")
        self._keyring = KeyRing({k: p.private_key_file for k, p in cfg.key_pairs.items()})
        self._keyring.check()
        block = dict(cfg.backend_config)
        if cfg.backend in ("local", "fsspec"):  # a reader creates nothing, not even a missing root
            block.setdefault("create_root", False)
        self._backend = load(cfg.backend, block)
        log.info("rsm_configured", plugin=self.plugin_name, backend=cfg.backend, key_prefix=cfg.key_prefix,
                 key_pairs=sorted(cfg.key_pairs))

    @property
    def backend(self) -> RemoteStorageManager:
        if self._backend is None:
            raise ReadOnlyStorageError("aiven storage plugin used before configure()")
        return self._backend

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()

    # ---- read-only --------------------------------------------------------------------------
    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        raise ReadOnlyStorageError(
            f"{metadata.remote_log_segment_id}: the aiven layout is read-only; the broker's own "
            "tiered storage owns these objects")

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        raise ReadOnlyStorageError(
            f"{metadata.remote_log_segment_id}: the aiven layout is read-only; the broker's own "
            "tiered storage expires these objects")

    # ---- manifests --------------------------------------------------------------------------
    def open_segment(self, md: RemoteLogSegmentMetadata) -> OpenedSegment:
        """The segment's manifest (cached) and data key; checked against the metadata's size."""
        sid = md.remote_log_segment_id.id.text
        with self._lock:
            seg = self._manifests.get(sid)
            if seg is not None:
                self._manifests.move_to_end(sid)
                return seg
        keys = object_keys(self.config.key_prefix, md)
        with self.backend.open_object(keys.manifest) as f:
            raw = f.read()
        manifest = parse_manifest(raw, keys.manifest)
        if manifest.chunk_index.original_size != md.segment_size_in_bytes:
            raise RemoteObjectFormatError(
                f"{keys.manifest}: manifest says the segment has {manifest.chunk_index.original_size} "
                f"bytes, its metadata says {md.segment_size_in_bytes}")
        cipher = None
        if manifest.encryption is not None:
            if self._keyring is None or not self._keyring.private_key_files:
                raise DataKeyError(f"{keys.manifest}: segment is encrypted (key pair "
                                   f"{manifest.encryption.key_pair_id!r}) and no key pairs are configured")
            enc = manifest.encryption
            cipher = self._keyring.unwrap(enc.key_pair_id, enc.wrapped_key, enc.aad, keys.manifest)
        seg = OpenedSegment(keys, manifest, cipher)
        with self._lock:
            if self.config.manifest_cache_size > 0:
                self._manifests[sid] = seg
                while len(self._manifests) > self.config.manifest_cache_size:
                    self._manifests.popitem(last=False)
        return seg

    # ---- reads ------------------------------------------------------------------------------
    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None = None
    ) -> BinaryIO:
        seg = self.open_segment(metadata)
        ci = seg.manifest.chunk_index
        begin, stop = check_range(start_position, end_position, ci.original_size, seg.keys.log)
        if begin == stop:
            return io.BytesIO(b"")
        chunks = ci.chunks_for(begin, stop)
        if not seg.manifest.compression and seg.cipher is None:
            if ci.transformed_size != ci.original_size:
                raise RemoteObjectFormatError(
                    f"{seg.keys.manifest}: untransformed chunks total {ci.transformed_size} bytes, "
                    f"the segment has {ci.original_size}")
            # the object is the segment file itself: a plain ranged read, streamed
            return self._exact(seg.keys.log, begin, stop)
        group = max(1, _GROUP_BYTES // ci.original_chunk_size)
        if len(chunks) <= group:
            return io.BytesIO(self.decoded_range(metadata, seg, begin, stop))
        # a long range (a whole segment for `rlm verify`, Kafka's "to the end"): decoded lazily,
        # a group of chunks at a time, so it is never held whole
        return io.BufferedReader(_DecodedStream(self, metadata, seg, begin, stop, group),
                                 buffer_size=_GROUP_BYTES)

    def decoded_range(self, md: RemoteLogSegmentMetadata, seg: OpenedSegment, begin: int, stop: int) -> bytes:
        """Original bytes ``[begin, stop)`` of a transformed segment."""
        ci = seg.manifest.chunk_index
        chunks = ci.chunks_for(begin, stop)
        parts = self._decoded_chunks(md, seg, chunks)
        base = chunks.start * ci.original_chunk_size
        joined = parts[0] if len(parts) == 1 else b"".join(parts)
        if begin == base and stop - begin == len(joined):
            return joined
        return memoryview(joined)[begin - base:stop - base].tobytes()

    def _decoded_chunks(self, md: RemoteLogSegmentMetadata, seg: OpenedSegment, chunks: range) -> list[bytes]:
        """Plaintext of ``chunks``; missing ones fetched with one ranged GET and decoded."""
        sid = md.remote_log_segment_id.id.text
        with self._lock:
            found = {i: self._decoded.get((sid, i)) for i in chunks}
        missing = [i for i in chunks if found[i] is None]
        if missing:
            ci = seg.manifest.chunk_index
            lo, hi = int(ci.starts[missing[0]]), int(ci.starts[missing[-1] + 1])
            raw = memoryview(self._read(seg.keys.log, lo, hi, seg.keys.manifest))
            for i in missing:
                piece = raw[int(ci.starts[i]) - lo:int(ci.starts[i + 1]) - lo]
                found[i] = self._decode(seg, i, piece)
            self._remember(sid, {i: found[i] for i in missing})
        return [found[i] or b"" for i in chunks]

    def _decode(self, seg: OpenedSegment, chunk: int, stored: memoryview) -> bytes:
        ci = seg.manifest.chunk_index
        lo, hi = ci.original_range(chunk)
        data: bytes | memoryview = stored
        if seg.cipher is not None:
            data = seg.cipher.decrypt(stored, seg.keys.log, chunk)
        if seg.manifest.compression:
            data = _unzstd(data, hi - lo, seg.keys.log, chunk)
        if len(data) != hi - lo:
            raise RemoteObjectFormatError(
                f"{seg.keys.log}: chunk {chunk} decodes to {len(data)} bytes, the manifest says {hi - lo}")
        return bytes(data)

    def _remember(self, sid: str, decoded: dict[int, bytes | None]) -> None:
        budget = self.config.decoded_cache_bytes
        with self._lock:
            for i, data in decoded.items():
                if data is None or len(data) > budget:
                    continue
                self._decoded[(sid, i)] = data
                self._decoded_bytes += len(data)
            while self._decoded_bytes > budget and self._decoded:
                _, old = self._decoded.popitem(last=False)
                self._decoded_bytes -= len(old)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> BinaryIO:
        seg = self.open_segment(metadata)
        piece = seg.manifest.index_slice(index_type)
        if piece is None:
            raise RemoteResourceNotFoundError(
                f"{seg.keys.indexes}: segment {metadata.remote_log_segment_id} has no "
                f"{index_type.name} index")
        if piece.size == 0:
            return io.BytesIO(b"")
        raw = self._read(seg.keys.indexes, piece.position, piece.position + piece.size, seg.keys.manifest)
        if seg.cipher is not None:
            raw = seg.cipher.decrypt(raw, f"{seg.keys.indexes} ({index_type.name} index)", 0)
        return io.BytesIO(raw)

    def _exact(self, key: str, start: int, stop: int) -> BinaryIO:
        try:
            return self.backend.open_object(key, start, stop - 1)
        except RemoteRangeError as e:
            raise RemoteObjectFormatError(f"{key}: shorter than the manifest's chunk index says: {e}") from e

    def _read(self, key: str, start: int, stop: int, manifest_key: str) -> bytes:
        """Exactly bytes ``[start, stop)`` of ``key``; fewer means the manifest does not fit the object."""
        with self._exact(key, start, stop) as f:
            data = f.read(stop - start)
        if len(data) != stop - start:
            raise RemoteObjectFormatError(
                f"{key}: {len(data)} bytes at position {start}, the chunk index of {manifest_key} says "
                f"{stop - start}: the object and its manifest disagree")
        return bytes(data)

    def list_segment_objects(self, tp: TopicIdPartition) -> list[StoredObject] | None:
        """Every object under the partition's key prefix, with the segment id and start offset of
        Aiven's names (``.log``, ``.indexes``, ``.rsm-manifest``), for ``rlm verify``'s orphans;
        ``None`` when the backend cannot list. Objects moved by custom metadata are not seen."""
        listed = self.backend.list_objects(self.config.key_prefix + partition_prefix(tp))
        if listed is None:
            return None
        out = []
        for obj in listed:
            m = _NAME.match(obj.key.rsplit("/", 1)[-1])
            if m is None:
                out.append(obj)
                continue
            ft = {"log": SegmentFileType.SEGMENT, "rsm-manifest": SegmentFileType.DESCRIPTOR}.get(m.group(3))
            out.append(StoredObject(obj.key, obj.size, obj.modified_ms, m.group(2), int(m.group(1)), ft))
        return out

    def list_partitions(self) -> list[TopicIdPartition] | None:
        """Partitions with objects, from Aiven's ``<prefix><topic>-<topicId>/<partition>/`` names
        (for ``rlm metadata rebuild``); ``None`` when the backend cannot list."""
        prefix = self.config.key_prefix
        topics = self.backend.list_prefixes(prefix)
        if topics is None:
            return None
        out = []
        for name in topics:
            head, sep, tid = name[:-22], name[-23:-22], name[-22:]
            if sep != "-" or not head[:-1]:
                continue
            try:
                topic_id = KafkaUuid.from_text(tid)
            except ValueError:
                continue
            for part in self.backend.list_prefixes(f"{prefix}{name}/") or []:
                if part.isdigit():
                    out.append(TopicIdPartition(topic_id, head[:-1], int(part)))
        return sorted(out, key=lambda tp: (tp.topic, tp.partition))

    def read_segment_descriptor(self, metadata: RemoteLogSegmentMetadata) -> bytes | None:
        """The segment's metadata as embedded in its manifest (Aiven writes it there "for disaster
        recovery" since 2023-09), in the descriptor format ``rlm metadata rebuild`` reads; ``None``
        for an older manifest without it (rebuild then reports the segment unusable: Aiven's
        layout has no leader-epoch object of its own to rebuild the epochs from)."""
        keys = object_keys(self.config.key_prefix, metadata)
        try:
            with self.backend.open_object(keys.manifest) as f:
                raw = f.read()
        except RemoteResourceNotFoundError:
            return None
        manifest = parse_manifest(raw, keys.manifest)
        doc = manifest.segment_metadata
        if doc is None:
            return None
        try:
            sid = doc["remoteLogSegmentId"]
            tip = sid["topicIdPartition"]
            tp = TopicIdPartition(KafkaUuid.from_text(tip["topicId"]), tip["topicPartition"]["topic"],
                                  int(tip["topicPartition"]["partition"]))
            txn = manifest.index_slice(IndexType.TRANSACTION)
            md = RemoteLogSegmentMetadata(
                RemoteLogSegmentId(tp, KafkaUuid.from_text(sid["id"])),
                start_offset=int(doc["startOffset"]), end_offset=int(doc["endOffset"]),
                max_timestamp_ms=int(doc["maxTimestampMs"]), broker_id=int(doc["brokerId"]),
                event_timestamp_ms=int(doc["eventTimestampMs"]),
                segment_size_in_bytes=manifest.chunk_index.original_size,
                segment_leader_epochs=tuple(sorted((int(e), int(o))
                                                   for e, o in doc["segmentLeaderEpochs"].items())),
                state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                txn_index_empty=bool(doc.get("txnIdxEmpty", txn is None or txn.size == 0)))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise RemoteObjectFormatError(
                f"{keys.manifest}: remoteLogSegmentMetadata does not decode: {e}") from e
        return descriptor.encode(md)

    def verify_segment(self, metadata: RemoteLogSegmentMetadata) -> list[str]:
        """The manifest against the objects and the metadata: object sizes are what the chunk
        index and index slices add up to, and the segment the manifest embeds is this one.
        (Chunk sizes, zstd frames and GCM tags are checked by reading the whole segment.)"""
        seg = self.open_segment(metadata)
        m, keys = seg.manifest, seg.keys
        out = []
        log_size = self.backend.object_size(keys.log)
        if log_size != m.chunk_index.transformed_size:
            out.append(f"{keys.log} has {log_size} bytes, its {m.chunk_index.chunks} chunks in "
                       f"{keys.manifest} add up to {m.chunk_index.transformed_size}")
        idx_size = self.backend.object_size(keys.indexes)
        if idx_size != m.indexes_size:
            out.append(f"{keys.indexes} has {idx_size} bytes, the manifest's index slices end at "
                       f"{m.indexes_size}")
        embedded = m.segment_metadata or {}
        for field, want in (("startOffset", metadata.start_offset), ("endOffset", metadata.end_offset)):
            if field in embedded and embedded[field] != want:
                out.append(f"{keys.manifest} names {field} {embedded[field]}, the metadata {want}")
        sid = (embedded.get("remoteLogSegmentId") or {}).get("id")
        if sid is not None and sid != metadata.remote_log_segment_id.id.text:
            out.append(f"{keys.manifest} belongs to segment {sid}")
        txn = m.index_slice(IndexType.TRANSACTION)
        if (txn is None and not metadata.txn_index_empty) or (txn is not None and txn.size > 0
                                                               and metadata.txn_index_empty):
            out.append(f"{keys.manifest}: transaction index {'absent' if txn is None else 'present'}, "
                       f"the metadata says txnIdxEmpty={metadata.txn_index_empty}")
        return out

    def object_key(self, metadata: RemoteLogSegmentMetadata) -> ObjectKeys:
        """The three object keys of a segment (for ``rlm verify`` and messages)."""
        return object_keys(self.config.key_prefix, metadata)

    def describe(self, metadata: RemoteLogSegmentMetadata) -> dict[str, object]:
        return layout.describe(metadata)


def _unzstd(frame: bytes | memoryview, size: int, key: str, chunk: int) -> bytes:
    """One chunk's zstd frame, which must fill the chunk exactly: trailing bytes, a frame cut
    short or another size mean the chunk index does not fit the object."""
    try:
        out = zstandard.ZstdDecompressor().decompress(frame, max_output_size=max(size, 1),
                                                      allow_extra_data=False)
    except zstandard.ZstdError as e:
        raise RemoteObjectFormatError(
            f"{key}: chunk {chunk} is not one whole zstd frame of {size} bytes ({e}): the chunk index "
            "does not fit the object") from None
    if len(out) != size:
        raise RemoteObjectFormatError(
            f"{key}: chunk {chunk} decodes to {len(out)} bytes, the manifest says {size}")
    return out


class _DecodedStream(io.RawIOBase):
    """Original bytes ``[begin, stop)`` of a transformed segment, decoded ``group`` chunks at a time."""

    def __init__(self, rsm: AivenRemoteStorageManager, md: RemoteLogSegmentMetadata, seg: OpenedSegment,
                 begin: int, stop: int, group: int) -> None:
        super().__init__()
        self._rsm, self._md, self._seg = rsm, md, seg
        self._pos, self._stop = begin, stop
        self._step = group * seg.manifest.chunk_index.original_chunk_size
        self._buf = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if not self._buf:
            if self._pos >= self._stop:
                return 0
            # steps end on chunk boundaries, so no chunk is decoded twice
            end = min(self._stop, (self._pos // self._step + 1) * self._step)
            self._buf = memoryview(self._rsm.decoded_range(self._md, self._seg, self._pos, end))
            self._pos = end
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n
