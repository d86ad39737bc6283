"""Low-level helpers for :mod:`rlm.log._kernel`: raw-address views and memcpy, compiled and pure.

The compiled versions are numba intrinsics emitting plain LLVM IR (``inttoptr``, ``llvm.memcpy``),
so kernels using them stay cacheable (``cache=True``); ctypes function pointers would not be.
The pure-Python versions do the same through ctypes and slicing, for the un-jitted kernels.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any


def pure_copy(dst: Any, doff: Any, src: Any, soff: Any, n: Any) -> None:
    """``dst[doff:doff+n] = src[soff:soff+n]``."""
    dst[doff : doff + n] = src[soff : soff + n]


def pure_view(addr: Any, n: Any) -> Any:
    """The ``n`` bytes at ``addr`` (owned by a live object of the caller) as a memoryview."""
    return memoryview((ctypes.c_ubyte * int(n)).from_address(int(addr))).cast("B")


jit_copy: Any = pure_copy
jit_view: Any = pure_view

if os.environ.get("RLM_DISABLE_JIT") != "1":
    from numba import njit, types
    from numba.core import cgutils
    from numba.extending import intrinsic
    from numba.np.numpy_support import carray

    _U8_POINTER: Any = types.CPointer(types.uint8)  # type: ignore[no-untyped-call]

    @intrinsic
    def _u8_pointer(typingctx: Any, addr: Any) -> Any:
        """An ``int64`` address as a ``uint8*`` (for :func:`numba.carray`)."""
        sig = _U8_POINTER(types.int64)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return builder.inttoptr(args[0], context.get_value_type(_U8_POINTER))

        return sig, codegen

    _pointer: Any = _u8_pointer

    @njit(cache=True, nogil=True)
    def _jit_view(addr: Any, n: Any) -> Any:
        """The ``n`` bytes at ``addr`` as a ``uint8`` array (no copy, no ownership)."""
        return carray(_pointer(addr), (n,))

    @intrinsic
    def _jit_copy(typingctx: Any, dst: Any, doff: Any, src: Any, soff: Any, n: Any) -> Any:
        """``dst[doff:doff+n] = src[soff:soff+n]`` as one ``llvm.memcpy`` (no array views built)."""
        sig = types.void(dst, doff, src, soff, n)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            dst_v, doff_v, src_v, soff_v, n_v = args
            dst_a = context.make_array(signature.args[0])(context, builder, dst_v)
            src_a = context.make_array(signature.args[2])(context, builder, src_v)
            cgutils.raw_memcpy(  # type: ignore[no-untyped-call]
                builder, builder.gep(dst_a.data, [doff_v]), builder.gep(src_a.data, [soff_v]), n_v, 1
            )
            return context.get_dummy_value()

        return sig, codegen

    jit_copy = _jit_copy
    jit_view = _jit_view
