"""One lookup for both plugin families (storage plugins and metadata managers), as fsspec's registry.

A name resolves, in this order, to:

1. a built-in name (or one of its aliases, e.g. Kafka's Java class names);
2. an entry point in the family's group (how third-party packages register);
3. an explicit ``package.module:Class`` or ``package.module.Class`` path.

The result must be a subclass of the family's base class. Every failure is a
:class:`~rlm.errors.PluginLoadError` that says what to install or fix. Ground floor: this module
imports nothing of the project but :mod:`rlm.errors`, so ``rsm_plugins`` and ``rlmm`` can both
use it (see the layer map in :mod:`rlm`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata as importlib_metadata
from typing import Any, Generic, Protocol, TypeVar, cast

import structlog

from rlm.errors import PluginLoadError

log = structlog.get_logger(__name__)


class Configurable(Protocol):
    def configure(self, config: Mapping[str, Any]) -> None: ...

T = TypeVar("T", bound=Configurable)


@dataclass(frozen=True, slots=True)
class BuiltIn:
    """A plugin shipped with this project: where it is and what to install when it cannot be imported."""

    target: str
    install_hint: str


@dataclass(frozen=True)
class PluginFamily(Generic[T]):
    """The lookup rules of one plugin family."""

    kind: str  # "storage plugin", "metadata manager": the noun every message uses
    base: type  # the family's ABC (abstract, so not type[T] for mypy)
    group: str
    builtins: Mapping[str, BuiltIn]
    aliases: Mapping[str, str] = field(default_factory=dict)
    loaded_event: str = "plugin_loaded"

    def available(self) -> dict[str, str]:
        """Every name :meth:`resolve` knows, with its target (built-ins, aliases, then entry points)."""
        names = {name: b.target for name, b in self.builtins.items()}
        names.update({alias: self.builtins[name].target for alias, name in self.aliases.items()})
        for ep in importlib_metadata.entry_points(group=self.group):
            names.setdefault(ep.name, ep.value)
        return names

    def builtin_name(self, name_or_class_path: str) -> str | None:
        """The built-in name that ``name_or_class_path`` denotes (through aliases and targets), if any."""
        name = self.aliases.get(name_or_class_path.strip(), name_or_class_path.strip())
        if name in self.builtins:
            return name
        normalized = name.replace(":", ".")
        for builtin, b in self.builtins.items():
            if b.target.replace(":", ".") == normalized:
                return builtin
        return None

    def resolve(self, name_or_class_path: str) -> type[T]:
        """The class for a built-in name, an alias, an entry point name or a class path."""
        name = self.aliases.get(name_or_class_path.strip(), name_or_class_path.strip())
        if not name:
            raise PluginLoadError(
                f"no {self.kind} named: give a built-in name ({', '.join(self.builtins)}), "
                "an entry point name or a module:Class path"
            )
        if name in self.builtins:
            b = self.builtins[name]
            return self._check(self._import_target(b.target, install_hint=b.install_hint), name)
        for ep in importlib_metadata.entry_points(group=self.group, name=name):
            dist = ep.dist.name if ep.dist is not None else None
            try:
                obj = ep.load()
            except ImportError as e:
                raise PluginLoadError(
                    f"{self.kind} {name!r} (entry point {ep.value!r}"
                    f"{f' of package {dist!r}' if dist else ''}) cannot be imported: {e}; "
                    f"install or repair that package and its dependencies"
                ) from e
            return self._check(obj, name)
        if ":" in name or "." in name:
            return self._check(self._import_target(name, install_hint=None), name)
        raise PluginLoadError(
            f"unknown {self.kind} {name!r}: not a built-in ({', '.join(self.builtins)}), no entry point "
            f"in group {self.group!r} has that name, and it is not a module:Class path"
        )

    def load(self, name_or_class_path: str, config: Mapping[str, Any] | None = None) -> T:
        """Resolve, construct with no arguments, and configure with ``config``."""
        cls = self.resolve(name_or_class_path)
        try:
            instance = cls()
        except Exception as e:
            raise PluginLoadError(
                f"{self.kind} {name_or_class_path!r}: {cls.__qualname__}() failed: {e}"
            ) from e
        instance.configure(dict(config or {}))
        log.info(self.loaded_event, name=name_or_class_path, cls=f"{cls.__module__}.{cls.__qualname__}")
        return instance

    def _import_target(self, target: str, install_hint: str | None) -> object:
        if ":" in target:
            module_name, _, attr = target.partition(":")
        else:
            module_name, _, attr = target.rpartition(".")
        if not module_name or not attr:
            raise PluginLoadError(f"{self.kind} path {target!r} is not of the form package.module:Class")
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            missing = getattr(e, "name", None) or module_name
            hint = install_hint or f"the package that provides {missing.split('.')[0]!r}"
            raise PluginLoadError(f"{self.kind} {target!r} cannot be imported ({e}); install {hint}") from e
        obj: object = module
        for part in attr.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError as e:
                raise PluginLoadError(
                    f"{self.kind} {target!r}: module {module_name!r} has no {attr!r}"
                ) from e
        return obj

    def _check(self, obj: object, name: str) -> type[T]:
        if not (isinstance(obj, type) and issubclass(obj, self.base)):
            raise PluginLoadError(
                f"{self.kind} {name!r} resolves to {obj!r}, which is not a subclass of "
                f"{self.base.__module__}.{self.base.__qualname__}"
            )
        return cast("type[T]", obj)
