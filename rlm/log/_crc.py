"""CRC-32C over any buffer without copying it, and raw addresses of buffers for the kernels.

``google_crc32c.value`` accepts only ``bytes`` (its ``y#`` argument rejects memoryviews and
mmaps), which would mean copying every batch of a mapped segment. The same package ships the
C library it wraps; we call its ``crc32c_value(ptr, len)`` through ctypes, which numba kernels
can call directly too. When the library cannot be found we fall back to copying.
"""

from __future__ import annotations

import ctypes
import sys
from typing import TYPE_CHECKING, Any

import google_crc32c

if TYPE_CHECKING:
    import numpy as np


def _load() -> Any:
    try:
        from google_crc32c import _crc32c

        lib = ctypes.CDLL(_crc32c.__file__)
        fn = lib.crc32c_value
    except (ImportError, OSError, AttributeError):
        return None
    fn.restype = ctypes.c_uint32
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return fn


#: ``uint32 crc32c_value(const uint8_t *data, size_t n)`` or ``None`` (callable from numba).
CRC32C_VALUE: Any = _load()


def _bytes_data_offset() -> int | None:
    """Offset of a ``bytes`` object's data from its ``id()`` in this interpreter, or ``None``."""
    probe = b"rlm-probe"
    offset = sys.getsizeof(b"") - 1
    expected = ctypes.cast(ctypes.c_char_p(probe), ctypes.c_void_p).value
    return offset if expected == id(probe) + offset else None


_BYTES_OFFSET = _bytes_data_offset()


def bytes_address(data: bytes) -> int:
    """Address of the data of a ``bytes`` object (valid while the object lives).

    Uses CPython's object layout when this interpreter has it (checked at import, ~0.3 µs);
    otherwise asks ctypes (~2 µs). Called once per decompressed batch.
    """
    if _BYTES_OFFSET is not None:
        return id(data) + _BYTES_OFFSET
    return int(ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value or 0)


def crc32c(data: bytes | bytearray | memoryview | np.ndarray[Any, Any]) -> int:
    """CRC-32C (Castagnoli) of ``data``."""
    if isinstance(data, bytes):
        return int(google_crc32c.value(data))
    if CRC32C_VALUE is None:
        return int(google_crc32c.value(bytes(data)))
    import numpy as np  # only for other buffers (their address without a copy): `rlm fetch` need not load it

    arr = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
    if arr.size == 0:
        return 0
    return int(CRC32C_VALUE(arr.ctypes.data, arr.size))
