"""kafka-rlm-sidecar: Kafka's tiered storage (KIP-405) as a Python sidecar.

The ``rlm`` package is both the ground floor and the roof of the project; the plugin packages
sit between. Layers import only downward (highest first; ``|`` = siblings that never import
each other). The map is a contract in ``pyproject.toml``, checked by import-linter in
``make lint`` and ``tests/test_layers.py``::

    rlm.cli                  the ``rlm`` command: parses, dispatches, maps errors to exit statuses
    rlm.commands             one module per subcommand: argument parsing and output
    rlm.tables | rlm.recovery  the table writer (Iceberg, reads through ``fetcher``'s public surface)
                             | disaster recovery's library (rebuild, restore, adoption)
    rlm.daemon | fetcher     the writer (tiering daemon) and the read side: never import each other
    rlm.plugin_setup         builds the storage plugin and metadata manager from the configuration
    rsm_plugins | rlmm | rlm.compaction
                             storage plugins and metadata managers, each behind its ``api`` module
                             | remote compaction's engine (Kafka's log-cleaner semantics, pure library)
    rlm.log                  Kafka's on-disk formats (its ``_*`` modules are private)
    rlm.config : rlm.config_errors : rlm.plugin_registry : rlm.exit_codes : rlm.environment : rlm.lineage
    : rlm.logging_setup : rlm.lazy_names
    rlm.secrets : rlm.types
    rlm.errors

Where the shared configuration sits, and why: :mod:`rlm.config` (the pydantic models of
``rlm.yaml``) is on the ground floor because it is plain data that the daemon, the read side and
the commands all read, and it imports nothing above :mod:`rlm.errors` and :mod:`rlm.secrets`.
Turning it into live objects is :mod:`rlm.plugin_setup`, one floor above the plugin packages and
below both the daemon and ``fetcher``, so that the writer and the reader get the same plugins
with the same defaults. Built-in plugins import the project's types and errors through their
package's ``api`` module, exactly as a third-party plugin does.
"""
