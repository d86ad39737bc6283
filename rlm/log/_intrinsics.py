"""Low-level helpers for :mod:`rlm.log._kernel`: raw-address views, memcpy and C calls, compiled and pure.

The compiled versions are numba intrinsics emitting plain LLVM IR (``inttoptr``, ``llvm.memcpy``,
an indirect ``call``), so kernels using them stay cacheable (``cache=True``): C functions are
passed in as *addresses at run time*, whereas ctypes function objects would be baked into the
compiled code and defeat the cache. The pure-Python versions do the same through ctypes and
slicing, for the un-jitted kernels.
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


_ZSTD_TYPE = ctypes.CFUNCTYPE(
    ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t
)
_CRC_TYPE = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t)
_LZ4_TYPE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int)
_GZIP_TYPE = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_void_p,
    ctypes.c_void_p,
)
_PURE_FUNCTIONS: dict[tuple[int, Any], Any] = {}


def _function(addr: Any, kind: Any) -> Any:
    key = (int(addr), kind)
    fn = _PURE_FUNCTIONS.get(key)
    if fn is None:
        fn = _PURE_FUNCTIONS[key] = kind(int(addr))
    return fn


def pure_zstd_call(fn: Any, dctx: Any, dst: Any, capacity: Any, src: Any, n: Any) -> Any:
    """``ZSTD_decompressDCtx`` at address ``fn``; the ``size_t`` result as a signed int64
    (libzstd's error codes are the small negative values)."""
    import numpy as np

    r = int(_function(fn, _ZSTD_TYPE)(int(dctx), int(dst), int(capacity), int(src), int(n)))
    return np.int64(r - (1 << 64) if r >= 1 << 63 else r)


def pure_lz4_call(fn: Any, src: Any, dst: Any, n: Any, capacity: Any) -> Any:
    """``int LZ4_decompress_safe(src, dst, n, capacity)`` at address ``fn`` (bytes written, or < 0)."""
    import numpy as np

    return np.int64(_function(fn, _LZ4_TYPE)(int(src), int(dst), int(n), int(capacity)))


def pure_gzip_call(fn: Any, decompressor: Any, src: Any, n: Any, dst: Any, capacity: Any, sizes: Any) -> Any:
    """``libdeflate_gzip_decompress_ex(decompressor, src, n, dst, capacity, sizes, sizes + 8)`` at
    address ``fn``: the ``enum libdeflate_result`` (0 = success); the bytes read and written are
    stored at ``sizes`` (two ``size_t``)."""
    import numpy as np

    call = _function(fn, _GZIP_TYPE)
    at = int(sizes)
    return np.int64(call(int(decompressor), int(src), int(n), int(dst), int(capacity), at, at + 8))


def pure_crc_call(fn: Any, addr: Any, n: Any) -> Any:
    """``uint32 crc32c_value(const uint8_t *, size_t)`` at address ``fn``."""
    import numpy as np

    return np.int64(_function(fn, _CRC_TYPE)(int(addr), int(n)))


jit_copy: Any = pure_copy
jit_view: Any = pure_view
jit_zstd_call: Any = pure_zstd_call
jit_crc_call: Any = pure_crc_call
jit_lz4_call: Any = pure_lz4_call
jit_gzip_call: Any = pure_gzip_call

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

    def _indirect_call(builder: Any, addr: Any, ret: Any, args: list[Any]) -> Any:
        """``((ret (*)(args...)) addr)(args...)`` in LLVM IR."""
        from llvmlite import ir

        fnty = ir.FunctionType(ret, [a.type for a in args])
        return builder.call(builder.inttoptr(addr, fnty.as_pointer()), args)

    @intrinsic
    def _jit_zstd_call(typingctx: Any, fn: Any, dctx: Any, dst: Any, capacity: Any, src: Any, n: Any) -> Any:
        """``ZSTD_decompressDCtx(dctx, dst, capacity, src, n)`` called at address ``fn`` (all int64);
        the ``size_t`` result comes back as int64, errors being small negative values."""
        sig = types.int64(types.int64, types.int64, types.int64, types.int64, types.int64, types.int64)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            from llvmlite import ir

            i64, ptr = ir.IntType(64), ir.IntType(8).as_pointer()
            fn_v, dctx_v, dst_v, cap_v, src_v, n_v = args
            call_args = [
                builder.inttoptr(dctx_v, ptr),
                builder.inttoptr(dst_v, ptr),
                cap_v,
                builder.inttoptr(src_v, ptr),
                n_v,
            ]
            return _indirect_call(builder, fn_v, i64, call_args)

        return sig, codegen

    @intrinsic
    def _jit_crc_call(typingctx: Any, fn: Any, addr: Any, n: Any) -> Any:
        """``crc32c_value(addr, n)`` called at address ``fn``, zero-extended to int64."""
        sig = types.int64(types.int64, types.int64, types.int64)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            from llvmlite import ir

            fn_v, addr_v, n_v = args
            data = builder.inttoptr(addr_v, ir.IntType(8).as_pointer())
            crc = _indirect_call(builder, fn_v, ir.IntType(32), [data, n_v])
            return builder.zext(crc, ir.IntType(64))

        return sig, codegen

    @intrinsic
    def _jit_lz4_call(typingctx: Any, fn: Any, src: Any, dst: Any, n: Any, capacity: Any) -> Any:
        """``LZ4_decompress_safe(src, dst, n, capacity)`` called at address ``fn`` (all int64;
        ``n`` and ``capacity`` passed as C ``int``); the ``int`` result sign-extended to int64."""
        sig = types.int64(types.int64, types.int64, types.int64, types.int64, types.int64)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            from llvmlite import ir

            i32, ptr = ir.IntType(32), ir.IntType(8).as_pointer()
            fn_v, src_v, dst_v, n_v, cap_v = args
            call_args = [
                builder.inttoptr(src_v, ptr),
                builder.inttoptr(dst_v, ptr),
                builder.trunc(n_v, i32),
                builder.trunc(cap_v, i32),
            ]
            return builder.sext(_indirect_call(builder, fn_v, i32, call_args), ir.IntType(64))

        return sig, codegen

    @intrinsic
    def _jit_gzip_call(
        typingctx: Any, fn: Any, decompressor: Any, src: Any, n: Any, dst: Any, capacity: Any, sizes: Any
    ) -> Any:
        """``libdeflate_gzip_decompress_ex(decompressor, src, n, dst, capacity, sizes, sizes + 8)``
        called at address ``fn`` (all int64); the ``int`` result sign-extended to int64."""
        sig = types.int64(*([types.int64] * 7))

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            from llvmlite import ir

            i64, ptr = ir.IntType(64), ir.IntType(8).as_pointer()
            fn_v, d_v, src_v, n_v, dst_v, cap_v, sizes_v = args
            call_args = [
                builder.inttoptr(d_v, ptr),
                builder.inttoptr(src_v, ptr),
                n_v,
                builder.inttoptr(dst_v, ptr),
                cap_v,
                builder.inttoptr(sizes_v, ptr),
                builder.inttoptr(builder.add(sizes_v, ir.Constant(i64, 8)), ptr),
            ]
            return builder.sext(_indirect_call(builder, fn_v, ir.IntType(32), call_args), i64)

        return sig, codegen

    jit_copy = _jit_copy
    jit_gzip_call = _jit_gzip_call
    jit_lz4_call = _jit_lz4_call
    jit_view = _jit_view
    jit_zstd_call = _jit_zstd_call
    jit_crc_call = _jit_crc_call
