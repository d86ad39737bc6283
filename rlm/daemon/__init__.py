"""The RemoteLogManager daemon (``rlm run``): tiers a broker's segments, expires them, runs as a service.

Modules, each with one job: ``discovery`` (log-dir scan, which topics are tiered), ``leadership``
(cluster view, LSO), ``copier`` and ``expiry`` (per-partition work), ``partition_remover``,
``scheduler`` (per-partition tasks on a thread pool), ``service`` (lifecycle), ``metrics``/``http``,
``status`` (state file for ``rlm status``).
"""
