"""Find, import and configure a storage plugin by name.

Lookup order (one function, as fsspec's registry does):

1. a built-in name: ``local``, ``s3``, ``fsspec`` (and Kafka's ``LocalTieredStorage`` class name,
   an alias of ``local``);
2. an entry point in group ``rsm_plugins`` (how third-party packages register);
3. an explicit ``package.module:Class`` or ``package.module.Class`` path, like Kafka's
   ``remote.log.storage.manager.class.name``.

A plugin whose module cannot be imported raises :class:`PluginLoadError` saying what to install.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from typing import Any

import structlog

from rlm.errors import PluginLoadError

from .api import RemoteStorageManager

log = structlog.get_logger(__name__)

ENTRY_POINT_GROUP = "rsm_plugins"


@dataclass(frozen=True, slots=True)
class BuiltIn:
    target: str
    install_hint: str


BUILTINS: dict[str, BuiltIn] = {
    "local": BuiltIn("rsm_plugins.local:LocalRemoteStorageManager", "kafka-rlm-sidecar"),
    "s3": BuiltIn("rsm_plugins.s3:S3RemoteStorageManager", "boto3 (pip install 'kafka-rlm-sidecar[s3]')"),
    "fsspec": BuiltIn(
        "rsm_plugins.fsspec_rsm:FsspecRemoteStorageManager",
        "fsspec plus the filesystem's own package, e.g. s3fs, gcsfs, adlfs "
        "(pip install 'kafka-rlm-sidecar[hdfs]' for HDFS)",
    ),
}
ALIASES: dict[str, str] = {
    "org.apache.kafka.server.log.remote.storage.LocalTieredStorage": "local",
}


def available() -> dict[str, str]:
    """Every plugin name that :func:`load` knows, with its target (built-ins, then entry points)."""
    names = {name: b.target for name, b in BUILTINS.items()}
    for ep in importlib_metadata.entry_points(group=ENTRY_POINT_GROUP):
        names.setdefault(ep.name, ep.value)
    return names


def resolve(name_or_class_path: str) -> type[RemoteStorageManager]:
    """The plugin class for a built-in name, an entry point name or a class path."""
    name = ALIASES.get(name_or_class_path.strip(), name_or_class_path.strip())
    if not name:
        raise PluginLoadError(
            "no storage plugin named: give a built-in name "
            f"({', '.join(BUILTINS)}), an entry point name or a module:Class path"
        )
    if name in BUILTINS:
        b = BUILTINS[name]
        return _check(_import_target(b.target, install_hint=b.install_hint), name)
    for ep in importlib_metadata.entry_points(group=ENTRY_POINT_GROUP, name=name):
        dist = ep.dist.name if ep.dist is not None else None
        try:
            obj = ep.load()
        except ImportError as e:
            raise PluginLoadError(
                f"storage plugin {name!r} (entry point {ep.value!r}"
                f"{f' of package {dist!r}' if dist else ''}) cannot be imported: {e}; "
                f"install or repair that package and its dependencies"
            ) from e
        return _check(obj, name)
    if ":" in name or "." in name:
        return _check(_import_target(name, install_hint=None), name)
    raise PluginLoadError(
        f"unknown storage plugin {name!r}: not a built-in ({', '.join(BUILTINS)}), no entry point "
        f"in group {ENTRY_POINT_GROUP!r} has that name, and it is not a module:Class path"
    )


def load(name_or_class_path: str, config: Mapping[str, Any] | None = None) -> RemoteStorageManager:
    """Create and configure a plugin. ``config`` is the plugin's block (Kafka's ``rsm.config.*``
    with the prefix stripped)."""
    cls = resolve(name_or_class_path)
    try:
        rsm = cls()
    except Exception as e:
        raise PluginLoadError(
            f"storage plugin {name_or_class_path!r}: {cls.__qualname__}() failed: {e}"
        ) from e
    rsm.configure(dict(config or {}))
    log.info("rsm_loaded", plugin=name_or_class_path, cls=f"{cls.__module__}.{cls.__qualname__}")
    return rsm


def _import_target(target: str, install_hint: str | None) -> object:
    if ":" in target:
        module_name, _, attr = target.partition(":")
    else:
        module_name, _, attr = target.rpartition(".")
    if not module_name or not attr:
        raise PluginLoadError(f"storage plugin path {target!r} is not of the form package.module:Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        missing = getattr(e, "name", None) or module_name
        hint = install_hint or f"the package that provides {missing.split('.')[0]!r}"
        raise PluginLoadError(f"storage plugin {target!r} cannot be imported ({e}); install {hint}") from e
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            raise PluginLoadError(f"storage plugin {target!r}: module {module_name!r} has no {attr!r}") from e
    return obj


def _check(obj: object, name: str) -> type[RemoteStorageManager]:
    if not (isinstance(obj, type) and issubclass(obj, RemoteStorageManager)):
        raise PluginLoadError(
            f"storage plugin {name!r} resolves to {obj!r}, which is not a subclass of "
            f"rsm_plugins.api.RemoteStorageManager"
        )
    return obj
