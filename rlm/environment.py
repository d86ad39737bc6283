"""One ``rlm: error:`` line for a file-system problem: which path, what is wrong, how to fix it.

Why: a read-only or missing ``work_dir``, a file where a directory is expected or a full disk
is the operator's environment, not a bug; a Python traceback (``OSError: [Errno 30] ...``) names
neither the setting nor the fix. :mod:`rlm.cli` turns any ``OSError`` that escapes a command
into this line (exit status :data:`rlm.exit_codes.ENVIRONMENT`). Ground floor: stdlib only.
"""

from __future__ import annotations

import errno

#: errno -> what to do about it (the path is named before it)
_FIXES = {
    errno.EROFS: "the file system is read-only: point work_dir (or --work-dir) at a writable directory",
    errno.EACCES: "permission denied: give this user write access or point work_dir at a directory it owns",
    errno.EPERM: "operation not permitted: give this user write access or point work_dir elsewhere",
    errno.ENOSPC: "the disk is full: free space on it or point work_dir at another file system",
    errno.EDQUOT: "the disk quota is exhausted: free space or point work_dir at another file system",
    errno.ENOTDIR: "a file is where a directory is expected: move it away or point work_dir elsewhere",
    errno.EEXIST: "a file is where a directory is expected: move it away or point work_dir elsewhere",
    errno.ENOENT: "it does not exist: create it or fix the path in the configuration",
    errno.EIO: "the disk reported an I/O error: check the device (dmesg) or point work_dir elsewhere",
}


def describe_os_error(e: OSError) -> str:
    """``<path>: <strerror> (<ERRNO>); <fix>`` for an ``OSError`` from the local file system."""
    name = errno.errorcode.get(e.errno or 0, "")
    what = f"{e.strerror or e}" + (f" ({name})" if name else "")
    if e.filename is None:  # a socket or a pipe: no path to name, and the fixes below are for paths
        return what
    fix = _FIXES.get(e.errno or 0)
    return f"{e.filename}: {what}" + (f"; {fix}" if fix else "")
