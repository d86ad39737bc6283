"""The RemoteLogManager daemon (``rlm run``): tiers a broker's segments, expires them, runs as a service.

Modules, each with one job: ``discovery`` (log-dir scan, which topics are tiered), ``leadership``
(cluster view, LSO), ``copier`` and ``expiry`` (per-partition work), ``partition_remover``,
``scheduler`` (per-partition tasks on a thread pool), ``service`` (lifecycle), ``metrics``/``http``,
``status`` (state file for ``rlm status``), ``instance_lock`` (one ``rlm run`` per work dir and log
dir), ``workdir`` (atomic work-dir writes, a full disk as a typed error), ``clock`` (the wall clock
and its test seam), ``crash`` (the kill -9 test hook).
"""
